"""Does a passage contain an answer? The one answer-matching rule of the whole pipeline.

Semantics are those of DPR's ``has_answer`` (``dpr/data/qa_validation.py``) and Pyserini's
``evaluate_dpr_retrieval.py``, so top-k accuracies are comparable with the papers:

- ``"string"``: passage and answer are NFD-normalised and split with DrQA's SimpleTokenizer
  rule (runs of letters/numbers/combining marks, or any single character that is neither
  separator nor control), lower-cased per token; the answer matches when its token sequence
  occurs contiguously in the passage's. An answer with no tokens matches every passage (as
  in DPR); the question loaders drop empty answers so this never arises from real data.
- ``"regex"`` (DPR's ``regex_match``): the NFD-normalised pattern, as given, is searched in
  the NFD-normalised passage with IGNORECASE | UNICODE | MULTILINE, using the ``regex`` module
  as DPR does. A pattern that does not compile matches nothing, as in DPR (which catches the
  compile error and returns False); the question loader counts such patterns in its report.
- ``"regex_repaired"`` (an option, reported separately; not DPR): as ``"regex"``, but a
  backslash before a non-ASCII character (``Sn\\ě\\žka``, ``Ni\\ña`` in CuratedTREC, left by
  an old ``re.escape``) is dropped before NFD. In the raw pattern it only marks a literal,
  but after NFD it escapes the base letter and turns into ``\\e`` (an error: the whole
  pattern never matches), ``\\n`` (newline) or ``\\a`` (bell), so DPR never matched those
  answers.

Only the passage text is searched, never its title (DPR's default).

``AnswerMatcher`` is the batch form: it normalises each passage once and caches it, and turns
each answer into a space-delimited token string, so one check is a single ``str.find``.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Hashable, Iterable, Mapping, Sequence
from functools import lru_cache

import regex

MATCH_MODES = ("string", "regex", "regex_repaired")
REGEX_MODES = frozenset({"regex", "regex_repaired"})

_FLAGS = regex.IGNORECASE | regex.UNICODE | regex.MULTILINE
# DrQA's SimpleTokenizer: alphanumeric runs (letters, numbers, combining marks) or a single
# character that is not a separator (\p{Z}) or control/format/unassigned (\p{C}).
_TOKEN = regex.compile(r"[\p{L}\p{N}\p{M}]+|[^\p{Z}\p{C}]", flags=_FLAGS)


def normalize(text: str) -> str:
    """Unicode NFD, as DPR applies to both passages and answers before matching."""
    return unicodedata.normalize("NFD", text)


def tokenize(text: str) -> list[str]:
    """SimpleTokenizer tokens of ``text`` (no normalisation, case kept)."""
    return _TOKEN.findall(text)


def match_tokens(text: str) -> list[str]:
    """The tokens string matching compares: NFD, SimpleTokenizer, each token lower-cased."""
    return [t.lower() for t in _TOKEN.findall(normalize(text))]


def _joined(tokens: Sequence[str]) -> str:
    # Tokens never contain a space (\p{Z} is excluded from both token classes, and lower()
    # never produces one), so " a b " occurs in " x a b y " iff [a, b] is a contiguous
    # sub-list of [x, a, b, y].
    return " " + " ".join(tokens) + " "


@lru_cache(maxsize=1 << 18)
def _answer_key(answer: str) -> str | None:
    """Space-delimited answer tokens, or None for an answer without tokens (matches all)."""
    tokens = match_tokens(answer)
    return _joined(tokens) if tokens else None


def unescape_non_ascii(pattern: str) -> str:
    """Drop backslashes that escape a non-ASCII character (a no-op in the raw pattern)."""
    if "\\" not in pattern:
        return pattern
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            nxt = pattern[i + 1]
            out.append(nxt if ord(nxt) > 127 else c + nxt)
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _regex_source(pattern: str, repaired: bool) -> str:
    return normalize(unescape_non_ascii(pattern) if repaired else pattern)


@lru_cache(maxsize=1 << 16)
def answer_regex(pattern: str, repaired: bool = False) -> regex.Pattern | None:
    """The compiled answer pattern as matching uses it, or None if it does not compile (then
    it matches nothing, as DPR's ``regex_match``). ``repaired``: the ``regex_repaired`` mode."""
    try:
        return regex.compile(_regex_source(pattern, repaired), flags=_FLAGS)
    except Exception:  # DPR catches everything (regex.error, ValueError, RecursionError, ...)
        return None


def compile_answer_regex(pattern: str, repaired: bool = False) -> regex.Pattern:
    """``answer_regex``, but a pattern that does not compile raises ``ValueError`` saying why."""
    compiled = answer_regex(pattern, repaired)
    if compiled is not None:
        return compiled
    try:
        regex.compile(_regex_source(pattern, repaired), flags=_FLAGS)
    except Exception as exc:
        raise ValueError(f"answer regex {pattern!r} does not compile: {exc}") from None
    raise AssertionError("unreachable")  # pragma: no cover


def regex_compiles(pattern: str, match: str) -> bool:
    """Does ``pattern`` compile under regex mode ``match`` ("regex" or "regex_repaired")?"""
    return answer_regex(pattern, match == "regex_repaired") is not None


def _check_mode(match: str) -> None:
    if match not in MATCH_MODES:
        raise ValueError(f"unknown match mode {match!r}; expected one of {MATCH_MODES}")


def _prepared(text: str, match: str) -> str:
    return _joined(match_tokens(text)) if match == "string" else normalize(text)


def _contains(answers: Iterable[str], prepared: str, match: str) -> bool:
    if match == "string":
        for answer in answers:
            key = _answer_key(answer)
            if key is None or key in prepared:
                return True
        return False
    repaired = match == "regex_repaired"
    for answer in answers:
        compiled = answer_regex(answer, repaired)
        if compiled is not None and compiled.search(prepared) is not None:
            return True
    return False


def has_answer(answers: Iterable[str], text: str, match: str = "string") -> bool:
    """True if the passage ``text`` contains any of ``answers`` under ``match`` semantics."""
    _check_mode(match)
    return _contains(answers, _prepared(text, match), match)


class AnswerMatcher:
    """Answer matching over many (question, passage) pairs, normalising each passage once.

    ``texts`` maps a passage key (usually the pid) to its text. Prepared forms are cached per
    (key, mode); ``max_cache`` bounds the cache (it is cleared when full) for corpus-scale use.
    """

    def __init__(self, texts: Mapping[Hashable, str], max_cache: int | None = None):
        self.texts = texts
        self.max_cache = max_cache
        self._cache: dict[tuple[Hashable, str], str] = {}

    def _get(self, key: Hashable, match: str) -> str:
        ck = (key, match)
        prepared = self._cache.get(ck)
        if prepared is None:
            if self.max_cache is not None and len(self._cache) >= self.max_cache:
                self._cache.clear()
            prepared = _prepared(self.texts[key], match)
            self._cache[ck] = prepared
        return prepared

    def contains(self, answers: Sequence[str], match: str, key: Hashable) -> bool:
        """Does passage ``key`` contain one of ``answers``?"""
        _check_mode(match)
        return _contains(answers, self._get(key, match), match)

    def hits(self, answers: Sequence[str], match: str, keys: Iterable[Hashable]) -> list[bool]:
        """One bool per passage key, in order (DPR's per-question ``questions_doc_hits``)."""
        _check_mode(match)
        return [_contains(answers, self._get(k, match), match) for k in keys]

    def first_hit(self, answers: Sequence[str], match: str, keys: Iterable[Hashable]) -> int | None:
        """1-based position of the first passage containing an answer, or None."""
        _check_mode(match)
        for rank, key in enumerate(keys, 1):
            if _contains(answers, self._get(key, match), match):
                return rank
        return None
