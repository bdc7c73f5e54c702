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

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from drpipe.cliutil import add_cfg
from drpipe.corpus.passages import iter_passages, load_passages
from drpipe.errors import InputError
from drpipe.io import atomic_path, iter_input_lines, read_input_text, write_json
from drpipe.qa.datasets import read_questions
from drpipe.qa.matching import AnswerMatcher
from drpipe.runs import RUN_SCHEMA, Hits, read_run, run_table, write_run

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


def run_rows(run_path: str | Path, depth: int | None = None) -> pa.Table:
    """A run Parquet's ``qid, rank, pid, score`` rows (those within ``depth``), TREC's order."""
    table = pq.read_table(run_path, columns=RUN_SCHEMA.names)
    if depth is not None:
        table = table.filter(pc.less_equal(table.column("rank"), depth))
    return table


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
        table = run_rows(run_path, depth)
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


# ------------------------------------------------------------------------------------ runs in

FORMATS = ("trec", "dpr-json", "pyserini-json")


def run_format(path: str | Path, fmt: str = "auto") -> str:
    """A run file's format: as given, or by its name (``.trec``/``.txt``/``.run``: TREC;
    ``.json``: DPR's list or pyserini's dict, told apart by the first character)."""
    if fmt != "auto":
        if fmt not in FORMATS:
            raise InputError(path, None, f"unknown run format {fmt!r} (one of {FORMATS})")
        return fmt
    name = str(path).lower()
    if name.endswith((".trec", ".txt", ".run")):
        return "trec"
    if name.endswith(".json"):
        with open(path, encoding="utf-8") as fh:
            head = fh.read(4096).lstrip()
        return "dpr-json" if head.startswith("[") else "pyserini-json"
    raise InputError(path, None, "cannot tell the run's format by its name: give format")


def _pid(path: str | Path, where: str, docid: str, prefix: str, known: set[int]) -> int:
    """Our passage id of a run's docid (``prefix`` stripped, e.g. ``wiki:``)."""
    raw = docid[len(prefix) :] if prefix and docid.startswith(prefix) else docid
    try:
        pid = int(raw)
    except ValueError:
        raise InputError(path, where, f"docid {docid!r} is not a passage id of this corpus"
                         + (f" (after the prefix {prefix!r})" if prefix else "")) from None  # fmt: skip
    if pid not in known:
        raise InputError(path, where, f"docid {docid!r} is not in the corpus")
    return pid


def _score(path: str | Path, where: str, value: object) -> float:
    try:
        score = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InputError(path, where, f"score {value!r} is not a number") from None
    if score != score:  # NaN
        raise InputError(path, where, "score is NaN")
    return score


def read_external_run(
    path: str | Path,
    questions: list[dict],
    known_pids: set[int],
    *,
    fmt: str = "auto",
    id_prefix: str = "",
) -> tuple[dict[str, list[tuple[int, float]]], dict[str, object]]:
    """A run made elsewhere as ``{qid: [(pid, score), ...]}`` best first, and counts.

    TREC: ranked by score, highest first, ties by docid descending (trec_eval's order; the
    file's rank column is not read, as trec_eval does not). DPR JSON: contexts in file order;
    an entry names its question by ``qid`` where it has one, else by the question's text.
    Errors name the file, the line (TREC) or entry, and the id: a line without six fields, a
    score that is not a number, a docid not in the corpus, a (qid, docid) given twice, a qid
    or question not in the questions file."""
    fmt = run_format(path, fmt)
    qids = {q["qid"] for q in questions}
    by_text: dict[str, str | None] = {}
    for q in questions:  # a question text asked twice cannot name one question
        by_text[q["question"]] = None if q["question"] in by_text else q["qid"]
    out: dict[str, list[tuple[int, float]]] = {}
    seen: dict[tuple[str, int], str] = {}

    def add(qid: str, pid: int, score: float, where: str) -> None:
        if qid not in qids:
            raise InputError(path, where, f"qid {qid!r} is not in the questions file")
        if (qid, pid) in seen:
            raise InputError(path, where, f"passage {pid} given twice for qid {qid!r} "
                             f"(first at {seen[qid, pid]})")  # fmt: skip
        seen[qid, pid] = where
        out.setdefault(qid, []).append((pid, score))

    if fmt == "trec":
        for n, line in iter_input_lines(path):
            if not line.strip():
                continue
            parts = line.split()
            where = f"line {n}"
            if len(parts) != 6:
                raise InputError(path, where, f"expected 6 fields (qid Q0 docid rank score "
                                 f"tag), found {len(parts)}")  # fmt: skip
            qid, _, docid, _, score, _ = parts
            add(qid, _pid(path, where, docid, id_prefix, known_pids),
                _score(path, where, score), where)  # fmt: skip
        for hits in out.values():
            hits.sort(key=lambda h: (-h[1], -h[0]))  # trec_eval: score desc, docid desc
    else:
        try:
            data = json.loads(read_input_text(path))
        except json.JSONDecodeError as err:
            raise InputError(path, f"line {err.lineno}", f"not JSON: {err.msg}") from None
        entries = (
            [(i, e.get("qid"), e) for i, e in enumerate(data)]
            if fmt == "dpr-json" else [(i, k, e) for i, (k, e) in enumerate(data.items())]
        )  # fmt: skip
        key, id_key = ("ctxs", "id") if fmt == "dpr-json" else ("contexts", "docid")
        for i, qid, entry in entries:
            where = f"entry {i}"
            if qid is None:
                qid = by_text.get(entry.get("question"))
                if qid is None:
                    raise InputError(path, where, "no qid, and its question text names no one "
                                     f"question of the questions file: {entry.get('question')!r}")  # fmt: skip
            for j, ctx in enumerate(entry.get(key) or []):
                here = f"{where} context {j}"
                add(str(qid), _pid(path, here, str(ctx.get(id_key)), id_prefix, known_pids),
                    _score(path, here, ctx.get("score")), here)  # fmt: skip
    report = {
        "file": str(path),
        "format": fmt,
        "questions": len(questions),
        "questions_in_run": len(out),
        "questions_without_results": len(qids - out.keys()),
        "passages": sum(len(v) for v in out.values()),
        "min_depth": min((len(v) for v in out.values()), default=0),
    }
    return out, report


def import_run(
    path: str | Path,
    questions_path: str | Path,
    passages_path: str | Path,
    out: str | Path,
    *,
    fmt: str = "auto",
    id_prefix: str = "",
    depth: int | None = None,
) -> dict[str, object]:
    """Write a run made elsewhere as our run Parquet (``drpipe.runs``); returns its report.
    Questions with no results, or fewer than ``depth``, are counted (trec_eval scores them
    too: a question without results is a miss at every k)."""
    questions = read_questions(questions_path)
    known = {pid for b in iter_passages(passages_path, columns=["pid"])
             for pid in b.column(0).to_pylist()}  # fmt: skip
    hits, report = read_external_run(path, questions, known, fmt=fmt, id_prefix=id_prefix)
    order = [q["qid"] for q in questions if q["qid"] in hits]
    if depth is not None:
        report["questions_below_depth"] = sum(len(hits[q]) < depth for q in order)
        report["depth"] = depth
    table = run_table(
        order,
        [np.asarray([p for p, _ in hits[q]], dtype=np.int64) for q in order],
        [np.asarray([s for _, s in hits[q]], dtype=np.float64) for q in order],
    )
    write_run(out, table)
    for key in ("questions_without_results", "questions_below_depth"):
        if report.get(key):
            log.warning("%s: %d of %d questions %s", path, report[key], len(questions),
                        key.replace("_", " ").removeprefix("questions "))  # fmt: skip
    return report


def _cmd_import(args: argparse.Namespace) -> int:
    cfg = args.cfg
    report = import_run(
        args.input, args.questions, args.passages, args.out, fmt=cfg.get("format", "auto"),
        id_prefix=cfg.get("id_prefix", ""), depth=cfg.get("depth"),
    )  # fmt: skip
    log.info("%s -> %s: %s", args.input, args.out, report)
    if args.report:
        write_json(args.report, report)
    return 0


def _cmd_trec(args: argparse.Namespace) -> int:
    table = run_rows(args.run)
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
    i = runs.add_parser(
        "import",
        help="a run made elsewhere (TREC, DPR or pyserini JSON) as our run Parquet",
        description="Example: drpipe runs import --in theirs.trec --questions "
        "results/qa/squad/test.parquet --passages results/corpus/passages.parquet --out "
        'theirs.parquet --cfg \'{"id_prefix": "wiki:"}\'',
    )
    i.add_argument("--in", dest="input", required=True, help="the run file")
    i.add_argument("--questions", required=True, help="questions Parquet the run answers")
    i.add_argument("--passages", required=True, help="passages Parquet its docids name")
    i.add_argument("--out", required=True, help="run Parquet to write")
    i.add_argument("--report", help="counts JSON to write")
    add_cfg(i)
    i.set_defaults(func=_cmd_import)
