"""The shared Table 2: top-k retrieval accuracy of every run, beside the printed numbers.

The layout is DPR's Table 2 (training setting, method; five datasets; top-20 and top-100
printed), which all four papers share. Each row's paper value comes from the paper that lists
the row's method (``drpipe.papers``: DPR for BM25, the initial encoder and DPR; DCSR's and
xMoCo's own Table 2 for theirs; AOpt's Table 3 beside its oracle rows); a method that no paper
lists gets its rows with no paper value and a note saying so. Nothing here invents a row: a
table has rows only for the metrics it is given. The rows and the Markdown are the shared
tables' (``drpipe.papers.shared_tables``), with this table's layout.
"""

from __future__ import annotations

import argparse
from typing import Any

import pandas as pd

from drpipe.papers.shared_tables import (
    Layout,
    add_reports_argument,
    shared_markdown,
    shared_table,
    table_command,
)
from drpipe.tables.cli import add_table_command, command_group
from drpipe.tables.metrics import KS, read_metrics
from drpipe.tables.notes import setup_notes

TABLE2 = Layout(
    table="2",
    title="DPR Table 2: top-k retrieval accuracy (%)",
    columns=tuple(f"top{k}" for k in KS),
    headers=tuple(f"Top-{k}" for k in KS),
    value=lambda m, col: m["top_k"][col.removeprefix("top")],
    printed="it has Top-20 and Top-100 only",
)


def table2(metrics: list[dict], scale: str, row_map: dict[str, Any], **cfg: Any) -> pd.DataFrame:
    """DPR Table 2: one row per (training, method), columns per dataset x top-k (see
    ``shared_table`` for ``row_map``, ``train_sets``, ``split_equiv`` and ``setup``)."""
    return shared_table(TABLE2, metrics, scale, row_map, **cfg)


def table2_markdown(frame: pd.DataFrame, scale: str, notes: dict[str, str] | None = None) -> str:
    return shared_markdown(TABLE2, frame, scale, notes)


def _cmd_table2(args: argparse.Namespace) -> int:
    records = read_metrics(args.metrics)
    return table_command(args, "table2", table2, records, table2_markdown, setup_notes)


def register(sub: argparse._SubParsersAction) -> None:
    group = command_group(sub, "tables", "results tables: reproduced vs paper numbers")
    p = add_table_command(group, "table2", _cmd_table2, "Table 2 (top-k accuracy per dataset)")
    add_reports_argument(p)
