"""Score Normalization (DCSR 3.3): a question's ranked sentence units to ranked passages; the
one units-to-passages function of retrieval, DCSR-hard mining and validation."""

from __future__ import annotations

import numpy as np

from drpipe.methods.base import SENT_SLOTS

PASSAGE_SCORES = ("hasans", "max")


def score_normalization(
    unit_ids: np.ndarray, scores: np.ndarray, k: int, how: str = "hasans"
) -> tuple[np.ndarray, np.ndarray]:
    """Ranked sentence units [n, depth] -> top-``k`` passages [n, k] (pids, scores; pad -1).

    ``how="hasans"``: Score Normalization (DCSR 3.3): p = softmax over the question's retrieved
    sentence scores; a passage scores ``HasAns = 1 - prod(1 - p_s)`` over its retrieved
    sentences. Computed as ``-expm1(sum(log1p(-p)))``, so tiny probabilities stay exact and
    ranks never tie by rounding. ``how="max"``: a passage scores its best sentence. Ties go to
    the passage whose first sentence was retrieved first.

    Vectorised over all questions at once (no Python loop): a stable per-row sort by pid groups
    each question's sentences by passage, one ``reduceat`` sums them, and each group's value is
    placed at the column of its first sentence, so a stable per-row sort of that matrix ranks
    the passages with ties in retrieval order.
    """
    if how not in PASSAGE_SCORES:
        raise ValueError(f"passage score must be one of {PASSAGE_SCORES}, not {how!r}")
    units = np.asarray(unit_ids, dtype=np.int64)
    x = np.asarray(scores, dtype=np.float64)
    n, depth = units.shape
    out_p = np.full((n, k), -1, dtype=np.int64)
    out_s = np.full((n, k), -np.inf, dtype=np.float64)
    if n == 0 or depth == 0 or k == 0:
        return out_p, out_s
    valid = (units >= 0) & np.isfinite(x)
    x = np.where(valid, x, -np.inf)
    if how == "hasans":
        top = x.max(axis=1, keepdims=True)
        e = np.exp(x - np.where(np.isfinite(top), top, 0.0))
        z = e.sum(axis=1, keepdims=True)
        p = e / np.where(z > 0, z, 1.0)
        with np.errstate(divide="ignore"):
            value = np.log1p(-np.minimum(p, 1.0))  # log(1 - p); -inf only where p == 1
    else:
        value = x
    # Group by passage within each row with one plain sort of (pid, column) packed into an
    # int64: faster than a stable argsort, and columns order each group's sentences. Padding
    # gets pid -1, sorts first in its row and is dropped below.
    pids = np.where(valid, units // SENT_SLOTS, -1)
    shift = int(depth).bit_length()
    if int(pids.max()) < (1 << (62 - shift)):
        packed = np.sort((pids << shift) | np.arange(depth, dtype=np.int64), axis=1)
        order = packed & ((1 << shift) - 1)
        s_pid = packed >> shift
    else:  # pids too large to pack (never for real corpora): the stable argsort
        order = np.argsort(pids, axis=1, kind="stable")
        s_pid = np.take_along_axis(pids, order, axis=1)
    s_val = np.take_along_axis(value, order, axis=1)
    starts = np.ones((n, depth), dtype=bool)
    starts[:, 1:] = s_pid[:, 1:] != s_pid[:, :-1]
    flat_starts = np.flatnonzero(starts)
    if how == "hasans":
        group = np.add.reduceat(s_val.ravel(), flat_starts)  # log prod(1 - p_s)
    else:
        group = -np.maximum.reduceat(s_val.ravel(), flat_starts)
    rows, first_sorted = np.divmod(flat_starts, depth)
    first_col = order[rows, first_sorted]  # the group's first retrieved sentence (stable sort)
    keep = s_pid[rows, first_sorted] >= 0
    # Smaller key = better passage; each group sits at its first sentence's column.
    key = np.full((n, depth), np.inf)
    key[rows[keep], first_col[keep]] = group[keep]
    ranked = np.argsort(key, axis=1, kind="stable")[:, :k]
    best = np.take_along_axis(key, ranked, axis=1)
    hit = np.isfinite(best) | (best == -np.inf)
    cols = ranked.shape[1]
    out_p[:, :cols] = np.where(hit, units[np.arange(n)[:, None], ranked] // SENT_SLOTS, -1)
    if how == "hasans":
        out_s[:, :cols] = np.where(hit, -np.expm1(best), -np.inf)
    else:
        out_s[:, :cols] = np.where(hit, -best, -np.inf)
    return out_p, out_s


def positive_passage_ranks(
    scores: np.ndarray, units: np.ndarray, positive: np.ndarray, how: str = "hasans"
) -> np.ndarray:
    """1-based rank of each question's positive passage among the passages of the candidate
    sentences ``units`` (shared by all questions), ranked by ``score_normalization``."""
    n, m = scores.shape
    order = np.argsort(-scores, axis=1, kind="stable")
    ranked_units = np.broadcast_to(units, (n, m))[np.arange(n)[:, None], order]
    ranked_scores = np.take_along_axis(scores, order, axis=1)
    pids, _ = score_normalization(ranked_units, ranked_scores, m, how)
    target = (units[positive] // SENT_SLOTS)[:, None]
    hit = pids == target
    return np.where(hit.any(axis=1), hit.argmax(axis=1) + 1, m + 1)
