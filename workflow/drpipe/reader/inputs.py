"""Reader inputs: ``[CLS] question [SEP] title [SEP] text [SEP]`` token ids (segment ids all 0,
as the bi-encoders; DPR's reader input order), where the text's tokens lie, their character
offsets, and the answer spans in a passage.

Only text tokens are span candidates (DPR reads spans from the passage text, never the
question or title). Spans are inclusive token positions in the whole input.

Answer spans, as DPR's reader data finds them: a string answer's token ids (the reader's own
tokenizer, so case and accents follow it) at every position where they occur in the text's
token ids; a regular-expression answer (CuratedTREC) at every match of the pattern in the
text (compiled as answer matching compiles it), turned into the tokens it covers. All
occurrences of all answers count; spans cut off by truncation are left out.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from drpipe.qa.matching import answer_regex


@dataclass(frozen=True)
class PassageTokens:
    """A passage tokenised once (reused by every question that retrieved it)."""

    title_ids: tuple[int, ...]
    text_ids: tuple[int, ...]
    offsets: tuple[tuple[int, int], ...]  # character span of each text token
    word_ids: tuple[int, ...]  # word index of each text token (for whole-word answers)


@dataclass(frozen=True)
class Encoded:
    """One (question, passage) input."""

    ids: list[int]
    text_start: int  # position of the first text token
    text_len: int  # text tokens kept (after truncation)


def tokenize_passage(tokenizer, title: str | None, text: str) -> PassageTokens:
    title_ids = tokenizer(title or "", add_special_tokens=False)["input_ids"]
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    words = enc.word_ids()
    return PassageTokens(
        tuple(title_ids),
        tuple(enc["input_ids"]),
        tuple(tuple(o) for o in enc["offset_mapping"]),
        tuple(-1 if w is None else w for w in words),
    )


def question_ids(tokenizer, question: str, max_question_len: int) -> list[int]:
    return tokenizer(question, add_special_tokens=False)["input_ids"][:max_question_len]


def encode(tokenizer, q_ids: Sequence[int], passage: PassageTokens, max_len: int) -> Encoded:
    """The input ids; the text loses tokens first, then the title, to fit ``max_len``."""
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    title = list(passage.title_ids)
    room = max_len - len(q_ids) - len(title) - 4
    if room < 1:  # keep at least one text token: cut the title
        title = title[: max(0, len(title) + room - 1)]
        room = max_len - len(q_ids) - len(title) - 4
    if room < 1:
        raise ValueError(f"max_len {max_len} leaves no room for passage text")
    text = list(passage.text_ids[:room])
    head = [cls, *q_ids, sep, *title, sep]
    return Encoded([*head, *text, sep], len(head), len(text))


def _nfd_with_map(text: str) -> tuple[str, list[int]]:
    """NFD of ``text`` and, for each of its characters, the index of the source character."""
    out: list[str] = []
    where: list[int] = []
    for i, ch in enumerate(text):
        dec = unicodedata.normalize("NFD", ch)
        out.append(dec)
        where.extend([i] * len(dec))
    return "".join(out), where


def answer_spans(
    tokenizer,
    answers: Sequence[str],
    match: str,
    text: str,
    passage: PassageTokens,
    enc: Encoded,
) -> list[tuple[int, int]]:
    """Every answer occurrence in the kept text, as inclusive (start, end) input positions."""
    n = enc.text_len
    spans: set[tuple[int, int]] = set()
    if match == "string":
        ids = passage.text_ids[:n]
        for answer in answers:
            a = tokenizer(answer, add_special_tokens=False)["input_ids"]
            if not a:
                continue
            for i in range(n - len(a) + 1):
                if tuple(ids[i : i + len(a)]) == tuple(a):
                    spans.add((i, i + len(a) - 1))
    else:
        nfd, where = _nfd_with_map(text)
        offsets = passage.offsets[:n]
        for pattern in answers:
            compiled = answer_regex(pattern, match == "regex_repaired")
            if compiled is None:
                continue
            for m in compiled.finditer(nfd):
                if m.end() <= m.start():
                    continue
                s, e = where[m.start()], where[m.end() - 1] + 1
                toks = [t for t, (a, b) in enumerate(offsets) if a < e and b > s]
                if toks:
                    spans.add((toks[0], toks[-1]))
    return sorted((enc.text_start + s, enc.text_start + e) for s, e in spans)


def pad_inputs(
    rows: Sequence[Sequence[Encoded | None]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask, text_mask) of shape [questions, passages, seq]; ``None``
    stands for a missing passage (all padding, masked out of selection by the caller)."""
    q, m = len(rows), max(len(r) for r in rows)
    seq = max((len(e.ids) for r in rows for e in r if e is not None), default=1)
    ids = torch.full((q, m, seq), pad_id, dtype=torch.long)
    att = torch.zeros((q, m, seq), dtype=torch.long)
    text = torch.zeros((q, m, seq), dtype=torch.bool)
    for i, r in enumerate(rows):
        for j, e in enumerate(r):
            if e is None:
                att[i, j, 0] = 1  # one attended pad token keeps the encoder's softmax finite
                continue
            ids[i, j, : len(e.ids)] = torch.tensor(e.ids, dtype=torch.long)
            att[i, j, : len(e.ids)] = 1
            text[i, j, e.text_start : e.text_start + e.text_len] = True
    return ids, att, text
