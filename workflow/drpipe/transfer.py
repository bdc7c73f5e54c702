"""The transfer table (``drpipe transfer table``): a row per run, a column per collection and
ir_measures measure, from the scores ``drpipe collection score`` wrote, with notes saying what
each collection is, how many queries and passages each number is over, and that nothing was
tuned on these queries. The plan is drpipe.plan.transfer; the rules workflow/rules/transfer.smk.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pandas as pd

from drpipe.cliutil import add_cfg
from drpipe.errors import InputError
from drpipe.io import load_input_json
from drpipe.tables.output import md_table, write_csv, write_text


def _read_json(path: str | Path) -> dict:
    data = load_input_json(path)
    if not isinstance(data, dict):
        raise InputError(path, None, "not a JSON object")
    return data


def column(collection: str, measure: str) -> str:
    return f"{collection}/{measure}"


def build(
    scores: list[str | Path],
    reports: list[str | Path],
    notes: list[str | Path],
    cfg: dict[str, Any],
) -> tuple[pd.DataFrame, str]:
    """(CSV frame, Markdown) of the table. ``scores`` are in ``cfg["cells"]`` order
    (collection, run, train set); ``reports`` one per collection, ``notes`` one per built
    collection, both in ``cfg["collections"]`` order. Values are ir_measures' x 100."""
    cells, measures, cols = cfg["cells"], cfg["measures"], cfg["collections"]
    if len(scores) != len(cells):
        raise ValueError(f"{len(scores)} score files for {len(cells)} cells")
    values: dict[tuple[str, str, str], dict[str, float]] = {}
    queries: dict[str, set[int]] = {}
    for path, (coll, run, ts) in zip(scores, cells, strict=True):
        record = _read_json(path)
        got = record.get("measures")
        if not isinstance(got, dict) or any(m not in got for m in measures):
            raise InputError(
                path, None, f"scores lack measures {measures} (has {got and list(got)})"
            )
        values[(coll, run, ts)] = {m: 100.0 * float(got[m]) for m in measures}
        queries.setdefault(coll, set()).add(int(record.get("queries", 0)))
    built = [c for c in cols if c["built"]]
    if len(reports) != len(cols) or len(notes) != len(built):
        raise ValueError("one conversion report per collection and notes per built collection")
    report = {c["name"]: _read_json(p) for c, p in zip(cols, reports, strict=True)}
    note = {c["name"]: _read_json(p) for c, p in zip(built, notes, strict=True)}

    rows = []
    for r in cfg["rows"]:
        row = {"method": r["label"], "run": r["run"], "train_set": r["train_set"]}
        for c in cols:
            for m in measures:
                row[column(c["name"], m)] = values[(c["name"], r["run"], r["train_set"])][m]
        rows.append(row)
    frame = pd.DataFrame(rows, columns=["method", "run", "train_set"]
                         + [column(c["name"], m) for c in cols for m in measures])  # fmt: skip

    headers = ["Method"] + [f"{c['label']} {m}" for c in cols for m in measures]
    body = [[row["method"], *(row[column(c["name"], m)] for c in cols for m in measures)]
            for row in rows]  # fmt: skip
    lines = [
        "# Transfer: retrieval on collections outside the training data",
        "",
        md_table(headers, body) if cols else "(no collections configured: transfer.collections)",
        "",
        "Notes:",
        "",
        f"- **Values**: ir_measures' {', '.join(measures)} x 100, each the mean over the "
        "collection's judged queries (a query whose relevant passages are not retrieved "
        f"scores 0); every run retrieves {cfg['depth']} passages per query (BM25, or an exact "
        "flat index of the run's vectors).",
        "- **Computed**: every number is computed by this workflow; no paper reports these "
        "collections, so there is nothing to compare with.",
        "- **Nothing tuned**: the models are the ones Table 2 trains (row: run and train set), "
        "used as they are; no model, setting or checkpoint was chosen on these queries, and "
        "BM25 keeps the config's k1 and b.",
    ]
    for c in cols:
        rep = report[c["name"]]
        counts = (
            f"{rep['documents']} passages, {rep['queries_kept']} queries with qrels "
            f"({rep['qrels']} judgements)"
        )
        if rep.get("queries_without_qrels"):
            counts += f"; {rep['queries_without_qrels']} queries without qrels dropped"
        scored = sorted(queries.get(c["name"], ()))
        if scored and scored != [rep["queries_kept"]]:
            counts += f"; scored on {scored} queries"
        what = f"**{c['label']}** (`{c['name']}`): {c['origin']}; {counts}."
        if c["name"] in note:
            what += f" {note[c['name']].get('how', '')}."
        lines.append(f"- {what}")
    scale_note = {
        "small": "the models were trained on this scale's small budget and corpus: the "
        "numbers test the pipeline, not the papers' claims",
        "standin": "stand-in inputs: the numbers mean nothing",
    }.get(cfg.get("scale_note") or "")
    if scale_note:
        lines.append(f"- **Scale** ({cfg['scale']}): {scale_note}.")
    return frame, "\n".join(lines) + "\n"


def _cmd_table(args: argparse.Namespace) -> int:
    frame, md = build(args.scores, args.reports, args.notes or [], args.cfg)
    write_csv(frame, args.out)
    write_text(md, args.md)
    return 0


def register(sub) -> None:
    group = sub.add_parser("transfer", help="the transfer table (runs x collections)")
    cmds = group.add_subparsers(dest="transfer_command", required=True)
    p = cmds.add_parser("table", help="results/transfer.csv and .md from collection scores")
    p.add_argument("--scores", nargs="*", default=[], help="in the cfg's cells order")
    p.add_argument("--reports", nargs="*", default=[], help="conversion reports, per collection")
    p.add_argument("--notes", nargs="*", default=[], help="builders' notes, per built collection")
    add_cfg(p)
    p.add_argument("--out", required=True)
    p.add_argument("--md", required=True)
    p.set_defaults(func=_cmd_table)
