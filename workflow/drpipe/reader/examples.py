"""Reader training examples from a retriever's own results (DPR section 6.1).

For each training question, from its top ``depth`` retrieved passages: the positive
candidates are the passages that contain an answer (``drpipe.qa.matching``), the gold passage
first when it was retrieved (DPR prefers it), then the others in rank order; the negatives are
the retrieved passages without an answer. A candidate whose answer spans all fall outside the
reader's input (truncation) is passed over for the next. Questions with no answer-bearing
passage, or none whose answer survives truncation, are counted and skipped.

At each epoch a question gets its first positive and ``passages - 1`` negatives sampled
(without replacement, seeded by the run's seed, the epoch and the question) from its
negatives; fewer negatives than that leaves the rest of its row empty (masked).
"""

from __future__ import annotations

import gzip
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from drpipe.errors import InputError
from drpipe.qa.matching import AnswerMatcher
from drpipe.reader.inputs import Encoded, PassageTokens, answer_spans, encode, question_ids

log = logging.getLogger(__name__)

SKIP_REASONS = ("no_answer_in_top_depth", "no_answer_after_truncation", "not_in_run")


@dataclass
class Example:
    qid: str
    q_ids: list[int]
    positive: int  # pid
    spans: list[tuple[int, int]]  # answer spans of the positive's input
    negatives: list[int]  # pids, rank order
    positive_is_gold: bool = False


@dataclass
class ExampleSet:
    examples: list[Example]
    counts: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, list[str]] = field(default_factory=dict)


def read_gold(path: str | Path | None) -> dict[str, int]:
    """qid -> gold pid from DPR biencoder JSON lines (``positive_ctxs[0].passage_id``), e.g. the
    mined ``train/{dataset}.jsonl.gz``; None or a record without one gives no entry."""
    if path is None:
        return {}
    gold: dict[str, int] = {}
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(path, f"line {n}", f"not JSON: {exc}") from None
            pos = rec.get("positive_ctxs") or []
            if rec.get("qid") is not None and pos and pos[0].get("passage_id") is not None:
                gold[str(rec["qid"])] = int(pos[0]["passage_id"])
    return gold


def build_examples(
    tokenizer,
    questions: Sequence[dict],
    run: Mapping[str, Sequence[int]],
    passages: Mapping[int, tuple[str, str]],
    tokens: Mapping[int, PassageTokens],
    limits: Mapping[str, int],
    gold: Mapping[str, int] | None = None,
    depth: int = 100,
) -> ExampleSet:
    """Examples for ``questions`` from ``run`` (qid -> pids best first); see the module doc."""
    gold = gold or {}
    matcher = AnswerMatcher({pid: text for pid, (_, text) in passages.items()})
    out = ExampleSet([], {r: 0 for r in SKIP_REASONS}, {r: [] for r in SKIP_REASONS})
    n_gold = 0

    def skip(reason: str, qid: str) -> None:
        out.counts[reason] += 1
        out.skipped[reason].append(qid)

    for q in questions:
        qid = q["qid"]
        pids = [int(p) for p in run.get(qid, ())][:depth]
        if not pids:
            skip("not_in_run", qid)
            continue
        hits = matcher.hits(q["answers"], q["match"], pids)
        positives = [p for p, h in zip(pids, hits, strict=True) if h]
        negatives = [p for p, h in zip(pids, hits, strict=True) if not h]
        if not positives:
            skip("no_answer_in_top_depth", qid)
            continue
        g = gold.get(qid)
        if g in positives:
            positives.remove(g)
            positives.insert(0, g)
        q_ids = question_ids(tokenizer, q["question"], limits["max_question_len"])
        for pid in positives:
            enc: Encoded = encode(tokenizer, q_ids, tokens[pid], limits["max_len"])
            spans = answer_spans(
                tokenizer, q["answers"], q["match"], passages[pid][1], tokens[pid], enc
            )
            if spans:
                out.examples.append(Example(qid, q_ids, pid, spans, negatives, pid == g))
                n_gold += pid == g
                break
        else:
            skip("no_answer_after_truncation", qid)
    out.counts["kept"] = len(out.examples)
    out.counts["positive_is_gold"] = n_gold
    out.counts["questions"] = len(questions)
    for reason in SKIP_REASONS:
        if out.counts[reason]:
            log.warning("skipped %d questions: %s", out.counts[reason], reason)
    return out


def sample_negatives(ex: Example, n: int, seed: int, epoch: int, index: int) -> list[int]:
    """``n`` negatives of ``ex`` (all when fewer), seeded by (seed, epoch, example index)."""
    if len(ex.negatives) <= n:
        return list(ex.negatives)
    rng = np.random.default_rng([seed, epoch, index, 17])
    pick = np.sort(rng.choice(len(ex.negatives), size=n, replace=False))
    return [ex.negatives[i] for i in pick]
