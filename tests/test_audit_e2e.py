"""Two real runs of the tiny slice with the same config: byte-identical results, and the audit
of one against the other (lineage to the fetched inputs, staleness, claims).

The runs cover BM25, the initial encoder, DPR and its BM25 hybrid (Table 2) and DPR Figure 1;
other methods are left out of this pair to keep it to two tiny runs (their determinism is
audited the same way: `drpipe audit RUN_A --against RUN_B`).
"""

from __future__ import annotations

import hashlib
import json
import shlex
from pathlib import Path

import pandas as pd
import pytest
from tiny_run import DPR_OVERLAY as OVERLAY
from tiny_run import overlay_args

from drpipe.audit.lineage import Lineage
from drpipe.audit.staleness import staleness

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tiny_audited) -> tuple[Path, Path]:
    """Two working directories with the same config run to the same targets, the first audited
    against the second (the session's, shared with the report tests; tiny_run.py)."""
    return tiny_audited


def _audit(work: Path) -> dict:
    return json.loads((work / "results/audit/audit.json").read_text())


def _figure1(path: str) -> bool:
    return path.startswith("results/dpr/figure1") or "/dpr.f1_" in path


def test_same_config_twice_gives_byte_identical_tables_and_runs(runs):
    a, b = runs
    cmp = _audit(a)["against"]
    status = {f["path"]: f for f in cmp["files"]}
    both = [p for p in status if not _figure1(p)]
    assert status["results/table2.csv"]["status"] == "identical"
    results = [p for p in both if p.startswith(("results/runs/", "results/metrics/"))]
    results = [p for p in results if p.endswith((".parquet", ".trec", ".npy"))]
    assert len([p for p in results if p.startswith("results/runs/")]) >= 4
    for path in results:  # run files and per-question ranks, byte for byte
        assert status[path]["status"] == "identical", status[path]
    # Models, vectors and indexes too; reports and metrics JSON differ only in recorded timings.
    for prefix in ("results/models/", "results/embeddings/", "results/index/"):
        files = [p for p in both if p.startswith(prefix) and not p.endswith(".json")]
        assert files and all(status[p]["status"] == "identical" for p in files), prefix
    for path, entry in status.items():
        if entry["status"] == "equivalent":
            assert path.endswith(".json"), entry
        elif entry["status"] == "expected_difference":
            assert "/bm25/index/" in path and "Lucene" in entry["detail"], entry
        elif entry["status"] == "only_in_a":
            # claims.csv: written by this audit of A; Figure 1: built in A only (RERUN_TARGETS)
            assert path == "results/claims.csv" or _figure1(path), entry
        else:
            assert entry["status"] == "identical", entry
    table = cmp["tables"]["results/table2.csv"]
    assert table["status_counts"] == {"identical": table["cells"]}
    assert cmp["divergence"] == {}
    print("determinism:", cmp["file_status_counts"])


def test_every_table2_cell_traces_to_the_fetched_inputs(runs, data_mirror):
    a, _ = runs
    record = _audit(a)
    cells = [c for c in record["cells"] if c["table"] == "results/table2.csv"]
    assert cells and all(c["metrics"] for c in cells), [c for c in cells if not c["metrics"]]
    dpr = next(c for c in cells if c["label"] == "DPR" and c["column"] == "squad_top20")
    assert dpr["metrics"] == "results/metrics/dpr/squad/squad-test.json"
    chain = [record["steps"][s]["rule"] for s in record["lineage"][dpr["metrics"]]]
    for rule in ("evaluate", "retrieve", "build_index", "encode", "encode_queries", "train",
                 "mine", "bm25_mining_search", "bm25_index", "passages", "documents",
                 "qa_load", "fetch"):  # fmt: skip
        assert rule in chain, (rule, chain)
    assert chain.index("train") < chain.index("mine") < chain.index("bm25_mining_search")
    # The dense run's lineage holds no evaluation-only BM25 search.
    assert "bm25_search" not in chain and "bm25_hybrid_search" not in chain
    train = next(
        record["steps"][s] for s in record["lineage"][dpr["metrics"]]
        if record["steps"][s]["rule"] == "train"
    )  # fmt: skip
    assert train["cfg"]["negative_type"] == "bm25" and len(train["code"]) == 16
    assert "results/models/dpr/squad.report.json" in train["reports"]
    assert train["seconds"] > 0 and train["max_rss_mb"] > 0
    for rec in record["inputs"]:
        mirror = json.loads((a / rec["record"]).read_text())["origin"]["path"]
        assert rec["sha256"] == hashlib.sha256(Path(mirror).read_bytes()).hexdigest()
    assert record["checksum_mismatches"] == []
    assert record["staleness"]["stale_jobs"] == [], record["staleness"]["by_rule"]
    assert record["environment"]["recorded"]["torch"]["version"]
    # Where the numbers may depend on the builds, each step recorded its own environment.
    by_rule = {record["steps"][s]["rule"] for s in record["environment"]["per_step"]}
    assert {"train", "encode", "encode_queries", "build_index", "retrieve", "bm25_index",
            "bm25_search"} <= by_rule, by_rule  # fmt: skip
    assert train["environment"]["torch"]["version"] and train["environment"]["cpu"]["flags"]


def test_a_config_change_is_reported_stale_per_rule(runs):
    a, _ = runs
    overlay = {**OVERLAY, "bm25": {"k1": 1.2, "b": 0.4, "hits": 100, "java": None}}
    args = shlex.split(overlay_args(a, overlay))
    st = staleness(Lineage(a), args)
    assert "k1: 0.9 -> 1.2" in st["by_rule"]["bm25_search"]["config_changes"]
    assert {"mine", "train", "evaluate", "table2"} <= set(st["by_rule"])
    assert not {"fetch", "documents", "bm25_index", "init_model"} & set(st["by_rule"])


def test_claims_of_the_run(runs):
    a, _ = runs
    claims = pd.read_csv(a / "results/claims.csv").set_index("id")
    row = claims.loc["dpr_t2_bm25_beats_dpr_on_squad"]
    assert row["verdict"] in ("holds", "reversed", "not significant")
    assert row["n_questions"] > 0 and 0.0 < row["p_bootstrap"] <= 1.0
    assert claims.loc["dpr_t3_in_batch_helps", "verdict"] == "not tested"
    assert "not in the results" in claims.loc["dpr_t3_in_batch_helps", "reason"]
    record = _audit(a)
    assert sum(record["claims"]["verdicts"].values()) == len(claims)
    print(claims[["verdict", "diff", "p_bootstrap", "p_mcnemar"]].to_string())


def test_audit_markdown_names_lineage_staleness_and_the_comparison(runs):
    a, b = runs
    text = (a / "results/audit/audit.md").read_text()
    for heading in ("## Table cells", "## Lineage per metrics file", "## Steps", "## Inputs",
                    "## Staleness", "## Runtime per rule", "## Environment", "## Against"):  # fmt: skip
        assert heading in text
    assert "Nothing would rerun" in text
    for rec in _audit(a)["inputs"]:
        assert rec["sha256"] in text
    assert str(b / "results") in text
