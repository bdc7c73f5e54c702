"""DPR's BM25+dense hybrid (section 5), over dense retrieval (``drpipe.retrieve``).

``hybrid``: take the union of the BM25 run's passages for a question (all of them: the run's
depth, ideally >= 2000) and the dense top ``depth`` (2000), and rerank the union by
``BM25(q,p) + lambda * sim(q,p)`` (lambda = 1.1 in DPR). Scores a list lacks:

- sim of a passage only BM25 found: computed exactly, ``q . p`` with ``p`` read from the
  stored embedding shards;
- BM25 score of a passage only the dense search found: the lowest BM25 score in that
  question's BM25 list (0 if the question has no BM25 hits) — the convention of pyserini's
  ``HybridSearcher``; the true BM25 score is at most that value, as the passage ranked below
  the BM25 cut-off.

Ties are broken by pid so runs are deterministic.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from drpipe.cliutil import add_cfg
from drpipe.corpus.passages import load_passages
from drpipe.environment import environment
from drpipe.errors import InputError
from drpipe.evaluate import accuracy_at_k, first_hit_ranks
from drpipe.io import progress, read_json, write_json
from drpipe.qa.datasets import read_questions
from drpipe.qa.matching import AnswerMatcher
from drpipe.retrieve import (
    DEFAULT_CFG,
    add_common_args,
    dense_lists,
    merged_cfg,
    open_index,
    prepare_queries,
)
from drpipe.runs import read_run, run_table, write_run
from drpipe.vectors import VectorLookup, open_shards, read_query_vectors

log = logging.getLogger(__name__)

DEFAULT_HYBRID_CFG: dict[str, Any] = {
    **DEFAULT_CFG,
    "lambda": 1.1,  # or "tune": the best of `grid` on the tuning questions
    "grid": [1.1],
    "ks": [1, 5, 20, 100],  # the accuracies the tuning averages
    "depth": 2000,
}


def fuse(
    bm25_pids: np.ndarray,
    bm25_scores: np.ndarray,
    dense_pids: np.ndarray,
    dense_scores: np.ndarray,
    sim_of: Callable[[np.ndarray], np.ndarray],
    lam: float,
    top_k: int,
) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """Rerank the union of one question's BM25 and dense lists by ``BM25 + lam * sim``.

    ``sim_of(pids)`` returns exact inner products for pids the dense list lacks. A pid the
    BM25 list lacks gets the list's lowest BM25 score (0 when the list is empty). Returns
    ``(pids, fused scores, counts)`` of the top ``top_k``, best first, ties by pid.
    """
    bm25_pids = np.asarray(bm25_pids, dtype=np.int64)
    dense_pids = np.asarray(dense_pids, dtype=np.int64)
    union = np.union1d(bm25_pids, dense_pids)
    floor = float(np.min(bm25_scores)) if len(bm25_scores) else 0.0
    bm25 = np.full(len(union), floor, dtype=np.float64)
    bm25[np.searchsorted(union, bm25_pids)] = bm25_scores
    sim = np.empty(len(union), dtype=np.float64)
    in_dense = np.zeros(len(union), dtype=bool)
    at = np.searchsorted(union, dense_pids)
    sim[at] = dense_scores
    in_dense[at] = True
    if (~in_dense).any():
        sim[~in_dense] = sim_of(union[~in_dense])
    fused = bm25 + lam * sim
    order = np.lexsort((union, -fused))[:top_k]
    counts = {
        "union": len(union),
        "only_bm25": int((~in_dense).sum()),
        "only_dense": len(union) - len(bm25_pids),
    }
    return union[order], fused[order], counts


@dataclass
class Candidates:
    """What the hybrid fuses for a set of questions: their BM25 lists and dense lists."""

    qids: list[str]
    qvecs: np.ndarray
    bm25: dict[str, tuple[np.ndarray, np.ndarray]]
    dense_p: list[np.ndarray]
    dense_s: list[np.ndarray]
    bm25_run: str


def candidates(index, qids, qvecs, bm25_run, depth: int, subset: bool = False) -> Candidates:
    """BM25 and dense lists of ``qids``. ``subset``: the BM25 run may hold other questions
    too (the tuning questions are part of the training split's run); else each of its qids
    must be one of ``qids``."""
    if subset:
        wanted = set(qids)
        bm25 = {q: hits for q, hits in read_run(bm25_run).items() if q in wanted}
    else:
        bm25 = read_run(bm25_run, qids=qids)
    d_scores, d_pids = index.search(qvecs, min(depth, index.n))
    dense_p, dense_s = dense_lists(d_scores, d_pids)
    return Candidates(qids, qvecs, bm25, dense_p, dense_s, str(bm25_run))


def fuse_all(
    cand: Candidates, lookup, lam: float, top_k: int, show: bool = True
) -> tuple[list[np.ndarray], list[np.ndarray], dict[str, int]]:
    """Fused top-``top_k`` (pids, scores) of every question, and summed union counts."""
    out_p, out_s = [], []
    totals = {"union": 0, "only_bm25": 0, "only_dense": 0, "no_bm25": 0}
    empty = (np.empty(0, np.int64), np.empty(0, np.float64))
    for i, qid in enumerate(progress(cand.qids, desc="hybrid", unit="q", disable=not show)):
        b_p, b_s = cand.bm25.get(qid, empty)
        totals["no_bm25"] += len(b_p) == 0
        q = cand.qvecs[i].astype(np.float64)

        def sim_of(pids: np.ndarray, q=q, qid=qid) -> np.ndarray:
            try:
                return lookup.get(pids).astype(np.float64) @ q
            except KeyError as exc:
                raise InputError(
                    cand.bm25_run, f"qid {qid!r}", f"BM25 run names unknown passages: {exc}"
                ) from None

        p, s, counts = fuse(b_p, b_s, cand.dense_p[i], cand.dense_s[i], sim_of, lam, top_k)
        out_p.append(p)
        out_s.append(s)
        for k in counts:
            totals[k] += counts[k]
    return out_p, out_s, totals


def tune_lambda(
    cand: Candidates,
    lookup,
    questions: list[dict],
    passages_path: str | Path,
    grid: list[float],
    ks: list[int],
) -> tuple[float, list[dict[str, Any]]]:
    """The weight of ``grid`` whose fused runs score best on ``questions`` (mean top-k accuracy
    over ``ks``; ties: the first in grid order), and every weight's accuracies."""
    runs = {lam: fuse_all(cand, lookup, lam, max(ks), show=False)[0] for lam in grid}
    needed = {int(p) for pids in runs.values() for row in pids for p in row}
    texts = {pid: text for pid, (_, text) in load_passages(passages_path, needed).items()}
    matcher = AnswerMatcher(texts)
    table, best, best_score = [], grid[0], -1.0
    for lam, pids in runs.items():
        run = {qid: row.tolist() for qid, row in zip(cand.qids, pids, strict=True)}
        acc = accuracy_at_k(first_hit_ranks(run, questions, matcher), ks)
        score = float(np.mean(list(acc.values())))
        table.append({"lambda": lam, "top_k": acc, "mean": score})
        if score > best_score:
            best, best_score = lam, score
    return best, table


def tuning_questions(
    questions_paths: Sequence[str | Path], report_path: str | Path | None
) -> tuple[list[list[dict]], str]:
    """The questions the weight is tuned on, per question table: those a model's training
    held out for validation (its report's ``val_qids``; the tables are the training questions
    of each dataset of its train set), else every question of the tables; and a description.

    A held-out qid that no table holds, or that two tables hold, is an error: the tables are
    then not the ones the model was trained from."""
    tables = [read_questions(p) for p in questions_paths]
    if report_path is None:
        return tables, f"all questions of {', '.join(map(str, questions_paths))}"
    held = {str(q) for q in read_json(report_path).get("val_qids") or []}
    if not held:
        raise InputError(report_path, None, "the training report names no held-out questions")
    where: dict[str, str] = {}
    kept = []
    for path, rows in zip(questions_paths, tables, strict=True):
        kept.append([q for q in rows if str(q["qid"]) in held])
        for q in kept[-1]:
            if str(q["qid"]) in where:
                raise InputError(
                    path, f"qid {q['qid']!r}",
                    f"held-out question of {report_path} is in {where[str(q['qid'])]} too",
                )  # fmt: skip
            where[str(q["qid"])] = str(path)
    missing = sorted(held - set(where))
    if missing:
        raise InputError(
            report_path, None,
            f"{len(missing)} of its {len(held)} held-out questions are in none of "
            f"{', '.join(map(str, questions_paths))} (e.g. {missing[:3]}): the model was not "
            "trained from these question tables",
        )  # fmt: skip
    return kept, f"{len(held)} questions held out of training ({report_path})"


def tuning_candidates(
    index, questions: list[list[dict]], queries: Sequence[str | Path],
    bm25_runs: Sequence[str | Path], depth: int,
) -> Candidates:  # fmt: skip
    """Candidates of the tuning questions, one question table (and its vectors and BM25 run)
    after another: the vectors and runs hold every question of a table, these only some."""
    qids: list[str] = []
    qvecs, bm25, dense_p, dense_s = [], {}, [], []
    for rows, vec_path, run_path in zip(questions, queries, bm25_runs, strict=True):
        t_qids, t_vecs = read_query_vectors(vec_path)
        keep = {str(q["qid"]) for q in rows}
        sel = [i for i, q in enumerate(t_qids) if q in keep]
        if len(sel) != len(keep):
            raise InputError(
                vec_path, None, f"{len(keep) - len(sel)} tuning questions lack vectors"
            )
        cand = candidates(index, [t_qids[i] for i in sel], t_vecs[sel], run_path, depth, True)
        qids += cand.qids
        qvecs.append(cand.qvecs)
        bm25.update(cand.bm25)
        dense_p += cand.dense_p
        dense_s += cand.dense_s
    return Candidates(
        qids, np.concatenate(qvecs), bm25, dense_p, dense_s, ", ".join(map(str, bm25_runs))
    )


def hybrid(
    model_dir: str | Path,
    queries: str | Path,
    index_path: str | Path,
    embeddings: list[str | Path],
    bm25_run: str | Path,
    out: str | Path,
    cfg: dict[str, Any],
    tune: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """DPR's BM25 + lambda * dense hybrid run (see the module docstring); returns the report.

    ``cfg["lambda"]`` is a number, or ``"tune"``: then ``tune`` names the tuning questions
    (``questions``: the training question tables of the model's train set, one per dataset,
    with their ``queries`` vectors and ``bm25_run`` runs in the same order; ``passages``; and
    optionally ``report``, the model's training report whose held-out questions are used) and
    the weight is the best of ``cfg["grid"]`` there, whatever dataset ``queries`` holds. The
    evaluated questions are never read for it.
    """
    cfg = merged_cfg(cfg, DEFAULT_HYBRID_CFG)
    depth, top_k = int(cfg["depth"]), int(cfg["top_k"])
    method, qids, qvecs = prepare_queries(model_dir, queries, cfg)
    if method.corpus_units != "passages":
        raise SystemExit(f"error: the hybrid scores passages; method {method.name} has "
                         f"{method.corpus_units}")  # fmt: skip
    index = open_index(index_path, cfg)
    lookup = VectorLookup(open_shards(embeddings))
    if lookup.shards.n != index.n:
        raise InputError(
            embeddings[0], None, f"shards hold {lookup.shards.n} vectors, index {index.n}"
        )
    tuning: dict[str, Any] = {"how": "fixed"}
    if cfg["lambda"] == "tune":
        if not tune:
            raise SystemExit("error: --cfg lambda 'tune' needs the --tune-* inputs")
        per_table, where = tuning_questions(tune["questions"], tune.get("report"))
        t_cand = tuning_candidates(index, per_table, tune["queries"], tune["bm25_run"], depth)
        lam, grid = tune_lambda(
            t_cand, lookup, [q for rows in per_table for q in rows], tune["passages"],
            [float(x) for x in cfg["grid"]], [int(k) for k in cfg["ks"]],
        )  # fmt: skip
        tuning = {"how": "best of the grid on the tuning questions (mean top-k accuracy)",
                  "questions": where, "grid": grid}  # fmt: skip
        log.info("hybrid weight %.3g chosen on %s", lam, where)
    else:
        lam = float(cfg["lambda"])
    t0 = time.perf_counter()
    cand = candidates(index, qids, qvecs, bm25_run, depth)
    out_p, out_s, totals = fuse_all(cand, lookup, lam, top_k)
    fuse_s = time.perf_counter() - t0
    write_run(out, run_table(qids, out_p, out_s))

    depths = [len(v[0]) for v in cand.bm25.values()]
    if depths and max(depths) < depth:
        log.warning("BM25 run %s is only %d deep (hybrid depth %d)", bm25_run, max(depths), depth)
    if totals["no_bm25"]:
        log.warning(
            "%d questions have no BM25 hits: ranked by the dense score alone", totals["no_bm25"]
        )
    nq = max(len(qids), 1)
    report = {
        "method": "hybrid",
        "lambda": lam,
        "lambda_tuning": tuning,
        "dense_depth": depth,
        "top_k": top_k,
        "index": str(index_path),
        "index_type": index.kind,
        "bm25_run": str(bm25_run),
        "bm25_depth_min": min(depths) if depths else 0,
        "bm25_depth_max": max(depths) if depths else 0,
        "n_questions": len(qids),
        "n_questions_without_bm25": int(totals["no_bm25"]),
        "mean_union_size": totals["union"] / nq,
        "mean_only_bm25": totals["only_bm25"] / nq,
        "mean_only_dense": totals["only_dense"] / nq,
        "missing_bm25_score": "lowest BM25 score of the question's list (pyserini convention); "
        "an upper bound on the passage's true BM25 score",
        "missing_dense_score": "exact inner product with the stored passage vector",
        "search_and_fuse_seconds": round(fuse_s, 3),
    }
    log.info("hybrid run of %d questions -> %s", len(qids), out)
    return report


# --------------------------------------------------------------------------------------------
# CLI


def _cmd_hybrid(args: argparse.Namespace) -> int:
    tune = None
    if args.tune_queries:
        tune = {"queries": args.tune_queries, "bm25_run": args.tune_bm25_run,
                "questions": args.tune_questions, "passages": args.passages,
                "report": args.tune_report}  # fmt: skip
        missing = [k for k, v in tune.items() if v is None and k != "report"]
        if missing:
            raise SystemExit(f"error: --tune-queries needs {', '.join(missing)} too")
        counts = {k: len(tune[k]) for k in ("queries", "bm25_run", "questions")}
        if len(set(counts.values())) != 1:
            raise SystemExit(
                f"error: --tune-queries, --tune-bm25-run and --tune-questions name one file per "
                f"dataset each, in the same order; got {counts}"
            )
    report = hybrid(
        args.model, args.queries, args.index, args.embeddings, args.bm25_run, args.out, args.cfg,
        tune,
    )  # fmt: skip
    write_json(args.report, {**report, "environment": environment(("cpu", "faiss", "blas"))})
    return 0


def register(sub) -> None:
    h = sub.add_parser(
        "hybrid",
        help="DPR's BM25 + lambda * dense rerank of the union of both top lists",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="cfg defaults: " + json.dumps(DEFAULT_HYBRID_CFG),
    )
    add_common_args(h)
    h.add_argument("--embeddings", nargs="+", required=True, help="the index's shard-*.npy files")
    h.add_argument("--bm25-run", required=True, help="BM25 run (Parquet), ideally 2000 deep")
    h.add_argument("--tune-queries", nargs="+", help="question vectors of the tuning questions")
    h.add_argument("--tune-bm25-run", nargs="+", help="BM25 runs of the tuning questions")
    h.add_argument(
        "--tune-questions", nargs="+",
        help="question tables holding the tuning questions (one per dataset of the model's "
        "train set, in the order of --tune-queries and --tune-bm25-run)",
    )  # fmt: skip
    h.add_argument("--tune-report", help="training report: tune on its held-out questions")
    h.add_argument("--passages", help="passage table (answer matching while tuning)")
    add_cfg(h)
    h.set_defaults(func=_cmd_hybrid)
