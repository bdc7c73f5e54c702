"""What a target costs before it is started (``drpipe estimate``; ``make estimate``): the jobs
``snakemake -n`` plans, each timed from the benchmark files of a run that was already made
(``results/benchmarks/rules/``). A planned job whose benchmark file the reference run holds is
timed by that file (the same job, measured). A planned training is priced by its work: the
passages it encodes with gradients (examples x epochs x ``passages_per_example``:
DPR's Gold #N=7 encodes eight per question, its in-batch schemes one) times the seconds per
such passage of the reference's trainings of its method (the run's name before its variant:
``xmoco.f2_q32`` by xMoCo's, which are slower than DPR's), else of every method's. Any other
job takes the median of the reference's jobs of its rule and method, else of its rule; a rule
the reference never ran is listed as unmeasured, never guessed. Time a reference job spent
stopped or sharing the cores is left out (``unpaused_seconds``). A training resumed from a
checkpoint has a benchmark file of its last attempt only: its report's steps scale that back to
the whole training (``whole_job_seconds``). A planned training that will resume from a
checkpoint in the folder being planned (a run stopped part-way; its only reason to run is its
missing or incomplete output) is priced for the steps it has left (``steps_left``)."""

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
from drpipe.methods import method_class, method_names
from drpipe.tables.output import write_text
from drpipe.training.settings import DEFAULTS as TRAIN_DEFAULTS
from drpipe.training.settings import checkpoint_progress

log = logging.getLogger(__name__)

BENCH_ROOT = Path("results/benchmarks/rules")
# Rules whose jobs resume from checkpoints, and the folder of their reports: a job's report is
# its benchmark file's path under the rule's folder, there, ending in .report.json (the rules'
# outputs: train/dpr/squad.tsv -> results/models/dpr/squad.report.json).
RESUMABLE = {"train": Path("results/models"), "reader_train": Path("results/readers")}
BASES = ("same job", "method rate", "method median", "rule rate", "rule median", "unmeasured")
# The reasons a resumable job reruns that keep its checkpoint usable: any other (changed
# params, code or inputs) changes what the checkpoint belongs to, and the run starts afresh.
RESUMING_REASONS = {"missing output", "incomplete"}


def _method(rel: Path) -> str | None:
    """The method of a benchmark file under ``<rule>/``: its run folder's name before the
    variant (``train/xmoco.f2_q32/squad.tsv`` -> ``xmoco``); None for a file directly there."""
    return rel.parts[1].split(".")[0] if len(rel.parts) > 2 else None


def job_report(reference: Path, rel: Path) -> dict[str, Any] | None:
    """The report of the resumable job whose benchmark file is ``rel`` (under ``BENCH_ROOT``),
    if the reference holds one."""
    root = RESUMABLE.get(rel.parts[0])
    if root is None or len(rel.parts) < 2:
        return None
    try:
        rep = read_json(reference / root / Path(*rel.parts[1:]).with_suffix(".report.json"))
    except (OSError, ValueError):
        return None
    return rep if isinstance(rep, dict) else None


def whole_job_seconds(reference: Path, rel: Path, seconds: float) -> float:
    """``seconds`` of the benchmark file ``rel`` (under ``BENCH_ROOT``) as the whole job's: a
    training that resumed at step s of n timed only its last n - s steps, so it is scaled by
    n / (n - s) (start-up and validation scale with it: an approximation)."""
    rep = job_report(reference, rel)
    if rep is None:
        return seconds
    start, steps = rep.get("resumed_from_step"), rep.get("steps")
    if not isinstance(start, int) or not isinstance(steps, int) or not 0 < start < steps:
        return seconds
    return seconds * steps / (steps - start)


def unpaused_seconds(timings: dict[Path, dict[str, Any]]) -> dict[Path, float]:
    """Wall seconds of each benchmark (by its path under ``BENCH_ROOT``) less time the job spent
    stopped or starved: a job that kept fewer than half the cores its rule's busiest job kept
    (CPU seconds / wall seconds; a run paused by SIGSTOP, or sharing the machine, keeps fewer)
    is timed as its CPU seconds at that busiest rate."""
    rates: dict[str, float] = {}
    for rel, t in timings.items():
        if t["seconds"] and t.get("cpu_seconds"):
            rule = rel.parts[0]
            rates[rule] = max(rates.get(rule, 0.0), t["cpu_seconds"] / t["seconds"])
    out = {}
    for rel, t in timings.items():
        cpu, best = t.get("cpu_seconds"), rates.get(rel.parts[0])
        slow = cpu and best and t["seconds"] and cpu / t["seconds"] < best / 2
        out[rel] = cpu / best if slow else t["seconds"]
    return out


def job_times(reference: Path) -> dict[Path, float]:
    """Seconds of every benchmarked job of the reference run (less paused time,
    ``unpaused_seconds``; a resumed training as the whole training), by its benchmark file
    relative to ``BENCH_ROOT``."""
    root = reference / BENCH_ROOT
    timings = {}
    for tsv in sorted(root.rglob("*.tsv")) if root.is_dir() else []:
        timing = read_benchmark(tsv)
        if timing and timing["seconds"] is not None:
            timings[tsv.relative_to(root)] = timing
    return {
        rel: whole_job_seconds(reference, rel, seconds)
        for rel, seconds in unpaused_seconds(timings).items()
    }


def rule_times(times: dict[Path, float]) -> dict[tuple[str, str | None], list[float]]:
    """``job_times`` per (rule, method) and per (rule, None) for the whole rule."""
    out: dict[tuple[str, str | None], list[float]] = defaultdict(list)
    for rel, seconds in times.items():
        out[(rel.parts[0], None)].append(seconds)
        if (method := _method(rel)) is not None:
            out[(rel.parts[0], method)].append(seconds)
    return dict(out)


def passages_per_example(method: str, cfg: dict[str, Any]) -> int:
    """Passages one training example of ``method`` encodes with gradients: its positive and
    the negatives the cfg names, ``hard_negatives`` (DPR, xMoCo; none when ``negative_type`` is
    "none") and ``bm25_negatives`` (DCSR). In-batch negatives are other examples' positives and
    DCSR's in-passage ones sentences of the positive: no passage more. Read here from the cfg,
    not asked of the method class, so that pricing changes no method's code hash (a new method
    whose negatives are other passages is priced right when it names them so)."""
    full = {**method_class(method).config_defaults(), **cfg}
    hard = 0 if full.get("negative_type") == "none" else int(full.get("hard_negatives") or 0)
    return 1 + hard + int(full.get("bm25_negatives") or 0)


def training_passages(method: str, cfg: dict[str, Any], n_examples: int) -> int:
    """Passages a training of ``method`` with ``cfg`` encodes with gradients over
    ``n_examples`` training examples: examples x epochs x ``passages_per_example``. Questions
    (a tenth of a passage's tokens or less) and validation are left out."""
    epochs = int({**TRAIN_DEFAULTS, **cfg}["epochs"])
    return n_examples * epochs * passages_per_example(method, cfg)


def training_rates(
    reference: Path, times: dict[Path, float]
) -> tuple[dict[str | None, float], dict[str, int]]:
    """From the reference's trainings that have a report: the median seconds per passage of
    ``training_passages``, per method and over all (key None); and each training set's examples
    (a sampled training's ``n_train`` plus those it left out), by the set's name."""
    rates: dict[str | None, list[float]] = defaultdict(list)
    sizes: dict[str, int] = {}
    methods = set(method_names())
    for rel, seconds in sorted(times.items()):
        if rel.parts[0] != "train" or len(rel.parts) < 3:
            continue
        rep = job_report(reference, rel)
        if not rep or rep.get("method") not in methods or not isinstance(rep.get("cfg"), dict):
            continue
        n = rep.get("n_train")
        if not isinstance(n, int) or n <= 0:
            continue
        if rep["cfg"].get("max_examples") is None:
            sizes.setdefault(rel.stem, n + int(rep.get("n_not_sampled") or 0))
        work = training_passages(rep["method"], rep["cfg"], n)
        rates[rep["method"]].append(seconds / work)
        rates[None].append(seconds / work)
    return {k: statistics.median(v) for k, v in rates.items()}, sizes


def planned_passages(job: dict[str, Any], rel: Path | None, sizes: dict[str, int]) -> int | None:
    """``training_passages`` of a planned ``train`` job (its cfg from the shell command, its
    training set's size from the reference), or None where either is unknown."""
    if job["rule"] != "train" or rel is None or not job.get("cfg") or rel.stem not in sizes:
        return None
    method = _method(rel)
    if method not in method_names():
        return None
    n = sizes[rel.stem]
    cap = {**TRAIN_DEFAULTS, **job["cfg"]}["max_examples"]
    return training_passages(method, job["cfg"], n if cap is None else min(n, int(cap)))


def steps_left(job: dict[str, Any], workdir: Path) -> tuple[int, int] | None:
    """(step, total steps) of the checkpoint a planned resumable job (``RESUMABLE``) would
    resume from in ``workdir``, where it reruns only for a missing or incomplete output; else
    None."""
    if job["rule"] not in RESUMABLE or not job.get("output"):
        return None
    if any(r["kind"] not in RESUMING_REASONS for r in job.get("reasons", [])):
        return None
    progress = checkpoint_progress(workdir / job["output"][0])
    return progress if progress and progress[0] > 0 else None


def estimate_jobs(
    jobs: list[dict[str, Any]], reference: Path, workdir: Path | None = None
) -> list[dict[str, Any]]:
    """Each planned job with its seconds and where they come from (``same job``, ``method
    rate``, ``method median``, ``rule rate``, ``rule median``, or ``unmeasured`` with no
    seconds); a training resuming from its checkpoint in ``workdir`` (default the reference)
    for the steps it has left, with ``resumes`` (step, total steps)."""
    workdir = reference if workdir is None else workdir
    times = job_times(reference)
    medians = {key: statistics.median(t) for key, t in rule_times(times).items()}
    rates, sizes = training_rates(reference, times)
    out = []
    for job in jobs:
        bench = job.get("benchmark")
        inside = bench is not None and Path(bench).is_relative_to(BENCH_ROOT)
        rel = Path(bench).relative_to(BENCH_ROOT) if inside else None
        method = _method(rel) if rel is not None else None
        # a benchmark file outside BENCH_ROOT is no rule's median: read it on its own
        timing = read_benchmark(reference / bench) if bench and not inside else None
        work = planned_passages(job, rel, sizes) if rel not in times else None
        if rel in times:
            basis, seconds = "same job", times[rel]
        elif timing and timing["seconds"] is not None:
            basis, seconds = "same job", timing["seconds"]
        elif work is not None and method in rates:
            basis, seconds = "method rate", rates[method] * work
        elif method is not None and (job["rule"], method) in medians:
            basis, seconds = "method median", medians[(job["rule"], method)]
        elif work is not None and None in rates:
            basis, seconds = "rule rate", rates[None] * work
        elif (job["rule"], None) in medians:
            basis, seconds = "rule median", medians[(job["rule"], None)]
        else:
            basis, seconds = "unmeasured", None
        resumes = steps_left(job, workdir)
        if resumes is not None and seconds is not None:
            seconds *= (resumes[1] - resumes[0]) / resumes[1]
        out.append({"rule": job["rule"], "output": job["output"], "threads": job["threads"],
                    "basis": basis, "seconds": seconds, "resumes": resumes})  # fmt: skip
    return out


def summarise(estimates: list[dict[str, Any]], cores: int) -> dict[str, Any]:
    """Per rule: jobs by basis and seconds; in all: the serial sum, and the wall time on
    ``cores`` if they stay busy (job seconds x threads / cores, never below the longest job)."""
    rules: dict[str, dict[str, Any]] = {}
    for e in estimates:
        r = rules.setdefault(e["rule"], {"jobs": 0, **dict.fromkeys(BASES, 0), "seconds": 0.0})
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
        "resuming": {e["output"][0]: list(e["resumes"]) for e in estimates if e.get("resumes")},
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
        "| rule | jobs | same job measured | method rate | method median | rule rate | "
        "rule median | unmeasured | seconds |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for rule, r in summary["by_rule"].items():
        counts = " | ".join(str(r[b]) for b in BASES)
        lines.append(f"| {rule} | {r['jobs']} | {counts} | {r['seconds']:.0f} |")
    lines += [
        "",
        f"{summary['jobs']} jobs; {summary['unmeasured_jobs']} unmeasured (not counted). "
        f"One at a time: {_hours(summary['serial_seconds'])}; on {summary['cores']} cores, if "
        f"they stay busy: about {_hours(summary['wall_seconds'])}.",
        "",
    ]
    if summary.get("resuming"):
        lines += [
            "Resuming from their checkpoints, priced for the steps left: "
            + "; ".join(f"`{o}` at step {s} of {n}" for o, (s, n) in summary["resuming"].items())
            + ".",
            "",
        ]
    lines += [
        "A rate prices a training by its work: passages encoded with gradients (examples x "
        "epochs x the method's passages per example) x the reference trainings' seconds per "
        "passage, of its method or else of all.",
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
    estimates = estimate_jobs(jobs, reference, workdir)
    summary = summarise(estimates, args.cores)
    command = shlex.join(snakemake_command(workdir, extra, args.targets, ["-n"]))
    page = render(summary, args.targets, reference, command)
    print(page, end="")
    if args.out:
        write_json(args.out, {"targets": args.targets, "reference": str(reference),
                              "command": command, **summary, "planned": estimates})  # fmt: skip
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
    p.add_argument("--out", help="also write the estimate as JSON (with every planned job)")
    p.add_argument("--markdown", help="also write the page as Markdown")
    p.set_defaults(func=_cmd_estimate)
