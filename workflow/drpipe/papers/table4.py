"""The shared Table 4: end-to-end exact match of a reader over every retriever row's passages.

The layout is DPR's Table 4 (training setting, retriever; five datasets; exact match), which
xMoCo (Table 4: DPR and xMoCo readers) and AOpt (Table 4: NQ and TriviaQA, its rows read by
DPR's released reader) share. The rows are Table 2's (every retriever row, AOpt's rows by
protocol), each read by ``drpipe reader predict``; each row's paper value comes from its
method's paper's Table 4 (DPR for BM25 and DPR, xMoCo for xMoCo, AOpt beside its oracle rows),
and the notes say which reader read it, how k was chosen, at which precision, and on how many
test questions.
"""

from __future__ import annotations

import argparse
from typing import Any

import pandas as pd

from drpipe.cliutil import need
from drpipe.papers.shared_tables import (
    Layout,
    add_reports_argument,
    shared_markdown,
    shared_table,
    table_command,
)
from drpipe.tables.cli import add_table_command, command_group
from drpipe.tables.metrics import read_em_metrics
from drpipe.tables.notes import reader_notes, setup_notes

TABLE4 = Layout(
    table="4",
    title="DPR Table 4: end-to-end QA, exact match (%)",
    columns=("em",),
    headers=("EM",),
    value=lambda m, col: m[col],
    printed="the five datasets' test sets",
    per_dataset=("k", "reader_precision", "reader"),
    row_notes=("reader", "k", "reader_precision"),
    intro=(
        "Each row: the reader over the top k passages of the row's retriever (the retriever "
        "rows of results/table2.csv), the best span of the passage with the highest selection "
        "score, exact match after SQuAD's normalisation (CuratedTREC: regular expressions). "
        "Per-question predictions: results/answers/<run>/<train set>/<dataset>-<split>.parquet.",
    ),
)


def table4(metrics: list[dict], scale: str, row_map: dict[str, Any], **cfg: Any) -> pd.DataFrame:
    """DPR Table 4: one row per (training, retriever), columns per dataset (see
    ``shared_table`` for ``row_map``, ``train_sets``, ``split_equiv``, ``setup``)."""
    reader = (cfg.get("setup") or {}).get("reader") or {}
    extra = ("sample",) if reader.get("sample") else ()
    return shared_table(TABLE4, metrics, scale, row_map, row_notes=extra, **cfg)


def table4_markdown(frame: pd.DataFrame, scale: str, notes: dict[str, str] | None = None) -> str:
    return shared_markdown(TABLE4, frame, scale, notes)


def _notes(setup: dict, scale: str) -> dict[str, str]:
    return setup_notes(setup, scale) | reader_notes(need(setup, "reader", "--cfg setup"), scale)


def _cmd_table4(args: argparse.Namespace) -> int:
    records = read_em_metrics(args.metrics)
    return table_command(args, "table4", table4, records, table4_markdown, _notes)


def register(sub: argparse._SubParsersAction) -> None:
    group = command_group(sub, "tables", "results tables: reproduced vs paper numbers")
    p = add_table_command(
        group, "table4", _cmd_table4, "Table 4 (end-to-end exact match per dataset)",
        inputs_help="exact-match JSON files of drpipe reader predict",
    )  # fmt: skip
    add_reports_argument(p)
