"""What a results folder needs to be audited: config, code version, inputs, environment, timings."""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from drpipe.audit.timings import read_benchmark
from drpipe.cliutil import add_cfg
from drpipe.environment import cpu_info, environment, java_runtime, package_versions
from drpipe.io import read_json, write_json

log = logging.getLogger(__name__)

# Files of the package whose bytes change what a step does (sources and package data).
CODE_SUFFIXES = (".py", ".csv", ".yaml", ".json")


def code_hash(paths: list[str | Path]) -> str:
    """sha256 over the given files (directories: their sources and package data), sorted."""
    h = hashlib.sha256()
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files.extend(
                f
                for f in sorted(p.rglob("*"))
                if f.suffix in CODE_SUFFIXES and "__pycache__" not in f.parts
            )
        else:
            files.append(p)
    for f in sorted(set(files)):
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def git_state(repo: Path) -> dict[str, Any]:
    def run(*cmd: str) -> str:
        return subprocess.run(
            ["git", "-C", str(repo), *cmd], capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        return {"commit": run("rev-parse", "HEAD"), "dirty": bool(run("status", "--porcelain"))}
    except (subprocess.CalledProcessError, FileNotFoundError):
        return {"commit": None, "dirty": None}


def hardware() -> dict[str, Any]:
    info: dict[str, Any] = {
        "machine": platform.machine(),
        "system": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
    cpu = cpu_info()
    if "model" in cpu:
        info["cpu_model"] = cpu["model"]
    info["cpu_flags"] = cpu["flags"]
    if "emulated_kind" in cpu:
        info["cpu_emulated_kind"] = cpu["emulated_kind"]
    try:
        with open("/proc/meminfo") as fh:
            info["mem_total_kb"] = int(fh.readline().split()[1])
    except OSError:
        pass
    try:
        import torch  # lazy and optional, as in torch_build

        info["cuda_devices"] = [
            torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())
        ]
    except ImportError:
        pass
    return info


def rule_timings(bench_dir: Path) -> dict[str, dict[str, float]]:
    """Wall time and peak RSS per job from Snakemake's ``benchmark:`` TSV files (a forked job's
    peak RSS from its log: drpipe.audit.timings.read_benchmark)."""
    out = {}
    for tsv in sorted(bench_dir.rglob("*.tsv")):
        timing = read_benchmark(tsv)
        if timing:
            rss = timing["max_rss_mb"]
            out[str(tsv.relative_to(bench_dir))] = {
                "seconds": timing["seconds"],
                "max_rss_mb": float("nan") if rss is None else rss,
            }
    return out


def collect(
    config: dict, records: list[Path], reports: list[Path], bench_dir: Path, repo: Path
) -> dict[str, Any]:
    timings = rule_timings(bench_dir) if bench_dir.is_dir() else {}
    return {
        "config": config,
        "seed": config.get("seed"),
        "scale": config.get("scale"),
        "code": {**git_state(repo), "package_hash": code_hash([repo / "workflow" / "drpipe"])},
        "packages": package_versions(),
        "hardware": hardware(),
        "environment": {
            **environment(("cpu", "torch", "faiss", "blas")),
            "java": java_runtime((config.get("bm25") or {}).get("java")),
        },
        "inputs": [read_json(p) for p in records],
        "step_reports": {str(p): read_json(p) for p in reports},
        "rule_timings": timings,
        "total_rule_seconds": round(sum(t["seconds"] for t in timings.values()), 1),
    }


def _cmd(args: argparse.Namespace) -> None:
    prov = collect(
        args.cfg,
        [Path(p) for p in args.records],
        [Path(p) for p in args.reports],
        Path(args.benchmarks),
        Path(args.repo),
    )
    write_json(args.out, prov)
    log.info(
        "provenance: %d inputs, %d reports, %d timed jobs",
        len(prov["inputs"]),
        len(prov["step_reports"]),
        len(prov["rule_timings"]),
    )


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("provenance", help="write the audit record of a results folder")
    p.add_argument("--records", nargs="*", default=[], help="input records from `drpipe fetch`")
    p.add_argument("--reports", nargs="*", default=[], help="step report JSON files")
    p.add_argument("--benchmarks", default="results/benchmarks/rules")
    p.add_argument("--repo", default=".")
    p.add_argument("--out", required=True)
    add_cfg(p)
    p.set_defaults(func=_cmd)
