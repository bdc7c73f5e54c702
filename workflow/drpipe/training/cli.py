"""``drpipe train`` and ``drpipe init-model``: arguments, the torchrun relaunch, the reports.

``drpipe.cli`` imports this module for every command, so it imports no torch: the handlers
import the loop (and with it torch) when they run.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from drpipe.cliutil import add_cfg, add_runtime
from drpipe.environment import environment
from drpipe.io import write_json
from drpipe.training.settings import RUNTIME_KEYS

log = logging.getLogger(__name__)


def torchrun_argv(nproc: int, argv: Sequence[str]) -> list[str]:
    """Arguments for ``torch.distributed.run`` that start this same command on ``nproc``
    local processes (one per GPU; gloo on CPU), minus the ``--nproc`` option itself. The
    command comes after ``--``: torchrun's parser would otherwise read its options too, and
    stop at any that abbreviates one of its own (``reader train --run`` is ambiguous with
    ``--run-path``)."""
    rest, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--nproc":
            skip = True
        elif not a.startswith("--nproc="):
            rest.append(a)
    return ["--standalone", f"--nproc-per-node={nproc}", "-m", "--", "drpipe.cli", *rest]


def relaunch(command: str, nproc: int, argv: Sequence[str]) -> int:
    """Run this command again on ``nproc`` local processes under torchrun (Snakemake starts
    one job per rule; torchrun fans it out to the job's GPUs). With GPUs each rank takes its
    own (``LOCAL_RANK``), so more processes than visible GPUs stop here, named, rather than in
    every rank's NCCL set-up."""
    import torch  # lazy: torch costs ~1 s at start-up
    from torch.distributed.run import main as torchrun

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if 0 < gpus < nproc:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "unset")
        raise SystemExit(
            f"drpipe {command}: --nproc {nproc} runs one process per GPU, but {gpus} GPU(s) "
            f"are visible (CUDA_VISIBLE_DEVICES={visible}); ask the job for {nproc} GPUs "
            f"or pass --nproc {gpus}"
        )
    log.info("starting %d processes with torchrun", nproc)
    torchrun(torchrun_argv(nproc, argv))
    return 0


def _name_path(text: str) -> tuple[str, Path]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=PATH, not {text!r}")
    return name, Path(path)


def _train(args: argparse.Namespace) -> int:
    if args.nproc > 1 and "WORLD_SIZE" not in os.environ:
        return relaunch("train", args.nproc, sys.argv[1:])
    from drpipe.training.loop import train_model  # lazy: the loop imports torch

    report = train_model(
        args.method,
        args.train,
        args.out,
        args.cfg,
        val_paths=args.val or (),
        corpus=dict(args.corpus or []),
        stop_after=args.stop_after,
    )
    if args.report and int(os.environ.get("RANK", "0")) == 0 and "stopped_at_step" not in report:
        # What the weights may depend on besides config, code and inputs (the audit compares it).
        write_json(args.report, {**report, "environment": environment(("cpu", "torch"))})
    return 0


def _init_model(args: argparse.Namespace) -> int:
    from drpipe.training.build import init_model  # lazy: imports torch and transformers

    info = init_model(args.out, args.cfg)
    if args.report:
        write_json(args.report, info)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a bi-encoder with a method's loss")
    p.add_argument("--method", required=True, help="method name (dpr, ...)")
    p.add_argument("--train", nargs="+", required=True, type=Path, help="training example files")
    p.add_argument(
        "--val", nargs="+", type=Path, help="validation example files (else val_fraction)"
    )
    p.add_argument("--out", required=True, type=Path, help="model directory to write")
    p.add_argument(
        "--corpus", nargs="+", type=_name_path, metavar="NAME=PATH",
        help="corpus tables the method trains with (passages=..., sentences=...)",
    )  # fmt: skip
    p.add_argument("--report", type=Path, help="JSON report: curves, speed, counts")
    p.add_argument("--stop-after", type=int, help=argparse.SUPPRESS)
    p.add_argument(
        "--nproc",
        type=int,
        default=1,
        help="processes (GPUs) to train on; >1 relaunches this command under torchrun",
    )
    add_cfg(p)
    add_runtime(p, *(k for k in RUNTIME_KEYS if k != "threads"))
    p.set_defaults(func=_train)

    p = sub.add_parser("init-model", help="save the initial encoders (the no-fine-tuning row)")
    p.add_argument("--out", required=True, type=Path, help="model directory to write")
    p.add_argument("--report", type=Path)
    add_cfg(p)
    p.set_defaults(func=_init_model)
