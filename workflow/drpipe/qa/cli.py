"""``drpipe qa ...``: load a QA dataset split into the question table.

Other ``qa`` subcommands live in their own modules; they get the shared ``qa`` subparsers with
``qa_subparsers(sub)`` (idempotent, so registration order does not matter).
"""

from __future__ import annotations

import argparse
import logging

from drpipe.cliutil import add_cfg
from drpipe.errors import InputError
from drpipe.io import iter_parquet, write_json
from drpipe.qa.datasets import load_questions, read_questions, write_questions

log = logging.getLogger(__name__)

FORMATS = (
    "squad",
    "nq-open",
    "dpr-qa-csv",
    "dpr-jsonl",
    "curatedtrec-tsv",
    "webquestions",
    "dpr-biencoder",
)


def qa_subparsers(sub: argparse._SubParsersAction) -> argparse._SubParsersAction:
    """The subparsers of the ``qa`` command, creating the command on first use."""
    parser = sub.choices.get("qa")
    if parser is None:
        parser = sub.add_parser("qa", help="QA datasets: load questions, mine training examples")
        parser.drpipe_subparsers = parser.add_subparsers(dest="qa_command", required=True)
    return parser.drpipe_subparsers


def read_doc_titles(paths: list[str]) -> set[str]:
    """All ``title`` values of documents Parquet files, read column-only in batches."""
    titles: set[str] = set()
    for path in paths:
        try:
            for batch in iter_parquet(path, columns=["title"]):
                titles.update(t for t in batch.column(0).to_pylist() if t is not None)
        except KeyError:
            raise InputError(path, None, "documents table has no 'title' column") from None
    return titles


def cmd_load(args: argparse.Namespace) -> int:
    cfg = args.cfg
    restrict = read_doc_titles(args.restrict_docs) if args.restrict_docs else None
    exclude = None
    if args.exclude_questions:
        exclude = {str(q["qid"]) for path in args.exclude_questions for q in read_questions(path)}
    questions, report = load_questions(
        args.format,
        args.input,
        args.dataset,
        args.split,
        match=cfg.get("match"),
        sample=cfg.get("sample"),
        seed=int(cfg.get("seed", 13)),
        restrict_titles=restrict,
        allow_empty=bool(cfg.get("allow_empty", False)),
        exclude_qids=exclude,
    )
    if restrict is not None:
        report["restrict_docs"] = list(args.restrict_docs)
    if exclude is not None:
        report["exclude_questions"] = list(args.exclude_questions)
    write_questions(args.out, questions)
    if args.report:
        write_json(args.report, report)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = qa_subparsers(sub).add_parser("load", help="load one dataset split into questions Parquet")
    p.add_argument("--format", required=True, choices=FORMATS)
    p.add_argument(
        "--input", required=True, help="the dataset file (.json, .jsonl, .csv, .tsv, .gz)"
    )
    p.add_argument("--dataset", required=True, help="dataset name (used in synthetic qids)")
    p.add_argument("--split", required=True, help="split name (used in synthetic qids)")
    p.add_argument("--out", required=True, help="questions Parquet to write")
    p.add_argument("--report", help="JSON report of counts, including dropped questions by reason")
    p.add_argument(
        "--restrict-docs",
        nargs="+",
        metavar="DOCS",
        help="documents Parquet files; keep only questions whose gold_title is one of their titles",
    )
    p.add_argument(
        "--exclude-questions",
        nargs="+",
        metavar="QUESTIONS",
        help="questions Parquet files; drop questions whose qid is in one of them",
    )
    add_cfg(p)
    p.set_defaults(func=cmd_load)
