"""Each ``benchmarks/bench_*.py`` run in smoke mode (the same code path at the smallest size,
with a tiny BERT), as ``make bench`` would run it, writing only under the folder it is given.

test_benchmarks.py checks what a run recorded. The runs are started by the session's background
builder (tiny_run.py) once it has built the tiny runs, on the core the tests leave free, or by
the test's fixture where there is no builder. A smoke is a fork of the job zygote that the
builder's runs use (drpipe.forkserver: torch, transformers and drpipe already imported, ~3 s
of CPU a benchmark would spend importing them), or a process of its own where that is off
(DRPIPE_TEST_ZYGOTE=0).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from workflow_util import REPO, RUNS_ZYGOTE, mirror_dir, tool_env

from drpipe import forkserver

BENCHMARKS = sorted((REPO / "benchmarks").glob("bench_*.py"))
RECORD = "record.json"
RESULT = "result.json"
TIMEOUT = 600


def run_name(bench: Path) -> str:
    """The builder's name for ``bench``'s smoke run (tiny_run.ORDER)."""
    return f"smoke-{bench.stem}"


def result_lines(path: Path) -> list[str]:
    """The benchmark's ``RESULT_LINES`` patterns, read from its source without importing it."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "RESULT_LINES" for t in node.targets
        ):
            return list(ast.literal_eval(node.value))
    return []


# Runs the benchmark script (argv[1], its arguments after it) on one core: the last, or the
# one SMOKE_CORE indexes (the builder runs two smokes at once, one per core, once the tests
# wait on nothing else). The benchmarks size their threads by the cores they may use
# (drpipe.training.distributed.default_threads, or torch's default), and two threads beside the
# tests' MiniLM training made that test 8x slower; the affinity holds for the benchmark's own
# children too. As a fork of the job zygote (run_smoke), torch and FAISS were loaded before the
# affinity was set, so their threads are set to it as a new process's would be.
# Its CPU time (its own and its children's) goes to SMOKE_CPU_FILE at exit: with two smokes
# at once, the builder's RUSAGE_CHILDREN would mix them.
ONE_CORE = Path(__file__).with_name("smoke_one_core.py")


def _text(out: bytes | str | None) -> str:
    """A timed-out run's output (TimeoutExpired keeps it as bytes even where text was asked)."""
    return out.decode(errors="replace") if isinstance(out, bytes) else out or ""


def run_smoke(bench: Path, work: Path, core: int = -1) -> Path:
    """``bench --smoke`` run in ``work`` (created; its scratch folders land there too) on the
    core ``core`` indexes, with what it did recorded in ``work/record.json``: exit status,
    output, wall and CPU seconds (None where the run died before writing them; a fork's from
    the fork on, its imports not included)."""
    import drpipe

    work.mkdir()
    # The benchmark imports the same drpipe as the tests.
    package_root = str(Path(drpipe.__file__).resolve().parents[1])
    env = {
        **os.environ,
        "DATA_MIRROR": str(mirror_dir()),
        "PYTHONPATH": os.pathsep.join(
            [package_root, *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
        "TMPDIR": str(work),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "SMOKE_CORE": str(core),
        "SMOKE_CPU_FILE": str(work / "cpu-seconds"),
    }
    argv = [str(ONE_CORE), str(bench), "--smoke", "--out", str(work / RESULT)]
    t0 = time.perf_counter()
    # A fork of the job zygote that the builder's runs used (torch and drpipe imported), where
    # it is on; `python` itself where it is off or cannot be reached.
    with forkserver.jobs_forked(tool_env(), keep=RUNS_ZYGOTE) as zygote:
        if "DRPIPE_ZYGOTE" in zygote:
            cmd = [sys.executable, "-I", str(Path(forkserver.__file__)), "python", *argv]
            env |= {"DRPIPE_ZYGOTE": zygote["DRPIPE_ZYGOTE"], "DRPIPE_REAL": sys.executable}
        else:
            cmd = [sys.executable, *argv]
    try:
        proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True,
                              timeout=TIMEOUT)  # fmt: skip
        returncode, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        returncode, stdout = None, _text(exc.stdout)
        stderr = f"timed out after {TIMEOUT} s\n{_text(exc.stderr)}"
    seconds = time.perf_counter() - t0
    cpu_file = work / "cpu-seconds"
    record = {
        "bench": str(bench), "returncode": returncode, "stdout": stdout, "stderr": stderr,
        "seconds": seconds,
        "cpu_seconds": float(cpu_file.read_text()) if cpu_file.is_file() else None,
    }  # fmt: skip
    tmp = work / f"{RECORD}.tmp"
    tmp.write_text(json.dumps(record))
    tmp.rename(work / RECORD)
    return work
