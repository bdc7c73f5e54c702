"""The real DAG, end to end, on a tiny slice of the real data; then what a config change reruns.

Everything here is the production path: fetch from the mirror, dump cleaning, chunking,
Anserini BM25, mining, DPR training of all-MiniLM-L6-v2 (its first layer:
tiny_models.truncated_minilm), sharded encoding, FAISS, dense and hybrid retrieval, evaluation
and the tables. Only the sizes are small.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml
from test_rerun_matrix import NO_RESULT_CHANGE, RESULT_CHANGE, TARGETS
from tiny_run import OVERLAY
from workflow_util import REPO, planned_jobs

from drpipe.methods import method_class, method_names

METHODS = method_names()
# The methods with Table 2 rows in the run (OVERLAY keeps config.yaml's tables.methods).
TINY_METHODS = yaml.safe_load((REPO / "config.yaml").read_text())["tables"]["methods"]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run_dir(tiny_run) -> Path:
    """The session's shared tiny run (tiny_run.py), built with OVERLAY on a superset of
    TARGETS."""
    return tiny_run


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_table2_has_computed_rows_beside_the_paper(run_dir):
    rows = _rows(run_dir / "results/table2.csv")
    methods = {r["method"] for r in rows}
    assert {"BM25", "DPR", "BM25+DPR"} <= methods
    assert any("init" in m for m in methods)
    for row in rows:
        assert row["scale"] == "mini"
        for k in ("1", "5", "20", "100"):
            value = float(row[f"squad_top{k}"])
            assert 0.0 <= value <= 100.0
    bm25 = next(r for r in rows if r["method"] == "BM25")
    assert float(bm25["squad_top20_paper"]) == 68.8
    # Below the paper scale no difference is printed: ranks among the rows the paper has.
    assert "squad_top20_diff" not in bm25
    ranked = [r for r in rows if r["squad_top20_paper"] and r["protocol"] == "standard"]
    above = sum(float(r["squad_top20_paper"]) > 68.8 for r in ranked)  # e.g. BM25+DPR's 71.5
    assert int(bm25["squad_top20_paper_rank"]) == 1 + above
    assert 1 <= int(bm25["squad_top20_rank"]) <= len(ranked)
    assert (run_dir / "results/table2.md").read_text().count("|") > 10


def test_sentence_unit_runs_carry_each_passages_best_unit(run_dir):
    # DCSR retrieves sentences: its run names the best one of each passage (the second
    # training round mines it); a passage-level method's run has no such column.
    import pyarrow.parquet as pq

    from drpipe.units import unit_pid

    for method in TINY_METHODS:
        path = run_dir / f"results/runs/{method}/squad/squad-test.parquet"
        table = pq.read_table(path)
        kind = method_class(method).corpus_units
        if kind == "passages":
            assert "unit" not in table.column_names
        else:
            units = table.column("unit").to_numpy()
            assert (unit_pid(units, kind) == table.column("pid").to_numpy()).all()


def test_provenance_traces_inputs_config_code_and_timings(run_dir):
    prov = json.loads((run_dir / "results/provenance.json").read_text())
    assert prov["config"]["corpus"]["documents"][0]["sample_articles"] == 3
    names = {rec["name"] for rec in prov["inputs"]}
    assert {"squad_dev", "squad_train", "enwiki_tables"} <= names
    for rec in prov["inputs"]:
        assert len(rec["sha256"]) == 64 and rec["origin"]["kind"] == "mirror"
    assert prov["packages"]["torch"] and prov["code"]["package_hash"]
    assert any(k.startswith("train/") for k in prov["rule_timings"])


def test_nothing_reruns_without_a_change(run_dir):
    assert planned_jobs(run_dir, *TARGETS, overlay=OVERLAY) == set()


def test_table3_ablation_and_figure1_are_built(run_dir):
    rows = _rows(run_dir / "results/dpr/table3.csv")
    assert len(rows) == 2
    text = (run_dir / "results/dpr/table3.csv").read_text()
    # The paper's NQ-dev numbers for these two schemes sit beside ours.
    assert "42.6" in text and "65.0" in text
    for variant in ("dpr.t3_gold_7", "dpr.t3_gbm25_1_31"):
        report = json.loads((run_dir / f"results/models/{variant}/squad.report.json").read_text())
        assert report["cfg"]["batch_size"] in (8, 32)
    gold7 = json.loads((run_dir / "results/models/dpr.t3_gold_7/squad.report.json").read_text())
    assert gold7["cfg"]["negative_type"] == "gold" and gold7["cfg"]["in_batch"] is False
    png = run_dir / "results/dpr/figure1.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    curves = (run_dir / "results/dpr/figure1.csv").read_text()
    assert "BM25" in curves and "100" in curves


def _rules(jobs):
    return {rule for rule, _ in jobs}


def test_chunking_change_reruns_corpus_and_downstream_only(run_dir):
    jobs = planned_jobs(run_dir, overlay={**OVERLAY, "corpus": {**OVERLAY["corpus"], "words": 90}})
    rules = _rules(jobs)
    assert {"passages", "sentences", "bm25_index", "mine", "train", "encode", "table2"} <= rules
    assert not rules & {"fetch", "documents", "qa_load", "init_model"}


def test_splitter_change_reruns_sentences_and_sentence_methods_only(run_dir):
    splitter = {"splitter": "sentencizer", "model": None, "batch_size": 256}
    jobs = planned_jobs(
        run_dir, overlay={**OVERLAY, "corpus": {**OVERLAY["corpus"], "sentences": splitter}}
    )
    assert "sentences" in _rules(jobs)
    sentence_methods = [m for m in METHODS if method_class(m).corpus_units == "sentences"]
    for _, out in jobs:
        if out.startswith(("results/models/", "results/embeddings/", "results/runs/")):
            assert any(f"/{m}" in out for m in sentence_methods), out  # DPR etc. never rerun
    assert not _rules(jobs) & {"fetch", "documents", "passages", "bm25_index", "mine"}


def test_bm25_k1_change_reruns_bm25_and_what_uses_mined_examples(run_dir):
    jobs = planned_jobs(
        run_dir, overlay={**OVERLAY, "bm25": {"k1": 1.2, "b": 0.4, "hits": 100, "java": None}}
    )
    rules = _rules(jobs)
    assert {
        "bm25_search",
        "bm25_mining_search",
        "bm25_hybrid_search",
        "mine",
        "train",
        "encode",
        "retrieve",
        "hybrid",
        "evaluate",
        "table2",
    } <= rules
    assert not rules & {
        "fetch",
        "documents",
        "passages",
        "sentences",
        "qa_load",
        "bm25_index",
        "init_model",
    }
    # The initial encoder's retrieval does not depend on BM25.
    assert not any(out.startswith("results/runs/init/") for _, out in jobs)


def test_dpr_lr_change_reruns_training_and_after_only(run_dir):
    methods = {"dpr": {**OVERLAY["methods"]["dpr"], "lr": 3.0e-5}}
    jobs = planned_jobs(run_dir, overlay={**OVERLAY, "methods": methods})
    rules = _rules(jobs)
    assert {"train", "encode", "build_index", "retrieve", "hybrid", "evaluate", "table2"} <= rules
    assert not rules & {
        "fetch",
        "documents",
        "passages",
        "sentences",
        "qa_load",
        "bm25_index",
        "bm25_search",
        "bm25_mining_search",
        "bm25_hybrid_search",
        "mine",
        "init_model",
    }
    assert not any("/bm25/" in out or "/init/" in out for _, out in jobs)


# ------------------------------------------------------------------ the rerun matrix's stand-in
# test_rerun_matrix.py asks a touched run (every job marked done, none run) what each setting
# reruns; the real run plans exactly the same jobs.


@pytest.mark.parametrize("name", ["hybrid.depth", "mining.hard_negatives", "encode.batch_size"])
def test_the_touched_run_plans_what_the_real_run_plans(run_dir, tiny_touched_run, name):
    patch = RESULT_CHANGE[name][0] if name in RESULT_CHANGE else NO_RESULT_CHANGE[name]
    overlay = {**OVERLAY, **patch}
    real = planned_jobs(run_dir, *TARGETS, overlay=overlay)
    assert real == planned_jobs(tiny_touched_run, *TARGETS, overlay=overlay), name


# ------------------------------------------------------------------ code hashes in the real DAG


def _leaf_method() -> str:
    """A method with Table 2 rows whose module no other method's code imports."""
    from drpipe.codehash import closure

    used = {p.stem for m in METHODS for p in closure([f"drpipe.methods.{m}"]) if p.stem != m}
    leaves = [m for m in TINY_METHODS if m not in used]
    assert leaves, "every method's module is imported by another"
    return leaves[0]


def test_new_method_module_plans_nothing_and_a_method_edit_plans_only_it(run_dir, tmp_path):
    """In a copy of this checkout run on the same results: adding a method module plans no
    job; editing methods/dpr.py plans DPR's jobs (and the initial encoder's, which is used the
    way DPR's is) and no job of another method; editing runs.py reruns what reads runs."""
    from workflow_util import copy_checkout

    repo = copy_checkout(tmp_path / "clone")
    methods = repo / "workflow" / "drpipe" / "methods"
    (methods / "zzz_new.py").write_text(
        "from drpipe.methods.dpr import DPR\n\n\nclass New(DPR):\n"
        '    name = "zzz_new"\n    label = "New"\n\n\nMETHOD = New\n'
    )
    assert planned_jobs(run_dir, *TARGETS, overlay=OVERLAY, repo=repo) == set()

    # Edit a method module that no other method imports (DCSR and xMoCo reuse DPR's code, so
    # editing dpr.py rightly reruns them too): only that method's jobs are planned.
    leaf = _leaf_method()
    path = methods / f"{leaf}.py"
    path.write_text(path.read_text() + "\n# edited\n")
    jobs = planned_jobs(run_dir, *TARGETS, overlay=OVERLAY, repo=repo)
    outputs = {o for _, o in jobs}
    assert f"results/models/{leaf}/squad" in outputs
    assert not [o for o in outputs if "/bm25/none" in o or o.startswith("results/corpus")]
    others = [m for m in METHODS if m != leaf]
    assert not [o for o in outputs for m in others if f"/{m}/" in o or f"/{m}." in o]
    assert not [o for o in outputs if "/init/" in o]

    path.write_text(path.read_text().replace("\n# edited\n", ""))
    runs = repo / "workflow" / "drpipe" / "runs.py"
    runs.write_text(runs.read_text() + "\n# edited\n")
    rules = _rules(planned_jobs(run_dir, *TARGETS, overlay=OVERLAY, repo=repo))
    assert {"bm25_search", "retrieve", "evaluate", "mine"} <= rules
    assert not rules & {"fetch", "documents", "passages", "sentences", "qa_load"}
