"""Our number beside the paper's: differences and tolerances at the paper scale, ranks and
orderings below it (a corpus of thousands of passages is no reproduction gap).

A table frame holds, per compared column ``c``, ``c`` (ours), ``c_paper`` and ``c_diff``;
``comparable`` turns ``c_diff`` into what the scale allows to print.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

# The scale's keys (light: the planner imports them without pandas), used here and by tables.
from drpipe.tables.scale import SCALE_NOTES, Scale, as_scale, scale_cfg, scale_of  # noqa: F401

DEFAULT_TOLERANCE = 1.0  # points of top-k accuracy (config: tables.paper_tolerance)


def r2(value: float | None) -> float | None:
    """A value as the tables print it: rounded to two decimals (None stays None)."""
    return None if value is None else round(float(value), 2)


def diff(ours: float, paper: float | None) -> float | None:
    """ours - paper, rounded; None when the paper printed no value."""
    return None if paper is None else round(float(ours) - paper, 2)


def comparable(
    frame: pd.DataFrame, scale: str, *, groups: Sequence[str] = (), tolerance: float | None = None
) -> pd.DataFrame:
    """What a table prints beside the paper's numbers at this scale.

    Where the scale prints differences (``Scale.paper_diff``: the paper scale) each ``<c>_diff``
    (ours - paper) stays, followed by ``<c>_within_tol`` (|diff| <= ``tolerance`` points) and one
    ``diff_tolerance`` column. Elsewhere a corpus of thousands of passages and a small encoder make the difference no
    reproduction gap, so ``<c>_diff`` becomes ``<c>_rank`` and ``<c>_paper_rank``: the rank
    (1 = best, ties share the best rank) of ours and of the paper's value among the rows that
    have both, within ``groups`` (e.g. the protocol: oracle rows are ranked apart).
    """
    out = frame.copy()
    diffs = [c for c in out.columns if str(c).endswith("_diff")]
    if as_scale(scale).paper_diff:
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


def tolerance_of(frame: pd.DataFrame | None) -> float | None:
    """The tolerance ``comparable`` recorded in a paper-scale table, if any."""
    if frame is None or "diff_tolerance" not in frame.columns or not len(frame):
        return None
    return float(frame["diff_tolerance"].iloc[0])


def comparison_headers(frame: pd.DataFrame, base: str, label: str) -> list[str]:
    """The header of the column a Markdown table prints after a paper value (see
    ``comparison_cell``): the difference at the paper scale, the two ranks below it."""
    if f"{base}_diff" in frame.columns:
        tol = tolerance_of(frame)
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
    scale = as_scale(scale)
    if scale.paper_diff:
        tol = tolerance_of(tolerance_frame)
        tol = DEFAULT_TOLERANCE if tol is None else tol
        rehearsal = (
            f" Scale `{scale}`: stand-in inputs and a tiny random encoder, so these "
            "differences mean nothing; they prove the paper-scale table is built."
            if scale.note == "standin"
            else ""
        )
        return (
            f"diff = ours - paper; 'ok' when within ±{tol:g} points (tables.paper_tolerance), "
            f"'outside' otherwise.{rehearsal}"
        )
    return (
        f"At scale `{scale}` the corpus, the training and the encoder are far smaller than "
        "the paper's, so ours - paper is no reproduction gap and is not printed. Beside the "
        "paper's value (kept for orientation) is each row's rank among the rows that have "
        "both numbers, ours/paper (1 = best): what is comparable is the ordering of the "
        "methods and the paired claims in results/claims.csv."
    )
