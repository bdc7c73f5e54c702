"""Encode shard ``i`` of ``N`` of the corpus with a model, as its method says; and questions.

``encode``: each shard is its own job with its own outputs (``shard-i.npy`` vectors,
``shard-i.ids.npy`` unit ids), so a failed shard reruns alone. The method the model was trained
with (recorded in the model directory) decides which units get vectors: one per passage (DPR)
or one per sentence (DCSR, which then reads the sentence table too); unit ids follow
``drpipe.methods.base.unit_id``. The shard's rows stream through in blocks of ``block_size``
passages, and vectors are appended to a ``.npy`` under a temporary name, renamed into place
when the shard is complete: memory does not grow with the corpus and no half-written shard is
ever visible. Maximum lengths come from the model's own metadata. With ``--tokens`` the shard's
token ids, written once by ``drpipe tokenize`` (``drpipe.tokens``) for every model that shares
the tokenizer, maximum length and passage format, are read instead of the text: checked against
the model, fed from a background thread, the same batches and so the same vectors bit for bit.

``encode-queries``: the question vectors of a question table (``X.npy`` and ``X.ids.npy`` with
the qids in table order), so that retrieval, the hybrid and AOpt can run from stored vectors
without loading a model.

Batch and block sizes change no vector (checked by a test) and are passed outside ``--cfg``
(except at precision int8, whose activations are quantized per batch).

``precision`` (fp32 | bf16 | int8 | auto, ``drpipe.precision.resolve_precision``): the path of
the forward pass; the path that ran, the setting and why are in every report.
``int8_weight_bits`` (auto | 7 | 8, ``drpipe.precision.weight_bits``): the int8 path's weights.
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

from drpipe.cliutil import add_cfg, add_runtime, set_threads
from drpipe.corpus.passages import iter_passages, num_passages, shard_bounds
from drpipe.corpus.sentences import iter_sentence_groups
from drpipe.environment import environment
from drpipe.errors import InputError
from drpipe.io import atomic_path, progress, write_json
from drpipe.qa.datasets import read_questions
from drpipe.runtime import runtime_keys
from drpipe.tokens import TokenShard, model_format
from drpipe.tokens import register as register_tokenize
from drpipe.vectors import NpyAppender, ids_path_for

log = logging.getLogger(__name__)

DEFAULT_CFG: dict[str, Any] = {
    "batch_size": 64,
    "precision": "auto",
    "int8_weight_bits": "auto",
    "dtype": "float32",
    "block_size": 4096,
    "threads": None,
}
DEFAULT_QUERY_CFG: dict[str, Any] = {
    "batch_size": 128,
    "precision": "auto",
    "int8_weight_bits": "auto",
    "threads": None,
}
DTYPES = {"float32": np.float32, "float16": np.float16}
RUNTIME = runtime_keys("properties", "encode")  # change no vector (schema: x-runtime)


def merged_cfg(cfg: dict[str, Any], defaults: dict[str, Any] = DEFAULT_CFG) -> dict[str, Any]:
    """``cfg`` over the defaults; unknown keys and bad values are errors naming the key."""
    unknown = set(cfg) - set(defaults)
    if unknown:
        raise SystemExit(f"error: --cfg has unknown keys {sorted(unknown)}")
    # lazy: import torch (see encode_shard)
    from drpipe.precision import PRECISION_SETTINGS, WEIGHT_BITS

    out = {**defaults, **cfg}
    if str(out["precision"]).lower() not in PRECISION_SETTINGS:
        raise SystemExit(f"error: --cfg.precision must be one of {list(PRECISION_SETTINGS)}, "
                         f"not {out['precision']!r}")  # fmt: skip
    if str(out["int8_weight_bits"]).lower() not in {str(b) for b in WEIGHT_BITS}:
        raise SystemExit(f"error: --cfg.int8_weight_bits must be one of {list(WEIGHT_BITS)}, "
                         f"not {out['int8_weight_bits']!r}")  # fmt: skip
    if "dtype" in out and out["dtype"] not in DTYPES:
        raise SystemExit(
            f"error: --cfg.dtype must be one of {sorted(DTYPES)}, not {out['dtype']!r}"
        )
    for key in ("batch_size", "block_size"):
        if key in out and int(out[key]) < 1:
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


def attach_sentences(
    blocks: Iterator[tuple[np.ndarray, list[str], list[str]]], sentences: str | Path
) -> Iterator[tuple[np.ndarray, list[str], list[str], list[list[tuple[int, int]]]]]:
    """Add each passage's sentence spans to the blocks (both tables are in corpus order)."""
    groups = iter_sentence_groups(sentences)
    for pids, titles, texts in blocks:
        spans = []
        for pid in pids:
            for got, sp in groups:
                if got == pid:
                    spans.append(sp)
                    break
            else:
                raise InputError(sentences, f"pid {int(pid)}", "no sentences for this passage "
                                 "(the sentence table is not of this passage table)")  # fmt: skip
        yield pids, titles, texts, spans


def encode_shard(
    model_dir: str | Path,
    passages: str | Path | None,
    shard: int,
    num_shards: int,
    out: str | Path,
    cfg: dict[str, Any],
    *,
    sentences: str | Path | None = None,
    model=None,
    tokens: str | Path | None = None,
) -> dict[str, Any]:
    """Encode rows ``shard_bounds(n, shard, num_shards)`` of ``passages`` into ``out`` (+ ids):
    the units and vectors the model's method gives each passage.

    ``tokens``: the shard's token ids (``drpipe.tokens``, a prefix as ``drpipe tokenize --out``
    takes), read instead of the text (``passages`` and ``sentences`` may then be None): the same
    vectors bit for bit, the ids checked against the model's tokenizer, maximum length and
    passage format first. ``model``: an already loaded ``BiEncoder`` (saves reloading it when
    called repeatedly, as in tests and benchmarks); by default it is loaded from ``model_dir``.
    Returns a report dict.
    """
    # lazy: these import torch (~1 s at CLI start-up, which imports this module)
    from drpipe.encoders import BiEncoder, select_device
    from drpipe.methods import get_method
    from drpipe.methods.base import EncodeSettings
    from drpipe.precision import resolve_precision

    cfg = merged_cfg(cfg)
    set_threads(cfg["threads"])
    out = Path(out)
    token_shard = TokenShard.open(tokens) if tokens is not None else None
    if passages is not None:
        start, stop = shard_bounds(num_passages(passages), shard, num_shards)
    elif token_shard is not None:
        start, stop = token_shard.meta["rows"]
        passages = token_shard.meta["passages"]
        if [token_shard.meta["shard"], token_shard.meta["num_shards"]] != [shard, num_shards]:
            raise InputError(tokens, None, f"token shard {token_shard.meta['shard']} of "
                             f"{token_shard.meta['num_shards']}, not {shard} of {num_shards}")  # fmt: skip
    else:
        raise SystemExit("error: give --passages or --tokens")
    n = stop - start
    model = model if model is not None else BiEncoder.load(model_dir)
    method = get_method(model.method["name"], model.method["cfg"])
    if token_shard is not None:
        if method.token_format is None:
            raise SystemExit(f"error: method {method.name} encodes from text only: no --tokens")
        token_shard.check(model.tokenizer, model.max_passage_len,
                          model_format(model, method.corpus_units), rows=[start, stop])  # fmt: skip
    elif method.corpus_units == "sentences" and sentences is None:
        raise SystemExit(f"error: method {method.name} encodes sentences: give --sentences")
    device = select_device()
    precision = resolve_precision(cfg["precision"], device, int8_bits=cfg["int8_weight_bits"])
    model = model.for_inference(precision.path, precision.int8_bits)
    settings = EncodeSettings(
        batch_size=int(cfg["batch_size"]), bf16=precision.path == "bf16", device=device
    )
    dtype = DTYPES[cfg["dtype"]]
    dim = int(model.passage.model.config.hidden_size)
    log.info(
        "encoding passages %d..%d (shard %d/%d, %d rows) of %s as %s of method %s on %s, "
        "precision %s (%s), max_len=%d -> %s",
        start, stop, shard, num_shards, n, passages, method.corpus_units, method.name, device,
        precision.path, precision.reason, model.max_passage_len, out,
    )  # fmt: skip

    t0 = time.perf_counter()
    n_empty, n_rows = 0, 0
    if token_shard is not None:
        blocks = _token_blocks(method, model, token_shard, settings, int(cfg["block_size"]))
        n_empty = int(token_shard.meta["n_empty_text"])
    else:
        blocks = _text_blocks(method, model, passages, start, stop, settings, cfg, sentences)
    with atomic_path(out) as tmp_vec, atomic_path(ids_path_for(out)) as tmp_ids:
        vecs = NpyAppender(tmp_vec, dtype, dim)
        ids = NpyAppender(tmp_ids, np.int64, None)
        bar = progress(total=n, desc=f"encode shard {shard}", unit="psg")
        try:
            for unit_ids, block_vecs, n_block, block_empty in blocks:
                n_empty += block_empty
                if block_vecs.shape != (len(unit_ids), dim):
                    raise RuntimeError(f"method returned vectors {block_vecs.shape} for "
                                       f"{len(unit_ids)} units of dimension {dim}")  # fmt: skip
                vecs.append(block_vecs)
                ids.append(np.asarray(unit_ids, dtype=np.int64))
                n_rows += n_block
                bar.update(n_block)
        finally:
            bar.close()
            vecs.close()
            ids.close()
        if n_rows != n:
            raise RuntimeError(f"{passages}: read {n_rows} rows for shard range {start}..{stop}")
    seconds = time.perf_counter() - t0
    if n_empty:
        log.warning("%d passages of this shard have empty text (encoded from title alone)", n_empty)
    report = {
        "passages": str(passages),
        "shard": shard,
        "num_shards": num_shards,
        "rows": [start, stop],
        "n_encoded": n,
        "units": method.corpus_units,
        "n_vectors": vecs.rows,
        "vectors_per_passage": round(vecs.rows / n, 3) if n else None,
        "method": method.name,
        "n_empty_text": n_empty,
        "dim": dim,
        "dtype": cfg["dtype"],
        **precision.report(),
        "device": str(device),
        "max_passage_len": model.max_passage_len,
        "read": "tokens" if token_shard is not None else "text",
        **({"tokens": str(tokens)} if token_shard is not None else {}),
        "seconds": round(seconds, 3),
        "passages_per_second": round(n / seconds, 2) if seconds > 0 else None,
        **method.encode_report(),
    }
    log.info("encoded %d passages in %.1f s (%.1f/s)", n, seconds, n / max(seconds, 1e-9))
    return report


def _text_blocks(method, model, passages, start, stop, settings, cfg, sentences):
    """(unit ids, vectors, passages, empty texts) per block, encoded from the passage text."""
    from drpipe.methods.base import CorpusBlock

    blocks = _blocks(passages, start, stop, int(cfg["block_size"]))
    if method.corpus_units == "sentences":
        blocks = attach_sentences(blocks, sentences)
    for pids, titles, texts, *spans in blocks:
        for i, text in enumerate(texts):
            if text is None:
                raise InputError(passages, f"pid {int(pids[i])}", "passage text is null")
        n_empty = sum(1 for t in texts if not t.strip())
        block = CorpusBlock(pids, titles, texts, spans[0] if spans else None)
        unit_ids, vecs = method.encode_corpus(model, block, settings)
        yield unit_ids, vecs, len(pids), n_empty


def _token_blocks(method, model, shard: TokenShard, settings, block_size: int):
    """The same from the shard's stored ids (empty texts: counted when tokenized)."""
    for unit_ids, vecs, n in method.encode_tokens(model, shard, settings, block_size):
        yield unit_ids, vecs, n, 0


def encode_queries(
    model_dir: str | Path,
    questions: str | Path,
    out: str | Path,
    cfg: dict[str, Any],
    *,
    model=None,
) -> dict[str, Any]:
    """Question vectors of a question table -> ``out`` (float32) and ``out``'s ``.ids.npy``
    (qids, in table order)."""
    # lazy: imports torch (~1 s at CLI start-up, which imports this module)
    from drpipe.encoders import BiEncoder, encode_texts, select_device
    from drpipe.precision import resolve_precision

    cfg = merged_cfg(cfg, DEFAULT_QUERY_CFG)
    set_threads(cfg["threads"])
    rows = read_questions(questions)
    qids = np.array([str(q["qid"]) for q in rows])
    model = model if model is not None else BiEncoder.load(model_dir)
    device = select_device()
    precision = resolve_precision(cfg["precision"], device, int8_bits=cfg["int8_weight_bits"])
    model = model.for_inference(precision.path, precision.int8_bits)
    t0 = time.perf_counter()
    vecs = encode_texts(
        model.query.to(device), model.tokenizer, [q["question"] for q in rows],
        batch_size=int(cfg["batch_size"]), max_length=model.max_query_len,
        bf16=precision.path == "bf16", device=device, fmt=model.text,
    )  # fmt: skip
    seconds = time.perf_counter() - t0
    with atomic_path(out) as tmp_vec, atomic_path(ids_path_for(out)) as tmp_ids:
        with open(tmp_vec, "wb") as fh:
            np.save(fh, vecs)
        with open(tmp_ids, "wb") as fh:
            np.save(fh, qids)
    log.info("encoded %d questions in %.1f s, precision %s (%s) -> %s",
             len(qids), seconds, precision.path, precision.reason, out)  # fmt: skip
    return {"questions": str(questions), "n_questions": len(qids), "dim": int(vecs.shape[1]),
            "max_query_len": model.max_query_len, **precision.report(), "device": str(device),
            "seconds": round(seconds, 3)}  # fmt: skip


def _cmd_encode(args: argparse.Namespace) -> int:
    report = encode_shard(
        args.model, args.passages, args.shard, args.num_shards, args.out, args.cfg,
        sentences=args.sentences, tokens=args.tokens,
    )  # fmt: skip
    if args.report:
        write_json(args.report, {**report, "environment": environment(("cpu", "torch"))})
    return 0


def _cmd_encode_queries(args: argparse.Namespace) -> int:
    report = encode_queries(args.model, args.questions, args.out, args.cfg)
    if args.report:
        write_json(args.report, {**report, "environment": environment(("cpu", "torch"))})
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "encode",
        help="encode one shard of the corpus with a model (units as its method says)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="cfg defaults: " + json.dumps(DEFAULT_CFG),
    )
    p.add_argument(
        "--model", required=True, help="model directory (query/, passage/, drpipe_encoder.json)"
    )
    p.add_argument("--passages", help="passage table (Parquet); not needed with --tokens")
    p.add_argument("--sentences", help="sentence table (Parquet), for sentence-level methods")
    p.add_argument("--tokens", help="the shard's token ids, as `drpipe tokenize --out` wrote "
                   "them (PREFIX): read instead of the text, same vectors")  # fmt: skip
    p.add_argument("--shard", type=int, required=True, help="this shard's index, 0-based")
    p.add_argument("--num-shards", type=int, required=True)
    p.add_argument("--out", required=True, help="shard-I.npy; ids go to shard-I.ids.npy next to it")
    p.add_argument("--report", help="optional JSON report (counts, speed)")
    add_cfg(p)
    add_runtime(p, *RUNTIME)
    p.set_defaults(func=_cmd_encode)

    q = sub.add_parser(
        "encode-queries",
        help="encode the questions of a question table (stored query vectors)",
        epilog="cfg defaults: " + json.dumps(DEFAULT_QUERY_CFG),
    )
    q.add_argument("--model", required=True, help="model directory")
    q.add_argument("--questions", required=True, help="questions table (Parquet)")
    q.add_argument("--out", required=True, help="X.npy; qids go to X.ids.npy next to it")
    q.add_argument("--report", help="optional JSON report")
    add_cfg(q)
    add_runtime(q, "batch_size")
    q.set_defaults(func=_cmd_encode_queries)
    register_tokenize(sub)
