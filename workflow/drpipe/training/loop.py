"""The loop: a ``Trainer`` runs epochs of optimizer steps, validates, keeps the best model,
checkpoints and resumes; ``train_model`` is the whole run.

The method decides batches (``collate``) and the loss; this loop owns data order, the
optimizer, schedule, validation, checkpoints and DDP (see ``drpipe.training``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from drpipe.encoders import autocast
from drpipe.io import progress
from drpipe.methods import get_method
from drpipe.methods.base import CollateContext
from drpipe.training.base import BaseTrainer
from drpipe.training.build import build_model, make_optimizer
from drpipe.training.checkpoints import fingerprint
from drpipe.training.data import check_dropped, load_training_data, shard
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


class Trainer(BaseTrainer):
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
        self.method_name = method_name
        self.method = get_method(method_name, cfg)
        cfg = resolve_cfg(self.method.config_defaults(), cfg)
        self._start(cfg, out_dir)
        self._seed_torch()
        self.train_paths = [Path(p) for p in train_paths]
        self.val_paths = [Path(p) for p in val_paths]

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
        self._schedule(len(self.train))
        self.fp = fingerprint(method_name, cfg, self.train_paths, self.val_paths)
        self.progress = Progress()

    # ---- checkpoints

    def resume(self) -> None:
        """Continue from this run's checkpoint, if there is one for these inputs and cfg."""
        state = self._restore()
        if state is None:
            return
        self.method.load_state_dict(state["method"])
        pr = self.progress
        pr.epoch, pr.batch_pos, pr.step = state["epoch"], state["batch_pos"], state["step"]
        pr.best, pr.history = state["best"], state["history"]
        self.resumed_from = pr.step
        log.info(
            "resumed from %s at epoch %d, batch %d, step %d",
            self.ckpt_dir, pr.epoch, pr.batch_pos, pr.step,
        )  # fmt: skip

    def checkpoint(self) -> None:
        pr = self.progress
        self._checkpoint(
            pr.step,
            {
                "epoch": pr.epoch,
                "batch_pos": pr.batch_pos,
                "step": pr.step,
                "method": self.method.state_dict(),
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
        self._apply(loss)
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
                self._keep_best()
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
