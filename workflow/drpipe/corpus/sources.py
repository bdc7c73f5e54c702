"""Document and passage sources other than a dump: SQuAD articles and DPR's ``psgs_w100.tsv``.

``psgs_w100.tsv`` is tab-separated with a header ``id, text, title``; fields containing a double
quote are quoted CSV-style with inner quotes doubled (the released file and the sample in the
data mirror agree), which is exactly Python's ``csv`` dialect with a tab delimiter and "\\n" line
ends. Reading and writing both use it, so TSV -> passages -> TSV is byte-identical.
"""

from __future__ import annotations

import csv
import random
import re
import urllib.parse
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from drpipe.corpus.passages import PASSAGE_SCHEMA
from drpipe.errors import InputError
from drpipe.io import (
    ParquetStreamWriter,
    atomic_path,
    iter_input_rows,
    load_input_json,
    open_text,
    progress,
)

DPR_HEADER = ["id", "text", "title"]
_PERCENT_RE = re.compile(r"%[0-9A-Fa-f]{2}")


# ----------------------------------------------------------------------------- SQuAD


def squad_title(title: str) -> str:
    """SQuAD article title as a Wikipedia title: underscores to spaces, %-escapes decoded."""
    if _PERCENT_RE.search(title):
        title = urllib.parse.unquote(title, errors="strict")
    return title.replace("_", " ")


def sample_article_indices(n_articles: int, sample: int | None, seed: int) -> list[int]:
    """Indices of a seeded sample of ``sample`` articles (all if None), in file order."""
    if sample is None or sample >= n_articles:
        return list(range(n_articles))
    if sample < 0:
        raise ValueError(f"sample_articles must be >= 0, got {sample}")
    return sorted(random.Random(seed).sample(range(n_articles), sample))


def read_squad_articles(path: str | Path) -> list[dict[str, Any]]:
    """The ``data`` list of a SQuAD JSON file (plain or gzip), validated article by article."""
    obj = load_input_json(path)
    if not isinstance(obj, dict) or not isinstance(obj.get("data"), list):
        raise InputError(path, None, "not SQuAD JSON: expected an object with a 'data' list")
    for i, article in enumerate(obj["data"]):
        if not isinstance(article, dict) or not isinstance(article.get("title"), str):
            raise InputError(path, f"article {i}", "article lacks a string 'title'")
        paragraphs = article.get("paragraphs")
        if not isinstance(paragraphs, list) or not all(
            isinstance(p, dict) and isinstance(p.get("context"), str) for p in paragraphs
        ):
            raise InputError(
                path,
                f"article {i} {article['title']!r}",
                "'paragraphs' must be a list of objects with a string 'context'",
            )
    return obj["data"]


def squad_documents(
    path: str | Path, sample_articles: int | None = None, seed: int = 13
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Documents (``doc_id`` = article index in the file, title, contexts joined by blank lines)
    of all or a seeded sample of the articles; articles with no text are skipped and counted."""
    articles = read_squad_articles(path)
    chosen = sample_article_indices(len(articles), sample_articles, seed)
    docs, empty = [], 0
    for i in chosen:
        article = articles[i]
        paragraphs = [p["context"] for p in article["paragraphs"] if p["context"].strip()]
        if not paragraphs:
            empty += 1
            continue
        docs.append(
            {"doc_id": i, "title": squad_title(article["title"]), "text": "\n\n".join(paragraphs)}
        )
    counts = {"articles": len(articles), "sampled": len(chosen), "kept": len(docs), "empty": empty}
    return docs, counts


# ----------------------------------------------------------------------------- DPR TSV


def iter_dpr_tsv(path: str | Path) -> Iterator[tuple[int, str, str]]:
    """Yield ``(id, text, title)`` of a DPR passages TSV, exactly as stored.

    Bad bytes, a truncated .gz/.bz2, a quote left open or an oversized field raise
    ``InputError`` naming the line (``drpipe.io.iter_input_rows``).
    """
    rows = iter_input_rows(path, delimiter="\t")
    first = next(rows, None)
    header = None if first is None else first[1]
    if header != DPR_HEADER:
        raise InputError(path, "line 1", f"expected header {DPR_HEADER}, found {header}")
    for lineno, row in rows:
        where = f"line {lineno}"
        if len(row) != 3:
            raise InputError(
                path,
                where,
                f"expected 3 tab-separated fields (id, text, title), found {len(row)}",
            )
        pid, text, title = row
        if not pid.isdigit() or str(int(pid)) != pid:
            raise InputError(path, where, f"id {pid!r} is not a plain non-negative integer")
        yield int(pid), text, title


def dpr_passage_rows(
    rows: Iterable[tuple[int, str, str]], source: str
) -> Iterator[tuple[int, str, str, str, int]]:
    """``(pid, title, text, source, doc_id)``; psgs_w100 has no document id, so consecutive rows
    with the same title form one document (the file is in document order)."""
    doc_id, last_title = -1, None
    for pid, text, title in rows:
        if title != last_title:
            doc_id, last_title = doc_id + 1, title
        yield pid, title, text, source, doc_id


def write_dpr_tsv(path: str | Path, rows: Iterable[tuple[int, str, str]]) -> int:
    """Write ``(id, text, title)`` rows in psgs_w100.tsv layout (atomic); returns the row count."""
    path = Path(path)
    n = 0
    compressed = path.suffix in (".gz", ".bz2")
    with atomic_path(path) as tmp:
        # open_text picks the codec from the suffix, so write under one that has it.
        target = tmp.with_name(tmp.name + path.suffix) if compressed else tmp
        with (
            open_text(target, "wt")
            if compressed
            else open(target, "w", encoding="utf-8", newline="")
        ) as fh:
            writer = csv.writer(fh, delimiter="\t", lineterminator="\n")
            writer.writerow(DPR_HEADER)
            for pid, text, title in rows:
                writer.writerow((pid, text, title))
                n += 1
        if compressed:
            target.replace(tmp)
    return n


def dpr_tsv_to_passages(
    tsv: str | Path,
    out: str | Path,
    subset: int | None = None,
    source: str = "psgs_w100",
    write_batch: int = 10_000,
) -> dict[str, Any]:
    """Stream a DPR passages TSV into the passage table (first ``subset`` rows if given; the
    rest are still read, so the report can say how many were left out)."""
    names = PASSAGE_SCHEMA.names
    cols: dict[str, list] = {n: [] for n in names}
    kept = beyond = empty_text = 0
    with ParquetStreamWriter(out, PASSAGE_SCHEMA) as writer:
        rows = progress(iter_dpr_tsv(tsv), desc="tsv rows", unit="psg")
        for row in dpr_passage_rows(rows, source):
            if subset is not None and kept >= subset:
                beyond += 1
                continue
            kept += 1
            empty_text += not row[2].strip()
            for name, value in zip(names, row, strict=True):
                cols[name].append(value)
            if len(cols["pid"]) >= write_batch:
                writer.write_rows(cols)
                cols = {n: [] for n in names}
        writer.write_rows(cols)
    return {
        "passages": kept,
        "passages_with_empty_text": empty_text,
        "passages_beyond_subset": beyond,
        "subset": subset,
        "source": source,
    }
