"""What a run optimises and how: the bi-encoder from cfg, AdamW, the learning-rate schedule; and
the initial (not fine-tuned) encoders saved as a model directory (``drpipe init-model``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from drpipe.cliutil import need
from drpipe.encoder_settings import OPTION_KEYS
from drpipe.encoders import BiEncoder, TextFormat
from drpipe.io import atomic_path
from drpipe.training.settings import DEFAULTS


def build_model(cfg: dict[str, Any], special_tokens: Sequence[str] = ()) -> BiEncoder:
    """The bi-encoder ``cfg`` describes, with a method's ``special_tokens`` added."""
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
        normalize=cfg["normalize"],
        text=TextFormat.of(cfg),
    )


def make_optimizer(model: torch.nn.Module, cfg: dict[str, Any]) -> torch.optim.AdamW:
    """AdamW over the model's parameters only: state a method keeps outside the model (xMoCo's
    slow encoders) is never optimised."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (no_decay if name.endswith("bias") or "LayerNorm" in name else decay).append(p)
    groups = [
        {"params": decay, "weight_decay": float(cfg["weight_decay"])},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=float(cfg["lr"]), eps=float(cfg["adam_eps"]))


def linear_schedule(warmup: int, total: int) -> Callable[[int], float]:
    """LR factor: linear warm-up over ``warmup`` steps, then linear decay to 0 at ``total``."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / max(1, warmup)
        return max(0.0, (total - step) / max(1, total - warmup))

    return factor


def init_model(out_dir: str | Path, cfg: dict[str, Any]) -> dict[str, Any]:
    """Save the initial (not fine-tuned) encoders in the model-dir layout."""
    keys = ("init", "pooling", "tied", "dropout", "max_query_len", "max_passage_len", *OPTION_KEYS)
    need(cfg, "init")
    full = {k: cfg.get(k, DEFAULTS[k]) for k in keys}
    model = build_model(full)
    model.method = {"name": "dpr", "cfg": {}}  # used the way DPR's encoders are
    with atomic_path(out_dir, directory=True) as tmp:
        model.save(tmp)
    return {"init": full["init"], "meta": model.meta()}


def deterministic_on_cpu(device: torch.device) -> None:
    """CPU runs are deterministic (same config, same weights). Deterministic mode also fills
    every new tensor with NaN (to expose reads of uninitialised memory): 13% of a MiniLM
    reader step (10.2 -> 8.9 s, batch 4 x 4 passages x 192 tokens, 6 paired runs). The kernels
    a step runs write all their output, so the weights are the same without it (checked
    bitwise; the resume and rerun tests compare weights and tables)."""
    if device.type == "cpu":
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.utils.deterministic.fill_uninitialized_memory = False
