"""DPR's Table 3 (training schemes) and Figure 1 (top-k against k by training-set size), each
reproduced number beside the printed one. Its Table 2 is the shared ``drpipe.papers.table2``.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from drpipe.cliutil import need
from drpipe.papers.dpr import TABLE3
from drpipe.papers.numbers import citation, load_paper_numbers
from drpipe.tables.cli import (
    TABLES,
    TABLES_HELP,
    add_figure_command,
    add_table_command,
    command_group,
    hide_alias,
)
from drpipe.tables.compare import (
    comparable,
    comparison_cell,
    comparison_headers,
    comparison_note,
    diff,
    r2,
    scale_of,
)
from drpipe.tables.metrics import read_first_hit_ranks, read_metrics, topk_curve
from drpipe.tables.output import md_table, new_figure, save_figure, write_csv, write_text
from drpipe.tables.rows import REPRODUCED, lookup

log = logging.getLogger(__name__)

TABLE3_KS = (5, 20, 100)


def _matches(metric: dict, name: str, variant: dict) -> bool:
    match = variant.get("match") or {"method": name}
    return all(metric.get(key) == value for key, value in match.items())


def table3(metrics: list[dict], scale: str, variants: dict[str, dict]) -> pd.DataFrame:
    """DPR Table 3 (training schemes): one row per (variant, dataset, split) given.

    ``variants``: name -> ``{"negative_type", "hard_negatives", "in_batch", "paper_method"
    (a DPR Table 3 row, e.g. "G.+BM25(1) #N=31+32 IB"; optional), "match" (optional: the
    metrics fields that identify the variant; default {"method": name})}``. The paper measured
    on NQ dev; the row names the dataset/split we measured on next to it.
    """
    paper = load_paper_numbers("dpr")
    paper = paper[paper["table"] == "3"]
    known_rows = list(dict.fromkeys(paper["method"]))
    for name, variant in variants.items():
        where = f"--cfg variants.{name}"
        for key in ("negative_type", "hard_negatives", "in_batch"):
            need(variant, key, where=where)
        row = variant.get("paper_method")
        if row is not None and row not in known_rows:
            raise SystemExit(
                f"error: {where}.paper_method '{row}' is not a row of DPR Table 3; "
                f"rows: {'; '.join(known_rows)}"
            )

    records = []
    used: set[tuple[str, str, str]] = set()
    for m in metrics:
        names = [n for n, v in variants.items() if _matches(m, n, v)]
        if len(names) != 1:
            what = "no variant" if not names else f"several variants ({', '.join(names)})"
            raise ValueError(
                f"metrics {m['method']}/{m['train_set']}/{m['dataset']}/{m['split']} match "
                f"{what} of --cfg variants"
            )
        name = names[0]
        variant = variants[name]
        key = (name, m["dataset"], m["split"])
        if key in used:
            raise ValueError(f"two metrics for Table 3 variant {name} on {key[1]}/{key[2]}")
        used.add(key)
        row_label = variant.get("paper_method")
        rec: dict[str, Any] = {
            "scale": scale,
            "variant": name,
            "negative_type": variant["negative_type"],
            "hard_negatives": variant["hard_negatives"],
            "in_batch": bool(variant["in_batch"]),
            "paper_row": row_label or "",
            "dataset": m["dataset"],
            "split": m["split"],
            "n_questions": m["n_questions"],
            "paper_dataset": "nq" if row_label else "",
            "paper_split": "dev" if row_label else "",
            "source": REPRODUCED + (f" | paper: {TABLE3} (NQ dev)" if row_label else ""),
        }
        for k in TABLE3_KS:
            ours = float(m["top_k"][str(k)])
            theirs = (
                lookup(paper, method=row_label, dataset="nq", split="dev", metric=f"top{k}")
                if row_label
                else None
            )
            rec[f"top{k}"] = r2(ours)
            rec[f"top{k}_paper"] = theirs
            rec[f"top{k}_diff"] = diff(ours, theirs)
        records.append(rec)

    columns = [
        "scale",
        "variant",
        "negative_type",
        "hard_negatives",
        "in_batch",
        "paper_row",
        "dataset",
        "split",
        "n_questions",
        "paper_dataset",
        "paper_split",
    ]
    for k in TABLE3_KS:
        columns += [f"top{k}", f"top{k}_paper", f"top{k}_diff"]
    columns.append("source")
    # Variants in config order (the order the paper's table is read in).
    rank = {name: i for i, name in enumerate(variants)}
    records.sort(key=lambda r: (rank[r["variant"]], r["dataset"], r["split"]))
    frame = pd.DataFrame.from_records(records, columns=columns)
    frame["n_questions"] = frame["n_questions"].astype("Int64")
    for k in TABLE3_KS:
        for suffix in ("", "_paper", "_diff"):
            frame[f"top{k}{suffix}"] = frame[f"top{k}{suffix}"].astype(float)
    return frame


def figure1_curves(ranks: Sequence[pd.Series], labels: Sequence[str], max_k: int) -> pd.DataFrame:
    """Long table (label, k, accuracy, n_questions) of the curves Figure 1 plots."""
    if len(ranks) != len(labels):
        raise ValueError(f"{len(ranks)} per-question files but {len(labels)} labels")
    if len(set(labels)) != len(labels):
        raise ValueError(f"labels must be distinct: {list(labels)}")
    parts = []
    for series, label in zip(ranks, labels, strict=True):
        curve = topk_curve(series, max_k).reset_index()
        curve.insert(0, "label", label)
        curve["n_questions"] = len(series)
        parts.append(curve)
    return pd.concat(parts, ignore_index=True)


def plot_figure1(curves: pd.DataFrame, out_png: str | Path, title: str) -> None:
    """DPR Figure 1: top-k accuracy against k, one line per training-set size (and BM25)."""
    fig, ax = new_figure(figsize=(5.5, 4.0), dpi=120)
    for label, curve in curves.groupby("label", sort=False):
        dashed = str(label).lower().startswith("bm25")
        ax.plot(curve["k"], curve["accuracy"], label=label, linestyle="--" if dashed else "-")
    ax.set_xlabel("k: # of retrieved passages")
    ax.set_ylabel("Top-k accuracy (%)")
    ax.set_title(title, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, out_png)


def table3_markdown(frame: pd.DataFrame, scale: str) -> str:
    headers = ["Variant", "Negatives", "Hard neg.", "IB", "Paper row", "Ours on (split, n)"]
    for k in TABLE3_KS:
        headers += [f"Top-{k} ours", f"Top-{k} paper (NQ dev)"]
        headers += comparison_headers(frame, f"top{k}", f"Top-{k}")
    rows = []
    for _, r in frame.iterrows():
        row = [
            r["variant"],
            r["negative_type"],
            r["hard_negatives"],
            "yes" if r["in_batch"] else "no",
            r["paper_row"],
            f"{r['dataset']} ({r['split']}, n={r['n_questions']})",
        ]
        for k in TABLE3_KS:
            row += [r[f"top{k}"], r[f"top{k}_paper"], *comparison_cell(r, f"top{k}")]
        rows.append(row)
    evaluated = ", ".join(
        sorted({f"{d}/{s}" for d, s in zip(frame["dataset"], frame["split"], strict=True)})
    )
    head = [
        f"# DPR Table 3: training schemes, top-k retrieval accuracy (%), scale `{scale}`",
        "",
        f"Our variants were evaluated on (dataset/split): {evaluated or 'nothing'}. The paper "
        "measured on Natural Questions dev, so where our dataset differs the diff compares "
        "different question sets and shows direction, not agreement.",
        "",
        f'Reproduced values ("ours") are computed by this pipeline. Paper values are {TABLE3}. '
        + comparison_note(scale, frame),
        "",
        f"Source: {citation('dpr')}.",
        "",
        "",
    ]
    return "\n".join(head) + md_table(headers, rows) + "\n"


def _cmd_table3(args: argparse.Namespace) -> int:
    scale = scale_of(args.cfg)
    variants = need(args.cfg, "variants")
    frame = table3(read_metrics(args.metrics), scale, variants)
    frame = comparable(
        frame, scale, groups=["dataset", "split"], tolerance=args.cfg.get("tolerance")
    )
    write_csv(frame, args.out)
    if args.md:
        write_text(table3_markdown(frame, scale), args.md)
    log.info("table3: %d rows from %d metrics files -> %s", len(frame), len(args.metrics), args.out)
    return 0


def _cmd_figure1(args: argparse.Namespace) -> int:
    cfg = args.cfg
    scale = need(cfg, "scale")
    max_k = int(cfg.get("max_k", 100))
    labels = args.labels
    if len(labels) != len(args.per_question):
        raise SystemExit(
            f"error: {len(args.per_question)} --per-question files but {len(labels)} --labels"
        )
    curves = figure1_curves([read_first_hit_ranks(p) for p in args.per_question], labels, max_k)
    where = cfg.get("dataset", "")
    if cfg.get("split"):
        where += f"/{cfg['split']}"
    title = f"DPR Figure 1 reproduced (scale {scale}{', ' + where if where else ''})"
    plot_figure1(curves, args.out, cfg.get("title", title))
    if args.csv:
        curves = curves.assign(scale=scale, source=REPRODUCED)
        write_csv(curves, args.csv)
    log.info("figure1: %d curves -> %s", len(labels), args.out)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    group = command_group(sub, "tables-dpr", "DPR's Table 3 and Figure 1 beside the paper")
    table3 = add_table_command(
        group, "table3", _cmd_table3, "DPR Table 3 (training-scheme ablation)"
    )
    p = add_figure_command(
        group,
        "figure1",
        _cmd_figure1,
        "DPR Figure 1 (top-k accuracy vs k)",
        inputs="--per-question",
        inputs_help="first-hit rank Parquet files",
    )
    p.add_argument("--labels", nargs="+", required=True, help="one curve label per file")
    # The rules' older spelling, from before papers had their own group: drpipe tables table3
    tables = command_group(sub, TABLES, TABLES_HELP)
    hide_alias(tables, "table3", table3)
    hide_alias(tables, "figure1", p)
