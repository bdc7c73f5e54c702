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
import logging
from collections.abc import Sequence
from functools import partial
from pathlib import Path
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
from drpipe.tables.cli import add_figure_command, add_table_command, command_group
from drpipe.tables.metrics import KS, read_first_hit_ranks, read_metrics, topk_curve
from drpipe.tables.notes import setup_notes
from drpipe.tables.output import new_figure, save_figure, write_csv
from drpipe.tables.rows import REPRODUCED

log = logging.getLogger(__name__)


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


def table2_curves(rows: Sequence[dict], ranks: Sequence[pd.Series], max_k: int) -> pd.DataFrame:
    """Long table (dataset, label, kind, k, accuracy, n_questions): each Table 2 row's top-k
    for k = 1..max_k from its per-question first-hit ranks. ``rows``: per file its
    ``dataset``, ``label`` and ``kind`` (bm25 | hybrid | dense | oracle)."""
    if len(rows) != len(ranks):
        raise ValueError(f"{len(ranks)} per-question files but {len(rows)} rows in --cfg")
    parts = []
    for row, series in zip(rows, ranks, strict=True):
        curve = topk_curve(series, max_k).reset_index()
        curve.insert(0, "kind", row["kind"])
        curve.insert(0, "label", row["label"])
        curve.insert(0, "dataset", row["dataset"])
        curve["n_questions"] = len(series)
        parts.append(curve)
    return pd.concat(parts, ignore_index=True)


# Line styles by kind of row: BM25 and the hybrids stand out from the dense rows; oracle rows
# (they saw the test answers) are grey and thin, drawn but not to be compared.
STYLES = {
    "bm25": {"linestyle": "--", "color": "black", "linewidth": 1.6},
    "hybrid": {"linestyle": ":", "linewidth": 1.8},
    "dense": {"linestyle": "-", "linewidth": 1.4},
    "oracle": {"linestyle": "-.", "color": "0.6", "linewidth": 0.9},
}


def plot_table2_curves(curves: pd.DataFrame, out_png: str | Path, scale: str) -> None:
    """One panel per dataset: top-k accuracy against k (log scale) for every Table 2 row."""
    datasets = list(dict.fromkeys(curves["dataset"]))
    fig, axes = new_figure(1, len(datasets), figsize=(6.5 * len(datasets), 4.8), dpi=120,
                           squeeze=False)  # fmt: skip
    for ax, dataset in zip(axes[0], datasets, strict=True):
        for (label, kind), curve in curves[curves["dataset"] == dataset].groupby(
            ["label", "kind"], sort=False
        ):
            ax.plot(curve["k"], curve["accuracy"], label=label, **STYLES[kind])
        ax.set_xscale("log")
        ax.set_xlabel("k: # of retrieved passages (log scale)")
        ax.set_ylabel("Top-k accuracy (%)")
        ax.set_title(f"Table 2 rows, {dataset} (scale {scale})", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    save_figure(fig, out_png)


def _cmd_table2_curves(args: argparse.Namespace) -> int:
    cfg = args.cfg
    scale = need(cfg, "scale")
    ranks = [read_first_hit_ranks(p) for p in args.per_question]
    curves = table2_curves(need(cfg, "rows"), ranks, int(cfg.get("max_k", max(KS))))
    plot_table2_curves(curves, args.out, scale)
    if args.csv:
        write_csv(curves.assign(scale=scale, source=REPRODUCED), args.csv)
    log.info("table2-curves: %d rows -> %s", len(ranks), args.out)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    group = command_group(sub, "tables", "results tables: reproduced vs paper numbers")
    p = add_table_command(group, "table2", _cmd_table2, "Table 2 (top-k accuracy per dataset)")
    add_reports_argument(p)
    add_figure_command(
        group,
        "table2-curves",
        _cmd_table2_curves,
        "Table 2's rows as top-k curves, k = 1..100 (BM25 dashed, hybrids dotted)",
        inputs="--per-question",
        inputs_help="per-question first-hit ranks, one file per --cfg rows entry",
    )
