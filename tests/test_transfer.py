"""The transfer table (config ``transfer``; drpipe.plan.transfer, workflow/rules/transfer.smk):
its plan in milliseconds, its table from score files, and one small run of the whole chain on
the session's tiny DPR run (a SQuAD-dev collection of one held-out article)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from tiny_run import TRANSFER_HELDOUT as HELDOUT
from tiny_run import TRANSFER_LOG
from workflow_util import REPO, mirror_dir

from drpipe import transfer
from drpipe.cli import main
from drpipe.config import ConfigError, load_workflow_config
from drpipe.plan import build_plan
from drpipe.qa.datasets import read_questions


def plan_of(workdir=".", scale="mini", **transfer_cfg):
    config = load_workflow_config(REPO, {"scale": scale, "transfer": transfer_cfg})
    return build_plan(config, mirror=str(mirror_dir()), workdir=workdir)


def write_beir(root, qrels=("query-id\tcorpus-id\tscore", "q1\td1\t1")):
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text('{"_id": "d1", "title": "A", "text": "alpha"}\n')
    (root / "queries.jsonl").write_text('{"_id": "q1", "text": "what is alpha"}\n')
    (root / "qrels" / "test.tsv").write_text("\n".join(qrels) + "\n")
    return root


# ----------------------------------------------------------------------------------- the plan


def test_default_rows_are_table2s_models_and_the_collection_is_built_held_out():
    plan = plan_of()
    assert [(r, ts) for r, ts, _ in plan.TRANSFER_RUNS] == [
        ("bm25", "none"), ("init", "none"), ("dpr", "squad"), ("dcsr", "squad"),
        ("xmoco", "squad")]  # fmt: skip
    (name,) = plan.TRANSFER_COLLECTIONS
    # The builder leaves out the dev articles the mini corpus samples (same seed).
    assert plan.transfer_build_args(name) == {
        "articles": 6, "queries": 200, "seed": 13, "exclude_sample": 16}  # fmt: skip
    assert plan.transfer_beir_files(name)["qrels"] == f"results/transfer/{name}/beir/qrels/test.tsv"
    assert plan.transfer_score_files()[2] == f"results/transfer/{name}/scores/dpr/squad.json"
    # DCSR encodes the collection's sentences; the others its passages.
    assert set(plan.transfer_corpus_inputs(name, "dcsr")) == {"passages", "sentences"}
    assert set(plan.transfer_corpus_inputs(name, "init")) == {"passages"}
    assert plan.transfer_search_cfg("dcsr")["index_type"] == "flat"
    assert plan.transfer_bm25_cfg()["hits"] == 100
    cfg = plan.transfer_table_cfg()
    assert cfg["measures"] == ["nDCG@10", "RR@10", "R@100"] and len(cfg["cells"]) == 5


def test_listed_runs_folders_and_labels(tmp_path):
    write_beir(tmp_path / "mine")
    plan = plan_of(tmp_path, collections=[{"name": "mine", "folder": "mine"}, HELDOUT],
                   runs=["dpr", "dpr.t3_gold_7", "bm25"])  # fmt: skip
    assert plan.TRANSFER_RUNS == [
        ("dpr", "squad", "DPR"), ("dpr.t3_gold_7", "squad", "DPR (t3_gold_7)"),
        ("bm25", "none", "BM25")]  # fmt: skip
    assert plan.transfer_cells()[:2] == [
        ("mine", "dpr", "squad"),
        ("mine", "dpr.t3_gold_7", "squad"),
    ]
    assert plan.transfer_notes("mine") is None
    assert plan.transfer_table_inputs()["notes"] == ["results/transfer/heldout/beir/notes.json"]
    assert plan.TRANSFER_BUILT == "(?:heldout)"
    # Two rows of one label name their train sets.
    plan = plan_of(scale="paper", runs=["dpr/nq", "dpr/multi"])
    assert [label for *_, label in plan.TRANSFER_RUNS] == ["DPR [nq]", "DPR [multi]"]


@pytest.mark.parametrize(
    "cfg, message",
    [
        ({"runs": ["bert"]}, r"transfer\.runs\[0\] \('bert'\): unknown run 'bert'"),
        ({"runs": ["dpr.nope"]}, r"transfer\.runs\[0\].*no such variant"),
        ({"runs": ["init.e5"]}, r"unknown run 'init\.e5'"),
        ({"runs": ["dpr/wq"]}, r"unknown train set 'wq'"),
        ({"runs": ["bm25/squad"]}, r"bm25 is not trained"),
        ({"runs": ["dpr", "dpr/squad"]}, r"names dpr/squad a second time"),
        ({"measures": ["nDCG@10", "Bogus@3"]}, r"transfer\.measures: unknown ir_measures measure"),
        ({"measures": ["R@1000"]}, r"R@1000 reads deeper than transfer\.depth = 100"),
        ({"collections": [{"name": "x", "folder": "nowhere"}]},
         r"transfer\.collections\[0\] \(x\)\.folder: no nowhere/corpus\.jsonl"),
        ({"collections": [{"name": "x", "folder": ".", "articles": 3}]}, r"builder's keys"),
        ({"collections": [HELDOUT, HELDOUT]}, r"a second collection named 'heldout'"),
        ({"collections": [{**HELDOUT, "source": "nope"}]}, r"unknown source 'nope'"),
    ],
)  # fmt: skip
def test_a_config_the_table_cannot_have_is_named_at_load(cfg, message):
    with pytest.raises(ConfigError, match=message):
        plan_of(**cfg)


def test_unknown_collection_and_a_corpus_that_holds_every_article():
    plan = plan_of()
    with pytest.raises(ConfigError, match=r"no transfer.collections entry named 'nope'"):
        plan.transfer_folder("nope")
    # The squad scale's corpus holds every dev article: it lists no built collection, and
    # asking for one is an error naming why.
    assert plan_of(scale="squad").TRANSFER_COLLECTIONS == {}
    with pytest.raises(ConfigError, match=r"holds every one \(sample_articles: null\)"):
        plan_of(scale="squad", collections=[HELDOUT])


def test_a_schema_error_names_the_key():
    with pytest.raises(ConfigError, match="transfer"):
        plan_of(collections=[{"name": "x", "folder": "a", "build": "squad_dev"}])


# ---------------------------------------------------------------------- commands and table


def test_bad_qrels_line_names_the_file_and_line(tmp_path, capsys):
    src = write_beir(tmp_path / "c", qrels=("query-id\tcorpus-id\tscore", "q1\td1"))
    assert main(["collection", "convert", "--folder", str(src), "--out", str(tmp_path / "o")]) == 2
    assert "qrels/test.tsv, line 2: expected 3 tab-separated fields" in capsys.readouterr().err


def test_table_rows_columns_and_notes(tmp_path):
    src = write_beir(tmp_path / "c")
    assert main(["collection", "convert", "--folder", str(src), "--out", str(tmp_path / "o")]) == 0
    # The queries as the questions table encode-queries and BM25 search read (its own reader).
    assert read_questions(tmp_path / "o" / "questions.parquet") == [
        {"qid": "q1", "question": "what is alpha", "answers": [], "match": "string",
         "gold_title": None, "gold_context": None}]  # fmt: skip
    scores = []
    for run, value in (("bm25", 1.0), ("dpr", 0.5)):
        scores.append(tmp_path / f"{run}.json")
        scores[-1].write_text(json.dumps({"measures": {"nDCG@10": value, "R@100": 1.0},
                                          "queries": 1}))  # fmt: skip
    cfg = {"cells": [["c", "bm25", "none"], ["c", "dpr", "squad"]],
           "rows": [{"run": "bm25", "train_set": "none", "label": "BM25"},
                    {"run": "dpr", "train_set": "squad", "label": "DPR"}],
           "collections": [{"name": "c", "label": "Mine", "origin": "BEIR folder c",
                            "built": False}],
           "measures": ["nDCG@10", "R@100"], "depth": 100, "scale": "mini",
           "scale_note": "small"}  # fmt: skip
    frame, md = transfer.build(scores, [tmp_path / "o" / "report.json"], [], cfg)
    assert list(frame.columns) == ["method", "run", "train_set", "c/nDCG@10", "c/R@100"]
    assert frame["c/nDCG@10"].tolist() == [100.0, 50.0]
    assert "| Method | Mine nDCG@10 | Mine R@100 |" in md
    assert "1 passages, 1 queries with qrels (1 judgements)" in md
    assert "**Nothing tuned**" in md and "**Computed**" in md
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"measures": {"nDCG@10": 1.0}}))
    with pytest.raises(Exception, match=r"bad\.json.*lack measures"):
        transfer.build([bad, scores[1]], [tmp_path / "o" / "report.json"], [], cfg)


# --------------------------------------------------------------------------- end to end


def test_the_chain_on_the_tiny_run(tiny_transfer_run):
    """The tiny run's BM25 and DPR on a held-out SQuAD dev article: the table's every cell,
    computed by the rules' own commands, on a copy of the run (tiny_run.build_transfer_run,
    built by the session's builder)."""
    work = tiny_transfer_run
    ran = (work / TRANSFER_LOG).read_text()
    assert "rule transfer_table:" in ran
    assert "rule train:" not in ran and "rule encode:" not in ran
    frame = pd.read_csv(work / "results/transfer.csv").set_index("run")
    assert frame["method"].tolist() == ["BM25", "DPR"]
    cols = [f"heldout/{m}" for m in ("nDCG@10", "RR@10", "R@100")]
    assert list(frame.columns[2:]) == cols
    report = json.loads((work / "results/transfer/heldout/collection/report.json").read_text())
    assert report["queries_kept"] == 20 and 0 < report["documents"] <= 100
    # Fewer passages than the depth: the exact dense search ranks every one.
    assert frame.loc["dpr", "heldout/R@100"] == 100.0
    assert ((frame[cols] > 0) & (frame[cols] <= 100)).all().all()
    md = (work / "results/transfer.md").read_text()
    assert f"{report['documents']} passages, 20 queries with qrels" in md
    assert "not sampled into the training corpus" in md
