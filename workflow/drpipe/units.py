"""Unit ids: what a method indexes (passages, or sentences of passages) as one int64 each.

A passage unit is its pid; a sentence unit packs (pid, sentence number) as
``pid * SENT_SLOTS + sentence``. Numpy only, so mining and retrieval need not import torch.
"""

from __future__ import annotations

import numpy as np

__all__ = ["SENT_SLOTS", "UNIT_KINDS", "unit_id", "unit_pid", "unit_sentence"]

SENT_SLOTS = 1024  # sentences per passage at most (a 100-word passage has a few dozen)
UNIT_KINDS = ("passages", "sentences")


def unit_id(pids: np.ndarray, sents: np.ndarray | None = None) -> np.ndarray:
    """Unit ids of passages (``sents`` None) or of sentences ``sents`` of passages ``pids``."""
    pids = np.asarray(pids, dtype=np.int64)
    if sents is None:
        return pids
    sents = np.asarray(sents, dtype=np.int64)
    if (sents < 0).any() or (sents >= SENT_SLOTS).any():
        raise ValueError(f"sentence numbers must lie in [0, {SENT_SLOTS})")
    return pids * SENT_SLOTS + sents


def unit_sentence(units: np.ndarray) -> np.ndarray:
    """The sentence number (within its passage) of each sentence unit id."""
    return np.asarray(units, dtype=np.int64) % SENT_SLOTS


def unit_pid(units: np.ndarray, kind: str) -> np.ndarray:
    """The pid each unit id belongs to (padding ids < 0 stay -1)."""
    units = np.asarray(units, dtype=np.int64)
    if kind == "passages":
        return units
    return np.where(units >= 0, units // SENT_SLOTS, -1)
