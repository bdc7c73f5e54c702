"""AOpt-query / AOpt-passage: each vector optimised alone on the contrastive loss of its
pseudo-labels (equations 11, 13, 14), vectorised over groups of vectors; ``optimise_loop`` is
the plain per-vector loop with autograd the tests and the benchmark compare against."""

from __future__ import annotations

import contextlib
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from drpipe.aopt.labels import Labels
from drpipe.aopt.vectors import PassageVectors

# Bytes of one group's per-vector arrays: small enough to stay in a core's share of the cache.
GROUP_BYTES = 4 << 20


@dataclass
class Problems:
    """One contrastive problem per centre vector: centre ``rows[i]`` has partners
    ``others[ptr[i]:ptr[i+1]]`` (rows of the other side), ``positive`` marking the relevant."""

    rows: np.ndarray  # int64 [n]
    ptr: np.ndarray  # int64 [n + 1]
    others: np.ndarray  # int64 [nnz]
    positive: np.ndarray  # bool [nnz]

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.ptr)

    def counts(self) -> tuple[np.ndarray, np.ndarray]:
        """(positives, negatives) per problem."""
        n_pos = np.add.reduceat(self.positive.astype(np.int64), self.ptr[:-1]) if len(self.rows) else np.zeros(0, np.int64)  # fmt: skip
        return n_pos, self.sizes - n_pos

    def subset(self, keep: np.ndarray) -> Problems:
        sizes = self.sizes[keep]
        ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        take = np.concatenate(
            [np.arange(a, b) for a, b in zip(self.ptr[:-1][keep], self.ptr[1:][keep], strict=True)]
        ) if len(sizes) else np.empty(0, np.int64)  # fmt: skip
        return Problems(self.rows[keep], ptr, self.others[take], self.positive[take])


def group_problems(centres: np.ndarray, partners: np.ndarray, positive: np.ndarray) -> Problems:
    """Pairs -> one problem per distinct centre (in row order; partners keep their pair order)."""
    order = np.argsort(centres, kind="stable")
    c = centres[order]
    starts = np.flatnonzero(np.r_[True, c[1:] != c[:-1]]) if len(c) else np.empty(0, np.int64)
    ptr = np.r_[starts, len(c)].astype(np.int64)
    return Problems(c[starts], ptr, partners[order], positive[order])


def loss_and_weights(
    s: np.ndarray, valid: np.ndarray, pos: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Loss (eq. 11/13) of each row of scores ``s`` [C, K] and ``w`` = dl/ds (``dl/dx = Y^T w``).

    ``valid`` marks real partners (the rest is padding), ``pos`` the relevant ones (each row has
    at least one). ``l = logsumexp(s[valid]) - logsumexp(s[pos])``; ``w = softmax over valid -
    softmax over pos``.
    """
    sa = np.where(valid, s, -np.inf)
    sp = np.where(pos, s, -np.inf)
    ma = sa.max(axis=1, keepdims=True)
    mp = sp.max(axis=1, keepdims=True)
    ea = np.exp(sa - ma)
    ep = np.exp(sp - mp)
    za = ea.sum(axis=1, keepdims=True)
    zp = ep.sum(axis=1, keepdims=True)
    loss = (ma + np.log(za) - mp - np.log(zp))[:, 0]
    return loss, ea / za - ep / zp


def early_stop(
    loss: np.ndarray, best: np.ndarray, bad: np.ndarray, patience: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The stopping rule, per vector, after an epoch's loss: ``(best, bad, go)``. ``bad`` counts
    consecutive epochs without a loss below ``best``; ``go`` is False once it reaches
    ``patience`` (then this epoch's step is not taken and the vector is done)."""
    improved = loss < best
    best = np.where(improved, loss, best)
    bad = np.where(improved, 0, bad + 1)
    return best, bad, bad < patience


@dataclass
class OptResult:
    vectors: np.ndarray  # float64 [n, d], in problem order
    steps: np.ndarray  # int64 [n]: updates applied
    stopped: np.ndarray  # bool [n]: early stop triggered (else max_epochs reached)
    loss_first: np.ndarray  # float64 [n]: loss before any update
    loss_last: np.ndarray  # float64 [n]: loss at the last epoch computed


def _solve_group(
    x0: np.ndarray,
    Y: np.ndarray,
    valid: np.ndarray,
    pos: np.ndarray,
    lr: float,
    max_epochs: int,
    patience: int,
) -> tuple[np.ndarray, ...]:
    """Gradient descent of C independent problems with K (padded) partners each."""
    C, K, d = Y.shape
    gram = d >= K
    s_all = np.matmul(Y, x0[:, :, None])[:, :, 0]
    x_out = x0.copy()
    acc = np.zeros((C, K)) if gram else None
    steps = np.zeros(C, np.int64)
    stopped = np.zeros(C, bool)
    first = np.full(C, np.nan)
    last = np.full(C, np.nan)
    best = np.full(C, np.inf)
    bad = np.zeros(C, np.int64)
    live = np.arange(C)
    # Arrays of the problems still running (compacted when some stop).
    Yl, vl, pl = Y, valid, pos
    Gl = np.matmul(Y, Y.transpose(0, 2, 1)) if gram else None
    sl = s_all
    xl = None if gram else x0.copy()
    for epoch in range(max_epochs):
        if not gram:
            sl = np.matmul(Yl, xl[:, :, None])[:, :, 0]
        loss, w = loss_and_weights(sl, vl, pl)
        if epoch == 0:
            first[live] = loss
        last[live] = loss
        best[live], bad[live], go = early_stop(loss, best[live], bad[live], patience)
        if not go.all():
            stopped[live[~go]] = True
            if not gram:
                x_out[live[~go]] = xl[~go]
                xl = xl[go]
            else:
                Gl = Gl[go]
                sl = sl[go]
            Yl, vl, pl, w, live = Yl[go], vl[go], pl[go], w[go], live[go]
            if not live.size:
                break
        if gram:
            acc[live] += w
            sl = sl - lr * np.matmul(Gl, w[:, :, None])[:, :, 0]
        else:
            xl = xl - lr * np.matmul(w[:, None, :], Yl)[:, 0, :]
        steps[live] += 1
    if gram:
        x_out = x0 - lr * np.matmul(acc[:, None, :], Y)[:, 0, :]
    elif live.size:
        x_out[live] = xl
    return x_out, steps, stopped, first, last


def _groups(sizes: np.ndarray, d: int) -> list[np.ndarray]:
    """Problem indices in groups of similar size (sorted by size) within ``GROUP_BYTES``."""
    order = np.argsort(sizes, kind="stable")
    out: list[np.ndarray] = []
    start = 0
    n = len(order)
    while start < n:
        k_first = int(sizes[order[start]])
        end = start + 1
        while end < n:
            k = int(sizes[order[end]])
            if (k <= d) != (k_first <= d):
                break  # the two update forms are not mixed in one group
            per = k * (d + (k if k <= d else 0)) * 8
            if (end - start + 1) * per > GROUP_BYTES:
                break
            end += 1
        out.append(order[start:end])
        start = end
    return out


def optimise(
    centres: np.ndarray,
    partners: np.ndarray,
    problems: Problems,
    *,
    lr: float,
    max_epochs: int,
    patience: int,
    threads: int = 1,
) -> OptResult:
    """Optimise every problem's centre vector (rows of ``centres``) against its partners (rows
    of ``partners``), each as its own batch of size 1; vectorised over groups of problems."""
    n = len(problems.rows)
    d = centres.shape[1]
    out = OptResult(
        np.zeros((n, d)), np.zeros(n, np.int64), np.zeros(n, bool), np.zeros(n), np.zeros(n)
    )
    sizes = problems.sizes

    def run(group: np.ndarray) -> None:
        K = int(sizes[group].max())
        C = len(group)
        idx = np.zeros((C, K), np.int64)
        valid = np.zeros((C, K), bool)
        pos = np.zeros((C, K), bool)
        for i, g in enumerate(group):
            a, b = problems.ptr[g], problems.ptr[g + 1]
            idx[i, : b - a] = problems.others[a:b]
            valid[i, : b - a] = True
            pos[i, : b - a] = problems.positive[a:b]
        Y = partners[idx].astype(np.float64) * valid[:, :, None]
        x0 = centres[problems.rows[group]].astype(np.float64)
        x, steps, stopped, first, last = _solve_group(x0, Y, valid, pos, lr, max_epochs, patience)
        out.vectors[group] = x
        out.steps[group] = steps
        out.stopped[group] = stopped
        out.loss_first[group] = first
        out.loss_last[group] = last

    groups = _groups(sizes, d)
    with _single_threaded_blas():
        if threads > 1 and len(groups) > 1:
            # numpy releases the GIL in its array loops; groups write disjoint rows.
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(run, groups))
        else:
            for g in groups:
                run(g)
    return out


def _single_threaded_blas():
    """BLAS on one thread per call: the matrices here are small, and a multi-threaded BLAS
    on them was 20x slower on a shared 2-core machine (parallelism is over groups instead)."""
    try:
        from threadpoolctl import threadpool_limits  # here: an optional dependency
    except ImportError:  # optional: without it BLAS keeps its own setting
        return contextlib.nullcontext()
    return threadpool_limits(1, user_api="blas")


def optimise_loop(
    centres: np.ndarray,
    partners: np.ndarray,
    problems: Problems,
    *,
    lr: float,
    max_epochs: int,
    patience: int,
) -> OptResult:
    """The plain form: one vector at a time, batch size 1, loss and gradient by torch autograd.
    Same stopping rule as ``optimise``; the reference the tests and the benchmark compare with."""
    import torch  # lazy: ~1 s at CLI start-up, and only this reference form uses it

    n, d = len(problems.rows), centres.shape[1]
    out = OptResult(
        np.zeros((n, d)), np.zeros(n, np.int64), np.zeros(n, bool), np.zeros(n), np.zeros(n)
    )
    for i in range(n):
        a, b = problems.ptr[i], problems.ptr[i + 1]
        Y = torch.from_numpy(partners[problems.others[a:b]].astype(np.float64))
        pos = torch.from_numpy(problems.positive[a:b])
        x = torch.tensor(centres[problems.rows[i]], dtype=torch.float64, requires_grad=True)
        best, bad = np.array([np.inf]), np.array([0])
        for epoch in range(max_epochs):
            s = Y @ x
            loss = torch.logsumexp(s, 0) - torch.logsumexp(s[pos], 0)
            value = loss.item()
            if epoch == 0:
                out.loss_first[i] = value
            out.loss_last[i] = value
            best, bad, go = early_stop(np.array([value]), best, bad, patience)
            if not go[0]:
                out.stopped[i] = True
                break
            loss.backward()
            with torch.no_grad():
                x -= lr * x.grad
            x.grad = None
            out.steps[i] += 1
        out.vectors[i] = x.detach().numpy()
    return out


def _opt_report(res: OptResult, problems: Problems, skipped: dict[str, int]) -> dict[str, Any]:
    n = len(problems.rows)
    if not n:
        return {"n_optimised": 0, **skipped}
    return {
        "n_optimised": n,
        **skipped,
        "optimised_pairs": int(len(problems.others)),
        "partners_per_vector_mean": round(float(problems.sizes.mean()), 2),
        "partners_per_vector_max": int(problems.sizes.max()),
        "epochs_mean": round(float(res.steps.mean()), 2),
        "epochs_median": float(np.median(res.steps)),
        "epochs_max": int(res.steps.max()),
        "early_stopped_fraction": round(float(res.stopped.mean()), 4),
        "loss_first_mean": float(res.loss_first.mean()),
        "loss_last_mean": float(res.loss_last.mean()),
    }


def optimise_side(
    side: str, pvec: PassageVectors, qvecs: np.ndarray, labels: Labels, cfg: dict[str, Any]
) -> tuple[np.ndarray, dict[str, Any]]:
    """One AOpt round on one side: the new vectors of that side (all rows) and a report."""
    if side == "passage":
        centres, partners = pvec.vectors, qvecs
        problems = group_problems(labels.p_rows, labels.q_rows, labels.positive)
    else:
        centres, partners = qvecs, pvec.vectors
        problems = group_problems(labels.q_rows, labels.p_rows, labels.positive)
    n_pos, n_neg = problems.counts()
    keep = (n_pos > 0) & (n_neg > 0)
    skipped = {
        "n_labelled": int(len(problems.rows)),
        "n_without_positive": int((n_pos == 0).sum()),
        "n_without_negative": int(((n_pos > 0) & (n_neg == 0)).sum()),
    }
    problems = problems.subset(keep)
    t0 = time.perf_counter()
    res = optimise(
        centres, partners, problems,
        lr=float(cfg["lr"]), max_epochs=int(cfg["max_epochs"]), patience=int(cfg["patience"]),
        threads=int(cfg.get("threads") or 1),
    )  # fmt: skip
    seconds = time.perf_counter() - t0
    new = np.array(centres, dtype=np.float32, copy=True)
    new[problems.rows] = res.vectors.astype(np.float32)
    report = _opt_report(res, problems, skipped)
    moved = np.linalg.norm(res.vectors - centres[problems.rows], axis=1) if len(res.vectors) else np.zeros(0)  # fmt: skip
    report["relative_change_mean"] = (
        float((moved / np.maximum(np.linalg.norm(centres[problems.rows], axis=1), 1e-12)).mean())
        if len(moved)
        else 0.0
    )
    report["optimise_seconds"] = round(seconds, 3)
    return new, report
