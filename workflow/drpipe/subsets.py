"""Corpus subsets: the same checkpoints evaluated on a part of the corpus (DCSR's Table 7, for
any method). A subset keeps the gold passages of the questions it names, then the first
passages of the corpus up to its size; ``workflow/rules/subsets.smk`` runs encoding, indexing,
retrieval and evaluation on it.
"""

from __future__ import annotations

import argparse
import logging
import re
from pathlib import Path
from typing import Any

import numpy as np

from drpipe.cliutil import add_cfg
from drpipe.corpus.passages import PASSAGE_SCHEMA
from drpipe.corpus.sentences import SENTENCE_SCHEMA
from drpipe.io import ParquetStreamWriter, iter_parquet, write_json
from drpipe.qa.mining import gold_passages

log = logging.getLogger(__name__)


SUBSET_RE = re.compile(
    r"^(?:p(?P<pct>\d+(?:\.\d+)?)|n(?P<n>\d+))"
    r"(?:-gold-(?P<dataset>[A-Za-z0-9_]+)-(?P<split>[A-Za-z0-9_]+))?$"
)


def parse_subset(name: str) -> dict[str, Any]:
    """``p10`` (10% of the passages), ``n100000`` (that many), optionally ``-gold-D-S`` (the
    gold passages of dataset D, split S, always kept)."""
    m = SUBSET_RE.match(name)
    if not m:
        raise ValueError(
            f"subset {name!r}: expected p<percent> or n<count>[-gold-<dataset>-<split>]"
        )
    pct = float(m["pct"]) if m["pct"] else None
    if pct is not None and not 0 < pct <= 100:
        raise ValueError(f"subset {name!r}: percent must be in (0, 100]")
    return {"percent": pct, "count": int(m["n"]) if m["n"] else None,
            "dataset": m["dataset"], "split": m["split"]}  # fmt: skip


def subset_pids(pids: np.ndarray, spec: dict[str, Any], gold: set[int]) -> np.ndarray:
    """Which passages a subset keeps, in corpus order: every gold passage, then the first
    other passages (DCSR 5.2: "the first 0.1 million, the first 1.05 million") up to the
    target size. A target below the gold count keeps the gold passages alone."""
    n = len(pids)
    target = spec["count"] if spec["count"] is not None else round(spec["percent"] / 100 * n)
    target = min(int(target), n)
    is_gold = np.isin(pids, np.fromiter(gold, np.int64, len(gold)))
    room = max(target - int(is_gold.sum()), 0)
    fill = np.flatnonzero(~is_gold)[:room]
    keep = is_gold.copy()
    keep[fill] = True
    return pids[keep]


def corpus_subset(
    name: str,
    passages: str | Path,
    sentences: str | Path,
    out_passages: str | Path,
    out_sentences: str | Path,
    questions: str | Path | None = None,
) -> dict[str, Any]:
    """Write the passages and sentences of subset ``name``; pids are kept, so runs on the
    subset evaluate with the same answer checks. Returns the report."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    spec = parse_subset(name)
    if spec["dataset"] and questions is None:
        raise SystemExit(f"error: subset {name} keeps gold passages: give --questions")
    pids = pq.read_table(passages, columns=["pid"]).column(0).to_numpy()
    gold: set[int] = set()
    gold_report: dict[str, Any] = {}
    if spec["dataset"]:
        by_qid, gold_report = gold_passages(questions, passages)
        gold = set(by_qid.values())
    keep = subset_pids(pids, spec, gold)
    keep_arr = pa.array(keep, type=pa.int64())
    for src, dst, schema in ((passages, out_passages, PASSAGE_SCHEMA),
                             (sentences, out_sentences, SENTENCE_SCHEMA)):  # fmt: skip
        with ParquetStreamWriter(dst, schema) as writer:
            for batch in iter_parquet(src, columns=schema.names, batch_size=50_000):
                part = batch.filter(pc.is_in(batch.column(0), value_set=keep_arr))
                writer.write_rows(part.to_pydict())
    return {
        "subset": name,
        "spec": spec,
        "passages_in_corpus": int(len(pids)),
        "passages_kept": int(len(keep)),
        "fraction_kept": round(len(keep) / max(len(pids), 1), 4),
        "gold_passages": len(gold),
        "gold": gold_report,
        "rule": "gold passages of the named questions, then the first passages in corpus "
        "order up to the target (DCSR took the first N passages)",
    }


def _cmd_subset(args: argparse.Namespace) -> int:
    report = corpus_subset(
        args.subset, args.passages, args.sentences, args.out_passages, args.out_sentences,
        args.questions,
    )  # fmt: skip
    if args.report:
        write_json(args.report, report)
    log.info("subset %s: %d of %d passages", args.subset, report["passages_kept"],
             report["passages_in_corpus"])  # fmt: skip
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "subset-corpus",
        help="cut a corpus subset (Table 7): gold passages kept, then the first passages",
    )
    p.add_argument(
        "--subset", required=True, help="p<percent> | n<count> [-gold-<dataset>-<split>]"
    )
    p.add_argument("--passages", required=True)
    p.add_argument("--sentences", required=True)
    p.add_argument("--questions", help="questions whose gold passages are kept")
    p.add_argument("--out-passages", required=True)
    p.add_argument("--out-sentences", required=True)
    p.add_argument("--report")
    add_cfg(p)
    p.set_defaults(func=_cmd_subset)
