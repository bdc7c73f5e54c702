"""Top-k retrieval accuracy: the share of questions with an answer-bearing passage in the top k.

This is DPR's Table 2 metric: a question counts as a hit at k when one of its first k
retrieved passages contains an answer (``drpipe.qa.matching``, passage text only). A question
of the questions file that the run does not cover is a miss at every k, and counted. Beside it,
MRR@k from the same first-hit ranks (the mean of 1/rank of the first answer-bearing passage
within the top k, 0 without one), as ir_measures' ``RR@k`` computes it with one relevant
passage per question.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from drpipe.cliutil import add_cfg, need
from drpipe.corpus.passages import load_passages
from drpipe.errors import InputError
from drpipe.io import write_json, write_parquet
from drpipe.qa.datasets import read_questions
from drpipe.qa.matching import AnswerMatcher
from drpipe.runs import read_run

log = logging.getLogger(__name__)

DEFAULT_KS = (1, 5, 20, 100)
PER_QUESTION_SCHEMA = pa.schema([("qid", pa.string()), ("first_hit_rank", pa.int32())])


def first_hit_ranks(
    run: Mapping[str, Sequence[int]], questions: Iterable[dict], matcher: Any
) -> dict[str, int | None]:
    """First 1-based rank holding an answer, per question (None: no hit, or not in the run).

    ``matcher`` is a ``drpipe.qa.matching.AnswerMatcher`` over the run's passage texts.
    """
    return {
        q["qid"]: matcher.first_hit(q["answers"], q["match"], run.get(q["qid"], ()))
        for q in questions
    }


def accuracy_at_k(first_hits: Mapping[str, int | None], ks: Iterable[int]) -> dict[str, float]:
    """Top-k accuracy in percent for each k, over all questions in ``first_hits``."""
    n = len(first_hits)
    if n == 0:
        raise ValueError("no questions to evaluate")
    ranks = [r for r in first_hits.values() if r is not None]
    return {str(k): 100.0 * sum(1 for r in ranks if r <= k) / n for k in ks}


def mrr_at_k(first_hits: Mapping[str, int | None], ks: Iterable[int]) -> dict[str, float]:
    """MRR@k (a fraction in [0, 1]) for each k, over all questions in ``first_hits``."""
    n = len(first_hits)
    if n == 0:
        raise ValueError("no questions to evaluate")
    ranks = [r for r in first_hits.values() if r is not None]
    return {str(k): sum(1.0 / r for r in ranks if r <= k) / n for k in ks}


def top_k_accuracy(
    run_path: str | Path,
    questions_path: str | Path,
    passages_path: str | Path,
    ks: Sequence[int] = DEFAULT_KS,
    depth: int | None = None,
) -> tuple[dict[str, Any], dict[str, int | None]]:
    """Evaluate a run file; returns (summary, first-hit rank per qid in questions order).

    Only passages within ``depth`` (default ``max(ks)``) are loaded and checked.
    """
    ks = sorted({int(k) for k in ks})
    if not ks or ks[0] < 1:
        raise ValueError(f"ks must be positive integers, got {ks}")
    depth = max(ks) if depth is None else int(depth)
    questions = read_questions(questions_path)
    hits = read_run(run_path, depth, qids=[q["qid"] for q in questions])
    run = {qid: pids.tolist() for qid, (pids, _scores) in hits.items()}
    needed = {pid for pids in run.values() for pid in pids}
    try:
        passages = load_passages(passages_path, needed)
    except KeyError as exc:
        raise InputError(run_path, None, f"run refers to unknown passages: {exc}") from None
    matcher = AnswerMatcher({pid: text for pid, (_, text) in passages.items()})
    first_hits = first_hit_ranks(run, questions, matcher)
    n_missing = sum(1 for q in questions if q["qid"] not in run)
    if n_missing:
        log.warning(
            "%s: %d of %d questions have no results (counted as misses)",
            run_path,
            n_missing,
            len(questions),
        )
    summary = {
        "n_questions": len(questions),
        "top_k": accuracy_at_k(first_hits, ks),
        "mrr": mrr_at_k(first_hits, ks),
        "n_missing_from_run": n_missing,
        "depth": depth,
    }
    return summary, first_hits


def cmd_evaluate(args: argparse.Namespace) -> int:
    cfg = dict(args.cfg)
    start = time.perf_counter()
    run = Path(args.run)
    with tempfile.TemporaryDirectory() as tmp:
        if run.suffix != ".parquet":
            # A run made elsewhere (TREC, DPR or pyserini JSON), scored one-off: imported
            # onto our passages first (drpipe.runfiles: every unknown id is an error).
            from drpipe.runfiles import import_run

            report = import_run(run, args.questions, args.passages, Path(tmp, "run.parquet"),
                                fmt=cfg.get("format", "auto"), id_prefix=cfg.get("id_prefix", ""))  # fmt: skip
            log.info("%s: imported %s", run, report)
            for key, default in (("method", run.stem), ("train_set", None), ("split", None),
                                 ("dataset", Path(args.questions).parent.name)):  # fmt: skip
                cfg.setdefault(key, default)
            run = Path(tmp, "run.parquet")
        summary, first_hits = top_k_accuracy(
            run, args.questions, args.passages, cfg.get("ks", DEFAULT_KS), cfg.get("depth")
        )
    metrics = {key: need(cfg, key) for key in ("method", "train_set", "dataset", "split")}
    metrics.update(summary)
    metrics["seconds"] = time.perf_counter() - start
    log.info("%s: top-k %s over %d questions", args.run, metrics["top_k"], metrics["n_questions"])
    if args.per_question:
        table = pa.Table.from_pydict(
            {"qid": list(first_hits), "first_hit_rank": list(first_hits.values())},
            schema=PER_QUESTION_SCHEMA,
        )
        write_parquet(args.per_question, table)
    write_json(args.out, metrics)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("evaluate", help="top-k retrieval accuracy (and MRR@k) of a run")
    p.add_argument("--run", required=True,
                   help="run Parquet (qid, rank, pid, score), or a run made elsewhere: TREC "
                   "(.trec/.txt/.run), DPR or pyserini retrieval JSON (.json)")  # fmt: skip
    p.add_argument("--questions", required=True, help="questions Parquet")
    p.add_argument("--passages", required=True, help="passages Parquet")
    p.add_argument("--out", required=True, help="metrics JSON to write")
    p.add_argument("--per-question", help="Parquet of (qid, first_hit_rank) to write")
    add_cfg(p)
    p.set_defaults(func=cmd_evaluate)
