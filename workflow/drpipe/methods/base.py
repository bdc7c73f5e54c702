"""What a retrieval method is: a plug-in to the one training loop and to retrieval.

A method says
- which vectors the corpus gets (``corpus_units``: ``"passages"``; DCSR: ``"sentences"``),
- how training examples become a batch (``collate``),
- the loss on a batch (``loss``), computed over the *global* batch via ``DistContext``,
- how retrieved units become ranked passages (``units_to_passages``; identity for passages).

Stateful methods (xMoCo: slow encoders, queues) keep their state on the method object: the loop
calls ``attach`` once, ``after_step`` after every optimizer step, and checkpoints
``state_dict``. AOpt does not train encoders and only uses ``units_to_passages``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch


@dataclass
class DistContext:
    """Where this process sits in a torch.distributed job (world_size 1: single process)."""

    rank: int = 0
    world_size: int = 1

    def sizes(self, n: int, device: torch.device | None = None) -> list[int]:
        """``n`` of every rank, in rank order."""
        if self.world_size == 1:
            return [n]
        import torch.distributed as dist

        local = torch.tensor([n], dtype=torch.int64, device=device)
        out = [torch.zeros_like(local) for _ in range(self.world_size)]
        dist.all_gather(out, local)
        return [int(t.item()) for t in out]

    def gather(self, t: torch.Tensor) -> torch.Tensor:
        """Concatenate ``t`` of all ranks along dim 0 (sizes may differ), in rank order.

        The local slot is ``t`` itself, so gradients flow back into this rank's tensors; other
        ranks' slots are constants here (their own gradients are computed on their ranks).
        """
        if self.world_size == 1:
            return t
        import torch.distributed as dist

        sizes = self.sizes(t.shape[0], t.device)
        width = max(sizes)
        pad = width - t.shape[0]
        padded = torch.cat([t, t.new_zeros((pad, *t.shape[1:]))]) if pad else t
        bufs = [torch.empty_like(padded) for _ in range(self.world_size)]
        dist.all_gather(bufs, padded.detach().contiguous())
        bufs[self.rank] = padded
        return torch.cat([b[:n] for b, n in zip(bufs, sizes, strict=True)])

    def gather_index(self, index: torch.Tensor, local_count: int) -> torch.Tensor:
        """Gather indices into per-rank lists of ``local_count`` items as global indices."""
        if self.world_size == 1:
            return index
        sizes = self.sizes(local_count, index.device)
        offset = sum(sizes[: self.rank])
        shifted = torch.where(index >= 0, index + offset, index)
        return self.gather(shifted)


@dataclass
class CollateContext:
    """What ``collate`` may use besides the examples themselves."""

    model: Any  # a drpipe.encoders.BiEncoder (tokenisation and max lengths)
    seed: int
    epoch: int
    sample: bool  # True for training (seeded shuffling), False for deterministic validation
    pool: Sequence[dict] = field(default_factory=list)  # all examples of the split (gold negatives)


class Method(ABC):
    """A retrieval method plugged into training and retrieval."""

    name: str = ""
    corpus_units: str = "passages"
    defaults: dict[str, Any] = {}  # the method's own cfg keys and their defaults

    def __init__(self, cfg: dict[str, Any]):
        self.cfg = dict(cfg)

    @abstractmethod
    def collate(self, items: Sequence[tuple[int, dict]], ctx: CollateContext) -> Any:
        """Turn (index in pool, training example) pairs of this rank into a batch.

        Random choices must depend only on (seed, epoch, index), so a batch is the same
        whichever rank builds it and after a resume.
        """

    @abstractmethod
    def loss(
        self, model: torch.nn.Module, batch: Any, dist: DistContext
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Loss over the global batch (identical on every rank) and float statistics.

        Gradients of the returned loss w.r.t. this rank's tensors must be those of the global
        loss; the loop sums parameter gradients over ranks. ``stats`` holds at least
        ``n_questions`` and, for validation, ``rank_sum`` (1-based rank of the positive).
        """

    def batch_size_of(self, batch: Any) -> int:
        """Number of training examples (questions) in this rank's batch."""
        return int(batch.n_questions)

    # Hooks for stateful methods; no-ops for DPR.
    def attach(self, model: torch.nn.Module) -> None:
        """Called once the model is built (xMoCo: create slow encoders and queues)."""
        return None

    def after_step(self, model: torch.nn.Module) -> None:
        """Called after every optimizer step (xMoCo: momentum update)."""
        return None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None

    # Retrieval side.
    def search_depth(self, k: int) -> int:
        """How many units to retrieve to rank ``k`` passages."""
        return k

    def units_to_passages(
        self, unit_ids: np.ndarray, scores: np.ndarray, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Ranked units [n_questions, depth] -> ranked passage ids and scores [n_questions, k]."""
        return unit_ids[:, :k], scores[:, :k]
