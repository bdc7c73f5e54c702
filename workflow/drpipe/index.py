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

The shards are read by ``drpipe.vectors``; whether an index goes to the GPUs, by
``drpipe.placement``.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from drpipe.cliutil import add_cfg
from drpipe.environment import environment
from drpipe.errors import InputError
from drpipe.io import atomic_path, progress, read_json, write_json
from drpipe.placement import available_memory, gpu_wanted, place_for_search, to_gpus
from drpipe.vectors import Shards, open_shards

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
    avail = available_memory()
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
        index = place_for_search(index, meta, use_gpu, faiss, path)
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
