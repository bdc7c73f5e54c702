"""What a target costs before it is started (``drpipe estimate``; ``make estimate``): the jobs
``snakemake -n`` plans, each timed from the benchmark files of a run that was already made
(``results/benchmarks/rules/``). A planned job whose benchmark file the reference run holds is
timed by that file (the same job, measured); any other job by the median of the reference's
jobs of its rule and method (the run's name before its variant: ``xmoco.f2_q32`` is timed by
xMoCo's trainings, which are slower than DPR's), else of its rule (a rule's jobs still differ in
size: a Table 3 scheme with more negatives trains longer than the median says); a rule the
reference never ran is listed as unmeasured, never guessed. A training resumed from a
checkpoint has a benchmark file of its last attempt only: its report's steps scale that back to
the whole training (``whole_job_seconds``)."""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from drpipe.audit.staleness import dry_run, parse_dry_run, snakemake_command
from drpipe.audit.timings import read_benchmark
from drpipe.io import read_json, write_json
from drpipe.tables.output import write_text

log = logging.getLogger(__name__)

BENCH_ROOT = Path("results/benchmarks/rules")
# Rules whose jobs resume from checkpoints, and the folder of their reports: a job's report is
# its benchmark file's path under the rule's folder, there, ending in .report.json (the rules'
# outputs: train/dpr/squad.tsv -> results/models/dpr/squad.report.json).
RESUMABLE = {"train": Path("results/models"), "reader_train": Path("results/readers")}


def _method(rel: Path) -> str | None:
    """The method of a benchmark file under ``<rule>/``: its run folder's name before the
    variant (``train/xmoco.f2_q32/squad.tsv`` -> ``xmoco``); None for a file directly there."""
    return rel.parts[1].split(".")[0] if len(rel.parts) > 2 else None


def whole_job_seconds(reference: Path, rel: Path, seconds: float) -> float:
    """``seconds`` of the benchmark file ``rel`` (under ``BENCH_ROOT``) as the whole job's: a
    training that resumed at step s of n timed only its last n - s steps, so it is scaled by
    n / (n - s) (start-up and validation scale with it: an approximation)."""
    root = RESUMABLE.get(rel.parts[0])
    if root is None or len(rel.parts) < 2:
        return seconds
    report = reference / root / Path(*rel.parts[1:]).with_suffix(".report.json")
    try:
        rep = read_json(report)
    except (OSError, ValueError):
        return seconds
    start, steps = rep.get("resumed_from_step"), rep.get("steps")
    if not isinstance(start, int) or not isinstance(steps, int) or not 0 < start < steps:
        return seconds
    return seconds * steps / (steps - start)


def job_times(reference: Path) -> dict[Path, float]:
    """Wall seconds of every benchmarked job of the reference run (a resumed training as the
    whole training), by its benchmark file relative to ``BENCH_ROOT``."""
    out: dict[Path, float] = {}
    root = reference / BENCH_ROOT
    for tsv in sorted(root.rglob("*.tsv")) if root.is_dir() else []:
        timing = read_benchmark(tsv)
        if timing and timing["seconds"] is not None:
            rel = tsv.relative_to(root)
            out[rel] = whole_job_seconds(reference, rel, timing["seconds"])
    return out


def rule_times(times: dict[Path, float]) -> dict[tuple[str, str | None], list[float]]:
    """``job_times`` per (rule, method) and per (rule, None) for the whole rule."""
    out: dict[tuple[str, str | None], list[float]] = defaultdict(list)
    for rel, seconds in times.items():
        out[(rel.parts[0], None)].append(seconds)
        if (method := _method(rel)) is not None:
            out[(rel.parts[0], method)].append(seconds)
    return dict(out)


def estimate_jobs(jobs: list[dict[str, Any]], reference: Path) -> list[dict[str, Any]]:
    """Each planned job with its seconds and where they come from (``same job``, ``method
    median``, ``rule median``, or ``unmeasured`` with no seconds)."""
    times = job_times(reference)
    medians = {key: statistics.median(t) for key, t in rule_times(times).items()}
    out = []
    for job in jobs:
        bench = job.get("benchmark")
        inside = bench is not None and Path(bench).is_relative_to(BENCH_ROOT)
        rel = Path(bench).relative_to(BENCH_ROOT) if inside else None
        method = _method(rel) if rel is not None else None
        # a benchmark file outside BENCH_ROOT is no rule's median: read it on its own
        timing = read_benchmark(reference / bench) if bench and not inside else None
        if rel in times:
            basis, seconds = "same job", times[rel]
        elif timing and timing["seconds"] is not None:
            basis, seconds = "same job", timing["seconds"]
        elif method is not None and (job["rule"], method) in medians:
            basis, seconds = "method median", medians[(job["rule"], method)]
        elif (job["rule"], None) in medians:
            basis, seconds = "rule median", medians[(job["rule"], None)]
        else:
            basis, seconds = "unmeasured", None
        out.append({"rule": job["rule"], "output": job["output"], "threads": job["threads"],
                    "basis": basis, "seconds": seconds})  # fmt: skip
    return out


def summarise(estimates: list[dict[str, Any]], cores: int) -> dict[str, Any]:
    """Per rule: jobs by basis and seconds; in all: the serial sum, and the wall time on
    ``cores`` if they stay busy (job seconds x threads / cores, never below the longest job)."""
    rules: dict[str, dict[str, Any]] = {}
    for e in estimates:
        r = rules.setdefault(e["rule"], {"jobs": 0, "same job": 0, "method median": 0,
                                         "rule median": 0, "unmeasured": 0, "seconds": 0.0})  # fmt: skip
        r["jobs"] += 1
        r[e["basis"]] += 1
        r["seconds"] += e["seconds"] or 0.0
    timed = [e for e in estimates if e["seconds"] is not None]
    serial = sum(e["seconds"] for e in timed)
    busy = sum(e["seconds"] * min(e["threads"], cores) for e in timed) / cores
    wall = max([busy] + [e["seconds"] for e in timed])
    return {
        "jobs": len(estimates),
        "unmeasured_jobs": len(estimates) - len(timed),
        "serial_seconds": round(serial, 1),
        "cores": cores,
        "wall_seconds": round(wall, 1),
        "by_rule": {k: {**v, "seconds": round(v["seconds"], 1)} for k, v in sorted(rules.items())},
    }


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def render(summary: dict[str, Any], targets: list[str], reference: Path, command: str) -> str:
    lines = [
        f"# Estimate: {' '.join(targets)}",
        "",
        f"Planned by `{command}`; timed from the benchmark files of `{reference}`.",
        "",
        "| rule | jobs | same job measured | method median | rule median | unmeasured | seconds |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for rule, r in summary["by_rule"].items():
        lines.append(f"| {rule} | {r['jobs']} | {r['same job']} | {r['method median']} | "
                     f"{r['rule median']} | {r['unmeasured']} | {r['seconds']:.0f} |")  # fmt: skip
    lines += [
        "",
        f"{summary['jobs']} jobs; {summary['unmeasured_jobs']} unmeasured (not counted). "
        f"One at a time: {_hours(summary['serial_seconds'])}; on {summary['cores']} cores, if "
        f"they stay busy: about {_hours(summary['wall_seconds'])}.",
    ]
    return "\n".join(lines) + "\n"


def _cmd_estimate(args: argparse.Namespace) -> int:
    workdir = Path(args.workdir).resolve()
    reference = Path(args.reference).resolve() if args.reference else workdir
    extra = shlex.split(args.snakemake_args or "")
    code, text = dry_run(workdir, args.targets, extra, args.cores)
    if code != 0:
        raise SystemExit(f"error: snakemake -n failed in {workdir}:\n{text[-4000:]}")
    jobs = [j for j in parse_dry_run(text) if j["rule"] != "all"]
    summary = summarise(estimate_jobs(jobs, reference), args.cores)
    command = shlex.join(snakemake_command(workdir, extra, args.targets, ["-n"]))
    page = render(summary, args.targets, reference, command)
    print(page, end="")
    if args.out:
        write_json(args.out, {"targets": args.targets, "reference": str(reference),
                              "command": command, **summary})  # fmt: skip
    if args.markdown:
        write_text(page, args.markdown)
    return 0


def _cores(text: str) -> int:
    if text == "all":
        return os.cpu_count() or 1
    try:
        cores = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--cores takes a number or 'all', not {text!r}") from None
    if cores < 1:
        raise argparse.ArgumentTypeError(f"--cores must be at least 1, not {cores}")
    return cores


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("estimate", help="time what a target would run, from a finished run's "
                       "benchmark files")  # fmt: skip
    p.add_argument("targets", nargs="+", help="the Snakemake targets")
    p.add_argument("--workdir", default=".", help="where the target would be built (default .)")
    p.add_argument("--reference", help="a run's working directory whose results/benchmarks "
                   "time the jobs (default: --workdir)")  # fmt: skip
    p.add_argument("--snakemake-args", default="",
                   help="arguments of the user's snakemake command (config files, --config)")  # fmt: skip
    p.add_argument("--cores", type=_cores, default=2,
                   help="cores the run would get, or 'all' (default 2)")  # fmt: skip
    p.add_argument("--out", help="also write the estimate as JSON")
    p.add_argument("--markdown", help="also write the page as Markdown")
    p.set_defaults(func=_cmd_estimate)
