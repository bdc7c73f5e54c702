"""DCSR (Wu et al., ACL 2022): contextual sentence vectors read at ``<sent>`` markers.

Paper section 3.2: "we insert a special <sent> token at the sentence boundaries in each passage,
and encode the passage as a whole"; a sentence's vector is the passage encoder's output at its
marker, so a passage costs one forward pass, as in DPR. The input is DPR's passage format with
the markers in the text: ``[CLS] title [SEP] <sent> s1 <sent> s2 ... [SEP]`` (the released
``BertTensorizer`` puts the title first too). Sentences are the rows of the corpus sentence
table (``corpus.sentences.splitter``; DCSR's own rule is ``dcsr``), so training and the index
cut passages identically. ``sentence_pooling: span`` instead averages the states of the
sentence's tokens (marker included) from the same pass: the read-out for an encoder trained for
mean pooling, as the local scales' all-MiniLM-L6-v2 is (their DPR runs pool by mean too).

Training (sections 3.2.1, 3.2.2 and 4.5), per question:

- positive: a sentence of the positive passage (``positive_ctxs[0]``, as the released
  ``process_ctx.py`` keeps only the first) that contains an answer by DPR's answer matching on
  the sentence text; drawn at random per epoch when several do (the released
  ``get_sent_representation`` draws among all sentences labelled 1). When none does (the
  answer straddles a sentence boundary, or lies only in sentences cut off by the maximum
  length) the question is dropped, as the released ``filter_data`` drops it, and counted.
- ``bm25_negatives`` (Table 4: 1 or 2): one random sentence from each of that many BM25
  hard-negative passages (shuffled per epoch; ``negative_ctxs`` when there are none and
  ``hard_negative_fallback``, as DPR's and DCSR's code do). A hard negative mined by a trained
  DCSR checkpoint (Table 5's DCSR-hard) names the sentence that checkpoint retrieved (its
  ``sentence``: the passage's best retrieved sentence); with ``mined_sentences`` that sentence
  is the negative ("sentence-specific hard negatives"), else a random one as for BM25.
- ``in_passage_negatives`` (0 or 1 in Table 4): random sentences of the positive passage
  without an answer; when the passage has none, "this in-passage negative sentence is
  substituted by another easy negative sentence from the corresponding BM25 negative passage"
  (3.2.2): another sentence of the first BM25 passage. ``in_passage_skip_adjacent`` also
  excludes the neighbours of answer sentences, as the released ``create_label`` does (the
  paper does not say so; off by default).
- the loss is DPR's NLL over all sampled sentences of the global batch (in-batch negatives:
  Appendix A counts 2 * 128 = 256 candidate sentences for 128 questions of "+1 BM25 random").

The question side: questions are encoded by the query encoder with the run's pooling, exactly
as ``drpipe encode-queries`` encodes them for retrieval. (The released code prefixes the
question with ``<sent>`` and reads position 1; our ``encode-queries`` has no method hook for
that, and training must use what retrieval uses.)

Retrieval (3.3): the top ``100 * k`` sentences (``k`` = average sentences per passage of the
corpus, measured on the sentence table when training starts and kept in the model's metadata),
then Score Normalization: a softmax over each question's retrieved sentence scores and
``HasAns(P) = 1 - prod(1 - p_s)`` over a passage's retrieved sentences (the released
``qa_validation.check_answer``), passages ranked by it. ``score_normalization`` is the one
units-to-passages function: retrieval, DCSR-hard mining (a retrieval over training questions)
and validation (passage rank among a batch's candidate sentences) all call it.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from drpipe.corpus.sentences import iter_sentence_groups
from drpipe.encoders import autocast
from drpipe.io import iter_parquet, parquet_num_rows
from drpipe.methods.base import (
    SENT_SLOTS,
    CollateContext,
    CorpusBlock,
    DistContext,
    EncodeSettings,
    Method,
    unit_id,
)
from drpipe.methods.dpr import dpr_nll, fp32, passage_id
from drpipe.qa.matching import has_answer

SENT_TOKEN = "<sent>"
# A literal "<sent>" in a text would read as a marker; this spelling tokenizes as a vanilla
# tokenizer tokenizes "<sent>" ("<", "sent", ">").
SENT_ESCAPE = "< sent>"
PASSAGE_SCORES = ("hasans", "max")
SENTENCE_POOLINGS = ("marker", "span")
# Passages without a corpus id (a foreign examples file) get ids from their text, above any
# real pid, so two questions sharing such a passage still share its sentences' units.
SYNTHETIC_PID = 1 << 40


# ----------------------------------------------------------------------------- markers


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


# ----------------------------------------------------------------------------- scoring


def score_normalization(
    unit_ids: np.ndarray, scores: np.ndarray, k: int, how: str = "hasans"
) -> tuple[np.ndarray, np.ndarray]:
    """Ranked sentence units [n, depth] -> top-``k`` passages [n, k] (pids, scores; pad -1).

    ``how="hasans"``: Score Normalization (DCSR 3.3): p = softmax over the question's retrieved
    sentence scores; a passage scores ``HasAns = 1 - prod(1 - p_s)`` over its retrieved
    sentences. Computed as ``-expm1(sum(log1p(-p)))``, so tiny probabilities stay exact and
    ranks never tie by rounding. ``how="max"``: a passage scores its best sentence. Ties go to
    the passage whose first sentence was retrieved first.

    Vectorised over all questions at once (no Python loop): a stable per-row sort by pid groups
    each question's sentences by passage, one ``reduceat`` sums them, and each group's value is
    placed at the column of its first sentence, so a stable per-row sort of that matrix ranks
    the passages with ties in retrieval order.
    """
    if how not in PASSAGE_SCORES:
        raise ValueError(f"passage score must be one of {PASSAGE_SCORES}, not {how!r}")
    units = np.asarray(unit_ids, dtype=np.int64)
    x = np.asarray(scores, dtype=np.float64)
    n, depth = units.shape
    out_p = np.full((n, k), -1, dtype=np.int64)
    out_s = np.full((n, k), -np.inf, dtype=np.float64)
    if n == 0 or depth == 0 or k == 0:
        return out_p, out_s
    valid = (units >= 0) & np.isfinite(x)
    x = np.where(valid, x, -np.inf)
    if how == "hasans":
        top = x.max(axis=1, keepdims=True)
        e = np.exp(x - np.where(np.isfinite(top), top, 0.0))
        z = e.sum(axis=1, keepdims=True)
        p = e / np.where(z > 0, z, 1.0)
        with np.errstate(divide="ignore"):
            value = np.log1p(-np.minimum(p, 1.0))  # log(1 - p); -inf only where p == 1
    else:
        value = x
    # Group by passage within each row with one plain sort of (pid, column) packed into an
    # int64: faster than a stable argsort, and columns order each group's sentences. Padding
    # gets pid -1, sorts first in its row and is dropped below.
    pids = np.where(valid, units // SENT_SLOTS, -1)
    shift = int(depth).bit_length()
    if int(pids.max()) < (1 << (62 - shift)):
        packed = np.sort((pids << shift) | np.arange(depth, dtype=np.int64), axis=1)
        order = packed & ((1 << shift) - 1)
        s_pid = packed >> shift
    else:  # pids too large to pack (never for real corpora): the stable argsort
        order = np.argsort(pids, axis=1, kind="stable")
        s_pid = np.take_along_axis(pids, order, axis=1)
    s_val = np.take_along_axis(value, order, axis=1)
    starts = np.ones((n, depth), dtype=bool)
    starts[:, 1:] = s_pid[:, 1:] != s_pid[:, :-1]
    flat_starts = np.flatnonzero(starts)
    if how == "hasans":
        group = np.add.reduceat(s_val.ravel(), flat_starts)  # log prod(1 - p_s)
    else:
        group = -np.maximum.reduceat(s_val.ravel(), flat_starts)
    rows, first_sorted = np.divmod(flat_starts, depth)
    first_col = order[rows, first_sorted]  # the group's first retrieved sentence (stable sort)
    keep = s_pid[rows, first_sorted] >= 0
    # Smaller key = better passage; each group sits at its first sentence's column.
    key = np.full((n, depth), np.inf)
    key[rows[keep], first_col[keep]] = group[keep]
    ranked = np.argsort(key, axis=1, kind="stable")[:, :k]
    best = np.take_along_axis(key, ranked, axis=1)
    hit = np.isfinite(best) | (best == -np.inf)
    cols = ranked.shape[1]
    out_p[:, :cols] = np.where(hit, units[np.arange(n)[:, None], ranked] // SENT_SLOTS, -1)
    if how == "hasans":
        out_s[:, :cols] = np.where(hit, -np.expm1(best), -np.inf)
    else:
        out_s[:, :cols] = np.where(hit, -best, -np.inf)
    return out_p, out_s


def positive_passage_ranks(
    scores: np.ndarray, units: np.ndarray, positive: np.ndarray, how: str = "hasans"
) -> np.ndarray:
    """1-based rank of each question's positive passage among the passages of the candidate
    sentences ``units`` (shared by all questions), ranked by ``score_normalization``."""
    n, m = scores.shape
    order = np.argsort(-scores, axis=1, kind="stable")
    ranked_units = np.broadcast_to(units, (n, m))[np.arange(n)[:, None], order]
    ranked_scores = np.take_along_axis(scores, order, axis=1)
    pids, _ = score_normalization(ranked_units, ranked_scores, m, how)
    target = (units[positive] // SENT_SLOTS)[:, None]
    hit = pids == target
    return np.where(hit.any(axis=1), hit.argmax(axis=1) + 1, m + 1)


# ----------------------------------------------------------------------------- the method


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
class _Passage:
    """A training passage as the corpus cuts it."""

    pid: int  # corpus pid (synthetic when the examples file gives none)
    title: str
    text: str
    spans: list[tuple[int, int]]
    sentence: int | None = None  # the sentence a trained checkpoint retrieved (DCSR-hard)


COUNTERS = (
    "examples",
    "dropped_no_answer_sentence",  # the positive passage has an answer, no single sentence has
    "dropped_positive_not_in_corpus",  # no sentences for it (pid unknown or text differs)
    "answer_in_several_sentences",
    "negatives_not_in_corpus",
    "train_dropped_positive_cut",  # answer sentences all beyond max length (per batch drawn)
    "train_in_passage_fallbacks",  # in-passage negative replaced by a BM25 sentence
    "train_mined_negative_sentences",  # hard negatives drawn as the miner's retrieved sentence
    "train_mined_sentence_cut",  # ... whose sentence lay beyond max length (a random one used)
    "train_questions",
    "train_sentences_cut",  # sentences of training passages beyond max length
)


class DCSR(Method):
    name = "dcsr"
    label = "DCSR"
    corpus_units = "sentences"
    hybrid = False  # the paper has no BM25 + DCSR row
    special_tokens = (SENT_TOKEN,)
    train_corpus = ("passages", "sentences")
    defaults = {
        "bm25_negatives": 1,
        "in_passage_negatives": 1,
        "hard_negative_fallback": True,
        "in_passage_skip_adjacent": False,
        "mined_sentences": True,
        "sentences_per_passage": None,
        "passage_score": "hasans",
        "sentence_pooling": "marker",
    }
    schema = {
        "bm25_negatives": {"type": "integer", "minimum": 0},
        "in_passage_negatives": {"type": "integer", "minimum": 0},
        "hard_negative_fallback": {"type": "boolean"},
        "in_passage_skip_adjacent": {"type": "boolean"},
        "mined_sentences": {"type": "boolean"},
        "sentences_per_passage": {"type": ["number", "null"], "exclusiveMinimum": 0},
        "passage_score": {"enum": list(PASSAGE_SCORES)},
        "sentence_pooling": {"enum": list(SENTENCE_POOLINGS)},
    }

    def __init__(self, cfg: dict[str, Any] | None = None):
        super().__init__(cfg)
        c = self.cfg
        if int(c["bm25_negatives"]) < 0 or int(c["in_passage_negatives"]) < 0:
            raise ValueError("bm25_negatives and in_passage_negatives must be >= 0")
        if c["passage_score"] not in PASSAGE_SCORES:
            raise ValueError(f"passage_score must be one of {PASSAGE_SCORES}")
        if c["sentence_pooling"] not in SENTENCE_POOLINGS:
            raise ValueError(f"sentence_pooling must be one of {SENTENCE_POOLINGS}")
        self.passages: dict[int, tuple[int, list[tuple[int, int]]]] = {}  # pid -> (crc, spans)
        self.counts: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self._cut_examples: set[int] = set()
        self._encode: dict[str, int] = {}

    # ---- training data

    def prepare(self, corpus: dict[str, Any], examples: Sequence[dict]) -> None:
        """Sentence spans of every passage the examples name; ``k`` from the sentence table."""
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
        self.passages = {
            pid: (crcs[pid], spans)
            for pid, spans in iter_sentence_groups(corpus["sentences"])
            if pid in crcs
        }
        if self.cfg["sentences_per_passage"] is None:
            # DCSR's k: retrieval searches 100 * k sentences; recorded in the model's metadata.
            n_p = parquet_num_rows(corpus["passages"])
            self.cfg["sentences_per_passage"] = round(
                parquet_num_rows(corpus["sentences"]) / max(n_p, 1), 4
            )
        self.counts["examples"] = len(examples)
        for ex in examples:
            pos = self._positive(ex)
            if pos is None:
                self.counts["dropped_positive_not_in_corpus"] += 1
            elif not pos[1]:
                self.counts["dropped_no_answer_sentence"] += 1
            elif len(pos[1]) > 1:
                self.counts["answer_in_several_sentences"] += 1
            for key in ("hard_negative_ctxs", "negative_ctxs"):
                self.counts["negatives_not_in_corpus"] += sum(
                    self._passage(c) is None for c in ex.get(key) or []
                )

    def _passage(self, ctx: dict) -> _Passage | None:
        """The ctx with the corpus's sentence spans, or None when the corpus lacks its text."""
        text = ctx["text"]
        pid = passage_id(ctx)
        known = self.passages.get(pid)
        if known is None or known[0] != zlib.crc32(text.encode("utf-8")):
            return None
        mined = ctx.get("sentence") if self.cfg["mined_sentences"] else None
        return _Passage(pid, ctx.get("title") or "", text, known[1], mined)

    def _positive(self, ex: dict) -> tuple[_Passage, list[int]] | None:
        """The positive passage and its answer-bearing sentences (DPR's answer matching)."""
        ctxs = ex.get("positive_ctxs") or []
        psg = self._passage(ctxs[0]) if ctxs else None
        if psg is None:
            return None
        match = ex.get("match", "string")
        hits = [
            j
            for j, (s, e) in enumerate(psg.spans)
            if has_answer(ex["answers"], psg.text[s:e], match)
        ]
        return psg, hits

    def _bm25_passages(self, ex: dict, rng: np.random.Generator, sample: bool) -> list[_Passage]:
        hard = list(ex.get("hard_negative_ctxs") or [])
        if not hard and self.cfg["hard_negative_fallback"]:
            hard = list(ex.get("negative_ctxs") or [])
        if sample and len(hard) > 1:
            hard = [hard[i] for i in rng.permutation(len(hard))]
        want = max(int(self.cfg["bm25_negatives"]), 1 if self.cfg["in_passage_negatives"] else 0)
        out: list[_Passage] = []
        for c in hard:
            if len(out) == want:
                break
            psg = self._passage(c)
            if psg is not None:
                out.append(psg)
        return out

    def collate(self, items: Sequence[tuple[int, dict]], ctx: CollateContext) -> DCSRBatch:
        model = ctx.model
        n_bm25 = int(self.cfg["bm25_negatives"])
        n_in = int(self.cfg["in_passage_negatives"])
        plans = []  # (index, example, positive passage, answer sentences, bm25 passages, rng)
        for index, ex in items:
            rng = np.random.default_rng([ctx.seed, ctx.epoch if ctx.sample else 0, index])
            pos = self._positive(ex)
            if pos is None or not pos[1]:
                continue  # counted once in prepare
            plans.append((index, ex, pos[0], pos[1], self._bm25_passages(ex, rng, ctx.sample), rng))
        passages = [p for plan in plans for p in [plan[2], *plan[4]]]
        if not passages:  # every question dropped: an empty batch (the loss handles it)
            empty = torch.zeros(0, dtype=torch.long)
            none = MarkedBatch({}, [], [], [], [])
            return DCSRBatch({}, none, empty, empty, empty, empty, empty, 0)
        marked = tokenize_marked(
            model.tokenizer,
            [p.title for p in passages],
            [p.text for p in passages],
            [p.spans for p in passages],
            model.max_passage_len,
        )
        questions, slot_row, slot_pos, slot_end, slot_unit, positive = [], [], [], [], [], []
        keep_rows = []
        short = 0
        row = 0
        for index, ex, pos_psg, answer_sents, bm25, rng in plans:
            rows = list(range(row, row + 1 + len(bm25)))
            row += len(rows)
            kept = [len(marked.positions[r]) for r in rows]  # sentences with a marker
            in_len = [j for j in answer_sents if j < kept[0]]
            if ctx.sample:
                self.counts["train_sentences_cut"] += sum(
                    marked.n_sentences[r] - kept[i] for i, r in enumerate(rows)
                )
            if not in_len:
                if ctx.sample:
                    self.counts["train_dropped_positive_cut"] += 1
                    self._cut_examples.add(index)
                continue
            chosen: list[tuple[int, int]] = [(0, int(rng.choice(in_len)))]  # (passage, sentence)
            bm25_picks = [
                (b, self._negative_sentence(bm25[b - 1], kept[b], rng, ctx.sample))
                for b in range(1, 1 + min(n_bm25, len(bm25)))
                if kept[b]  # a BM25 passage whose text the title crowded out has no sentence
            ]
            if n_in:
                skip = set(answer_sents)
                if self.cfg["in_passage_skip_adjacent"]:
                    skip |= {j + d for j in answer_sents for d in (-1, 1)}
                pool = [j for j in range(kept[0]) if j not in skip]
                take = rng.permutation(len(pool))[:n_in].tolist()
                chosen += [(0, pool[t]) for t in take]
                missing = n_in - len(take)
                if missing and bm25:
                    # 3.2.2: another sentence of the first BM25 passage stands in.
                    used = {s for b, s in bm25_picks if b == 1}
                    spare = [j for j in range(kept[1]) if j not in used]
                    extra = rng.permutation(len(spare))[:missing].tolist()
                    chosen += [(1, spare[t]) for t in extra]
                    if ctx.sample:
                        self.counts["train_in_passage_fallbacks"] += len(extra)
                    missing -= len(extra)
                short += missing
            chosen += bm25_picks
            short += n_bm25 - len(bm25_picks)
            positive.append(len(slot_row))
            psgs = [pos_psg, *bm25]
            for b, s in chosen:
                r = rows[b]
                keep_rows.append(r)
                slot_row.append(r)
                slot_pos.append(marked.positions[r][s])
                slot_end.append(marked.ends[r][s])
                slot_unit.append(int(unit_id([self._unit_pid(psgs[b])], [s])[0]))
            questions.append(ex["question"])
        if ctx.sample:
            self.counts["train_questions"] += len(questions)
        # Keep only the passages of kept questions, renumbered in order.
        used_rows = sorted(set(keep_rows))
        renumber = {r: i for i, r in enumerate(used_rows)}
        inputs = {k: v[used_rows] for k, v in marked.inputs.items()}
        if used_rows:
            width = int(inputs["attention_mask"].sum(1).max())
            inputs = {k: v[:, :width] for k, v in inputs.items()}
        batch_passages = MarkedBatch(
            inputs,
            [marked.positions[r] for r in used_rows],
            [marked.n_sentences[r] for r in used_rows],
            [marked.text_cut[r] for r in used_rows],
            [marked.ends[r] for r in used_rows],
        )
        return DCSRBatch(
            queries=model.tokenize_queries(questions) if questions else {},
            passages=batch_passages,
            slot_row=torch.tensor([renumber[r] for r in slot_row], dtype=torch.long),
            slot_pos=torch.tensor(slot_pos, dtype=torch.long),
            slot_end=torch.tensor(slot_end, dtype=torch.long),
            slot_unit=torch.tensor(slot_unit, dtype=torch.long),
            positive=torch.tensor(positive, dtype=torch.long),
            n_questions=len(questions),
            short_negatives=short,
        )

    def _negative_sentence(
        self, psg: _Passage, kept: int, rng: np.random.Generator, sample: bool
    ) -> int:
        """The mined sentence of a hard-negative passage when it has one within the maximum
        length (counted when cut off), else a random sentence of it."""
        if psg.sentence is not None:
            if 0 <= psg.sentence < kept:
                if sample:
                    self.counts["train_mined_negative_sentences"] += 1
                return int(psg.sentence)
            if sample:
                self.counts["train_mined_sentence_cut"] += 1
        return int(rng.integers(kept))

    @staticmethod
    def _unit_pid(psg: _Passage) -> int:
        if psg.pid >= 0:
            return psg.pid
        return SYNTHETIC_PID + zlib.crc32(f"{psg.title}\n{psg.text}".encode())

    # ---- loss

    def loss(
        self, model: torch.nn.Module, batch: DCSRBatch, dist: DistContext, train: bool = True
    ) -> tuple[torch.Tensor, dict[str, float]]:
        dim = int(model.query.model.config.hidden_size)
        if batch.n_questions:
            q_local = fp32(model.query(batch.queries))
            s_local = fp32(
                sentence_states(
                    model.passage,
                    batch.passages.inputs,
                    batch.slot_row,
                    batch.slot_pos,
                    batch.slot_end,
                    self.cfg["sentence_pooling"],
                )  # fmt: skip
            )
            touch = None
        else:
            # Every question of this rank was dropped: no vectors, but every rank must take part
            # in the gathers and give every parameter a (zero) gradient.
            device = batch.slot_unit.device
            q_local = torch.zeros(0, dim, device=device)
            s_local = torch.zeros(0, dim, device=device)
            touch = _zero_touch(model, device)
        m_local = s_local.shape[0]
        q = dist.gather(q_local)
        s = dist.gather(s_local)
        positive = dist.gather_index(batch.positive, m_local)
        units = dist.gather(batch.slot_unit)
        if q.shape[0] == 0:
            zero = touch if touch is not None else q_local.sum()
            return zero, {"loss": 0.0, "n_questions": 0.0, "correct": 0.0, "rank_sum": 0.0}
        with torch.autocast(q.device.type, enabled=False):
            scores = q @ s.T
        loss, sent_ranks = dpr_nll(scores, positive)
        if touch is not None:
            loss = loss + touch
        # Validation and model selection rank passages, as retrieval does: the positive
        # passage among the passages of the batch's candidate sentences, Score Normalization.
        ranks = positive_passage_ranks(
            scores.detach().double().cpu().numpy(),
            units.cpu().numpy(),
            positive.cpu().numpy(),
            self.cfg["passage_score"],
        )
        stats = {
            "loss": float(loss.detach()),
            "n_questions": float(q.shape[0]),
            "n_sentences": float(s.shape[0]),
            "correct": float((ranks == 1).sum()),
            "rank_sum": float(ranks.sum()),
            "sentence_correct": float((sent_ranks == 1).sum()),
            "sentence_rank_sum": float(sent_ranks.sum()),
        }
        return loss, stats

    # ---- state and report

    def state_dict(self) -> dict[str, Any]:
        return {"counts": dict(self.counts), "cut_examples": sorted(self._cut_examples)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            self.counts.update(state.get("counts", {}))
            self._cut_examples = set(state.get("cut_examples", []))

    def report(self) -> dict[str, Any]:
        c = self.counts
        return {
            "dcsr": {
                **c,
                "train_examples_with_positive_cut": len(self._cut_examples),
                "sentences_per_passage": self.cfg["sentences_per_passage"],
                "notes": {
                    "dropped_no_answer_sentence": "positive passage has an answer, no single "
                    "sentence does (it straddles a boundary): dropped, as DCSR's filter_data",
                    "train_*": "counted in every training batch drawn (all epochs)",
                },
            }
        }

    # ---- encoding

    def encode_corpus(
        self, model: Any, block: CorpusBlock, settings: EncodeSettings
    ) -> tuple[np.ndarray, np.ndarray]:
        """One forward pass per passage; one vector per sentence whose marker fits."""
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
        counts = self._encode
        try:
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
                    at_ = {
                        k: torch.tensor(v, dtype=torch.long, device=dev) for k, v in index.items()
                    }
                    states = sentence_states(
                        encoder, {k: v.to(dev) for k, v in mb.inputs.items()}, at_["rows"],
                        at_["starts"], at_["ends"], self.cfg["sentence_pooling"],
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

    def encode_report(self) -> dict[str, Any]:
        c = self._encode
        return {
            "sentences": c.get("sentences", 0),
            # Markers beyond max_passage_len: those sentences have no vector (reported here).
            "sentences_cut": c.get("sentences_cut", 0),
            "passages_with_cut_sentences": c.get("passages_with_cut_sentences", 0),
            # The last sentence kept its marker but lost words to max_passage_len.
            "sentences_text_truncated": c.get("sentences_text_truncated", 0),
        }

    # ---- retrieval

    def search_depth(self, k: int) -> int:
        spp = self.cfg["sentences_per_passage"]
        if spp is None:
            raise ValueError(
                "DCSR: sentences_per_passage is unknown (set at training from the sentence "
                "table, or in the method config)"
            )
        return int(math.ceil(k * float(spp)))

    def units_to_passages(
        self, unit_ids: np.ndarray, scores: np.ndarray, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        return score_normalization(unit_ids, scores, k, self.cfg["passage_score"])


def _zero_touch(model, device: torch.device) -> torch.Tensor:
    """0 * the outputs of both encoders on a one-token input: a zero loss whose gradient
    reaches the parameters a real batch reaches (ranks must agree on which have one)."""
    tok = model.tokenizer
    ids = torch.tensor([[tok.cls_token_id, tok.sep_token_id]], device=device)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if "token_type_ids" in getattr(tok, "model_input_names", ()):
        batch["token_type_ids"] = torch.zeros_like(ids)
    out = model.query(batch).sum()
    if model.passage is not model.query:
        out = out + model.passage.hidden_states(batch).sum()
    return out * 0.0


METHOD = DCSR
