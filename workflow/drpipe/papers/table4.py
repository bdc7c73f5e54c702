"""The shared Table 4: end-to-end exact match of a reader over every retriever row's passages.

The layout is DPR's Table 4 (training setting, retriever; five datasets; exact match), which
xMoCo (Table 4: DPR and xMoCo readers) and AOpt (Table 4: NQ and TriviaQA, its rows read by
DPR's released reader) share. The rows are Table 2's (every retriever row, AOpt's rows by
protocol), each read by ``drpipe reader predict``; each row's paper value comes from its
method's paper's Table 4 (DPR for BM25 and DPR, xMoCo for xMoCo, AOpt beside its oracle rows),
and the notes say which reader read it, how k was chosen, at which precision, and on how many
test questions.

Beside it, ``results/table4-k.csv`` (``table4_k``): for some rows, exact match at several k
beside the chosen k, and the selection head's accuracy against retrieval order
(``drpipe.reader.kview``), so that a small chosen k is shown, not only stated.
"""

from __future__ import annotations

import argparse
from typing import Any

import pandas as pd

from drpipe.cliutil import add_cfg, need
from drpipe.errors import InputError
from drpipe.io import read_json
from drpipe.papers.shared_tables import (
    Layout,
    add_reports_argument,
    shared_markdown,
    shared_table,
    table_command,
)
from drpipe.reader.kview import MEASURES
from drpipe.tables.cli import add_table_command, command_group
from drpipe.tables.metrics import read_em_metrics
from drpipe.tables.notes import reader_notes, setup_notes
from drpipe.tables.output import md_table, write_csv, write_text
from drpipe.tables.rows import paper_row
from drpipe.tables.scale import scale_of

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
        "Per-question predictions: results/answers/<run>/<train set>/<dataset>-<split>.parquet. "
        "Exact match at several k beside the chosen k, and how often the selected passage holds "
        "an answer against retrieval order: results/table4-k.md (reader.k_view; `make run "
        "TARGET=results/table4-k.csv`).",
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


# ---- the k view (results/table4-k.csv)

K_COLUMNS = (
    "scale", "training", "method", "protocol", "train_set", "dataset", "split", "n_questions",
    "reader", "reader_precision", "chosen_k", "k", "is_chosen_k", *MEASURES, "top1_has_answer",
    "source",
)  # fmt: skip
K_HEADERS = {
    "em": "EM",
    "em_any": "EM if any top-k span",
    "selected_has_answer": "Selected passage has answer",
    "topk_has_answer": "Top-k has answer",
    "random_has_answer": "Random pick has answer",
    "em_given_selected_answer": "EM given selected has answer",
    "selected_not_top1": "Selected not rank 1",
}
K_SOURCE = "reproduced: computed by this pipeline (drpipe reader k-view); the papers print none"


def check_k_view(record: object, where: str) -> dict:
    """One ``drpipe reader k-view`` file; errors name the file and the key."""
    if not isinstance(record, dict):
        raise InputError(where, None, "a k view must be a JSON object")
    for key in ("method", "train_set", "dataset", "split", "n_questions", "chosen_k", "by_k",
                "top1_has_answer"):  # fmt: skip
        if key not in record:
            raise InputError(where, key, "missing key")
    if not isinstance(record["by_k"], list) or not record["by_k"]:
        raise InputError(where, "by_k", "expected a non-empty list of per-k measures")
    for i, row in enumerate(record["by_k"]):
        missing = [m for m in ("k", *MEASURES) if not isinstance(row, dict) or m not in row]
        if missing:
            raise InputError(where, f"by_k[{i}]", f"missing {missing}")
    return record


def table4_k(views: list[dict], scale: str, row_map: dict[str, Any], **cfg: Any) -> pd.DataFrame:
    """One line per (row, split, k): the measures of ``drpipe.reader.kview`` (percent), the
    row's chosen k beside; the evaluated split's rows first, in Table 2's row order."""
    named = cfg.get("train_sets", {})
    evaluated = (cfg.get("setup") or {}).get("evaluated_split")
    order = {m: i for i, m in enumerate(row_map)}
    records = []

    def place(v: dict) -> tuple:
        return (v["split"] != evaluated, v["split"], order.get(v["method"], len(order)),
                v["train_set"])  # fmt: skip

    for v in sorted(views, key=place):
        training, label = paper_row(v, row_map, named)
        for row in v["by_k"]:
            records.append(
                {"scale": scale, "training": training, "method": label,
                 "protocol": str(row_map[v["method"]].get("protocol", "standard")),
                 "train_set": v["train_set"], "dataset": v["dataset"], "split": v["split"],
                 "n_questions": v["n_questions"], "reader": v.get("reader"),
                 "reader_precision": v.get("reader_precision"), "chosen_k": v["chosen_k"],
                 "k": row["k"], "is_chosen_k": row["k"] == v["chosen_k"]}
                | {m: row[m] for m in MEASURES}
                | {"top1_has_answer": v["top1_has_answer"], "source": K_SOURCE}
            )  # fmt: skip
    frame = pd.DataFrame.from_records(records, columns=list(K_COLUMNS))
    for m in (*MEASURES, "top1_has_answer"):
        frame[m] = frame[m].astype(float)
    return frame


def _trend(group: pd.DataFrame) -> str:
    """One computed sentence per (row, split): the smallest and largest k's numbers."""
    lo, hi = group.iloc[0], group.iloc[-1]

    def one(value: float) -> str:
        return "n/a" if pd.isna(value) else f"{value:.1f}"

    def pair(col: str) -> str:
        return f"{one(lo[col])} -> {one(hi[col])}"

    return (
        f"k = {lo['k']} -> {hi['k']}: EM {pair('em')}; selected passage has an answer "
        f"{pair('selected_has_answer')} (retrieval order's top 1: {lo['top1_has_answer']:.1f}); "
        f"some top-k passage has one {pair('topk_has_answer')} (a random pick: "
        f"{pair('random_has_answer')}); some top-k span is an exact "
        f"match {pair('em_any')}; EM when the selected passage has an answer "
        f"{pair('em_given_selected_answer')}"
    )


def table4_k_markdown(frame: pd.DataFrame, scale: str, setup: dict[str, Any]) -> str:
    ev, ksplit = setup.get("evaluated_split"), setup.get("k_split")
    runs = setup.get("runs")
    rows_said = "every row" if runs is None else f"the rows of runs {', '.join(runs)}"
    sample = setup.get("sample")
    reader_sample = setup.get("reader_sample")
    if sample:
        of = f"of the {reader_sample} Table 4 reads" if reader_sample else "of those Table 4 reads"
        questions = (f"a seeded sample of {sample} questions {of} (so EM at the chosen k can "
                     "differ from Table 4's cell, which reads them all)")  # fmt: skip
    else:
        questions = "the questions Table 4 reads"
    chooser = ("each row's own" if setup.get("k_per_row") or setup.get("mode") == "per_retriever"
               else "the shared reader's")  # fmt: skip
    lines = [
        f"# DPR Table 4 beside it: exact match at several k, and passage selection, scale "
        f"`{scale}`",
        "",
        "Reproduced values only (computed by this pipeline; the papers print none of these). "
        f"Each line: {rows_said} of results/table4.csv, read by the same reader over the "
        f"retriever's top k passages, for k in {setup.get('ks')} and the row's chosen k "
        f"(marked * in column k), on {questions}. On `{ev}` (the split Table 4 "
        f"reports) nothing is chosen; the `{ksplit}` lines are {chooser} held-out run, where "
        f"k was chosen among {setup.get('reader_ks')} (the larger k there are shown, not "
        "chosen). Scores per (question, passage) reach depth "
        f"{setup.get('depth')}.",
        "",
        "Columns (percent of the questions): EM: exact match reading the top k (the best span "
        "of the passage with the highest selection score, DPR 6.1). Selected passage has "
        "answer: that passage contains an answer (as Table 2 counts a hit); at k = 1 it is the "
        "retriever's own top-1 share (retrieval order). Top-k has answer: some passage of the "
        "top k does (Table 2's top-k accuracy: a perfect selection's reach). Random pick has "
        "answer: the share of answer-bearing passages among the top k (a random selection's "
        "reach: the chance level the selection score should beat). EM if any top-k "
        "span: some top-k passage's best span is an exact match (a perfect selection's EM). "
        "EM given selected has answer: EM among the questions whose selected passage has an "
        "answer (the span head; empty or n/a when none has). Selected not rank 1: how often "
        "the selection score overrides retrieval order.",
        "",
    ]
    headers = ["Training", "Method", "Protocol", "Train set", "Dataset (split, n)", "k",
               *(K_HEADERS[m] for m in MEASURES)]  # fmt: skip
    body = []
    for _, r in frame.iterrows():
        k = f"{r['k']}*" if r["is_chosen_k"] else str(r["k"])
        body.append([r["training"], r["method"], r["protocol"], r["train_set"],
                     f"{r['dataset']} ({r['split']}, n={r['n_questions']})", k,
                     *(r[m] for m in MEASURES)])  # fmt: skip
    lines += [md_table(headers, body), "", "## What the numbers say (computed)", ""]
    keys = ["training", "method", "protocol", "train_set", "dataset", "split"]
    for key, group in frame.groupby(keys, sort=False):
        training, method, protocol, train_set, dataset, split = key
        lines.append(f"- {method} ({training}, {protocol}, {train_set}), {dataset} {split}, "
                     f"chosen k = {group['chosen_k'].iloc[0]}: {_trend(group)}.")  # fmt: skip
    return "\n".join(lines) + "\n"


def _cmd_table4_k(args: argparse.Namespace) -> int:
    cfg = dict(args.cfg)
    if not args.views:
        raise SystemExit(
            "error: drpipe tables table4-k: no k-view files (reader.k_view is null in the "
            "config: set it to build results/table4-k.csv)"
        )
    views = [check_k_view(read_json(p), p) for p in args.views]
    scale = str(scale_of(cfg))
    frame = table4_k(views, scale, need(cfg, "row_map"), **{k: cfg[k] for k in
                     ("train_sets", "setup") if k in cfg})  # fmt: skip
    write_csv(frame, args.out)
    if args.md:
        write_text(table4_k_markdown(frame, scale, cfg.get("setup") or {}), args.md)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    group = command_group(sub, "tables", "results tables: reproduced vs paper numbers")
    p = add_table_command(
        group, "table4", _cmd_table4, "Table 4 (end-to-end exact match per dataset)",
        inputs_help="exact-match JSON files of drpipe reader predict",
    )  # fmt: skip
    add_reports_argument(p)
    p = group.add_parser(
        "table4-k", help="Table 4's k view: EM at several k and passage selection per row"
    )
    p.add_argument("--views", nargs="*", default=[], help="JSON files of drpipe reader k-view")
    p.add_argument("--out", required=True, help="CSV to write")
    p.add_argument("--md", help="Markdown rendering to write")
    add_cfg(p)
    p.set_defaults(func=_cmd_table4_k)
