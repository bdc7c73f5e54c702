"""Small I/O helpers shared by every stage: atomic outputs, compressed text, JSON, Parquet, logging.

Every output is written under a temporary name in the same directory and renamed into place
only when complete, so a killed or failed job never leaves a half-written file for Snakemake
(or a user) to mistake for a finished one.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import json
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

log = logging.getLogger("drpipe")


@contextlib.contextmanager
def atomic_path(path: str | Path, *, directory: bool = False) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it to ``path`` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if directory:
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    else:
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        tmp = Path(name)
    try:
        yield tmp
        # mkstemp/mkdtemp create 0600/0700; results are meant to be handed on, so use the umask.
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod((0o777 if tmp.is_dir() else 0o666) & ~umask)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        os.replace(tmp, path)
    except BaseException:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
        raise


def open_text(path: str | Path, mode: str = "rt", encoding: str = "utf-8", errors: str = "strict"):
    """Open plain, .gz or .bz2 text by the file's magic bytes (not its name)."""
    path = Path(path)
    if "r" in mode:
        with open(path, "rb") as fh:
            magic = fh.read(3)
        if magic[:2] == b"\x1f\x8b":
            return gzip.open(path, mode, encoding=encoding, errors=errors)
        if magic == b"BZh":
            return bz2.open(path, mode, encoding=encoding, errors=errors)
        return open(path, mode, encoding=encoding, errors=errors)
    if path.suffix == ".gz":
        # mtime=0 keeps gzip output byte-identical across runs.
        fh = open(path, "wb")  # noqa: SIM115 (owned and closed by the GzipFile below)
        raw = gzip.GzipFile(filename="", mode="wb", fileobj=fh, mtime=0)
        raw.myfileobj = fh  # GzipFile closes `myfileobj` on close(), flushing it to disk
        return io.TextIOWrapper(raw, encoding=encoding)
    if path.suffix == ".bz2":
        return bz2.open(path, mode, encoding=encoding)
    return open(path, mode, encoding=encoding)


def write_json(path: str | Path, obj: Any) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def read_json(path: str | Path) -> Any:
    with open_text(path) as fh:
        return json.load(fh)


def write_jsonl(path: str | Path, records: Iterable[dict]) -> int:
    """Write JSON lines (gzip if the name ends in .gz); returns the record count."""
    n = 0
    path = Path(path)
    with atomic_path(path) as tmp:
        target = tmp.with_name(tmp.name + (".gz" if path.suffix == ".gz" else ""))
        with open_text(target, "wt") as fh:
            for rec in records:
                fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
                n += 1
        os.replace(target, tmp)
    return n


def read_jsonl(path: str | Path) -> Iterator[dict]:
    """Yield records of a JSON-lines file; a bad line raises an error naming file and line."""
    from drpipe.errors import InputError

    with open_text(path) as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(path, f"line {lineno}", f"invalid JSON: {exc.msg}") from None


def write_parquet(path: str | Path, table: pa.Table | Any, row_group_size: int = 50_000) -> None:
    """Write a pyarrow Table or pandas DataFrame atomically."""
    if not isinstance(table, pa.Table):
        table = pa.Table.from_pandas(table, preserve_index=False)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, row_group_size=row_group_size)


class ParquetStreamWriter:
    """Append record batches to a Parquet file without holding the whole table in memory.

    Use as a context manager; the file appears under its final name only on clean exit.
    """

    def __init__(self, path: str | Path, schema: pa.Schema):
        self.path = Path(path)
        self.schema = schema
        self._ctx = atomic_path(self.path)
        self._writer: pq.ParquetWriter | None = None
        self.rows = 0

    def __enter__(self) -> ParquetStreamWriter:
        tmp = self._ctx.__enter__()
        self._writer = pq.ParquetWriter(tmp, self.schema)
        return self

    def write_rows(self, rows: dict[str, list]) -> None:
        if not rows or not next(iter(rows.values())):
            return
        batch = pa.RecordBatch.from_pydict(rows, schema=self.schema)
        self._writer.write_batch(batch)
        self.rows += batch.num_rows

    def __exit__(self, exc_type, exc, tb) -> bool:
        assert self._writer is not None
        self._writer.close()
        return bool(self._ctx.__exit__(exc_type, exc, tb))


def iter_parquet(path: str | Path, columns: list[str] | None = None, batch_size: int = 10_000):
    """Stream a Parquet file as RecordBatches, one row group at a time (``iter_batches``
    reads ahead, so its memory grows with the file)."""
    pf = pq.ParquetFile(path)
    for rg in range(pf.metadata.num_row_groups):
        yield from pf.read_row_group(rg, columns=columns).to_batches(max_chunksize=batch_size)


def parquet_num_rows(path: str | Path) -> int:
    return pq.ParquetFile(path).metadata.num_rows


def setup_logging(verbose: bool = False) -> None:
    """Log to stderr; Snakemake rules redirect stderr to the rule's ``log:`` file."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
        force=True,
    )


def progress(iterable=None, **kwargs):
    """tqdm to stderr with a steady refresh rate, so progress lands in rule logs too."""
    from tqdm.auto import tqdm

    kwargs.setdefault("mininterval", 5.0)
    kwargs.setdefault("file", sys.stderr)
    kwargs.setdefault("dynamic_ncols", False)
    return tqdm(iterable, **kwargs)
