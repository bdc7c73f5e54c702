"""DCSR's training data: the passages examples name, cut into sentences as the corpus cuts them,
the answer-bearing sentences of a positive passage, and the training batch."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from drpipe.corpus.sentences import iter_sentence_groups
from drpipe.io import iter_parquet
from drpipe.methods.dcsr_parts.markers import MarkedBatch
from drpipe.methods.dpr import passage_id
from drpipe.qa.matching import has_answer

# Passages without a corpus id (a foreign examples file) get ids from their text, above any
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
        for key in ("positive_ctxs", "hard_negative_ctxs", "negative_ctxs"):
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


def corpus_passage(
    spans: dict[int, tuple[int, list[tuple[int, int]]]], ctx: dict, mined_sentences: bool
) -> Passage | None:
    """The ctx with the corpus's sentence spans, or None when the corpus lacks its text."""
    text = ctx["text"]
    pid = passage_id(ctx)
    known = spans.get(pid)
    if known is None or known[0] != zlib.crc32(text.encode("utf-8")):
        return None
    mined = ctx.get("sentence") if mined_sentences else None
    return Passage(pid, ctx.get("title") or "", text, known[1], mined)


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
