"""The passage table every later stage reads: ``pid, title, text, source, doc_id``.

Stored as Parquet in row groups so that shards and lookups stream instead of loading a
21M-passage corpus into memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

PASSAGE_SCHEMA = pa.schema(
    [
        ("pid", pa.int64()),  # stable integer id (DPR's `id` column when read from psgs_w100.tsv)
        ("title", pa.string()),
        ("text", pa.string()),
        ("source", pa.string()),  # which document source it came from (e.g. "squad_dev")
        ("doc_id", pa.int64()),  # document index within that source
    ]
)


def num_passages(path: str | Path) -> int:
    return pq.ParquetFile(path).metadata.num_rows


def shard_bounds(n: int, shard: int, num_shards: int) -> tuple[int, int]:
    """Row range [start, stop) of shard ``shard`` of ``num_shards`` near-equal shards."""
    if not 0 <= shard < num_shards:
        raise ValueError(f"shard {shard} out of range for {num_shards} shards")
    return n * shard // num_shards, n * (shard + 1) // num_shards


def iter_passages(
    path: str | Path,
    columns: list[str] | None = None,
    start: int = 0,
    stop: int | None = None,
    batch_size: int = 8192,
) -> Iterator[pa.RecordBatch]:
    """Stream rows [start, stop) of the passage table as RecordBatches."""
    pf = pq.ParquetFile(path)
    stop = pf.metadata.num_rows if stop is None else stop
    offset = 0
    for rg in range(pf.metadata.num_row_groups):
        rg_rows = pf.metadata.row_group(rg).num_rows
        rg_start, rg_stop = offset, offset + rg_rows
        offset = rg_stop
        if rg_stop <= start:
            continue
        if rg_start >= stop:
            break
        table = pf.read_row_group(rg, columns=columns)
        lo, hi = max(start - rg_start, 0), min(stop, rg_stop) - rg_start
        yield from table.slice(lo, hi - lo).to_batches(max_chunksize=batch_size)


def load_passages(
    path: str | Path, pids: Iterable[int] | None = None
) -> dict[int, tuple[str, str]]:
    """``{pid: (title, text)}`` for the given pids (all passages if None), streaming the file."""
    wanted = None if pids is None else set(int(p) for p in pids)
    out: dict[int, tuple[str, str]] = {}
    for batch in iter_passages(path, columns=["pid", "title", "text"]):
        ids = batch.column(0).to_pylist()
        titles = batch.column(1).to_pylist()
        texts = batch.column(2).to_pylist()
        for pid, title, text in zip(ids, titles, texts, strict=True):
            if wanted is None or pid in wanted:
                out[pid] = (title, text)
    if wanted is not None and len(out) < len(wanted):
        missing = sorted(wanted - out.keys())[:5]
        raise KeyError(f"{path}: {len(wanted) - len(out)} passage ids not found, e.g. {missing}")
    return out
