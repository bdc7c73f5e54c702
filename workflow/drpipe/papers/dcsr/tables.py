"""DCSR's tables and Figure 4 (Wu et al., ACL 2022), each reproduced number beside the printed one.

Every table is one comparison (``comparison``): a list of *cells*, one per metrics file (same
order), each naming the run it expects and the paper cell it is compared with (table, setting,
row, dataset, split of its ``numbers.csv``). A cell may name another row (``delta_of``)
to report the difference between two of our rows beside the difference the paper printed
(Table 2's "(+x)", Table 7's "Delta", Table 6's "diff", which is in-domain minus transfer). The
Snakemake rules (``rules.smk`` beside this file) build the cells from the config; nothing here
invents a row. Where our dataset is not in the paper's table (Table 5 has NQ and TriviaQA, our
small scales have SQuAD), a cell may name ``paper_dataset`` and the row says which question
set each side was measured on, so the difference shows direction, not agreement.

Also here: ``figure4`` (validation accuracy per epoch, from training reports) and ``vectors``
(DCSR's ``k``: vectors per passage of our corpus). Table 7's corpus subsets are generic
(``drpipe.subsets``: any method can be evaluated on a subset).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from drpipe.cliutil import add_cfg, need
from drpipe.io import parquet_num_rows, read_json
from drpipe.papers.numbers import citation, load_paper_numbers
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
from drpipe.tables.rows import REPRODUCED

log = logging.getLogger(__name__)

# How source columns name the paper ("paper: Wu et al. 2022 (DCSR), Table 4").
PAPER = "Wu et al. 2022 (DCSR)"
TITLES = {
    "2": "Table 2: retriever comparison on the test sets (Single: DPR and DCSR trained on the "
    "same data)",
    "3": "Table 3: with adversarial training (hard negatives mined by the trained model)",
    "4": "Table 4: negative sampling ablation (Single setting)",
    "5": "Table 5: training data ablation (raw-data, DPR-hard, DCSR-hard negatives)",
    "6": "Table 6: transfer to TriviaQA (trained on SQuAD or NQ; in-domain for reference)",
    "7": "Table 7: corpus size (the same checkpoints on subsets of the corpus)",
    "8": "Table 8: SQuAD test and dev (Appendix B)",
}


# --------------------------------------------------------------------------- comparisons


def _paper_cell(numbers: pd.DataFrame, table: str, cell: dict, metric: str) -> float | None:
    """The printed value of a cell's paper coordinates, or None (not printed / no paper row)."""
    paper = cell.get("paper")
    if not paper:
        return None
    sel = (
        (numbers["table"] == table)
        & (numbers["setting"] == paper["setting"])
        & (numbers["method"] == paper["method"])
        & (numbers["dataset"] == paper["dataset"])
        & (numbers["split"] == paper["split"])
        & (numbers["metric"] == metric)
    )
    hits = numbers.loc[sel, "value"]
    if len(hits) > 1:
        raise ValueError(f"several paper values for table {table} {paper} {metric}")
    return None if hits.empty else float(hits.iloc[0])


def _check_cell(cell: dict, metric: dict, where: str) -> None:
    for key, field in (("run", "method"), ("train_set", "train_set"), ("dataset", "dataset"),
                       ("split", "split")):  # fmt: skip
        if cell.get(key) is not None and cell[key] != metric.get(field):
            raise ValueError(
                f"{where}: metrics are of {field} {metric.get(field)!r}, the cell expects "
                f"{cell[key]!r}"
            )


def comparison(
    metrics: Sequence[dict], cells: Sequence[dict], scale: str, table: str, ks=KS
) -> pd.DataFrame:
    """One row per cell: ours at each k beside the paper's value and the difference.

    A cell: ``group`` (e.g. Single, a corpus size), ``row`` (our row label), ``run``,
    ``train_set``, ``dataset``, ``split`` (checked against the metrics), optional ``subset``,
    ``paper`` ({setting, method, dataset, split} or null; ``paper_suffix`` picks a variant of
    the metric, e.g. Table 6's ``_in_domain``), optional ``delta_of`` (another ``row`` of the
    same group and dataset: ours minus it, beside the paper's printed difference, whose
    metric suffix is ``paper_delta`` ("delta" or "drop"; "drop" is printed as other minus
    row), or else the difference of the two printed values).
    """
    if len(metrics) != len(cells):
        raise ValueError(f"{len(metrics)} metrics files for {len(cells)} cells")
    numbers = load_paper_numbers("dcsr")
    records: list[dict[str, Any]] = []
    seen: set[tuple] = set()
    for i, (m, cell) in enumerate(zip(metrics, cells, strict=True)):
        _check_cell(cell, m, f"cell {i} ({cell.get('row')})")
        key = (cell.get("group", ""), cell["row"], m["dataset"], m["split"])
        if key in seen:
            raise ValueError(f"two metrics for the cell {key}")
        seen.add(key)
        paper = cell.get("paper") or {}
        rec: dict[str, Any] = {
            "scale": scale,
            "group": cell.get("group", ""),
            "row": cell["row"],
            "run": m["method"],
            "train_set": m["train_set"] or "",
            "subset": cell.get("subset") or "",
            "dataset": m["dataset"],
            "split": m["split"],
            "n_questions": m["n_questions"],
            "paper_setting": paper.get("setting", ""),
            "paper_row": paper.get("method", ""),
            "paper_dataset": paper.get("dataset", ""),
            "paper_split": paper.get("split", ""),
        }
        any_paper = False
        suffix = cell.get("paper_suffix", "")
        for k in ks:
            ours = float(m["top_k"][str(k)])
            theirs = _paper_cell(numbers, table, cell, f"top{k}{suffix}")
            any_paper |= theirs is not None
            rec[f"top{k}"] = r2(ours)
            rec[f"top{k}_paper"] = theirs
            rec[f"top{k}_diff"] = diff(ours, theirs)
        same_question_set = paper.get("dataset") == m["dataset"]
        rec["source"] = REPRODUCED + (
            f" | paper: {PAPER}, Table {table}"
            + ("" if same_question_set else f" (measured on {paper.get('dataset')}, not ours)")
            if any_paper
            else ""
        )
        rec["_cell"] = cell
        records.append(rec)

    # Differences between two of our rows, beside the paper's printed difference.
    by_key = {(r["group"], r["row"], r["dataset"]): r for r in records}
    for rec in records:
        cell = rec.pop("_cell")
        other = cell.get("delta_of")
        for k in ks:
            rec[f"top{k}_delta"] = rec[f"top{k}_delta_paper"] = None
        if not other:
            continue
        base = by_key.get((rec["group"], other, rec["dataset"]))
        if base is None:
            raise ValueError(f"row {rec['row']!r}: delta_of {other!r} has no cell in its group")
        suffix = cell.get("paper_delta", "delta")
        for k in ks:
            rec[f"top{k}_delta"] = r2(rec[f"top{k}"] - base[f"top{k}"])
            printed = _paper_cell(numbers, table, cell, f"top{k}_{suffix}")
            if printed is not None and suffix == "drop":
                printed = -printed
            if printed is None and None not in (rec[f"top{k}_paper"], base[f"top{k}_paper"]):
                # Not printed: the difference of the two printed values.
                printed = r2(rec[f"top{k}_paper"] - base[f"top{k}_paper"])
            rec[f"top{k}_delta_paper"] = printed
    columns = [
        "scale", "group", "row", "run", "train_set", "subset", "dataset", "split",
        "n_questions", "paper_setting", "paper_row", "paper_dataset", "paper_split",
    ]  # fmt: skip
    for k in ks:
        columns += [f"top{k}", f"top{k}_paper", f"top{k}_diff"]
    for k in ks:
        columns += [f"top{k}_delta", f"top{k}_delta_paper"]
    columns.append("source")
    frame = pd.DataFrame.from_records(records, columns=columns)
    frame["n_questions"] = frame["n_questions"].astype("Int64")
    for c in columns:
        if c.startswith("top"):
            frame[c] = frame[c].astype(float)
    return frame


def paper_only_rows(rows: Sequence[dict], scale: str, table: str, ks=KS) -> pd.DataFrame:
    """Rows the paper printed that we have no run for (ours empty), e.g. Table 8's SQuAD dev."""
    numbers = load_paper_numbers("dcsr")
    out = []
    for r in rows:
        cell = {"paper": {"setting": r["setting"], "method": r["row"], "dataset": r["dataset"],
                          "split": r["split"]}}  # fmt: skip
        rec = {"scale": scale, "group": r["group"], "row": r["row"], "run": "", "train_set": "",
               "subset": "", "dataset": "", "split": "", "n_questions": pd.NA,
               "paper_setting": r["setting"], "paper_row": r["row"],
               "paper_dataset": r["dataset"], "paper_split": r["split"]}  # fmt: skip
        for k in ks:
            rec[f"top{k}"] = None
            rec[f"top{k}_paper"] = _paper_cell(numbers, table, cell, f"top{k}")
            rec[f"top{k}_diff"] = None
            rec[f"top{k}_delta"] = rec[f"top{k}_delta_paper"] = None
        rec["source"] = f"paper: {PAPER}, Table {table} (no run of ours)"
        out.append(rec)
    return pd.DataFrame.from_records(out)


def comparison_markdown(frame: pd.DataFrame, scale: str, table: str, ks=KS, note: str = "") -> str:
    with_paper = [k for k in ks if frame[f"top{k}_paper"].notna().any()]
    with_delta = [k for k in ks if frame[f"top{k}_delta"].notna().any()]
    headers = ["Group", "Row", "Paper row", "Ours on (dataset/split, n)", "Paper on"]
    for k in ks:
        headers += [f"Top-{k} ours"]
        if k in with_paper:
            headers += [f"Top-{k} paper", *comparison_headers(frame, f"top{k}", f"Top-{k}")]
    headers += [f"Δ Top-{k} ours / paper" for k in with_delta]
    rows = []
    for _, r in frame.iterrows():
        where = f"{r['dataset']}/{r['split']}" + (f" @ {r['subset']}" if r["subset"] else "")
        ours_on = f"{where}, n={r['n_questions']}" if r["run"] else "(no run of ours)"
        row = [r["group"], r["row"], r["paper_row"], ours_on,
               f"{r['paper_dataset']}/{r['paper_split']}" if r["paper_dataset"] else ""]  # fmt: skip
        for k in ks:
            row.append(r[f"top{k}"])
            if k in with_paper:
                row += [r[f"top{k}_paper"], *comparison_cell(r, f"top{k}")]
        for k in with_delta:
            a, b = r[f"top{k}_delta"], r[f"top{k}_delta_paper"]
            row.append("" if pd.isna(a) else f"{a:+.2f} / " + ("" if pd.isna(b) else f"{b:+.1f}"))
        rows.append(row)
    head = [
        f"# DCSR {TITLES.get(table, 'Table ' + table)}, scale `{scale}`",
        "",
        "Ours = computed by this pipeline; paper = printed in the DCSR paper. Where the paper "
        "measured another dataset or a corpus of another size, the columns say so and a "
        "comparison shows direction only. " + comparison_note(scale, frame),
        *([note] if note else []),
        "",
        f"Source: {citation('dcsr')}.",
        "",
        "",
    ]
    text = "\n".join(head) + md_table(headers, rows) + "\n"
    ours = frame[frame["run"].astype(bool)]
    orders = [
        f"- {g or 'all'}, {d}/{sp} Top-{k}: {line}\n"
        for (g, d, sp), part in ours.groupby(["group", "dataset", "split"], sort=False)
        for k in with_paper
        if (line := ordering(part, f"top{k}", label="row"))
    ]
    if orders:
        text += "\n## Ordering of the rows the paper also reports\n\n" + "".join(orders)
    return text


# --------------------------------------------------------------------------- Figure 4


def figure4_curves(reports: Sequence[dict], labels: Sequence[str]) -> pd.DataFrame:
    """Validation accuracy per epoch of each training report (its ``val_curve``): the measure
    the run selected checkpoints on (DCSR: sentence, DPR: passage), and DCSR's passage one."""
    if len(reports) != len(labels):
        raise ValueError(f"{len(reports)} reports but {len(labels)} labels")
    rows = []
    for rep, label in zip(reports, labels, strict=True):
        curve = rep.get("val_curve") or []
        if not curve:
            raise ValueError(f"{label}: the training report has no validation curve")
        for e in curve:
            rows.append(
                {
                    "label": label,
                    "method": rep.get("method", ""),
                    "epoch": int(e["epoch"]) + 1,
                    "accuracy": 100.0 * float(e["accuracy"]),
                    "avg_rank": float(e["avg_rank"]),
                    # DCSR's passage measure beside its sentence measure (none for DPR, whose
                    # accuracy is the passage one).
                    "passage_accuracy": (
                        100.0 * float(e["passage_accuracy"]) if "passage_accuracy" in e else None
                    ),
                    "loss": float(e["loss"]),
                    "n_questions": int(e["n_questions"]),
                    "val_batch_size": rep["cfg"].get("val_batch_size") or rep["cfg"]["batch_size"],
                }
            )
    return pd.DataFrame.from_records(rows)


def plot_figure4(curves: pd.DataFrame, out_png: str | Path, title: str) -> None:
    fig, ax = new_figure(figsize=(5.0, 3.8), dpi=120)
    for label, c in curves.groupby("label", sort=False):
        ax.plot(c["epoch"], c["accuracy"], marker="o", label=label)
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation accuracy (%)")
    ax.set_title(title, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, out_png)


# --------------------------------------------------------------------------- k


def vectors_per_passage(
    n_passages: int, sentences_report: dict, retrieve_report: dict, model_meta: dict
) -> pd.DataFrame:
    """DCSR's k for our corpus: sentences and index vectors per passage, and the search depth."""
    n_vectors = int(retrieve_report["n_index"])
    n_sent = int(sentences_report["sentences"])
    k_model = model_meta.get("method", {}).get("cfg", {}).get("sentences_per_passage")
    return pd.DataFrame.from_records(
        [
            {
                "passages": n_passages,
                "sentences": n_sent,
                "splitter": sentences_report.get("splitter"),
                "sentences_per_passage": round(n_sent / n_passages, 4),
                "index_vectors": n_vectors,
                "vectors_per_passage": round(n_vectors / n_passages, 4),
                "sentences_without_vector": n_sent - n_vectors,
                "k_for_search_depth": k_model,
                "search_depth": retrieve_report.get("search_depth"),
                "top_k": retrieve_report.get("top_k"),
                "paper_k": None,
                "note": "the paper defines k (3.3) but prints no value; sentences without "
                "a vector lost their marker to max_passage_len",
            }
        ]
    )


# --------------------------------------------------------------------------- corpus subsets


# --------------------------------------------------------------------------- CLI


def _cmd_compare(args: argparse.Namespace) -> int:
    cfg = args.cfg
    scale, table, cells = scale_of(cfg), str(need(cfg, "table")), need(cfg, "cells")
    frame = comparison(read_metrics(args.metrics), cells, scale, table)
    if cfg.get("paper_only"):
        extra = paper_only_rows(cfg["paper_only"], scale, table)
        frame = pd.concat([frame, extra.astype(frame.dtypes.to_dict())], ignore_index=True)
    groups = ["group", "dataset", "split"]
    frame = comparable(frame, scale, groups=groups, tolerance=cfg.get("tolerance"))
    write_csv(frame, args.out)
    if args.md:
        write_text(comparison_markdown(frame, scale, table, note=cfg.get("note", "")), args.md)
    log.info("dcsr table %s: %d rows -> %s", table, len(frame), args.out)
    return 0


def _cmd_figure4(args: argparse.Namespace) -> int:
    cfg = args.cfg
    scale = need(cfg, "scale")
    reports = [read_json(p) for p in args.reports]
    curves = figure4_curves(reports, args.labels)
    title = cfg.get("title") or (
        f"DCSR Figure 4 reproduced (scale {scale}): validation accuracy, "
        f"{cfg.get('dataset', '')} training set"
    )
    plot_figure4(curves, args.out, title)
    curves = curves.assign(
        scale=scale,
        task="the positive ranked first among the candidates of its validation batch, as "
        "Appendix A: DCSR the positive sentence among the batch's sentences, DPR the positive "
        "passage among the batch's passages (passage_accuracy: DCSR's positive passage among "
        "its candidate sentences' passages, Score Normalization)",
        source=REPRODUCED + " | paper: Figure 4 prints no numbers (a plot only)",
    )
    write_csv(curves, args.csv)
    return 0


def _cmd_vectors(args: argparse.Namespace) -> int:
    from drpipe.encoders import BiEncoder  # lazy: encoders imports torch (~1 s at start-up)

    frame = vectors_per_passage(
        parquet_num_rows(args.passages),
        read_json(args.sentences_report),
        read_json(args.retrieve_report),
        BiEncoder.read_meta(args.model),
    )
    frame.insert(0, "scale", need(args.cfg, "scale"))
    write_csv(frame, args.out)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    group = command_group(sub, "tables-dcsr", "DCSR's tables and Figure 4 beside the paper")
    add_table_command(
        group, "compare", _cmd_compare, "a DCSR table: cells of ours beside the paper's",
        inputs_help="metrics JSON, one per cell",
    )  # fmt: skip
    p = add_figure_command(
        group, "figure4", _cmd_figure4, "DCSR Figure 4: validation accuracy per epoch",
        inputs="--reports", inputs_help="training report JSON files", csv_required=True,
    )  # fmt: skip
    p.add_argument("--labels", nargs="+", required=True, help="one curve label per report")

    p = group.add_parser("vectors", help="DCSR's k: vectors per passage of our corpus")
    p.add_argument("--passages", required=True)
    p.add_argument("--sentences-report", required=True)
    p.add_argument("--retrieve-report", required=True, help="a retrieve report of a DCSR run")
    p.add_argument("--model", required=True, help="that run's model directory")
    p.add_argument("--out", required=True)
    add_cfg(p)
    p.set_defaults(func=_cmd_vectors)
