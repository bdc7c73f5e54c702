"""Training-example mining on real SQuAD dev articles with a real Lucene BM25 run."""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from drpipe import bm25
from drpipe.corpus.passages import PASSAGE_SCHEMA, load_passages
from drpipe.io import read_json, write_jsonl, write_parquet
from drpipe.qa import mine_cli
from drpipe.qa.matching import has_answer
from drpipe.qa.mining import (
    align_gold,
    mine,
    norm_title,
    read_biencoder,
    write_dpr_json,
)

N_ARTICLES = 4
CFG = {"positives": "gold", "depth": 100, "hard_negatives": 5, "random_negatives": 4, "seed": 13}


def _chunk(words: list[str], size: int = 100) -> list[str]:
    return [" ".join(words[i : i + size]) for i in range(0, len(words), size)]


@pytest.fixture(scope="module")
def squad(data_mirror, tmp_path_factory):
    """Passages (100-word chunks) of a few SQuAD dev articles, their questions, a BM25 run."""
    root = tmp_path_factory.mktemp("mining")
    with gzip.open(data_mirror / "squad" / "squad-dev-v1.1.reconstructed.json.gz", "rt") as fh:
        articles = json.load(fh)["data"][:N_ARTICLES]
    psg = {k: [] for k in PASSAGE_SCHEMA.names}
    qs = {k: [] for k in ("qid", "question", "answers", "match", "gold_title", "gold_context")}
    for doc_id, art in enumerate(articles):
        title = art["title"].replace("_", " ")
        text = "\n\n".join(p["context"] for p in art["paragraphs"])
        for chunk in _chunk(text.split()):
            psg["pid"].append(len(psg["pid"]) + 1)
            psg["title"].append(title)
            psg["text"].append(chunk)
            psg["source"].append("squad_dev")
            psg["doc_id"].append(doc_id)
        for p in art["paragraphs"][::4]:
            q = p["qas"][0]
            qs["qid"].append(q["id"])
            qs["question"].append(q["question"])
            qs["answers"].append(sorted({a["text"] for a in q["answers"]}))
            qs["match"].append("string")
            # the raw SQuAD title (underscores): matching must normalise it
            qs["gold_title"].append(art["title"])
            qs["gold_context"].append(p["context"])
    n_real = len(qs["qid"])
    # Questions made to be discarded, one per reason.
    extra = [
        ("x-no-answers", "Who won Super Bowl 50?", [], None, None),
        ("x-stopwords", "the of and", ["Denver Broncos"], None, None),
        ("x-no-answer-in-top", "Which team won Super Bowl 50?", ["Zyxwvut Qqq"], None, None),
        (
            "x-gold-elsewhere",
            "What is the capital of Mars?",
            ["Olympus City"],
            "Planet Mars",
            "Olympus City is the capital of Mars in this made-up context text.",
        ),
    ]
    for qid, question, answers, gt, gc in extra:
        for key, val in zip(qs, (qid, question, answers, "string", gt, gc), strict=True):
            qs[key].append(val)
    write_parquet(root / "passages.parquet", pa.table(psg, schema=PASSAGE_SCHEMA))
    write_parquet(root / "questions.parquet", pa.table(qs))
    bm25.build_index(root / "passages.parquet", root / "index", {"threads": 2})
    cfg = {"k1": 0.9, "b": 0.4, "hits": 100, "threads": 2}
    report = bm25.search(root / "index", root / "questions.parquet", root / "run.parquet", cfg)
    assert report["no_hits"] == 1  # the stopword question
    return root, n_real


@pytest.fixture(scope="module")
def mined(squad):
    root, _ = squad
    return mine(root / "questions.parquet", root / "run.parquet", root / "passages.parquet", CFG)


def _run(root: Path) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for r in pq.read_table(root / "run.parquet").to_pylist():
        out.setdefault(r["qid"], []).append(r["pid"])
    return out


def test_gold_positives_and_negatives(squad, mined):
    root, n_real = squad
    records, report = mined
    questions = {r["qid"]: r for r in pq.read_table(root / "questions.parquet").to_pylist()}
    assert records and all(r["qid"] in questions for r in records)
    # most real questions find their gold passage; every kept one has a gold positive
    assert report["positives"] == {"gold": len(records), "bm25": 0}
    assert len(records) >= 0.9 * n_real
    for rec in records:
        q = questions[rec["qid"]]
        (pos,) = rec["positive_ctxs"]
        assert norm_title(pos["title"]) == norm_title(q["gold_title"])
        assert has_answer(q["answers"], pos["text"], "string")
        aligned = align_gold(pos["text"], q["gold_context"])
        assert aligned is not None and has_answer(q["answers"], aligned[1], "string")
        hard = rec["hard_negative_ctxs"]
        assert 0 < len(hard) <= CFG["hard_negatives"]
        for ctx in hard + rec["negative_ctxs"]:
            assert not has_answer(q["answers"], ctx["text"], "string")
        ids = [c["passage_id"] for c in rec["positive_ctxs"] + hard + rec["negative_ctxs"]]
        assert len(ids) == len(set(ids))
        assert len(rec["negative_ctxs"]) == CFG["random_negatives"]
        assert [c["score"] for c in hard] == sorted((c["score"] for c in hard), reverse=True)


def test_hard_negatives_are_the_top_unanswered_bm25_passages(squad, mined):
    root, _ = squad
    records, _ = mined
    run = _run(root)
    texts = load_passages(root / "passages.parquet")
    for rec in records[:25]:
        ranking = run[rec["qid"]]
        hard = [c["passage_id"] for c in rec["hard_negative_ctxs"]]
        pos = rec["positive_ctxs"][0]["passage_id"]
        # exactly the unanswered passages of the run, in run order, cut at `hard_negatives`
        unanswered = [
            p for p in ranking if p != pos and not has_answer(rec["answers"], texts[p][1], "string")
        ]
        assert hard == unanswered[: CFG["hard_negatives"]]


def test_discards_are_counted_by_reason(squad, mined):
    root, n_real = squad
    records, report = mined
    kept = {r["qid"] for r in records}
    assert report["questions"] == n_real + 4
    assert report["kept"] == len(records)
    assert report["kept"] + report["discarded_total"] == report["questions"]
    d = report["discarded"]
    assert d["no_answers"] == 1 and d["no_bm25_hits"] == 1 and d["no_answer_in_top_depth"] == 1
    assert d["gold_not_matched"] >= 1
    assert "x-gold-elsewhere" in report["discarded_examples"]["gold_not_matched"]
    assert not kept & {"x-no-answers", "x-stopwords", "x-no-answer-in-top", "x-gold-elsewhere"}


def test_bm25_positives_are_first_answer_in_run(squad):
    root, _ = squad
    records, report = mine(
        root / "questions.parquet",
        root / "run.parquet",
        root / "passages.parquet",
        {**CFG, "positives": "bm25"},
    )
    assert report["positives"]["gold"] == 0 and report["positives"]["bm25"] == len(records)
    assert report["discarded"]["gold_not_matched"] == 0
    run = _run(root)
    rec = records[0]
    texts = load_passages(root / "passages.parquet", run[rec["qid"]])
    first = next(p for p in run[rec["qid"]] if has_answer(rec["answers"], texts[p][1], "string"))
    assert rec["positive_ctxs"][0]["passage_id"] == first


def test_mining_is_deterministic_and_seeded(squad, mined):
    root, _ = squad
    records, _ = mined
    again, _ = mine(
        root / "questions.parquet", root / "run.parquet", root / "passages.parquet", CFG
    )
    assert again == records
    other, _ = mine(
        root / "questions.parquet",
        root / "run.parquet",
        root / "passages.parquet",
        {**CFG, "seed": 14},
    )
    assert [r["negative_ctxs"] for r in other] != [r["negative_ctxs"] for r in records]


def test_read_dpr_released_sample_and_round_trip(data_mirror, tmp_path, mined):
    sample = data_mirror / "dpr" / "biencoder-nq-dev.sample.json"
    recs = list(read_biencoder(sample))
    assert len(recs) == 5
    raw = json.loads(sample.read_text())
    assert recs[0]["question"] == raw[0]["question"]
    assert recs[0]["positive_ctxs"][0]["passage_id"] == int(
        raw[0]["positive_ctxs"][0]["passage_id"]
    )
    assert all(isinstance(c["passage_id"], int) for r in recs for c in r["hard_negative_ctxs"])
    # DPR layout out and back
    assert write_dpr_json(tmp_path / "out.json", recs) == 5
    written = json.loads((tmp_path / "out.json").read_text())
    assert isinstance(written[0]["positive_ctxs"][0]["passage_id"], str)
    assert list(read_biencoder(tmp_path / "out.json")) == recs
    # our JSON lines (gzip) back
    records, _ = mined
    write_jsonl(tmp_path / "train.jsonl.gz", records)
    assert list(read_biencoder(tmp_path / "train.jsonl.gz")) == records
    write_dpr_json(tmp_path / "train.json.gz", records)
    assert list(read_biencoder(tmp_path / "train.json.gz")) == records


def test_bad_biencoder_record_names_file_and_record(tmp_path):
    from drpipe.errors import InputError

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"question": "q", "answers": [], "positive_ctxs": [{"text": "t"}]}]))
    with pytest.raises(InputError, match=r"bad.json, record 0, positive_ctxs\[0\]"):
        list(read_biencoder(bad))


def test_read_biencoder_bad_files_name_file_and_line(data_mirror, tmp_path):
    from drpipe.errors import InputError

    records = json.loads((data_mirror / "dpr/biencoder-nq-dev.sample.json").read_text())
    # Blank lines count: the error names the physical line of the bad record.
    lines = [json.dumps(r) for r in records[:2]] + ["", json.dumps({"answers": []})]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=r"bad.jsonl, line 4: missing or empty 'question'"):
        list(read_biencoder(bad))
    # A truncated .json.gz of DPR's layout, and a JSON value that is not a list of records.
    full = gzip.compress(json.dumps(records).encode(), mtime=0)
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(full[: len(full) // 2])
    with pytest.raises(InputError, match=r"cut.json.gz, line 1: truncated or corrupt"):
        list(read_biencoder(cut))
    obj = tmp_path / "obj.json"
    obj.write_text("[1, 2")
    with pytest.raises(InputError, match=r"obj.json, line 1: invalid JSON"):
        list(read_biencoder(obj))


def test_cli(squad, tmp_path):
    root, _ = squad
    parser = argparse.ArgumentParser()
    mine_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        [
            "mine", "--questions", str(root / "questions.parquet"),
            "--run", str(root / "run.parquet"), "--passages", str(root / "passages.parquet"),
            "--out", str(tmp_path / "train.jsonl.gz"), "--report", str(tmp_path / "r.json"),
            "--cfg", json.dumps(CFG),
        ]
    )  # fmt: skip
    assert args.func(args) == 0
    report = read_json(tmp_path / "r.json")
    assert report["kept"] == len(list(read_biencoder(tmp_path / "train.jsonl.gz")))
    with pytest.raises(SystemExit, match="unknown mining config"):
        bad = parser.parse_args([*args_list(root, tmp_path), "--cfg", '{"negatives": 3}'])
        bad.func(bad)


def args_list(root: Path, tmp_path: Path) -> list[str]:
    return [
        "mine", "--questions", str(root / "questions.parquet"),
        "--run", str(root / "run.parquet"), "--passages", str(root / "passages.parquet"),
        "--out", str(tmp_path / "t2.jsonl.gz"),
    ]  # fmt: skip


def test_a_sentence_unit_run_names_each_hard_negatives_sentence(squad, mined, tmp_path):
    # A DCSR checkpoint's run carries each passage's best retrieved sentence (its `unit`);
    # the mined hard negatives keep it, for DCSR-hard's sentence-specific negatives.
    from drpipe.runs import RUN_UNITS_SCHEMA, read_run, run_table, write_run
    from drpipe.units import unit_id

    root, _ = squad
    table = pq.read_table(root / "run.parquet")
    qids = list(dict.fromkeys(table.column("qid").to_pylist()))
    hits = read_run(root / "run.parquet", qids=qids)
    sentence = {q: [(pid * 7 + i) % 3 for i, pid in enumerate(hits[q][0].tolist())] for q in qids}
    units = [unit_id(hits[q][0], sentence[q]) for q in qids]
    unit_run = tmp_path / "dcsr-run.parquet"
    written = run_table(qids, [hits[q][0] for q in qids], [hits[q][1] for q in qids], units)
    assert written.schema.equals(RUN_UNITS_SCHEMA)
    write_run(unit_run, written)
    # Readers of (qid, rank, pid, score) see the same run.
    again = read_run(unit_run, qids=qids)
    assert all((again[q][0] == hits[q][0]).all() for q in qids)
    records, report = mine(root / "questions.parquet", unit_run, root / "passages.parquet", CFG)
    assert [r["qid"] for r in records] == [r["qid"] for r in mined[0]]
    n = 0
    for rec in records:
        where = {pid: i for i, pid in enumerate(hits[rec["qid"]][0].tolist())}
        for ctx in rec["hard_negative_ctxs"]:
            assert ctx["sentence"] == sentence[rec["qid"]][where[ctx["passage_id"]]]
            n += 1
        assert all("sentence" not in c for c in rec["negative_ctxs"] + rec["positive_ctxs"])
    assert report["hard_negatives_with_sentence"] == n > 0
    # A BM25 run names no sentence.
    assert mined[1]["hard_negatives_with_sentence"] == 0
    assert all("sentence" not in c for r in mined[0] for c in r["hard_negative_ctxs"])
    with pytest.raises(ValueError, match="one entry per retrieved passage"):
        run_table(qids[:1], [hits[qids[0]][0]], [hits[qids[0]][1]], [np.zeros(1, np.int64)])
