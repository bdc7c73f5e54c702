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
        cuda = torch.cuda.is_available()
        device = process_group_device(cuda, int(os.environ.get("LOCAL_RANK", "0")))
        if device is not None:
            # Before NCCL starts: collectives that use the current device (object gathers)
            # would otherwise put every rank on cuda:0.
            torch.cuda.set_device(device)
        dist.init_process_group(backend=process_group_backend(cuda), device_id=device)
        created = True
    return DistContext(rank=dist.get_rank(), world_size=dist.get_world_size()), created


def process_group_backend(cuda: bool) -> str:
    """gloo on CPU. With CUDA, NCCL for the tensors on the GPUs (gradients, gathered vectors)
    and gloo for those in CPU memory (validation sums, a checkpoint's RNG states, barriers):
    NCCL reduces GPU tensors only, and validation's sums would stop training after epoch 1."""
    return "cpu:gloo,cuda:nccl" if cuda else "gloo"


def process_group_device(cuda: bool, local_rank: int) -> torch.device | None:
    """The GPU a rank is bound to when the group is created (None on CPU): NCCL then knows
    each rank's device, and barriers stop guessing it from the current context."""
    return torch.device("cuda", local_rank) if cuda else None


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


def rank_threads(job_threads: int | None) -> int:
    """This process's threads: its share of the job's ``--threads`` (the job's cores, which
    the ranks torchrun starts on the node share), else of the cores it may run on."""
    if not job_threads:
        try:
            job_threads = len(os.sched_getaffinity(0))
        except AttributeError:
            job_threads = os.cpu_count() or 1
    return max(1, int(job_threads) // int(os.environ.get("LOCAL_WORLD_SIZE", "1")))


def default_threads() -> int:
    """This process's share of the cores it may run on (the cores over the local ranks)."""
    return rank_threads(None)
