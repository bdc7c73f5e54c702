"""The cfg keys of the ``drpipe aopt`` commands, their defaults, and checking a run's cfg."""

from __future__ import annotations

from typing import Any

LABEL_MODES = ("answers", "prf")
SIDES = ("passage", "query")
DEFAULT_CFG: dict[str, Any] = {
    "labels": "answers",  # answers: knowledge filtering (eq. 8); prf: top prf_positives relevant
    "depth": 100,  # k: the top-k passages of each question that get a label
    "prf_positives": 3,
    "lr": 0.1,
    # One command is one round, and a round is one epoch (AOpt 2.3.3 and 3.1.4): one step per
    # vector, then the index and the labels are rebuilt. More epochs on the same labels drove
    # every oracle question to its positive at rank 1 (measured at mini: top-1 = top-100).
    "max_epochs": 1,
    "patience": 5,
    "threads": None,
}
DEFAULT_LINEAR_CFG: dict[str, Any] = {
    "labels": "answers",
    "depth": 100,
    "prf_positives": 3,
    "alpha": 1.0,
    "beta": 0.6,
    "gamma": -0.1,
    "threads": None,
}
DEFAULT_GRID_CFG: dict[str, Any] = {
    **{k: v for k, v in DEFAULT_LINEAR_CFG.items() if k not in ("beta", "gamma")},
    "betas": [round(0.1 * i, 1) for i in range(10)],
    "gammas": [round(-0.1 * i, 1) for i in range(10)],
    "ks": [1, 5, 20, 100],
    "top_k": 100,
}


def merged_cfg(cfg: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    unknown = set(cfg) - set(defaults)
    if unknown:
        raise SystemExit(f"error: --cfg has unknown keys {sorted(unknown)}")
    out = {**defaults, **cfg}
    if out["labels"] not in LABEL_MODES:
        raise SystemExit(f"error: --cfg.labels must be one of {LABEL_MODES}, not {out['labels']!r}")
    for key in ("depth", "prf_positives", "max_epochs", "patience", "top_k"):
        if key in out and int(out[key]) < 1:
            raise SystemExit(f"error: --cfg.{key} must be a positive integer")
    return out
