"""Decoding: the best answer span of one passage, and the answer text it stands for.

A span (s, e) of text tokens, e - s < ``max_answer_len``, scores start[s] + end[e] (DPR's
span score); the best is returned, widened to whole words (DPR extends a span that starts or
ends inside a WordPiece word to the word's edges) and read from the passage text by the
tokens' character offsets, so the answer is a substring of the passage.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from drpipe.reader.inputs import Encoded, PassageTokens


@dataclass(frozen=True)
class Span:
    start: int  # inclusive text-token positions
    end: int
    score: float
    text: str


def best_span(
    start: torch.Tensor, end: torch.Tensor, enc: Encoded, max_answer_len: int
) -> tuple[int, int, float]:
    """(s, e, score) with s <= e < s + max_answer_len inside the text; positions relative to
    the text's first token. ``start``/``end``: one passage's logits [seq]."""
    a, n = enc.text_start, enc.text_len
    s = start[a : a + n].float()
    e = end[a : a + n].float()
    scores = s[:, None] + e[None, :]
    idx = torch.arange(n)
    width = idx[None, :] - idx[:, None]
    valid = (width >= 0) & (width < max_answer_len)
    scores = scores.masked_fill(~valid, float("-inf"))
    flat = int(torch.argmax(scores))
    i, j = divmod(flat, n)
    return i, j, float(scores[i, j])


def span_text(text: str, passage: PassageTokens, i: int, j: int) -> tuple[int, int, str]:
    """Widen text tokens i..j to whole words and return (i, j, the passage substring)."""
    words = passage.word_ids
    while i > 0 and words[i] >= 0 and words[i - 1] == words[i]:
        i -= 1
    while j + 1 < len(words) and words[j] >= 0 and words[j + 1] == words[j]:
        j += 1
    return i, j, text[passage.offsets[i][0] : passage.offsets[j][1]]


def decode(
    start: torch.Tensor,
    end: torch.Tensor,
    enc: Encoded,
    text: str,
    passage: PassageTokens,
    max_answer_len: int,
) -> Span:
    i, j, score = best_span(start, end, enc, max_answer_len)
    i, j, answer = span_text(text, passage, i, j)
    return Span(i, j, score, answer)
