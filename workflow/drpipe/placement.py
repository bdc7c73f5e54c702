"""Where an index lives while it is built and searched: on FAISS's GPUs or the CPU, and the
memory there is room for. FAISS itself (building, searching) is ``drpipe.index``'s.

``use_gpu`` (auto | on | off): the GPUs when FAISS sees them and can search on them (a probe in
a child process, :func:`gpu_faiss_problem`); an index too large for their free memory is
searched on the CPU (``auto``) or stops the job (``on``). The memory a build may still use is
the node's free memory or, where it is tighter, its memory cgroup's (a SLURM job's ``--mem``).
"""

from __future__ import annotations

import functools
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def available_memory() -> int | None:
    """Bytes this process may still use: the node's free memory, or less where a memory cgroup
    (a SLURM job's ``--mem``, a container's limit) leaves less."""
    try:
        node = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        node = None
    room = [b for b in (node, cgroup_memory_left()) if b is not None]
    return min(room) if room else None


def cgroup_memory_left(
    root: Path = Path("/sys/fs/cgroup"), self_cgroup: Path = Path("/proc/self/cgroup")
) -> int | None:
    """Bytes this process's memory cgroups still allow: limit minus usage, the page cache the
    kernel can drop (inactive files) not counted as used, the tightest over the cgroup and its
    ancestors as mounted; None without a limit. cgroup v2 (``memory.max``) and v1
    (``memory.limit_in_bytes``)."""
    try:
        lines = self_cgroup.read_text().splitlines()
    except OSError:
        return None
    left = None
    for line in lines:
        hid, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if hid == "0" and not controllers:
            base, files, cache = root, ("memory.max", "memory.current"), "inactive_file"
        elif "memory" in controllers.split(","):
            base = root / "memory"
            files, cache = ("memory.limit_in_bytes", "memory.usage_in_bytes"), "total_inactive_file"
        else:
            continue
        rel = Path(path.lstrip("/"))
        for d in sorted({base / p for p in (rel, *rel.parents)}):
            try:
                limit = (d / files[0]).read_text().strip()
                used = int((d / files[1]).read_text())
            except (OSError, ValueError):
                continue
            if limit == "max" or int(limit) >= 1 << 60:  # v1 writes "no limit" as ~2**63
                continue
            stat = dict(ln.split() for ln in _read_or_empty(d / "memory.stat").splitlines()
                        if len(ln.split()) == 2)  # fmt: skip
            used -= min(int(stat.get(cache, 0)), used)
            room = max(int(limit) - used, 0)
            left = room if left is None else min(left, room)
    return left


def _read_or_empty(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


# A GPU search of 8 vectors in a child process: a FAISS build without kernels for the GPU's
# compute capability aborts the process (a C++ assertion, no Python exception), e.g. PyPI's
# faiss-gpu-cu12, built for compute capability 7.0-8.9, on an H100 or H200.
_GPU_PROBE = """
import faiss, numpy as np
x = np.eye(8, dtype="float32")
index = faiss.GpuIndexFlatIP(faiss.StandardGpuResources(), 8)
index.add(x)
assert index.search(x, 1)[1].ravel().tolist() == list(range(8)), "wrong neighbours"
"""


@functools.cache
def gpu_faiss_problem(probe: str = _GPU_PROBE) -> str | None:
    """Why FAISS cannot search on this machine's GPU (its last error line), or None if it can.
    Run once per process, in a child process, because a failing FAISS GPU kernel aborts."""
    try:
        proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                              timeout=300)  # fmt: skip
    except subprocess.TimeoutExpired:
        return "a GPU search of 8 vectors did not finish in 300 s"
    if proc.returncode == 0:
        return None
    lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
    why = next((ln for ln in reversed(lines) if "error" in ln.lower()), lines[-1] if lines else "")
    return f"{why or 'no message'} (exit status {proc.returncode})"


def gpu_wanted(setting: str | bool, faiss_module) -> bool:
    """Use FAISS GPUs? ``auto``: when present and usable; ``on``/true: required; ``off``/false:
    never. Usable: a GPU search runs (``gpu_faiss_problem``); ``auto`` falls back to the CPU,
    saying why, where it does not."""
    setting = {True: "on", False: "off"}.get(setting, setting)
    if setting not in ("auto", "on", "off"):
        raise SystemExit(f"error: use_gpu must be auto, on or off, not {setting!r}")
    have = hasattr(faiss_module, "get_num_gpus") and faiss_module.get_num_gpus() > 0
    if setting == "on" and not have:
        raise SystemExit("error: use_gpu is 'on' but this FAISS build sees no GPU")
    if not have or setting == "off":
        return False
    problem = gpu_faiss_problem()
    if problem is None:
        return True
    hint = ("this FAISS build may lack kernels for the GPU's compute capability (conda-forge's "
            "faiss-gpu, envs/gpu.yaml, and PyPI's faiss-gpu 1.15.1, Meta's, cover current GPUs)")  # fmt: skip
    if setting == "on":
        raise SystemExit(f"error: use_gpu is 'on' but FAISS cannot search on the GPU: {problem}; "
                         f"{hint}")  # fmt: skip
    log.warning("FAISS sees %d GPU(s) but cannot search on them: %s; %s. Using the CPU.",
                faiss_module.get_num_gpus(), problem, hint)  # fmt: skip
    return False


def index_bytes(meta: dict[str, Any]) -> int:
    """The bytes an index puts on GPUs: its estimate less the build's buffers and the ids."""
    est = meta.get("memory_estimate_bytes") or {}
    held = {
        k: v for k, v in est.items() if k not in ("total", "ids", "add_buffer", "training_sample")
    }
    return sum(held.values()) if held else 4 * int(meta["n"]) * int(meta["d"])


def gpu_free_bytes() -> list[int] | None:
    """Free memory of each visible GPU (through torch), or None where it cannot be read."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        return [torch.cuda.mem_get_info(i)[0] for i in range(torch.cuda.device_count())]
    except Exception:  # noqa: BLE001 (no reading: FAISS finds out on its own)
        return None


# FAISS's GPU search needs scratch memory beyond the index (its temporary buffers).
GPU_HEADROOM = 1.15


def gpus_too_small(nbytes: int, free: list[int] | None, shard: bool) -> str | None:
    """Why an index of ``nbytes`` cannot go to these GPUs (sharded over them, or a copy on
    each), or None if it fits or their memory is unknown."""
    if not free:
        return None
    need = nbytes * GPU_HEADROOM
    # FAISS gives each GPU an equal shard (or a whole copy): the fullest GPU decides.
    room = len(free) * min(free) if shard else min(free)
    if need <= room:
        return None
    how = f"sharded over {len(free)} GPU(s)" if shard else "a copy on each GPU"
    return (f"{nbytes / 2**30:.1f} GiB ({how}, with {GPU_HEADROOM - 1:.0%} headroom) against "
            f"{room / 2**30:.1f} GiB free")  # fmt: skip


# The shared memory a CUDA block may use without opting in: FAISS's GPU IVF-PQ search keeps
# its lookup tables (sub-quantizers x 2^nbits entries) there.
GPU_BLOCK_SHARED_BYTES = 48 * 1024


def ivfpq_float16_tables(m: int, nbits: int) -> bool:
    """Whether IVF-PQ's GPU lookup tables must be float16: as float32 they exceed a block's
    shared memory (config.yaml's m=64, nbits=8 needs 64 KiB; FAISS refuses it, measured on an
    H200), and float16 halves them."""
    return m * (1 << nbits) * 4 > GPU_BLOCK_SHARED_BYTES


def to_gpus(index, faiss_module, shard: bool):
    """Copy ``index`` to all visible GPUs: sharded (a 21M x 768 flat index exceeds one GPU's
    memory) or replicated (an IVF index being trained needs one quantizer, not one per shard)."""
    co = faiss_module.GpuMultipleClonerOptions()
    co.shard = shard
    pq = getattr(index, "pq", None)
    if pq is not None and ivfpq_float16_tables(pq.M, pq.nbits):
        log.info("IVF-PQ on the GPU with float16 lookup tables (m=%d, nbits=%d)", pq.M, pq.nbits)
        co.useFloat16 = True
    return faiss_module.index_cpu_to_all_gpus(index, co=co)


def place_for_search(index, meta: dict[str, Any], use_gpu: str | bool, faiss_module, path: Path):
    """``index`` (read from ``path``, of sidecar ``meta``) where it is searched: copied to the
    GPUs where ``use_gpu`` wants them and it fits (a flat index sharded over them, IVF-PQ a copy
    on each; FAISS has no GPU HNSW), else left on the CPU."""
    if meta["type"] != "hnsw" and gpu_wanted(use_gpu, faiss_module):
        shard = meta["type"] == "flat"
        why = gpus_too_small(index_bytes(meta), gpu_free_bytes(), shard)
        if why is None:
            index = to_gpus(index, faiss_module, shard=shard)
        elif use_gpu in ("on", True):
            raise SystemExit(f"error: use_gpu is 'on' but {path} does not fit: {why}")
        else:
            log.warning("searching %s on the CPU: %s", path, why)
    return index
