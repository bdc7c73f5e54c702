"""DCSR's passage input and read-out: ``<sent>`` before each sentence, one forward pass per
passage, a sentence's vector at its marker (or the mean over its span)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from drpipe.lazy import lazy_module
from drpipe.methods.base import CorpusBlock, EncodeSettings, unit_id

# torch at first use: the planner reads these classes without it (drpipe.lazy).
torch = lazy_module("torch")

SENT_TOKEN = "<sent>"
# A literal "<sent>" in a text would read as a marker; this spelling tokenizes as a vanilla
# tokenizer tokenizes "<sent>" ("<", "sent", ">").
SENT_ESCAPE = "< sent>"
SENTENCE_POOLINGS = ("marker", "span")


def marked_pieces(text: str, spans: Sequence[tuple[int, int]]) -> list[str]:
    """Each sentence as ``<sent> `` + its text (spans tile the text, so the pieces do too)."""
    return [f"{SENT_TOKEN} " + text[s:e].replace(SENT_TOKEN, SENT_ESCAPE) for s, e in spans]


def marked_text(text: str, spans: Sequence[tuple[int, int]]) -> str:
    """``text`` with ``<sent> `` before each sentence."""
    return "".join(marked_pieces(text, spans))


@dataclass
class MarkedBatch:
    """Tokenized passages with markers: where each passage's sentences landed."""

    inputs: dict[str, torch.Tensor]
    positions: list[list[int]]  # per passage, the token position of each kept marker, in order
    n_sentences: list[int]  # per passage, sentences it has
    text_cut: list[bool]  # per passage, its last kept sentence lost words to max_length
    ends: list[list[int]]  # per kept sentence, the token after its last (next marker or [SEP])


def tokenize_marked(
    tokenizer,
    titles: Sequence[str],
    texts: Sequence[str],
    spans: Sequence[Sequence[tuple[int, int]]],
    max_length: int,
) -> MarkedBatch:
    """DPR's passage input (as ``encoders.tokenize_passages``: title and text as a pair,
    all-zero segments) of the marked texts, and the marker positions of every passage.

    Truncation removes text from the end, so the kept markers are those of the first
    sentences: position ``j`` is sentence ``j``. A sentence whose marker falls beyond
    ``max_length`` has no position (it is cut; callers count it).
    """
    pieces = [marked_pieces(t, sp) for t, sp in zip(texts, spans, strict=True)]
    marked = ["".join(p) for p in pieces]
    safe_titles = [(t or "").replace(SENT_TOKEN, SENT_ESCAPE) for t in titles]
    fast = bool(getattr(tokenizer, "is_fast", False))
    enc = tokenizer(
        safe_titles,
        marked,
        truncation="longest_first",
        max_length=max_length,
        padding=True,
        return_tensors="pt",
        return_offsets_mapping=fast,
    )
    offsets = enc.pop("offset_mapping", None)
    if "token_type_ids" in enc:
        enc["token_type_ids"] = torch.zeros_like(enc["token_type_ids"])
    sent_id = tokenizer.convert_tokens_to_ids(SENT_TOKEN)
    rows, cols = (enc["input_ids"] == sent_id).nonzero(as_tuple=True)
    positions: list[list[int]] = [[] for _ in marked]
    for r, c in zip(rows.tolist(), cols.tolist(), strict=True):
        positions[r].append(c)
    lengths = enc["attention_mask"].sum(1).tolist()
    ends = [
        pos[1:] + [int(n) - 1] if pos else [] for pos, n in zip(positions, lengths, strict=True)
    ]
    cut = []
    for i, ps in enumerate(pieces):
        kept = len(positions[i])
        if kept > len(ps):
            raise RuntimeError(f"passage {i}: {kept} markers for {len(ps)} sentences")
        if not kept:
            cut.append(bool(ps))
        elif offsets is not None:
            # The last kept sentence is whole when the text tokens reach its last character.
            seq = enc.sequence_ids(i)
            last = max(j for j, s in enumerate(seq) if s == 1)
            start = sum(len(p) for p in ps[: kept - 1])
            cut.append(int(offsets[i, last, 1]) < start + len(ps[kept - 1].rstrip()))
        else:  # slow tokenizers give no offsets: a full-length row may have lost words
            cut.append(int(enc["attention_mask"][i].sum()) >= max_length)
    return MarkedBatch(dict(enc), positions, [len(p) for p in pieces], cut, ends)


def sentence_states(
    encoder,
    inputs: dict[str, torch.Tensor],
    rows: torch.Tensor,
    starts: torch.Tensor,
    ends: torch.Tensor,
    pooling: str = "marker",
) -> torch.Tensor:
    """Sentence vectors [m, d] from one forward pass over the passages ``inputs``: the
    last-layer state at each sentence's marker (``marker``, DCSR), or the mean of the states
    from its marker to the token before the next one (``span``)."""
    states = encoder.hidden_states(inputs)
    if pooling == "marker":
        return states[rows, starts]
    at = torch.arange(states.shape[1], device=states.device)
    inside = (at >= starts[:, None]) & (at < ends[:, None])
    weights = inside.to(states.dtype) / inside.sum(1, keepdim=True).clamp(min=1)
    return torch.einsum("ml,mld->md", weights, states[rows])


def encode_sentences(
    model: Any,
    block: CorpusBlock,
    settings: EncodeSettings,
    pooling: str,
    counts: dict[str, int],
) -> tuple[np.ndarray, np.ndarray]:
    """A block of passages -> (unit ids, vectors): one forward pass per passage, one vector per
    sentence whose marker fits; ``counts`` gathers the cut and truncated sentences."""
    if block.sentences is None:
        raise ValueError("DCSR encodes sentences: the block has no sentence spans")
    encoder = model.passage.to(settings.device)
    n = len(block.texts)
    lengths = np.asarray([len(t) + len(block.titles[i]) for i, t in enumerate(block.texts)])
    order = np.argsort(lengths, kind="stable")
    per_passage: list[tuple[list[int], np.ndarray] | None] = [None] * n
    dim = int(encoder.model.config.hidden_size)
    was_training = encoder.training
    encoder.eval()
    try:
        from drpipe.encoders import autocast  # torch: at first use

        with torch.inference_mode(), autocast(settings.device, settings.bf16):
            for start in range(0, n, settings.batch_size):
                idx = order[start : start + settings.batch_size].tolist()
                mb = tokenize_marked(
                    model.tokenizer,
                    [block.titles[i] for i in idx],
                    [block.texts[i] for i in idx],
                    [block.sentences[i] for i in idx],
                    model.max_passage_len,
                )
                dev = settings.device
                index = {
                    "rows": [r for r, pos in enumerate(mb.positions) for _ in pos],
                    "starts": [c for pos in mb.positions for c in pos],
                    "ends": [e for ends in mb.ends for e in ends],
                }
                at_ = {k: torch.tensor(v, dtype=torch.long, device=dev) for k, v in index.items()}
                states = sentence_states(
                    encoder, {k: v.to(dev) for k, v in mb.inputs.items()}, at_["rows"],
                    at_["starts"], at_["ends"], pooling,
                )  # fmt: skip
                vecs = states.float().cpu().numpy()
                at = 0
                for r, i in enumerate(idx):
                    got = len(mb.positions[r])
                    per_passage[i] = (list(range(got)), vecs[at : at + got])
                    at += got
                    lost = mb.n_sentences[r] - got
                    counts["sentences"] = counts.get("sentences", 0) + mb.n_sentences[r]
                    counts["sentences_cut"] = counts.get("sentences_cut", 0) + lost
                    counts["passages_with_cut_sentences"] = counts.get(
                        "passages_with_cut_sentences", 0
                    ) + (lost > 0)
                    counts["sentences_text_truncated"] = counts.get(
                        "sentences_text_truncated", 0
                    ) + int(mb.text_cut[r] and got > 0)
    finally:
        encoder.train(was_training)
    pids, sents, out = [], [], []
    for i, item in enumerate(per_passage):
        got, vecs = item
        pids += [int(block.pids[i])] * len(got)
        sents += got
        out.append(vecs)
    vectors = np.concatenate(out) if out else np.empty((0, dim), dtype=np.float32)
    return unit_id(np.asarray(pids, np.int64), np.asarray(sents, np.int64)), vectors


def marker_index(sent_id: int):
    """``tokens.host_batches``' ``extra`` for marked passages: each kept marker's row, position
    and span end (the next marker, else the row's last token: ``tokenize_marked``'s ``ends``)
    from the padded ids, as ``tokenize_marked`` finds them."""

    def extra(ids: np.ndarray, mask: np.ndarray, rows: np.ndarray) -> dict[str, Any]:
        r, c = np.nonzero(ids == sent_id)  # row-major: torch's nonzero order
        got = np.bincount(r, minlength=len(ids))
        lengths = mask.sum(1)
        ends = np.empty_like(c)
        if len(c):
            ends[:-1] = c[1:]
            last = np.ones(len(c), bool)
            last[:-1] = r[1:] != r[:-1]  # a row's last marker ends at its last token
            ends[last] = lengths[r[last]] - 1
        return {
            "rows": torch.from_numpy(r.astype(np.int64)),
            "starts": torch.from_numpy(c.astype(np.int64)),
            "ends": torch.from_numpy(ends.astype(np.int64)),
            "got": got,
            "n_sentences": np.asarray(rows["sentences"], np.int64),
            "text_cut": (np.asarray(rows["flags"]) & 2) > 0,
        }

    return extra


def encode_marked_tokens(
    model: Any,
    shard,
    settings: EncodeSettings,
    block_size: int,
    pooling: str,
    counts: dict[str, int],
):
    """``encode_sentences`` of a token shard (``drpipe.tokens``, format ``marked``): (unit ids,
    vectors, passages) per block of ``block_size`` rows, from the same batches."""
    from drpipe.encoders import autocast  # torch: at first use
    from drpipe.tokens import feed, run_batches

    sent_id = shard.meta["tokenizer"]["sent_id"]
    if sent_id is None:
        raise ValueError(f"{shard.prefix}: the token shard records no {SENT_TOKEN} id")
    encoder = model.passage.to(settings.device)
    dim = int(encoder.model.config.hidden_size)
    was_training = encoder.training
    encoder.eval()
    per_passage: list = []

    def forward(b, inputs, extra):
        return sentence_states(
            encoder, inputs, extra["rows"], extra["starts"], extra["ends"], pooling
        )

    def add(key: str, n: int) -> None:
        counts[key] = counts.get(key, 0) + int(n)

    try:
        with torch.inference_mode(), autocast(settings.device, settings.bf16):
            batches = feed(shard, block_size, settings.batch_size, settings.device,
                           extra=marker_index(int(sent_id)))  # fmt: skip
            for b, vecs in run_batches(batches, forward, settings.device):
                if not per_passage:
                    per_passage = [None] * b.block_rows
                got, n_sent, cut = b.extra["got"], b.extra["n_sentences"], b.extra["text_cut"]
                at = 0
                for r, i in enumerate(b.idx.tolist()):
                    per_passage[i] = (list(range(int(got[r]))), vecs[at : at + got[r]])
                    at += int(got[r])
                lost = n_sent - got
                add("sentences", n_sent.sum())
                add("sentences_cut", lost.sum())
                add("passages_with_cut_sentences", (lost > 0).sum())
                add("sentences_text_truncated", (cut & (got > 0)).sum())
                if b.last:
                    pids_block = shard.rows["pid"][b.block_start : b.block_start + b.block_rows]
                    pids, sents, out = [], [], []
                    for i, (kept, v) in enumerate(per_passage):
                        pids += [int(pids_block[i])] * len(kept)
                        sents += kept
                        out.append(v)
                    vectors = np.concatenate(out) if out else np.empty((0, dim), np.float32)
                    units = unit_id(np.asarray(pids, np.int64), np.asarray(sents, np.int64))
                    yield units, vectors, b.block_rows
                    per_passage = []
    finally:
        encoder.train(was_training)
