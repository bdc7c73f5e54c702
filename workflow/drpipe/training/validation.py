"""Validation: mean loss, average rank and accuracy of the positive over the validation examples.

A method's ``loss`` reports its validation measure as ``correct`` and ``rank_sum`` (the measure
its paper's validation uses: DPR the positive passage among the batch's passages, DCSR the
positive sentence among the batch's sentences); checkpoints are selected on it. Further pairs
``<name>_correct`` / ``<name>_rank_sum``, one per name in the method's ``extra_measures``
(DCSR: ``passage``), are reported beside it as
``<name>_accuracy`` / ``<name>_avg_rank``.
"""

from __future__ import annotations

from typing import Any

import torch

from drpipe.encoders import autocast
from drpipe.methods.base import CollateContext, DistContext, Method
from drpipe.training.distributed import all_reduce_sums


def validate(
    method: Method,
    model: torch.nn.Module,
    val: list[dict],
    cfg: dict[str, Any],
    dctx: DistContext,
    device: torch.device,
    bf16: bool,
) -> dict[str, float]:
    """Mean loss, average rank and accuracy over validation batches (sharded by rank), and
    any further measure the method reports. The method is called with ``train=False``:
    validation never changes its state."""
    size = int(cfg["val_batch_size"] or cfg["batch_size"])
    ctx = CollateContext(model=model, seed=int(cfg["seed"]), epoch=0, sample=False, pool=val)
    sums = {"loss_sum": 0.0, "n_questions": 0.0, "rank_sum": 0.0, "correct": 0.0}
    extra = tuple(method.extra_measures)  # declared: every rank reduces the same keys
    for name in extra:
        sums[f"{name}_correct"] = sums[f"{name}_rank_sum"] = 0.0
    was_training = model.training
    model.eval()
    local = DistContext()
    with torch.no_grad(), autocast(device, bf16):
        for b, start in enumerate(range(0, len(val), size)):
            if b % dctx.world_size != dctx.rank:
                continue
            idx = range(start, min(start + size, len(val)))
            batch = method.collate([(i, val[i]) for i in idx], ctx).to(device)
            _, stats = method.loss(model, batch, local, train=False)
            sums["loss_sum"] += stats["loss"] * stats["n_questions"]
            for key in sums.keys() - {"loss_sum"}:
                sums[key] += stats.get(key, 0.0)
    model.train(was_training)
    sums = all_reduce_sums(sums, dctx)
    n = max(sums["n_questions"], 1.0)
    out = {
        "loss": sums["loss_sum"] / n,
        "avg_rank": sums["rank_sum"] / n,
        "accuracy": sums["correct"] / n,
        "n_questions": int(sums["n_questions"]),
    }
    for name in extra:
        out[f"{name}_avg_rank"] = sums[f"{name}_rank_sum"] / n
        out[f"{name}_accuracy"] = sums[f"{name}_correct"] / n
    return out
