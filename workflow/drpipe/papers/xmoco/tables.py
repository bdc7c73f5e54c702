"""xMoCo's tables and figure (Yang et al. 2021), each reproduced number beside the printed one.

- ``table2``: xMoCo's Table 2 rows (BM25, DPR, xMoCo, DPR+BM25, xMoCo+BM25; Single and Multi)
  with the xMoCo paper's values: its DPR rows are the xMoCo authors' re-implementation, so
  they differ from DPR's own Table 2 (which ``drpipe tables table2`` uses).
- ``table3``: separate against tied encoders, with the change tied - separate beside the
  paper's (its Table 3 is on NQ test; ours names the dataset it ran on).
- ``figure2``: top-20 against queue size. The paper prints no numbers for Figure 2, only that
  accuracy "increases as the queue size increases initially, but tapers off past 16k"; the CSV
  holds ours alone.

Inputs are ``drpipe evaluate`` metrics JSON files; nothing here invents a row.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

import pandas as pd

from drpipe.cliutil import need
from drpipe.papers.numbers import citation, load_paper_numbers
from drpipe.papers.xmoco import TABLE2, TABLE3
from drpipe.tables.cli import add_figure_command, add_table_command, command_group
from drpipe.tables.compare import (
    comparable,
    comparison_cell,
    comparison_headers,
    comparison_note,
    diff,
    ordering,
    r2,
    scale_of,
)
from drpipe.tables.metrics import KS, read_metrics
from drpipe.tables.output import md_table, new_figure, save_figure, write_csv, write_text
from drpipe.tables.rows import (
    DEFAULT_SPLIT_EQUIV,
    REPRODUCED,
    dataset_key,
    lookup,
    paper_row,
    paper_split,
)

log = logging.getLogger(__name__)

PAPER_KS = (20, 100)  # the xMoCo paper prints top-20 and top-100 only
TABLE3_ROWS = ("xMoCo", "xMoCo +tied encoders")
ROW_ORDER = ("BM25", "DPR", "xMoCo", "DPR+BM25", "xMoCo+BM25")
TRAINING_ORDER = ("None", "Single", "Multi")
FIGURE2_NOTE = (
    "paper: Figure 2 (NQ, top-20) prints no values; its text says accuracy rises with the "
    "queue size and tapers off past 16k, and that twice the batch size is in-batch negatives"
)


def _paper(table: str) -> pd.DataFrame:
    numbers = load_paper_numbers("xmoco")
    return numbers[numbers["table"] == table]


def _row_key(rec: dict) -> tuple:
    order = lambda seq, v: seq.index(v) if v in seq else len(seq)  # noqa: E731
    return (
        order(TRAINING_ORDER, rec["training"]),
        order(ROW_ORDER, rec["method"]),
        rec["method"],
        dataset_key(rec["dataset"]),
    )


# --------------------------------------------------------------------------- Table 2


def table2(
    metrics: list[dict],
    scale: str,
    row_map: dict[str, Any],
    train_sets: dict[str, list[str]] | None = None,
    split_equiv: dict[str, dict[str, str]] | None = None,
) -> pd.DataFrame:
    """One row per (training, method, dataset): our top-k and, on the paper's test sets, the
    xMoCo paper's top-20/100 and the difference. ``row_map`` as in ``drpipe tables table2``
    (run -> {"method": label in xMoCo's Table 2, "training": optional})."""
    paper = _paper("2")
    equiv = DEFAULT_SPLIT_EQUIV if split_equiv is None else split_equiv
    seen: set[tuple[str, str, str]] = set()
    records = []
    for m in metrics:
        training, label = paper_row(m, row_map, train_sets or {})
        cell = (training, label, m["dataset"])
        if cell in seen:
            raise ValueError(f"two metrics for xMoCo Table 2 cell {cell}")
        seen.add(cell)
        on_test = paper_split(m["dataset"], m["split"], equiv) == "test"
        rec: dict[str, Any] = {
            "scale": scale,
            "training": training,
            "method": label,
            "run": m["method"],
            "train_set": m["train_set"] or "",
            "dataset": m["dataset"],
            "split": m["split"],
            "n_questions": m["n_questions"],
        }
        found = False
        for k in KS:
            ours = float(m["top_k"][str(k)])
            rec[f"top{k}"] = r2(ours)
            if k in PAPER_KS:
                theirs = None
                if on_test:
                    theirs = lookup(
                        paper, setting=training, method=label, dataset=m["dataset"],
                        metric=f"top{k}",
                    )  # fmt: skip
                found |= theirs is not None
                rec[f"top{k}_paper"] = theirs
                rec[f"top{k}_diff"] = diff(ours, theirs)
        rec["source"] = REPRODUCED + (f" | paper: {TABLE2}" if found else "")
        records.append(rec)
    records.sort(key=_row_key)
    columns = ["scale", "training", "method", "run", "train_set", "dataset", "split"]
    columns += ["n_questions"]
    for k in KS:
        columns += [f"top{k}"] + ([f"top{k}_paper", f"top{k}_diff"] if k in PAPER_KS else [])
    columns.append("source")
    frame = pd.DataFrame.from_records(records, columns=columns)
    return _typed(frame)


def _typed(frame: pd.DataFrame) -> pd.DataFrame:
    frame["n_questions"] = frame["n_questions"].astype("Int64")
    for col in frame.columns:
        if col.startswith("top") or col.startswith("delta"):
            frame[col] = frame[col].astype(float)
    return frame.reset_index(drop=True)


def table2_markdown(frame: pd.DataFrame, scale: str) -> str:
    headers = ["Training", "Method", "Dataset (split, n)", "Top-1", "Top-5"]
    for k in PAPER_KS:
        headers += [f"Top-{k} ours", f"Top-{k} paper"]
        headers += comparison_headers(frame, f"top{k}", f"Top-{k}")
    rows = []
    for _, r in frame.iterrows():
        row = [r["training"], r["method"], f"{r['dataset']} ({r['split']}, n={r['n_questions']})"]
        row += [r["top1"], r["top5"]]
        for k in PAPER_KS:
            row += [r[f"top{k}"], r[f"top{k}_paper"], *comparison_cell(r, f"top{k}")]
        rows.append(row)
    orders = [
        f"- {d}/{sp} Top-{k}: {line}\n"
        for (d, sp), part in frame.groupby(["dataset", "split"], sort=False)
        for k in PAPER_KS
        if (line := ordering(part, f"top{k}"))
    ]
    head = [
        f"# xMoCo Table 2: top-k retrieval accuracy (%), scale `{scale}`",
        "",
        f'Reproduced values ("ours") are computed by this pipeline. Paper values are {TABLE2} '
        "(test sets; the SQuAD test set is SQuAD v1.1 dev); its DPR rows are the xMoCo "
        "authors' re-implementation. " + comparison_note(scale, frame),
        "",
        f"Source: {citation('xmoco')}.",
        "",
        "",
    ]
    text = "\n".join(head) + md_table(headers, rows) + "\n"
    if orders:
        text += "\n## Ordering of the methods the paper also reports\n\n" + "".join(orders)
    return text


# --------------------------------------------------------------------------- Table 3


def table3(metrics: list[dict], scale: str, variants: dict[str, dict]) -> pd.DataFrame:
    """Separate vs tied encoders. ``variants``: run -> ``{"tied": bool, "paper_row": one of
    TABLE3_ROWS or absent}``. ``delta_top{k}`` is this row minus the separate-encoder row on
    the same dataset/split, beside the paper's (tied - separate on NQ test)."""
    paper = _paper("3")
    for run, v in variants.items():
        need(v, "tied", where=f"--cfg variants.{run}")
        row = v.get("paper_row")
        if row is not None and row not in TABLE3_ROWS:
            raise SystemExit(
                f"error: --cfg variants.{run}.paper_row '{row}' is not a row of xMoCo Table 3 "
                f"({'; '.join(TABLE3_ROWS)})"
            )
    records = []
    for m in metrics:
        run = m["method"]
        if run not in variants:
            raise ValueError(f"metrics of run {run!r} match no --cfg variant")
        v = variants[run]
        row = v.get("paper_row") or ""
        rec: dict[str, Any] = {
            "scale": scale,
            "run": run,
            "tied": bool(v["tied"]),
            "paper_row": row,
            "train_set": m["train_set"] or "",
            "dataset": m["dataset"],
            "split": m["split"],
            "n_questions": m["n_questions"],
            "paper_dataset": "nq" if row else "",
            "paper_split": "test" if row else "",
        }
        for k in PAPER_KS:
            theirs = lookup(paper, method=row, dataset="nq", metric=f"top{k}") if row else None
            rec[f"top{k}"] = r2(float(m["top_k"][str(k)]))
            rec[f"top{k}_paper"] = theirs
            rec[f"top{k}_diff"] = diff(rec[f"top{k}"], theirs)
        rec["source"] = REPRODUCED + (f" | paper: {TABLE3} (NQ test)" if row else "")
        records.append(rec)
    keys = [(r["dataset"], r["split"], r["run"]) for r in records]
    if len(set(keys)) != len(keys):
        raise ValueError("two metrics for one run on one dataset/split")
    for rec in records:
        base = [
            r for r in records
            if not r["tied"] and (r["dataset"], r["split"]) == (rec["dataset"], rec["split"])
        ]  # fmt: skip
        sep_paper = {k: lookup(paper, method=TABLE3_ROWS[0], metric=f"top{k}") for k in PAPER_KS}
        for k in PAPER_KS:
            rec[f"delta_top{k}"] = (
                round(rec[f"top{k}"] - base[0][f"top{k}"], 2) if len(base) == 1 else None
            )
            rec[f"delta_top{k}_paper"] = (
                round(rec[f"top{k}_paper"] - sep_paper[k], 2)
                if rec[f"top{k}_paper"] is not None
                else None
            )
    records.sort(key=lambda r: (dataset_key(r["dataset"]), r["split"], r["tied"], r["run"]))
    columns = ["scale", "run", "tied", "paper_row", "train_set", "dataset", "split"]
    columns += ["n_questions", "paper_dataset", "paper_split"]
    for k in PAPER_KS:
        columns += [f"top{k}", f"top{k}_paper", f"top{k}_diff"]
    for k in PAPER_KS:
        columns += [f"delta_top{k}", f"delta_top{k}_paper"]
    columns.append("source")
    return _typed(pd.DataFrame.from_records(records, columns=columns))


def table3_markdown(frame: pd.DataFrame, scale: str) -> str:
    headers = ["Run", "Encoders", "Paper row", "Ours on (split, n)"]
    for k in PAPER_KS:
        headers += [f"Top-{k} ours", f"Top-{k} paper (NQ test)"]
        headers += comparison_headers(frame, f"top{k}", f"Top-{k}")
    for k in PAPER_KS:
        headers += [f"Tied - separate top-{k} ours", "paper"]
    rows = []
    for _, r in frame.iterrows():
        row = [
            r["run"],
            "tied" if r["tied"] else "separate",
            r["paper_row"],
            f"{r['dataset']} ({r['split']}, n={r['n_questions']})",
        ]
        for k in PAPER_KS:
            row += [r[f"top{k}"], r[f"top{k}_paper"], *comparison_cell(r, f"top{k}")]
        for k in PAPER_KS:
            row += [r[f"delta_top{k}"], r[f"delta_top{k}_paper"]]
        rows.append(row)
    head = [
        f"# xMoCo Table 3: tied against separate encoders, top-k accuracy (%), scale `{scale}`",
        "",
        f'Reproduced values ("ours") are computed by this pipeline; paper values are {TABLE3} '
        "(Natural Questions test). Where our dataset differs, compare the tied - separate "
        "change, not the levels. " + comparison_note(scale, frame),
        "",
        f"Source: {citation('xmoco')}.",
        "",
        "",
    ]
    return "\n".join(head) + md_table(headers, rows) + "\n"


# --------------------------------------------------------------------------- Figure 2


def figure2_points(metrics: list[dict], variants: dict[str, dict]) -> pd.DataFrame:
    """One point per run: ``variants`` run -> ``{"queue_size", "batch_size", "hard_negatives"
    (default 1)}``. A queue of ``batch * (1 + hard_negatives)`` holds just the current batch's
    passages: in-batch negatives (the paper's "two times the batch size")."""
    records = []
    for m in metrics:
        run = m["method"]
        if run not in variants:
            raise ValueError(f"metrics of run {run!r} match no --cfg variant")
        v = variants[run]
        q, b = int(need(v, "queue_size")), int(need(v, "batch_size"))
        h = int(v.get("hard_negatives", 1))
        records.append(
            {
                "run": run,
                "queue_size": q,
                "batch_size": b,
                "hard_negatives": h,
                "in_batch_equivalent": q == b * (1 + h),
                "train_set": m["train_set"] or "",
                "dataset": m["dataset"],
                "split": m["split"],
                "n_questions": m["n_questions"],
                **{f"top{k}": r2(float(m["top_k"][str(k)])) for k in KS},
            }
        )
    frame = pd.DataFrame.from_records(records)
    if frame.empty:
        raise ValueError("no metrics given for Figure 2")
    if frame.duplicated(["dataset", "split", "queue_size"]).any():
        raise ValueError("two runs with one queue size on one dataset/split")
    frame = frame.sort_values(["dataset", "split", "queue_size"]).reset_index(drop=True)
    return _typed(frame)


def plot_figure2(points: pd.DataFrame, out_png: str | Path, title: str) -> None:
    """Top-20 (solid) and top-100 (dashed) against queue size, log-2 axis; the in-batch point
    (queue = twice the batch) is marked."""
    fig, ax = new_figure(figsize=(5.5, 4.0), dpi=120)
    for (dataset, _split), grp in points.groupby(["dataset", "split"], sort=True):
        line = ax.plot(grp["queue_size"], grp["top20"], marker="o", label=f"top-20 {dataset}")[0]
        ax.plot(grp["queue_size"], grp["top100"], marker=".", linestyle="--",
                color=line.get_color(), alpha=0.6, label=f"top-100 {dataset}")  # fmt: skip
        ib = grp[grp["in_batch_equivalent"]]
        if not ib.empty:
            ax.scatter(ib["queue_size"], ib["top20"], s=90, facecolors="none",
                       edgecolors="black", zorder=3, label="in-batch size")  # fmt: skip
    ax.set_xscale("log", base=2)
    sizes = sorted(points["queue_size"].unique())
    ax.set_xticks(sizes, [str(q) for q in sizes])
    ax.minorticks_off()
    ax.set_xlabel("queue size")
    ax.set_ylabel("Top-k accuracy (%)")
    ax.set_title(title, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, out_png)


# --------------------------------------------------------------------------- CLI


def _cmd_table2(args: argparse.Namespace) -> int:
    cfg = dict(args.cfg)
    scale = scale_of(cfg)
    frame = table2(
        read_metrics(args.metrics),
        scale,
        need(cfg, "row_map"),
        train_sets=cfg.get("train_sets"),
        split_equiv=cfg.get("split_equiv"),
    )
    frame = comparable(frame, scale, groups=["dataset", "split"], tolerance=cfg.get("tolerance"))
    write_csv(frame, args.out)
    if args.md:
        write_text(table2_markdown(frame, scale), args.md)
    log.info("xmoco table2: %d rows -> %s", len(frame), args.out)
    return 0


def _cmd_table3(args: argparse.Namespace) -> int:
    scale = scale_of(args.cfg)
    frame = table3(read_metrics(args.metrics), scale, need(args.cfg, "variants"))
    tolerance = args.cfg.get("tolerance")
    frame = comparable(frame, scale, groups=["dataset", "split"], tolerance=tolerance)
    write_csv(frame, args.out)
    if args.md:
        write_text(table3_markdown(frame, scale), args.md)
    log.info("xmoco table3: %d rows -> %s", len(frame), args.out)
    return 0


def _cmd_figure2(args: argparse.Namespace) -> int:
    cfg = args.cfg
    scale = need(cfg, "scale")
    points = figure2_points(read_metrics(args.metrics), need(cfg, "variants"))
    pairs = zip(points["dataset"], points["split"], strict=True)
    where = ", ".join(sorted({f"{d}/{s}" for d, s in pairs}))
    title = cfg.get("title") or f"xMoCo Figure 2 reproduced: queue size (scale {scale}, {where})"
    plot_figure2(points, args.out, title)
    if args.csv:
        write_csv(points.assign(scale=scale, source=f"{REPRODUCED} | {FIGURE2_NOTE}"), args.csv)
    log.info("xmoco figure2: %d points -> %s", len(points), args.out)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    group = command_group(sub, "tables-xmoco", "xMoCo's tables and figure beside the paper")
    add_table_command(group, "table2", _cmd_table2, "xMoCo Table 2 (BM25, DPR, xMoCo and hybrids)")
    add_table_command(group, "table3", _cmd_table3, "xMoCo Table 3 (tied vs separate encoders)")
    add_figure_command(group, "figure2", _cmd_figure2, "xMoCo Figure 2 (top-20 vs queue size)")
