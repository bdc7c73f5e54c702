"""benchmarks/device: a real `snakemake -n` plan as per-job scripts in dependency stages, and
the stage runner running them (the fetch stage, on real mirror files)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from workflow_util import REPO, mirror_dir, snakemake

sys.path.insert(0, str(REPO / "benchmarks" / "device"))
import plan_jobs  # noqa: E402

TARGET = "results/qa/squad/test.parquet"


@pytest.fixture(scope="module")
def plan(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    work = tmp_path_factory.mktemp("device_plan")
    proc = snakemake(work, "-n", "-p", TARGET)
    jobs = plan_jobs.parse_plan(proc.stdout + proc.stderr)
    return work, plan_jobs.write_plan(jobs, work / "plan")


def test_every_planned_job_gets_its_command_and_a_stage_after_its_inputs(plan) -> None:
    work, jobs = plan
    assert sorted(j["rule"] for j in jobs) == ["documents"] * 3 + ["fetch"] * 3 + ["qa_load"]
    stage_of = {out: j["stage"] for j in jobs for out in j["output"]}
    for job in jobs:
        made_before = [stage_of[p] for p in job["input"] if p in stage_of]
        assert job["stage"] == (max(made_before) + 1 if made_before else 0), job
        text = (work / "plan" / job["script"]).read_text()
        assert job["cmd"] in text and job["cmd"].startswith("drpipe ")
        subprocess.run(["bash", "-n", str(work / "plan" / job["script"])], check=True)
    assert {j["rule"]: j["stage"] for j in jobs} == {"fetch": 0, "documents": 1, "qa_load": 2}
    assert json.loads((work / "plan" / "plan.json").read_text()) == jobs


def test_a_plan_without_shell_commands_is_refused() -> None:
    with pytest.raises(ValueError, match="no job with a shell command"):
        plan_jobs.parse_plan("rule fetch:\n    output: a\n")


def test_the_runner_runs_a_stage_as_snakemake_would(plan, tmp_path: Path) -> None:
    work, jobs = plan
    # One job (each drpipe start costs seconds): the SQuAD dev fetch, its folders made first.
    fetched = [j for j in jobs if j["rule"] == "fetch" and "squad_dev" in j["output"][0]]
    for job in fetched:
        (tmp_path / "plan" / Path(job["script"]).parent).mkdir(parents=True, exist_ok=True)
        shutil.copy(work / "plan" / job["script"], tmp_path / "plan" / job["script"])
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(
        ["bash", str(REPO / "benchmarks" / "device" / "run_jobs.sh"), "plan", "2"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0 and "stage-0: " in proc.stdout, proc.stdout + proc.stderr
    assert "failed" not in proc.stdout, (tmp_path / "results/logs/_device_stage-0.err").read_text()
    for job in fetched:
        out = tmp_path / job["output"][0]
        record = json.loads((tmp_path / job["output"][1]).read_text())
        assert hashlib.sha256(out.read_bytes()).hexdigest() == record["sha256"], job
        assert out.read_bytes() == (mirror_dir() / record["origin"]["relative"]).read_bytes()
    times = (tmp_path / "results/logs/_device_times.tsv").read_text().splitlines()
    assert sorted(line.split("\t")[1] for line in times) == sorted(j["output"][0] for j in fetched)
