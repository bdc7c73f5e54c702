"""Reader scores per (question, passage), and end-to-end predictions from them.

A reader reads each passage apart from the others (one encoder pass per (question, passage)
input), so a pair's selection logit and best span depend on the reader, the question and the
passage only: they are computed once, written as a scores table (``qid, pid, select,
span_score, answer``, with the reader's identity in the file's metadata), and every retriever
whose top k holds that pair reads it from there. A question's prediction is the best span of
its top-k passage with the highest selection logit (the better-ranked passage on a tie).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from drpipe.encoders import autocast
from drpipe.errors import InputError
from drpipe.io import progress, write_parquet
from drpipe.reader.decode import decode
from drpipe.reader.em import exact_match
from drpipe.reader.inputs import PassageTokens, encode, pad_inputs, question_ids, tokenize_passage
from drpipe.reader.model import Reader

log = logging.getLogger(__name__)

SCORE_SCHEMA = pa.schema(
    [
        ("qid", pa.string()),
        ("pid", pa.int64()),
        ("select", pa.float64()),
        ("span_score", pa.float64()),
        ("answer", pa.string()),
    ]
)
IDENTITY_KEY = b"drpipe_reader_identity"
# what the scores were computed in: "fp32", "bf16", "int8" or "int8 (7-bit weights)"
PRECISION_KEY = b"drpipe_reader_precision"
Pair = tuple[str, int]


def reader_identity(directory: str | Path, limits: Mapping[str, int]) -> str:
    """sha256 over the reader directory's files (names and bytes) and the token limits."""
    h = hashlib.sha256(repr(sorted(limits.items())).encode())
    root = Path(directory)
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


class Tokens(dict):
    """pid -> PassageTokens, tokenised on first use."""

    def __init__(self, tokenizer, passages: Mapping[int, tuple[str, str]]):
        super().__init__()
        self.tokenizer, self.passages = tokenizer, passages

    def __missing__(self, pid: int) -> PassageTokens:
        title, text = self.passages[pid]
        value = self[pid] = tokenize_passage(self.tokenizer, title, text)
        return value


def score_pairs(
    reader: Reader,
    pairs: Sequence[Pair],
    questions: Mapping[str, dict],
    passages: Mapping[int, tuple[str, str]],
    *,
    batch_size: int,
    device: torch.device,
    bf16: bool,
    tokens: Tokens | None = None,
    show_progress: bool = True,
) -> list[dict[str, Any]]:
    """One score row per pair, in ``pairs`` order (inputs batched by length)."""
    tok = reader.tokenizer
    tokens = tokens if tokens is not None else Tokens(tok, passages)
    lim = reader.limits
    q_ids = {qid: question_ids(tok, questions[qid]["question"], lim["max_question_len"])
             for qid in {q for q, _ in pairs}}  # fmt: skip
    encs = [encode(tok, q_ids[q], tokens[p], lim["max_len"]) for q, p in pairs]
    order = np.argsort([len(e.ids) for e in encs], kind="stable")
    rows: list[dict[str, Any] | None] = [None] * len(pairs)
    was_training = reader.training
    reader.eval()
    bar = progress(total=len(pairs), desc="read", unit="pair", disable=not show_progress)
    try:
        with torch.inference_mode(), autocast(device, bf16):
            for s in range(0, len(pairs), batch_size):
                idx = order[s : s + batch_size]
                ids, att, _ = pad_inputs([[encs[i] for i in idx]], tok.pad_token_id)
                start, end, select = reader(ids.to(device), att.to(device))
                # One copy to the host per batch (not a device sync per pair).
                start, end = start[0].float().cpu(), end[0].float().cpu()
                select = select[0].float().cpu()
                for j, i in enumerate(idx):
                    qid, pid = pairs[i]
                    span = decode(
                        start[j], end[j], encs[i], passages[pid][1], tokens[pid],
                        lim["max_answer_len"],
                    )  # fmt: skip
                    rows[i] = {
                        "qid": qid,
                        "pid": int(pid),
                        "select": float(select[j]),
                        "span_score": span.score,
                        "answer": span.text,
                    }
                bar.update(len(idx))
    finally:
        bar.close()
        reader.train(was_training)
    return rows  # type: ignore[return-value]


def write_scores(
    path: str | Path, rows: Iterable[dict[str, Any]], identity: str, precision: str = "fp32"
) -> None:
    """``precision``: "bf16", "fp32", or "mixed" when reused pairs came in another one."""
    table = pa.Table.from_pylist(list(rows), schema=SCORE_SCHEMA)
    meta = {IDENTITY_KEY: identity.encode(), PRECISION_KEY: precision.encode()}
    write_parquet(path, table.replace_schema_metadata(meta))


def scores_precision(path: str | Path) -> str | None:
    """The precision a scores file says its scores were computed in (None: not recorded)."""
    value = (pq.read_schema(path).metadata or {}).get(PRECISION_KEY)
    return value.decode() if value else None


def read_scores(path: str | Path) -> tuple[dict[Pair, dict[str, Any]], str | None]:
    """Scores keyed by (qid, pid), and the identity of the reader that wrote them."""
    table = pq.read_table(path)
    missing = [n for n in SCORE_SCHEMA.names if n not in table.column_names]
    if missing:
        raise InputError(path, None, f"reader scores lack columns {missing}")
    meta = table.schema.metadata or {}
    identity = meta.get(IDENTITY_KEY)
    out: dict[Pair, dict[str, Any]] = {}
    for i, row in enumerate(table.select(SCORE_SCHEMA.names).to_pylist()):
        if row["qid"] is None or row["pid"] is None or row["select"] is None:
            raise InputError(path, f"row {i}", "null qid, pid or select")
        out[(row["qid"], int(row["pid"]))] = row
    return out, identity.decode() if identity else None


def predict(
    run: Mapping[str, Sequence[int]],
    scores: Mapping[Pair, dict[str, Any]],
    questions: Sequence[dict],
    k: int,
) -> list[dict[str, Any]]:
    """Per question: the prediction from its top ``k`` passages and its exact match. A question
    the run does not cover predicts nothing (empty answer, no match); a missing score is an
    error (the scores must cover every pair read)."""
    out = []
    for q in questions:
        pids = [int(p) for p in run.get(q["qid"], ())][:k]
        best: dict[str, Any] | None = None
        best_rank = None
        for rank, pid in enumerate(pids, 1):
            row = scores.get((q["qid"], pid))
            if row is None:
                raise KeyError(f"no reader score for question {q['qid']!r}, passage {pid}")
            if best is None or row["select"] > best["select"]:
                best, best_rank = row, rank
        answer = "" if best is None else best["answer"]
        out.append(
            {
                "qid": q["qid"],
                "prediction": answer,
                "pid": None if best is None else best["pid"],
                "rank": best_rank,
                "select": None if best is None else best["select"],
                "em": bool(best is not None and exact_match(answer, q["answers"], q["match"])),
            }
        )
    return out


def exact_match_percent(rows: Sequence[dict[str, Any]]) -> float:
    if not rows:
        raise ValueError("no questions to score")
    return 100.0 * sum(r["em"] for r in rows) / len(rows)
