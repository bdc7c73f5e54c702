"""A Snakemake plan as shell scripts, for a machine that has the package but not Snakemake.

The GPU machine lent to this project (docs/measured-cuda.md, section 12) has PyTorch and
transformers but no Snakemake, no pyserini and no network. To run a `squad` target's GPU jobs
there unchanged, the plan is made here, where Snakemake is: ``snakemake -n -p`` (``-p``
prints each job's shell command) after the CPU-only jobs (fetch to mining) have run.
This script turns that output into one script per job, grouped into stages by their
dependencies (stage N needs only jobs of stages below N), which `run_jobs.sh` runs in order,
several jobs of a stage at once. Each script makes its output and log folders (Snakemake's
part) and appends its wall time to ``results/logs/_device_times.tsv``.

Run: ``python benchmarks/device/plan_jobs.py DRYRUN.txt OUTDIR`` -> ``OUTDIR/stage-K/NNN-rule.sh``
and ``OUTDIR/plan.json`` (each job's stage, rule, outputs, inputs and script).
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from drpipe.audit.staleness import parse_dry_run


def parse_plan(text: str) -> list[dict]:
    """Every job of a dry run printed with its shell command (the audit's parser of the same
    output): rule, inputs, outputs, logs, cmd."""
    jobs = [
        {k: job[k] for k in ("rule", "input", "output", "log")} | {"cmd": job["shell"]}
        for job in parse_dry_run(text, commands=True)
        if job["shell"]
    ]
    if not jobs:
        raise ValueError("no job with a shell command in the plan (was it `snakemake -n -p`?)")
    return jobs


def stages(jobs: list[dict]) -> list[int]:
    """Each job's stage: 0 when no planned job makes any of its inputs, else one more than the
    highest stage among the jobs that do (an input inside a directory output counts)."""
    maker = {out.rstrip("/"): i for i, job in enumerate(jobs) for out in job["output"]}

    def makers(job: dict) -> set[int]:
        # The input itself or a folder above it (a directory output) made by a planned job.
        return {
            maker[str(p)]
            for path in job["input"]
            for p in (Path(path), *Path(path).parents)
            if str(p) in maker
        }

    deps = [makers(job) for job in jobs]
    stage: dict[int, int] = {}

    def depth(i: int, seen: tuple[int, ...] = ()) -> int:
        if i in seen:
            raise ValueError(f"plan has a cycle through {jobs[i]['rule']} {jobs[i]['output']}")
        if i not in stage:
            stage[i] = max((depth(d, (*seen, i)) + 1 for d in deps[i]), default=0)
        return stage[i]

    return [depth(i) for i in range(len(jobs))]


def script(job: dict) -> str:
    """A job's shell script: its folders, its command unchanged, its wall time recorded."""
    dirs = sorted({str(Path(p).parent) for p in job["output"] + job["log"]})
    first = job["output"][0] if job["output"] else job["rule"]
    return (
        "set -euo pipefail\n"
        f"mkdir -p {' '.join(shlex.quote(d) for d in dirs)} results/logs\n"
        "start=$(date +%s%N)\n"
        f"{job['cmd']}\n"
        f'printf "%s\\t%s\\t%s\\n" {shlex.quote(job["rule"])} {shlex.quote(first)} '
        '"$(( ($(date +%s%N) - start) / 1000000 ))" >> results/logs/_device_times.tsv\n'
    )


def write_plan(jobs: list[dict], outdir: Path) -> list[dict]:
    """Write each job's script under ``outdir/stage-K/`` and ``outdir/plan.json``."""
    plan = []
    for n, (job, k) in enumerate(zip(jobs, stages(jobs), strict=True), start=1):
        path = outdir / f"stage-{k}" / f"{n:03d}-{job['rule']}.sh"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(script(job))
        plan.append({"stage": k, "script": str(path.relative_to(outdir)), **job})
    (outdir / "plan.json").write_text(json.dumps(plan, indent=1) + "\n")
    return plan


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    dry, outdir = Path(argv[0]), Path(argv[1])
    plan = write_plan(parse_plan(dry.read_text()), outdir)
    counts: dict[tuple[int, str], int] = {}
    for job in plan:
        counts[job["stage"], job["rule"]] = counts.get((job["stage"], job["rule"]), 0) + 1
    for (k, rule), n in sorted(counts.items()):
        print(f"stage {k}: {n} x {rule}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
