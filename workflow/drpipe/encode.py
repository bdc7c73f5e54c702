"""Encode shard ``i`` of ``N`` of the passage table with a model's passage encoder.

Each shard is its own job with its own outputs (``shard-i.npy`` vectors, ``shard-i.ids.npy``
pids), so a failed shard reruns alone. The shard's rows stream through in blocks of
``block_size`` passages; vectors go straight into a preallocated memory-mapped ``.npy`` under a
temporary name, renamed into place when the shard is complete, so memory does not grow with
the corpus and no half-written shard is ever visible. Within a block, ``encode_texts`` batches
passages in order of length (less padding); rows are written back in corpus order.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from drpipe.cliutil import add_cfg
from drpipe.corpus.passages import iter_passages, num_passages, shard_bounds
from drpipe.errors import InputError
from drpipe.io import atomic_path, progress, write_json

log = logging.getLogger(__name__)

DEFAULT_CFG: dict[str, Any] = {
    "batch_size": 64,
    "max_passage_len": 256,  # null: the model's own max_passage_len
    "bf16": "auto",
    "dtype": "float32",
    "block_size": 4096,
    "threads": None,
}
DTYPES = {"float32": np.float32, "float16": np.float16}


def ids_path_for(out: str | Path) -> Path:
    """``.../shard-3.npy`` -> ``.../shard-3.ids.npy``."""
    out = Path(out)
    return out.with_name(out.name.removesuffix(".npy") + ".ids.npy")


def merged_cfg(cfg: dict[str, Any], num_shards: int | None = None) -> dict[str, Any]:
    """``cfg`` over the defaults. ``shards`` (the config's shard count) may ride along: it must
    then equal ``--num-shards``, which catches a rule and its config disagreeing."""
    cfg = dict(cfg)
    shards = cfg.pop("shards", None)
    if shards is not None and num_shards is not None and int(shards) != num_shards:
        raise SystemExit(f"error: --cfg.shards={shards} but --num-shards={num_shards}")
    unknown = set(cfg) - set(DEFAULT_CFG)
    if unknown:
        raise SystemExit(f"error: --cfg has unknown keys {sorted(unknown)}")
    out = {**DEFAULT_CFG, **cfg}
    if out["dtype"] not in DTYPES:
        raise SystemExit(
            f"error: --cfg.dtype must be one of {sorted(DTYPES)}, not {out['dtype']!r}"
        )
    for key in ("batch_size", "block_size"):
        if int(out[key]) < 1:
            raise SystemExit(f"error: --cfg.{key} must be positive")
    return out


def _blocks(
    passages: str | Path, start: int, stop: int, size: int
) -> Iterator[tuple[np.ndarray, list[str], list[str | None]]]:
    """``(pids, titles, texts)`` of rows [start, stop) in blocks of ``size`` rows (the last may
    be shorter), whatever the file's row-group layout."""
    pids: list[np.ndarray] = []
    titles: list[str] = []
    texts: list[str | None] = []
    for batch in iter_passages(
        passages, columns=["pid", "title", "text"], start=start, stop=stop, batch_size=size
    ):
        pids.append(batch.column(0).to_numpy(zero_copy_only=False))
        titles += [t or "" for t in batch.column(1).to_pylist()]
        texts += batch.column(2).to_pylist()
        while len(titles) >= size:
            ids = np.concatenate(pids)
            yield ids[:size], titles[:size], texts[:size]
            pids, titles, texts = [ids[size:]], titles[size:], texts[size:]
    if titles:
        yield np.concatenate(pids), titles, texts


def set_threads(threads: int | None) -> None:
    if threads:
        import torch

        torch.set_num_threads(int(threads))


def encode_shard(
    model_dir: str | Path,
    passages: str | Path,
    shard: int,
    num_shards: int,
    out: str | Path,
    cfg: dict[str, Any],
    *,
    model=None,
) -> dict[str, Any]:
    """Encode rows ``shard_bounds(n, shard, num_shards)`` of ``passages`` into ``out`` (+ ids).

    ``model``: an already loaded ``BiEncoder`` (saves reloading it when called repeatedly, as in
    tests and benchmarks); by default it is loaded from ``model_dir``. Returns a report dict.
    """
    from drpipe.encoders import BiEncoder, encode_texts, select_device, use_bf16

    cfg = merged_cfg(cfg, num_shards)
    set_threads(cfg["threads"])
    out = Path(out)
    n_total = num_passages(passages)
    start, stop = shard_bounds(n_total, shard, num_shards)
    n = stop - start
    model = model if model is not None else BiEncoder.load(model_dir)
    device = select_device()
    bf16 = use_bf16(cfg["bf16"], device)
    encoder = model.passage.to(device)
    max_len = int(cfg["max_passage_len"] or model.max_passage_len)
    dtype = DTYPES[cfg["dtype"]]
    dim = int(encoder.model.config.hidden_size)
    log.info(
        "encoding passages %d..%d (shard %d/%d, %d rows) of %s on %s, bf16=%s, max_len=%d -> %s",
        start, stop, shard, num_shards, n, passages, device, bf16, max_len, out,
    )  # fmt: skip

    t0 = time.perf_counter()
    n_empty = 0
    with atomic_path(out) as tmp_vec, atomic_path(ids_path_for(out)) as tmp_ids:
        vecs = np.lib.format.open_memmap(tmp_vec, mode="w+", dtype=dtype, shape=(n, dim))
        ids = np.lib.format.open_memmap(tmp_ids, mode="w+", dtype=np.int64, shape=(n,))
        row = 0
        bar = progress(total=n, desc=f"encode shard {shard}", unit="psg")
        for pids, titles, texts in _blocks(passages, start, stop, int(cfg["block_size"])):
            for i, text in enumerate(texts):
                if text is None:
                    raise InputError(passages, f"pid {int(pids[i])}", "passage text is null")
            n_empty += sum(1 for t in texts if not t.strip())
            block = encode_texts(
                encoder, model.tokenizer, titles, texts,
                batch_size=int(cfg["batch_size"]), max_length=max_len, bf16=bf16, device=device,
                show_progress=False,
            )  # fmt: skip
            if block.shape[1] != dim:
                raise RuntimeError(f"encoder returned dimension {block.shape[1]}, expected {dim}")
            vecs[row : row + len(block)] = block
            ids[row : row + len(block)] = pids
            row += len(block)
            bar.update(len(block))
        bar.close()
        if row != n:
            raise RuntimeError(f"{passages}: read {row} rows for shard range {start}..{stop}")
        vecs.flush()
        ids.flush()
        del vecs, ids  # close the memory maps before the renames
    seconds = time.perf_counter() - t0
    if n_empty:
        log.warning("%d passages of this shard have empty text (encoded from title alone)", n_empty)
    report = {
        "passages": str(passages),
        "shard": shard,
        "num_shards": num_shards,
        "rows": [start, stop],
        "n_encoded": n,
        "n_empty_text": n_empty,
        "dim": dim,
        "dtype": cfg["dtype"],
        "bf16": bf16,
        "device": str(device),
        "max_passage_len": max_len,
        "seconds": round(seconds, 3),
        "passages_per_second": round(n / seconds, 2) if seconds > 0 else None,
    }
    log.info("encoded %d passages in %.1f s (%.1f/s)", n, seconds, n / max(seconds, 1e-9))
    return report


def _cmd_encode(args: argparse.Namespace) -> int:
    report = encode_shard(
        args.model, args.passages, args.shard, args.num_shards, args.out, args.cfg
    )
    if args.report:
        write_json(args.report, report)
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "encode",
        help="encode one shard of the passage table with a model's passage encoder",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="cfg defaults: " + json.dumps(DEFAULT_CFG),
    )
    p.add_argument(
        "--model", required=True, help="model directory (query/, passage/, drpipe_encoder.json)"
    )
    p.add_argument("--passages", required=True, help="passage table (Parquet)")
    p.add_argument("--shard", type=int, required=True, help="this shard's index, 0-based")
    p.add_argument("--num-shards", type=int, required=True)
    p.add_argument("--out", required=True, help="shard-I.npy; ids go to shard-I.ids.npy next to it")
    p.add_argument("--report", help="optional JSON report (counts, speed)")
    add_cfg(p)
    p.set_defaults(func=_cmd_encode)
