"""The loop: a ``Trainer`` runs epochs of optimizer steps, validates, keeps the best model,
checkpoints and resumes; ``train_model`` is the whole run.

The method decides batches (``collate``) and the loss; this loop owns data order, the
optimizer, schedule, validation, checkpoints and DDP (see ``drpipe.training``).
"""

from __future__ import annotations

import logging
import random
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from drpipe.encoders import autocast, select_device, use_bf16
from drpipe.io import atomic_path, progress
from drpipe.methods import get_method
from drpipe.methods.base import CollateContext
from drpipe.training.build import (
    build_model,
    deterministic_on_cpu,
    linear_schedule,
    make_optimizer,
)
from drpipe.training.checkpoints import (
    fingerprint,
    load_checkpoint,
    rng_states,
    save_checkpoint,
    set_rng_states,
)
from drpipe.training.data import check_dropped, epoch_batches, load_training_data, shard
from drpipe.training.distributed import init_distributed, rank_threads, sum_gradients
from drpipe.training.settings import resolve_cfg
from drpipe.training.validation import validate

log = logging.getLogger(__name__)


@dataclass
class Progress:
    """Where a run is and what it has seen: everything a checkpoint restores besides weights."""

    epoch: int = 0
    batch_pos: int = 0
    step: int = 0
    best: dict[str, Any] | None = None
    history: dict[str, Any] = field(
        default_factory=lambda: {
            "train_curve": [],
            "val_curve": [],
            "train_seconds": 0.0,
            "examples": 0,
            "window": [],  # losses since the last log line
            "epoch_losses": [],  # losses of the current epoch
            "short_negatives": 0,
        }
    )


class Trainer:
    """One training run: the model, its optimizer and schedule, the method, checkpoints.

    ``run()`` goes epoch by epoch: ``train_step`` per global batch, ``end_epoch`` (validate,
    keep the best model, checkpoint), then ``finish`` writes the model directory.
    """

    def __init__(
        self,
        method_name: str,
        train_paths: Sequence[str | Path],
        out_dir: str | Path,
        cfg: dict[str, Any],
        val_paths: Sequence[str | Path] = (),
        corpus: dict[str, str | Path] | None = None,
    ):
        self.t_start = time.perf_counter()
        self.method_name = method_name
        self.method = get_method(method_name, cfg)
        self.cfg = cfg = resolve_cfg(self.method.config_defaults(), cfg)
        self.train_paths = [Path(p) for p in train_paths]
        self.val_paths = [Path(p) for p in val_paths]
        self.out_dir = Path(out_dir)
        self.ckpt_dir = self.out_dir.with_name(self.out_dir.name + ".ckpt")
        self.dctx, self.created_group = init_distributed()
        self.is_main = self.dctx.rank == 0
        self.seed = seed = int(cfg["seed"])

        self.threads = rank_threads(cfg["threads"])
        torch.set_num_threads(self.threads)
        self.device = select_device()
        self.bf16 = use_bf16(cfg["bf16"], self.device)
        deterministic_on_cpu(self.device)
        random.seed(seed + self.dctx.rank)
        np.random.seed(seed + self.dctx.rank)
        torch.manual_seed(seed + self.dctx.rank)  # different dropout masks per rank, as in DDP

        self.train, self.val, self.counts, origins = load_training_data(
            self.train_paths, self.val_paths, cfg
        )
        corpus = dict(corpus or {})
        missing = sorted(set(self.method.train_corpus) - set(corpus))
        if missing:
            raise SystemExit(f"error: method {method_name} trains with --corpus {missing}")
        self.method.prepare(corpus, [*self.train, *self.val])
        # Before any step: a run that would silently lose much of a file stops here.
        self.counts["dropped_by_file"] = check_dropped(
            self.method.dropped_examples(), origins, float(cfg["max_dropped_fraction"]),
            method_name,
        )  # fmt: skip
        self.model = build_model(cfg, self.method.special_tokens).to(self.device)
        self.model.method = {"name": method_name, "cfg": self.method.cfg}
        self.model.train()
        self.method.attach(self.model)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = make_optimizer(self.model, cfg)

        self.batch_size, self.epochs = int(cfg["batch_size"]), int(cfg["epochs"])
        if self.batch_size < self.dctx.world_size:
            raise SystemExit(f"error: batch_size {self.batch_size} < {self.dctx.world_size} ranks")
        self.per_epoch = len(self._batches(0))
        self.total_steps = self.per_epoch * self.epochs
        self.warmup = (
            int(round(float(cfg["warmup_ratio"]) * self.total_steps))
            if cfg["warmup_ratio"] is not None
            else int(cfg["warmup_steps"])
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, linear_schedule(self.warmup, self.total_steps)
        )
        self.fp = fingerprint(method_name, cfg, self.train_paths, self.val_paths)
        self.progress = Progress()
        self.resumed_from: int | None = None

    def _batches(self, epoch: int) -> list[np.ndarray]:
        return epoch_batches(
            len(self.train), self.batch_size, self.seed, epoch, self.dctx.world_size
        )

    # ---- checkpoints

    def resume(self) -> None:
        """Continue from this run's checkpoint, if there is one for these inputs and cfg."""
        state = load_checkpoint(self.ckpt_dir, self.fp)
        if state is None:
            if self.is_main and self.ckpt_dir.exists():
                shutil.rmtree(self.ckpt_dir)
            return
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.method.load_state_dict(state["method"])
        set_rng_states(state["rng"][self.dctx.rank])
        pr = self.progress
        pr.epoch, pr.batch_pos, pr.step = state["epoch"], state["batch_pos"], state["step"]
        pr.best, pr.history = state["best"], state["history"]
        self.resumed_from = pr.step
        log.info(
            "resumed from %s at epoch %d, batch %d, step %d",
            self.ckpt_dir, pr.epoch, pr.batch_pos, pr.step,
        )  # fmt: skip

    def checkpoint(self) -> None:
        rngs = [rng_states()]
        if self.dctx.world_size > 1:
            rngs = [None] * self.dctx.world_size
            dist.all_gather_object(rngs, rng_states())
        if self.is_main:
            pr = self.progress
            save_checkpoint(
                self.ckpt_dir,
                {
                    "fingerprint": self.fp,
                    "epoch": pr.epoch,
                    "batch_pos": pr.batch_pos,
                    "step": pr.step,
                    "model": self.model.state_dict(),
                    "optimizer": self.optimizer.state_dict(),
                    "scheduler": self.scheduler.state_dict(),
                    "method": self.method.state_dict(),
                    "rng": rngs,
                    "best": pr.best,
                    "history": pr.history,
                },
            )

    # ---- steps and epochs

    def train_step(self, idx: np.ndarray, ctx) -> float:
        """One optimizer step on this rank's part ``idx`` of a global batch; returns the loss."""
        batch = self.method.collate([(int(i), self.train[i]) for i in idx], ctx).to(self.device)
        self.progress.history["short_negatives"] += getattr(batch, "short_negatives", 0)
        self.optimizer.zero_grad(set_to_none=True)
        with autocast(self.device, self.bf16):
            loss, stats = self.method.loss(self.model, batch, self.dctx, train=True)
        loss.backward()
        sum_gradients(self.params, self.dctx)
        if self.cfg["grad_clip"]:
            torch.nn.utils.clip_grad_norm_(self.params, float(self.cfg["grad_clip"]))
        self.optimizer.step()
        self.scheduler.step()
        self.method.after_step(self.model)
        return stats["loss"]

    def end_epoch(self) -> None:
        """Validate, keep the best model so far (average rank, then loss), checkpoint."""
        pr = self.progress
        entry: dict[str, Any] = {
            "epoch": pr.epoch,
            "step": pr.step,
            "train_loss": float(np.mean(pr.history["epoch_losses"])),
        }
        if self.val:
            entry.update(
                validate(
                    self.method, self.model, self.val, self.cfg, self.dctx, self.device, self.bf16
                )
            )
            log.info(
                "epoch %d validation: loss %.4f, average rank %.3f, accuracy %.3f",
                pr.epoch, entry["loss"], entry["avg_rank"], entry["accuracy"],
            )  # fmt: skip
            key = (entry["avg_rank"], entry["loss"])
            if pr.best is None or key < tuple(pr.best["key"]):
                pr.best = {"key": list(key), "epoch": pr.epoch, "step": pr.step}
                if self.is_main:
                    with atomic_path(self.ckpt_dir / "best", directory=True) as tmp:
                        self.model.save(tmp)
        pr.history["val_curve"].append(entry)
        pr.history["epoch_losses"].clear()
        pr.epoch += 1
        pr.batch_pos = 0
        self.checkpoint()

    def run(self, stop_after: int | None = None) -> dict[str, Any]:
        self.resume()
        pr, h = self.progress, self.progress.history
        log.info(
            "training %s: %d train / %d val examples, %d epochs x %d steps, batch %d, "
            "%d rank(s), device %s, bf16 %s, %d threads",
            self.method_name, len(self.train), len(self.val), self.epochs, self.per_epoch,
            self.batch_size, self.dctx.world_size, self.device, self.bf16, self.threads,
        )  # fmt: skip
        every = int(self.cfg["checkpoint_every"] or 0)
        log_every = max(1, int(self.cfg["log_every"]))
        bar = progress(
            total=self.total_steps, initial=pr.step, desc="train", unit="step",
            disable=not self.is_main,
        )  # fmt: skip
        while pr.epoch < self.epochs:
            batches = self._batches(pr.epoch)
            ctx = CollateContext(
                model=self.model, seed=self.seed, epoch=pr.epoch, sample=True, pool=self.train
            )
            while pr.batch_pos < len(batches):
                t0 = time.perf_counter()
                idx = shard(batches[pr.batch_pos], self.dctx.rank, self.dctx.world_size)
                loss = self.train_step(idx, ctx)
                pr.step += 1
                pr.batch_pos += 1
                h["train_seconds"] += time.perf_counter() - t0
                h["examples"] += len(batches[pr.batch_pos - 1])
                h["window"].append(loss)
                h["epoch_losses"].append(loss)
                bar.update(1)
                if pr.step % log_every == 0 or pr.batch_pos == len(batches):
                    mean = float(np.mean(h["window"]))
                    lr = self.scheduler.get_last_lr()[0]
                    h["train_curve"].append(
                        {"step": pr.step, "epoch": pr.epoch, "loss": mean, "lr": lr}
                    )
                    log.info("epoch %d step %d loss %.4f", pr.epoch, pr.step, mean)
                    h["window"].clear()
                if stop_after is not None and pr.step >= stop_after:
                    bar.close()
                    return {"stopped_at_step": pr.step}
                if every and pr.step % every == 0 and pr.batch_pos < len(batches):
                    self.checkpoint()
            if self.val:
                # Validation may fail or meet the job's time limit: the epoch's steps are kept
                # first, so the rerun only validates again.
                self.checkpoint()
            self.end_epoch()
        bar.close()
        self.finish()
        return self.report()

    def finish(self) -> None:
        """Write the best model (or the last, without validation) to ``out_dir`` atomically."""
        if self.is_main:
            with atomic_path(self.out_dir, directory=True) as tmp:
                if self.val and (self.ckpt_dir / "best").is_dir():
                    shutil.copytree(self.ckpt_dir / "best", tmp, dirs_exist_ok=True)
                else:
                    self.model.save(tmp)
            shutil.rmtree(self.ckpt_dir, ignore_errors=True)
        if self.dctx.world_size > 1:
            dist.barrier()
            if self.created_group:
                dist.destroy_process_group()

    def report(self) -> dict[str, Any]:
        pr, h = self.progress, self.progress.history
        return {
            "method": self.method_name,
            "train_files": [str(p) for p in self.train_paths],
            "val_files": [str(p) for p in self.val_paths],
            **self.counts,
            "short_negatives": h["short_negatives"],
            "cfg": self.cfg,
            "epochs": self.epochs,
            "steps": pr.step,
            "steps_per_epoch": self.per_epoch,
            "warmup_steps": self.warmup,
            "train_curve": h["train_curve"],
            "val_curve": h["val_curve"],
            "best_epoch": None if pr.best is None else pr.best["epoch"],
            "examples_per_second": h["examples"] / max(h["train_seconds"], 1e-9),
            "train_seconds": h["train_seconds"],
            "seconds": time.perf_counter() - self.t_start,
            "device": str(self.device),
            "bf16": self.bf16,
            # Training precision in the words encoding reports use (Table 2's notes read both).
            "precision": "bf16" if self.bf16 else "fp32",
            "precision_setting": str(self.cfg["bf16"]),
            "threads": self.threads,
            "world_size": self.dctx.world_size,
            "resumed_from_step": self.resumed_from,
            # The questions validation used: what the hybrid tunes its weight on (never test).
            "val_qids": [str(ex["qid"]) for ex in self.val if "qid" in ex],
            **self.method.report(),
        }


def train_model(
    method_name: str,
    train_paths: Sequence[str | Path],
    out_dir: str | Path,
    cfg: dict[str, Any],
    *,
    val_paths: Sequence[str | Path] = (),
    corpus: dict[str, str | Path] | None = None,
    stop_after: int | None = None,
) -> dict[str, Any]:
    """Train, write the best model to ``out_dir`` (rank 0) and return the report.

    ``corpus``: the tables the method's ``train_corpus`` names (name -> path).
    ``stop_after``: return after that many optimizer steps without writing anything more
    (simulates a killed job; tests use it to check that resuming gives identical weights).
    """
    return Trainer(method_name, train_paths, out_dir, cfg, val_paths, corpus).run(stop_after)
