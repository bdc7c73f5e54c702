"""Training data: examples read and filtered, the validation split, the order of global batches.

Numpy only: every draw is fixed by the run's seed (and the epoch), whatever the ranks.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from drpipe.errors import InputError
from drpipe.qa.mining import CTX_LISTS, read_biencoder

log = logging.getLogger(__name__)


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


def load_training_data(
    train_paths: Sequence[Path], val_paths: Sequence[Path], cfg: dict[str, Any]
) -> tuple[list[dict], list[dict], dict[str, Any], list[str]]:
    """(train, val, counts, origins): the examples of ``train_paths``, validation from
    ``val_paths`` or else a held-out ``val_fraction`` of them, a ``max_examples`` sample when
    set, and the file each example of ``[*train, *val]`` was read from."""
    counts: dict[str, Any] = {"n_read": 0, "n_discarded_no_positive": 0}
    examples: list[dict] = []
    files: list[str] = []
    modes = cfg.get("answer_match") or {}

    def read(p: Path) -> tuple[list[dict], int]:
        ex, dropped = read_examples(p)
        if str(p) in modes:
            for e in ex:
                e.setdefault("match", modes[str(p)])
        return ex, dropped

    for p in train_paths:
        ex, dropped = read(p)
        examples += ex
        files += [str(p)] * len(ex)
        counts["n_read"] += len(ex) + dropped
        counts["n_discarded_no_positive"] += dropped
        if dropped:
            log.warning("%s: discarded %d examples without a positive passage", p, dropped)
    seed = int(cfg["seed"])
    if val_paths:
        val, val_files = [], []
        for p in val_paths:
            ex, dropped = read(p)
            val += ex
            val_files += [str(p)] * len(ex)
            counts["n_val_discarded_no_positive"] = (
                counts.get("n_val_discarded_no_positive", 0) + dropped
            )
        train, train_files = examples, files
        counts["validation"] = "development files (all training examples are trained on)"
    else:
        tr_idx, val_idx = split_validation(len(examples), float(cfg["val_fraction"]), seed)
        train, train_files = [examples[i] for i in tr_idx], [files[i] for i in tr_idx]
        val, val_files = [examples[i] for i in val_idx], [files[i] for i in val_idx]
        counts["validation"] = f"held-out {cfg['val_fraction']} of the training examples"
    if cfg["max_examples"] is not None and int(cfg["max_examples"]) < len(train):
        keep = np.sort(
            np.random.default_rng([seed, 11]).permutation(len(train))[: int(cfg["max_examples"])]
        )
        counts["n_not_sampled"] = len(train) - len(keep)
        train, train_files = [train[i] for i in keep], [train_files[i] for i in keep]
    if not train:
        raise InputError(train_paths[0], None, "no training examples with a positive passage")
    counts["n_train"], counts["n_val"] = len(train), len(val)
    return train, val, counts, [*train_files, *val_files]


def check_dropped(
    dropped: dict[int, str], origins: Sequence[str], limit: float, method: str
) -> dict[str, dict[str, Any]]:
    """Examples a method cannot use, per file: ``{file: {examples, dropped, fraction, causes}}``
    (``origins[i]``: the file of example i). A file that loses more than ``limit`` of its
    examples stops the run with an error naming the file, the count and each cause.

    DPR's own filter (examples without a positive passage, DPR Table 1's "train" against
    "train with gold passages") happens when the files are read and is counted there, not here.
    """
    per_file: dict[str, dict[str, Any]] = {}
    for path in origins:
        rec = per_file.setdefault(path, {"examples": 0, "dropped": 0, "causes": {}})
        rec["examples"] += 1
    for i, cause in dropped.items():
        rec = per_file[origins[i]]
        rec["dropped"] += 1
        rec["causes"][cause] = rec["causes"].get(cause, 0) + 1
    for path, rec in per_file.items():
        rec["fraction"] = rec["dropped"] / max(rec["examples"], 1)
        if rec["fraction"] > limit:
            causes = "; ".join(f"{n} because: {why}" for why, n in sorted(rec["causes"].items()))
            raise InputError(
                path,
                None,
                f"method {method} cannot use {rec['dropped']} of its {rec['examples']} examples "
                f"({rec['fraction']:.1%}, more than max_dropped_fraction {limit:g}): {causes}",
            )
    return per_file
