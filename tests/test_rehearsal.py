"""The rehearsal scale: the paper scale's DAG on stand-in inputs of the papers' formats.

- a scale overlay can extend another (``extends: paper``);
- each stand-in kind writes its format so the pipeline's own readers take it;
- the rehearsal's DAG is the paper scale's, job for job, but for where inputs come from (dry
  runs of both);
- a reduced rehearsal (one Single train set and each paper's Multi set, DPR's released
  checkpoints in both layouts, and DPR's NQ reader for Table 4) runs end to end.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
import tiny_run as runs
from slurm_run import PAPER_PLAN_TARGETS
from workflow_util import REPO, plan_jobs, planned_jobs

from drpipe.config import ConfigError, read_defaults, scale_overlay, split_run_name
from drpipe.corpus.sources import iter_dpr_tsv
from drpipe.corpus.wiki import drop_reason, iter_pages
from drpipe.qa.datasets import load_questions
from drpipe.standins import make_standin
from drpipe.training.data import read_examples

RAW = read_defaults(REPO)


def test_a_scale_extends_another() -> None:
    scales = {
        "paper": {"encode": {"shards": 50, "batch_size": 512}, "index": {"type": "hnsw"}},
        "rehearsal": {"extends": "paper", "encode": {"shards": 1}},
        "loop": {"extends": "loop2"},
        "loop2": {"extends": "loop"},
        "orphan": {"extends": "nowhere"},
    }
    assert scale_overlay(scales, "rehearsal") == {
        "encode": {"shards": 1, "batch_size": 512},
        "index": {"type": "hnsw"},
    }
    with pytest.raises(ConfigError, match="a cycle"):
        scale_overlay(scales, "loop")
    with pytest.raises(ConfigError, match="scales.orphan.extends: 'nowhere'"):
        scale_overlay(scales, "orphan")


def test_the_rehearsal_changes_only_inputs_and_sizes() -> None:
    """Its own overlay touches no key that shapes the DAG beyond inputs and sizes."""
    own = RAW["scales"]["rehearsal"]
    assert own["extends"] == "paper"
    assert set(own) == {"extends", "threads", "resources", "qa", "encode", "methods", "tables",
                        "standins"}  # fmt: skip
    sizes = {"epochs", "epochs_by_train_set", "max_dropped_fraction"}  # a share of tiny files
    assert all(set(m) <= sizes for m in own["methods"].values())
    assert all(set(s) == {"sample"} for d in own["qa"].values() for s in d.values())
    assert set(own["tables"]) == {"dcsr", "scale_note"}  # corpus subsets: sizes; its note
    assert all(set(t) <= {"subset", "subsets"} for t in own["tables"]["dcsr"].values())


def _mirror_standin(tmp: Path, mirror: Path, kind: str, out: str, cfg: dict, **inputs) -> Path:
    paths = {k: [mirror / p for p in v] for k, v in inputs.items()}
    record = make_standin(kind, paths, tmp / out, cfg)
    assert record["origin"] == "stand-in" and record["made_from"]
    return tmp / out


POOL = {"passages": ["dpr/psgs_w100.sample.tsv"],
        "squad": ["squad/squad-train-v1.1.reconstructed.json.gz"]}  # fmt: skip


def test_standins_are_read_by_the_pipelines_readers(tmp_path: Path, data_mirror: Path) -> None:
    pool_cfg = {"squad_articles": 1}
    # DPR's biencoder JSON (gzip): positives hold an answer, one record has none (DPR's filter).
    path = _mirror_standin(
        tmp_path, data_mirror, "biencoder", "biencoder-trec-train.json.gz",
        {**pool_cfg, "dataset_name": "curatedtrec_train", "format": "curatedtrec-tsv",
         "match": "regex", "n": 3, "no_positive": 1, "hard_negatives": 2, "negatives": 2},
        questions=["curatedtrec/large2180-train.tsv"], **POOL,
    )  # fmt: skip
    kept, dropped = read_examples(path)
    assert (len(kept), dropped) == (3, 1)
    for ex in kept:
        assert set(ex) >= {"dataset", "question", "answers", "positive_ctxs", "negative_ctxs",
                           "hard_negative_ctxs"}  # fmt: skip
        assert any(re.search(a, ex["positive_ctxs"][0]["text"], re.I) for a in ex["answers"])
        assert len(ex["hard_negative_ctxs"]) == 2 and ex["positive_ctxs"][0]["score"] == 1000
    # DPR's question CSV (gzip, as trivia-test.qa.csv.gz), question text unchanged.
    path = _mirror_standin(
        tmp_path, data_mirror, "qa_csv", "trivia-test.qa.csv.gz",
        {"format": "squad", "offset": 5, "n": 7},
        questions=["squad/squad-train-v1.1.reconstructed.json.gz"],
    )  # fmt: skip
    qs, _ = load_questions("dpr-qa-csv", path, "triviaqa", "test")
    src, _ = load_questions(
        "squad", data_mirror / "squad/squad-train-v1.1.reconstructed.json.gz", "s", "x"
    )
    assert [q["answers"] for q in qs] == [q["answers"] for q in src[5:12]]
    # psgs_w100.tsv (gzip): the sample's passages, then the SQuAD paragraphs.
    path = _mirror_standin(tmp_path, data_mirror, "psgs_w100", "psgs_w100.tsv.gz", pool_cfg, **POOL)
    rows = list(iter_dpr_tsv(path))
    assert len(rows) > 751 and rows[0][0] == 128529
    # The dump: pool pages (kept by the DrQA filters), then the real dump's first articles.
    path = _mirror_standin(
        tmp_path, data_mirror, "wiki_dump", "enwiki.xml.bz2", {**pool_cfg, "dump_pages": 3},
        dump=["wikipedia/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"],
        **POOL,
    )  # fmt: skip
    pages = list(iter_pages(path))
    kept_pages = [p for p in pages if drop_reason(p) is None]
    assert sum(p.page_id < 90_000_000 for p in kept_pages) == 3
    assert {"Great Lakes", "Does He Love You"} <= {p.title for p in kept_pages}


def _job_counts(jobs: set[tuple[str, str]]) -> Counter[str]:
    return Counter(rule for rule, _ in jobs)


TARGETS = ("results/run_summary.md", "results/table4.csv", "results/table4-k.csv")
INPUT_RULES = {"fetch", "standin", "standin_model"}
# The rehearsal's corpus subsets stand for the paper's (sizes).
SUBSETS = {"subsets/n600": "subsets/n1050000", "subsets/n150": "subsets/n100000"}


@pytest.mark.slow
def test_rehearsal_dag_is_the_paper_dag(tmp_path: Path, slurm_paper_plan: Path) -> None:
    """Job for job the paper scale's (the session's shared plan of the same targets, the jobs
    of its shards but the first left out: the rehearsal has one), but for where the inputs
    come from: every paper input the paper fetches is fetched or stood in for."""
    assert PAPER_PLAN_TARGETS == TARGETS
    paper = {
        (job["rule"], job["output"][0])
        for job in plan_jobs(slurm_paper_plan)
        if re.search(r"/shard-(?!0\.)\d+\.", job["output"][0]) is None
    }
    (tmp_path / "r").mkdir()
    rehearsal = planned_jobs(tmp_path / "r", *TARGETS, overlay={"scale": "rehearsal"})

    def norm(out: str) -> str:
        for a, b in SUBSETS.items():
            out = out.replace(a, b)
        return out

    core_p = {(r, o) for r, o in paper if r not in INPUT_RULES}
    core_r = {(r, norm(o)) for r, o in rehearsal if r not in INPUT_RULES}
    assert core_p == core_r
    inputs_r = {o for r, o in rehearsal if r in INPUT_RULES}
    assert {o for r, o in paper if r == "fetch"} <= inputs_r
    counts = _job_counts(core_r)
    # Every paper table, DPR's released checkpoints in both layouts, the paper's index types:
    # HNSW for the passage methods, flat for DCSR's sentences (its released code's).
    assert counts["released_model"] == 2 and counts["dcsr_table"] == 7
    built = {o for r, o in core_r if r == "build_index"}
    want = {o: "flat" if split_run_name(o.split("/")[2])[0] == "dcsr" else "hnsw" for o in built}
    assert built and all(o.endswith(f"/{kind}.faiss") for o, kind in want.items())
    assert {"flat", "hnsw"} <= set(want.values())


# The reduced rehearsal is built by the session's builder (tiny_run.REDUCED_REHEARSAL).
@pytest.mark.slow
def test_reduced_rehearsal_runs(reduced_rehearsal: Path) -> None:
    work = reduced_rehearsal
    for target in runs.REDUCED_REHEARSAL_TARGETS:
        metrics = json.loads((work / target).read_text())
        assert metrics["n_questions"] == 24
    # The paper's epochs and validation on dev files; DPR's filter counted, never silent.
    rep = json.loads((work / "results/models/dpr/multi.report.json").read_text())
    assert rep["epochs"] == 2 and rep["val_files"] and rep["n_discarded_no_positive"] == 4
    rep = json.loads((work / "results/models/dcsr/dcsr_multi.report.json").read_text())
    assert rep["epochs"] == 2 and len(rep["train_files"]) == 3
    assert {Path(f).name for f in rep["train_files"]} == {
        "biencoder-nq-train.json.gz", "biencoder-trivia-train.json.gz",
        "biencoder-squad1-train.json.gz",
    }  # fmt: skip
    for ts, layout in (("nq", "hf"), ("multi", "dpr_cp")):
        rep = json.loads((work / f"results/models/dpr.released/{ts}.report.json").read_text())
        assert rep["layout"] == layout and rep["trained_here"] is False
    # Table 4's paper-scale reader (DPR 6.1): one reader for DPR's NQ retriever, from the
    # stand-in of bert-base-uncased, on that retriever's own train-split top 100, m = 24, 350
    # tokens, the paper's epochs; every question it could not use counted and named.
    rep = json.loads((work / "results/readers/dpr/nq/nq.report.json").read_text())
    cfg = rep["cfg"]
    assert cfg["init"].endswith("bert-base-uncased") and cfg["init"].startswith("results/")
    assert (cfg["passages"], cfg["max_len"], cfg["depth"], rep["epochs"]) == (24, 350, 100, 16)
    counts = rep["counts"]
    assert counts["questions"] == 12 and counts["kept"] >= 1
    assert counts["no_answer_in_top_depth"] == len(
        rep["skipped_examples"]["no_answer_in_top_depth"]
    )
    # k chosen on dev among the paper's depths (never on test), then read on test in fp32.
    k = json.loads((work / "results/answers/dpr/nq/nq.k.json").read_text())
    assert k["questions"].endswith("nq/dev.parquet") and set(k["em_by_k"]) == {
        "1", "5", "10", "20", "50", "100"}  # fmt: skip
    read = json.loads((work / runs.REDUCED_REHEARSAL_READ).read_text())
    assert read["n_questions"] == 24 and read["k"] == k["k"] and read["reader"] == "dpr/nq"
    assert read["reader_precision"] == "fp32" and 0.0 <= read["em"] <= 100.0
