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
from collections.abc import Sequence
from functools import partial
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


def table2_layout(ks: Sequence[int] = KS, mrr_k: int | None = None) -> Layout:
    """Table 2's layout: a top-k column per ``ks`` (``evaluate.ks``) and, with ``mrr_k``, an
    MRR@k column (x100, as top-k's percent) from the same first-hit ranks."""
    ks = tuple(int(k) for k in ks)
    columns = tuple(f"top{k}" for k in ks) + ((f"mrr{mrr_k}",) if mrr_k else ())
    headers = tuple(f"Top-{k}" for k in ks) + ((f"MRR@{mrr_k} (x100)",) if mrr_k else ())
    return Layout(
        table="2",
        title="DPR Table 2: top-k retrieval accuracy (%)",
        columns=columns,
        headers=headers,
        value=_value,
        printed="it has Top-20 and Top-100 only",
        intro=(
            (
                f"MRR@{mrr_k} (x100): the mean over questions of 1/rank of the first "
                f"answer-bearing passage within the top {mrr_k} (0 without one), from the same "
                "answer matching as top-k; no paper prints it.",
            )
            if mrr_k
            else ()
        ),
    )


def _value(m: dict, col: str) -> float:
    """A metrics record's value of a Table 2 column ("top20": percent; "mrr100": MRR x100)."""
    kind, k = ("mrr", col[3:]) if col.startswith("mrr") else ("top_k", col[3:])
    try:
        value = float(m[kind][k])
    except (KeyError, TypeError):
        where = f"{m.get('method')}/{m.get('train_set')}/{m.get('dataset')}-{m.get('split')}"
        raise ValueError(
            f"metrics of {where} have no {kind}.{k}: evaluated before Table 2 asked for it "
            "(rerun its evaluate job)"
        ) from None
    return 100.0 * value if kind == "mrr" else value


TABLE2 = table2_layout()


def table2(metrics: list[dict], scale: str, row_map: dict[str, Any], **cfg: Any) -> pd.DataFrame:
    """DPR Table 2: one row per (training, method), columns per dataset x top-k (see
    ``shared_table`` for ``row_map``, ``train_sets``, ``split_equiv`` and ``setup``;
    ``layout``: the columns, default ``TABLE2``)."""
    layout = cfg.pop("layout", TABLE2)
    return shared_table(layout, metrics, scale, row_map, **cfg)


def table2_markdown(
    frame: pd.DataFrame,
    scale: str,
    notes: dict[str, str] | None = None,
    layout: Layout = TABLE2,
) -> str:
    return shared_markdown(layout, frame, scale, notes)


def _cmd_table2(args: argparse.Namespace) -> int:
    records = read_metrics(args.metrics)
    layout = table2_layout(args.cfg.get("ks", KS), args.cfg.get("mrr_k"))
    return table_command(
        args,
        "table2",
        partial(table2, layout=layout),
        records,
        partial(table2_markdown, layout=layout),
        setup_notes,
    )


def register(sub: argparse._SubParsersAction) -> None:
    group = command_group(sub, "tables", "results tables: reproduced vs paper numbers")
    p = add_table_command(group, "table2", _cmd_table2, "Table 2 (top-k accuracy per dataset)")
    add_reports_argument(p)
