"""The paired statistics of the claims table: a paired bootstrap of per-question differences
(with one-sided tests against a margin), the exact McNemar test, Holm's adjustment, a claim's
verdict and its bootstrap seed.

The bootstrap draws counts of the distinct per-question differences from a multinomial, which
is the same distribution as resampling question indices with replacement (the statistic is a
mean of per-question values that take a handful of values) at a fraction of the memory.

Verdicts (``verdict``; the rules are stated for readers in docs/claims.md):

- a directional claim (``greater``, ``less``) holds when its Holm-adjusted p within its family
  is below alpha and the difference has the expected sign; significant with the other sign it
  is reversed; otherwise not significant. The p is the bootstrap's two-sided one.
- a "does not help / at least" claim (``not_greater``: a does not beat b) is a one-sided
  non-inferiority test against its margin m: H0 mean(a - b) >= m, rejected with the paired
  bootstrap's percentile p, (1 + #{resampled mean >= m}) / (B + 1). An ``equivalent`` claim is
  TOST: both one-sided tests against -m and +m, p the larger of the two. Either holds when its
  Holm-adjusted p is below alpha, is reversed when the 95% interval lies wholly beyond the
  margin, and is otherwise not shown (the interval is too wide to exclude the margin).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

import numpy as np

DIRECTIONAL = ("greater", "less")
MARGINAL = ("not_greater", "equivalent")  # claims tested against a margin
TESTS = {
    "greater": "two-sided",
    "less": "two-sided",
    "not_greater": "non-inferiority (one-sided, margin)",
    "equivalent": "equivalence (TOST, margin)",
}
TIE = 1e-12  # slack so that exact ties count the same on every platform


def paired_bootstrap(
    values: np.ndarray,
    resamples: int = 10000,
    seed: int = 0,
    level: float = 0.95,
    margin: float | None = None,
) -> dict[str, float]:
    """Paired bootstrap of the mean of per-question differences ``values``.

    Returns the observed mean, the percentile interval at ``level`` and a two-sided p-value:
    the share of resampled means at least as far from the observed mean as the observed mean is
    from zero (the bootstrap distribution shifted to the null), counted as (1 + hits) / (B + 1).
    With ``margin`` m (same units as ``values``) also the one-sided percentile p-values of the
    same resamples: ``p_below`` for H0 mean >= m (share of resampled means >= m) and
    ``p_above`` for H0 mean <= -m (share <= -m), each (1 + hits) / (B + 1).
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
    extreme = np.abs(means - observed) >= abs(observed) - TIE
    p = (1.0 + float(extreme.sum())) / (resamples + 1.0)
    out = {"mean": observed, "ci_low": float(low), "ci_high": float(high), "p": min(1.0, p)}
    if margin is not None:
        if margin <= 0:
            raise ValueError(f"margin must be positive, not {margin}")
        # Ties with the margin count against the claim (they do not lie inside it).
        out["p_below"] = (1.0 + float((means >= margin - TIE).sum())) / (resamples + 1.0)
        out["p_above"] = (1.0 + float((means <= -margin + TIE).sum())) / (resamples + 1.0)
    return out


def decisive_p(expect: str, boot: dict[str, float]) -> float:
    """The p-value that decides a claim: the two-sided one for a directional claim, the
    non-inferiority p (against +margin) for ``not_greater``, TOST's larger one for
    ``equivalent``."""
    if expect in DIRECTIONAL:
        return boot["p"]
    if expect == "not_greater":
        return boot["p_below"]
    if expect == "equivalent":
        return max(boot["p_below"], boot["p_above"])
    raise ValueError(f"unknown expect '{expect}'")


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


def verdict(
    expect: str,
    diff: float,
    p_holm: float,
    alpha: float,
    ci: tuple[float, float] | None = None,
    margin: float | None = None,
) -> str:
    """The verdict of a claim on ``a - b`` (``diff``) from its Holm-adjusted p (``p_holm``,
    within its family; ``decisive_p`` says which p is adjusted).

    Directional (greater, less): holds / reversed / not significant. Against a margin
    (not_greater, equivalent; ``ci`` the 95% interval, ``margin`` in the same units): holds /
    reversed (the interval lies wholly beyond the margin) / not shown.
    """
    significant = p_holm < alpha
    if expect in DIRECTIONAL:
        sign = 1 if expect == "greater" else -1
        if not significant or diff == 0:
            return "not significant"
        return "holds" if sign * diff > 0 else "reversed"
    if expect not in MARGINAL:
        raise ValueError(f"unknown expect '{expect}'")
    if margin is None or ci is None:
        raise ValueError(f"a '{expect}' claim needs its margin and interval")
    if significant:
        return "holds"
    low, high = ci
    beyond = low >= margin or (expect == "equivalent" and high <= -margin)
    return "reversed" if beyond else "not shown"


def claim_seed(seed: int, claim_id: str) -> int:
    """A seed per claim: adding or reordering claims leaves the others' p-values unchanged."""
    digest = hashlib.sha256(f"{seed}:{claim_id}".encode()).hexdigest()
    return int(digest[:12], 16)
