"""What every trainer shares around its own data, batches and loss: the retriever's loop
(``loop.Trainer``) and the reader's (``drpipe.reader.train.ReaderTrainer``) both subclass
``BaseTrainer``.

It owns the process a run is in (rank, threads, device, bf16, seeds), the global batch order
and learning-rate schedule, one optimizer step (gradients summed over ranks, clipped), the
checkpoint's weights, optimizer, schedule and RNG states of every rank (and its progress
record, ``settings.checkpoint_progress``), and the final model directory, written atomically.
A subclass builds ``self.model`` (with ``save``), its ``self.params`` and ``self.optimizer``,
then calls ``_schedule``; what a checkpoint holds beyond weights and states is the subclass's
(``_checkpoint(step, extra)``).
"""

from __future__ import annotations

import random
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from drpipe.encoders import select_device
from drpipe.io import atomic_path, write_json
from drpipe.precision import use_bf16
from drpipe.training.build import deterministic_on_cpu, linear_schedule
from drpipe.training.checkpoints import (
    load_checkpoint,
    rng_states,
    save_checkpoint,
    set_rng_states,
)
from drpipe.training.data import epoch_batches
from drpipe.training.distributed import init_distributed, rank_threads, sum_gradients
from drpipe.training.settings import PROGRESS_FILE, checkpoint_dir


class BaseTrainer:
    model: Any  # a torch module with ``save(directory)``
    params: list[torch.nn.Parameter]
    optimizer: torch.optim.Optimizer
    fp: str  # what this run's checkpoint belongs to (checkpoints.fingerprint)

    def _start(self, cfg: dict[str, Any], out_dir: str | Path) -> None:
        """The process: ranks, this rank's threads, device, bf16, CPU determinism, and the
        python and numpy seeds (torch's is the subclass's to set: ``_seed_torch``, where its
        model building expects it)."""
        self.t_start = time.perf_counter()
        self.cfg = cfg
        self.out_dir = Path(out_dir)
        self.ckpt_dir = checkpoint_dir(self.out_dir)
        self.dctx, self.created_group = init_distributed()
        self.is_main = self.dctx.rank == 0
        self.seed = int(cfg["seed"])
        self.threads = rank_threads(cfg["threads"])
        torch.set_num_threads(self.threads)
        self.device = select_device()
        self.bf16 = use_bf16(cfg["bf16"], self.device)
        deterministic_on_cpu(self.device)
        random.seed(self.seed + self.dctx.rank)
        np.random.seed(self.seed + self.dctx.rank)
        self.resumed_from: int | None = None

    def _seed_torch(self) -> None:
        torch.manual_seed(self.seed + self.dctx.rank)  # different dropout masks per rank, as DDP

    # ---- batches and the schedule

    def _schedule(self, n_examples: int) -> None:
        """Global batches of ``n_examples`` per epoch, and the linear warm-up and decay."""
        self.n_examples = n_examples
        self.batch_size, self.epochs = int(self.cfg["batch_size"]), int(self.cfg["epochs"])
        if self.batch_size < self.dctx.world_size:
            raise SystemExit(f"error: batch_size {self.batch_size} < {self.dctx.world_size} ranks")
        self.per_epoch = len(self._batches(0))
        self.total_steps = self.per_epoch * self.epochs
        ratio = self.cfg["warmup_ratio"]
        self.warmup = (
            int(round(float(ratio) * self.total_steps))
            if ratio is not None
            else int(self.cfg["warmup_steps"])
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, linear_schedule(self.warmup, self.total_steps)
        )

    def _batches(self, epoch: int) -> list[np.ndarray]:
        return epoch_batches(
            self.n_examples, self.batch_size, self.seed, epoch, self.dctx.world_size
        )

    def _apply(self, loss: torch.Tensor) -> None:
        """One optimizer step from this rank's ``loss``: gradients summed over the ranks (each
        loss is already divided by the global batch), clipped, then the schedule's step."""
        loss.backward()
        sum_gradients(self.params, self.dctx)
        if self.cfg["grad_clip"]:
            torch.nn.utils.clip_grad_norm_(self.params, float(self.cfg["grad_clip"]))
        self.optimizer.step()
        self.scheduler.step()

    # ---- checkpoints and the model directory

    def _checkpoint(self, step: int, extra: dict[str, Any]) -> None:
        """Save weights, optimizer, schedule, every rank's RNG states and ``extra``; and, beside
        them, the ``step`` they hold of the run's total (``PROGRESS_FILE``)."""
        rngs = [rng_states()]
        if self.dctx.world_size > 1:
            rngs = [None] * self.dctx.world_size
            dist.all_gather_object(rngs, rng_states())
        if self.is_main:
            save_checkpoint(
                self.ckpt_dir,
                {
                    "fingerprint": self.fp,
                    "model": self.model.state_dict(),
                    "optimizer": self.optimizer.state_dict(),
                    "scheduler": self.scheduler.state_dict(),
                    "rng": rngs,
                    **extra,
                },
            )
            write_json(
                self.ckpt_dir / PROGRESS_FILE, {"step": step, "total_steps": self.total_steps}
            )

    def _restore(self) -> dict[str, Any] | None:
        """This run's checkpoint, its weights, optimizer, schedule and this rank's RNG states
        restored; None (and a checkpoint of other inputs or cfg removed) if there is none."""
        saved = load_checkpoint(self.ckpt_dir, self.fp)
        if saved is None:
            if self.is_main and self.ckpt_dir.exists():
                shutil.rmtree(self.ckpt_dir)
            return None
        self.model.load_state_dict(saved["model"])
        self.optimizer.load_state_dict(saved["optimizer"])
        self.scheduler.load_state_dict(saved["scheduler"])
        set_rng_states(saved["rng"][self.dctx.rank])
        return saved

    def _keep_best(self) -> None:
        """The model as it is now becomes the best so far (``.ckpt/best``)."""
        if self.is_main:
            with atomic_path(self.ckpt_dir / "best", directory=True) as tmp:
                self.model.save(tmp)

    def finish(self) -> None:
        """Write the best model kept (or the model as it is, if none was) to ``out_dir``
        atomically, remove the checkpoint, and leave the process group."""
        if self.is_main:
            with atomic_path(self.out_dir, directory=True) as tmp:
                if (self.ckpt_dir / "best").is_dir():
                    shutil.copytree(self.ckpt_dir / "best", tmp, dirs_exist_ok=True)
                else:
                    self.model.save(tmp)
            shutil.rmtree(self.ckpt_dir, ignore_errors=True)
        if self.dctx.world_size > 1:
            dist.barrier()
            if self.created_group:
                dist.destroy_process_group()
