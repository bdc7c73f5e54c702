"""``drpipe corpus ...``: dump cleaning, SQuAD documents, DPR TSV in/out, chunking, sentences.

Each subcommand writes its output atomically and a ``--report`` JSON (counts by reason, input
and output sizes, seconds); the same numbers go to the log.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from drpipe.cliutil import add_cfg, add_runtime
from drpipe.corpus.chunk import chunk_documents
from drpipe.corpus.passages import iter_passages
from drpipe.corpus.sentences import SplitterUnavailable, split_passages
from drpipe.corpus.sources import dpr_tsv_to_passages, squad_documents, write_dpr_tsv
from drpipe.corpus.wiki import DOC_SCHEMA, extract_wiki
from drpipe.io import write_json, write_parquet

log = logging.getLogger(__name__)


def _size(path: str | Path) -> int:
    return os.path.getsize(path)


def _finish(args: argparse.Namespace, step: str, report: dict[str, Any], t0: float) -> None:
    report["step"] = f"corpus {step}"
    report["seconds"] = round(time.perf_counter() - t0, 3)
    log.info("corpus %s: %s", step, json.dumps(report, sort_keys=True, default=str))
    if getattr(args, "report", None):
        write_json(args.report, report)


def _wiki(args: argparse.Namespace) -> None:
    t0 = time.perf_counter()
    cfg = args.cfg
    counts = extract_wiki(
        args.dump,
        args.out,
        processes=int(cfg.get("processes") or cfg.get("threads") or 1),
        chunk_size=int(cfg.get("chunk_size", 32)),
        keep_sections=bool(cfg.get("keep_sections", False)),
        title_in_text=bool(cfg.get("title_in_text", True)),
        max_articles=cfg.get("max_articles"),
    )
    report = {
        "input": str(args.dump),
        "input_bytes": _size(args.dump),
        "output": str(args.out),
        "output_bytes": _size(args.out),
        "processes": int(cfg.get("processes") or cfg.get("threads") or 1),
        **counts,
    }
    _finish(args, "wiki", report, t0)


def _squad_docs(args: argparse.Namespace) -> None:
    t0 = time.perf_counter()
    docs, counts = squad_documents(
        args.squad, args.cfg.get("sample_articles"), int(args.cfg.get("seed", 13))
    )
    write_parquet(args.out, pa.Table.from_pylist(docs, schema=DOC_SCHEMA))
    report = {
        "input": str(args.squad),
        "input_bytes": _size(args.squad),
        "output": str(args.out),
        "output_bytes": _size(args.out),
        "sample_articles": args.cfg.get("sample_articles"),
        "seed": int(args.cfg.get("seed", 13)),
        **counts,
        "dropped": {
            "empty": counts["empty"],
            "not_sampled": counts["articles"] - counts["sampled"],
        },
    }
    _finish(args, "squad-docs", report, t0)


def _dpr_tsv(args: argparse.Namespace) -> None:
    t0 = time.perf_counter()
    counts = dpr_tsv_to_passages(
        args.tsv,
        args.out,
        subset=args.cfg.get("subset"),
        source=args.cfg.get("source", "psgs_w100"),
    )
    report = {
        "input": str(args.tsv),
        "input_bytes": _size(args.tsv),
        "output": str(args.out),
        "output_bytes": _size(args.out),
        **counts,
        "dropped": {"beyond_subset": counts["passages_beyond_subset"]},
    }
    _finish(args, "dpr-tsv", report, t0)


def _chunk(args: argparse.Namespace) -> None:
    t0 = time.perf_counter()
    if len(args.docs) != len(args.sources):
        raise SystemExit(
            f"error: {len(args.docs)} --docs files but {len(args.sources)} --sources names"
        )
    counts = chunk_documents(
        args.docs,
        args.sources,
        args.out,
        words=int(args.cfg.get("words", 100)),
        subset=args.cfg.get("subset"),
    )
    report = {
        "inputs": dict(zip(args.sources, map(str, args.docs), strict=True)),
        "input_bytes": sum(_size(p) for p in args.docs),
        "output": str(args.out),
        "output_bytes": _size(args.out),
        **counts,
        "dropped": {
            "empty_docs": counts["empty_docs_skipped"],
            "beyond_subset": counts["passages_beyond_subset"],
        },
    }
    _finish(args, "chunk", report, t0)


def _sentences(args: argparse.Namespace) -> None:
    t0 = time.perf_counter()
    try:
        counts = split_passages(
            args.passages,
            args.out,
            splitter=args.cfg.get("splitter", "sentencizer"),
            model=args.cfg.get("model"),
            batch_size=int(args.cfg.get("batch_size", 256)),
            processes=int(args.cfg.get("processes", 1)),
        )
    except SplitterUnavailable as exc:
        raise SystemExit(f"error: {exc}") from None
    report = {
        "input": str(args.passages),
        "input_bytes": _size(args.passages),
        "output": str(args.out),
        "output_bytes": _size(args.out),
        **counts,
    }
    _finish(args, "sentences", report, t0)


def _export_tsv(args: argparse.Namespace) -> None:
    t0 = time.perf_counter()

    def rows():
        for batch in iter_passages(args.passages, columns=["pid", "text", "title"]):
            yield from zip(*(batch.column(i).to_pylist() for i in range(3)), strict=True)

    n = write_dpr_tsv(args.out, rows())
    report = {
        "input": str(args.passages),
        "output": str(args.out),
        "output_bytes": _size(args.out),
        "passages": n,
    }
    _finish(args, "export-tsv", report, t0)


def _add(
    sub: argparse._SubParsersAction,
    name: str,
    func: Callable[[argparse.Namespace], None],
    help_text: str,
    inputs: list[tuple[str, dict[str, Any]]],
    report: bool = True,
    runtime: tuple[str, ...] = (),
) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help_text, description=help_text)
    for flag, kwargs in inputs:
        p.add_argument(flag, required=True, **kwargs)
    p.add_argument("--out", required=True, help="output file (written atomically)")
    if report:
        p.add_argument("--report", help="JSON report: counts by reason, sizes, seconds")
    add_cfg(p)
    add_runtime(p, *runtime)  # cfg keys that change no output, passed outside --cfg
    p.set_defaults(func=func)
    return p


def register(sub: argparse._SubParsersAction) -> None:
    corpus = sub.add_parser("corpus", help="build the passage corpus", description=__doc__)
    steps = corpus.add_subparsers(dest="corpus_command", required=True)
    _add(
        steps,
        "wiki",
        _wiki,
        "clean a MediaWiki XML dump (.bz2) into documents, DrQA-style; "
        'cfg: {"processes", "chunk_size", "keep_sections", "title_in_text"}',
        [("--dump", {"help": "pages-articles XML dump (.xml, .bz2 or .gz)"})],
    )
    _add(
        steps,
        "squad-docs",
        _squad_docs,
        'SQuAD articles as documents; cfg: {"sample_articles": null|N, "seed"}',
        [("--squad", {"help": "SQuAD v1.1 JSON (plain or .gz)"})],
    )
    _add(
        steps,
        "dpr-tsv",
        _dpr_tsv,
        'DPR psgs_w100.tsv -> passages table; cfg: {"subset": null|N, "source"}',
        [("--tsv", {"help": "DPR passages TSV (id, text, title; header row)"})],
    )
    _add(
        steps,
        "chunk",
        _chunk,
        'documents -> disjoint N-word passages; cfg: {"words": 100, "subset": null|N}',
        [
            ("--docs", {"nargs": "+", "help": "documents Parquet files, in pid order"}),
            ("--sources", {"nargs": "+", "help": "source name of each --docs file"}),
        ],
    )
    _add(
        steps,
        "sentences",
        _sentences,
        'sentence offsets of every passage; cfg: {"splitter": "sentencizer"|"spacy_model"|'
        '"dcsr", "model", "batch_size", "processes"}',
        [("--passages", {"help": "passages Parquet"})],
        runtime=("batch_size",),
    )
    _add(
        steps,
        "export-tsv",
        _export_tsv,
        "passages table -> DPR psgs_w100.tsv layout",
        [("--passages", {"help": "passages Parquet"})],
    )
