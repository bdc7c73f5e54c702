"""Stored vectors: ``.npy`` files of rows beside ``.ids.npy`` files of their ids, as ``drpipe
encode`` writes corpus shards (``shard-i.npy``, unit ids) and ``drpipe encode-queries`` question
vectors (``X.npy``, qids); indexing, retrieval, the hybrid and AOpt read them here, none of them
needing the encoder.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from drpipe.errors import InputError


def ids_path_for(out: str | Path) -> Path:
    """``.../shard-3.npy`` -> ``.../shard-3.ids.npy``."""
    out = Path(out)
    return out.with_name(out.name.removesuffix(".npy") + ".ids.npy")


class NpyAppender:
    """A 2-D ``.npy`` written by appending rows, when the row count is known only at the end.

    The header is reserved at a fixed size and rewritten with the final shape on ``close``
    (numpy pads headers with spaces, so a shorter shape still fits): 128 bytes, or the next
    multiple of 64 that holds the dtype's description (a record dtype's is longer) with a row
    count of 19 digits.
    """

    def __init__(self, path: str | Path, dtype: np.dtype, dim: int | None):
        self.path, self.dtype, self.dim, self.rows = Path(path), np.dtype(dtype), dim, 0
        longest = len(self._text(10**18)) + 11  # magic (6) + version (2) + length (2) + "\n"
        self.header_size = max(128, -(-longest // 64) * 64)
        self.fh = open(self.path, "wb")  # noqa: SIM115 (closed in close())
        self.fh.write(self._header())

    def _text(self, rows: int) -> str:
        return repr({"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False,
                     "shape": (rows,) if self.dim is None else (rows, self.dim)})  # fmt: skip

    def _header(self) -> bytes:
        """Format 1.0 header of exactly ``header_size`` bytes for the current shape."""
        text = self._text(self.rows)
        body = self.header_size - 10  # magic (6) + version (2) + length (2)
        if len(text) + 1 > body:
            raise ValueError(f"npy header longer than {self.header_size} bytes: {text}")
        return (
            b"\x93NUMPY\x01\x00" + struct.pack("<H", body) + (text.ljust(body - 1) + "\n").encode()
        )

    def append(self, rows: np.ndarray) -> None:
        rows = np.ascontiguousarray(rows, dtype=self.dtype)
        want = 1 if self.dim is None else 2
        if rows.ndim != want or (self.dim is not None and rows.shape[1] != self.dim):
            raise ValueError(f"rows of shape {rows.shape} do not fit dimension {self.dim}")
        self.fh.write(rows.tobytes())
        self.rows += len(rows)

    def close(self) -> None:
        self.fh.seek(0)
        self.fh.write(self._header())
        self.fh.close()


def read_query_vectors(path: str | Path) -> tuple[list[str], np.ndarray]:
    """(qids, vectors float32 [n, d]) as ``drpipe encode-queries`` writes them."""
    path = Path(path)
    ids = ids_path_for(path)
    try:
        vecs = np.load(path, allow_pickle=False)
        qids = np.load(ids, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise InputError(path, None, f"cannot read query vectors ({exc})") from None
    if vecs.ndim != 2 or qids.shape != (len(vecs),):
        raise InputError(path, None, f"{len(qids)} qids in {ids} for vectors {vecs.shape}")
    return [str(q) for q in qids], vecs.astype(np.float32, copy=False)


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
