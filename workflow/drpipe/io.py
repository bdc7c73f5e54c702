"""Small I/O helpers shared by every stage: atomic outputs, compressed text, JSON, Parquet, logging.

Every output is written under a temporary name in the same directory and renamed into place
only when complete, so a killed or failed job never leaves a half-written file for Snakemake
(or a user) to mistake for a finished one.
"""

from __future__ import annotations

import bz2
import contextlib
import csv
import gzip
import io
import json
import logging
import os
import shutil
import sys
import tempfile
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from drpipe.errors import InputError

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


# ----------------------------------------------------------------------------- external inputs
# Readers of files the pipeline did not write (dumps, datasets) go through these helpers: they
# decode strict UTF-8 and turn an undecodable byte, a truncated or corrupt .gz/.bz2 stream or
# bad JSON into one ``InputError`` naming the file and the line.

# What a truncated or corrupt compressed stream raises: EOFError (stream ends early),
# gzip.BadGzipFile / OSError (bad header or data), zlib.error (bad deflate data).
STREAM_ERRORS = (EOFError, OSError, zlib.error)


def open_binary(path: str | Path) -> BinaryIO:
    """Open plain, .gz or .bz2 bytes by the file's magic bytes (multi-stream .bz2 included)."""
    with open(path, "rb") as fh:
        magic = fh.read(3)
    if magic[:2] == b"\x1f\x8b":
        return gzip.open(path, "rb")
    if magic == b"BZh":
        return bz2.open(path, "rb")
    return open(path, "rb")  # noqa: SIM115 (returned to the caller, who closes it)


def _bad_utf8(line: bytes | bytearray, start: int) -> str:
    """The problem text for an undecodable byte at offset ``start`` of ``line``."""
    return f"invalid UTF-8 at byte {start + 1} of the line: {bytes(line[start : start + 4])!r}"


def _corrupt(exc: BaseException) -> str:
    return f"truncated or corrupt file ({type(exc).__name__}: {exc})"


def input_head(path: str | Path, size: int = 4096) -> bytes:
    """The first ``size`` bytes of an input after decompression (to sniff its layout)."""
    with open_binary(path) as fh:
        try:
            return fh.read(size)
        except STREAM_ERRORS as exc:
            raise InputError(path, "line 1", _corrupt(exc)) from None


def iter_input_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """``(line number, line with its line end)`` of a plain/.gz/.bz2 text input, strict UTF-8.

    Lines end at ``\\n`` only (a ``\\r`` stays in the line). An undecodable line, or a
    compressed stream that is truncated or corrupt, raises ``InputError`` naming the line.
    """
    lineno = 0
    with open_binary(path) as fh:
        lines = iter(fh)
        while True:
            try:
                raw = next(lines)
            except StopIteration:
                return
            except STREAM_ERRORS as exc:
                raise InputError(path, f"line {lineno + 1}", _corrupt(exc)) from None
            lineno += 1
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(path, f"line {lineno}", _bad_utf8(raw, exc.start)) from None
            yield lineno, line


def iter_input_rows(
    path: str | Path, delimiter: str = "\t", *, cr_in_fields: bool = False
) -> Iterator[tuple[int, list[str]]]:
    """``(line number, fields)`` of a CSV/TSV input read with Python's ``csv`` dialect.

    Besides ``iter_input_lines``'s checks, every row must lie on one line: a field that opens
    a double quote and never closes it would otherwise swallow the following lines silently,
    so a row spanning lines, or a field holding a line break, raises ``InputError`` naming the
    line where the row starts. A ``csv.Error`` (e.g. a field over ``csv.field_size_limit()``)
    also becomes an ``InputError``.

    ``cr_in_fields``: a CR inside a line (not its line end) is part of its field, quoted or
    not, as in a file whose lines end at ``\n`` only (DPR's question CSVs); by default it is
    an error (the ``csv`` module stops at an unquoted one).
    """
    stand_in = [""]  # what stands for CR in the line the reader took last ("" if none)
    if cr_in_fields:
        lines = _lines_hiding_cr(path, stand_in)
    else:
        lines = (line for _, line in iter_input_lines(path))
    reader = csv.reader(lines, delimiter=delimiter)
    end = 0
    while True:
        start = end + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            runs = (
                f" (the row runs on to line {reader.line_num})" if reader.line_num > start else ""
            )
            raise InputError(path, f"line {start}", f"bad CSV/TSV row: {exc}{runs}") from None
        end = reader.line_num
        if end > start or any("\n" in f or ("\r" in f and not cr_in_fields) for f in row):
            problem = (
                "a double-quoted field is not closed on its line"
                + (f" (the row runs on to line {end})" if end > start else "")
                + "; a field that begins with '\"' must end with '\"' on the same line"
            )
            raise InputError(path, f"line {start}", problem)
        if stand_in[0]:
            row = [f.replace(stand_in[0], "\r") for f in row]
        yield start, row


def _lines_hiding_cr(path: str | Path, stand_in: list[str]) -> Iterator[str]:
    """``iter_input_lines`` with each CR inside a line replaced by a private-use character the
    line lacks (the ``csv`` module ends a row at any CR), named in ``stand_in[0]``."""
    for lineno, line in iter_input_lines(path):
        body = line.removesuffix("\n").removesuffix("\r")  # the line end: LF, CR LF, or CR
        if "\r" not in body:
            stand_in[0] = ""
            yield line
            continue
        mark = next((c for c in map(chr, range(0xE000, 0xF900)) if c not in line), None)
        if mark is None:
            raise InputError(
                path,
                f"line {lineno}",
                "a CR inside the line, and no private-use character free to stand for it",
            )
        stand_in[0] = mark
        yield body.replace("\r", mark) + line[len(body) :]


def read_input_text(path: str | Path, chunk_size: int = 1 << 24) -> str:
    """The whole text of a plain/.gz/.bz2 input, strict UTF-8; errors name file and line."""
    buf = bytearray()
    with open_binary(path) as fh:
        while True:
            try:
                chunk = fh.read(chunk_size)
            except STREAM_ERRORS as exc:
                line = buf.count(b"\n") + 1
                raise InputError(path, f"line {line}", _corrupt(exc)) from None
            if not chunk:
                break
            buf += chunk
    try:
        return buf.decode("utf-8")
    except UnicodeDecodeError as exc:
        begin = buf.rfind(b"\n", 0, exc.start) + 1
        line = buf.count(b"\n", 0, exc.start) + 1
        problem = _bad_utf8(buf[begin : exc.start + 4], exc.start - begin)
        raise InputError(path, f"line {line}", problem) from None


def load_input_json(path: str | Path) -> Any:
    """Parse a JSON input (plain/.gz/.bz2); any bad byte or syntax names file and line."""
    text = read_input_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        problem = f"invalid JSON: {exc.msg} (column {exc.colno})"
        raise InputError(path, f"line {exc.lineno}", problem) from None


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
    for lineno, line in iter_input_lines(path):
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
    from tqdm.auto import tqdm  # lazy: ~40 ms at CLI start-up (it probes for notebooks)

    kwargs.setdefault("mininterval", 5.0)
    kwargs.setdefault("file", sys.stderr)
    kwargs.setdefault("dynamic_ncols", False)
    return tqdm(iterable, **kwargs)
