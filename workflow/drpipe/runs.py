"""Run files: the one reader and writer of the ``qid, rank, pid, score`` Parquet every method emits.

A run holds, per question, its retrieved passages best first: ``rank`` is 1-based and runs
1..n without gaps or repeats, a pid occurs at most once in a question's list. A method that
retrieves smaller units than passages (DCSR's sentences) adds a ``unit`` column: the passage's
best-scoring retrieved unit, which a second training round mines as a unit-specific negative.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from drpipe.errors import InputError
from drpipe.io import write_parquet

RUN_SCHEMA = pa.schema(
    [("qid", pa.string()), ("rank", pa.int32()), ("pid", pa.int64()), ("score", pa.float64())]
)

# The same with each passage's best retrieved unit (methods whose units are not passages).
RUN_UNITS_SCHEMA = pa.schema([*RUN_SCHEMA, ("unit", pa.int64())])

Hits = tuple[np.ndarray, np.ndarray]  # (pids int64, scores float64), best first


def read_run(
    path: str | Path, depth: int | None = None, qids: Sequence[str] | None = None
) -> dict[str, Hits]:
    """A run as ``{qid: (pids int64, scores float64)}`` in rank order, cut at ``depth``.

    Questions come in ``qids`` order when given (each run qid must be one of them), else in
    order of first appearance. Null values, ranks other than 1..n per question and a pid
    repeated within a question's list are errors naming the file and the record.
    """
    table = pq.read_table(path, columns=RUN_SCHEMA.names)
    for name in RUN_SCHEMA.names:
        col = table.column(name)
        if col.null_count:
            row = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
            rec = table.slice(row, 1).to_pylist()[0]
            raise InputError(
                path, f"row {row} (qid {rec['qid']!r} rank {rec['rank']!r})", f"null {name}"
            )
    encoded = table.column("qid").combine_chunks().dictionary_encode()
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    names: list[str] = encoded.dictionary.to_pylist()
    if qids is not None:
        known = {q: i for i, q in enumerate(qids)}
        unknown = [i for i, q in enumerate(names) if q not in known]
        if unknown:
            row = int(np.argmax(codes == unknown[0]))
            raise InputError(
                path,
                f"row {row}",
                f"{len(unknown)} run qids are not in the questions file, "
                f"e.g. {names[unknown[0]]!r}",
            )
        # Recode to positions in qids, so groups come out in questions order.
        codes = np.asarray([known[q] for q in names], dtype=np.int64)[codes]
        names = list(qids)
    rank = table.column("rank").to_numpy()
    # Copies (not read-only views of Arrow buffers): callers get ordinary writable arrays.
    pid = np.array(table.column("pid").to_numpy(), dtype=np.int64)
    score = np.array(table.column("score").to_numpy(), dtype=np.float64)
    if depth is not None:  # rows beyond depth are never looked at
        keep = rank <= depth
        codes, rank, pid, score = codes[keep], rank[keep], pid[keep], score[keep]

    n = len(codes)
    if n == 0:
        return {}
    same = codes[1:] == codes[:-1]
    if not np.all((codes[1:] > codes[:-1]) | (same & (rank[1:] >= rank[:-1]))):
        # Runs are written grouped by question in rank order; sort only when they are not.
        order = np.lexsort((rank, codes))
        codes, rank, pid, score = codes[order], rank[order], pid[order], score[order]
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
    ends = np.r_[starts[1:], n]
    # Expected rank of each row: its position within its question's group, from 1.
    expect = np.arange(n) - np.repeat(starts, ends - starts) + 1
    bad = np.flatnonzero(rank != expect)
    if bad.size:
        i = int(bad[0])
        raise InputError(
            path,
            f"qid {names[codes[i]]!r}",
            f"ranks must be 1..n without gaps or repeats; saw {rank[i]} at position {expect[i]}",
        )
    out: dict[str, Hits] = {}
    for lo, hi in zip(starts.tolist(), ends.tolist(), strict=True):
        p = pid[lo:hi]
        sorted_p = np.sort(p)
        if (sorted_p[1:] == sorted_p[:-1]).any():
            raise InputError(path, f"qid {names[codes[lo]]!r}", "a pid occurs twice in its list")
        out[names[codes[lo]]] = (p, score[lo:hi])
    return out


def run_table(
    qids: Sequence[str],
    pids: Sequence[np.ndarray],
    scores: Sequence[np.ndarray],
    units: Sequence[np.ndarray] | None = None,
) -> pa.Table:
    """Rows ``(qid, rank, pid, score[, unit])``, per question in the given order, ranks from 1."""
    lens = [len(p) for p in pids]
    qid_col = np.repeat(np.asarray(qids, dtype=object), lens)
    rank_col = np.concatenate([np.arange(1, n + 1, dtype=np.int32) for n in lens] or [[]])
    cat = np.concatenate(pids) if len(pids) else np.empty(0, np.int64)
    cats = np.concatenate(scores) if len(scores) else np.empty(0)
    arrays = [
        pa.array(qid_col, type=pa.string()),
        pa.array(rank_col.astype(np.int32), type=pa.int32()),
        pa.array(cat.astype(np.int64), type=pa.int64()),
        pa.array(cats.astype(np.float64), type=pa.float64()),
    ]
    if units is None:
        return pa.Table.from_arrays(arrays, schema=RUN_SCHEMA)
    if [len(u) for u in units] != lens:
        raise ValueError("run_table: units must have one entry per retrieved passage")
    catu = np.concatenate(units) if len(units) else np.empty(0, np.int64)
    arrays.append(pa.array(catu.astype(np.int64), type=pa.int64()))
    return pa.Table.from_arrays(arrays, schema=RUN_UNITS_SCHEMA)


def write_run(path: str | Path, table: pa.Table) -> None:
    """Write a run table atomically; its schema must be ``RUN_SCHEMA`` (or
    ``RUN_UNITS_SCHEMA``)."""
    if not (table.schema.equals(RUN_SCHEMA) or table.schema.equals(RUN_UNITS_SCHEMA)):
        raise ValueError(f"run table schema {table.schema} is not RUN_SCHEMA")
    write_parquet(path, table)


def read_run_units(
    path: str | Path, wanted: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], int] | None:
    """``{(qid, pid): best unit}`` for the ``wanted`` pairs found in a run with a ``unit``
    column; None when the run has no such column (a passage-level method's or BM25's)."""
    if "unit" not in pq.read_schema(path).names:
        return None
    import pandas as pd  # lazy: ~0.2 s to import (measured); only this reader needs it

    table = pq.read_table(path, columns=["qid", "pid", "unit"]).to_pandas()
    want = pd.DataFrame(list(wanted), columns=["qid", "pid"]).astype({"pid": np.int64})
    found = want.merge(table, on=["qid", "pid"], how="inner")
    keys = zip(found["qid"], found["pid"].tolist(), strict=True)
    return dict(zip(keys, found["unit"].tolist(), strict=True))
