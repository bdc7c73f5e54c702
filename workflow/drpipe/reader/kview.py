"""EM at several k and the passage-selection head's accuracy, for one Table 4 row.

DPR's reader reads the top k passages and answers from the one with the highest selection
score (section 6.1). Whether reading more passages helps depends on two things this view
measures per k over the same questions:

- ``em``: exact match reading the top k (the reader's prediction, ``score.predict``);
- ``selected_has_answer``: the selected passage (argmax of the selection score among the top
  k) contains an answer (``drpipe.qa.matching``, as Table 2 counts a hit); at k = 1 it is the
  retriever's own top-1 share (retrieval order, ``top1_has_answer``);
- ``topk_has_answer``: some passage of the top k contains an answer (the retriever's top-k
  accuracy: what a perfect selection could reach);
- ``random_has_answer``: the share of answer-bearing passages among the top k, averaged over
  the questions (what a selection at random would reach: the chance level);
- ``em_any``: some passage of the top k has a best span that is an exact match (what a
  perfect selection could reach in EM);
- ``em_given_selected_answer``: EM among the questions whose selected passage holds an answer
  (the span head's share);
- ``selected_not_top1``: the selected passage is not the retriever's first (how often the
  selection head overrides retrieval order).

Nothing here chooses anything: k is the row's (``drpipe reader choose-k``), shown beside.
No torch at import (the tables import ``MEASURES``): ``score`` is imported when a view runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from drpipe.qa.matching import AnswerMatcher
from drpipe.reader.em import exact_match

if TYPE_CHECKING:
    from drpipe.reader.score import Pair

MEASURES = (
    "em",
    "em_any",
    "selected_has_answer",
    "topk_has_answer",
    "random_has_answer",
    "em_given_selected_answer",
    "selected_not_top1",
)


def _pct(count: int, total: int) -> float | None:
    return None if total == 0 else round(100.0 * count / total, 4)


def _share(flags: Sequence[bool]) -> float:
    return sum(flags) / len(flags) if flags else 0.0


def k_view(
    run: Mapping[str, Sequence[int]],
    scores: Mapping[Pair, dict[str, Any]],
    questions: Sequence[dict],
    matcher: AnswerMatcher,
    ks: Sequence[int],
) -> dict[str, Any]:
    """The measures of the module doc at each of ``ks`` over ``questions`` (percentages; a
    question the run does not cover counts as a miss everywhere, as in ``predict``)."""
    from drpipe.reader.score import predict

    if not questions:
        raise ValueError("no questions to read")
    ks = sorted({int(k) for k in ks})
    depth = ks[-1]
    # Predictions first: a pair of the top `depth` without a score stops here, named.
    predicted = {k: predict(run, scores, questions, k) for k in reversed(ks)}
    # Per question, over its top `depth`: which passages hold an answer, which spans match.
    hits: dict[str, list[bool]] = {}
    span_em: dict[str, list[bool]] = {}
    for q in questions:
        pids = [int(p) for p in run.get(q["qid"], ())][:depth]
        hits[q["qid"]] = matcher.hits(q["answers"], q["match"], pids)
        span_em[q["qid"]] = [
            exact_match(scores[(q["qid"], pid)]["answer"] or "", q["answers"], q["match"])
            for pid in pids
        ]
    by_k = []
    n = len(questions)
    for k in ks:
        rows = predicted[k]
        em = sum(r["em"] for r in rows)
        selected = [r["rank"] is not None and hits[r["qid"]][r["rank"] - 1] for r in rows]
        em_selected = sum(r["em"] for r, s in zip(rows, selected, strict=True) if s)
        by_k.append(
            {
                "k": k,
                "em": _pct(em, n),
                "em_any": _pct(sum(any(span_em[q["qid"]][:k]) for q in questions), n),
                "selected_has_answer": _pct(sum(selected), n),
                "topk_has_answer": _pct(sum(any(hits[q["qid"]][:k]) for q in questions), n),
                "random_has_answer": None
                if n == 0
                else round(100.0 * sum(_share(hits[q["qid"]][:k]) for q in questions) / n, 4),
                "em_given_selected_answer": _pct(em_selected, sum(selected)),
                "selected_not_top1": _pct(sum(r["rank"] not in (None, 1) for r in rows), n),
            }
        )
    top1 = _pct(sum(bool(h[:1] and h[0]) for h in hits.values()), n)
    return {"n_questions": n, "top1_has_answer": top1, "by_k": by_k}
