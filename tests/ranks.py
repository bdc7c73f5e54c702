"""Ranks of a torch.distributed group on CPU, for the DDP tests: two processes forked from
torch.multiprocessing's fork server, each with torchrun's environment and a gloo group, and a
tolerance for comparing what they computed with one process."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# What multiprocessing's fork server imports once for every rank of the session's gloo tests.
RANK_PRELOAD = [
    "torch",
    "transformers.models.bert.modeling_bert",
    "drpipe.cli",
    "drpipe.training.loop",
    "drpipe.methods.dcsr",
    "drpipe.methods.xmoco",
    "pytest",
]


def fork_ranks(worker: Callable, *args, world_size: int = 2, timeout: float = 300) -> None:
    """``worker(rank, port, *args)`` in ``world_size`` processes forked from multiprocessing's
    fork server; raises if one fails, or if they have not all finished in ``timeout`` seconds
    (ranks that wait on a collective the others never join hang rather than fail: they are
    killed, and the test fails). The server (one per session) imports RANK_PRELOAD once and runs
    no torch operation, so no OpenMP pool is forked; a spawned rank spent ~5 s of CPU on those
    imports. Each rank is still a process of its own in a real gloo group (the ranks share the
    server's hash seed; the one-process reference they are compared with has its own)."""
    import multiprocessing

    import torch.multiprocessing as mp

    multiprocessing.get_context("forkserver").set_forkserver_preload(RANK_PRELOAD)
    ctx = mp.start_processes(worker, args=(free_port(), *args), nprocs=world_size, join=False,
                             start_method="forkserver")  # fmt: skip
    deadline = time.monotonic() + timeout
    while not ctx.join(timeout=max(0.0, deadline - time.monotonic())):
        if time.monotonic() >= deadline:
            for proc in ctx.processes:
                proc.kill()
            raise AssertionError(f"{worker.__name__}: the ranks did not finish in {timeout} s")


def join_gloo(rank: int, port: int, world_size: int = 2) -> None:
    """In a rank's process: torchrun's environment variables, one thread, a gloo group."""
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(world_size))  # fmt: skip
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)


def leave_gloo() -> None:
    """In a rank's process: wait for every rank, then leave the group (as training's
    ``finish`` does). A rank that tears its group down while the other is still inside the
    last collective's exchange can abort in gloo's threads (seen once as SIGABRT)."""
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()


def assert_close_to_scale(
    got: torch.Tensor, want: torch.Tensor, rel: float, name: str, scale: float | None = None
) -> None:
    """|got - want| <= rel * scale elementwise (scale: max|want| by default): a tolerance that
    scales with the values, so float32 runs of a multi-step loop (where summation order differs
    between one process and two, and between CPUs) compare the same on every instruction set."""
    scale = scale if scale is not None else (float(want.abs().max()) or 1.0)
    diff = float((got.double() - want.double()).abs().max())
    assert diff <= rel * scale, f"{name}: max |diff| {diff:.3g} > {rel} x {scale:.3g}"


def nproc_cli_runs(argv: list[str], out: Path) -> tuple[dict, dict]:
    """Reports of `drpipe ARGV --nproc 2`, run as the rule runs it (a process that relaunches
    itself under torchrun; the ranks' threads from OMP_NUM_THREADS=1), and of the one-process
    reference `--nproc 1`, run in this process (a process start costs seconds here; torch's
    threads are restored after). The models are in ``out/two`` and ``out/one``."""
    from drpipe.cli import main

    paths = {n: ["--out", str(out / n), "--report", str(out / f"{n}.json")] for n in ("one", "two")}
    drpipe = Path(sys.executable).with_name("drpipe")
    proc = subprocess.run([str(drpipe), *argv, *paths["two"], "--nproc", "2"], text=True,
                          capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
                          timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    threads = torch.get_num_threads()
    try:
        assert main([*argv, *paths["one"], "--nproc", "1"]) == 0
    finally:
        torch.set_num_threads(threads)
    one, two = (json.loads((out / f"{n}.json").read_text()) for n in ("one", "two"))
    return one, two
