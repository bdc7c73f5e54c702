"""Runs out of the pipeline, in the files the field's tools read.

- **TREC run** (``qid Q0 docid rank score tag``): trec_eval, ir_measures, ranx, pyserini. The
  docid is our passage id (DPR's ``psgs_w100`` id where the corpus is DPR's file); the tag
  names the Table 2 row.
- **DPR retrieval JSON**: a list of ``{question, answers, ctxs: [{id, title, text, score,
  has_answer}]}`` in rank order, the layout of DPR's own retriever output that DPR's
  evaluation and DPR-style readers read.
- **pyserini's DPR retrieval JSON**: ``{qid: {question, answers, contexts: [{docid, score,
  text: "title\\ntext", has_answer}]}}``, what ``pyserini.eval.evaluate_dpr_retrieval``
  reads; written without ``has_answer`` (``with_has_answer=False``), pyserini decides the
  hits itself with its own tokenizer.

``has_answer`` is DPR's answer matching as ``drpipe.evaluate`` applies it (the passage text;
CuratedTREC's regular expressions), so the first context with ``has_answer`` is the
question's first-hit rank in ``results/metrics``. Files are written atomically, one question
at a time (memory holds the run and the passages it retrieved, as evaluation does).
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from drpipe.cliutil import add_cfg
from drpipe.corpus.passages import load_passages
from drpipe.errors import InputError
from drpipe.io import atomic_path, write_json
from drpipe.qa.datasets import read_questions
from drpipe.qa.matching import AnswerMatcher
from drpipe.runs import RUN_SCHEMA, Hits, read_run

log = logging.getLogger(__name__)

LAYOUTS = ("dpr", "pyserini")


def write_trec(path: str | Path, run: pa.Table, tag: str) -> None:
    """TREC run export of a run table (``qid, rank, pid, score``): ``qid Q0 pid rank score
    tag``; qids and the tag must not contain whitespace (the format splits on it)."""
    if not tag or any(c.isspace() for c in tag):
        raise ValueError(f"run tag {tag!r} must be non-empty without whitespace")
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for batch in run.to_batches(max_chunksize=65536):
            cols = [batch.column(i).to_pylist() for i in range(4)]
            for qid, rank, pid, score in zip(*cols, strict=True):
                if not qid or any(c.isspace() for c in qid):
                    raise ValueError(f"qid {qid!r} cannot be written to a TREC run file")
                fh.write(f"{qid} Q0 {pid} {rank} {score:.6f} {tag}\n")


def _entries(
    run: dict[str, Hits], questions: list[dict], matcher: AnswerMatcher
) -> Iterable[tuple[dict, list[tuple[int, float, bool]]]]:
    """Per question (file order): the question and its (pid, score, has_answer) list."""
    for q in questions:
        pids, scores = run.get(q["qid"], ((), ()))
        pids = [int(p) for p in pids]
        hits = matcher.hits(q["answers"], q["match"], pids)
        yield q, list(zip(pids, (float(s) for s in scores), hits, strict=True))


def _write_json_stream(fh: TextIO, items: Iterable[str], opening: str, closing: str) -> None:
    fh.write(opening)
    for i, item in enumerate(items):
        fh.write(("\n" if i == 0 else ",\n") + item)
    fh.write("\n" + closing + "\n")


def write_retrieval_json(
    path: str | Path,
    run: dict[str, Hits],
    questions: list[dict],
    passages: dict[int, tuple[str, str]],
    *,
    layout: str = "dpr",
    with_has_answer: bool = True,
) -> dict[str, int]:
    """Write a run as DPR's (``layout="dpr"``) or pyserini's retrieval JSON; returns counts."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, not {layout!r}")
    matcher = AnswerMatcher({pid: text for pid, (_, text) in passages.items()})
    counts = {"questions": 0, "contexts": 0, "not_in_run": 0}

    def items() -> Iterable[str]:
        for q, hits in _entries(run, questions, matcher):
            counts["questions"] += 1
            counts["contexts"] += len(hits)
            counts["not_in_run"] += q["qid"] not in run
            if layout == "dpr":
                ctxs = [{"id": str(pid), "title": passages[pid][0], "text": passages[pid][1],
                         "score": score, **({"has_answer": hit} if with_has_answer else {})}
                        for pid, score, hit in hits]  # fmt: skip
                yield json.dumps({"qid": q["qid"], "question": q["question"],
                                  "answers": q["answers"], "ctxs": ctxs}, ensure_ascii=False)  # fmt: skip
            else:
                ctxs = [{"docid": str(pid), "score": score,
                         "text": f"{passages[pid][0]}\n{passages[pid][1]}",
                         **({"has_answer": hit} if with_has_answer else {})}
                        for pid, score, hit in hits]  # fmt: skip
                entry = {"question": q["question"], "answers": q["answers"], "contexts": ctxs}
                yield f"{json.dumps(q['qid'])}: {json.dumps(entry, ensure_ascii=False)}"

    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        _write_json_stream(
            fh, items(), "[" if layout == "dpr" else "{", "]" if layout == "dpr" else "}"
        )
    return counts


def export_run(
    run_path: str | Path,
    questions_path: str | Path,
    passages_path: str | Path,
    *,
    trec: str | Path | None = None,
    dpr_json: str | Path | None = None,
    pyserini_json: str | Path | None = None,
    tag: str = "drpipe",
    depth: int | None = None,
) -> dict[str, object]:
    """Write a Parquet run's TREC file and retrieval JSONs; returns a report."""
    questions = read_questions(questions_path)
    run = read_run(run_path, depth, qids=[q["qid"] for q in questions])
    report: dict[str, object] = {"run": str(run_path), "tag": tag, "depth": depth,
                                 "questions": len(questions)}  # fmt: skip
    if trec is not None:
        table = pq.read_table(run_path, columns=RUN_SCHEMA.names)
        if depth is not None:
            table = table.filter(pc.less_equal(table.column("rank"), depth))
        write_trec(trec, table, tag)
        report["trec_lines"] = table.num_rows
    if dpr_json is not None or pyserini_json is not None:
        needed = {int(p) for pids, _ in run.values() for p in pids}
        try:
            passages = load_passages(passages_path, needed)
        except KeyError as exc:
            raise InputError(run_path, None, f"run refers to unknown passages: {exc}") from None
        for path, layout in ((dpr_json, "dpr"), (pyserini_json, "pyserini")):
            if path is not None:
                report[f"{layout}_json"] = write_retrieval_json(
                    path, run, questions, passages, layout=layout
                )
    return report


def _cmd_export(args: argparse.Namespace) -> int:
    cfg = args.cfg
    if not (args.trec or args.dpr_json or args.pyserini_json):
        raise SystemExit("error: give at least one of --trec, --dpr-json, --pyserini-json")
    report = export_run(
        args.run, args.questions, args.passages, trec=args.trec, dpr_json=args.dpr_json,
        pyserini_json=args.pyserini_json, tag=cfg.get("tag", "drpipe"), depth=cfg.get("depth"),
    )  # fmt: skip
    log.info("%s: exported %s", args.run, report)
    if args.report:
        write_json(args.report, report)
    return 0


def _cmd_trec(args: argparse.Namespace) -> int:
    table = pq.read_table(args.run, columns=RUN_SCHEMA.names)
    write_trec(args.out, table, args.cfg.get("tag", "drpipe"))
    log.info("%s: %d lines -> %s", args.run, table.num_rows, args.out)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    group = sub.add_parser("runs", help="runs in the field's formats (TREC, DPR JSON)")
    runs = group.add_subparsers(dest="runs_command", required=True)
    p = runs.add_parser(
        "export",
        help="write a run's TREC file and DPR / pyserini retrieval JSON",
        description="Example: drpipe runs export --run results/runs/dpr/squad/squad-test.parquet"
        " --questions results/qa/squad/test.parquet --passages results/corpus/passages.parquet"
        ' --trec dpr.trec --dpr-json dpr.json --cfg \'{"tag": "dpr"}\'',
    )
    p.add_argument("--run", required=True, help="run Parquet (qid, rank, pid, score)")
    p.add_argument("--questions", required=True, help="the run's questions Parquet")
    p.add_argument("--passages", required=True, help="passages Parquet")
    p.add_argument("--trec", help="TREC run file to write")
    p.add_argument("--dpr-json", help="DPR retrieval JSON to write")
    p.add_argument("--pyserini-json", help="pyserini's DPR retrieval JSON to write")
    p.add_argument("--report", help="counts JSON to write")
    add_cfg(p)
    p.set_defaults(func=_cmd_export)
    t = runs.add_parser("trec", help="write a run's TREC file (qid Q0 docid rank score tag)")
    t.add_argument("--run", required=True, help="run Parquet (qid, rank, pid, score)")
    t.add_argument("--out", required=True, help="TREC run file to write")
    add_cfg(t)
    t.set_defaults(func=_cmd_trec)
