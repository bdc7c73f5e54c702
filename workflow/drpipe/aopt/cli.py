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
of equation 14, ``x <- x - lr * dl/dx``, ``lr`` = 0.1, batch size 1.

**A round is one epoch.** "Every single dense representation will be processed alone for a
forward and backward propagation step during every epoch" (3.1.4); "after updating all the dense
representations ... one by one ... we rebuild the index ..., re-execute the retrieval process,
then reconstruct the pseudo-labels ..., and finally, optimize all ... again" (2.3.3); Figure 7
plots retrieval "during the iterative epochs", which needs the index rebuilt every epoch. So one
``drpipe aopt optimise`` (one round of the workflow) applies one step per vector (cfg
``max_epochs`` = 1) to the labels of the current top-k, and the next round relabels. The
paper's "at most 100 epochs, early stop when the loss has not decreased for 5 consecutive
epochs" bounds the number of rounds: the workflow refuses more rounds than ``max_epochs`` or
``patience`` (within ``patience`` rounds the stop cannot trigger, so it needs no implementing). Reading a round as 100 epochs on fixed labels instead (the
former reading) drove every oracle question whose top-100 held an answer to rank 1 (mini:
top-1 = top-100 = 98.26): the training loss never rose, so early stopping never fired.
With ``max_epochs`` > 1 the command still runs several epochs: per epoch, compute the loss; if
it has not been below the best loss for ``patience`` epochs, stop (this epoch's step is not
taken); else take the step. The vector after the last step is kept. A vector without a
positive has no loss (log 0) and one without a negative has loss 0 and gradient 0: both stay
as they are.

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
import json
import logging
import time
from typing import Any

import numpy as np

from drpipe.aopt.labels import build_labels
from drpipe.aopt.linear import grid_accuracy, label_means, linear_update
from drpipe.aopt.optimise import optimise_side
from drpipe.aopt.settings import (
    DEFAULT_CFG,
    DEFAULT_GRID_CFG,
    DEFAULT_LINEAR_CFG,
    SIDES,
    merged_cfg,
)
from drpipe.aopt.vectors import read_passage_vectors, write_passage_vectors, write_query_vectors
from drpipe.cliutil import add_cfg
from drpipe.environment import environment
from drpipe.errors import InputError
from drpipe.io import atomic_path, write_json
from drpipe.qa.datasets import read_questions
from drpipe.vectors import read_query_vectors

log = logging.getLogger(__name__)


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
