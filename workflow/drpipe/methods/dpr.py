"""DPR (Karpukhin et al., 2020): one vector per passage, NLL of the positive passage.

Per question: its positive (the first of ``positive_ctxs`` unless ``shuffle_positives``) and
``hard_negatives`` negatives of ``negative_type``:
- ``bm25``: from ``hard_negative_ctxs`` (shuffled per epoch; falls back to ``negative_ctxs``
  when a question has none and ``hard_negative_fallback``, as DPR's code does),
- ``random``: from ``negative_ctxs`` (shuffled per epoch),
- ``gold``: positives of other training questions drawn from the whole training set,
- ``none``: no extra negatives.

``in_batch: true`` scores every question against every passage of the global batch (all
positives and all negatives, shared by all questions: DPR's Table 3 "IB" and G.+BM25 rows);
``in_batch: false`` is 1-of-N training: each question against its own positive and its own
negatives only (Table 3 top block).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from drpipe.lazy import lazy_module
from drpipe.methods.base import CollateContext, DistContext, Method

# torch at first use: the planner reads these classes without it (drpipe.lazy).
torch = lazy_module("torch")
F = lazy_module("torch.nn.functional")

NEGATIVE_TYPES = ("bm25", "random", "gold", "none")


@dataclass
class DPRBatch:
    queries: dict[str, torch.Tensor]
    passages: dict[str, torch.Tensor]
    positive: torch.Tensor  # [b] index of each question's positive among this rank's passages
    owner: torch.Tensor  # [m] the (local) question each passage was drawn for
    pids: torch.Tensor  # [m] passage ids (-1 unknown), for masking false negatives
    n_questions: int
    short_negatives: int = 0  # negatives missing because a question had fewer than asked

    def to(self, device: torch.device) -> DPRBatch:
        move = lambda d: {k: v.to(device) for k, v in d.items()}  # noqa: E731
        return DPRBatch(
            move(self.queries),
            move(self.passages),
            self.positive.to(device),
            self.owner.to(device),
            self.pids.to(device),
            self.n_questions,
            self.short_negatives,
        )


def passage_id(ctx: dict) -> int:
    """Integer passage id of a context (DPR's released files store it as a string), or -1."""
    try:
        return int(ctx.get("passage_id", -1))
    except (TypeError, ValueError):
        return -1


def fp32(t: torch.Tensor) -> torch.Tensor:
    """At least float32 (bf16/fp16 activations are upcast; float64 stays float64)."""
    return t if t.dtype in (torch.float32, torch.float64) else t.float()


def dpr_scores(
    q: torch.Tensor,
    p: torch.Tensor,
    positive: torch.Tensor,
    owner: torch.Tensor,
    *,
    in_batch: bool,
    pids: torch.Tensor | None = None,
    mask_false_negatives: bool = False,
) -> torch.Tensor:
    """Scores [n_q, n_p] = q·pᵀ with columns a question must not see set to -inf."""
    # Scores in fp32 (or the vectors' float64) even inside a bf16 autocast region.
    with torch.autocast(q.device.type, enabled=False):
        scores = fp32(q) @ fp32(p).T
    rows = torch.arange(q.shape[0], device=q.device)
    if not in_batch:
        visible = owner.unsqueeze(0) == rows.unsqueeze(1)
    else:
        visible = torch.ones_like(scores, dtype=torch.bool)
    if mask_false_negatives and pids is not None:
        pos_pid = pids[positive]
        same = (pids.unsqueeze(0) == pos_pid.unsqueeze(1)) & (pos_pid.unsqueeze(1) >= 0)
        same[rows, positive] = False
        visible = visible & ~same
    return scores.masked_fill(~visible, float("-inf"))


def dpr_nll(scores: torch.Tensor, positive: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean NLL of the positive column, and the 1-based rank of each positive."""
    loss = F.cross_entropy(scores, positive, reduction="mean")
    pos_scores = scores.gather(1, positive.unsqueeze(1))
    ranks = (scores > pos_scores).sum(1) + 1
    return loss, ranks


class DPR(Method):
    name = "dpr"
    label = "DPR"
    corpus_units = "passages"
    hybrid = True
    # Local scales' lr and warm-up (the paper's 1e-5 and 5%, batch 128 for 40 epochs: the
    # paper scale's overlay); epochs and batch size are each scale's (config.yaml).
    defaults = {
        "lr": 2.0e-5,
        "warmup_ratio": 0.1,
        "negative_type": "bm25",  # bm25 | random | gold | none
        "hard_negatives": 1,  # per question; in-batch mode shares them across the batch
        "in_batch": True,
    }
    schema = {
        "hard_negatives": {"type": "integer", "minimum": 0},
        "negative_type": {"enum": list(NEGATIVE_TYPES)},
        "in_batch": {"type": "boolean"},
        "shuffle_positives": {"type": "boolean", "default": False},
        # no BM25 negative for a question: use its negative_ctxs (DPR's code)
        "hard_negative_fallback": {"type": "boolean", "default": True},
        # DPR lets a duplicate of the positive count as a negative
        "mask_false_negatives": {"type": "boolean", "default": False},
    }

    def __init__(self, cfg: dict[str, Any] | None = None):
        super().__init__(cfg)
        cfg = self.cfg
        if cfg["negative_type"] not in NEGATIVE_TYPES:
            raise ValueError(
                f"negative_type must be one of {NEGATIVE_TYPES}: {cfg['negative_type']!r}"
            )
        self.n_neg = 0 if cfg["negative_type"] == "none" else int(cfg["hard_negatives"])
        if self.n_neg < 0:
            raise ValueError("hard_negatives must be >= 0")
        if not cfg["in_batch"] and self.n_neg == 0:
            raise ValueError("1-of-N training (in_batch: false) needs hard_negatives > 0")

    def _negatives(
        self, index: int, ex: dict, positive: dict, rng: np.random.Generator, ctx: CollateContext
    ) -> list[dict]:
        n, kind = self.n_neg, self.cfg["negative_type"]
        if n == 0:
            return []
        if kind == "gold":
            pool = ctx.pool
            own = passage_id(positive)
            out: list[dict] = []
            # Bounded tries: a tiny pool may not have n other distinct positives.
            for j in rng.integers(0, len(pool), size=4 * n + 8):
                if len(out) == n:
                    break
                if int(j) == index or not pool[j]["positive_ctxs"]:
                    continue
                cand = pool[j]["positive_ctxs"][0]
                if own >= 0 and passage_id(cand) == own:
                    continue
                out.append(cand)
            return out
        hard = list(ex.get("hard_negative_ctxs") or [])
        rand = list(ex.get("negative_ctxs") or [])
        cands = hard if kind == "bm25" else rand
        if kind == "bm25" and not cands and self.cfg["hard_negative_fallback"]:
            cands = rand
        if ctx.sample and len(cands) > 1:
            cands = [cands[i] for i in rng.permutation(len(cands))]
        return cands[:n]

    def collate(self, items: Sequence[tuple[int, dict]], ctx: CollateContext) -> DPRBatch:
        questions, titles, texts, positive, owner, pids = [], [], [], [], [], []
        short = 0
        for qi, (index, ex) in enumerate(items):
            # Depends only on (seed, epoch, index): the same on any rank and after a resume.
            rng = np.random.default_rng([ctx.seed, ctx.epoch if ctx.sample else 0, index])
            pos_list = ex["positive_ctxs"]
            if ctx.sample and self.cfg["shuffle_positives"] and len(pos_list) > 1:
                pos = pos_list[int(rng.integers(len(pos_list)))]
            else:
                pos = pos_list[0]
            negs = self._negatives(index, ex, pos, rng, ctx)
            short += self.n_neg - len(negs)
            questions.append(ex["question"])
            positive.append(len(titles))
            for c in [pos, *negs]:
                titles.append(c.get("title") or "")
                texts.append(c["text"])
                owner.append(qi)
                pids.append(passage_id(c))
        model = ctx.model
        return DPRBatch(
            queries=model.tokenize_queries(questions),
            passages=model.tokenize_passages(titles, texts),
            positive=torch.tensor(positive, dtype=torch.long),
            owner=torch.tensor(owner, dtype=torch.long),
            pids=torch.tensor(pids, dtype=torch.long),
            n_questions=len(questions),
            short_negatives=short,
        )

    def loss(
        self, model: torch.nn.Module, batch: DPRBatch, dist: DistContext, train: bool = True
    ) -> tuple[torch.Tensor, dict[str, float]]:
        n_local_p = batch.owner.shape[0]
        q = dist.gather(fp32(model.query(batch.queries)))
        p = dist.gather(fp32(model.passage(batch.passages)))
        positive = dist.gather_index(batch.positive, n_local_p)
        owner = dist.gather_index(batch.owner, batch.n_questions)
        pids = dist.gather(batch.pids)
        scores = dpr_scores(
            q,
            p,
            positive,
            owner,
            in_batch=bool(self.cfg["in_batch"]),
            pids=pids,
            mask_false_negatives=bool(self.cfg["mask_false_negatives"]),
        )
        loss, ranks = dpr_nll(scores, positive)
        stats = {
            "loss": float(loss.detach()),
            "n_questions": float(q.shape[0]),
            "n_passages": float(p.shape[0]),
            "correct": float((ranks == 1).sum()),
            "rank_sum": float(ranks.sum()),
        }
        return loss, stats


METHOD = DPR
