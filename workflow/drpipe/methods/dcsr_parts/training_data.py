"""DCSR's training data: the passages examples name, cut into sentences as the corpus cuts them,
the answer-bearing sentences of a positive passage, and the training batch.

A passage of the examples is looked up in the corpus by its id, and used with the corpus's
sentence spans when the corpus holds that id with the same text. A passage the corpus lacks
(DPR's released training files name ``psgs_w100`` ids, while a corpus built from the dump
numbers its own passages, so an id there is another passage or none) is cut from its own text
by the splitter that cut the corpus (``corpus/sentences.report.json`` names it), as DCSR's
released code cuts the training files' passages with the rule that cuts the index
(``process_ctx.py``): the same text gets the same sentences either way. Its sentences get unit
ids from its text (``SYNTHETIC_PID``), never the corpus passage that has its id.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from drpipe.corpus.sentences import iter_sentence_groups, make_splitter, tile
from drpipe.errors import InputError
from drpipe.io import iter_parquet, read_json
from drpipe.lazy import lazy_module
from drpipe.methods.dcsr_parts.markers import MarkedBatch
from drpipe.methods.dpr import passage_id
from drpipe.qa.matching import has_answer
from drpipe.qa.mining import CTX_LISTS

# torch at first use: the planner reads these classes without it (drpipe.lazy).
torch = lazy_module("torch")

# Passages the corpus lacks (a foreign examples file) get ids from their text, above any
# real pid, so two questions sharing such a passage still share its sentences' units.
SYNTHETIC_PID = 1 << 40


@dataclass
class DCSRBatch:
    queries: dict[str, torch.Tensor]
    passages: MarkedBatch
    slot_row: torch.Tensor  # [m] passage row of each sampled sentence
    slot_pos: torch.Tensor  # [m] token position of its marker
    slot_end: torch.Tensor  # [m] token after its last (span pooling)
    slot_unit: torch.Tensor  # [m] unit id (pid * SENT_SLOTS + sentence number)
    positive: torch.Tensor  # [b] slot of each question's positive sentence
    n_questions: int
    short_negatives: int = 0

    def to(self, device: torch.device) -> DCSRBatch:
        move = lambda d: {k: v.to(device) for k, v in d.items()}  # noqa: E731
        p = self.passages
        return DCSRBatch(
            move(self.queries),
            MarkedBatch(move(p.inputs), p.positions, p.n_sentences, p.text_cut, p.ends),
            self.slot_row.to(device),
            self.slot_pos.to(device),
            self.slot_end.to(device),
            self.slot_unit.to(device),
            self.positive.to(device),
            self.n_questions,
            self.short_negatives,
        )


@dataclass
class Passage:
    """A training passage as the corpus cuts it."""

    pid: int  # corpus pid (synthetic when the examples file gives none)
    title: str
    text: str
    spans: list[tuple[int, int]]
    sentence: int | None = None  # the sentence a trained checkpoint retrieved (DCSR-hard)


def sentence_spans(
    corpus: dict[str, Any], examples: Sequence[dict]
) -> dict[int, tuple[int, list[tuple[int, int]]]]:
    """pid -> (CRC-32 of its text, its sentence spans) of every corpus passage the examples
    name (the CRC tells an example's passage text from a different one under the same pid)."""
    wanted: set[int] = set()
    for ex in examples:
        for key in CTX_LISTS:
            wanted.update(p for p in map(passage_id, ex.get(key) or []) if p >= 0)
    crcs: dict[int, int] = {}
    wanted_arr = np.fromiter(wanted, np.int64, len(wanted))
    for batch in iter_parquet(corpus["passages"], columns=["pid", "text"]):
        pids = batch.column(0).to_numpy(zero_copy_only=False)
        hit = np.flatnonzero(np.isin(pids, wanted_arr))
        texts = batch.column(1)
        for i in hit.tolist():
            crcs[int(pids[i])] = zlib.crc32((texts[i].as_py() or "").encode("utf-8"))
    return {
        pid: (crcs[pid], spans)
        for pid, spans in iter_sentence_groups(corpus["sentences"])
        if pid in crcs
    }


def in_corpus(spans: dict[int, tuple[int, list[tuple[int, int]]]], ctx: dict) -> bool:
    """Whether the corpus holds the ctx's id with the ctx's text."""
    known = spans.get(passage_id(ctx))
    return known is not None and known[0] == zlib.crc32(ctx["text"].encode("utf-8"))


def own_text_spans(
    spans: dict[int, tuple[int, list[tuple[int, int]]]],
    examples: Sequence[dict],
    sentences_report: str | Path,
) -> dict[str, list[tuple[int, int]]]:
    """text -> sentence spans of every passage of the examples that the corpus lacks, cut by
    the splitter the corpus's sentence table was cut with (named in its report)."""
    texts: dict[str, None] = {}  # in order of first appearance: a deterministic split
    for ex in examples:
        for key in CTX_LISTS:
            for ctx in ex.get(key) or []:
                if not in_corpus(spans, ctx):
                    texts.setdefault(ctx["text"])
    if not texts:
        return {}
    report = read_json(sentences_report)
    if "splitter" not in report:
        raise InputError(sentences_report, None, "no 'splitter': not a sentence-table report")
    split = make_splitter(report["splitter"], report.get("model"))
    order = list(texts)
    out: dict[str, list[tuple[int, int]]] = {}
    for i, text, starts in split((t, i) for i, t in enumerate(order)):
        out[order[i]] = tile(len(text), starts)
    return out


def corpus_passage(
    spans: dict[int, tuple[int, list[tuple[int, int]]]],
    ctx: dict,
    mined_sentences: bool,
    own: dict[str, list[tuple[int, int]]] | None = None,
) -> Passage | None:
    """The ctx with the corpus's sentence spans; else (the corpus lacks its id or its text)
    with the spans of its own text in ``own``; else None."""
    text = ctx["text"]
    if in_corpus(spans, ctx):
        mined = ctx.get("sentence") if mined_sentences else None
        return Passage(passage_id(ctx), ctx.get("title") or "", text, spans[passage_id(ctx)][1],
                       mined)  # fmt: skip
    if own is not None and text in own:
        # pid -1: its units get ids from its text. A mined sentence number counts the corpus
        # passage's sentences, which this is not.
        return Passage(-1, ctx.get("title") or "", text, own[text], None)
    return None


def answer_sentences(psg: Passage, ex: dict) -> list[int]:
    """The sentences of ``psg`` that contain one of the example's answers (DPR's matching)."""
    match = ex.get("match", "string")
    return [
        j for j, (s, e) in enumerate(psg.spans) if has_answer(ex["answers"], psg.text[s:e], match)
    ]


def unit_pid(psg: Passage) -> int:
    """The pid of the passage's sentence units: its corpus pid, else one from its text."""
    if psg.pid >= 0:
        return psg.pid
    return SYNTHETIC_PID + zlib.crc32(f"{psg.title}\n{psg.text}".encode())
