"""Ranks under ``torchrun``: the process group, sums over ranks, this process's share of cores."""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from drpipe.methods.base import DistContext


def init_distributed() -> tuple[DistContext, bool]:
    """A DistContext from torchrun's environment (initialising the process group if needed),
    and whether this call created the group (then the run destroys it at the end)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistContext(), False
    created = False
    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend=backend)
        created = True
    return DistContext(rank=dist.get_rank(), world_size=dist.get_world_size()), created


def sum_gradients(params: Sequence, ctx: DistContext) -> None:
    """Sum parameter gradients over ranks, in one flat buffer (fewer, larger messages)."""
    if ctx.world_size == 1:
        return
    grads = [p.grad for p in params if p.grad is not None]
    flat = _flatten_dense_tensors(grads)
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    for g, new in zip(grads, _unflatten_dense_tensors(flat, grads), strict=True):
        g.copy_(new)


def all_reduce_sums(values: dict[str, float], ctx: DistContext) -> dict[str, float]:
    """``values`` summed over ranks (float64, so counts stay exact)."""
    if ctx.world_size == 1:
        return values
    keys = sorted(values)
    t = torch.tensor([values[k] for k in keys], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return dict(zip(keys, t.tolist(), strict=True))


def default_threads() -> int:
    """This process's share of the cores it may run on (the cores over the local ranks)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return max(1, cores // int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
