"""Sentence boundaries of every passage, as character offsets that tile the passage text.

Splitters (config ``splitter``):
- ``sentencizer``: spaCy's rule-based sentencizer on ``spacy.blank("en")`` (offline default);
- ``spacy_model``: a statistical spaCy pipeline (config ``model``, e.g. ``en_core_web_sm``);
- ``dcsr``: DCSR's rule. The paper (Wu et al. 2022, section 3.2 and appendix C.2) only says
  that sentences are split directly on the 100-word passages, with no attempt to repair
  sentences cut at passage ends; the concrete rule is the one in the authors' released
  ``downloads/data/wikipedia_split/process_ctx.py`` (``process_paragraph_v2``),
  re-implemented here on character offsets. Checked against that function: identical sentence
  starts on all 751 real ``psgs_w100`` passages of the data mirror's sample and on 4,171 of the
  4,177 passages of the ``mini`` corpus. The 6 others are the one deliberate difference: a
  passage of fewer than 7 words loses its only marker under the released rule (so it would get
  no vector and could never be retrieved); here it stays one sentence.

Whatever the splitter finds, offsets are normalised so that sentences tile the text: the first
starts at 0, each starts where the previous ends, the last ends at ``len(text)`` (whitespace
between sentences belongs to the sentence before it). Every passage gets at least one sentence.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from drpipe.corpus.passages import iter_passages, num_passages
from drpipe.io import ParquetStreamWriter, iter_parquet, progress

SENTENCE_SCHEMA = pa.schema(
    [("pid", pa.int64()), ("sent", pa.int32()), ("start", pa.int32()), ("end", pa.int32())]
)
SPLITTERS = ("sentencizer", "spacy_model", "dcsr")

# Splits a stream of (text, pid) pairs: yields (pid, text, sentence start offsets) in order.
Splitter = Callable[[Iterable[tuple[str, int]]], Iterator[tuple[int, str, list[int]]]]


class SplitterUnavailable(RuntimeError):
    """The configured splitter cannot run here (e.g. its spaCy model is not installed)."""


def tile(text_len: int, starts: Iterable[int]) -> list[tuple[int, int]]:
    """``(start, end)`` spans tiling ``[0, text_len)`` from candidate sentence starts."""
    cuts = sorted({s for s in starts if 0 < s < text_len})
    bounds = [0, *cuts, text_len]
    return list(zip(bounds[:-1], bounds[1:], strict=True))


# ----------------------------------------------------------------------------- DCSR rule

_WORD_RE = re.compile(r"\S+")
# Words the released rule never treats as a sentence end.
_DCSR_NO_SPLIT = {"etc.", "e.g.", "diff.", "vs.", "i.e.", "Mr.", "Miss.", "Mrs.", "B.C.", "A.D."}
_DCSR_MIN_WORDS = 8  # their counter includes the <sent> marker: "> 8" means at least 8 words


def _is_upper(ch: str) -> bool:
    return "A" <= ch <= "Z"


def _dcsr_may_end(word: str, next_word: str | None) -> bool:
    """Whether ``word`` ends a sentence under the released DCSR rule (length aside)."""
    if word[-1] not in ".!?" or word in _DCSR_NO_SPLIT:
        return False
    core = word[:-1]
    upper = sum(_is_upper(c) for c in core)
    # Non-letters ("1990.", "U.S.") or acronyms ("NASA.") or initials ("J.") are not ends.
    if any(not (_is_upper(c) or "a" <= c <= "z") for c in core) or upper > 1:
        return False
    if len(core) == 1 and upper == 1:
        return False
    # A sentence end must be followed by a capitalised word (or end the passage).
    return next_word is None or _is_upper(next_word[0])


def dcsr_sentence_starts(text: str) -> list[int]:
    """Sentence start offsets of ``text`` under DCSR's released splitting rule."""
    words = [(m.start(), m.group()) for m in _WORD_RE.finditer(text)]
    starts = [0]
    in_sentence = 0  # words in the current sentence
    for i, (_, word) in enumerate(words):
        in_sentence += 1
        nxt = words[i + 1][1] if i + 1 < len(words) else None
        if nxt is not None and in_sentence >= _DCSR_MIN_WORDS and _dcsr_may_end(word, nxt):
            starts.append(words[i + 1][0])
            in_sentence = 0
    # A trailing fragment of fewer than 7 words loses its marker: it joins the sentence before.
    # (The released code also strips the marker of a lone short sentence; every passage keeps
    # one sentence here, see the module docstring.)
    if len(starts) > 1 and in_sentence < _DCSR_MIN_WORDS - 1:
        starts.pop()
    return starts


def _dcsr_splitter(items: Iterable[tuple[str, int]]) -> Iterator[tuple[int, str, list[int]]]:
    for text, pid in items:
        yield pid, text, dcsr_sentence_starts(text)


# ----------------------------------------------------------------------------- spaCy


def _blocks(items: Iterable, size: int) -> Iterator[list]:
    block: list = []
    for item in items:
        block.append(item)
        if len(block) >= size:
            yield block
            block = []
    if block:
        yield block


def _spacy_splitter(nlp, batch_size: int, processes: int = 1) -> Splitter:
    # spaCy interns every new token string in its vocabulary, which would grow with the
    # corpus: each block runs in a memory zone that frees them. Blocks are large because
    # nlp.pipe starts its worker processes (if any) once per call.
    def split(items: Iterable[tuple[str, int]]) -> Iterator[tuple[int, str, list[int]]]:
        block_size = 64 * batch_size * max(processes, 1)
        for block in _blocks(items, block_size):
            with nlp.memory_zone():
                docs = nlp.pipe(block, batch_size=batch_size, n_process=processes, as_tuples=True)
                out = [(pid, doc.text, [s.start_char for s in doc.sents]) for doc, pid in docs]
            yield from out

    return split


def make_splitter(
    splitter: str = "sentencizer",
    model: str | None = None,
    batch_size: int = 256,
    processes: int = 1,
) -> Splitter:
    """The splitting function a config names."""
    if splitter == "dcsr":
        return _dcsr_splitter
    import spacy  # lazy: ~4 s to import (measured); the dcsr rule needs none of it

    if splitter == "sentencizer":
        nlp = spacy.blank("en")
        nlp.add_pipe("sentencizer")
        nlp.max_length = 10**8
        return _spacy_splitter(nlp, batch_size, processes)
    if splitter == "spacy_model":
        name = model or "en_core_web_sm"
        try:
            # Only the pieces sentence boundaries need.
            nlp = spacy.load(name, exclude=["ner", "lemmatizer", "textcat"])
        except OSError as exc:
            raise SplitterUnavailable(
                f"splitter 'spacy_model' needs the spaCy model {name!r}, which is not installed "
                f"({exc.__class__.__name__}). Install it into this environment, e.g. "
                f"`python -m spacy download {name}` (or `pip install` its wheel from a mirror), "
                "or use splitter 'sentencizer'."
            ) from None
        return _spacy_splitter(nlp, batch_size, processes)
    raise ValueError(f"unknown splitter {splitter!r}; expected one of {SPLITTERS}")


def split_passages(
    passages: str | Path,
    out: str | Path,
    splitter: str = "sentencizer",
    model: str | None = None,
    batch_size: int = 256,
    processes: int = 1,
) -> dict[str, Any]:
    """Write the sentences table of a passage table, streaming; returns report counts."""
    split = make_splitter(splitter, model, batch_size, processes)
    n_passages = n_sentences = single = max_sents = 0
    bar = progress(total=num_passages(passages), desc="sentences", unit="psg")

    def items() -> Iterator[tuple[str, int]]:
        for batch in iter_passages(passages, columns=["pid", "text"]):
            pids = batch.column(0).to_pylist()
            texts = batch.column(1).to_pylist()
            yield from ((t or "", pid) for t, pid in zip(texts, pids, strict=True))
            bar.update(len(pids))

    cols: dict[str, list[int]] = {name: [] for name in SENTENCE_SCHEMA.names}
    with ParquetStreamWriter(out, SENTENCE_SCHEMA) as writer:
        for pid, text, starts in split(items()):
            spans = tile(len(text), starts)
            for k, (s, e) in enumerate(spans):
                cols["pid"].append(pid)
                cols["sent"].append(k)
                cols["start"].append(s)
                cols["end"].append(e)
            n_passages += 1
            n_sentences += len(spans)
            single += len(spans) == 1
            max_sents = max(max_sents, len(spans))
            if len(cols["pid"]) >= 50_000:
                writer.write_rows(cols)
                cols = {name: [] for name in SENTENCE_SCHEMA.names}
        writer.write_rows(cols)
    bar.close()
    return {
        "passages": n_passages,
        "sentences": n_sentences,
        "sentences_per_passage": n_sentences / n_passages if n_passages else 0.0,
        "max_sentences_per_passage": max_sents,
        "single_sentence_passages": single,
        "splitter": splitter,
        "model": model if splitter == "spacy_model" else None,
    }


def iter_sentence_groups(path: str | Path) -> Iterator[tuple[int, list[tuple[int, int]]]]:
    """``(pid, [(start, end), ...])`` per passage of a sentence table, in file order."""
    pid, spans = None, []
    for batch in iter_parquet(path, columns=["pid", "start", "end"]):
        cols = [batch.column(i).to_numpy(zero_copy_only=False) for i in range(3)]
        for p, a, b in zip(*cols, strict=True):
            if p != pid:
                if pid is not None:
                    yield int(pid), spans
                pid, spans = p, []
            spans.append((int(a), int(b)))
    if pid is not None:
        yield int(pid), spans
