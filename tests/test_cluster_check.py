"""`drpipe cluster-check`'s planning half: the requests read from a dry run and grouped, each
distinct one given to sbatch once. The scheduler's half, `sbatch --test-only` against a real
SLURM, is in tests/test_slurm.py."""

from __future__ import annotations

import pytest

from drpipe.cluster_check import (
    check,
    earlier_jobs,
    job_requests,
    refuse_if_earlier_jobs,
    render,
    sbatch_args,
)

DRY_RUN = """\
Job stats:
job      count
train        2
evaluate     1

localrule fetch:
    output: results/downloads/x
    resources: tmpdir=<TBD>

rule train:
    input: a
    output: results/models/dpr/nq, results/models/dpr/nq.report.json
    resources: tmpdir=<TBD>, mem_mb=256000, mem=256 GB, cpus_per_task=32, runtime=4320, slurm_partition=gpu, gpu=8, nodes=1

rule train:
    output: results/models/dpr/multi, results/models/dpr/multi.report.json
    resources: tmpdir=<TBD>, mem_mb=256000, mem=256 GB, cpus_per_task=32, runtime=4320, slurm_partition=gpu, gpu=8, nodes=1

rule evaluate:
    output: results/metrics/dpr/nq/nq-test.json
    resources: tmpdir=<TBD>, mem_mb=64000, mem=64 GB, cpus_per_task=4, runtime=120, slurm_partition=cpu, gpu=0

localrule all:
    input: results/table2.csv
"""  # noqa: E501


def test_requests_are_read_per_job_and_local_rules_ask_for_nothing():
    jobs = job_requests(DRY_RUN)
    assert [j["rule"] for j in jobs] == ["train", "train", "evaluate"]
    assert jobs[0]["example"] == "results/models/dpr/nq"
    assert sbatch_args(jobs[0]["resources"]) == (
        "-p", "gpu", "-t", "4320", "--mem", "256000", "--cpus-per-task", "32", "--nodes", "1",
        "--gpus", "8",
    )  # fmt: skip
    # No GPU option for gpu=0, nothing for a value Snakemake decides at run time.
    assert "--gpus" not in sbatch_args(jobs[2]["resources"])
    assert sbatch_args({"tmpdir": "<TBD>", "mem_mb": "<TBD>"}) == ()


REFUSED = "Requested node configuration is not available"


def test_each_distinct_request_is_asked_once_and_a_refusal_names_rules_jobs_and_reason():
    asked = []

    def sbatch(args):
        asked.append(args)
        if "--gpus" in args:
            return 1, f"sbatch: error: Batch job submission failed: {REFUSED}\n"
        return 0, "sbatch: Job 3 to start at 2026-11-28T10:00:00 using 4 processors"

    result = check(job_requests(DRY_RUN), sbatch)
    assert len(asked) == 2 == result["requests"] and result["jobs"] == 3
    [refused] = result["refused"]
    assert refused["rules"] == ["train"] and refused["jobs"] == 2
    text = render(result)
    assert "1 refused" in text
    assert "rule train (2 jobs, e.g. results/models/dpr/nq)" in text
    assert "--gpus 8" in text and REFUSED in text
    assert "0 refused" in render(check(job_requests(DRY_RUN), lambda a: (0, "ok")))


def test_a_restart_stops_beside_an_earlier_runs_live_jobs_of_this_folder(tmp_path):
    here, elsewhere = str(tmp_path.resolve()), "/some/other/run"
    queue = "\n".join([
        f"41|RUNNING|rule_train_wildcards_dpr_nq|{here}",
        f"42|SUSPENDED|rule_evaluate_wildcards_dpr_nq_nq_test|{here}",
        f"43|RUNNING|rule_train_wildcards_dpr_nq|{elsewhere}",  # another run's folder
        f"44|RUNNING|interactive|{here}",  # not a rule's job
    ])  # fmt: skip
    assert [j["id"] for j in earlier_jobs(tmp_path, lambda: queue)] == ["41", "42"]
    with pytest.raises(SystemExit, match=r"2 SLURM job\(s\).*41 \(rule_train.*scancel 41 42"):
        refuse_if_earlier_jobs(tmp_path, lambda: queue)
    refuse_if_earlier_jobs(tmp_path, lambda: f"43|RUNNING|rule_x|{elsewhere}")  # nothing here
