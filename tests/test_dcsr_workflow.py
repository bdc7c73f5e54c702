"""DCSR's targets in the DAG (dry runs): what each table needs, the second training round as
rules, generic corpus subsets, and Tables 3 and 6 planned at paper scale."""

from __future__ import annotations

import re

import pytest
from workflow_util import REPO, mirror_dir, plan_jobs, planned_jobs, snakemake

from drpipe.config import load_workflow_config
from drpipe.plan import build_plan


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("dcsr_dag")


def outputs(jobs, rule):
    return {out for r, out in jobs if r == rule}


def test_hard_negative_round_is_rules_using_retrieval(work):
    """DCSR-hard: the DCSR checkpoint retrieves over the training questions (the `retrieve`
    rule, i.e. Score Normalization), `drpipe mine` keeps its passages without the answer, and
    a second DCSR trains on them; likewise DPR-hard."""
    jobs = planned_jobs(work, "results/dcsr/table5.csv")
    assert "results/runs/dcsr/squad/squad-train.parquet" in outputs(jobs, "retrieve")
    assert "results/runs/dpr/squad/squad-train.parquet" in outputs(jobs, "retrieve")
    assert outputs(jobs, "mine_hard") == {
        "results/train/squad.hard_dcsr_squad.jsonl.gz",
        "results/train/squad.hard_dpr_squad.jsonl.gz",
    }
    assert outputs(jobs, "train_hard") == {
        "results/models/dcsr.hard_dcsr/squad",
        "results/models/dcsr.hard_dpr/squad",
        "results/models/dpr.hard_dpr/squad",
    }
    assert outputs(jobs, "train") == {"results/models/dcsr/squad", "results/models/dpr/squad"}
    assert "results/metrics/dcsr.hard_dcsr/squad/squad-test.json" in outputs(jobs, "evaluate")


def test_tables_4_7_8_figure4_and_k_plan_at_mini(work):
    proc = snakemake(work, "-n", "results/dcsr/table4.csv", "results/dcsr/table7.csv",
                     "results/dcsr/table8.csv", "results/dcsr/figure4.png",
                     "results/dcsr/vectors_per_passage.csv", "results/dcsr/table2.csv")  # fmt: skip
    # No rule candidate fails on the way (the hard round and subsets overlap nothing).
    assert "Exception" not in proc.stdout + proc.stderr
    jobs = planned_jobs(work, "results/dcsr/table4.csv", "results/dcsr/table7.csv")
    assert {
        "results/models/dcsr.t4_bm25_1/squad",
        "results/models/dcsr.t4_bm25_2/squad",
        "results/models/dcsr/squad",
        "results/models/dpr/squad",
    } <= outputs(jobs, "train")
    # Table 7: the same checkpoints on two subsets; only corpus, encoding, index, retrieval.
    assert outputs(jobs, "corpus_subset") == {
        "results/subsets/p65-gold-squad-test/corpus/passages.parquet",
        "results/subsets/p80-gold-squad-test/corpus/passages.parquet",
    }
    evaluated = outputs(jobs, "subset_evaluate")
    assert "results/subsets/p65-gold-squad-test/metrics/dcsr/squad/squad-test.json" in evaluated
    assert "results/subsets/p80-gold-squad-test/metrics/dpr/squad/squad-test.json" in evaluated
    assert not any("subsets" in out for out in outputs(jobs, "train"))
    # Each subset's encodings read the subset's own passages (as text), never the whole
    # corpus's token ids (a `use rule encode` once inherited those).
    shown = snakemake(work, "-n", "-p", "results/dcsr/table7.csv").stdout
    encodes = [ln for ln in shown.splitlines()
               if "drpipe encode " in ln and "results/subsets/" in ln]  # fmt: skip
    assert encodes and all(
        re.search(r"--passages results/subsets/p\d+-gold-squad-test/corpus/passages.parquet", ln)
        and "--tokens" not in ln
        for ln in encodes
    ), encodes[:2]


def paper_jobs(plan_dir) -> list[tuple[str, str]]:
    """(rule, output) of the shared paper-scale plan (tests/slurm_run.py: every table)."""
    return [(j["rule"], o) for j in plan_jobs(plan_dir) for o in j["output"][:1]]


def test_tables_3_and_6_plan_at_paper_scale(slurm_paper_plan):
    jobs = paper_jobs(slurm_paper_plan)
    # Table 3: adversarial training = a second round on hard negatives mined over the
    # questions of DPR's released NQ / TriviaQA training files.
    assert {"results/models/dcsr.hard_dcsr/nq", "results/models/dpr.hard_dpr/triviaqa"} <= (
        outputs(jobs, "train_hard")
    )
    # At paper scale the train split is those files' questions (qa.nq.train: dpr-biencoder,
    # which the reader trains on too), so the miner retrieves for it; the ".released" split
    # serves a config whose train split is not DPR's file.
    assert "results/qa/nq/train.parquet" in outputs(jobs, "qa_load")
    assert "results/runs/dcsr/nq/nq-train.parquet" in outputs(jobs, "retrieve")
    assert not outputs(jobs, "released_train_questions")
    # Table 6: SQuAD- and NQ-trained checkpoints on TriviaQA, on the first 1.05M passages.
    assert {"results/models/dcsr/squad", "results/models/dpr/nq",
            "results/models/dcsr/triviaqa"} <= outputs(jobs, "train")  # fmt: skip
    assert "results/subsets/n1050000/metrics/dcsr/squad/triviaqa-test.json" in outputs(
        jobs, "subset_evaluate"
    )


def _train_files(planned: list[dict], model: str) -> list[str]:
    """The --train files of the planned job that writes ``model`` (its shell command)."""
    for job in planned:
        if job["rule"] == "train" and model in job["output"]:
            files = job["shell"].split("--train ", 1)[1].split(" --", 1)[0].split()
            return sorted(f.rsplit("/", 1)[-1] for f in files)
    raise AssertionError(f"no train job for {model}")


def test_multi_rows_train_on_each_papers_multi_set_at_paper_scale(slurm_paper_plan):
    """DCSR 4.2 trains its Multi model on NQ + TriviaQA + SQuAD; DPR's (and xMoCo's) Multi set
    is NQ + TriviaQA + WQ + TREC. Both Table 2s plan each paper's own Multi model (the shared
    paper-scale plan)."""
    planned = plan_jobs(slurm_paper_plan)
    dcsr = ["biencoder-nq-train.json.gz", "biencoder-squad1-train.json.gz",
            "biencoder-trivia-train.json.gz"]  # fmt: skip
    dpr = ["biencoder-curatedtrec-train.json.gz", "biencoder-nq-train.json.gz",
           "biencoder-trivia-train.json.gz", "biencoder-webquestions-train.json.gz"]  # fmt: skip
    assert _train_files(planned, "results/models/dcsr/dcsr_multi") == dcsr
    assert _train_files(planned, "results/models/dpr/multi") == dpr
    assert _train_files(planned, "results/models/xmoco/multi") == dpr
    assert not [j for j in planned if "results/models/dcsr/multi" in j["output"]]
    # DCSR's Table 2: its datasets (tables.dcsr.table2), DCSR's Multi model beside DPR's.
    plan = build_plan(load_workflow_config(REPO, {"scale": "paper"}), mirror=str(mirror_dir()))
    read = {c["file"] for c in plan.dcsr_table2_cells()}
    assert {"results/metrics/dcsr/dcsr_multi/squad-test.json",
            "results/metrics/dpr/multi/squad-test.json"} <= read  # fmt: skip
    assert not any("/wq-" in m or "/trec-" in m for m in read)
    assert read <= set(outputs(paper_jobs(slurm_paper_plan), "evaluate"))
