"""Dense retrieval from stored question vectors over a FAISS index.

``retrieve``: search the index with the question vectors written by ``drpipe encode-queries``
(no model is loaded), ``method.search_depth(top_k)`` units deep, and let the method of the
model (recorded in its directory) turn the ranked units into the top ``top_k`` passages (the
identity for passage methods; DCSR: score normalization over sentences); write a run
(``qid, rank, pid, score``). Vectors written by something other than ``encode`` (AOpt) are
searched the same way.

DPR's BM25+dense hybrid, which fuses these dense lists with a BM25 run, is ``drpipe.hybrid``.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from drpipe.cliutil import add_cfg, set_threads
from drpipe.environment import environment
from drpipe.errors import InputError
from drpipe.index import DenseIndex
from drpipe.io import write_json
from drpipe.runs import run_table, write_run
from drpipe.units import unit_pid
from drpipe.vectors import read_query_vectors

log = logging.getLogger(__name__)

DEFAULT_CFG: dict[str, Any] = {
    "top_k": 100,
    "index_type": None,  # when set, the index must be of this type (catches mixed-up paths)
    "use_gpu": "auto",
    "ef_search": None,  # null: the value stored with the index
    "nprobe": None,
    "threads": None,
}


def merged_cfg(cfg: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    unknown = set(cfg) - set(defaults)
    if unknown:
        raise SystemExit(f"error: --cfg has unknown keys {sorted(unknown)}")
    return {**defaults, **cfg}


# --------------------------------------------------------------------------------------------
# Dense retrieval


def open_index(index_path: str | Path, cfg: dict[str, Any]):
    index = DenseIndex.load(
        index_path, use_gpu=cfg["use_gpu"], ef_search=cfg["ef_search"], nprobe=cfg["nprobe"]
    )
    if cfg["index_type"] and cfg["index_type"] != index.kind:
        raise InputError(
            index_path, None, f"index is {index.kind!r}, cfg says {cfg['index_type']!r}"
        )
    return index


def model_method(model_dir: str | Path):
    """The method a model directory was trained with (how its vectors are searched)."""
    # lazy: these import torch (~1 s at CLI start-up, which imports this module)
    from drpipe.encoders import BiEncoder
    from drpipe.methods import get_method

    meta = BiEncoder.read_meta(model_dir)
    return get_method(meta["method"]["name"], meta["method"]["cfg"])


def prepare_queries(model_dir, queries, cfg):
    set_threads(cfg["threads"])
    qids, qvecs = read_query_vectors(queries)
    return model_method(model_dir), qids, qvecs


def search_passages(method, index, qvecs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` passages [n, k] (pids, scores; padding -1) of each question: the method's
    search depth in units, then its units-to-passages ranking."""
    pscores, pids, _ = search_passages_units(method, index, qvecs, k)
    return pscores, pids


def search_passages_units(
    method, index, qvecs: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``search_passages`` and, for a method whose units are not passages, each returned
    passage's best retrieved unit [n, k] (None for passage-level methods)."""
    depth = min(method.search_depth(k), index.n)
    scores, units = index.search(qvecs, depth)
    pids, pscores = method.units_to_passages(units, scores, k)
    if method.corpus_units == "passages":
        return pscores, pids, None
    return pscores, pids, best_units(units, pids, method.corpus_units)


def best_units(units: np.ndarray, pids: np.ndarray, kind: str) -> np.ndarray:
    """For each returned passage, its first (so best-scoring) unit in the retrieved list
    ``units`` [n, depth], ranked best first; -1 where a passage has none (padding)."""
    owners = unit_pid(units, kind)
    out = np.full(pids.shape, -1, dtype=np.int64)
    for i in range(len(pids)):
        seen, first = np.unique(owners[i], return_index=True)  # first = best: lists are ranked
        if not len(seen):
            continue
        at = np.minimum(np.searchsorted(seen, pids[i]), len(seen) - 1)
        ok = (pids[i] >= 0) & (seen[at] == pids[i])
        out[i, ok] = units[i, first[at[ok]]]
    return out


def dense_lists(scores: np.ndarray, pids: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per-question hit lists from padded search results (padding: pid -1)."""
    keep = pids >= 0
    return [p[k] for p, k in zip(pids, keep, strict=True)], [
        s[k] for s, k in zip(scores, keep, strict=True)
    ]


def retrieve(
    model_dir: str | Path,
    queries: str | Path,
    index_path: str | Path,
    out: str | Path,
    cfg: dict[str, Any],
) -> dict[str, Any]:
    """Dense top-``top_k`` run for every question of ``queries``; returns the report."""
    cfg = merged_cfg(cfg, DEFAULT_CFG)
    index = open_index(index_path, cfg)
    method, qids, qvecs = prepare_queries(model_dir, queries, cfg)
    t0 = time.perf_counter()
    scores, pids, units = search_passages_units(method, index, qvecs, int(cfg["top_k"]))
    search_s = time.perf_counter() - t0
    plist, slist = dense_lists(scores, pids)
    # Units ride along with their passages (the same padding mask as the pids).
    ulist = None if units is None else [u[p >= 0] for u, p in zip(units, pids, strict=True)]
    write_run(out, run_table(qids, plist, slist, ulist))
    short = sum(1 for p in plist if len(p) < int(cfg["top_k"]))
    report = {
        "method": method.name,
        "units": method.corpus_units,
        "search_depth": min(method.search_depth(int(cfg["top_k"])), index.n),
        "queries": str(queries),
        "index": str(index_path),
        "index_type": index.kind,
        "n_index": index.n,
        "n_questions": len(qids),
        "top_k": int(cfg["top_k"]),
        "n_questions_short_list": short,
        "search_seconds": round(search_s, 3),
        "questions_per_second_search": round(len(qids) / search_s, 1) if search_s > 0 else None,
    }
    if short:
        log.warning("%d questions got fewer than top_k=%d hits", short, cfg["top_k"])
    log.info("dense run of %d questions -> %s", len(qids), out)
    return report


# --------------------------------------------------------------------------------------------
# CLI


def _cmd_retrieve(args: argparse.Namespace) -> int:
    report = retrieve(args.model, args.queries, args.index, args.out, args.cfg)
    write_json(args.report, {**report, "environment": environment(("cpu", "faiss", "blas"))})
    return 0


def add_common_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model", required=True, help="model directory (read for its method; no weights)"
    )
    p.add_argument("--queries", required=True, help="question vectors (drpipe encode-queries)")
    p.add_argument("--index", required=True, help="index built by `drpipe index`")
    p.add_argument("--out", required=True, help="run (Parquet: qid, rank, pid, score)")
    p.add_argument("--report", required=True, help="JSON report (counts, timings)")


def register(sub) -> None:
    p = sub.add_parser(
        "retrieve",
        help="dense retrieval of the questions' top-k passages",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="cfg defaults: " + json.dumps(DEFAULT_CFG),
    )
    add_common_args(p)
    add_cfg(p)
    p.set_defaults(func=_cmd_retrieve)
