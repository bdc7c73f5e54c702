"""Linear weights (equation 9): ``p' = alpha p + beta pos_q + gamma neg_q``, at one point or
over a (beta, gamma) grid evaluated in memory (the data of Figure 6)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from drpipe.aopt.labels import Labels
from drpipe.corpus.passages import load_passages
from drpipe.qa.matching import AnswerMatcher


def label_means(
    n_passages: int, qvecs: np.ndarray, labels: Labels
) -> tuple[np.ndarray, np.ndarray]:
    """Mean positive and mean negative question vector of each passage (0 where it has none)."""
    d = qvecs.shape[1]
    means = []
    for flag in (True, False):
        sel = labels.positive == flag
        sums = np.zeros((n_passages, d))
        p, q = labels.p_rows[sel], labels.q_rows[sel]
        for lo in range(0, len(p), 1 << 16):  # bounded memory for the gathered rows
            np.add.at(sums, p[lo : lo + (1 << 16)], qvecs[q[lo : lo + (1 << 16)]])
        counts = np.bincount(p, minlength=n_passages)
        means.append(sums / np.maximum(counts, 1)[:, None])
    return means[0], means[1]


def linear_update(
    passages: np.ndarray,
    pos_mean: np.ndarray,
    neg_mean: np.ndarray,
    alpha: float,
    beta: float,
    gamma: float,
) -> np.ndarray:
    """Equation 9, ``p' = alpha p + beta pos_q + gamma neg_q``, in float64, as float32."""
    out = alpha * passages.astype(np.float64) + beta * pos_mean + gamma * neg_mean
    return out.astype(np.float32)


def grid_accuracy(
    passages: np.ndarray,
    pids: np.ndarray,
    pos_mean: np.ndarray,
    neg_mean: np.ndarray,
    eval_q: np.ndarray,
    eval_questions: list[dict],
    passages_path: str | Path,
    cfg: dict[str, Any],
) -> list[dict[str, Any]]:
    """Top-k accuracy of the evaluation questions for every (beta, gamma) of the grid.

    Scores are linear in beta and gamma, so ``q.p' = alpha q.p + beta q.pos + gamma q.neg`` is
    formed from three score matrices per block of questions; the top ``top_k`` and DPR's answer
    matching follow as in ``drpipe retrieve`` and ``drpipe evaluate``.
    """
    alpha, top_k = float(cfg["alpha"]), int(cfg["top_k"])
    ks = sorted(int(k) for k in cfg["ks"])
    grid = [(float(b), float(g)) for b in cfg["betas"] for g in cfg["gammas"]]
    n_q, n_p = len(eval_q), len(passages)
    top_k = min(top_k, n_p)
    first = np.full((len(grid), n_q), np.iinfo(np.int32).max, np.int64)
    texts = {pid: text for pid, (_, text) in load_passages(passages_path).items()}
    matcher = AnswerMatcher(texts)
    known: dict[int, bool] = {}
    P = passages.astype(np.float32)
    A = pos_mean.astype(np.float32)
    B = neg_mean.astype(np.float32)
    block = max(1, (64 << 20) // (12 * n_p))
    for lo in range(0, n_q, block):
        Q = eval_q[lo : lo + block].astype(np.float32)
        s0, sa, sb = Q @ P.T, Q @ A.T, Q @ B.T
        qs = eval_questions[lo : lo + block]
        for gi, (beta, gamma) in enumerate(grid):
            s = alpha * s0 + beta * sa + gamma * sb
            top = np.argpartition(-s, top_k - 1, axis=1)[:, :top_k]
            rank = np.take_along_axis(s, top, 1)
            # Best first, ties by pid (as the runs are written).
            order = np.lexsort((pids[top], -rank), axis=1)
            top = np.take_along_axis(top, order, 1)
            for i, q in enumerate(qs):
                for r, prow in enumerate(top[i], start=1):
                    key = (lo + i) * n_p + int(prow)
                    hit = known.get(key)
                    if hit is None:
                        hit = matcher.contains(q["answers"], q["match"], int(pids[prow]))
                        known[key] = hit
                    if hit:
                        first[gi, lo + i] = r
                        break
    rows = []
    for gi, (beta, gamma) in enumerate(grid):
        rec = {"alpha": alpha, "beta": beta, "gamma": gamma, "n_questions": n_q}
        for k in ks:
            rec[f"top{k}"] = 100.0 * float((first[gi] <= k).sum()) / n_q
        rows.append(rec)
    return rows
