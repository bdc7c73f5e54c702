"""Read a collection in BEIR's layout and convert it once into drpipe's forms.

A BEIR folder holds ``corpus.jsonl`` (``_id``, ``title``, ``text``), ``queries.jsonl``
(``_id``, ``text``) and ``qrels/<split>.tsv`` (header ``query-id corpus-id score``). The
corpus is streamed into a passages Parquet (``pid`` int64 in file order, ``title``,
``text``) plus a ``docid``/``pid`` map; only the ids are held in memory.

Checks: a malformed JSON line or a record without its id names the file and line; a
duplicate document or query id is an error; a qrels row naming an unknown document or
query names the file, line and id. A query without qrels in the split is dropped and
counted, as BEIR's own ``GenericDataLoader`` drops such queries.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pyarrow as pa

from drpipe.corpus.sources import read_squad_articles, squad_title
from drpipe.errors import InputError
from drpipe.io import (
    ParquetStreamWriter,
    atomic_path,
    iter_input_lines,
    write_jsonl,
    write_parquet,
)
from drpipe.qa.datasets import write_questions

PASSAGES_SCHEMA = pa.schema([("pid", pa.int64()), ("title", pa.string()), ("text", pa.string())])
DOCMAP_SCHEMA = pa.schema([("docid", pa.string()), ("pid", pa.int64())])


@dataclass
class ConvertReport:
    documents: int = 0
    queries_read: int = 0
    queries_kept: int = 0
    queries_without_qrels: int = 0
    qrels: int = 0
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


def _iter_json_records(path: Path):
    for lineno, line in iter_input_lines(path):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(path, f"line {lineno}", f"malformed JSON: {exc.msg}") from None
        if not isinstance(rec, dict) or "_id" not in rec:
            raise InputError(path, f"line {lineno}", "not a JSON object with an '_id'")
        yield lineno, rec


def iter_corpus(path: str | Path):
    """``(docid, title, text)`` per line of a BEIR ``corpus.jsonl``; duplicate ids raise."""
    path = Path(path)
    seen: set[str] = set()
    for lineno, rec in _iter_json_records(path):
        docid = str(rec["_id"])
        if docid in seen:
            raise InputError(path, f"line {lineno}", f"duplicate document id {docid!r}")
        seen.add(docid)
        yield docid, str(rec.get("title") or ""), str(rec.get("text") or "")


def read_queries(path: str | Path) -> dict[str, str]:
    path = Path(path)
    out: dict[str, str] = {}
    for lineno, rec in _iter_json_records(path):
        qid = str(rec["_id"])
        if qid in out:
            raise InputError(path, f"line {lineno}", f"duplicate query id {qid!r}")
        out[qid] = str(rec.get("text") or "")
    return out


def read_qrels(
    path: str | Path, docids: set[str] | dict | None = None, qids: set[str] | dict | None = None
) -> dict[str, dict[str, int]]:
    """``{qid: {docid: score}}`` from a BEIR qrels TSV (header ``query-id corpus-id score``)."""
    path = Path(path)
    qrels: dict[str, dict[str, int]] = {}
    for lineno, line in iter_input_lines(path):
        line = line.rstrip("\r\n")
        if not line.strip():
            continue
        parts = line.split("\t")
        if lineno == 1:
            if parts[:2] != ["query-id", "corpus-id"]:
                raise InputError(path, "line 1", "expected the header 'query-id corpus-id score'")
            continue
        if len(parts) != 3:
            raise InputError(
                path, f"line {lineno}", f"expected 3 tab-separated fields, got {len(parts)}"
            )
        qid, docid, score = parts
        try:
            value = int(score)
        except ValueError:
            raise InputError(path, f"line {lineno}", f"score {score!r} is not an integer") from None
        if docids is not None and docid not in docids:
            raise InputError(path, f"line {lineno}", f"unknown document id {docid!r}")
        if qids is not None and qid not in qids:
            raise InputError(path, f"line {lineno}", f"unknown query id {qid!r}")
        row = qrels.setdefault(qid, {})
        if docid in row:
            raise InputError(path, f"line {lineno}", f"duplicate qrel ({qid!r}, {docid!r})")
        row[docid] = value
    return qrels


def convert(folder: str | Path, out_dir: str | Path, split: str = "test") -> ConvertReport:
    """Convert a BEIR folder into ``passages.parquet``, ``docmap.parquet``,
    ``queries.jsonl`` (qid, text), ``questions.parquet`` (the kept queries as a questions
    table with no answers) and ``qrels.tsv`` (qid, pid, score; pids are ours)."""
    folder, out_dir = Path(folder), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    report = ConvertReport()
    pid_of: dict[str, int] = {}
    batch: dict[str, list] = {"pid": [], "title": [], "text": []}
    with ParquetStreamWriter(out_dir / "passages.parquet", PASSAGES_SCHEMA) as writer:
        for docid, title, text in iter_corpus(folder / "corpus.jsonl"):
            pid = len(pid_of)
            pid_of[docid] = pid
            batch["pid"].append(pid)
            batch["title"].append(title)
            batch["text"].append(text)
            if len(batch["pid"]) >= 10_000:
                writer.write_rows(batch)
                batch = {"pid": [], "title": [], "text": []}
        writer.write_rows(batch)
    report.documents = len(pid_of)
    write_parquet(
        out_dir / "docmap.parquet",
        pa.table({"docid": list(pid_of), "pid": list(pid_of.values())}, schema=DOCMAP_SCHEMA),
    )
    queries = read_queries(folder / "queries.jsonl")
    report.queries_read = len(queries)
    qrels = read_qrels(folder / "qrels" / f"{split}.tsv", docids=pid_of, qids=queries)
    kept = {q: t for q, t in queries.items() if q in qrels}
    report.queries_kept = len(kept)
    report.queries_without_qrels = len(queries) - len(kept)
    if report.queries_without_qrels:
        report.notes.append(
            f"{report.queries_without_qrels} queries have no qrels in split {split!r} and were"
            " dropped (BEIR's GenericDataLoader drops them too)"
        )
    with open(out_dir / "queries.jsonl", "w", encoding="utf-8") as fh:
        for qid, text in kept.items():
            fh.write(json.dumps({"qid": qid, "text": text}, ensure_ascii=False) + "\n")
    # The queries as the questions Parquet that encode-queries and BM25 search read (no
    # answers: relevance is the qrels').
    write_questions(
        out_dir / "questions.parquet",
        [{"qid": q, "question": t, "answers": [], "match": "string", "gold_title": None,
          "gold_context": None} for q, t in kept.items()],
    )  # fmt: skip
    with open(out_dir / "qrels.tsv", "w", encoding="utf-8") as fh:
        fh.write("qid\tpid\tscore\n")
        for qid, row in qrels.items():
            for docid, score in row.items():
                fh.write(f"{qid}\t{pid_of[docid]}\t{score}\n")
                report.qrels += 1
    with open(out_dir / "report.json", "w", encoding="utf-8") as fh:
        json.dump(report.as_dict(), fh, indent=2)
    return report


def build_squad_dev_collection(
    squad_path: str | Path,
    out_dir: str | Path,
    *,
    articles: int = 6,
    queries: int = 200,
    exclude_articles: Iterable[int] = (),
    seed: int = 13,
    split: str = "test",
) -> dict:
    """Write a BEIR-layout collection from SQuAD v1.1 dev: the paragraphs of ``articles``
    seeded articles not in ``exclude_articles`` (article indices in the file, e.g. those
    the mini training corpus samples) are the corpus, ``queries`` seeded dev questions on
    them the queries, and each question's gold paragraph its one qrel (score 1).

    Ids: documents ``squad-dev-<article>-<paragraph>``, queries the SQuAD question ids.
    Returns the notes (also written as ``notes.json``)."""
    out_dir = Path(out_dir)
    data = read_squad_articles(squad_path)
    excluded = set(exclude_articles)
    candidates = [i for i in range(len(data)) if i not in excluded]
    rng = random.Random(seed)
    chosen = sorted(rng.sample(candidates, min(articles, len(candidates))))
    docs, questions = [], []
    for a in chosen:
        title = squad_title(data[a]["title"])
        for p, para in enumerate(data[a]["paragraphs"]):
            if not para["context"].strip():
                continue
            docid = f"squad-dev-{a}-{p}"
            docs.append({"_id": docid, "title": title, "text": para["context"]})
            for qa in para.get("qas", []):
                questions.append({"_id": str(qa["id"]), "text": qa["question"], "doc": docid})
    picked = sorted(rng.sample(range(len(questions)), min(queries, len(questions))))
    questions = [questions[i] for i in picked]
    with atomic_path(out_dir, directory=True) as tmp:
        (tmp / "qrels").mkdir()
        write_jsonl(tmp / "corpus.jsonl", docs)
        write_jsonl(
            tmp / "queries.jsonl", [{"_id": q["_id"], "text": q["text"]} for q in questions]
        )
        with open(tmp / "qrels" / f"{split}.tsv", "w", encoding="utf-8") as fh:
            fh.write("query-id\tcorpus-id\tscore\n")
            for q in questions:
                fh.write(f"{q['_id']}\t{q['doc']}\t1\n")
        notes = {
            "what": "SQuAD v1.1 dev paragraphs as a BEIR-layout collection (held-out articles)",
            "how": (
                f"{len(chosen)} dev articles sampled with seed {seed} from the"
                f" {len(candidates)} not sampled into the training corpus; every paragraph"
                f" a document; {len(questions)} seeded dev questions as queries; the"
                " question's own paragraph is its one relevant document (score 1)"
            ),
            "source": str(squad_path),
            "articles": chosen,
            "documents": len(docs),
            "queries": len(questions),
        }
        with open(tmp / "notes.json", "w", encoding="utf-8") as fh:
            json.dump(notes, fh, indent=2)
    return notes


def read_converted_qrels(path: str | Path) -> dict[str, dict[str, int]]:
    """``{qid: {str(pid): score}}`` of a converted ``qrels.tsv`` (qid, pid, score)."""
    out: dict[str, dict[str, int]] = {}
    for lineno, line in iter_input_lines(path):
        if lineno == 1:
            continue
        qid, pid, score = line.rstrip("\n").split("\t")
        out.setdefault(qid, {})[pid] = int(score)
    return out


def _cmd_convert(args) -> int:
    report = convert(args.folder, args.out, split=args.split)
    print(json.dumps(report.as_dict()))
    return 0


def _cmd_build_squad(args) -> int:
    from drpipe.corpus.sources import sample_article_indices

    exclude: list[int] = []
    if args.exclude_sample is not None:
        n = len(read_squad_articles(args.squad))
        exclude = sample_article_indices(n, args.exclude_sample, args.seed)
    notes = build_squad_dev_collection(
        args.squad,
        args.out,
        articles=args.articles,
        queries=args.queries,
        exclude_articles=exclude,
        seed=args.seed,
    )
    print(json.dumps(notes))
    return 0


def _cmd_score(args) -> int:
    import pyarrow.parquet as pq

    from drpipe import irmetrics

    qrels = read_converted_qrels(args.qrels)
    table = pq.read_table(args.run, columns=["qid", "pid", "score"]).to_pydict()
    run: dict[str, dict[str, float]] = {}
    for qid, pid, score in zip(table["qid"], table["pid"], table["score"], strict=True):
        run.setdefault(str(qid), {})[str(pid)] = float(score)
    agg, per_query = irmetrics.evaluate(qrels, run, args.measures)
    with atomic_path(args.out) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        json.dump({"measures": agg, "per_query": per_query, "queries": len(qrels)}, fh)
    return 0


def register(sub) -> None:
    group = sub.add_parser("collection", help="collections in BEIR's layout")
    cmds = group.add_subparsers(dest="collection_command", required=True)
    p = cmds.add_parser("convert", help="BEIR folder -> passages Parquet, docid map, qrels")
    p.add_argument("--folder", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--split", default="test")
    p.set_defaults(func=_cmd_convert)
    b = cmds.add_parser("build-squad-dev", help="SQuAD v1.1 dev as a BEIR-layout collection")
    b.add_argument("--squad", required=True, help="SQuAD v1.1 dev JSON (plain or .gz)")
    b.add_argument("--out", required=True)
    b.add_argument("--articles", type=int, default=6)
    b.add_argument("--queries", type=int, default=200)
    b.add_argument(
        "--exclude-sample",
        type=int,
        default=None,
        help="leave out the articles corpus.documents samples (its sample_articles)",
    )
    b.add_argument("--seed", type=int, default=13)
    b.set_defaults(func=_cmd_build_squad)
    s = cmds.add_parser("score", help="score a run Parquet on converted qrels with ir_measures")
    s.add_argument("--run", required=True)
    s.add_argument("--qrels", required=True)
    s.add_argument("--measures", nargs="+", default=["nDCG@10", "RR@10", "R@100"])
    s.add_argument("--out", required=True)
    s.set_defaults(func=_cmd_score)
