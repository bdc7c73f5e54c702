"""Checkpoints: RNG states, what a checkpoint belongs to, saving and safely loading one.

A checkpoint (``state.pt`` in ``MODEL_DIR.ckpt/``) holds tensors and plain types only, so it
loads with ``weights_only`` and a tampered file cannot run code.
"""

from __future__ import annotations

import hashlib
import json
import logging
import pickle
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from drpipe.errors import InputError
from drpipe.io import atomic_path
from drpipe.training.settings import RUNTIME_KEYS

log = logging.getLogger(__name__)

CKPT_FILE = "state.pt"


def rng_states() -> dict[str, Any]:
    """RNG states as tensors and plain types, so a checkpoint loads with ``weights_only``."""
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
        # Dropout on a GPU draws from the CUDA generators: without them a resumed GPU run
        # would not end with the uninterrupted run's weights.
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_states(state: dict[str, Any]) -> None:
    """Restore what ``rng_states`` saved (python, numpy, torch and CUDA generators)."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state(
        (n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"])
    )
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda") or []  # absent in checkpoints written before it was saved
    if cuda and torch.cuda.is_available():
        if len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda)
        else:
            log.warning("checkpoint has the CUDA RNG states of %d devices, this process sees "
                        "%d: resuming with fresh ones (dropout draws differ from an "
                        "uninterrupted run)", len(cuda), torch.cuda.device_count())  # fmt: skip


def fingerprint(method: str, cfg: dict, train: Sequence[Path], val: Sequence[Path]) -> str:
    """What a checkpoint belongs to: a resume with other inputs or cfg starts afresh. Settings
    that change no weight (checkpoint cadence, logging, threads) are left out."""
    files = [(str(p.resolve()), p.stat().st_size) for p in [*train, *val]]
    kept = {k: v for k, v in cfg.items() if k not in RUNTIME_KEYS}
    blob = json.dumps({"method": method, "cfg": kept, "files": files}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def save_checkpoint(ckpt_dir: Path, state: dict[str, Any]) -> None:
    """Write ``state`` to ``ckpt_dir`` atomically (a kill mid-write keeps the previous one)."""
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    with atomic_path(ckpt_dir / CKPT_FILE) as tmp:
        torch.save(state, tmp)


def load_checkpoint(ckpt_dir: Path, fp: str) -> dict[str, Any] | None:
    """The checkpoint in ``ckpt_dir`` if it belongs to ``fp``. Loaded with ``weights_only``:
    tensors and plain types only, so a tampered file cannot run code."""
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
