"""Exact match of a predicted answer, as DPR's reader evaluation computes it.

- ``"string"`` answers: SQuAD's ``normalize_answer`` (lower-case, punctuation removed, the
  articles a/an/the removed, whitespace collapsed) on both sides, then equality; the
  prediction is right when it equals any answer (DPR's ``exact_match_score`` over the
  answers).
- ``"regex"`` / ``"regex_repaired"`` answers (CuratedTREC): DrQA's and DPR's
  ``regex_match_score``: the pattern, compiled as answer matching compiles it (NFD,
  IGNORECASE | UNICODE | MULTILINE, ``drpipe.qa.matching.answer_regex``), must match at the
  start of the NFD-normalised prediction (``pattern.match``); a pattern that does not compile
  matches nothing.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable

from drpipe.qa.matching import MATCH_MODES, answer_regex, normalize

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD v1.1's ``normalize_answer``: lower, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, answers: Iterable[str], match: str = "string") -> bool:
    """Is ``prediction`` one of ``answers`` under ``match`` semantics (see the module doc)?"""
    if match not in MATCH_MODES:
        raise ValueError(f"unknown match mode {match!r}; expected one of {MATCH_MODES}")
    if match == "string":
        pred = normalize_answer(prediction)
        return any(pred == normalize_answer(a) for a in answers)
    pred = normalize(prediction)
    repaired = match == "regex_repaired"
    for pattern in answers:
        compiled = answer_regex(pattern, repaired)
        if compiled is not None and compiled.match(pred) is not None:
            return True
    return False
