"""FAISS indexes over the passage embeddings: exact ("flat"), DPR's HNSW ("hnsw"), and IVF-PQ.

Every index answers maximum-inner-product queries with our pids and inner-product scores,
whatever its type, through :class:`DenseIndex`. Files of an index ``X.faiss``:

- ``X.faiss``          the FAISS index over row positions 0..n-1 (written last, atomically);
- ``X.faiss.ids.npy``  int64 pids, position -> pid (the shards' ids, concatenated in order);
- ``X.faiss.json``     sidecar: type, n, d, params, phi (hnsw), memory estimate, shards.

Ids live in a separate array rather than an ``IndexIDMap2`` so that the bare index can be
cloned to GPUs and so that HNSW's extra dimension stays an internal detail of this module.

HNSW follows DPR (``DenseHNSWFlatIndexer``): FAISS's HNSW graph is built for L2, so inner
product is reduced to L2 by appending ``sqrt(phi - |p|^2)`` to each passage vector, with
``phi = max |p|^2`` over the corpus, and a 0 to each query; then
``|q' - p'|^2 = |q|^2 + phi - 2 q.p`` and the L2 ranking is the inner-product ranking. Search
maps the distances back to ``q.p``.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from drpipe.cliutil import add_cfg
from drpipe.encode import ids_path_for
from drpipe.environment import environment
from drpipe.errors import InputError
from drpipe.io import atomic_path, progress, read_json, write_json

log = logging.getLogger(__name__)

INDEX_TYPES = ("flat", "hnsw", "ivfpq")
DEFAULT_CFG: dict[str, Any] = {
    "type": "flat",
    "hnsw": {"m": 512, "ef_construction": 200, "ef_search": 128},
    "ivfpq": {"nlist": 1024, "m": 64, "nbits": 8, "train_size": 100_000, "nprobe": 64},
    "use_gpu": "auto",
    "seed": 13,
    "add_batch_size": 50_000,
    "threads": None,
}


def ids_path(index_path: str | Path) -> Path:
    index_path = Path(index_path)
    return index_path.with_name(index_path.name + ".ids.npy")


def meta_path(index_path: str | Path) -> Path:
    index_path = Path(index_path)
    return index_path.with_name(index_path.name + ".json")


def merged_cfg(cfg: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` over the defaults, one level deep for the per-type sub-objects."""
    unknown = set(cfg) - set(DEFAULT_CFG)
    if unknown:
        raise SystemExit(f"error: --cfg has unknown keys {sorted(unknown)}")
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in DEFAULT_CFG.items()}
    for key, value in cfg.items():
        if isinstance(DEFAULT_CFG[key], dict):
            bad = set(value) - set(DEFAULT_CFG[key])
            if bad:
                raise SystemExit(f"error: --cfg.{key} has unknown keys {sorted(bad)}")
            out[key].update(value)
        else:
            out[key] = value
    if out["type"] not in INDEX_TYPES:
        raise SystemExit(f"error: --cfg.type must be one of {INDEX_TYPES}, not {out['type']!r}")
    return out


# --------------------------------------------------------------------------------------------
# Embedding shards


@dataclass
class Shards:
    """The embedding shards of one corpus, opened read-only (vectors memory-mapped)."""

    paths: list[Path]
    vectors: list[np.ndarray]  # memory-mapped [n_i, d], float32 or float16
    ids: np.ndarray  # int64 [n], all shards' pids in shard order
    offsets: np.ndarray = field(init=False)  # shard i holds global rows offsets[i]:offsets[i+1]

    def __post_init__(self) -> None:
        self.offsets = np.cumsum([0] + [len(v) for v in self.vectors])

    @property
    def n(self) -> int:
        return int(self.offsets[-1])

    @property
    def d(self) -> int:
        return int(self.vectors[0].shape[1])

    def chunks(self, size: int) -> Iterator[tuple[int, np.ndarray]]:
        """Yield ``(global_start, float32 rows)`` over all shards, ``size`` rows at a time."""
        for off, vec in zip(self.offsets[:-1], self.vectors, strict=True):
            for lo in range(0, len(vec), size):
                yield int(off) + lo, np.ascontiguousarray(vec[lo : lo + size], dtype=np.float32)

    def rows(self, positions: np.ndarray) -> np.ndarray:
        """float32 vectors at global row ``positions`` (any order)."""
        positions = np.asarray(positions, dtype=np.int64)
        out = np.empty((len(positions), self.d), dtype=np.float32)
        shard_of = np.searchsorted(self.offsets, positions, side="right") - 1
        for s in np.unique(shard_of):
            sel = np.nonzero(shard_of == s)[0]
            local = positions[sel] - self.offsets[s]
            order = np.argsort(local)  # sorted reads are kinder to a memory map
            out[sel[order]] = self.vectors[s][local[order]]
        return out


def set_aside(path: Path) -> Path:
    """Rename an unreadable shard to ``<name>.unreadable`` so that the next run rebuilds it
    (Snakemake sees the output missing) instead of failing on it again."""
    bad = path.with_name(path.name + ".unreadable")
    path.replace(bad)
    ids = ids_path_for(path)
    if ids.exists():
        ids.replace(ids.with_name(ids.name + ".unreadable"))
    return bad


def open_shards(paths: Sequence[str | Path], *, set_aside_bad: bool = False) -> Shards:
    """Open ``shard-*.npy`` files (+ their ``.ids.npy``) and check they fit together.

    ``set_aside_bad``: a shard that cannot be read as a whole array (truncated, not .npy) is
    renamed aside, and the error says so: the next run re-encodes that shard alone."""
    if not paths:
        raise SystemExit("error: no embedding shards given")
    vectors, ids, d = [], [], None
    for p in map(Path, paths):
        try:
            vec = np.load(p, mmap_mode="r")
        except (OSError, ValueError) as exc:
            problem = f"cannot read as .npy: {exc}"
            if set_aside_bad and p.exists():
                bad = set_aside(p)
                problem += f"; moved aside to {bad.name}: the next run re-encodes this shard"
            else:
                problem += f"; delete {p} and its .ids.npy, and the next run re-encodes it"
            raise InputError(p, None, problem) from None
        if vec.ndim != 2 or vec.dtype not in (np.float32, np.float16):
            raise InputError(
                p, None, f"expected a 2-d float32/float16 array, got {vec.dtype}{vec.shape}"
            )
        d = vec.shape[1] if d is None else d
        if vec.shape[1] != d:
            raise InputError(
                p, None, f"dimension {vec.shape[1]} differs from the first shard's {d}"
            )
        ip = ids_path_for(p)
        if not ip.exists():
            raise InputError(ip, None, "ids file of this shard is missing")
        try:
            sid = np.load(ip, allow_pickle=False)
        except (OSError, ValueError) as exc:
            problem = f"cannot read as .npy: {exc}"
            if set_aside_bad:
                problem += f"; moved aside to {set_aside(p).name}: the next run re-encodes it"
            raise InputError(ip, None, problem) from None
        if sid.ndim != 1 or sid.dtype != np.int64 or len(sid) != len(vec):
            raise InputError(ip, None, f"expected int64 [{len(vec)}], got {sid.dtype}{sid.shape}")
        vectors.append(vec)
        ids.append(sid)
    all_ids = np.concatenate(ids)
    uniq, counts = np.unique(all_ids, return_counts=True)
    if (counts > 1).any():
        dup = uniq[counts > 1][:5].tolist()
        raise InputError(
            paths[0], None, f"pids occur in more than one row across shards, e.g. {dup}"
        )
    return Shards([Path(p) for p in paths], vectors, all_ids)


class VectorLookup:
    """Exact stored passage vectors by pid, read from the shards (for the hybrid's missing sims)."""

    def __init__(self, shards: Shards):
        self.shards = shards
        self._order = np.argsort(shards.ids, kind="stable")
        self._sorted = shards.ids[self._order]

    def positions(self, pids: np.ndarray) -> np.ndarray:
        pids = np.asarray(pids, dtype=np.int64)
        at = np.searchsorted(self._sorted, pids)
        at = np.minimum(at, len(self._sorted) - 1)
        missing = self._sorted[at] != pids
        if missing.any():
            bad = pids[missing][:5].tolist()
            raise KeyError(f"{int(missing.sum())} pids have no stored vector, e.g. {bad}")
        return self._order[at]

    def get(self, pids: np.ndarray) -> np.ndarray:
        return self.shards.rows(self.positions(pids))


# --------------------------------------------------------------------------------------------
# Building


def estimate_memory(kind: str, n: int, d: int, cfg: dict[str, Any]) -> dict[str, int]:
    """Bytes an index of ``n`` vectors of dimension ``d`` needs in RAM (approximate, per part)."""
    parts: dict[str, int] = {"ids": 8 * n}
    if kind == "flat":
        parts["vectors"] = 4 * n * d
    elif kind == "hnsw":
        m = int(cfg["hnsw"]["m"])
        parts["vectors"] = 4 * n * (d + 1)
        # Neighbour slots are int32; plus an int64 offset and an int32 level per node.
        parts["graph"] = int(n * (4 * hnsw_slots(m) + 12))
    elif kind == "ivfpq":
        p = cfg["ivfpq"]
        code = int(p["m"]) * int(p["nbits"]) // 8
        parts["codes"] = n * (code + 8)  # inverted lists store a code and an int64 id each
        parts["centroids"] = 4 * (int(p["nlist"]) * d + (1 << int(p["nbits"])) * d)
        parts["training_sample"] = 4 * min(int(p["train_size"]), n) * d
    else:
        raise ValueError(kind)
    parts["add_buffer"] = 4 * min(int(cfg["add_batch_size"]), n) * (d + 1)
    parts["total"] = sum(parts.values())
    return parts


def hnsw_slots(m: int) -> float:
    """Neighbour slots an HNSW node holds on average: 2M at level 0, M at each upper level,
    and a node has 1/(M-1) upper levels on average."""
    return 2 * m + m / max(m - 1, 1)


def _available_memory() -> int | None:
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


def _hnsw_phi(shards: Shards, chunk: int) -> float:
    phi = 0.0
    for _, x in shards.chunks(chunk):
        phi = max(phi, float(np.einsum("ij,ij->i", x, x).max(initial=0.0)))
    return phi


def hnsw_augment(x: np.ndarray, phi: float) -> np.ndarray:
    """Passage vectors + the extra coordinate sqrt(phi - |p|^2) (DPR's IP -> L2 reduction)."""
    norms = np.einsum("ij,ij->i", x, x)
    extra = np.sqrt(np.maximum(phi - norms, 0.0)).astype(np.float32)
    return np.hstack([x, extra[:, None]])


def reserve(vector, size: int) -> None:
    """Give a FAISS vector the capacity of ``size`` items before the adds: chunked adds grow it
    by doubling, and each regrowth holds the old and the new buffer at once (up to twice the
    final size: DCSR's ~243-GB flat index would peak near 485 GB)."""
    if hasattr(vector, "resize"):
        vector.resize(size)
        vector.resize(0)  # the size back to 0, the capacity kept


def reserve_for(index, kind: str, n: int, d: int, cfg: dict[str, Any], faiss_module) -> None:
    """Reserve what adding ``n`` vectors of dimension ``d`` will fill: a flat index's vectors,
    HNSW's vectors and neighbour table (its expected size, levels being random, with 1%
    spare: more would regrow once). IVF-PQ's lists are small and per list."""
    if kind == "flat":
        reserve(index.codes, 4 * n * d)
    elif kind == "hnsw":
        reserve(faiss_module.downcast_index(index.storage).codes, 4 * n * (d + 1))
        slots = hnsw_slots(int(cfg["hnsw"]["m"]))
        reserve(index.hnsw.neighbors, int(1.01 * n * slots) + 10_000)


def _train_sample(shards: Shards, size: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    size = min(size, shards.n)
    positions = np.sort(rng.choice(shards.n, size=size, replace=False))
    return shards.rows(positions)


def build_index(embeddings: Sequence[str | Path], out: str | Path, cfg: dict[str, Any]) -> dict:
    """Build the index ``cfg['type']`` from embedding shards, write it atomically, return its metadata."""
    import faiss  # lazy: its SIMD library load (~50 ms) would hit every CLI start-up

    cfg = merged_cfg(cfg)
    kind = cfg["type"]
    if cfg["threads"]:
        faiss.omp_set_num_threads(int(cfg["threads"]))
    shards = open_shards(embeddings, set_aside_bad=True)
    n, d, chunk = shards.n, shards.d, int(cfg["add_batch_size"])
    if n == 0:
        raise InputError(embeddings[0], None, "the shards hold no vectors")
    mem = estimate_memory(kind, n, d, cfg)
    avail = _available_memory()
    log.info(
        "index %s over n=%d d=%d from %d shard(s): needs about %.2f GiB (%s); %s GiB available",
        kind, n, d, len(shards.paths), mem["total"] / 2**30,
        ", ".join(f"{k} {v / 2**30:.2f}" for k, v in mem.items() if k != "total"),
        "?" if avail is None else f"{avail / 2**30:.1f}",
    )  # fmt: skip
    if avail is not None and mem["total"] > avail:
        log.warning("the index may not fit in the memory available now")

    t0 = time.perf_counter()
    params: dict[str, Any] = {}
    phi = None
    if kind == "flat":
        index = faiss.IndexFlatIP(d)
    elif kind == "hnsw":
        p = cfg["hnsw"]
        phi = _hnsw_phi(shards, chunk)
        index = faiss.IndexHNSWFlat(d + 1, int(p["m"]))
        index.hnsw.efConstruction = int(p["ef_construction"])
        index.hnsw.efSearch = int(p["ef_search"])
        params = {k: int(v) for k, v in p.items()}
    else:
        p = cfg["ivfpq"]
        nlist, m, nbits = int(p["nlist"]), int(p["m"]), int(p["nbits"])
        if d % m:
            raise SystemExit(f"error: ivfpq.m={m} must divide the dimension {d}")
        if n < nlist:
            raise SystemExit(f"error: ivfpq.nlist={nlist} exceeds the number of vectors {n}")
        quantizer = faiss.IndexFlatIP(d)
        index = faiss.IndexIVFPQ(quantizer, d, nlist, m, nbits, faiss.METRIC_INNER_PRODUCT)
        index.cp.seed = int(cfg["seed"])
        index.pq.cp.seed = int(cfg["seed"])
        index.nprobe = int(p["nprobe"])
        params = {k: int(v) for k, v in p.items()}

    reserve_for(index, kind, n, d, cfg, faiss)
    # Only IVF-PQ gains from GPUs at build time (k-means, encoding); FAISS has no GPU HNSW.
    on_gpu = kind == "ivfpq" and gpu_wanted(cfg["use_gpu"], faiss)
    if on_gpu:
        log.info("building on %d GPU(s)", faiss.get_num_gpus())
        index = to_gpus(index, faiss, shard=False)
    if kind == "ivfpq":
        sample = _train_sample(shards, int(cfg["ivfpq"]["train_size"]), int(cfg["seed"]))
        log.info("training IVF-PQ on %d sampled vectors (seed %d)", len(sample), cfg["seed"])
        index.train(sample)
        del sample
    bar = progress(total=n, desc=f"index {kind}", unit="vec")
    for _, x in shards.chunks(chunk):
        index.add(hnsw_augment(x, phi) if kind == "hnsw" else x)
        bar.update(len(x))
    bar.close()
    if on_gpu:
        index = faiss.index_gpu_to_cpu(index)
    seconds = time.perf_counter() - t0

    meta = {
        "type": kind,
        "n": n,
        "d": d,
        "params": params,
        "phi": phi,
        "metric": "inner_product",
        "ids": ids_path(out).name,
        "shards": [str(p) for p in shards.paths],
        "memory_estimate_bytes": mem,
        "build_seconds": round(seconds, 3),
        "built_on_gpu": on_gpu,
        "faiss_version": faiss.__version__,
        "seed": int(cfg["seed"]),
        "environment": environment(("cpu", "faiss", "blas")),
    }
    with atomic_path(ids_path(out)) as tmp, open(tmp, "wb") as fh:
        np.save(fh, shards.ids)
    write_json(meta_path(out), meta)
    with atomic_path(out) as tmp:  # the index itself last: its presence means complete
        faiss.write_index(index, str(tmp))
    log.info("wrote %s (%d vectors, %.1f s)", out, n, seconds)
    return meta


# --------------------------------------------------------------------------------------------
# Searching


class DenseIndex:
    """A built index: ``search(queries, k) -> (scores, pids)``, scores being inner products.

    Rows with fewer than ``k`` hits are padded with pid -1 and score -inf.
    """

    def __init__(self, index, ids: np.ndarray, meta: dict[str, Any]):
        self.index = index
        self.ids = ids
        self.meta = meta

    @property
    def kind(self) -> str:
        return self.meta["type"]

    @property
    def d(self) -> int:
        return int(self.meta["d"])

    @property
    def n(self) -> int:
        return int(self.meta["n"])

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        use_gpu: str | bool = "auto",
        ef_search: int | None = None,
        nprobe: int | None = None,
    ) -> DenseIndex:
        import faiss  # lazy: see build_index

        path = Path(path)
        for p in (path, ids_path(path), meta_path(path)):
            if not p.exists():
                raise InputError(p, None, "index file missing (was the index built?)")
        meta = read_json(meta_path(path))
        index = faiss.read_index(str(path))
        ids = np.load(ids_path(path))
        if index.ntotal != len(ids) or index.ntotal != meta["n"]:
            raise InputError(
                path, None, f"{index.ntotal} vectors but {len(ids)} ids / n={meta['n']}"
            )
        if meta["type"] == "hnsw":
            index.hnsw.efSearch = int(ef_search or meta["params"]["ef_search"])
        elif meta["type"] == "ivfpq":
            index.nprobe = int(nprobe or meta["params"]["nprobe"])
        if meta["type"] != "hnsw" and gpu_wanted(use_gpu, faiss):
            shard = meta["type"] == "flat"
            why = gpus_too_small(index_bytes(meta), gpu_free_bytes(), shard)
            if why is None:
                index = to_gpus(index, faiss, shard=shard)
            elif use_gpu in ("on", True):
                raise SystemExit(f"error: use_gpu is 'on' but {path} does not fit: {why}")
            else:
                log.warning("searching %s on the CPU: %s", path, why)
        return cls(index, ids, meta)

    def search(
        self, queries: np.ndarray, k: int, batch_size: int = 4096
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top ``k`` by inner product: ``(scores float32 [nq, k], pids int64 [nq, k])``."""
        q = np.ascontiguousarray(queries, dtype=np.float32)
        if q.ndim != 2 or q.shape[1] != self.d:
            raise ValueError(f"queries must be [nq, {self.d}], got {q.shape}")
        scores = np.empty((len(q), k), dtype=np.float32)
        pids = np.empty((len(q), k), dtype=np.int64)
        for lo in range(0, len(q), batch_size):
            qb = q[lo : lo + batch_size]
            if self.kind == "hnsw":
                aug = np.hstack([qb, np.zeros((len(qb), 1), dtype=np.float32)])
                dist, pos = self.index.search(aug, k)
                # |q'-p'|^2 = |q|^2 + phi - 2 q.p  =>  q.p = (|q|^2 + phi - dist) / 2
                qn = np.einsum("ij,ij->i", qb, qb)[:, None]
                sc = (qn + np.float32(self.meta["phi"]) - dist) / 2
            else:
                sc, pos = self.index.search(qb, k)
            hit = pos >= 0
            scores[lo : lo + len(qb)] = np.where(hit, sc, -np.inf)
            pids[lo : lo + len(qb)] = np.where(hit, self.ids[np.where(hit, pos, 0)], -1)
        return scores, pids


# --------------------------------------------------------------------------------------------
# CLI


def _cmd_index(args: argparse.Namespace) -> int:
    build_index(args.embeddings, args.out, args.cfg)
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "index",
        help="build a FAISS index (flat, hnsw, ivfpq) from embedding shards",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--embeddings", nargs="+", required=True, help="shard-*.npy files, in order")
    p.add_argument(
        "--out", required=True, help="index file (.faiss); .ids.npy and .json go next to it"
    )
    add_cfg(p)
    p.epilog = "cfg defaults: " + json.dumps(DEFAULT_CFG)
    p.set_defaults(func=_cmd_index)
