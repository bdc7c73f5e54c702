"""Tokenize once: a corpus shard's passages as token ids, written once per tokenizer and passage
format and read by every encoding that shares them; and the feed that turns stored ids into
padded batches on a background thread while the model runs.

``drpipe tokenize`` writes shard ``i`` of ``N`` (rows ``shard_bounds``) as three files beside
``PREFIX`` (the rule's ``results/tokens/<tokenizer key>/<format key>/shard-i``):

- ``PREFIX.tokens.npy``: every passage's ids, unpadded, end to end (uint16 when the vocabulary
  fits, else int32);
- ``PREFIX.rows.npy``: one record per passage, in corpus order: ``pid``, ``end`` (its last id's
  end in ``tokens``), ``key`` (characters of title + text: the order encoding batches by, as
  the text path sorts), ``sentences`` (sentences of a ``marked`` passage, else 0) and ``flags``
  (1: empty text; 2: a marked passage's last kept sentence lost words to the maximum length);
- ``PREFIX.json``: what the ids are of: the tokenizer (its name and ``tokenizer_hash``, over
  its vocabulary, normaliser, special and added tokens, never its path), the maximum length,
  the passage format, the shard's rows and the passage table.

Formats: ``passages`` (``drpipe.encoders.tokenize_passages``: DPR's pair, or one text with the
title joined or dropped, the passage prefix first) and ``marked`` (DCSR:
``drpipe.methods.dcsr_parts.markers.tokenize_marked``, ``<sent>`` before every sentence). Ids
are those functions' own output, padding stripped, so a batch built here from stored ids is the
batch the text path builds (``pad_batch``): the same rows, in the same order, padded to the
same length. Both files are appended block by block: memory does not grow with the corpus.

Encoding (``drpipe encode --tokens PREFIX``) checks the JSON against its model (tokenizer hash,
maximum length, format) and stops on any difference. ``feed`` reads the ids in blocks of
``block_size`` rows, orders each block by ``key`` (stable, as the text path does: same batches,
so the same vectors bit for bit; batching by token length would pad less but change float
rounding) and pads each batch on a background thread (into pinned memory on CUDA) while the
device runs the previous one; ``run_batches`` copies vectors back asynchronously on CUDA and
hands them over in order.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from drpipe.cliutil import add_cfg, add_runtime
from drpipe.errors import InputError
from drpipe.io import atomic_path, progress, write_json
from drpipe.vectors import NpyAppender

log = logging.getLogger(__name__)

VERSION = 1
FORMATS = ("passages", "marked")
EMPTY, TEXT_CUT = 1, 2  # ROW_DTYPE flags
ROW_DTYPE = np.dtype(
    [("pid", "<i8"), ("end", "<i8"), ("key", "<i8"), ("sentences", "<i4"), ("flags", "u1")]
)
DEFAULT_CFG: dict[str, Any] = {
    "format": "passages",  # passages | marked
    "max_length": None,  # required
    "add_tokens": [],  # special tokens the method adds (DCSR: <sent>)
    "passage_prefix": "",
    "title": "pair",
    "title_sep": ". ",
    "block_size": 4096,  # rows read and tokenized at a time (changes no id)
}


def paths(prefix: str | Path) -> dict[str, Path]:
    """The files of a token shard: ``tokens``, ``rows``, ``meta``."""
    prefix = str(prefix)
    return {
        "tokens": Path(prefix + ".tokens.npy"),
        "rows": Path(prefix + ".rows.npy"),
        "meta": Path(prefix + ".json"),
    }


# ------------------------------------------------------------------ tokenizer identity, format


def tokenizer_hash(tokenizer) -> str:
    """sha256 (16 hex digits) of what decides a tokenizer's ids and padding: its backend
    (vocabulary, normaliser, pre-tokeniser, post-processor, added tokens; the truncation and
    padding a call last set are left out), class, input names, pad id and side. Equal for a
    tokenizer and its ``save_pretrained`` copy; the path it was read from is not part of it."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        spec = json.loads(backend.to_str())
        spec["truncation"] = None
        spec["padding"] = None
    else:  # a slow tokenizer: its vocabulary and special tokens
        spec = {"vocab": sorted(tokenizer.get_vocab().items())}
    spec["drpipe"] = {
        "class": type(tokenizer).__name__,
        "inputs": list(tokenizer.model_input_names),
        "pad_id": tokenizer.pad_token_id,
        "padding_side": tokenizer.padding_side,
        "special": sorted(str(t) for t in tokenizer.all_special_tokens),
        "lower": bool(getattr(tokenizer, "do_lower_case", False)),
    }
    text = json.dumps(spec, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def passage_format(cfg: dict[str, Any]) -> dict[str, Any]:
    """The format keys that decide a passage's ids (what the JSON records and encode checks)."""
    fmt = cfg.get("format", "passages")
    if fmt not in FORMATS:
        raise SystemExit(f"error: --cfg.format must be one of {list(FORMATS)}, not {fmt!r}")
    if fmt == "marked":  # DCSR: the pair, no prefix (encoder_settings refuses the others)
        return {"format": fmt}
    title = cfg.get("title", "pair")
    return {
        "format": fmt,
        "passage_prefix": cfg.get("passage_prefix", ""),
        "title": title,
        **({"title_sep": cfg.get("title_sep", ". ")} if title == "concat" else {}),
    }


def model_format(model, units: str) -> dict[str, Any]:
    """The format a loaded ``BiEncoder`` of a method with corpus ``units`` reads passages in."""
    if units == "sentences":
        return passage_format({"format": "marked"})
    return passage_format({"format": "passages", **vars(model.text)})


def load_tokenizer(source: str, add_tokens: Sequence[str] = ()):
    """A tokenizer as training builds one (``BiEncoder.from_init``): from ``source`` (an encoder
    init: hub id, path, ``packaged:PKG``; or a drpipe model directory, whose ``query/`` it
    reads) with ``add_tokens`` added as special tokens."""
    from transformers import AutoTokenizer  # lazy: ~1 s

    from drpipe.encoder_settings import resolve_init

    path = Path(source)
    if (path / "drpipe_encoder.json").is_file():
        tokenizer = AutoTokenizer.from_pretrained(path / "query")
    else:
        tokenizer = AutoTokenizer.from_pretrained(resolve_init(source))
    if add_tokens:
        tokenizer.add_special_tokens({"additional_special_tokens": list(add_tokens)})
    return tokenizer


def id_dtype(tokenizer) -> np.dtype:
    return np.dtype(np.uint16 if len(tokenizer) <= np.iinfo(np.uint16).max + 1 else np.int32)


# ------------------------------------------------------------------------------- writing


def unpadded(batch, n: int, side: str) -> list[np.ndarray]:
    """Each row's ids without its padding (the attention mask's ones)."""
    ids = batch["input_ids"].numpy()
    lengths = batch["attention_mask"].numpy().sum(1)
    if side == "left":
        return [ids[i, ids.shape[1] - lengths[i] :] for i in range(n)]
    return [ids[i, : lengths[i]] for i in range(n)]


def format_method(fmt: str) -> str:
    """The registered method whose ``tokenize_corpus`` writes format ``fmt`` (the first by
    name whose ``token_format`` it is; read from the registry, so that a method's code enters
    the code hashes of those that use it only: the rule names it, ``PlanBase.code``)."""
    from drpipe.methods import method_class, method_names

    for name in method_names():
        if method_class(name).token_format == fmt:
            return name
    raise SystemExit(f"error: no registered method encodes token format {fmt!r}")


def tokenize_block(
    tokenizer, fmt: dict[str, Any], max_length: int, titles, texts, spans=None
) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """(ids per passage, sentences per passage, text-cut flags) of a block, as the text path's
    tokenizer call makes them (padding stripped): ``Method.tokenize_corpus`` of the format's
    method."""
    from drpipe.methods import method_class

    klass = method_class(format_method(fmt["format"]))
    return klass.tokenize_corpus(tokenizer, fmt, max_length, titles, texts, spans)


def tokenize_shard(
    tokenizer_source: str,
    passages: str | Path,
    shard: int,
    num_shards: int,
    out: str | Path,
    cfg: dict[str, Any],
    *,
    sentences: str | Path | None = None,
    tokenizer=None,
) -> dict[str, Any]:
    """Write the token shard ``out`` (a prefix: ``paths(out)``) of rows
    ``shard_bounds(n, shard, num_shards)`` of ``passages``. Returns a report dict."""
    from drpipe.corpus.passages import num_passages, shard_bounds
    from drpipe.encode import _blocks, attach_sentences

    unknown = set(cfg) - set(DEFAULT_CFG) - {"threads"}
    if unknown:
        raise SystemExit(f"error: --cfg has unknown keys {sorted(unknown)}")
    cfg = {**DEFAULT_CFG, **cfg}
    if not cfg["max_length"] or int(cfg["max_length"]) < 2:
        raise SystemExit("error: --cfg.max_length must be an integer >= 2")
    max_length = int(cfg["max_length"])
    fmt = passage_format(cfg)
    if fmt["format"] == "marked" and sentences is None:
        raise SystemExit("error: format marked reads the sentences: give --sentences")
    add_tokens = list(cfg["add_tokens"] or [])
    if tokenizer is None:
        tokenizer = load_tokenizer(tokenizer_source, add_tokens)
    dtype = id_dtype(tokenizer)
    n_total = num_passages(passages)
    start, stop = shard_bounds(n_total, shard, num_shards)
    files = paths(out)
    t0 = time.perf_counter()
    blocks = _blocks(passages, start, stop, int(cfg["block_size"]))
    if fmt["format"] == "marked":
        blocks = attach_sentences(blocks, sentences)
    n_rows = n_tokens = n_empty = 0
    with atomic_path(files["tokens"]) as tmp_tok, atomic_path(files["rows"]) as tmp_rows:
        toks = NpyAppender(tmp_tok, dtype, None)
        rows = NpyAppender(tmp_rows, ROW_DTYPE, None)
        bar = progress(total=stop - start, desc=f"tokenize shard {shard}", unit="psg")
        try:
            for pids, titles, texts, *spans in blocks:
                for i, text in enumerate(texts):
                    if text is None:
                        raise InputError(passages, f"pid {int(pids[i])}", "passage text is null")
                ids, n_sent, cut = tokenize_block(
                    tokenizer, fmt, max_length, titles, texts, spans[0] if spans else None
                )
                rec = np.zeros(len(ids), ROW_DTYPE)
                rec["pid"] = pids
                lengths = np.fromiter((len(x) for x in ids), np.int64, len(ids))
                rec["end"] = n_tokens + np.cumsum(lengths)
                rec["key"] = [len(t) + len(x) for t, x in zip(titles, texts, strict=True)]
                rec["sentences"] = n_sent
                empty = np.fromiter((not x.strip() for x in texts), bool, len(texts))
                rec["flags"] = empty * EMPTY + cut * TEXT_CUT
                toks.append(np.concatenate(ids) if ids else np.empty(0, dtype))
                rows.append(rec)
                n_tokens += int(lengths.sum())
                n_rows += len(ids)
                n_empty += int(empty.sum())
                bar.update(len(ids))
        finally:
            bar.close()
            toks.close()
            rows.close()
        if n_rows != stop - start:
            raise RuntimeError(f"{passages}: read {n_rows} rows for shard range {start}..{stop}")
        meta = {
            "version": VERSION,
            "tokenizer": {
                "source": str(tokenizer_source),
                "add_tokens": add_tokens,
                "hash": tokenizer_hash(tokenizer),
                "class": type(tokenizer).__name__,
                "vocab_size": len(tokenizer),
                "inputs": list(tokenizer.model_input_names),
                "pad_id": tokenizer.pad_token_id,
                "padding_side": tokenizer.padding_side,
                "sent_id": (tokenizer.convert_tokens_to_ids(add_tokens[0]) if add_tokens else None),
            },
            "max_length": max_length,
            **fmt,
            "id_dtype": dtype.name,
            "passages": str(passages),
            "shard": shard,
            "num_shards": num_shards,
            "rows": [start, stop],
            "n_passages": n_rows,
            "n_tokens": n_tokens,
            "n_empty_text": n_empty,
        }
        write_json(files["meta"], meta)
    seconds = time.perf_counter() - t0
    log.info("tokenized %d passages (%d ids) in %.1f s -> %s", n_rows, n_tokens, seconds, out)
    return {**meta, "seconds": round(seconds, 3),
            "passages_per_second": round(n_rows / seconds, 1) if seconds > 0 else None}  # fmt: skip


# ------------------------------------------------------------------------------- reading


@dataclass
class TokenShard:
    """A token shard opened read-only: ids and rows memory-mapped, its JSON."""

    prefix: Path
    meta: dict[str, Any]
    tokens: np.ndarray
    rows: np.ndarray
    starts: np.ndarray = field(init=False)  # int64 [n]: each passage's first id in ``tokens``

    def __post_init__(self) -> None:
        ends = np.asarray(self.rows["end"], np.int64)
        self.starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)

    @classmethod
    def open(cls, prefix: str | Path) -> TokenShard:
        files = paths(prefix)
        try:
            meta = json.loads(files["meta"].read_text())
            tokens = np.load(files["tokens"], mmap_mode="r", allow_pickle=False)
            rows = np.load(files["rows"], mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise InputError(prefix, None, f"cannot read this token shard ({exc})") from None
        if meta.get("version") != VERSION or rows.dtype != ROW_DTYPE:
            raise InputError(prefix, None, f"token shard of another version ({meta.get('version')}"
                             f"; this drpipe reads {VERSION}): tokenize again")  # fmt: skip
        if len(rows) != meta["n_passages"] or (len(rows) and rows["end"][-1] != len(tokens)):
            raise InputError(prefix, None, "ids and rows do not fit together (truncated?)")
        return cls(Path(prefix), meta, tokens, rows)

    def __len__(self) -> int:
        return len(self.rows)

    def check(self, tokenizer, max_length: int, fmt: dict[str, Any], rows=None) -> None:
        """Stop unless these ids are what ``tokenizer`` makes at ``max_length`` in ``fmt`` (and
        of passage rows ``rows``)."""
        want = {"tokenizer hash": tokenizer_hash(tokenizer), "max_length": int(max_length),
                **fmt, **({"rows": list(rows)} if rows is not None else {})}  # fmt: skip
        got = {"tokenizer hash": self.meta["tokenizer"]["hash"],
               **{k: self.meta.get(k) for k in want if k != "tokenizer hash"}}  # fmt: skip
        diff = {k: (got[k], want[k]) for k in want if got[k] != want[k]}
        if diff:
            raise InputError(self.prefix, None, "these token ids are not the model's (stored, "
                             f"model): {diff}; tokenize again or encode from text")  # fmt: skip


# ---------------------------------------------------------------------------------- feeding


@dataclass
class Batch:
    """One batch of a block, ready for the device: ``idx`` its rows' positions in the block
    (``block_rows`` rows from shard row ``block_start``), in batch order."""

    block: int
    block_start: int
    block_rows: int
    idx: np.ndarray
    inputs: dict[str, Any]  # torch tensors (pinned on CUDA)
    lengths: np.ndarray  # real ids per row
    last: bool  # the block's last batch
    extra: dict[str, Any] = field(default_factory=dict)


def pad_ids(
    tokens: np.ndarray, starts: np.ndarray, lengths: np.ndarray, pad_id: int, side: str = "right"
) -> tuple[np.ndarray, np.ndarray]:
    """(ids int64 [b, L], attention mask int64 [b, L]) of ``b`` passages, ``L`` their longest."""
    width = int(lengths.max()) if len(lengths) else 0
    at = np.arange(width, dtype=np.int64)
    if side == "left":
        mask = at[None, :] >= (width - lengths)[:, None]
        pos = starts[:, None] + at[None, :] - (width - lengths)[:, None]
    else:
        mask = at[None, :] < lengths[:, None]
        pos = starts[:, None] + at[None, :]
    lo = int(starts.min()) if len(starts) else 0
    hi = int((starts + lengths).max()) if len(starts) else 0
    window = np.asarray(tokens[lo:hi], dtype=np.int64)  # one read of the batch's span
    ids = np.where(mask, window[np.clip(pos - lo, 0, max(hi - lo - 1, 0))], pad_id)
    return ids, mask.astype(np.int64)


def host_batches(
    shard: TokenShard,
    block_size: int,
    batch_size: int,
    *,
    pin: bool = False,
    extra: Callable[[np.ndarray, np.ndarray, np.ndarray], dict[str, Any]] | None = None,
) -> Iterator[Batch]:
    """The host side of the feed: blocks of ``block_size`` rows, each ordered by ``key``
    (stable), cut into batches of ``batch_size``, padded (``inputs`` as the tokenizer returns
    them: its input names, segments all 0), pinned when ``pin``. ``extra(ids, mask, rows)``
    adds a method's per-batch tensors (DCSR: marker positions)."""
    import torch  # lazy: ~1 s

    tok = shard.meta["tokenizer"]
    pad_id, side, names = int(tok["pad_id"] or 0), tok["padding_side"], tok["inputs"]
    n = len(shard)
    keys = shard.rows["key"]
    ends = shard.rows["end"]
    for block, lo in enumerate(range(0, n, block_size)):
        hi = min(lo + block_size, n)
        order = np.argsort(np.asarray(keys[lo:hi], np.int64), kind="stable")
        starts = shard.starts[lo:hi]
        lengths = np.asarray(ends[lo:hi], np.int64) - starts
        for b in range(0, hi - lo, batch_size):
            idx = order[b : b + batch_size]
            ids, mask = pad_ids(shard.tokens, starts[idx], lengths[idx], pad_id, side)
            arrays = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in names:
                arrays["token_type_ids"] = np.zeros_like(ids)
            inputs = {k: torch.from_numpy(arrays[k]) for k in names if k in arrays}
            if pin:
                inputs = {k: v.pin_memory() for k, v in inputs.items()}
            more = extra(ids, mask, shard.rows[lo:hi][idx]) if extra is not None else {}
            yield Batch(block, lo, hi - lo, idx, inputs, lengths[idx], b + batch_size >= hi - lo,
                        more)  # fmt: skip


_DONE = object()


def background(items: Iterator[Any], depth: int = 4) -> Iterator[Any]:
    """``items`` produced on a background thread, at most ``depth`` ahead of the consumer, in
    order; an exception there is raised here; stopping early stops the thread."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                while not stop.is_set():
                    try:
                        q.put((item, None), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put((_DONE, None))
        except BaseException as exc:  # noqa: BLE001 (re-raised in the consumer)
            q.put((_DONE, exc))

    thread = threading.Thread(target=produce, name="drpipe-feed", daemon=True)
    thread.start()
    try:
        while True:
            item, exc = q.get()
            if item is _DONE:
                if exc is not None:
                    raise exc
                return
            yield item
    finally:
        stop.set()
        while thread.is_alive():  # unblock a producer waiting on a full queue
            try:
                q.get_nowait()
            except queue.Empty:
                thread.join(0.05)


def feed(
    shard: TokenShard, block_size: int, batch_size: int, device, *, extra=None, depth: int = 4
) -> Iterator[Batch]:
    """``host_batches`` on a background thread (pinned memory on CUDA)."""
    pin = getattr(device, "type", str(device)) == "cuda"
    return background(host_batches(shard, block_size, batch_size, pin=pin, extra=extra), depth)


def run_batches(
    batches: Iterator[Batch], forward: Callable[[Batch, dict, dict], Any], device
) -> Iterator[tuple[Batch, np.ndarray]]:
    """(batch, float32 numpy output of ``forward(batch, inputs, extra)``), in batch order, with
    ``inputs`` and the tensors of ``batch.extra`` on ``device``. On CUDA they go over
    non-blocking from pinned memory and the output comes back into pinned memory non-blocking:
    batch k's copy back overlaps batch k+1's forward pass. On a CPU the tensors themselves."""
    import torch  # lazy

    cuda = getattr(device, "type", str(device)) == "cuda"
    pending = None
    for b in batches:
        if cuda:
            inputs = {k: v.to(device, non_blocking=True) for k, v in b.inputs.items()}
            extra = {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v
                     for k, v in b.extra.items()}  # fmt: skip
        else:
            inputs, extra = b.inputs, b.extra
        out = forward(b, inputs, extra).float()
        if cuda:
            host = torch.empty(out.shape, dtype=out.dtype, pin_memory=True)
            host.copy_(out, non_blocking=True)
            event = torch.cuda.Event()
            event.record()
            item = (b, host, event)
        else:
            item = (b, out, None)
        if pending is not None:
            yield _finish(pending)
        pending = item
    if pending is not None:
        yield _finish(pending)


def _finish(item) -> tuple[Batch, np.ndarray]:
    b, host, event = item
    if event is not None:
        event.synchronize()
    return b, host.numpy()


# ------------------------------------------------------------------------ encoding passages


def encode_passage_tokens(
    model, shard: TokenShard, settings, block_size: int
) -> Iterator[tuple[np.ndarray, np.ndarray, int]]:
    """(unit ids, vectors, passages) per block of ``block_size`` rows, one vector per passage:
    ``Method.encode_corpus`` of the same rows, from ids."""
    import torch  # lazy

    from drpipe.encoders import autocast
    from drpipe.units import unit_id

    encoder = model.passage.to(settings.device)
    dim = int(encoder.model.config.hidden_size)
    was_training = encoder.training
    encoder.eval()
    out: np.ndarray | None = None
    try:
        with torch.inference_mode(), autocast(settings.device, settings.bf16):
            batches = feed(shard, block_size, settings.batch_size, settings.device)

            def forward(b: Batch, inputs: dict, extra: dict):
                return encoder(inputs)

            for b, vecs in run_batches(batches, forward, settings.device):
                if out is None or len(out) != b.block_rows:
                    out = np.empty((b.block_rows, vecs.shape[1] if vecs.size else dim), np.float32)
                out[b.idx] = vecs
                if b.last:
                    pids = np.asarray(
                        shard.rows["pid"][b.block_start : b.block_start + b.block_rows]
                    )
                    yield unit_id(pids), out, b.block_rows
                    out = None
    finally:
        encoder.train(was_training)


# ------------------------------------------------------------------------------------- CLI


def _cmd_tokenize(args: argparse.Namespace) -> int:
    report = tokenize_shard(
        args.tokenizer, args.passages, args.shard, args.num_shards, args.out, args.cfg,
        sentences=args.sentences,
    )  # fmt: skip
    if args.report:
        write_json(args.report, report)
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "tokenize",
        help="write one corpus shard's token ids once (read by every encoding that shares them)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="cfg defaults: " + json.dumps(DEFAULT_CFG),
    )
    p.add_argument("--tokenizer", required=True,
                   help="encoder init (hub id, path, packaged:PKG) or a drpipe model directory")  # fmt: skip
    p.add_argument("--passages", required=True, help="passage table (Parquet)")
    p.add_argument("--sentences", help="sentence table (Parquet), for format marked")
    p.add_argument("--shard", type=int, required=True, help="this shard's index, 0-based")
    p.add_argument("--num-shards", type=int, required=True)
    p.add_argument("--out", required=True,
                   help="prefix: PREFIX.tokens.npy, PREFIX.rows.npy, PREFIX.json")  # fmt: skip
    p.add_argument("--report", help="optional JSON report (counts, speed)")
    add_cfg(p)
    add_runtime(p, "block_size")
    p.set_defaults(func=_cmd_tokenize)
