"""Wall time and peak memory of recorded jobs, from Snakemake's benchmark files
(``results/benchmarks/rules/<rule>/<name>.tsv``, named like the job's log
``results/logs/<rule>/<name>.log``); for a job forked from `make run`'s job server, whose
benchmark file measured only the client, its memory and CPU from the last line of its log
(drpipe.forkserver)."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

from drpipe.audit.lineage import Lineage
from drpipe.audit.metadata import Job
from drpipe.forkserver import fork_usage


def benchmark_file(job: Job) -> Path | None:
    """A job's benchmark TSV: its log path with results/logs -> results/benchmarks/rules."""
    for logfile in job.log:
        if logfile.startswith("results/logs/") and logfile.endswith(".log"):
            rel = logfile[len("results/logs/") : -len(".log")]
            return Path("results/benchmarks/rules") / f"{rel}.tsv"
    return None


def job_log(benchmark: Path) -> Path | None:
    """The log of the job whose benchmark file is ``benchmark`` (…/benchmarks/rules/X.tsv ->
    …/logs/X.log)."""
    parts = Path(benchmark).parts
    for i in range(len(parts) - 1):
        if parts[i : i + 2] == ("benchmarks", "rules"):
            return Path(*parts[:i], "logs", *parts[i + 2 :]).with_suffix(".log")
    return None


def read_benchmark(path: Path) -> dict[str, float] | None:
    try:
        with open(path) as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
    except OSError:
        return None
    if not rows:
        return None
    row = rows[-1]

    def num(key: str) -> float | None:
        try:
            value = float(row.get(key) or "nan")
        except ValueError:
            return None
        return None if math.isnan(value) else value

    out = {"seconds": num("s"), "max_rss_mb": num("max_rss"), "cpu_seconds": num("cpu_time")}
    log = job_log(path)
    forked = fork_usage(log) if log is not None else None
    return {**out, **forked} if forked else out


def runtime_by_rule(lineage: Lineage) -> dict[str, dict[str, Any]]:
    """Jobs, total wall time and peak memory per rule (benchmark files)."""
    out: dict[str, dict[str, Any]] = {}
    for job in lineage.jobs.values():
        bench = benchmark_file(job)
        timing = read_benchmark(lineage.workdir / bench) if bench else None
        entry = out.setdefault(job.rule, {"jobs": 0, "seconds": 0.0, "max_rss_mb": None})
        entry["jobs"] += 1
        if timing and timing["seconds"] is not None:
            entry["seconds"] = round(entry["seconds"] + timing["seconds"], 2)
        if timing and timing["max_rss_mb"] is not None:
            entry["max_rss_mb"] = max(entry["max_rss_mb"] or 0.0, timing["max_rss_mb"])
    return dict(sorted(out.items()))
