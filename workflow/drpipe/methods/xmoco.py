"""xMoCo (Yang et al., ACL-IJCNLP 2021): cross momentum contrast with two fast and two slow encoders.

The model (what the optimizer sees and what is saved) is the two fast encoders, exactly a DPR
bi-encoder; this method object keeps everything else (section 4.2):

- the slow encoders ``E_q^slow`` and ``E_p^slow``: copies of the fast ones made in ``attach``,
  updated after every optimizer step by ``slow <- alpha * fast + (1 - alpha) * slow``
  (one slow encoder when the model is tied, Table 3);
- two ring-buffer queues of slow vectors: passages (each with its passage id) and questions
  (each with its example index and the passage id of its positive).

The slow encoders run without dropout (the paper's "dropout is 0.1 for all encoders" is read as
the trained ones): they get no gradient, so dropout regularises nothing there and would only
add noise to vectors reused as targets for many steps.

Per step, over the global batch (gathered across ranks, so every rank holds the same queues):

    L = lambda * L_qp + (1 - lambda) * L_pq + hard_weight * L_hard

- ``L_qp``: each fast question vector against the passage queue; its positive is the slow
  vector of its own positive passage.
- ``L_pq``: each fast positive-passage vector against the question queue; its positive is the
  slow vector of its own question.
- ``L_hard`` (section 4.5, when ``hard_negatives > 0``): DPR's in-batch loss with the fast
  encoders only, over the batch's positives and one BM25 hard negative per question; the hard
  negatives' slow vectors are pushed into the passage queue too.

Batch adaptation (section 4.3): the whole global batch's slow vectors are pushed together, and
the loss scores against the queue *with* them in it, i.e. against the ``queue_size`` newest
entries. The paper's formulas put the positive's slow vector inside the sum over ``Q_p``, and
Figure 2's smallest queue, twice the batch, "reverses to in-batch negatives" only when the
current batch is in the queue being scored. The write happens in place before scoring (no
copy of the queue is ever made, so a 16,384-entry queue costs its own bytes and no more); the
loss is therefore called once per optimizer step when ``train`` is true.

False negatives (section 4.6): queue entries whose passage id equals the current positive's
(another copy of the positive, or a question answered by the same passage) are masked; the
counts are in ``report()``. Validation (``train=False``) scores the fast encoders the way
retrieval uses them (DPR's in-batch ranking) and never reads or writes the queues.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from drpipe.lazy import lazy_module
from drpipe.methods.base import CollateContext, DistContext, Method
from drpipe.methods.dpr import DPR, NEGATIVE_TYPES, DPRBatch, dpr_nll, dpr_scores, fp32

# torch at first use: the planner reads these classes without it (drpipe.lazy).
torch = lazy_module("torch")
F = lazy_module("torch.nn.functional")

EMPTY = -2  # id of a queue slot never written (-1 is a passage of unknown id)


@dataclass
class XMoCoBatch:
    dpr: DPRBatch  # questions, their positive and hard negative passages, pids
    qids: torch.Tensor  # [b] example index of each question (its id in the question queue)

    @property
    def n_questions(self) -> int:
        return self.dpr.n_questions

    @property
    def short_negatives(self) -> int:
        return self.dpr.short_negatives

    def to(self, device: torch.device) -> XMoCoBatch:
        return XMoCoBatch(self.dpr.to(device), self.qids.to(device))


class Queue:
    """A ring buffer of ``size`` vectors with two int64 keys per entry.

    ``key`` is what false negatives are matched on (a passage id: the passage's own, or for a
    question its positive's); ``ident`` says what the entry encodes (passage id, or example
    index). Vectors are allocated at the first push, when their width and device are known.
    """

    def __init__(self, size: int):
        self.size = int(size)
        self.vectors: torch.Tensor | None = None
        self.key = torch.full((self.size,), EMPTY, dtype=torch.long)
        self.ident = torch.full((self.size,), EMPTY, dtype=torch.long)
        self.ptr = 0  # next slot to write
        self.pushed = 0  # entries ever pushed

    def push(self, vectors: torch.Tensor, key: torch.Tensor, ident: torch.Tensor) -> torch.Tensor:
        """Write ``vectors`` (oldest first) over the oldest entries; returns their slots."""
        n = vectors.shape[0]
        if n > self.size:
            raise ValueError(
                f"queue_size {self.size} is smaller than the {n} vectors one global batch "
                "pushes: a batch's own positives would be overwritten (use at least "
                "batch_size * (1 + hard_negatives))"
            )
        if self.vectors is None:
            self.vectors = vectors.new_zeros((self.size, vectors.shape[1]), dtype=torch.float32)
        if self.vectors.device != vectors.device:  # a checkpoint loaded on another device
            self.vectors = self.vectors.to(vectors.device)
        self.key = self.key.to(vectors.device)
        self.ident = self.ident.to(vectors.device)
        slots = (self.ptr + torch.arange(n, device=vectors.device)) % self.size
        self.vectors[slots] = vectors.detach().float()
        self.key[slots] = key
        self.ident[slots] = ident
        self.ptr = (self.ptr + n) % self.size
        self.pushed += n
        return slots

    def order(self) -> torch.Tensor:
        """Slots holding entries, oldest first."""
        if self.pushed < self.size:
            return torch.arange(self.pushed, device=self.key.device)
        return (self.ptr + torch.arange(self.size, device=self.key.device)) % self.size

    def state_dict(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "vectors": self.vectors,
            "key": self.key,
            "ident": self.ident,
            "ptr": self.ptr,
            "pushed": self.pushed,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if int(state["size"]) != self.size:
            raise ValueError(f"checkpoint queue size {state['size']} != queue_size {self.size}")
        device = self.key.device
        vec = state["vectors"]
        self.vectors = None if vec is None else vec.to(device, torch.float32).clone()
        self.key = state["key"].to(device).clone()
        self.ident = state["ident"].to(device).clone()
        self.ptr, self.pushed = int(state["ptr"]), int(state["pushed"])


def queue_scores(
    x: torch.Tensor,
    queue: Queue,
    pos_slot: torch.Tensor,
    pos_key: torch.Tensor,
    mask_false_negatives: bool,
) -> tuple[torch.Tensor, int]:
    """Scores [b, size] of vectors ``x`` against every queue slot; empty slots and (if asked)
    entries sharing the positive's key, other than the positive itself, are -inf. Returns the
    scores and the number of entries masked as false negatives."""
    assert queue.vectors is not None
    rows = torch.arange(x.shape[0], device=x.device)
    hidden = (queue.key == EMPTY).unsqueeze(0).expand(x.shape[0], -1)
    n_masked = 0
    if mask_false_negatives:
        same = (queue.key.unsqueeze(0) == pos_key.unsqueeze(1)) & (pos_key.unsqueeze(1) >= 0)
        same[rows, pos_slot] = False
        n_masked = int(same.sum())
        hidden = hidden | same
    with torch.autocast(x.device.type, enabled=False):
        # As queue @ x^T: with the queue as the untransposed left operand, CPU BLAS packs far
        # less of it (measured 16,384 x 768: 10 MiB of extra peak the other way, 2 MiB this way).
        scores = (queue.vectors @ fp32(x).T).T
    # In place: the product is fresh and its backward does not read it; one [b, size] fewer.
    return scores.masked_fill_(hidden, float("-inf")), n_masked


def momentum_update(fast: torch.nn.Module, slow: torch.nn.Module, alpha: float) -> None:
    """``slow <- alpha * fast + (1 - alpha) * slow`` for every parameter; buffers are copied.

    One fused lerp pass over the weights (half the memory traffic of a multiply then an add:
    this runs every step over both encoders). PyTorch's lerp computes ``slow + a (fast - slow)``
    for a < 0.5 and ``fast - (1 - a)(fast - slow)`` otherwise, so alpha = 0 keeps ``slow`` and
    alpha = 1 gives ``fast`` exactly.
    """
    with torch.no_grad():
        fp, sp = list(fast.parameters()), list(slow.parameters())
        if len(fp) != len(sp):
            raise ValueError("fast and slow encoders differ in structure")
        torch._foreach_lerp_(sp, fp, float(alpha))
        for b_fast, b_slow in zip(fast.buffers(), slow.buffers(), strict=True):
            b_slow.copy_(b_fast)


class XMoCo(Method):
    name = "xmoco"
    label = "xMoCo"
    corpus_units = "passages"
    hybrid = True  # Table 2 has DPR+BM25 and xMoCo+BM25 rows
    # Paper 5.4: Adam lr 3e-5 with 5% warm-up, queue 16,384, alpha 0.001 (batch 128 for 40
    # epochs: the loop's defaults; each scale sets its own in config.yaml).
    defaults = {
        "lr": 3.0e-5,
        "warmup_ratio": 0.05,
        "queue_size": 16384,  # slow vectors per queue (questions; passages)
        "alpha": 0.001,  # slow <- alpha * fast + (1 - alpha) * slow, after every step
        "lambda_qp": 0.5,  # L = lambda * L_qp + (1 - lambda) * L_pq
        "hard_negatives": 1,  # BM25 hard negatives per question for L_hard (4.5); 0 = none
        "negative_type": "bm25",
        "hard_weight": 1.0,  # weight of L_hard in the multitask sum
        "mask_false_negatives": True,  # 4.6: queue entries of the positive's passage masked
    }
    schema = {
        "queue_size": {"type": "integer", "minimum": 2},
        "alpha": {"type": "number", "minimum": 0, "maximum": 1},
        "lambda_qp": {"type": "number", "minimum": 0, "maximum": 1},
        "hard_negatives": {"type": "integer", "minimum": 0},
        "negative_type": {"enum": list(NEGATIVE_TYPES)},
        "hard_weight": {"type": "number", "minimum": 0},
        "mask_false_negatives": {"type": "boolean"},
        "shuffle_positives": {"type": "boolean", "default": False},
        "hard_negative_fallback": {"type": "boolean", "default": True},
    }

    def __init__(self, cfg: dict[str, Any] | None = None):
        super().__init__(cfg)
        c = self.cfg
        # Batches are DPR's (positive + BM25 hard negatives per question, seeded per epoch).
        self._dpr = DPR(
            {
                "hard_negatives": int(c["hard_negatives"]),
                "negative_type": c["negative_type"],
                "in_batch": True,
                "shuffle_positives": bool(c["shuffle_positives"]),
                "hard_negative_fallback": bool(c["hard_negative_fallback"]),
                "mask_false_negatives": bool(c["mask_false_negatives"]),
            }
        )
        self.alpha = float(c["alpha"])
        self.lam = float(c["lambda_qp"])
        self.mask = bool(c["mask_false_negatives"])
        self.slow_q: torch.nn.Module | None = None
        self.slow_p: torch.nn.Module | None = None
        self.tied = False
        self.queue_p = Queue(int(c["queue_size"]))
        self.queue_q = Queue(int(c["queue_size"]))
        self.stats = self._fresh_stats()

    @staticmethod
    def _fresh_stats() -> dict[str, Any]:
        return {
            "steps": 0,
            "questions": 0,
            "masked_qp": 0,
            "masked_pq": 0,
            "max_masked_qp": 0,
            "max_masked_pq": 0,
            "loss_qp": 0.0,
            "loss_pq": 0.0,
            "loss_hard": 0.0,
        }

    # ---- state kept outside the model

    def attach(self, model: torch.nn.Module) -> None:
        """Slow encoders start as copies of the fast ones (no gradient, never optimised)."""

        def frozen_copy(enc: torch.nn.Module) -> torch.nn.Module:
            slow = copy.deepcopy(enc)
            slow.requires_grad_(False)
            # Slow vectors are stored targets reused for many steps: no dropout noise in them.
            return slow.eval()

        self.tied = bool(getattr(model, "tied", model.query is model.passage))
        self.slow_q = frozen_copy(model.query)
        self.slow_p = self.slow_q if self.tied else frozen_copy(model.passage)

    def after_step(self, model: torch.nn.Module) -> None:
        momentum_update(model.query, self.slow_q, self.alpha)
        if not self.tied:
            momentum_update(model.passage, self.slow_p, self.alpha)

    def state_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "tied": self.tied,
            "slow_query": self.slow_q.state_dict(),
            "queue_passages": self.queue_p.state_dict(),
            "queue_questions": self.queue_q.state_dict(),
            "stats": dict(self.stats),
        }
        if not self.tied:
            out["slow_passage"] = self.slow_p.state_dict()
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if bool(state["tied"]) != self.tied:
            raise ValueError("checkpoint and model differ in tied encoders")
        self.slow_q.load_state_dict(state["slow_query"])
        if not self.tied:
            self.slow_p.load_state_dict(state["slow_passage"])
        self.queue_p.load_state_dict(state["queue_passages"])
        self.queue_q.load_state_dict(state["queue_questions"])
        self.stats = {**self._fresh_stats(), **state["stats"]}

    def report(self) -> dict[str, Any]:
        s = self.stats
        steps = max(s["steps"], 1)
        return {
            "xmoco": {
                "queue_size": self.queue_p.size,
                "alpha": self.alpha,
                "lambda_qp": self.lam,
                "tied": self.tied,
                "steps": s["steps"],
                "passages_pushed": self.queue_p.pushed,
                "questions_pushed": self.queue_q.pushed,
                "masked_false_negatives": {
                    "qp_per_step": s["masked_qp"] / steps,
                    "pq_per_step": s["masked_pq"] / steps,
                    "qp_per_question": s["masked_qp"] / max(s["questions"], 1),
                    "pq_per_question": s["masked_pq"] / max(s["questions"], 1),
                    "qp_max_step": s["max_masked_qp"],
                    "pq_max_step": s["max_masked_pq"],
                },
                "mean_loss": {k: s[f"loss_{k}"] / steps for k in ("qp", "pq", "hard")},
            }
        }

    # ---- batches and loss

    def collate(self, items: Sequence[tuple[int, dict]], ctx: CollateContext) -> XMoCoBatch:
        qids = torch.tensor([int(i) for i, _ in items], dtype=torch.long)
        return XMoCoBatch(self._dpr.collate(items, ctx), qids)

    def loss(
        self, model: torch.nn.Module, batch: XMoCoBatch, dist: DistContext, train: bool = True
    ) -> tuple[torch.Tensor, dict[str, float]]:
        b = batch.dpr
        n_local_p = b.owner.shape[0]
        q = dist.gather(fp32(model.query(b.queries)))
        p = dist.gather(fp32(model.passage(b.passages)))
        positive = dist.gather_index(b.positive, n_local_p)
        owner = dist.gather_index(b.owner, b.n_questions)
        pids = dist.gather(b.pids)
        # Fast encoders only, over the batch's positives and hard negatives: L_hard in training,
        # and in validation the ranking retrieval will do (the queues are left alone).
        hard_scores = dpr_scores(
            q, p, positive, owner, in_batch=True, pids=pids, mask_false_negatives=self.mask
        )
        loss_hard, hard_ranks = dpr_nll(hard_scores, positive)
        stats = {
            "n_questions": float(q.shape[0]),
            "n_passages": float(p.shape[0]),
        }
        if not train:
            stats.update(
                loss=float(loss_hard.detach()),
                correct=float((hard_ranks == 1).sum()),
                rank_sum=float(hard_ranks.sum()),
            )
            return loss_hard, stats

        with torch.no_grad():
            slow_q = dist.gather(fp32(self.slow_q(b.queries)))
            slow_p = dist.gather(fp32(self.slow_p(b.passages)))
        qids = dist.gather(batch.qids)
        pos_pid = pids[positive]
        # Section 4.3: the global batch's slow vectors enter the queues together, positives and
        # hard negatives alike (4.5), then the loss scores against the queues holding them.
        p_slots = self.queue_p.push(slow_p, pids, pids)
        q_slots = self.queue_q.push(slow_q, pos_pid, qids)

        s_qp, masked_qp = queue_scores(q, self.queue_p, p_slots[positive], pos_pid, self.mask)
        loss_qp, ranks = dpr_nll(s_qp, p_slots[positive])
        s_pq, masked_pq = queue_scores(p[positive], self.queue_q, q_slots, pos_pid, self.mask)
        loss_pq = F.cross_entropy(s_pq, q_slots)
        loss = self.lam * loss_qp + (1.0 - self.lam) * loss_pq
        if self._dpr.n_neg > 0:
            loss = loss + float(self.cfg["hard_weight"]) * loss_hard

        st = self.stats
        st["steps"] += 1
        st["questions"] += int(q.shape[0])
        st["masked_qp"] += masked_qp
        st["masked_pq"] += masked_pq
        st["max_masked_qp"] = max(st["max_masked_qp"], masked_qp)
        st["max_masked_pq"] = max(st["max_masked_pq"], masked_pq)
        st["loss_qp"] += float(loss_qp.detach())
        st["loss_pq"] += float(loss_pq.detach())
        st["loss_hard"] += float(loss_hard.detach()) if self._dpr.n_neg > 0 else 0.0
        stats.update(
            loss=float(loss.detach()),
            loss_qp=float(loss_qp.detach()),
            loss_pq=float(loss_pq.detach()),
            loss_hard=float(loss_hard.detach()),
            masked_qp=float(masked_qp),
            masked_pq=float(masked_pq),
            correct=float((ranks == 1).sum()),
            rank_sum=float(ranks.sum()),
        )
        return loss, stats


METHOD = XMoCo
