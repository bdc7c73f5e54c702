"""DCSR (Wu et al., ACL 2022): contextual sentence vectors read at ``<sent>`` markers.

Paper section 3.2: "we insert a special <sent> token at the sentence boundaries in each passage,
and encode the passage as a whole"; a sentence's vector is the passage encoder's output at its
marker, so a passage costs one forward pass, as in DPR. The input is DPR's passage format with
the markers in the text: ``[CLS] title [SEP] <sent> s1 <sent> s2 ... [SEP]`` (the released
``BertTensorizer`` puts the title first too). Sentences are the rows of the corpus sentence
table (``corpus.sentences.splitter``; DCSR's own rule is ``dcsr``), so training and the index
cut passages identically. A training passage the corpus lacks (DPR's released files name
``psgs_w100`` ids; a corpus built from the dump has its own) is cut from its own text by that
same splitter (``unmatched_passages: split``, as the released ``process_ctx.py`` cuts the
training files), or its example dropped (``drop``); either way counted, and the loop stops a
run that cannot use more than ``max_dropped_fraction`` of a file's examples. ``sentence_pooling: span`` instead averages the states of the
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
and validation's passage measure (passage rank among a batch's candidate sentences) all call
it.

Validation (Figure 4, Appendix A, and checkpoint selection) counts, as the paper and the released
``train_dense_encoder.py`` do, the positive sentence ranked first among the candidate sentences
of its validation batch; the passage measure above is reported beside it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from drpipe.io import parquet_num_rows
from drpipe.lazy import lazy_module
from drpipe.methods.base import (
    CollateContext,
    CorpusBlock,
    DistContext,
    EncodeSettings,
    Method,
    unit_id,
)

# By module: the tests watch Score Normalization where retrieval and validation both call it.
from drpipe.methods.dcsr_parts import scoring
from drpipe.methods.dcsr_parts.markers import (
    SENT_TOKEN,
    SENTENCE_POOLINGS,
    MarkedBatch,
    encode_marked_tokens,
    encode_sentences,
    sentence_states,
    tokenize_marked,
)
from drpipe.methods.dcsr_parts.training_data import (
    DCSRBatch,
    Passage,
    answer_sentences,
    corpus_passage,
    own_text_spans,
    sentence_spans,
    unit_pid,
)
from drpipe.methods.dpr import dpr_nll, fp32

# torch at first use: the planner reads these classes without it (drpipe.lazy).
torch = lazy_module("torch")

# unmatched_passages: what becomes of a passage of the examples that the corpus lacks (its id
# unknown there, or another text under it): "split" cuts its own text with the corpus's
# splitter; "drop" drops an example whose positive it is (counted; the loop stops a run that
# loses more than max_dropped_fraction of a file).
UNMATCHED = ("split", "drop")
DROP_NOT_IN_CORPUS = (
    "positive passage not in the corpus (its passage_id unknown there or its text different) "
    "and unmatched_passages is 'drop'"
)
DROP_NO_ANSWER_SENTENCE = (
    "no single sentence of the positive passage contains an answer (it straddles a sentence "
    "boundary, or no answer matches the passage), as DCSR's filter_data drops it"
)

COUNTERS = (
    "examples",
    "dropped_no_answer_sentence",  # the positive passage has an answer, no single sentence has
    "dropped_positive_not_in_corpus",  # unmatched_passages "drop": pid unknown or text differs
    "passages_cut_from_own_text",  # distinct passage texts the corpus lacks, cut by its splitter
    "positives_cut_from_own_text",  # examples whose positive passage is one of them
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
    train_corpus = ("passages", "sentences", "sentences_report")
    extra_measures = ("passage",)
    # DCSR 4.2: DPR's settings, lr 2e-5 (40 epochs, batch 8 x 16: the loop's defaults; each
    # scale sets its own in config.yaml); 10% warm-up (the paper scale: the released config's
    # 1,237 steps). One BM25 passage per question, like DPR's one hard negative.
    defaults = {
        "lr": 2.0e-5,
        "warmup_ratio": 0.1,
        "bm25_negatives": 1,  # BM25 hard-negative passages per question, one random sentence each
        "in_passage_negatives": 1,  # non-answer sentences of the positive passage (3.2.2)
        "hard_negative_fallback": True,  # no BM25 negatives: use negative_ctxs (DPR's, DCSR's code)
        "in_passage_skip_adjacent": False,  # true: also skip answer sentences' neighbours (code)
        # A negative mined by a trained DCSR names its retrieved sentence (Table 5, DCSR-hard):
        # use it; false: a random sentence of it.
        "mined_sentences": True,
        "sentences_per_passage": None,  # DCSR's k (search depth 100 x k); None: measured
        "passage_score": "hasans",  # hasans: Score Normalization (3.3) | max: best sentence
        # marker: a sentence's vector is the state at its <sent> | span: the mean of its
        # tokens' states in the same forward pass (local scales: config.yaml says why).
        "sentence_pooling": "marker",
        # A training passage the corpus lacks (its id unknown there, or another text under it,
        # as DPR's released files with psgs_w100 ids against a corpus built from the dump):
        # split = cut its own text with the corpus's sentence splitter (the released
        # process_ctx.py cuts the training files with the rule that cuts the index) | drop =
        # drop its example.
        "unmatched_passages": "split",
        "max_dropped_fraction": 0.05,  # stop when more than this share of a file is unusable
    }
    schema = {
        "bm25_negatives": {"type": "integer", "minimum": 0},
        "in_passage_negatives": {"type": "integer", "minimum": 0},
        "hard_negative_fallback": {"type": "boolean"},
        "in_passage_skip_adjacent": {"type": "boolean"},
        "mined_sentences": {"type": "boolean"},
        "sentences_per_passage": {"type": ["number", "null"], "exclusiveMinimum": 0},
        "passage_score": {"enum": list(scoring.PASSAGE_SCORES)},
        "sentence_pooling": {"enum": list(SENTENCE_POOLINGS)},
        "unmatched_passages": {"enum": list(UNMATCHED)},
    }

    def __init__(self, cfg: dict[str, Any] | None = None):
        super().__init__(cfg)
        c = self.cfg
        if int(c["bm25_negatives"]) < 0 or int(c["in_passage_negatives"]) < 0:
            raise ValueError("bm25_negatives and in_passage_negatives must be >= 0")
        if c["passage_score"] not in scoring.PASSAGE_SCORES:
            raise ValueError(f"passage_score must be one of {scoring.PASSAGE_SCORES}")
        if c["sentence_pooling"] not in SENTENCE_POOLINGS:
            raise ValueError(f"sentence_pooling must be one of {SENTENCE_POOLINGS}")
        if c["unmatched_passages"] not in UNMATCHED:
            raise ValueError(f"unmatched_passages must be one of {UNMATCHED}")
        self.passages: dict[int, tuple[int, list[tuple[int, int]]]] = {}  # pid -> (crc, spans)
        self.own: dict[str, list[tuple[int, int]]] = {}  # text -> spans: passages it lacks
        self._dropped: dict[int, str] = {}
        self.counts: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self._cut_examples: set[int] = set()
        self._encode: dict[str, int] = {}

    # ---- training data

    def prepare(self, corpus: dict[str, Any], examples: Sequence[dict]) -> None:
        """Sentence spans of every passage the examples name (the corpus's, else cut from the
        passage's own text by the corpus's splitter); ``k`` from the sentence table."""
        self.passages = sentence_spans(corpus, examples)
        self.own = {}
        if self.cfg["unmatched_passages"] == "split":
            if "sentences_report" not in corpus:
                raise ValueError(
                    "DCSR: unmatched_passages 'split' needs the sentence table's report "
                    "(corpus table 'sentences_report', which names its splitter)"
                )
            self.own = own_text_spans(self.passages, examples, corpus["sentences_report"])
            self.counts["passages_cut_from_own_text"] = len(self.own)
        if self.cfg["sentences_per_passage"] is None:
            # DCSR's k: retrieval searches 100 * k sentences; recorded in the model's metadata.
            n_p = parquet_num_rows(corpus["passages"])
            self.cfg["sentences_per_passage"] = round(
                parquet_num_rows(corpus["sentences"]) / max(n_p, 1), 4
            )
        self.counts["examples"] = len(examples)
        self._dropped = {}
        for i, ex in enumerate(examples):
            pos = self._positive(ex)
            if pos is None:
                self.counts["dropped_positive_not_in_corpus"] += 1
                self._dropped[i] = DROP_NOT_IN_CORPUS
            elif not pos[1]:
                self.counts["dropped_no_answer_sentence"] += 1
                self._dropped[i] = DROP_NO_ANSWER_SENTENCE
            elif len(pos[1]) > 1:
                self.counts["answer_in_several_sentences"] += 1
            if pos is not None and pos[0].pid < 0:
                self.counts["positives_cut_from_own_text"] += 1
            for key in ("hard_negative_ctxs", "negative_ctxs"):
                self.counts["negatives_not_in_corpus"] += sum(
                    self._passage(c) is None for c in ex.get(key) or []
                )

    def dropped_examples(self) -> dict[int, str]:
        return dict(self._dropped)

    def _passage(self, ctx: dict) -> Passage | None:
        return corpus_passage(self.passages, ctx, self.cfg["mined_sentences"], self.own)

    def _positive(self, ex: dict) -> tuple[Passage, list[int]] | None:
        """The positive passage and its answer-bearing sentences (DPR's answer matching)."""
        ctxs = ex.get("positive_ctxs") or []
        psg = self._passage(ctxs[0]) if ctxs else None
        return None if psg is None else (psg, answer_sentences(psg, ex))

    def _bm25_passages(self, ex: dict, rng: np.random.Generator, sample: bool) -> list[Passage]:
        hard = list(ex.get("hard_negative_ctxs") or [])
        if not hard and self.cfg["hard_negative_fallback"]:
            hard = list(ex.get("negative_ctxs") or [])
        if sample and len(hard) > 1:
            hard = [hard[i] for i in rng.permutation(len(hard))]
        want = max(int(self.cfg["bm25_negatives"]), 1 if self.cfg["in_passage_negatives"] else 0)
        out: list[Passage] = []
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
                slot_unit.append(int(unit_id([unit_pid(psgs[b])], [s])[0]))
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
        self, psg: Passage, kept: int, rng: np.random.Generator, sample: bool
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
            return zero, {"loss": 0.0, "n_questions": 0.0, "correct": 0.0, "rank_sum": 0.0,
                          "passage_correct": 0.0, "passage_rank_sum": 0.0}  # fmt: skip
        with torch.autocast(q.device.type, enabled=False):
            scores = q @ s.T
        loss, sent_ranks = dpr_nll(scores, positive)
        if touch is not None:
            loss = loss + touch
        # Validation and checkpoint selection use the paper's measure (Appendix A, and the
        # released code's "correct prediction ratio"): the positive sentence ranked first
        # among the batch's candidate sentences. Beside it, as retrieval ranks: the positive
        # passage among the passages of those sentences, by Score Normalization.
        ranks = scoring.positive_passage_ranks(
            scores.detach().double().cpu().numpy(),
            units.cpu().numpy(),
            positive.cpu().numpy(),
            self.cfg["passage_score"],
        )
        stats = {
            "loss": float(loss.detach()),
            "n_questions": float(q.shape[0]),
            "n_sentences": float(s.shape[0]),
            "correct": float((sent_ranks == 1).sum()),
            "rank_sum": float(sent_ranks.sum()),
            "passage_correct": float((ranks == 1).sum()),
            "passage_rank_sum": float(ranks.sum()),
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
                    "dropped_no_answer_sentence": DROP_NO_ANSWER_SENTENCE,
                    "dropped_positive_not_in_corpus": DROP_NOT_IN_CORPUS,
                    "*_cut_from_own_text": "passages the corpus lacks (another id or text), cut "
                    "from their own text by the corpus's splitter (unmatched_passages: split)",
                    "train_*": "counted in every training batch drawn (all epochs)",
                },
            }
        }

    # ---- encoding

    def encode_corpus(
        self, model: Any, block: CorpusBlock, settings: EncodeSettings
    ) -> tuple[np.ndarray, np.ndarray]:
        """One forward pass per passage; one vector per sentence whose marker fits."""
        return encode_sentences(model, block, settings, self.cfg["sentence_pooling"], self._encode)

    token_format = "marked"

    @classmethod
    def tokenize_corpus(cls, tokenizer, fmt, max_length, titles, texts, spans=None):
        from drpipe.tokens import unpadded

        mb = tokenize_marked(tokenizer, titles, texts, spans, max_length)
        ids = unpadded(mb.inputs, len(texts), tokenizer.padding_side)
        return ids, np.asarray(mb.n_sentences, np.int32), np.asarray(mb.text_cut, bool)

    def encode_tokens(self, model: Any, shard: Any, settings: EncodeSettings, block_size: int):
        return encode_marked_tokens(
            model, shard, settings, block_size, self.cfg["sentence_pooling"], self._encode
        )

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
        return scoring.score_normalization(unit_ids, scores, k, self.cfg["passage_score"])


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
