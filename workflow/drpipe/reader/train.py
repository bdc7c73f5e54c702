"""Training a reader on a retriever's results (DPR section 6.1), on the shared training pieces.

``ReaderTrainer`` is a ``drpipe.training.base.BaseTrainer``, as the retriever's loop is: the
same process setup, seeded global batches, schedule, optimizer step, checkpoints and model
directory; under ``torchrun`` each rank reads its share of a global batch and gradients are
summed, so the update equals the single-process one. Its own are the examples (a question's
answer-bearing passage and sampled negatives), the loss, and validation by exact match.

Checkpoint selection: a seeded ``val_fraction`` of the training questions is held out (never
test questions); after each epoch they are read end to end over their top ``val_k`` passages
of the same retriever, and the epoch with the best exact match becomes the reader (the earlier
on a tie). A killed run restarted with the same inputs and cfg resumes from ``OUT.ckpt/`` and
ends with the same weights.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from drpipe.corpus.passages import load_passages
from drpipe.encoders import autocast
from drpipe.errors import InputError
from drpipe.io import progress
from drpipe.qa.datasets import read_questions
from drpipe.reader.examples import Example, build_examples, read_gold, sample_negatives
from drpipe.reader.inputs import encode, pad_inputs
from drpipe.reader.loss import reader_loss
from drpipe.reader.model import build_reader
from drpipe.reader.score import Tokens, predict, score_pairs
from drpipe.reader.settings import RUNTIME_KEYS, limits, resolve_cfg
from drpipe.runs import read_run
from drpipe.training.base import BaseTrainer
from drpipe.training.build import make_optimizer
from drpipe.training.checkpoints import fingerprint
from drpipe.training.data import shard, split_validation
from drpipe.training.distributed import all_reduce_sums

log = logging.getLogger(__name__)


class ReaderTrainer(BaseTrainer):
    def __init__(
        self,
        run_path: str | Path,
        questions_path: str | Path,
        passages_path: str | Path,
        out_dir: str | Path,
        cfg: dict[str, Any],
        gold_path: str | Path | None = None,
    ):
        cfg = resolve_cfg(cfg)
        self._start(cfg, out_dir)
        self.model = build_reader(cfg["init"], limits(cfg), cfg["dropout"], self.seed)
        self.model.to(self.device)
        self._seed_torch()
        self.model.train()

        questions = read_questions(questions_path)
        depth = int(cfg["depth"])
        hits = read_run(run_path, depth, qids=[q["qid"] for q in questions])
        self.ranked = {qid: pids.tolist() for qid, (pids, _) in hits.items()}
        needed = {p for pids in self.ranked.values() for p in pids}
        try:
            self.passages = load_passages(passages_path, needed)
        except KeyError as exc:
            raise InputError(run_path, None, f"run refers to unknown passages: {exc}") from None
        self.tokens = Tokens(self.model.tokenizer, self.passages)
        tr, va = split_validation(len(questions), float(cfg["val_fraction"]), self.seed)
        self.val_questions = [questions[i] for i in va]
        built = build_examples(
            self.model.tokenizer,
            [questions[i] for i in tr],
            self.ranked,
            self.passages,
            self.tokens,
            self.model.limits,
            read_gold(gold_path),
            depth,
        )
        self.examples: list[Example] = built.examples
        self.counts = {**built.counts, "n_val_questions": len(self.val_questions)}
        self.skipped = {k: v[:20] for k, v in built.skipped.items() if v}
        if not self.examples:
            raise InputError(run_path, None, "no training question has an answer-bearing passage")

        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = make_optimizer(self.model, cfg)
        self._schedule(len(self.examples))
        files = [Path(p) for p in (run_path, questions_path, passages_path)]
        self.fp = fingerprint("reader", cfg, files, [Path(gold_path)] if gold_path else [])
        self.state: dict[str, Any] = {
            "epoch": 0, "batch_pos": 0, "step": 0, "best": None,
            "train_curve": [], "val_curve": [], "epoch_losses": [], "train_seconds": 0.0,
            "examples": 0,
        }  # fmt: skip

    # ---- one step

    def collate(self, idx: np.ndarray, epoch: int):
        m = int(self.cfg["passages"])
        tok, lim = self.model.tokenizer, self.model.limits
        rows, spans, present = [], [], []
        for i in idx:
            ex = self.examples[int(i)]
            negs = sample_negatives(ex, m - 1, self.seed, epoch, int(i))
            pids = [ex.positive, *negs]
            rows.append(
                [encode(tok, ex.q_ids, self.tokens[p], lim["max_len"]) for p in pids]
                + [None] * (m - len(pids))
            )
            spans.append(ex.spans)
            present.append([True] * len(pids) + [False] * (m - len(pids)))
        ids, att, text = pad_inputs(rows, tok.pad_token_id)
        return ids, att, text, torch.tensor(present), spans

    def train_step(self, idx: np.ndarray, epoch: int, global_size: int) -> dict[str, float]:
        ids, att, text, present, spans = self.collate(idx, epoch)
        dev = self.device
        self.optimizer.zero_grad(set_to_none=True)
        with autocast(dev, self.bf16):
            start, end, select = self.model(ids.to(dev), att.to(dev))
        loss, stats = reader_loss(
            start, end, select, text.to(dev), present.to(dev), spans, denominator=global_size
        )
        self._apply(loss)
        return self._global_stats(stats, len(idx), global_size)

    def _global_stats(self, stats: dict[str, float], n: int, global_size: int) -> dict[str, float]:
        """The step's statistics over the global batch: each rank's loss is its questions'
        share (over ``global_size``), summed; the rest are means over this rank's ``n``
        questions, weighted by ``n``. One process's are already global."""
        if self.dctx.world_size == 1:
            return stats
        sums = all_reduce_sums({k: v * (1 if k == "loss" else n) for k, v in stats.items()},
                               self.dctx)  # fmt: skip
        return {k: v if k == "loss" else v / global_size for k, v in sums.items()}

    # ---- validation, checkpoints

    def validate(self) -> dict[str, Any]:
        """Held-out EM at ``val_k``: each rank reads its share of the held-out questions (as the
        loop's validation does) and the matches are summed over ranks."""
        k = int(self.cfg["val_k"])
        part = shard(np.arange(len(self.val_questions)), self.dctx.rank, self.dctx.world_size)
        mine = [self.val_questions[i] for i in part]
        pairs = [(q["qid"], p) for q in mine for p in self.ranked.get(q["qid"], [])[:k]]
        rows = score_pairs(
            self.model, pairs, {q["qid"]: q for q in mine}, self.passages,
            batch_size=int(self.cfg["eval_batch_size"]), device=self.device, bf16=self.bf16,
            tokens=self.tokens, show_progress=False,
        ) if pairs else []  # fmt: skip
        preds = predict(self.ranked, {(r["qid"], r["pid"]): r for r in rows}, mine, k)
        sums = all_reduce_sums(
            {"em": float(sum(p["em"] for p in preds)), "n": float(len(preds))}, self.dctx
        )
        if not sums["n"]:
            raise ValueError("no held-out questions to score")
        return {"em": 100.0 * sums["em"] / sums["n"], "k": k, "n_questions": int(sums["n"])}

    def checkpoint(self) -> None:
        self._checkpoint(self.state["step"], {"state": self.state})

    def resume(self) -> None:
        saved = self._restore()
        if saved is None:
            return
        self.state = saved["state"]
        self.resumed_from = self.state["step"]
        log.info("resumed from %s at step %d", self.ckpt_dir, self.state["step"])

    def end_epoch(self) -> None:
        st = self.state
        entry = {"epoch": st["epoch"], "step": st["step"],
                 "train_loss": float(np.mean(st["epoch_losses"]))}  # fmt: skip
        if self.val_questions:
            entry.update(self.validate())
            log.info("epoch %d: held-out EM %.2f", st["epoch"], entry["em"])
            if st["best"] is None or entry["em"] > st["best"]["em"]:
                st["best"] = {"em": entry["em"], "epoch": st["epoch"]}
                self._keep_best()
        st["val_curve"].append(entry)
        st["epoch_losses"] = []
        st["epoch"] += 1
        st["batch_pos"] = 0
        self.checkpoint()

    def run(self, stop_after: int | None = None) -> dict[str, Any]:
        self.resume()
        st = self.state
        log.info(
            "training a reader: %d examples (%s), %d held-out questions, %d epochs x %d steps,"
            " batch %d x %d passages, device %s, bf16 %s",
            len(self.examples), self.counts, len(self.val_questions), self.epochs,
            self.per_epoch, self.batch_size, self.cfg["passages"], self.device, self.bf16,
        )  # fmt: skip
        every = int(self.cfg["checkpoint_every"] or 0)
        log_every = max(1, int(self.cfg["log_every"]))
        bar = progress(
            total=self.total_steps, initial=st["step"], desc="reader train", unit="step",
            disable=not self.is_main,
        )  # fmt: skip
        while st["epoch"] < self.epochs:
            batches = self._batches(st["epoch"])
            while st["batch_pos"] < len(batches):
                t0 = time.perf_counter()
                batch = batches[st["batch_pos"]]
                idx = shard(batch, self.dctx.rank, self.dctx.world_size)
                stats = self.train_step(idx, st["epoch"], len(batch))
                st["step"] += 1
                st["batch_pos"] += 1
                st["train_seconds"] += time.perf_counter() - t0
                st["examples"] += len(batch)
                st["epoch_losses"].append(stats["loss"])
                bar.update(1)
                if st["step"] % log_every == 0 or st["batch_pos"] == len(batches):
                    st["train_curve"].append({"step": st["step"], **stats})
                    log.info("epoch %d step %d loss %.4f", st["epoch"], st["step"], stats["loss"])
                if stop_after is not None and st["step"] >= stop_after:
                    bar.close()
                    return {"stopped_at_step": st["step"]}
                if every and st["step"] % every == 0 and st["batch_pos"] < len(batches):
                    self.checkpoint()
            if self.val_questions:
                # As training.loop: the epoch's steps are kept before validation can fail.
                self.checkpoint()
            self.end_epoch()
        bar.close()
        self.finish()
        return self.report()

    def report(self) -> dict[str, Any]:
        st = self.state
        return {
            "counts": self.counts,
            "skipped_examples": self.skipped,
            "cfg": {k: v for k, v in self.cfg.items() if k not in RUNTIME_KEYS},
            "epochs": self.epochs,
            "steps": st["step"],
            "steps_per_epoch": self.per_epoch,
            "warmup_steps": self.warmup,
            "train_curve": st["train_curve"],
            "val_curve": st["val_curve"],
            "best_epoch": None if st["best"] is None else st["best"]["epoch"],
            "val_qids": [q["qid"] for q in self.val_questions],
            "examples_per_second": st["examples"] / max(st["train_seconds"], 1e-9),
            "train_seconds": st["train_seconds"],
            "seconds": time.perf_counter() - self.t_start,
            "device": str(self.device),
            "bf16": self.bf16,
            "threads": self.threads,
            "world_size": self.dctx.world_size,
            "resumed_from_step": self.resumed_from,
        }


def train_reader(
    run_path: str | Path,
    questions_path: str | Path,
    passages_path: str | Path,
    out_dir: str | Path,
    cfg: dict[str, Any],
    *,
    gold_path: str | Path | None = None,
    stop_after: int | None = None,
) -> dict[str, Any]:
    """Train a reader and write it to ``out_dir`` (rank 0); returns the report.
    ``stop_after``: return after that many steps (a killed job, for resume tests)."""
    trainer = ReaderTrainer(run_path, questions_path, passages_path, out_dir, cfg, gold_path)
    return trainer.run(stop_after)
