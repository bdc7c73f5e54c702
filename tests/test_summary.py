"""drpipe.summary (the page `make rehearse` ends with), on report files the test writes in the
layout the workflow writes them (field names as in runs/, bm25/hybrid/ of a rehearsal)."""

from __future__ import annotations

import json
from pathlib import Path

from drpipe.summary import search_depths


def _report(path: Path, **fields) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(fields))


def test_search_depths_read_each_kind_of_run(tmp_path: Path) -> None:
    results = tmp_path / "results"
    _report(results / "runs/bm25/none/nq-test.report.json", hits=100, k1=0.9)
    _report(results / "runs/bm25/none/nq-dev.report.json", hits=100)
    _report(results / "runs/dpr/nq/nq-test.report.json", search_depth=100, top_k=100)
    _report(results / "runs/dcsr/nq/nq-test.report.json", search_depth=383, top_k=100)
    _report(results / "runs/dpr+bm25/nq/nq-test.report.json", dense_depth=2000, top_k=100)
    _report(results / "bm25/hybrid/nq-test.report.json", hits=2000)
    _report(results / "runs/xmoco/nq/nq-test.report.json", seconds=1.0)  # no depth recorded
    depths = {k: dict(v) for k, v in search_depths(results).items()}
    assert depths == {
        "bm25": {"100": 2},
        "dense": {"100": 1, "383": 1, "unknown": 1},
        "hybrid (dense)": {"2000": 1},
        "hybrid (BM25)": {"2000": 1},
    }
