"""What the audit shows of one recorded step (rule, files, config slice, code hash, time,
memory, the reports it wrote and the environment they record), and the run's environment."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from drpipe.audit.lineage import Lineage
from drpipe.audit.metadata import Job
from drpipe.audit.timings import benchmark_file, read_benchmark
from drpipe.io import read_json


def _report_files(job: Job, work: Path | None = None) -> list[str]:
    """A job's JSON outputs that describe the step (reports, fetch records, index metadata),
    and the ``drpipe_*.json`` metadata inside its directory outputs (a Lucene index, a model);
    metrics files are results, not reports."""
    out = [o for o in job.outputs if o.endswith(".json") and not o.startswith("results/metrics/")]
    if work is not None:
        for o in job.outputs:
            if (work / o).is_dir():
                out += sorted(f"{o}/{m.name}" for m in (work / o).glob("drpipe_*.json"))
    return out


def _compact(report: Any, limit: int = 2000) -> Any:
    """A report with its long values (loss curves, id lists) replaced by their size."""
    if not isinstance(report, dict):
        return report
    out = {}
    for key, value in report.items():
        if key == "environment":
            continue  # kept once per step as "environment"
        text = json.dumps(value, default=str)
        if len(text) > limit:
            size = len(value) if isinstance(value, (list, dict)) else len(text)
            value = f"<{type(value).__name__} of {size} items, not copied>"
        out[key] = value
    return out


def step_summary(lineage: Lineage, job: Job) -> dict[str, Any]:
    """What the audit shows of one step: rule, files, config slice, code hash, time, memory."""
    work = lineage.workdir
    bench = benchmark_file(job)
    timing = read_benchmark(work / bench) if bench else None
    if timing is None and job.starttime and job.endtime:
        timing = {"seconds": round(job.endtime - job.starttime, 3), "max_rss_mb": None}
    reports = {}
    environment = None
    for rel in _report_files(job, work):
        try:
            data = read_json(work / rel)
        except (OSError, ValueError):
            continue
        reports[rel] = _compact(data)
        if isinstance(data, dict) and isinstance(data.get("environment"), dict):
            environment = data["environment"]
    return {
        "rule": job.rule,
        "outputs": job.outputs,
        "inputs": job.inputs,
        "cfg": job.cfg,
        "code": job.code,
        "seconds": (timing or {}).get("seconds"),
        "max_rss_mb": (timing or {}).get("max_rss_mb"),
        "benchmark": str(bench) if bench else None,
        "reports": reports,
        "environment": environment,
        "conda_env": bool(job.conda_env),
    }


def run_environment(results: Path) -> dict | None:
    """The environment the run recorded in ``provenance.json`` (None when it has none)."""
    prov = results / "provenance.json"
    if not prov.is_file():
        return None
    data = read_json(prov)
    return data.get("environment") or {
        "packages": data.get("packages"),
        "hardware": {k: v for k, v in (data.get("hardware") or {}).items() if k != "system"},
    }
