"""A Python process with Snakemake's and torch's modules already imported that forks one child
per `snakemake` command of the tests (workflow_util.snakemake starts it, one per pytest
process).

Parsing the Snakefile imports the method registry, hence torch: about 2 s of CPU before each
dry run does anything, and the tests run some hundred of them. A forked child skips those
imports and is otherwise a fresh `snakemake` process: its own arguments, environment, working
directory and output files. The zygote also imports what a dry run of this repository's
Snakefile imports (drpipe's planning modules, the libraries they and Snakemake's plugins pull
in), collects Snakemake's plugins once, and freezes what it holds out of the garbage collector's
reach (a child's collections would otherwise walk, and copy, every inherited object): a dry run
of the tiny DAG took a median 1.72 s of CPU as a fork of the bare zygote and 1.06 s as a fork
of this one. Only requests with the zygote's own PYTHONPATH come here (workflow_util), so the
drpipe a child finds is the one it would import itself; a module named in PRELOAD that does not
import is left to the child.

With ``--bare`` it serves the requests of other checkouts (another PYTHONPATH: the plug-in and
guide tests' copies): it preloads none of drpipe, and each child drops the drpipe modules the
zygote holds and puts the request's PYTHONPATH where a new process has it, so the Snakefile
imports that checkout's drpipe. Snakemake's and torch's imports are still spared.

Protocol, one JSON request per line on stdin: {"argv", "env", "cwd", "stdout", "stderr"}; the
zygote answers the child's pid on one line, then its exit status and CPU seconds on the next.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from drpipe.forkserver import become

# What the `snakemake` console script has first on its path: its own folder, not tests/.
sys.path[0] = str(Path(sys.executable).parent)

import gc  # noqa: E402
import importlib  # noqa: E402

import snakemake.cli  # noqa: E402
import torch  # noqa: E402, F401  (imported by the method registry when a Snakefile is parsed)

# What a dry run of the tiny DAG imports beyond snakemake.cli and torch (sys.modules before and
# after one), by the modules that pull the rest in.
PRELOAD = (
    "snakemake.api",
    "snakemake.workflow",
    "snakemake.dag",
    "snakemake.scheduling.job_scheduler",
    "drpipe.plan",
    "drpipe.papers",
    "drpipe.methods",
    "drpipe.runs",
    "drpipe.tables",
    "drpipe.claims",
    "drpipe.audit.cli",
    "drpipe.cluster_check",
    "drpipe.training.cli",
    "drpipe.qa.mining",
    "drpipe.corpus.sentences",
    "ir_measures",
    "requests",
    "docutils.core",
    "jinja2",
    "smart_open",
    "PIL.Image",
    "pygments",
    "pyarrow.parquet",
    "yte",
    "jsonschema",
)


# Serving other checkouts (module docstring).
BARE = sys.argv[1:] == ["--bare"]
# This process's own PYTHONPATH entries (a child of the bare zygote swaps them for its request's).
_OWN_PATH = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]


def _preload() -> None:
    for name in PRELOAD:
        if BARE and name.split(".")[0] == "drpipe":
            continue
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - the child imports it, and reports what fails
            print(f"snakemake zygote: not preloaded: {name}: {exc}", file=sys.stderr)
    try:
        # Snakemake's plugin registries are singletons, filled when the parser is built.
        snakemake.cli.get_argument_parser()
    except Exception as exc:  # noqa: BLE001 - the child builds its own, and reports it
        print(f"snakemake zygote: plugins not collected: {exc}", file=sys.stderr)
    gc.freeze()


def _snakemake(request: dict) -> None:
    """`snakemake ARGV`, its output to the request's files."""
    for fd, path, mode in ((0, os.devnull, os.O_RDONLY),
                           (1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                           (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):  # fmt: skip
        os.dup2(os.open(path, mode, 0o644), fd)
    if BARE:
        _take_pythonpath(request["env"].get("PYTHONPATH", ""))
    sys.argv = list(request["argv"])
    snakemake.cli.main(sys.argv[1:])


def _take_pythonpath(value: str) -> None:
    """sys.path as a new process with PYTHONPATH ``value`` has it (its entries after the
    script's folder), and no drpipe module loaded: the next import finds that checkout's."""
    for entry in _OWN_PATH:
        if entry in sys.path[1:]:
            sys.path.remove(entry)
    sys.path[1:1] = [p for p in value.split(os.pathsep) if p]
    for name in [m for m in sys.modules if m == "drpipe" or m.startswith("drpipe.")]:
        del sys.modules[name]
    importlib.invalidate_caches()


def main() -> None:
    _preload()
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            become(request, lambda: _snakemake(request))  # noqa: B023 - runs now
        print(pid, flush=True)
        _, status, usage = os.wait4(pid, 0)
        cpu = usage.ru_utime + usage.ru_stime  # the child's and its waited children's
        print(os.waitstatus_to_exitcode(status), f"{cpu:.3f}", flush=True)


if __name__ == "__main__":
    main()
