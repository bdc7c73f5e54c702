"""AOpt (Future Internet 2023): pseudo-relevance feedback on stored vectors, no encoder trained.

AOpt starts from a trained retriever's stored passage vectors, question vectors and top-k runs,
and changes the vectors themselves. One round is: vectors -> index -> retrieval -> pseudo-labels
-> new vectors; the workflow makes each of these a file (rule file ``aopt.smk``), this module
does the labelling and the updates.

**Pseudo-labels with knowledge filtering** (section 2.1, equation 8): of a question's top
``depth`` (k = 100) retrieved passages, one is *relevant* if it contains one of the question's
answers (``drpipe.qa.matching``, DPR's rule) and *irrelevant* otherwise. Passage-centric data:
for each passage, the questions that retrieved it, split into positive and negative. Without
answers (``labels = "prf"``, classic pseudo-relevance feedback, section 2.1 before eq. 7) the
top ``prf_positives`` passages are the relevant set and the rest of the top ``depth`` the
irrelevant one: nothing about answers is read.

**Linear weights** (section 2.2, equation 9, passages only):
``p' = alpha * p + beta * mean(positive question vectors) + gamma * mean(negative ones)``; a
passage without positives (negatives) gets no beta (gamma) term, since the mean of nothing is
undefined.

**AOpt-query / AOpt-passage** (section 2.3): each vector ``x`` (a question for AOpt-query, a
passage for AOpt-passage) is optimised alone by gradient descent on the contrastive loss of its
pseudo-labels, equations 11 and 13,

    l(x) = -log( sum_{i in pos} exp(x . y_i) / sum_{j in pos + neg} exp(x . y_j) )

(the paper prints the scores without ``exp``; with raw dot products the ratio can be negative
and its log undefined, so we read it as the softmax form DPR's own loss has), with the update
of equation 14, ``x <- x - lr * dl/dx``, ``lr`` = 0.1, batch size 1 ("every single dense
representation will be processed alone for a forward and backward propagation step during
every epoch"), at most 100 epochs, stopping when the loss has not decreased for ``patience`` = 5
consecutive epochs (section 3.1.4). Per epoch: compute the loss; if it has not been below the
best loss for ``patience`` epochs, stop (this epoch's step is not taken); else take the step.
The vector after the last step is kept. A vector without a positive has no loss (log 0) and one
without a negative has loss 0 and gradient 0: both stay as they are.

Vectorised, but batch size 1 per vector: each vector's loss involves only that vector (the other
side's vectors are constants), so all vectors advance together in one batched program, each
with its own epoch count and early stop. Per vector the gradient is
``sum_j softmax_all(s)_j y_j - sum_{i in pos} softmax_pos(s)_i y_i`` with ``s = Y x``. For a
vector with ``K <= d`` labelled partners the scores are updated in the span of its partners,
``s <- s - lr * (Y Y^T) w`` (the same arithmetic: ``Y (x - lr Y^T w) = s - lr Y Y^T w``), and
``x = x0 - lr * Y^T (sum of w)`` at the end; with ``K > d`` it is the plain update of ``x``.
Vectors are processed in groups of similar ``K`` small enough to stay in the CPU cache, in
float64; ``optimise_loop`` is the plain per-vector loop with autograd the tests and the
benchmark compare against.

Commands: ``drpipe aopt optimise`` (one round of AOpt-query or AOpt-passage), ``drpipe aopt
linear`` (equation 9 at one beta, gamma), ``drpipe aopt linear-grid`` (equation 9 over a grid,
evaluated in memory: the data of Figure 6).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from drpipe.cliutil import add_cfg
from drpipe.corpus.passages import load_passages
from drpipe.encode import ids_path_for, read_query_vectors
from drpipe.errors import InputError
from drpipe.index import open_shards
from drpipe.io import atomic_path, write_json
from drpipe.provenance import environment
from drpipe.qa.datasets import read_questions
from drpipe.qa.matching import AnswerMatcher
from drpipe.runs import read_run

log = logging.getLogger(__name__)

LABEL_MODES = ("answers", "prf")
SIDES = ("passage", "query")
DEFAULT_CFG: dict[str, Any] = {
    "labels": "answers",  # answers: knowledge filtering (eq. 8); prf: top prf_positives relevant
    "depth": 100,  # k: the top-k passages of each question that get a label
    "prf_positives": 3,
    "lr": 0.1,
    "max_epochs": 100,
    "patience": 5,
    "threads": None,
}
DEFAULT_LINEAR_CFG: dict[str, Any] = {
    "labels": "answers",
    "depth": 100,
    "prf_positives": 3,
    "alpha": 1.0,
    "beta": 0.6,
    "gamma": -0.1,
    "threads": None,
}
DEFAULT_GRID_CFG: dict[str, Any] = {
    **{k: v for k, v in DEFAULT_LINEAR_CFG.items() if k not in ("beta", "gamma")},
    "betas": [round(0.1 * i, 1) for i in range(10)],
    "gammas": [round(-0.1 * i, 1) for i in range(10)],
    "ks": [1, 5, 20, 100],
    "top_k": 100,
}
# Bytes of one group's per-vector arrays: small enough to stay in a core's share of the cache.
GROUP_BYTES = 4 << 20


def merged_cfg(cfg: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    unknown = set(cfg) - set(defaults)
    if unknown:
        raise SystemExit(f"error: --cfg has unknown keys {sorted(unknown)}")
    out = {**defaults, **cfg}
    if out["labels"] not in LABEL_MODES:
        raise SystemExit(f"error: --cfg.labels must be one of {LABEL_MODES}, not {out['labels']!r}")
    for key in ("depth", "prf_positives", "max_epochs", "patience", "top_k"):
        if key in out and int(out[key]) < 1:
            raise SystemExit(f"error: --cfg.{key} must be a positive integer")
    return out


# --------------------------------------------------------------------------------------------
# Vectors on disk


@dataclass
class PassageVectors:
    """All shards of a corpus, concatenated: ``ids`` (pids) and ``vectors`` [n, d]."""

    paths: list[Path]
    sizes: list[int]
    ids: np.ndarray
    vectors: np.ndarray

    def rows_of(self, pids: np.ndarray, where: str | Path) -> np.ndarray:
        """Row of each pid; an unknown pid is an error naming ``where``."""
        order = np.argsort(self.ids, kind="stable")
        at = np.searchsorted(self.ids[order], pids)
        at = np.minimum(at, len(order) - 1)
        rows = order[at]
        bad = self.ids[rows] != pids
        if bad.any():
            raise InputError(where, None, f"pid {int(pids[bad][0])} has no stored vector")
        return rows


def read_passage_vectors(paths: Sequence[str | Path]) -> PassageVectors:
    shards = open_shards(paths)
    vectors = np.concatenate([np.asarray(v) for v in shards.vectors])
    return PassageVectors(shards.paths, [len(v) for v in shards.vectors], shards.ids, vectors)


def write_passage_vectors(
    like: PassageVectors, vectors: np.ndarray, outs: Sequence[str | Path]
) -> None:
    """One output shard per input shard: the same ids, the new rows, the input's dtype."""
    if len(outs) != len(like.paths):
        raise SystemExit(f"error: {len(like.paths)} input shards but {len(outs)} --out files")
    lo = 0
    for src, out, n in zip(like.paths, outs, like.sizes, strict=True):
        dtype = np.load(src, mmap_mode="r").dtype
        block = vectors[lo : lo + n].astype(dtype)
        with atomic_path(ids_path_for(out)) as tmp, open(tmp, "wb") as fh:
            np.save(fh, like.ids[lo : lo + n])
        with atomic_path(out) as tmp, open(tmp, "wb") as fh:
            np.save(fh, block)
        lo += n


def write_query_vectors(qids: Sequence[str], vectors: np.ndarray, out: str | Path) -> None:
    """``out`` (float32) and its ``.ids.npy`` (qids), as ``drpipe encode-queries`` writes them."""
    with atomic_path(ids_path_for(out)) as tmp, open(tmp, "wb") as fh:
        np.save(fh, np.array([str(q) for q in qids]))
    with atomic_path(out) as tmp, open(tmp, "wb") as fh:
        np.save(fh, vectors.astype(np.float32))


# --------------------------------------------------------------------------------------------
# Pseudo-labels


@dataclass
class Labels:
    """Labelled (question, passage) pairs: rows in the question and passage vector arrays, in
    run order (question by question, rank by rank), and whether the pair is positive."""

    q_rows: np.ndarray  # int64 [nnz]
    p_rows: np.ndarray  # int64 [nnz]
    positive: np.ndarray  # bool [nnz]
    n_questions: int
    answers_from: str | None  # the questions file whose answers were read (None: none were)


def answer_flags(
    run: dict[str, tuple[np.ndarray, np.ndarray]],
    questions: list[dict],
    passages: str | Path,
) -> dict[str, np.ndarray]:
    """Equation 8: per question of the run, does each retrieved passage contain an answer?"""
    needed = {int(p) for pids, _ in run.values() for p in pids}
    try:
        texts = load_passages(passages, needed)
    except KeyError as exc:
        raise InputError(passages, None, f"the run names unknown passages: {exc}") from None
    matcher = AnswerMatcher({pid: text for pid, (_, text) in texts.items()})
    by_qid = {q["qid"]: q for q in questions}
    return {
        qid: np.array(matcher.hits(by_qid[qid]["answers"], by_qid[qid]["match"], pids), bool)
        for qid, (pids, _) in run.items()
    }


def prf_flags(run: dict[str, tuple[np.ndarray, np.ndarray]], m: int) -> dict[str, np.ndarray]:
    """Pseudo-relevance feedback without answers: the top ``m`` are relevant, the rest not."""
    return {qid: np.arange(len(pids)) < m for qid, (pids, _) in run.items()}


def build_labels(
    run_path: str | Path,
    qids: Sequence[str],
    passages_vec: PassageVectors,
    cfg: dict[str, Any],
    questions_path: str | Path | None = None,
    passages_path: str | Path | None = None,
) -> Labels:
    """Labels of the top ``cfg.depth`` of every question of a run (knowledge filtering with the
    questions' answers, or pseudo-relevance feedback, which reads no answers)."""
    depth = int(cfg["depth"])
    if cfg["labels"] == "answers":
        if questions_path is None or passages_path is None:
            raise SystemExit("error: labels 'answers' need --questions and --passages")
        questions = read_questions(questions_path)
        run = read_run(run_path, depth, qids=[q["qid"] for q in questions])
        flags = answer_flags(run, questions, passages_path)
        answers_from = str(questions_path)
    else:
        if questions_path is not None:
            # The leak-free protocol rests on this: PRF labels never open a questions file.
            raise SystemExit("error: labels 'prf' read no answers; do not pass --questions")
        run = read_run(run_path, depth)
        flags = prf_flags(run, int(cfg["prf_positives"]))
        answers_from = None
    row_of = {q: i for i, q in enumerate(qids)}
    missing = [q for q in run if q not in row_of]
    if missing:
        raise InputError(run_path, f"qid {missing[0]!r}", "question has no stored vector")
    lens = [len(run[q][0]) for q in run]
    q_rows = np.repeat(np.array([row_of[q] for q in run], dtype=np.int64), lens)
    pids = np.concatenate([run[q][0] for q in run]) if run else np.empty(0, np.int64)
    p_rows = passages_vec.rows_of(pids.astype(np.int64), run_path)
    positive = np.concatenate([flags[q] for q in run]) if run else np.empty(0, bool)
    return Labels(q_rows, p_rows.astype(np.int64), positive, len(run), answers_from)


# --------------------------------------------------------------------------------------------
# Per-vector contrastive problems and their optimisation


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


# --------------------------------------------------------------------------------------------
# Linear weights (equation 9)


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


# --------------------------------------------------------------------------------------------
# CLI


def _read_label_side(args: argparse.Namespace, cfg: dict[str, Any]):
    pvec = read_passage_vectors(args.shards)
    qids, qvecs = read_query_vectors(args.queries)
    if qvecs.shape[1] != pvec.vectors.shape[1]:
        raise InputError(args.queries, None, f"dimension {qvecs.shape[1]} != passages'")
    t0 = time.perf_counter()
    labels = build_labels(args.run, qids, pvec, cfg, args.questions, args.passages)
    seconds = time.perf_counter() - t0
    report = {
        "labels": cfg["labels"],
        "depth": int(cfg["depth"]),
        "answers_read_from": labels.answers_from,
        "run": str(args.run),
        "n_questions_labelled": labels.n_questions,
        "pairs": int(len(labels.positive)),
        "positive_pairs": int(labels.positive.sum()),
        "label_seconds": round(seconds, 3),
    }
    if cfg["labels"] == "prf":
        report["prf_positives"] = int(cfg["prf_positives"])
    return pvec, qids, qvecs, labels, report


def _cmd_optimise(args: argparse.Namespace) -> int:
    cfg = merged_cfg(args.cfg, DEFAULT_CFG)
    t0 = time.perf_counter()
    pvec, qids, qvecs, labels, report = _read_label_side(args, cfg)
    new, opt = optimise_side(args.side, pvec, qvecs, labels, cfg)
    if args.side == "passage":
        write_passage_vectors(pvec, new, args.out)
    else:
        if len(args.out) != 1:
            raise SystemExit("error: --side query writes one --out file")
        write_query_vectors(qids, new, args.out[0])
    report.update(opt)
    report.update({"side": args.side, "lr": cfg["lr"], "max_epochs": cfg["max_epochs"],
                   "patience": cfg["patience"], "seconds": round(time.perf_counter() - t0, 3)})  # fmt: skip
    write_json(args.report, {**report, "environment": environment(("cpu", "torch"))})
    log.info("AOpt-%s: %d vectors optimised -> %s", args.side, opt["n_optimised"], args.out[0])
    return 0


def _cmd_linear(args: argparse.Namespace) -> int:
    cfg = merged_cfg(args.cfg, DEFAULT_LINEAR_CFG)
    t0 = time.perf_counter()
    pvec, _, qvecs, labels, report = _read_label_side(args, cfg)
    pos, neg = label_means(len(pvec.ids), qvecs, labels)
    new = linear_update(
        pvec.vectors, pos, neg, float(cfg["alpha"]), float(cfg["beta"]), float(cfg["gamma"])
    )
    write_passage_vectors(pvec, new, args.out)
    report.update({k: cfg[k] for k in ("alpha", "beta", "gamma")})
    report["passages_with_positives"] = int(np.unique(labels.p_rows[labels.positive]).size)
    report["passages_with_negatives"] = int(np.unique(labels.p_rows[~labels.positive]).size)
    report["seconds"] = round(time.perf_counter() - t0, 3)
    write_json(args.report, {**report, "environment": environment(("cpu", "torch"))})
    return 0


def _cmd_linear_grid(args: argparse.Namespace) -> int:
    import pandas as pd  # lazy: ~0.2 s to import (measured), and only this command uses it

    cfg = merged_cfg(args.cfg, DEFAULT_GRID_CFG)
    t0 = time.perf_counter()
    pvec, _, qvecs, labels, report = _read_label_side(args, cfg)
    pos, neg = label_means(len(pvec.ids), qvecs, labels)
    eval_qids, eval_q = read_query_vectors(args.eval_queries)
    questions = read_questions(args.eval_questions)
    by_qid = {q["qid"]: q for q in questions}
    missing = [q for q in eval_qids if q not in by_qid]
    if missing or len(eval_qids) != len(questions):
        raise InputError(
            args.eval_queries, None, "the vectors and the questions file hold different qids"
        )
    rows = grid_accuracy(
        pvec.vectors, pvec.ids, pos, neg, eval_q, [by_qid[q] for q in eval_qids],
        args.passages, cfg,
    )  # fmt: skip
    frame = pd.DataFrame(rows)
    with atomic_path(args.out) as tmp:
        frame.to_csv(tmp, index=False, float_format="%.4f")
    report.update({"grid_points": len(rows), "seconds": round(time.perf_counter() - t0, 3)})
    write_json(args.report, {**report, "environment": environment(("cpu", "torch"))})
    return 0


def _label_inputs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shards", nargs="+", required=True, help="passage vector shards (shard-*.npy)")
    p.add_argument(
        "--queries", required=True, help="vectors of the labelled questions (X.npy + X.ids.npy)"
    )
    p.add_argument("--run", required=True, help="their top-k run over these passage vectors")
    p.add_argument("--questions", help="their questions table (labels 'answers' only)")
    p.add_argument("--passages", help="passage table (answer matching; labels 'answers')")
    p.add_argument("--report", required=True, help="JSON report")


def register(sub) -> None:
    parser = sub.add_parser(
        "aopt",
        help="AOpt: pseudo-labels, linear weights and per-vector optimisation of stored vectors",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cmds = parser.add_subparsers(dest="subcommand", required=True)

    p = cmds.add_parser(
        "optimise",
        help="one round of AOpt-passage or AOpt-query",
        epilog="cfg defaults: " + json.dumps(DEFAULT_CFG),
    )
    p.add_argument("--side", choices=SIDES, required=True, help="which vectors are optimised")
    _label_inputs(p)
    p.add_argument(
        "--out", nargs="+", required=True,
        help="passage side: one shard per --shards file; query side: X.npy",
    )  # fmt: skip
    add_cfg(p)
    p.set_defaults(func=_cmd_optimise)

    p = cmds.add_parser(
        "linear",
        help="equation 9 at one (alpha, beta, gamma)",
        epilog="cfg defaults: " + json.dumps(DEFAULT_LINEAR_CFG),
    )
    _label_inputs(p)
    p.add_argument("--out", nargs="+", required=True, help="one shard per --shards file")
    add_cfg(p)
    p.set_defaults(func=_cmd_linear)

    p = cmds.add_parser(
        "linear-grid",
        help="equation 9 over a (beta, gamma) grid, evaluated (Figure 6 data)",
        epilog="cfg defaults: " + json.dumps(DEFAULT_GRID_CFG),
    )
    _label_inputs(p)
    p.add_argument("--eval-queries", required=True, help="vectors of the evaluated questions")
    p.add_argument("--eval-questions", required=True, help="the evaluated questions table")
    p.add_argument("--out", required=True, help="CSV: alpha, beta, gamma, n_questions, top<k>")
    add_cfg(p)
    p.set_defaults(func=_cmd_linear_grid)
