"""Every benchmark still runs: each ``benchmarks/bench_*.py`` in smoke mode (the same code path
at the smallest size, with a tiny BERT), as ``make bench`` would run it, writing only under
``tmp_path``. Found by glob, so a new benchmark is covered with no edit here; it must take
``--smoke`` and ``--out`` and declare ``RESULT_LINES`` (see ``benchmarks/smoke.py``)."""

from __future__ import annotations

import ast
import json
import os
import re
import resource
import subprocess
import sys
import time
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


@pytest.mark.parametrize("bench", BENCHMARKS, ids=lambda p: p.stem)
def test_benchmark_smoke(bench: Path, tmp_path: Path, data_mirror: Path) -> None:
    patterns = result_lines(bench)
    assert patterns, f"{bench.name} declares no RESULT_LINES"
    out = tmp_path / "result.json"
    # The benchmark imports the same drpipe as this test process.
    package_root = str(Path(drpipe.__file__).resolve().parents[1])
    env = {
        **os.environ,
        "DATA_MIRROR": str(data_mirror),
        "PYTHONPATH": os.pathsep.join(
            [package_root, *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
        "TMPDIR": str(tmp_path),  # the benchmarks' scratch folders land here too
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    t0, cpu0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(
        [sys.executable, str(bench), "--smoke", "--out", str(out)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    seconds, cpu = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = cpu.ru_utime + cpu.ru_stime - cpu0.ru_utime - cpu0.ru_stime
    print(f"{bench.name} --smoke: {seconds:.1f} s wall, {cpu_s:.1f} s CPU")
    assert proc.returncode == 0, f"{bench.name} failed:\n{proc.stderr[-4000:]}"
    missing = [p for p in patterns if not re.search(p, proc.stdout)]
    assert not missing, f"{bench.name} did not print {missing}; stdout:\n{proc.stdout[-4000:]}"
    result = json.loads(out.read_text())
    assert isinstance(result, dict) and result
