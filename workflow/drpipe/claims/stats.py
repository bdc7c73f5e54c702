"""The paired statistics of the claims table: a paired bootstrap of per-question differences,
the exact McNemar test, Holm's adjustment, a claim's verdict and its bootstrap seed.

The bootstrap draws counts of the distinct per-question differences from a multinomial, which
is the same distribution as resampling question indices with replacement (the statistic is a
mean of per-question values that take a handful of values) at a fraction of the memory.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

import numpy as np


def paired_bootstrap(
    values: np.ndarray, resamples: int = 10000, seed: int = 0, level: float = 0.95
) -> dict[str, float]:
    """Paired bootstrap of the mean of per-question differences ``values``.

    Returns the observed mean, the percentile interval at ``level`` and a two-sided p-value:
    the share of resampled means at least as far from the observed mean as the observed mean is
    from zero (the bootstrap distribution shifted to the null), counted as (1 + hits) / (B + 1).
    """
    values = np.asarray(values, dtype=np.float64)
    n = values.size
    if n == 0:
        raise ValueError("no paired questions")
    observed = float(values.mean())
    levels, counts = np.unique(values, return_counts=True)
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(n, counts / n, size=resamples)
    means = draws @ levels / n
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    # A tiny slack keeps exact ties (e.g. the observed mean itself) counted on both platforms.
    extreme = np.abs(means - observed) >= abs(observed) - 1e-12
    p = (1.0 + float(extreme.sum())) / (resamples + 1.0)
    return {"mean": observed, "ci_low": float(low), "ci_high": float(high), "p": min(1.0, p)}


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """Two-sided exact McNemar p-value: a binomial test of the discordant pairs at 1/2."""
    n = a_only + b_only
    if n == 0:
        return 1.0
    k = min(a_only, b_only)
    tail = sum(math.comb(n, i) for i in range(k + 1))
    return min(1.0, 2 * tail / 2**n)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (same order as given)."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    adjusted = [0.0] * len(pvalues)
    running = 0.0
    m = len(pvalues)
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def verdict(expect: str, diff: float, p: float, alpha: float) -> str:
    """holds / reversed / not significant for an expected direction of ``a - b``."""
    significant = p < alpha
    if expect == "greater":
        sign = 1
    elif expect == "less":
        sign = -1
    else:  # not_greater: the claim is that a does not beat b
        return "reversed" if significant and diff > 0 else "holds"
    if not significant or diff == 0:
        return "not significant"
    return "holds" if sign * diff > 0 else "reversed"


def claim_seed(seed: int, claim_id: str) -> int:
    """A seed per claim: adding or reordering claims leaves the others' p-values unchanged."""
    digest = hashlib.sha256(f"{seed}:{claim_id}".encode()).hexdigest()
    return int(digest[:12], 16)
