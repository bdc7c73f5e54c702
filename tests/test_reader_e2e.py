"""Table 4 end to end, in the shared tiny run (tiny_run.extend_run builds it with the rest): a
tiny reader (tiny_run.READER) is trained on BM25's results, scores every row's passages once,
chooses k on held-out questions and reads every Table 2 row; the table, the per-question
answers and the EM claims come out of it. The extension reruns no job of the DPR run it
starts from (extend_run checks it), so the reader's jobs are the only new end-to-end QA jobs."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
import tiny_run as runs
import yaml
from workflow_util import REPO, snakemake

from drpipe import claims as C
from drpipe.config import read_defaults, resolve

OVERLAY = runs.OVERLAY
SAMPLE = runs.READER["sample"]


@pytest.fixture(scope="module")
def run(tiny_run):
    return tiny_run


@pytest.mark.slow
def test_table4_reads_every_table2_row(run):
    work = run
    t2 = pd.read_csv(work / "results/table2.csv")
    t4 = pd.read_csv(work / "results/table4.csv")
    assert sorted(zip(t4["method"], t4["protocol"], strict=True)) == sorted(
        zip(t2["method"], t2["protocol"], strict=True)
    )
    assert t4["squad_em"].between(0, 100).all() and t4["k_squad"].isin([1, 2]).all()
    # A seeded sample of the evaluated questions (reader.sample), the same for every row.
    assert (t4["n_questions_squad"] == min(SAMPLE, t2["n_questions_squad"].min())).all()
    assert not [c for c in t4.columns if c.endswith("_diff")]  # below paper scale: ranks
    assert t4.set_index("method").loc["BM25", "squad_em_paper"] == 38.1
    # One shared reader, one k (chosen on BM25's held-out run), one scores file per split.
    assert set(t4["reader_squad"]) == {"bm25/none"} and t4["k_squad"].nunique() == 1
    assert [p.name for p in (work / "results/readers").glob("*/*/*") if p.is_dir()] == ["squad"]
    assert (work / "results/readers/bm25/none/squad").is_dir()
    # The warm start read SQuAD train articles the corpus does not hold, and the shared reader
    # trained from it.
    data = json.loads((work / "results/reader_warm_start/data.report.json").read_text())
    assert data["counts"]["articles_drawn"] == 2 and data["counts"]["questions"] == 32
    corpus = set(pd.read_parquet(work / "results/corpus/passages.parquet")["title"])
    assert not set(data["articles"]) & corpus
    shared = json.loads((work / "results/readers/bm25/none/squad.report.json").read_text())
    assert shared["cfg"]["init"] == "results/readers/warm_start"
    assert sorted(p.name for p in (work / "results/reader_scores/bm25/none").glob("*.parquet")) == [
        "squad-heldout.parquet", "squad-test.parquet"]  # fmt: skip
    score = json.loads(
        (work / "results/reader_scores/bm25/none/squad-test.report.json").read_text()
    )
    # Pairs shared by several rows' top 2 are scored once.
    assert score["pairs"] < 13 * 2 * score["questions"]
    md = (work / "results/table4.md").read_text()
    assert "One reader shared by every row" in md and "never on test questions" in md
    head, oracle = md.split("## Oracle rows: they use the test answers (oracle)")
    assert "| DPR + AOpt(hybrid) | leak-free |" in head and "oracle) |" not in head
    assert "AOpt (Future Internet 2023), Table 4" in oracle
    report = json.loads((work / "results/readers/bm25/none/squad.report.json").read_text())
    counts = report["counts"]
    assert counts["kept"] + sum(counts[k] for k in ("no_answer_in_top_depth",
                                "no_answer_after_truncation", "not_in_run")) == counts["questions"]  # fmt: skip
    # Nothing is left to do.
    again = snakemake(work, "-n", "results/table4.csv", overlay=OVERLAY)
    assert re.search(r"Nothing to be done|nothing to be done", again.stdout + again.stderr)


@pytest.mark.slow
def test_answers_per_question_and_em_claims(run):
    work = run
    answers = pd.read_parquet(work / "results/answers/bm25/none/squad-test.parquet")
    metrics = json.loads((work / "results/answers/bm25/none/squad-test.json").read_text())
    assert len(answers) == metrics["n_questions"] and answers["qid"].is_unique
    assert metrics["em"] == pytest.approx(100 * answers["em"].mean())
    raw = read_defaults(REPO)
    schema = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
    cfg = resolve(raw, schema, user_files=[OVERLAY])
    frame = C.evaluate_claims(C.resolve_claims(cfg), work / "results").set_index("id")
    for cid in ("dpr_t4_bm25_em_beats_dpr_on_squad", "dpr_t4_hybrid_em_at_least_dpr_on_squad",
                "xmoco_t4_xmoco_em_at_least_dpr_on_squad", "aopt_t4_em_beats_dpr_leak_free",
                "aopt_t4_em_beats_dpr_oracle"):  # fmt: skip
        row = frame.loc[cid]
        assert row["verdict"] != "not tested", (cid, row["reason"])
        assert row["n_questions"] == metrics["n_questions"]
