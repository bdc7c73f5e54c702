"""Every benchmark still runs: each ``benchmarks/bench_*.py`` in smoke mode (the same code path
at the smallest size, with a tiny BERT), as ``make bench`` would run it, writing only under the
test session's temporary folder (bench_smoke.py runs them, in the session's background builder
when there is one). Found by glob, so a new benchmark is covered with no edit here; it must take
``--smoke`` and ``--out`` and declare ``RESULT_LINES`` (see ``benchmarks/smoke.py``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from bench_smoke import BENCHMARKS, RECORD, RESULT, result_lines


def test_benchmarks_found() -> None:
    # An empty glob would leave the parametrised test below with nothing to run.
    assert BENCHMARKS, "no bench_*.py in benchmarks/"


@pytest.mark.parametrize("bench_smoke", BENCHMARKS, ids=lambda p: p.stem, indirect=True)
def test_benchmark_smoke(bench_smoke: Path) -> None:
    record = json.loads((bench_smoke / RECORD).read_text())
    bench = Path(record["bench"])
    patterns = result_lines(bench)
    assert patterns, f"{bench.name} declares no RESULT_LINES"
    cpu = record["cpu_seconds"]
    print(f"{bench.name} --smoke: {record['seconds']:.1f} s wall, "
          f"{'?' if cpu is None else f'{cpu:.1f}'} s CPU")  # fmt: skip
    assert record["returncode"] == 0, f"{bench.name} failed:\n{record['stderr'][-4000:]}"
    stdout = record["stdout"]
    missing = [p for p in patterns if not re.search(p, stdout)]
    assert not missing, f"{bench.name} did not print {missing}; stdout:\n{stdout[-4000:]}"
    result = json.loads((bench_smoke / RESULT).read_text())
    assert isinstance(result, dict) and result
