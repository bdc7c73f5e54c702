"""Metrics files in, per-question ranks in: what every table reads.

Inputs are the metrics JSON files of ``drpipe evaluate`` (``{"method", "train_set", "dataset",
"split", "n_questions", "top_k": {"1", "5", "20", "100"}}``, percent) and the per-question
first-hit ranks (Parquet) that figures and curves are drawn from; for Table 4, the exact-match
files of ``drpipe reader predict``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from drpipe.errors import InputError
from drpipe.io import read_json

KS = (1, 5, 20, 100)


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


def check_em_metrics(record: Any, where: str | Path) -> dict:
    """Validate one exact-match record of ``drpipe reader predict`` (``method``, ``train_set``,
    ``dataset``, ``split``, ``n_questions``, ``em`` in percent, ``k``); errors name the key."""
    if not isinstance(record, dict):
        raise InputError(where, None, "metrics must be a JSON object")
    for key in ("method", "train_set", "dataset", "split", "n_questions", "em", "k"):
        if key not in record:
            raise InputError(where, key, "missing key")
    em = record["em"]
    if not isinstance(em, (int, float)) or isinstance(em, bool) or not 0.0 <= float(em) <= 100.0:
        raise InputError(where, "em", f"{em!r} is not a percentage in [0, 100]")
    for key in ("n_questions", "k"):
        n = record[key]
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise InputError(where, key, f"expected a positive integer, got {n!r}")
    return record


def read_em_metrics(paths: Iterable[str | Path]) -> list[dict]:
    return [check_em_metrics(read_json(p), p) for p in paths]


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
