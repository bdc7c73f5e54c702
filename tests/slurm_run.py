"""The fake-SLURM run that test_slurm.py checks, built by the session's background builder
(tiny_run.py) beside the other runs: it is mostly waiting (the executor plugin's status checks,
a job cancelled and resubmitted), which the builder overlaps with its own jobs, where the test
used to hold the session's process for ~3 minutes.

Also the paper scale's whole plan with the SLURM profile (``build_paper_plan``, a dry run of
every table and Table 4's readers, ~25 s of CPU): what each job would ask SLURM for.

A copy of the tiny DPR run, its mining forced to rerun (one CPU job and every GPU rule from
training to retrieval), through the real snakemake-executor-plugin-slurm with a fake SLURM
(``tests/fake_slurm``: sbatch, squeue, sacct, scancel, srun, ... first on PATH); the first
training job is cancelled with the fake ``scancel`` once it has run a few seconds. What the run
did is left in its folder for the test: ``result.json`` (exit status, log tail, the cancelled
job), the fake SLURM's state (``slurm/``) and the run (``work/``).
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml
from workflow_util import REPO, copy_run, mirror_dir

SNAKEMAKE = Path(sys.executable).with_name("snakemake")
FAKE = Path(__file__).resolve().parent / "fake_slurm"
PROFILE = REPO / "profiles" / "slurm"
TARGET = "results/runs/dpr/squad/squad-test.parquet"
FORCED = "mine"  # a CPU rule; everything after it up to TARGET reruns with it
# The profile's train jobs ask for 8 GPUs; `drpipe train` starts one process per GPU, which a
# 2-core test machine cannot afford: this run asks for one (still a GPU job to SLURM). The
# change goes into a copy of the profile: `--set-resources` on the command line would replace
# the profile's whole set-resources block (every rule back to the defaults), which is what
# this test first caught.
OVERRIDES = {"train": {"gpu": 1}}


def env_with(**extra: str) -> dict[str, str]:
    """This process's environment with ``extra``, its PATH (if any) and Snakemake's first."""
    env = {**os.environ, **extra}
    env["PATH"] = os.pathsep.join(
        p for p in (extra.get("PATH"), str(SNAKEMAKE.parent), os.environ["PATH"]) if p
    )
    return env


def profile() -> dict:
    return yaml.safe_load((PROFILE / "config.yaml").read_text())


def profile_with_overrides(where: Path) -> Path:
    """profiles/slurm with OVERRIDES applied (everything else as the repository has it)."""
    prof = profile()
    for rule, values in OVERRIDES.items():
        prof["set-resources"][rule] = {**prof["set-resources"][rule], **values}
    where.mkdir(parents=True)
    (where / "config.yaml").write_text(yaml.safe_dump(prof))
    return where


def requests(state: Path) -> list[dict]:
    """What the fake SLURM commands were asked, in order."""
    path = state / "requests.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def rule_of(request: dict) -> str:
    m = re.match(r"rule_(\w+?)(?:_wildcards_|$)", request["options"].get("--comment", ""))
    assert m, request
    return m.group(1)


def _cancel_first(rule: str, state: Path, env: dict, done: threading.Event, out: dict) -> None:
    """Wait for the first job of ``rule`` to run for a few seconds, then scancel it."""
    while not done.is_set():
        for req in requests(state):
            if req["cmd"] == "sbatch" and rule_of(req) == rule:
                job = json.loads((state / "jobs" / f"{req['job_id']}.json").read_text())
                if job["state"] == "RUNNING" and time.time() - req["time"] > 3:
                    subprocess.run([str(FAKE / "scancel"), req["job_id"]], env=env, check=True)
                    out["cancelled"] = req["job_id"]
                    return
        time.sleep(0.5)


def build_fake_slurm_run(dpr_run: Path, where: Path, overlay: dict) -> Path:
    """The fake-SLURM run of a copy of ``dpr_run`` (built with ``overlay``) in ``where``, its
    jobs on one thread each (two-thread torch jobs beside the builder's spin against them)."""
    where.mkdir()
    state, work = where / "slurm", copy_run(dpr_run, where / "work")
    (work / "tiny.yaml").write_text(yaml.safe_dump(overlay))
    env = env_with(
        PATH=str(FAKE),
        FAKE_SLURM_DIR=str(state),
        FAKE_SLURM_PYTHON=sys.executable,
        DATA_MIRROR=str(mirror_dir()),
        HF_HUB_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
    )
    profile_dir = profile_with_overrides(where / "profile")
    cmd = [str(SNAKEMAKE), TARGET, "--forcerun", FORCED, "--profile", str(profile_dir),
           "-s", str(REPO / "Snakefile"), "--directory", str(work), "--sdm", "env-modules",
           "--jobs", "2", "--max-threads", "1", "--slurm-init-seconds-before-status-checks",
           "1", "--latency-wait", "5", "--configfile", str(REPO / "config.yaml"),
           str(work / "tiny.yaml")]  # fmt: skip
    done, killed = threading.Event(), {}
    killer = threading.Thread(target=_cancel_first, args=("train", state, env, done, killed))
    killer.start()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3000)
    finally:
        done.set()
        killer.join()
    result = {"returncode": proc.returncode, "log": proc.stdout[-3000:] + proc.stderr[-6000:],
              "cancelled": killed.get("cancelled")}  # fmt: skip
    (where / "result.json").write_text(json.dumps(result, indent=1))
    return where


# Every paper-scale table, Table 4's readers and DCSR's hard-negative trainings.
PAPER_PLAN_TARGETS = ("results/run_summary.md", "results/table4.csv")


def paper_plan_cmd(workdir: Path, *targets: str) -> list[str]:
    """The paper scale's dry run of ``targets`` with the SLURM profile, in ``workdir``."""
    # Conda is absent on these machines: environment modules instead (no rule declares any).
    return [str(SNAKEMAKE), "-n", "-p", *targets, "--profile", str(PROFILE), "--config", "scale=paper",
            "-s", str(REPO / "Snakefile"), "--directory", str(workdir),
            "--sdm", "env-modules"]  # fmt: skip


def per_job(value: object) -> bool:
    """Whether a profile value is an expression Snakemake evaluates per job (a partition that
    follows the index type, DCSR's index memory), not the value itself."""
    return " if " in str(value)


def build_paper_plan(where: Path) -> Path:
    """The paper scale's dry run of PAPER_PLAN_TARGETS with the SLURM profile, its output in
    ``where/plan.txt`` (each job with the resources the executor plugin would submit and its
    shell command) and its time in ``where/timing.json``: the one paper-scale plan that the
    tests of the paper scale's structure read."""
    where.mkdir()
    cmd = paper_plan_cmd(where / "work", *PAPER_PLAN_TARGETS)
    env = env_with(DATA_MIRROR=str(mirror_dir()))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert proc.returncode == 0, proc.stderr[-4000:]
    (where / "plan.txt").write_text(proc.stdout + proc.stderr)
    # CPU time, not wall: other processes on a shared 2-core machine stretch wall time.
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    (where / "timing.json").write_text(json.dumps({"wall": wall, "cpu": cpu}))
    return where
