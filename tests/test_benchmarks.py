"""Every benchmark still runs: each ``benchmarks/bench_*.py`` in smoke mode (the same code path
at the smallest size, with a tiny BERT), as ``make bench`` would run it, writing only under
``tmp_path``. Found by glob, so a new benchmark is covered with no edit here; it must take
``--smoke`` and ``--out`` and declare ``RESULT_LINES`` (see ``benchmarks/smoke.py``)."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import drpipe

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = sorted((REPO / "benchmarks").glob("bench_*.py"))


def result_lines(path: Path) -> list[str]:
    """The benchmark's ``RESULT_LINES`` patterns, read from its source without importing it."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "RESULT_LINES" for t in node.targets
        ):
            return list(ast.literal_eval(node.value))
    return []


def test_benchmarks_found() -> None:
    # An empty glob would leave the parametrised test below with nothing to run.
    assert BENCHMARKS, f"no bench_*.py in {REPO / 'benchmarks'}"


# Two smokes at a time: each is one single-threaded process that spends much of its time
# starting up (imports, model loads), so a pair finishes in little more than the time of one.
PARALLEL = 2


@pytest.fixture(scope="module")
def smoke_runs(tmp_path_factory, data_mirror: Path):
    """Every benchmark's smoke run, started at once, ``PARALLEL`` at a time: ``{path: future
    of (completed process, seconds, result file)}``."""
    # The benchmark imports the same drpipe as this test process.
    package_root = str(Path(drpipe.__file__).resolve().parents[1])

    def run(bench: Path) -> tuple[subprocess.CompletedProcess, float, Path]:
        tmp = tmp_path_factory.mktemp(bench.stem)
        out = tmp / "result.json"
        env = {
            **os.environ,
            "DATA_MIRROR": str(data_mirror),
            "PYTHONPATH": os.pathsep.join(
                [package_root, *filter(None, [os.environ.get("PYTHONPATH")])]
            ),
            "TMPDIR": str(tmp),  # the benchmarks' scratch folders land here too
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, str(bench), "--smoke", "--out", str(out)],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        return proc, time.perf_counter() - t0, out

    with ThreadPoolExecutor(PARALLEL) as pool:
        futures = {bench: pool.submit(run, bench) for bench in BENCHMARKS}
        yield futures
        for f in futures.values():  # a test that did not run (-k) leaves its future
            f.cancel()


@pytest.mark.parametrize("bench", BENCHMARKS, ids=lambda p: p.stem)
def test_benchmark_smoke(bench: Path, smoke_runs) -> None:
    patterns = result_lines(bench)
    assert patterns, f"{bench.name} declares no RESULT_LINES"
    proc, seconds, out = smoke_runs[bench].result()
    print(f"{bench.name} --smoke: {seconds:.1f} s wall ({PARALLEL} smokes at a time)")
    assert proc.returncode == 0, f"{bench.name} failed:\n{proc.stderr[-4000:]}"
    missing = [p for p in patterns if not re.search(p, proc.stdout)]
    assert not missing, f"{bench.name} did not print {missing}; stdout:\n{proc.stdout[-4000:]}"
    result = json.loads(out.read_text())
    assert isinstance(result, dict) and result
