"""Every job's SLURM request judged by the scheduler before anything runs: ``drpipe cluster-check``.

A request a cluster cannot satisfy (more memory, CPUs or GPUs than a node of its partition
has, a partition that does not exist) fails only when its job is submitted, which at paper
scale may be after days of GPU work. This asks the scheduler first. It makes a dry run of the
targets with the user's profile, which prints each job's resources. Each distinct request
(partition, memory, CPUs, GPUs, time, nodes, account) goes once to ``sbatch --test-only``,
which checks it and submits nothing. The report names each refused request, its rules and
jobs, and sbatch's reason.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from drpipe.audit.staleness import dry_run

# Snakemake resource -> sbatch option, as snakemake-executor-plugin-slurm submits them.
OPTIONS = (
    ("slurm_partition", "-p"),
    ("slurm_account", "-A"),
    ("runtime", "-t"),
    ("mem_mb", "--mem"),
    ("cpus_per_task", "--cpus-per-task"),
    ("nodes", "--nodes"),
    ("gpu", "--gpus"),
)


def planned_resources(text: str) -> list[dict[str, Any]]:
    """Each job of a ``snakemake -n`` output: its rule, whether it is a local rule, its outputs
    and the resources Snakemake would submit it with."""
    jobs = []
    for block in re.split(r"^(?=(?:local)?rule \w+:$)", text, flags=re.M):
        head = re.match(r"(local)?rule (\w+):$", block, flags=re.M)
        if not head:
            continue
        fields = dict(re.findall(r"^    (\w+): (.*)$", block, flags=re.M))
        jobs.append({
            "rule": head.group(2),
            "local": bool(head.group(1)),
            "output": [o.strip() for o in fields.get("output", "").split(",") if o.strip()],
            "resources": dict(re.findall(r"(\w+)=([^,]+)", fields.get("resources", ""))),
        })  # fmt: skip
    return jobs


def job_requests(text: str) -> list[dict[str, Any]]:
    """The jobs of a ``snakemake -n`` output that go to the cluster (local rules run where
    Snakemake runs: no request), each with its first output as ``example``."""
    return [{**j, "example": j["output"][0] if j["output"] else ""}
            for j in planned_resources(text) if not j["local"] and j["rule"] != "all"]  # fmt: skip


def sbatch_args(resources: dict[str, str]) -> tuple[str, ...]:
    """The options of ``resources`` that decide whether SLURM can place the job."""
    args: list[str] = []
    for key, opt in OPTIONS:
        value = resources.get(key, "").strip()
        if not value or value == "<TBD>" or (key == "gpu" and value == "0"):
            continue
        args += [opt, value]
    return tuple(args)


def check(
    jobs: list[dict[str, Any]],
    sbatch: Callable[[tuple[str, ...]], tuple[int, str]],
) -> dict[str, Any]:
    """Each distinct request of ``jobs`` given to ``sbatch`` once; what it refused."""
    by_request: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for job in jobs:
        by_request.setdefault(sbatch_args(job["resources"]), []).append(job)
    refused = []
    for args, group in by_request.items():
        code, message = sbatch(args)
        if code != 0:
            rules = sorted({j["rule"] for j in group})
            refused.append({"request": list(args), "rules": rules, "jobs": len(group),
                            "example": group[0]["example"], "reason": message.strip()})  # fmt: skip
    return {"jobs": len(jobs), "requests": len(by_request), "refused": refused}


def sbatch_test_only(args: tuple[str, ...]) -> tuple[int, str]:
    cmd = ["sbatch", "--test-only", *args, "--wrap", "true"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except FileNotFoundError as err:
        raise SystemExit("cluster-check: no `sbatch` here; run it where you submit jobs") from err
    return proc.returncode, proc.stderr or proc.stdout


def render(result: dict[str, Any]) -> str:
    lines = [f"{result['jobs']} jobs, {result['requests']} distinct requests checked with "
             f"`sbatch --test-only`: {len(result['refused'])} refused."]  # fmt: skip
    for r in result["refused"]:
        reason = " ".join(r["reason"].split())
        lines.append(f"- rule {', '.join(r['rules'])} ({r['jobs']} jobs, e.g. {r['example']}): "
                     f"sbatch {shlex.join(r['request'])}: {reason}")  # fmt: skip
    if result["refused"]:
        lines.append("Change these rules' resources in the profile (set-resources), or their "
                     "partition, before the run.")  # fmt: skip
    return "\n".join(lines)


# ---- jobs an earlier Snakemake left behind

LIVE_STATES = "PENDING,RUNNING,CONFIGURING,COMPLETING,SUSPENDED,REQUEUED,RESIZING"


def earlier_jobs(workdir: Path, squeue: Callable[[], str] | None = None) -> list[dict[str, str]]:
    """This folder's jobs still queued or running (a rule's job, as the executor plugin
    submits them, whose working directory is ``workdir``): at a new Snakemake's start, they
    belong to an earlier one that was killed or lost its connection."""
    text = (squeue or _squeue)()
    jobs, here = [], str(Path(workdir).resolve())
    for line in text.splitlines():
        parts = line.strip().split("|", 3)
        if len(parts) == 4 and parts[2].startswith("rule_") and parts[3] == here:
            jobs.append({"id": parts[0], "state": parts[1], "comment": parts[2]})
    return jobs


def _squeue() -> str:
    cmd = ["squeue", "--me", "--noheader", f"--states={LIVE_STATES}", "--format=%i|%T|%k|%Z"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    return proc.stdout if proc.returncode == 0 else ""


def refuse_if_earlier_jobs(workdir: Path, squeue: Callable[[], str] | None = None) -> None:
    """Stop a Snakemake that would submit again what an earlier one's jobs are still doing
    (two jobs writing the same files): Snakemake does not know about them, and marks their
    outputs incomplete."""
    jobs = earlier_jobs(workdir, squeue)
    if jobs:
        listed = ", ".join(f"{j['id']} ({j['comment']}, {j['state']})" for j in jobs)
        raise SystemExit(
            f"{len(jobs)} SLURM job(s) of an earlier run of {Path(workdir).resolve()} are still "
            f"queued or running: {listed}. Starting now would submit them again beside "
            f"themselves. Wait for them to end (squeue --me), or cancel them (scancel "
            f"{' '.join(j['id'] for j in jobs)}), then start again."
        )


def _cmd(args: argparse.Namespace) -> int:
    extra = shlex.split(args.snakemake_args)
    code, text = dry_run(args.directory, args.targets, extra)
    if code != 0:
        raise SystemExit(f"cluster-check: snakemake -n failed:\n{text[-4000:]}")
    result = check(job_requests(text), sbatch_test_only)
    print(render(result))
    return 1 if result["refused"] else 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cluster-check", help="ask SLURM whether it can run every job's request",
                       description=__doc__)  # fmt: skip
    p.add_argument("targets", nargs="+", help="the targets you will run, e.g. results/table2.csv")
    p.add_argument("--snakemake-args", default="--profile profiles/slurm",
                   help="your snakemake arguments (profile, --config); default: "
                        "--profile profiles/slurm")  # fmt: skip
    p.add_argument("--directory", type=Path, default=Path("."), help="the run's folder")
    p.set_defaults(func=_cmd)
