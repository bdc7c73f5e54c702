"""MediaWiki XML dump -> cleaned documents, DrQA-style (the cleaning DPR section 4.1 applied).

The dump is read page by page with ``iterparse`` (each page's element is cleared once used), so
memory does not grow with the dump. Wikitext is cleaned with wikiextractor's ``Extractor`` in a
pool of worker processes; results come back in dump order, so the output is deterministic.

Filters, as DrQA's ``prep_wikipedia.py`` on top of WikiExtractor: non-article namespaces,
redirects, disambiguation pages (by title and by disambiguation template), List/Index/Outline
pages, and pages whose cleaned text is empty. Every dropped page is counted by reason.
"""

from __future__ import annotations

import functools
import itertools
import logging
import multiprocessing
import re
import xml.etree.ElementTree as ET
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from drpipe.errors import InputError
from drpipe.io import STREAM_ERRORS, ParquetStreamWriter, open_binary, progress

log = logging.getLogger(__name__)

DOC_SCHEMA = pa.schema([("doc_id", pa.int64()), ("title", pa.string()), ("text", pa.string())])

DROP_REASONS = ("namespace", "redirect", "disambiguation", "list", "empty")

_REDIRECT_RE = re.compile(r"\s*#\s*redirect\b", re.IGNORECASE)
# DrQA: "(disambiguation)" / "(disambiguation page)" titles, and List/Index/Outline pages.
_DISAMBIG_TITLE_RE = re.compile(r"\(disambiguation( page)?\)", re.IGNORECASE)
_LIST_TITLE_RE = re.compile(r"(Lists? of .+)|(Index of .+)|(Outline of .+)")
# Disambiguation pages without "(disambiguation)" in the title carry one of these templates.
_DISAMBIG_TEMPLATE_RE = re.compile(
    r"\{\{\s*(?:[\w ,-]*disambiguation|disambig|disamb|dab|hndis|geodis|numberdis|mathdab"
    r"|schooldis|roaddis|hospitaldis|shipindex)\s*(?:\||\}\})",
    re.IGNORECASE,
)
# wikiextractor leaves these template-only tags in articles; their content is article text.
_ONLYINCLUDE_RE = re.compile(r"</?\s*onlyinclude\s*/?\s*>", re.IGNORECASE)
# Formulas become wikiextractor's own "formula_N" placeholders before cleaning: its per-line
# regex misses multi-line formulas, and "{{" inside TeX is taken for a template.
_MATH_RE = re.compile(r"<math\b[^>]*>.*?</math\s*>", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True)
class Page:
    position: int  # 1-based position of the page in the dump
    page_id: int
    ns: int
    title: str
    redirect: bool
    text: str


def _where(count: int, title: str | None) -> str:
    return "before the first page" if title is None else f"after page {count} {title!r}"


def iter_pages(path: str | Path, stats: dict[str, Any] | None = None) -> Iterator[Page]:
    """Yield the pages of a MediaWiki export, streaming.

    A truncated or corrupt compressed stream or malformed XML raises ``InputError`` naming the
    file and the last complete page. ``stats['uncompressed_bytes']`` gets the bytes parsed.
    """
    stats = stats if stats is not None else {}
    count, last_title = 0, None
    namespaces: dict[str, int] = {}
    with open_binary(path) as fh:
        try:
            context = ET.iterparse(fh, events=("start", "end"))
            _, root = next(context)
            ns = root.tag[: root.tag.index("}") + 1] if root.tag.startswith("{") else ""
            page_tag, nsname_tag = f"{ns}page", f"{ns}namespace"
            for event, elem in context:
                if event != "end":
                    continue
                if elem.tag == nsname_tag and elem.text:
                    namespaces[elem.text] = int(elem.get("key", "0"))
                elif elem.tag == page_tag:
                    page = _page_from_element(elem, ns, count + 1, namespaces, path)
                    count, last_title = count + 1, page.title
                    # Drop the parsed page (and its already-cleared siblings) from the tree.
                    elem.clear()
                    root.clear()
                    yield page
            stats["uncompressed_bytes"] = fh.tell()
        except ET.ParseError as exc:
            line, col = exc.position
            problem = f"malformed XML at line {line}, column {col}: {exc}"
            raise InputError(path, _where(count, last_title), problem) from None
        except STREAM_ERRORS as exc:
            problem = f"truncated or corrupt compressed stream: {exc}"
            raise InputError(path, _where(count, last_title), problem) from None
        except StopIteration:
            raise InputError(path, None, "empty file: no XML root element") from None
    stats["pages"] = count


def _page_from_element(
    elem: ET.Element, ns: str, position: int, namespaces: dict[str, int], path: str | Path
) -> Page:
    title = elem.findtext(f"{ns}title")
    if title is None:
        raise InputError(path, f"page {position}", "page has no <title>")
    ns_text, id_text = elem.findtext(f"{ns}ns"), elem.findtext(f"{ns}id")
    try:
        if ns_text is not None:
            page_ns = int(ns_text)
        else:  # old exports have no <ns>: derive it from the title prefix
            page_ns = namespaces.get(title.split(":", 1)[0] if ":" in title else "", 0)
        page_id = int(id_text) if id_text is not None else position
    except ValueError:
        problem = f"bad <ns> {ns_text!r} or page <id> {id_text!r}"
        raise InputError(path, f"page {position} {title!r}", problem) from None
    revision = elem.find(f"{ns}revision")
    text = (revision.findtext(f"{ns}text") if revision is not None else None) or ""
    redirect = elem.find(f"{ns}redirect") is not None
    return Page(position, page_id, page_ns, title, redirect, text)


def drop_reason(page: Page) -> str | None:
    """Why DrQA-style filtering drops this page before cleaning, or None to keep it."""
    if page.ns != 0:
        return "namespace"
    if page.redirect or _REDIRECT_RE.match(page.text):
        return "redirect"
    if _DISAMBIG_TITLE_RE.search(page.title):
        return "disambiguation"
    if _LIST_TITLE_RE.match(page.title):
        return "list"
    if _DISAMBIG_TEMPLATE_RE.search(page.text):
        return "disambiguation"
    return None


def clean_wikitext(title: str, wikitext: str, keep_sections: bool = False) -> list[str]:
    """Article paragraphs of one page's wikitext: templates, tables, refs and lists removed."""
    # lazy: ~15 ms of regex compiling at every CLI start-up; only the wiki step needs it
    from wikiextractor.extract import Extractor

    wikitext = _ONLYINCLUDE_RE.sub("", wikitext)
    formulas = itertools.count(1)
    wikitext = _MATH_RE.sub(lambda _: f"formula_{next(formulas)}", wikitext)
    extractor = Extractor(0, 0, "", title, [wikitext], keepSections=keep_sections)
    paragraphs = extractor.clean_text(wikitext, expand_templates=False, html_safe=False)
    return [p.strip() for p in paragraphs if p.strip()]


def clean_batch(
    batch: list[tuple[str, str]], keep_sections: bool = False, title_in_text: bool = True
) -> list[str]:
    """Clean (title, wikitext) pairs; '' for a page with no article text left."""
    out = []
    for title, wikitext in batch:
        paragraphs = clean_wikitext(title, wikitext, keep_sections)
        # DrQA's documents (hence DPR's passages) begin with the title line.
        if paragraphs and title_in_text:
            paragraphs = [title, *paragraphs]
        out.append("\n\n".join(paragraphs))
    return out


def ordered_map_chunks(
    fn: Callable[[list], list], chunks: Iterable[list], processes: int, max_pending: int
) -> Iterator[list]:
    """``map(fn, chunks)`` over a process pool, in order, with at most ``max_pending`` chunks
    in flight (Pool.imap would read the whole input ahead and grow with the dump)."""
    if processes <= 1:
        yield from map(fn, chunks)
        return
    with multiprocessing.Pool(processes) as pool:
        pending: deque = deque()
        for chunk in chunks:
            pending.append(pool.apply_async(fn, (chunk,)))
            if len(pending) >= max_pending:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()


def _chunked(items: Iterable, size: int) -> Iterator[list]:
    chunk: list = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _batches_by_size(
    docs: Iterable[tuple[int, str, str]], max_chars: int
) -> Iterator[list[tuple[int, str, str]]]:
    """Batches of documents holding about ``max_chars`` of text each: row groups (and the
    memory of whoever reads them back) stay bounded whatever the article lengths."""
    batch: list[tuple[int, str, str]] = []
    size = 0
    for doc in docs:
        batch.append(doc)
        size += len(doc[2])
        if size >= max_chars:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def iter_documents(
    pages: Iterable[Page],
    counts: Counter,
    processes: int = 1,
    chunk_size: int = 32,
    keep_sections: bool = False,
    title_in_text: bool = True,
) -> Iterator[tuple[int, str, str]]:
    """Yield ``(doc_id, title, text)`` of kept pages in dump order; count drops in ``counts``."""

    def to_clean() -> Iterator[Page]:
        for page in pages:
            counts["pages"] += 1
            reason = drop_reason(page)
            if reason is None:
                yield page
            else:
                counts[reason] += 1

    # Pages travel with their chunk so results can be matched back without a side buffer.
    fn = functools.partial(_clean_pages, keep_sections=keep_sections, title_in_text=title_in_text)
    for chunk in ordered_map_chunks(
        fn, _chunked(to_clean(), chunk_size), processes, max_pending=4 * max(processes, 1)
    ):
        for page_id, title, text in chunk:
            if text:
                counts["kept"] += 1
                yield page_id, title, text
            else:
                counts["empty"] += 1


def _clean_pages(
    pages: list[Page], keep_sections: bool, title_in_text: bool
) -> list[tuple[int, str, str]]:
    texts = clean_batch([(p.title, p.text) for p in pages], keep_sections, title_in_text)
    return [(p.page_id, p.title, t) for p, t in zip(pages, texts, strict=True)]


def extract_wiki(
    dump: str | Path,
    out: str | Path,
    processes: int = 1,
    chunk_size: int = 32,
    keep_sections: bool = False,
    title_in_text: bool = True,
    write_bytes: int = 4 << 20,
    max_articles: int | None = None,
) -> dict[str, Any]:
    """Clean a dump into the documents table ``out``; returns the counts for the report.

    ``max_articles`` keeps only the first N kept articles (in dump order) and stops reading
    there: small real corpora for development; the report says where it stopped.
    """
    counts: Counter = Counter({k: 0 for k in ("pages", "kept", *DROP_REASONS)})
    stats: dict[str, Any] = {}
    pages = progress(iter_pages(dump, stats), desc="wiki pages", unit="page")
    docs = iter_documents(pages, counts, processes, chunk_size, keep_sections, title_in_text)
    if max_articles is not None:
        docs = itertools.islice(docs, max_articles)
    with ParquetStreamWriter(out, DOC_SCHEMA) as writer:
        for batch in _batches_by_size(docs, write_bytes):
            ids, titles, texts = zip(*batch, strict=True)
            writer.write_rows({"doc_id": list(ids), "title": list(titles), "text": list(texts)})
    return {
        "pages": counts["pages"],
        "kept": counts["kept"],
        "dropped": {reason: counts[reason] for reason in DROP_REASONS},
        "uncompressed_bytes": stats.get("uncompressed_bytes"),
        "max_articles": max_articles,
        # Pages after the cut are not read at all, so they are neither kept nor dropped.
        "stopped_after_max_articles": max_articles is not None and counts["kept"] >= max_articles,
    }
