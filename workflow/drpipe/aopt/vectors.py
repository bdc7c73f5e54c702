"""Stored vectors in and out: passage shards (concatenated, one output shard per input shard)
and question vectors (as ``drpipe encode-queries`` writes them)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from drpipe.errors import InputError
from drpipe.io import atomic_path
from drpipe.vectors import ids_path_for, open_shards


@dataclass
class PassageVectors:
    """All shards of a corpus, concatenated: ``ids`` (pids) and ``vectors`` [n, d]."""

    paths: list[Path]
    sizes: list[int]
    ids: np.ndarray
    vectors: np.ndarray

    def rows_of(self, pids: np.ndarray, where: str | Path) -> np.ndarray:
        """Row of each pid; an unknown pid is an error naming ``where``."""
        order = np.argsort(self.ids, kind="stable")
        at = np.searchsorted(self.ids[order], pids)
        at = np.minimum(at, len(order) - 1)
        rows = order[at]
        bad = self.ids[rows] != pids
        if bad.any():
            raise InputError(where, None, f"pid {int(pids[bad][0])} has no stored vector")
        return rows


def read_passage_vectors(paths: Sequence[str | Path]) -> PassageVectors:
    shards = open_shards(paths)
    vectors = np.concatenate([np.asarray(v) for v in shards.vectors])
    return PassageVectors(shards.paths, [len(v) for v in shards.vectors], shards.ids, vectors)


def write_passage_vectors(
    like: PassageVectors, vectors: np.ndarray, outs: Sequence[str | Path]
) -> None:
    """One output shard per input shard: the same ids, the new rows, the input's dtype."""
    if len(outs) != len(like.paths):
        raise SystemExit(f"error: {len(like.paths)} input shards but {len(outs)} --out files")
    lo = 0
    for src, out, n in zip(like.paths, outs, like.sizes, strict=True):
        dtype = np.load(src, mmap_mode="r").dtype
        block = vectors[lo : lo + n].astype(dtype)
        with atomic_path(ids_path_for(out)) as tmp, open(tmp, "wb") as fh:
            np.save(fh, like.ids[lo : lo + n])
        with atomic_path(out) as tmp, open(tmp, "wb") as fh:
            np.save(fh, block)
        lo += n


def write_query_vectors(qids: Sequence[str], vectors: np.ndarray, out: str | Path) -> None:
    """``out`` (float32) and its ``.ids.npy`` (qids), as ``drpipe encode-queries`` writes them."""
    with atomic_path(ids_path_for(out)) as tmp, open(tmp, "wb") as fh:
        np.save(fh, np.array([str(q) for q in qids]))
    with atomic_path(out) as tmp, open(tmp, "wb") as fh:
        np.save(fh, vectors.astype(np.float32))
