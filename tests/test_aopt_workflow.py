"""AOpt in the DAG: what the leak-free rows depend on, the tables and figures on a tiny real
slice, and what a changed round count or learning rate reruns."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
from tiny_run import OVERLAY
from workflow_util import planned_jobs, snakemake

from drpipe.config import deep_merge

TEST_QUESTIONS = "results/qa/squad/test.parquet"
# Every leak-free output that a vector of a table row is made from (rounds 1 and 2).
LEAKFREE = [
    "results/embeddings/aopt-leakfree-passage-r2/squad/shard-0.npy",
    "results/embeddings/aopt-leakfree-hybrid-r2/squad/shard-0.npy",
    "results/embeddings/aopt-leakfree-linear-r1/squad/shard-0.npy",
    "results/qvecs/aopt-leakfree-query-r2/squad/squad-test.npy",
    "results/qvecs/aopt-leakfree-query-r2/squad/squad-train.npy",
]
AOPT = {
    "tables": {"methods": ["dpr"]},
    "aopt": {
        "rounds": {"query": 2, "passage": 2, "hybrid": 2},
        "figure7": {"dataset": "squad", "rounds": 2},
    },
}


def _jobs(workdir: Path, *targets: str, overlay=None) -> list[tuple[str, set[str], set[str]]]:
    """(rule, inputs, outputs) of every job of the targets' whole upstream (a forced dry run)."""
    proc = snakemake(workdir, "-n", "--forceall", *targets, overlay=overlay)
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", proc.stdout + proc.stderr):
        rule = re.match(r"(?:local)?rule (\w+):", block)
        if not rule:
            continue
        files = {}
        for key in ("input", "output"):
            found = re.search(rf"^    {key}: (.*)$", block, re.M)
            files[key] = {f.strip() for f in found.group(1).split(",")} if found else set()
        jobs.append((rule.group(1), files["input"], files["output"]))
    return jobs


def test_leak_free_vectors_do_not_depend_on_the_test_answers(tmp_path):
    """In the whole upstream of every leak-free vector file, the test questions table is read
    only to encode the question texts (``encode_queries`` reads no answer), never by an AOpt
    step; the oracle's upstream labels with it (the negative control)."""
    jobs = _jobs(tmp_path, *LEAKFREE, overlay=AOPT)
    readers = {rule for rule, inputs, _ in jobs if TEST_QUESTIONS in inputs}
    assert readers == {"encode_queries"}
    outputs = set().union(*(out for _, _, out in jobs))
    assert set(LEAKFREE) <= outputs and not any("oracle" in o for o in outputs)
    aopt_inputs = set().union(*(i for r, i, _ in jobs if r.startswith("aopt")))
    assert "results/qa/squad/train.parquet" in aopt_inputs  # the training answers are used
    assert not any(f.startswith("results/qa/") and "train" not in f for f in aopt_inputs)
    oracle = _jobs(
        tmp_path, "results/embeddings/aopt-oracle-passage-r1/squad/shard-0.npy", overlay=AOPT
    )
    assert any(r == "aopt_passage_round" and TEST_QUESTIONS in i for r, i, _ in oracle)


def test_leak_free_labels_from_the_evaluated_split_are_refused(tmp_path):
    overlay = deep_merge(AOPT, {"aopt": {"label_split": "test"}})
    proc = snakemake(tmp_path, "-n", LEAKFREE[0], overlay=overlay, check=False)
    assert proc.returncode != 0
    assert "leak-free labels must come from other questions" in proc.stdout + proc.stderr


def test_a_round_takes_one_epoch_and_rounds_stay_within_the_papers_bounds(tmp_path):
    """A round is one epoch of the paper (AOpt 2.3.3, 3.1.4): each round's command is given
    ``epochs_per_round`` (1) epochs, and rounds beyond ``patience`` (where the paper's early
    stop, not implemented across rounds, could first trigger) are refused."""
    target = "results/qvecs/aopt-oracle-query-r1/squad/squad-test.npy"
    proc = snakemake(tmp_path, "-n", "-p", "--forceall", target, overlay=AOPT)
    shell = next(
        line for line in (proc.stdout + proc.stderr).splitlines()
        if "drpipe aopt optimise --side query" in line
    )  # fmt: skip
    cfg = json.loads(re.search(r"--cfg '(\{.*?\})'", shell).group(1))
    assert cfg["max_epochs"] == 1 and cfg["lr"] == 0.1 and cfg["labels"] == "answers"
    for key, value in (("rounds", {"query": 6}), ("figure7", {"rounds": 6})):
        overlay = deep_merge(AOPT, {"aopt": {key: value}})
        proc = snakemake(tmp_path, "-n", LEAKFREE[0], overlay=overlay, check=False)
        assert proc.returncode != 0
        assert "early stopping across rounds" in proc.stdout + proc.stderr


# --------------------------------------------------------------------------- tiny real run

# The session's shared tiny run: its slice, every method of config.yaml, AOpt's rounds as AOPT.
E2E = OVERLAY
TARGETS = (
    "results/table2.csv",
    "results/aopt/table3.csv",
    "results/aopt/figure6.png",
    "results/aopt/figure7.png",
)


@pytest.fixture(scope="module")
def run_dir(tiny_run) -> Path:
    """AOpt's targets are among the shared tiny run's (tiny_run.py): built on a copy of the
    audited DPR run, so the suite trains the tiny DPR once for both (tiny_run.extend_run checks
    that none of the DPR run's jobs reran)."""
    return tiny_run


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.slow
def test_table2_has_aopt_rows_by_protocol(run_dir):
    rows = _rows(run_dir / "results/table2.csv")
    aopt = [r for r in rows if "AOpt" in r["method"]]
    assert {(r["method"], r["protocol"]) for r in aopt} == {
        (f"DPR + AOpt({arm})", p)
        for arm in ("query", "passage", "hybrid")
        for p in ("leak-free", "uses the test answers (oracle)")
    }
    # Oracle rows are a block of their own, after every other row.
    protocols = [r["protocol"] for r in rows]
    first_oracle = protocols.index("uses the test answers (oracle)")
    assert set(protocols[first_oracle:]) == {"uses the test answers (oracle)"}
    assert {r["protocol"] for r in rows if "AOpt" not in r["method"]} == {"standard"}
    md = (run_dir / "results/table2.md").read_text()
    assert "## Oracle rows: they use the test answers (oracle)" in md
    head, oracle_block = md.split("## Oracle rows")
    assert "leak-free" in head and "uses the test answers (oracle) |" not in head
    assert oracle_block.count("DPR + AOpt(") == 3


@pytest.mark.slow
def test_table3_rows_and_paper_values_only_beside_the_oracle(run_dir):
    rows = _rows(run_dir / "results/aopt/table3.csv")
    assert len(rows) == 1 + 2 * 4
    base = [r for r in rows if r["protocol"] == "standard"]
    assert len(base) == 1 and base[0]["method"] == "DPR" and float(base[0]["gain_top20"]) == 0
    for r in rows:
        oracle = r["protocol"] == "uses the test answers (oracle)"
        if r["protocol"] == "leak-free":
            assert r["top1_paper"] == "" and r["paper_dataset"] == ""
        if oracle and "AOpt(hybrid)" in r["method"]:
            assert float(r["top1_paper"]) == 57.1 and float(r["gain_top1_paper"]) == 11.4
    report = json.loads(
        (run_dir / "results/aopt/reports/aopt-leakfree-passage-r1/squad.json").read_text()
    )
    assert report["answers_read_from"] == "results/qa/squad/train.parquet"
    assert report["lr"] == 0.1 and report["max_epochs"] == 1 and report["epochs_max"] == 1
    q = json.loads(
        (run_dir / "results/aopt/reports/aopt-leakfree-query-r1/squad/squad-test.json").read_text()
    )
    assert q["answers_read_from"] is None and q["labels"] == "prf"
    md = (run_dir / "results/aopt/table3.md").read_text()
    assert "uses the test answers (oracle)" in md and "upper bound" in md


@pytest.mark.slow
def test_figures_6_and_7(run_dir):
    for name in ("figure6", "figure7"):
        png = run_dir / f"results/aopt/{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    grid = _rows(run_dir / "results/aopt/figure6.csv")
    assert len(grid) == 2 * 100
    # The grid, evaluated in memory, agrees with the linear-weights row built through the
    # index, retrieval and evaluation rules at the same (beta, gamma).
    t3 = {(r["protocol"], r["method"]): r for r in _rows(run_dir / "results/aopt/table3.csv")}
    for protocol in ("leak-free", "uses the test answers (oracle)"):
        cell = next(
            r
            for r in grid
            if r["protocol"] == protocol and float(r["beta"]) == 0.6 and float(r["gamma"]) == -0.1
        )
        row = t3[(protocol, "Weighted-based (beta=0.6, gamma=-0.1)")]
        n = int(row["n_questions"])
        for k in (1, 5, 20, 100):
            assert abs(float(cell[f"top{k}"]) - float(row[f"top{k}"])) <= 100 / n + 0.01
    curve = _rows(run_dir / "results/aopt/figure7.csv")
    assert {(r["arm"], int(r["round"])) for r in curve} == {
        (arm, r) for arm in ("passage", "query") for r in (0, 1, 2)
    }


@pytest.mark.slow
def test_nothing_reruns_without_a_change(run_dir):
    assert planned_jobs(run_dir, *TARGETS, overlay=E2E) == set()


@pytest.mark.slow
def test_more_rounds_run_only_the_new_rounds(run_dir):
    more = deep_merge(E2E, {"aopt": {"rounds": {"passage": 3}}})
    jobs = planned_jobs(run_dir, *TARGETS, overlay=more)
    aopt_outputs = {o for _, o in jobs if "/aopt-" in o}
    # Round 3 of AOpt-passage, and the one file round 2 did not need: the training
    # questions' run over round 2's passages (round 3's leak-free labels).
    extra = "results/runs/aopt-leakfree-passage-r2/squad/squad-train.parquet"
    assert all("-passage-r3/" in o for o in aopt_outputs - {extra})
    assert extra in aopt_outputs and len(aopt_outputs) == 9
    assert {r for r, _ in jobs} == {
        "aopt_passage_round", "aopt_index", "aopt_retrieve", "aopt_evaluate",
        "table2", "aopt_table3",
    }  # fmt: skip


@pytest.mark.slow
def test_learning_rate_reruns_aopt_only(run_dir):
    jobs = planned_jobs(run_dir, *TARGETS, overlay=deep_merge(E2E, {"aopt": {"lr": 0.05}}))
    rules = {r for r, _ in jobs}
    assert {"aopt_passage_round", "aopt_query_round"} <= rules
    assert not rules & {"train", "encode", "encode_queries", "build_index", "retrieve", "evaluate"}
    # The linear weights and the grid take no learning rate.
    assert not rules & {"aopt_linear", "aopt_grid"}
