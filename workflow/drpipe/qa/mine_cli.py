"""``drpipe mine``: DPR training examples (positives, BM25 hard negatives, random negatives)."""

from __future__ import annotations

import argparse

from drpipe.cliutil import add_cfg
from drpipe.io import write_json, write_jsonl
from drpipe.qa.mining import MiningConfig, mine, write_dpr_json


def _mine_cmd(args: argparse.Namespace) -> int:
    try:
        conf = MiningConfig.from_cfg(args.cfg)
    except (TypeError, ValueError) as exc:
        raise SystemExit(f"error: --cfg: {exc}") from None
    records, report = mine(args.questions, args.run, args.passages, conf)
    write_jsonl(args.out, records)
    if args.dpr_json:
        write_dpr_json(args.dpr_json, records)
    if args.report:
        write_json(args.report, report)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("mine", help="mine DPR biencoder training examples from a BM25 run")
    p.add_argument("--questions", required=True, help="questions Parquet")
    p.add_argument("--run", required=True, help="BM25 run Parquet of those questions")
    p.add_argument("--passages", required=True, help="passages Parquet")
    p.add_argument("--out", required=True, help="biencoder records, JSON lines (.jsonl.gz)")
    p.add_argument("--dpr-json", default=None, help="optional export in DPR's .json layout")
    p.add_argument("--report", default=None, help="report JSON (kept, discarded by reason)")
    add_cfg(p)
    p.set_defaults(func=_mine_cmd)
