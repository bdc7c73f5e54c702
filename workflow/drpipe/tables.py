"""Results tables: each reproduced number next to the number the paper printed, and the difference.

Inputs are the metrics JSON files of ``drpipe evaluate`` (``{"method", "train_set", "dataset",
"split", "n_questions", "top_k": {"1", "5", "20", "100"}}``, percent) and, for Figure 1, the
per-question first-hit ranks. Paper values come from :mod:`drpipe.paper_numbers`; nothing here
invents a row: a table has rows only for the metrics it is given.
"""

from __future__ import annotations

import argparse
import logging
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from drpipe.cliutil import add_cfg, need
from drpipe.errors import InputError
from drpipe.io import atomic_path, read_json
from drpipe.paper_numbers import load_paper_numbers, load_papers

log = logging.getLogger(__name__)

KS = (1, 5, 20, 100)
TABLE3_KS = (5, 20, 100)
# DPR's dataset order; datasets the paper does not have follow in name order.
DATASET_ORDER = ("nq", "triviaqa", "wq", "trec", "squad")
TRAINING_ORDER = ("None", "Single", "Multi")
REPRODUCED = "reproduced: computed by this pipeline"
DPR_T2 = "copied from Karpukhin et al. 2020, Table 2"
DPR_T3 = "copied from Karpukhin et al. 2020, Table 3"
AOPT_T3 = "copied from AOpt (Future Internet 2023), Table 3"
PAPER_T2 = {
    "dcsr": "copied from Wu et al. 2022 (DCSR), Table 2",
    "xmoco": "copied from Yang et al. 2021 (xMoCo), Table 2",
}
# Table 2 rows by protocol: the usual rows never see a test answer; AOpt's rows say whether
# their pseudo-labels did. Oracle rows come last, in a block of their own.
STANDARD = "standard"
ORACLE = "uses the test answers (oracle)"
PROTOCOL_ORDER = (STANDARD, "leak-free", ORACLE)
# DPR's SQuAD "test" set is the SQuAD v1.1 dev set (10,570 questions, DPR Table 1), so our
# squad/dev is compared with the paper's squad/test unless the config says otherwise.
DEFAULT_SPLIT_EQUIV = {"squad": {"dev": "test"}}
# Placed after BM25 in the "None" block: the encoder before any fine-tuning.
METHOD_ORDER = ("BM25", "DPR init (no fine-tuning)", "DPR", "BM25+DPR")
# AOpt's rows in its Table 3 order (the linear-weights label carries its beta and gamma).
AOPT_ORDER = ("Weighted-based", "DPR + AOpt(query)", "DPR + AOpt(passage)", "DPR + AOpt(hybrid)")


# --------------------------------------------------------------------------- metrics input


def check_metrics(record: Any, where: str | Path) -> dict:
    """Validate one metrics record; errors name the file and the offending key."""
    if not isinstance(record, dict):
        raise InputError(where, None, "metrics must be a JSON object")
    for key in ("method", "dataset", "split", "n_questions", "top_k"):
        if key not in record:
            raise InputError(where, key, "missing key")
    if "train_set" not in record:
        raise InputError(where, "train_set", "missing key (use null when nothing was trained)")
    top_k = record["top_k"]
    if not isinstance(top_k, dict):
        raise InputError(where, "top_k", "must be an object {k: percent}")
    for k in KS:
        value = top_k.get(str(k))
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise InputError(where, f"top_k.{k}", f"expected a number, got {value!r}")
        if not 0.0 <= float(value) <= 100.0 or math.isnan(float(value)):
            raise InputError(where, f"top_k.{k}", f"{value} is not a percentage in [0, 100]")
    n = record["n_questions"]
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise InputError(where, "n_questions", f"expected a positive integer, got {n!r}")
    return record


def read_metrics(paths: Iterable[str | Path]) -> list[dict]:
    return [check_metrics(read_json(p), p) for p in paths]


# --------------------------------------------------------------------------- helpers


def _r2(value: float | None) -> float | None:
    return None if value is None else round(float(value), 2)


def _diff(ours: float, paper: float | None) -> float | None:
    return None if paper is None else round(float(ours) - paper, 2)


PAPER_SCALE = "paper"
DEFAULT_TOLERANCE = 1.0  # points of top-k accuracy (config: tables.paper_tolerance)


def comparable(
    frame: pd.DataFrame, scale: str, *, groups: Sequence[str] = (), tolerance: float | None = None
) -> pd.DataFrame:
    """What a table prints beside the paper's numbers at this scale.

    At the ``paper`` scale each ``<c>_diff`` (ours - paper) stays, followed by
    ``<c>_within_tol`` (|diff| <= ``tolerance`` points) and one ``diff_tolerance`` column.
    Below it a corpus of thousands of passages and a small encoder make the difference no
    reproduction gap, so ``<c>_diff`` becomes ``<c>_rank`` and ``<c>_paper_rank``: the rank
    (1 = best, ties share the best rank) of ours and of the paper's value among the rows that
    have both, within ``groups`` (e.g. the protocol: oracle rows are ranked apart).
    """
    out = frame.copy()
    diffs = [c for c in out.columns if str(c).endswith("_diff")]
    if scale == PAPER_SCALE:
        tol = DEFAULT_TOLERANCE if tolerance is None else float(tolerance)
        for col in diffs:
            within = out[col].abs().le(tol + 1e-9).astype("boolean").mask(out[col].isna())
            out.insert(out.columns.get_loc(col) + 1, col[: -len("_diff")] + "_within_tol", within)
        if diffs:
            out["diff_tolerance"] = tol
        return out
    keys = [g for g in groups if g in out.columns]
    for col in diffs:
        base = col[: -len("_diff")]
        have = out[base].notna() & out[base + "_paper"].notna()
        ranks = {}
        for side, source in (("rank", base), ("paper_rank", base + "_paper")):
            values = out.loc[have, source].astype(float)
            ranked = (
                values.groupby([out.loc[have, g] for g in keys]).rank(method="min", ascending=False)
                if keys
                else values.rank(method="min", ascending=False)
            )
            ranks[side] = ranked.reindex(out.index).astype("Int64")
        at = out.columns.get_loc(col)
        out = out.drop(columns=col)
        out.insert(at, base + "_rank", ranks["rank"])
        out.insert(at + 1, base + "_paper_rank", ranks["paper_rank"])
    return out


def _tolerance(frame: pd.DataFrame | None) -> float | None:
    """The tolerance ``comparable`` recorded in a paper-scale table, if any."""
    if frame is None or "diff_tolerance" not in frame.columns or not len(frame):
        return None
    return float(frame["diff_tolerance"].iloc[0])


def comparison_headers(frame: pd.DataFrame, base: str, label: str) -> list[str]:
    """The header of the column a Markdown table prints after a paper value (see
    ``comparison_cell``): the difference at the paper scale, the two ranks below it."""
    if f"{base}_diff" in frame.columns:
        tol = _tolerance(frame)
        return [f"{label} diff" + (f" (±{tol:g})" if tol is not None else "")]
    if f"{base}_rank" in frame.columns:
        return [f"{label} rank ours/paper"]
    return []


def comparison_cell(row: pd.Series, base: str) -> list[Any]:
    if f"{base}_diff" in row.index:
        diff = row[f"{base}_diff"]
        if pd.isna(diff):
            return [None]
        within = row.get(f"{base}_within_tol")
        mark = "" if within is None or pd.isna(within) else (" ok" if within else " outside")
        return [f"{diff:+.2f}{mark}"]
    if f"{base}_rank" in row.index:
        ours, theirs = row[f"{base}_rank"], row[f"{base}_paper_rank"]
        return ["" if pd.isna(ours) else f"{ours}/{theirs}"]
    return []


def ordering(frame: pd.DataFrame, base: str, label: str = "method") -> str:
    """One line: the rows that have ours and the paper's value, best first by ours and by the
    paper, and how many pairs of them the two orders agree on (ties agree only with ties)."""
    both = frame[frame[base].notna() & frame[base + "_paper"].notna()]
    if len(both) < 2:
        return ""

    def order(col: str) -> str:
        ranked = both.sort_values(col, ascending=False, kind="stable")
        return " > ".join(f"{r[label]} ({r[col]:.1f})" for _, r in ranked.iterrows())

    ours, theirs = both[base].to_numpy(float), both[base + "_paper"].to_numpy(float)
    n = len(both)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    same = sum(np.sign(ours[i] - ours[j]) == np.sign(theirs[i] - theirs[j]) for i, j in pairs)
    return (
        f"ours {order(base)}; paper {order(base + '_paper')}; "
        f"{same} of {len(pairs)} pairs in the same order"
    )


def comparison_note(scale: str, tolerance_frame: pd.DataFrame | None = None) -> str:
    """The header sentence that says what the column after each paper value means."""
    if scale == PAPER_SCALE:
        tol = _tolerance(tolerance_frame)
        tol = DEFAULT_TOLERANCE if tol is None else tol
        return (
            f"diff = ours - paper; 'ok' when within ±{tol:g} points (tables.paper_tolerance), "
            "'outside' otherwise."
        )
    return (
        f"At scale `{scale}` the corpus, the training and the encoder are far smaller than "
        "the paper's, so ours - paper is no reproduction gap and is not printed. Beside the "
        "paper's value (kept for orientation) is each row's rank among the rows that have "
        "both numbers, ours/paper (1 = best): what is comparable is the ordering of the "
        "methods and the paired claims in results/claims.csv."
    )


def _dataset_key(name: str) -> tuple[int, str]:
    return (DATASET_ORDER.index(name), "") if name in DATASET_ORDER else (len(DATASET_ORDER), name)


def _paper_split(dataset: str, split: str, equiv: dict[str, dict[str, str]]) -> str:
    return equiv.get(dataset, {}).get(split, split)


def _lookup(numbers: pd.DataFrame, **cell: str) -> float | None:
    sel = pd.Series(True, index=numbers.index)
    for col, value in cell.items():
        sel &= numbers[col] == value
    hits = numbers.loc[sel, "value"]
    return None if hits.empty else float(hits.iloc[0])


def train_datasets(train_set: str | None, named: dict[str, list[str]]) -> list[str]:
    """Datasets a train set combines: a named set from config, else names joined by '+' or ','."""
    if not train_set:
        return []
    if train_set in named:
        return list(named[train_set])
    return [part for part in train_set.replace(",", "+").split("+") if part]


def paper_row(
    metric: dict, row_map: dict[str, Any], named: dict[str, list[str]]
) -> tuple[str, str]:
    """(training, paper method) for one metrics record, from the config's ``row_map``."""
    method = metric["method"]
    if method not in row_map:
        raise SystemExit(
            f"error: --cfg row_map has no entry for method '{method}' "
            f"(train_set {metric['train_set']!r}, dataset {metric['dataset']!r}); "
            f"known: {', '.join(sorted(row_map))}"
        )
    spec = row_map[method]
    label = need(spec, "method", where=f"--cfg row_map.{method}")
    training = spec.get("training")
    if training is None:
        sets = train_datasets(metric["train_set"], named)
        if not sets:
            raise SystemExit(
                f"error: --cfg row_map.{method} gives no 'training' and the metrics of "
                f"{metric['dataset']}/{metric['split']} name no train_set to derive it from"
            )
        training = "Single" if len(sets) == 1 else "Multi"
    return str(training), str(label)


# --------------------------------------------------------------------------- Table 2


def _table2_order(rec: dict) -> tuple:
    training, method, protocol = rec["training"], rec["method"], rec["protocol"]
    return (
        PROTOCOL_ORDER.index(protocol) if protocol in PROTOCOL_ORDER else len(PROTOCOL_ORDER),
        TRAINING_ORDER.index(training) if training in TRAINING_ORDER else len(TRAINING_ORDER),
        METHOD_ORDER.index(method) if method in METHOD_ORDER else len(METHOD_ORDER),
        next((i for i, m in enumerate(AOPT_ORDER) if method.startswith(m)), -1),
        method,
    )


def _paper_cell(paper: pd.DataFrame, training: str, label: str, dataset: str, k: int):
    """A paper's Table 2 value; "BM25+X" is printed "X+BM25" in some papers (xMoCo)."""
    labels = [label]
    if label.startswith("BM25+"):
        labels.append(label.removeprefix("BM25+") + "+BM25")
    for name in labels:
        value = _lookup(paper, setting=training, method=name, dataset=dataset, metric=f"top{k}")
        if value is not None:
            return value
    return None


# --------------------------------------------------------------------------- setup notes
# Where our setup differs from the papers', said beside the numbers: each Table 2 row names
# the notes that apply to it (CSV column "notes"); the markdown prints their text, written
# from the run's own config ("setup" in the table's --cfg).
NOTE_ORDER = ("scale", "bm25", "hybrid", "training", "validation")


def _row_kinds(run: str, train_set: str | None) -> set[str]:
    kinds = set()
    if run == "bm25":
        kinds.add("bm25")
    if "+bm25" in run:
        kinds |= {"bm25", "hybrid"}
    if train_set and train_set != "none":
        kinds |= {"training", "validation"}
    return kinds


def note_keys(kinds: Iterable[str], scale: str) -> list[str]:
    """The notes a row with these kinds carries, in ``NOTE_ORDER``."""
    keys = set(kinds) | ({"scale"} if scale != "paper" else set())
    return [k for k in NOTE_ORDER if k in keys]


def setup_notes(setup: dict[str, Any], scale: str) -> dict[str, str]:
    """Text of each note from the run's config: ``encoder`` (init), ``bm25_fields``,
    ``field_weights``, ``hybrid_lambda``, ``hybrid_grid``, ``training`` (method -> epochs,
    batch_size) and ``validation`` (train set -> ``dev`` or the held-out fraction)."""
    notes: dict[str, str] = {}
    if scale != PAPER_SCALE:
        notes["scale"] = (
            f"Scale `{scale}`: a corpus of thousands of passages (README, 'Scales') instead "
            f"of 21M Wikipedia passages, and the encoder {setup.get('encoder', '?')} instead of "
            "BERT-base. The absolute numbers are no reproduction gap, so no difference to the "
            "paper is printed; what carries over is the ordering of the rows (their ranks) and "
            "the paired claims in results/claims.csv."
        )
    if setup.get("bm25_fields", "single") == "single":
        notes["bm25"] = (
            "BM25 indexes title and text as one field, as pyserini indexes DPR's Wikipedia; "
            "DPR's own BM25 used two fields, and pyserini's single-field NQ run prints 3 to 4 "
            "points above DPR's BM25 (bm25.fields: title_text is the two-field option)."
        )
    else:
        w = setup.get("field_weights", {})
        notes["bm25"] = (
            "BM25 is summed over two fields, text and title (Anserini -fields, weights "
            f"{w.get('contents', 1.0)} and {w.get('title', 1.0)}), like DPR's two-field index."
        )
    lam = setup.get("hybrid_lambda", 1.1)
    how = (
        f"lambda chosen per model as the best of {setup.get('hybrid_grid')} on the training "
        "questions the model held out for validation (never on test questions; the choice and "
        "the grid's accuracies are in the hybrid run's report)"
        if lam == "tune"
        else f"lambda fixed at {lam}"
    )
    notes["hybrid"] = (
        f"BM25 + lambda x dense, {how}; DPR chose 1.1 on its dev set for its own encoder's "
        "score scale. A passage found only by the dense retriever gets the lowest BM25 score "
        "of that question's list: an upper bound on its true BM25 score."
    )
    training = setup.get("training") or {}
    if training:
        ours = "; ".join(
            f"{m}: {t['epochs']} epoch(s), batch {t['batch_size']}"
            for m, t in sorted(training.items())
        )
        notes["training"] = (
            f"Training here: {ours}. The papers train 40 epochs (DPR and xMoCo: 100 on "
            "WebQuestions and CuratedTREC) with batch 128 on 8 GPUs."
            if scale != "paper"
            else f"Training: {ours}."
        )
    validation = setup.get("validation") or {}
    held = {ts: v for ts, v in validation.items() if v != "dev"}
    if held:
        sets = ", ".join(f"{ts} ({v:g} of its examples)" for ts, v in sorted(held.items()))
        notes["validation"] = (
            f"No dev file for train set(s) {sets}: checkpoints are selected on that held-out "
            "fraction of the training examples, which the model does not train on. DPR trains "
            "on its whole training file and selects on its dev set."
        )
    elif validation:
        notes["validation"] = "Checkpoints are selected on DPR's dev biencoder files, as DPR."
    return notes


def table2(metrics: list[dict], scale: str, row_map: dict[str, Any], **cfg: Any) -> pd.DataFrame:
    """DPR Table 2: one row per (training, method), columns per dataset x top-k.

    ``row_map``: our method name -> ``{"method": paper's label, "training": "None" | "Single"
    | "Multi"}``; without ``training`` it is Single when the train set has one dataset and Multi
    when it has several (``train_sets`` in cfg may name sets: ``{"multi": ["nq", ...]}``).
    ``split_equiv`` (default: squad dev = the paper's squad test) says which of our splits are
    the paper's test sets; only those get a paper value.

    A ``row_map`` entry may carry a ``protocol`` (AOpt: "leak-free", or "uses the test answers
    (oracle)"); rows without one are "standard". Oracle rows get the AOpt paper's own (oracle)
    Table 3 values where it has the cell, sort after every other row and are never merged
    with a row of another protocol.
    """
    named = cfg.get("train_sets", {})
    equiv = cfg.get("split_equiv", DEFAULT_SPLIT_EQUIV)
    papers: dict[str, pd.DataFrame] = {}

    def table2_of(name: str) -> pd.DataFrame:
        # A row's numbers come from its method's paper (DCSR's, xMoCo's Table 2; DPR's default).
        if name not in papers:
            frame = load_paper_numbers(name)
            papers[name] = frame[frame["table"] == "2"]
        return papers[name]

    aopt_paper = load_paper_numbers("aopt")
    aopt_paper = aopt_paper[aopt_paper["table"] == "3"]

    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    seen: dict[tuple[str, str, str, str], dict] = {}
    for m in metrics:
        training, label = paper_row(m, row_map, named)
        protocol = str(row_map[m["method"]].get("protocol", STANDARD))
        cell = (protocol, training, label, m["dataset"])
        if cell in seen:
            other = seen[cell]
            raise ValueError(
                f"two metrics for Table 2 row ({training}, {label}) on {m['dataset']}: "
                f"{other['method']}/{other['train_set']}/{other['split']} and "
                f"{m['method']}/{m['train_set']}/{m['split']}"
            )
        seen[cell] = m
        row = rows.setdefault(
            (protocol, training, label),
            {"_train_sets": [], "_paper": False, "_cite": DPR_T2, "_kinds": set()},
        )
        row["_kinds"] |= _row_kinds(m["method"], m["train_set"])
        if m["train_set"] and m["train_set"] not in row["_train_sets"]:
            row["_train_sets"].append(m["train_set"])
        d = m["dataset"]
        split = _paper_split(d, m["split"], equiv)
        row[f"split_{d}"] = m["split"]
        row[f"n_questions_{d}"] = m["n_questions"]
        for k in KS:
            ours = float(m["top_k"][str(k)])
            theirs = None
            if split == "test" and protocol == STANDARD:
                source = str(row_map[m["method"]].get("paper", "dpr"))
                theirs = _paper_cell(table2_of(source), training, label, d, k)
                if theirs is not None and source != "dpr":
                    row["_cite"] = PAPER_T2.get(source, row["_cite"])
            elif split == "test" and protocol == ORACLE:
                # The AOpt paper's numbers were measured with the test answers too.
                theirs = _lookup(aopt_paper, method=label, dataset=d, metric=f"top{k}")
                row["_cite"] = AOPT_T3
            row[f"{d}_top{k}"] = _r2(ours)
            row[f"{d}_top{k}_paper"] = theirs
            row[f"{d}_top{k}_diff"] = _diff(ours, theirs)
            row["_paper"] |= theirs is not None

    datasets = sorted({m["dataset"] for m in metrics}, key=_dataset_key)
    columns = ["scale", "training", "method", "protocol", "train_set", "source"]
    for d in datasets:
        columns += [f"split_{d}", f"n_questions_{d}"]
        for k in KS:
            columns += [f"{d}_top{k}", f"{d}_top{k}_paper", f"{d}_top{k}_diff"]

    setup = cfg.get("setup")
    if setup is not None:
        columns.append("notes")
    records = []
    for (protocol, training, label), row in rows.items():
        cite = row.pop("_cite")
        kinds = row.pop("_kinds")
        if setup is not None:
            row["notes"] = "; ".join(note_keys(kinds, scale))
        source = REPRODUCED + (f" | paper: {cite}" if row.pop("_paper") else "")
        if protocol == ORACLE:
            source += " | uses the test answers (oracle): an upper bound, not comparable"
        train_set = "+".join(row.pop("_train_sets"))
        records.append(
            {"scale": scale, "training": training, "method": label, "protocol": protocol}
            | {"train_set": train_set, "source": source}
            | row
        )
    records.sort(key=_table2_order)
    frame = pd.DataFrame.from_records(records, columns=columns)
    for d in datasets:
        frame[f"n_questions_{d}"] = frame[f"n_questions_{d}"].astype("Int64")
        for k in KS:
            for suffix in ("", "_paper", "_diff"):
                frame[f"{d}_top{k}{suffix}"] = frame[f"{d}_top{k}{suffix}"].astype(float)
    return frame.reset_index(drop=True)


# --------------------------------------------------------------------------- Table 3


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
            "source": REPRODUCED + (f" | paper: {DPR_T3} (NQ dev)" if row_label else ""),
        }
        for k in TABLE3_KS:
            ours = float(m["top_k"][str(k)])
            theirs = (
                _lookup(paper, method=row_label, dataset="nq", split="dev", metric=f"top{k}")
                if row_label
                else None
            )
            rec[f"top{k}"] = _r2(ours)
            rec[f"top{k}_paper"] = theirs
            rec[f"top{k}_diff"] = _diff(ours, theirs)
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


# --------------------------------------------------------------------------- Figure 1


def read_first_hit_ranks(path: str | Path) -> pd.Series:
    """First-hit ranks of one per-question file (NaN = no hit in the retrieved list)."""
    frame = pd.read_parquet(path)
    for col in ("qid", "first_hit_rank"):
        if col not in frame.columns:
            raise InputError(path, "schema", f"missing column '{col}'")
    if frame.empty:
        raise InputError(path, None, "no questions")
    dup = frame["qid"].duplicated()
    if dup.any():
        raise InputError(path, f"qid {frame['qid'][dup].iloc[0]}", "duplicate qid")
    ranks = pd.to_numeric(frame["first_hit_rank"], errors="coerce").astype(float)
    bad = frame["first_hit_rank"].notna() & ~(ranks >= 1)
    if bad.any():
        i = int(bad.to_numpy().nonzero()[0][0])
        raise InputError(
            path,
            f"qid {frame['qid'].iloc[i]}",
            f"first_hit_rank {frame['first_hit_rank'].iloc[i]} < 1",
        )
    return ranks


def topk_curve(ranks: pd.Series, max_k: int) -> pd.Series:
    """Top-k accuracy (%) for k = 1..max_k: the share of questions with first hit at rank <= k."""
    ks = pd.RangeIndex(1, max_k + 1, name="k")
    hits = ranks.dropna().astype(int)
    counts = hits.value_counts().reindex(ks, fill_value=0).cumsum()
    return (100.0 * counts / len(ranks)).rename("accuracy")


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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4.0), dpi=120)
    for label, curve in curves.groupby("label", sort=False):
        dashed = str(label).lower().startswith("bm25")
        ax.plot(curve["k"], curve["accuracy"], label=label, linestyle="--" if dashed else "-")
    ax.set_xlabel("k: # of retrieved passages")
    ax.set_ylabel("Top-k accuracy (%)")
    ax.set_title(title, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_path(out_png) as tmp:
        # No timestamp/software metadata: the same curves give the same bytes.
        fig.savefig(tmp, format="png", metadata={"Software": None})
    plt.close(fig)


# --------------------------------------------------------------------------- output


def _fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return ""
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def _md_table(headers: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _citation(paper: str) -> str:
    papers = load_papers().set_index("paper")
    return str(papers.loc[paper, "citation"])


def table2_markdown(frame: pd.DataFrame, scale: str, notes: dict[str, str] | None = None) -> str:
    datasets = sorted(
        {c[len("split_") :] for c in frame.columns if c.startswith("split_")}, key=_dataset_key
    )
    with_paper = [k for k in KS if any(frame[f"{d}_top{k}_paper"].notna().any() for d in datasets)]
    protocols = (
        frame["protocol"] if "protocol" in frame.columns else pd.Series(STANDARD, frame.index)
    )
    # A Protocol column only when AOpt rows are there (the usual table is unchanged).
    show_protocol = bool((protocols != STANDARD).any())
    headers = ["Training", "Method", *(["Protocol"] if show_protocol else [])]
    headers += ["Train set", "Dataset (split, n)"]
    show_notes = notes is not None and "notes" in frame.columns
    first = datasets[0] if datasets else ""
    for k in KS:
        headers += (
            [f"Top-{k} ours", f"Top-{k} paper"]
            + comparison_headers(frame, f"{first}_top{k}", f"Top-{k}")
            if k in with_paper
            else [f"Top-{k} ours"]
        )
    if show_notes:
        headers.append("Notes")
    rows, oracle_rows = [], []
    for i, r in frame.iterrows():
        for d in datasets:
            if pd.isna(r[f"{d}_top{KS[0]}"]):
                continue
            row = [r["training"], r["method"], *([protocols[i]] if show_protocol else [])]
            row.append(r["train_set"])
            row.append(f"{d} ({r[f'split_{d}']}, n={r[f'n_questions_{d}']})")
            for k in KS:
                row.append(r[f"{d}_top{k}"])
                if k in with_paper:
                    row += [r[f"{d}_top{k}_paper"], *comparison_cell(r, f"{d}_top{k}")]
            if show_notes:
                row.append(r["notes"])
            (oracle_rows if protocols[i] == ORACLE else rows).append(row)
    evaluated = ", ".join(
        sorted(
            {
                f"{d}/{r[f'split_{d}']}"
                for _, r in frame.iterrows()
                for d in datasets
                if pd.notna(r[f"split_{d}"])
            }
        )
    )
    head = [
        f"# DPR Table 2: top-k retrieval accuracy (%), scale `{scale}`",
        "",
        f"Evaluated on (dataset/split): {evaluated or 'nothing'}.",
        "",
        f'Reproduced values ("ours") are computed by this pipeline. Paper values are {DPR_T2} '
        "(test sets; DPR's SQuAD test set is SQuAD v1.1 dev) and are given only where the "
        "paper printed that number (it has Top-20 and Top-100 only). "
        + comparison_note(scale, frame),
        *_other_papers(frame),
        "",
        f"Source: {_citation('dpr')}.",
        "",
        "",
    ]
    text = "\n".join(head) + _md_table(headers, rows) + "\n"
    orders = [
        f"- {d} Top-{k}: {line}\n"
        for d in datasets
        for k in with_paper
        if (line := ordering(frame[protocols == STANDARD], f"{d}_top{k}"))
    ]
    if orders:
        text += (
            "\n## Ordering of the methods the papers also report (rows without a test answer)"
            "\n\n" + "".join(orders)
        )
    if show_protocol:
        text += (
            "\nAOpt rows (Table 3 of AOpt, Future Internet 2023) start from the DPR run "
            "above and change its stored vectors. Leak-free rows read no test answer: "
            "passage vectors learn from the training questions' answers, question vectors "
            "from pseudo-relevance feedback (their top retrieved passages, no answers).\n"
        )
    if show_notes:
        used = [k for k in NOTE_ORDER if any(k in str(n).split("; ") for n in frame["notes"])]
        text += "\n## Notes: where this setup differs from the papers'\n\n" + "".join(
            f"- **{k}**: {notes[k]}\n" for k in used if k in notes
        )
    if oracle_rows:
        text += (
            "\n## Oracle rows: they use the test answers (oracle)\n\n"
            "The paper's protocol: AOpt's pseudo-labels come from the answers of the very test "
            "questions evaluated here, so these numbers are an upper bound, not a retriever's "
            "accuracy, and are not comparable with the rows above. Paper values here are "
            f"{AOPT_T3} (also measured with the test answers).\n\n"
            + _md_table(headers, oracle_rows)
            + "\n"
        )
    return text


def _other_papers(frame: pd.DataFrame) -> list[str]:
    """A line naming the rows whose paper value comes from their own method's paper."""
    own = {
        m: cite
        for m, src in zip(frame["method"], frame["source"], strict=True)
        for cite in PAPER_T2.values()
        if cite in str(src)
    }
    if not own:
        return []
    named = "; ".join(f"{m}: {c}" for m, c in own.items())
    return ["", f"Except these rows, whose paper values come from their own paper: {named}."]


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
        f'Reproduced values ("ours") are computed by this pipeline. Paper values are {DPR_T3}. '
        + comparison_note(scale, frame),
        "",
        f"Source: {_citation('dpr')}.",
        "",
        "",
    ]
    return "\n".join(head) + _md_table(headers, rows) + "\n"


def write_csv(frame: pd.DataFrame, path: str | Path) -> None:
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False, float_format="%.2f")


def write_text(text: str, path: str | Path) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


# --------------------------------------------------------------------------- CLI


def _cmd_table2(args: argparse.Namespace) -> int:
    cfg = dict(args.cfg)
    scale = need(cfg, "scale")
    row_map = need(cfg, "row_map")
    extra = {k: cfg[k] for k in ("train_sets", "split_equiv", "setup") if k in cfg}
    frame = table2(read_metrics(args.metrics), scale, row_map, **extra)
    frame = comparable(frame, scale, groups=["protocol"], tolerance=cfg.get("tolerance"))
    write_csv(frame, args.out)
    if args.md:
        notes = setup_notes(cfg["setup"], scale) if "setup" in cfg else None
        write_text(table2_markdown(frame, scale, notes), args.md)
    log.info("table2: %d rows from %d metrics files -> %s", len(frame), len(args.metrics), args.out)
    return 0


def _cmd_table3(args: argparse.Namespace) -> int:
    scale = need(args.cfg, "scale")
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
    parser = sub.add_parser("tables", help="results tables: reproduced vs paper numbers")
    tables = parser.add_subparsers(dest="subcommand", required=True)

    p = tables.add_parser("table2", help="DPR Table 2 (top-k accuracy per dataset)")
    p.add_argument("--metrics", nargs="+", required=True, help="metrics JSON files")
    p.add_argument("--out", required=True, help="CSV to write")
    p.add_argument("--md", help="Markdown rendering to write")
    add_cfg(p)
    p.set_defaults(func=_cmd_table2)

    p = tables.add_parser("table3", help="DPR Table 3 (training-scheme ablation)")
    p.add_argument("--metrics", nargs="+", required=True, help="metrics JSON files")
    p.add_argument("--out", required=True, help="CSV to write")
    p.add_argument("--md", help="Markdown rendering to write")
    add_cfg(p)
    p.set_defaults(func=_cmd_table3)

    p = tables.add_parser("figure1", help="DPR Figure 1 (top-k accuracy vs k)")
    p.add_argument("--per-question", nargs="+", required=True, help="first-hit rank Parquet files")
    p.add_argument("--labels", nargs="+", required=True, help="one curve label per file")
    p.add_argument("--out", required=True, help="PNG to write")
    p.add_argument("--csv", help="optional CSV of the plotted curves")
    add_cfg(p)
    p.set_defaults(func=_cmd_figure1)
