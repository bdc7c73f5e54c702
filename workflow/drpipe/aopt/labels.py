"""Pseudo-labels of the top ``depth`` passages of each question of a run: knowledge filtering
with the questions' answers (equation 8) or pseudo-relevance feedback, which reads no answers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from drpipe.aopt.vectors import PassageVectors
from drpipe.corpus.passages import load_passages
from drpipe.errors import InputError
from drpipe.qa.datasets import read_questions
from drpipe.qa.matching import AnswerMatcher
from drpipe.runs import read_run


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
