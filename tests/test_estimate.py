"""``drpipe estimate``: a target's planned jobs timed from a finished run's benchmark files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from drpipe.audit.staleness import parse_dry_run
from drpipe.estimate import (
    estimate_jobs,
    job_times,
    render,
    summarise,
    unpaused_seconds,
    whole_job_seconds,
)

TRAIN_JOB = """
[Tue Nov 24 19:39:01 2026]
rule train:
    input: results/train/squad.jsonl.gz
    output: results/models/{run}/squad, results/models/{run}/squad.report.json
    jobid: {jobid}
    benchmark: results/benchmarks/rules/train/{run}/squad.tsv
    reason: Missing output files: results/models/{run}/squad
    threads: 2
    resources: tmpdir=/tmp
Shell command: drpipe train
"""
PLAN = "".join(TRAIN_JOB.format(run=run, jobid=i) for i, run in
               enumerate(("dpr", "dpr_gold7", "xmoco.f2_q32"), start=3)) + textwrap.dedent(
    """
    [Tue Nov 24 19:39:01 2026]
    rule evaluate:
        output: results/metrics/dpr/squad/squad-test.json
        jobid: 6
        benchmark: results/benchmarks/rules/evaluate/dpr/squad/squad-test.tsv
        reason: Missing output files: results/metrics/dpr/squad/squad-test.json
        resources: tmpdir=/tmp
    Shell command: drpipe evaluate

    [Tue Nov 24 19:39:01 2026]
    localrule all:
        input: results/table2.csv
        jobid: 0
    """
)  # fmt: skip


def _bench(root: Path, rel: str, seconds: float) -> None:
    path = root / "results/benchmarks/rules" / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"s\th:m:s\tmax_rss\n{seconds}\t0:00:00\t100.0\n")


def test_planned_jobs_are_timed_by_their_own_file_else_their_method_or_rule_median(tmp_path):
    _bench(tmp_path, "train/dpr/squad.tsv", 1000.0)
    _bench(tmp_path, "train/xmoco/squad.tsv", 2000.0)
    _bench(tmp_path, "train/xmoco.t3_tied/squad.tsv", 2400.0)
    _bench(tmp_path, "train/dcsr/squad.tsv", 1500.0)
    jobs = parse_dry_run(PLAN)
    assert [(j["rule"], j["threads"]) for j in jobs] == [("train", 2), ("train", 2),
                                                         ("train", 2), ("evaluate", 1)]  # fmt: skip
    est = estimate_jobs(jobs, tmp_path)
    assert [(e["basis"], e["seconds"]) for e in est] == [
        ("same job", 1000.0),
        ("rule median", 1750.0),  # dpr_gold7 is no measured method: 1000, 1500, 2000, 2400
        ("method median", 2200.0),  # xMoCo's own: 2000 and 2400, not DPR's or DCSR's
        ("unmeasured", None),  # no evaluate benchmark: not guessed
    ]
    summary = summarise(est, cores=2)
    assert summary["serial_seconds"] == 4950.0
    assert summary["unmeasured_jobs"] == 1
    # two-thread jobs fill both cores: wall = serial here
    assert summary["wall_seconds"] == 4950.0
    assert summary["by_rule"]["train"] == {"jobs": 3, "same job": 1, "method rate": 0,
                                           "method median": 1, "rule rate": 0,
                                           "rule median": 1, "unmeasured": 0,
                                           "seconds": 4950.0}  # fmt: skip
    # on four cores the two-thread jobs leave half idle; never below the longest job
    assert summarise(est, cores=4)["wall_seconds"] == 2475.0
    page = render(summary, ["results/table2.csv"], tmp_path, "snakemake -n")
    assert "| train | 3 | 1 | 0 | 1 | 0 | 1 | 0 | 4950 |" in page and "1 unmeasured" in page


def test_a_resumed_training_is_timed_as_the_whole_training(tmp_path):
    # Snakemake's benchmark file times a resumed job's last attempt only (xMoCo at squad: 538 s
    # for steps 150-274 of 274): its report's steps scale it back, as the same job's time and
    # in its method's median; a training that ran through, or has no report, is read as it is.
    _bench(tmp_path, "train/dpr/squad.tsv", 1000.0)
    _bench(tmp_path, "train/xmoco/squad.tsv", 500.0)
    _bench(tmp_path, "reader_train/bm25/none/squad.tsv", 300.0)
    reports = {"results/models/xmoco/squad": {"steps": 250, "resumed_from_step": 150},
               "results/models/dpr/squad": {"steps": 250, "resumed_from_step": None},
               "results/readers/bm25/none/squad": {"steps": 40, "resumed_from_step": 30}}  # fmt: skip
    for stem, rep in reports.items():
        (tmp_path / stem).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f"{stem}.report.json").write_text(json.dumps(rep))
    est = estimate_jobs(parse_dry_run(PLAN), tmp_path)
    assert [(e["basis"], e["seconds"]) for e in est[:3]] == [
        ("same job", 1000.0),
        ("rule median", 1125.0),  # the median of 1000 and xMoCo's 500 x 250 / 100
        ("method median", 1250.0),
    ]
    assert whole_job_seconds(tmp_path, Path("reader_train/bm25/none/squad.tsv"), 300.0) == 1200.0
    assert whole_job_seconds(tmp_path, Path("train/dcsr/squad.tsv"), 7.0) == 7.0  # no report
    assert whole_job_seconds(tmp_path, Path("evaluate/dpr/squad/x.tsv"), 7.0) == 7.0


def _report(root: Path, run: str, rep: dict) -> None:
    path = root / "results/models" / run / "squad.report.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rep))


def _train_job(run: str, cfg: dict) -> str:
    return TRAIN_JOB.format(run=run, jobid=1).replace(
        "Shell command: drpipe train", f"Shell command: drpipe train --cfg '{json.dumps(cfg)}'"
    )


def test_a_planned_training_is_priced_by_the_passages_it_encodes(tmp_path):
    # Reference: DPR with one BM25 negative, 100 examples x 2 epochs x 2 passages in 400 s (1 s a
    # passage); DCSR, sampled to 50 of the set's 100 examples, 1 epoch x 3 passages in 300 s (2 s
    # a passage; its in-passage negatives are sentences of the positive: no passage more).
    dpr_cfg = {"epochs": 2, "hard_negatives": 1, "negative_type": "bm25", "init": "x"}
    _bench(tmp_path, "train/dpr/squad.tsv", 400.0)
    _report(tmp_path, "dpr", {"method": "dpr", "cfg": dpr_cfg, "n_train": 100, "steps": 10})
    dcsr_cfg = {"epochs": 1, "bm25_negatives": 2, "in_passage_negatives": 3, "max_examples": 50}
    _bench(tmp_path, "train/dcsr/squad.tsv", 300.0)
    _report(tmp_path, "dcsr", {"method": "dcsr", "cfg": dcsr_cfg, "n_train": 50,
                               "n_not_sampled": 50})  # fmt: skip
    plan = "".join([
        _train_job("dpr.t3_gold_7", {**dpr_cfg, "hard_negatives": 7, "negative_type": "gold",
                                     "in_batch": False}),
        _train_job("dpr.t3_gold_7_ib", {**dpr_cfg, "hard_negatives": 0, "negative_type": "none"}),
        _train_job("dpr.f1_n50", {**dpr_cfg, "max_examples": 50}),
        _train_job("xmoco.t3_tied", {"epochs": 1, "hard_negatives": 1}),
        _train_job("dcsr.t4_bm25_1", {"epochs": 1, "bm25_negatives": 1}),
        _train_job("dpr_gold7", {"epochs": 1}),
    ])  # fmt: skip
    est = estimate_jobs(parse_dry_run(plan), tmp_path)
    assert [(e["basis"], e["seconds"]) for e in est] == [
        ("method rate", 1600.0),  # 100 x 2 x 8 passages at DPR's 1 s
        ("method rate", 200.0),  # in-batch only: one passage per example
        ("method rate", 200.0),  # 50 sampled examples x 2 x 2
        ("rule rate", 300.0),  # no xMoCo measured: 100 x 1 x 2 at the median of 1 and 2 s
        ("method rate", 400.0),  # the set's 100 examples (not the 50 sampled) x 2 at 2 s
        ("rule median", 350.0),  # no registered method: the train rule's median
    ]


def test_a_training_resuming_from_its_checkpoint_is_priced_for_the_steps_left(tmp_path):
    # Reference: DPR's training, 1000 s. Planned here: the same job stopped at step 60 of 240
    # (its checkpoint's progress record), so 3/4 of it is left; a job whose params changed
    # would discard its checkpoint (whole price), as would one with no record.
    _bench(tmp_path, "train/dpr/squad.tsv", 1000.0)
    work = tmp_path / "work"
    for run in ("dpr", "dpr_gold7"):
        ckpt = work / f"results/models/{run}/squad.ckpt"
        ckpt.mkdir(parents=True)
        (ckpt / "progress.json").write_text(json.dumps({"step": 60, "total_steps": 240}))
    changed = TRAIN_JOB.format(run="dpr_gold7", jobid=4).replace(
        "reason: Missing output files: results/models/dpr_gold7/squad",
        "reason: Params have changed since last execution: results/models/dpr_gold7/squad",
    )
    plan = TRAIN_JOB.format(run="dpr", jobid=3) + changed + TRAIN_JOB.format(run="dcsr", jobid=5)
    est = estimate_jobs(parse_dry_run(plan), tmp_path, work)
    assert [(e["seconds"], e["resumes"]) for e in est] == [
        (750.0, (60, 240)),
        (1000.0, None),
        (1000.0, None),
    ]
    summary = summarise(est, cores=2)
    assert summary["resuming"] == {"results/models/dpr/squad": [60, 240]}
    page = render(summary, ["t"], tmp_path, "snakemake -n t")
    assert "`results/models/dpr/squad` at step 60 of 240" in page


def test_time_a_job_spent_stopped_is_left_out(tmp_path):
    # A shard paused by SIGSTOP for most of its run kept 0.3 of a core where its quiet siblings
    # kept 1.5: it is timed as its CPU seconds at 1.5 cores; a busy-enough job is left as it is.
    timings = {
        Path("encode/dpr/squad/shard-0.tsv"): {"seconds": 100.0, "cpu_seconds": 150.0},
        Path("encode/dpr/squad/shard-1.tsv"): {"seconds": 1000.0, "cpu_seconds": 300.0},
        Path("encode/dpr/squad/shard-2.tsv"): {"seconds": 120.0, "cpu_seconds": 100.0},
        Path("evaluate/dpr/squad/x.tsv"): {"seconds": 5.0, "cpu_seconds": None},
    }
    assert unpaused_seconds(timings) == {
        Path("encode/dpr/squad/shard-0.tsv"): 100.0,
        Path("encode/dpr/squad/shard-1.tsv"): 200.0,
        Path("encode/dpr/squad/shard-2.tsv"): 120.0,  # 0.83 of a core: more than half of 1.5
        Path("evaluate/dpr/squad/x.tsv"): 5.0,
    }
    rel = "encode/dpr/squad/shard-1.tsv"
    path = tmp_path / "results/benchmarks/rules" / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("s\th:m:s\tmax_rss\tcpu_time\n1000.0\t0:16:40\t1.0\t300.0\n")
    _bench(tmp_path, "encode/dpr/squad/shard-0.tsv", 100.0)  # no CPU column: read as it is
    assert job_times(tmp_path)[Path(rel)] == 1000.0  # no sibling's rate to compare with
    (path.parent / "shard-0.tsv").write_text("s\tcpu_time\n100.0\t150.0\n")
    assert job_times(tmp_path)[Path(rel)] == 200.0


def test_single_thread_jobs_share_the_cores(tmp_path):
    est = [{"rule": "r", "output": [], "threads": 1, "basis": "rule median", "seconds": 100.0}
           for _ in range(4)]  # fmt: skip
    assert summarise(est, cores=2)["wall_seconds"] == 200.0


def test_cli_plans_a_real_target_and_times_it_from_a_reference_run(tmp_path, data_mirror):
    ref = tmp_path / "ref"
    _bench(ref, "bm25_index/bm25.tsv", 42.0)
    out = tmp_path / "est.json"
    proc = subprocess.run(
        [sys.executable, "-m", "drpipe.cli", "estimate", "results/metrics/bm25/none/squad-test.json",
         "--workdir", str(tmp_path / "fresh"), "--reference", str(ref), "--out", str(out)],
        capture_output=True, text=True, check=False,
        env={**os.environ, "DATA_MIRROR": str(data_mirror)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    est = json.loads(out.read_text())
    assert est["by_rule"]["bm25_index"]["seconds"] == 42.0
    assert est["by_rule"]["bm25_search"]["unmeasured"] == 1
    assert est["jobs"] == sum(r["jobs"] for r in est["by_rule"].values())
    assert "| bm25_index | 1 |" in proc.stdout
