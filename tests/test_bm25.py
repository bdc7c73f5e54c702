"""Lucene BM25 through Anserini (real Java), checked against a hand calculation.

The analyzer is Anserini's default English one: StandardTokenizer, lower case, Lucene's
English stopwords removed, Porter stemming. The documents below use words whose stems are
obvious ("cats" -> "cat", "birds" -> "bird") so the token counts can be written down by hand.
Lucene 9's BM25Similarity: idf = ln(1 + (N - df + 0.5) / (df + 0.5)),
tf part = tf / (tf + k1 * (1 - b + b * dl / avgdl)) (no (k1 + 1) factor), where dl is the
document length after a lossy one-byte encoding (SmallFloat.intToByte4) and avgdl uses the
exact total. Anserini rounds scores to 4 decimals.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
from pathlib import Path

import anserini_aot
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from drpipe import bm25
from drpipe.cli import main
from drpipe.corpus.passages import PASSAGE_SCHEMA
from drpipe.io import write_parquet
from drpipe.qa.datasets import load_questions

K1, B = 1.2, 0.75  # not Anserini's defaults (0.9, 0.4): proves the parameters reach Lucene

# pid: (title, text, analysed tokens written by hand: title tokens first)
DOCS = {
    1: ("Cat", "The cat and the dog.", ["cat", "cat", "dog"]),
    2: ("Dog", "A dog, a dog and a bird.", ["dog", "dog", "dog", "bird"]),
    3: ("Birds", "Birds of the red wolf.", ["bird", "bird", "red", "wolf"]),
    4: ("Fish", "Fish swim; fish eat fish.", ["fish", "fish", "swim", "fish", "eat", "fish"]),
    # 47 tokens: above 39 Lucene's length byte is lossy (47 decodes as 46).
    5: ("Lion", "wolf" + " lion" * 45, ["lion", "wolf"] + ["lion"] * 45),
    6: ("Zürich", "Zürich bank", ["zürich", "zürich", "bank"]),
}


# Lucene's SmallFloat.intToByte4 / byte4ToInt (4 significant bits above 24).
def _long_to_int4(i: int) -> int:
    bits = i.bit_length()
    if bits < 4:
        return i
    shift = bits - 4
    return ((i >> shift) & 0x07) | ((shift + 1) << 3)


def _int4_to_long(i: int) -> int:
    bits, shift = i & 0x07, (i >> 3) - 1
    return bits if shift == -1 else (bits | 0x08) << shift


_FREE = 255 - _long_to_int4(2**31 - 1)  # 24


def lucene_length(dl: int) -> int:
    """Document length as BM25Similarity sees it after the norm byte round trip."""
    byte = dl if dl < _FREE else _FREE + _long_to_int4(dl - _FREE)
    return byte if byte < _FREE else _FREE + _int4_to_long(byte - _FREE)


def hand_bm25(query_terms: list[str], pid: int, *, lossy: bool = True) -> float:
    n = len(DOCS)
    lengths = {p: len(toks) for p, (_t, _x, toks) in DOCS.items()}
    avgdl = sum(lengths.values()) / n
    score = 0.0
    for term in query_terms:  # a repeated query term counts once per occurrence
        df = sum(term in toks for _t, _x, toks in DOCS.values())
        tf = DOCS[pid][2].count(term)
        if not tf:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        dl = lucene_length(lengths[pid]) if lossy else lengths[pid]
        score += idf * tf / (tf + K1 * (1 - B + B * dl / avgdl))
    return score


def test_smallfloat_encoding():
    assert [lucene_length(i) for i in (0, 3, 23, 24, 39)] == [0, 3, 23, 24, 39]
    assert lucene_length(46) == 46 and lucene_length(47) == 46 and lucene_length(41) == 40


@pytest.fixture(scope="module")
def tiny_index(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bm25")
    table = pa.table(
        {
            "pid": [p for p in DOCS],
            "title": [d[0] for d in DOCS.values()],
            "text": [d[1] for d in DOCS.values()],
            "source": ["test"] * len(DOCS),
            "doc_id": list(range(len(DOCS))),
        },
        schema=PASSAGE_SCHEMA,
    )
    write_parquet(root / "passages.parquet", table)
    meta = bm25.build_index(root / "passages.parquet", root / "index", {"threads": 2})
    assert meta["passages"] == meta["indexed"] == len(DOCS)
    return root / "index"


def _questions(path: Path, qids: list[str], texts: list[str]) -> Path:
    n = len(qids)
    table = pa.table(
        {
            "qid": qids,
            "question": texts,
            "answers": [["x"]] * n,
            "match": ["string"] * n,
            "gold_title": pa.array([None] * n, pa.string()),
            "gold_context": pa.array([None] * n, pa.string()),
        }
    )
    write_parquet(path, table)
    return path


CFG = {"k1": K1, "b": B, "hits": 10, "threads": 2, "java": None}


@pytest.fixture(scope="module")
def scored(tiny_index, tmp_path_factory):
    root = tmp_path_factory.mktemp("bm25-search")
    queries = {
        "cat": ["cat"],
        "dog cats": ["dog", "cat"],
        "wolf": ["wolf"],
        "lion": ["lion"],
        "fish": ["fish"],
        "dog dog": ["dog", "dog"],
    }
    qpath = _questions(root / "q.parquet", [f"q{i}" for i in range(len(queries))], list(queries))
    report = bm25.search(tiny_index, qpath, root / "run.parquet", CFG, trec=root / "run.trec")
    run = pq.read_table(root / "run.parquet").to_pylist()
    return queries, run, report, root


def test_scores_match_hand_calculation(scored):
    queries, run, report, _ = scored
    assert report["no_hits"] == 0
    for i, (query, terms) in enumerate(queries.items()):
        rows = [r for r in run if r["qid"] == f"q{i}"]
        matching = {p for p, (_t, _x, toks) in DOCS.items() if set(terms) & set(toks)}
        assert {r["pid"] for r in rows} == matching, query
        assert [r["rank"] for r in rows] == list(range(1, len(rows) + 1))
        for r in rows:
            expected = hand_bm25(terms, r["pid"])
            assert r["score"] == pytest.approx(expected, abs=1.1e-4), (query, r["pid"])
        assert [r["score"] for r in rows] == sorted((r["score"] for r in rows), reverse=True)


def test_lossy_length_is_what_lucene_uses(scored):
    # Doc 5 has 47 tokens; Lucene sees 46. The exact length would give a visibly different
    # score, so this test notices if the length encoding (or token count) is wrong.
    queries, run, _, _ = scored
    qi = list(queries).index("wolf")
    got = next(r["score"] for r in run if r["qid"] == f"q{qi}" and r["pid"] == 5)
    assert got == pytest.approx(hand_bm25(["wolf"], 5), abs=1.1e-4)
    assert abs(got - hand_bm25(["wolf"], 5, lossy=False)) > 1e-3


def test_trec_export(scored):
    _, run, _, root = scored
    lines = (root / "run.trec").read_text().splitlines()
    assert len(lines) == len(run)
    for line, row in zip(lines, run, strict=True):
        qid, q0, pid, rank, score, tag = line.split(" ")
        assert (qid, q0, int(pid), int(rank), tag) == (
            row["qid"],
            "Q0",
            row["pid"],
            row["rank"],
            "drpipe-bm25",
        )
        assert score == f"{row['score']:.6f}"


def test_awkward_questions_round_trip_and_no_hits(tiny_index, tmp_path):
    qids = ["q:ä/1", "q-2", "3", "q 4", "Ω5", "q6"]
    texts = [
        "what\tis a\ncat?",  # tab and newline inside the question
        "the of and",  # only stopwords: Lucene gets an empty query
        "  Zürich\r\n ",  # unicode, CR LF
        "",  # empty question
        "dog\u2028\u00a0cats",  # unicode line separator and no-break space
        "nothing matches xylophone",
    ]
    qpath = _questions(tmp_path / "q.parquet", qids, texts)
    report = bm25.search(tiny_index, qpath, tmp_path / "run.parquet", CFG)
    run = pq.read_table(tmp_path / "run.parquet")
    assert run.schema.equals(bm25.RUN_SCHEMA)
    rows = run.to_pylist()
    assert {r["qid"] for r in rows} == {"q:ä/1", "3", "Ω5"}
    # sorted by question order, then rank
    order = {q: i for i, q in enumerate(qids)}
    assert [(order[r["qid"]], r["rank"]) for r in rows] == sorted(
        (order[r["qid"]], r["rank"]) for r in rows
    )
    assert [r["pid"] for r in rows if r["qid"] == "q:ä/1"] == [1]
    assert [r["pid"] for r in rows if r["qid"] == "3"] == [6]
    assert {r["pid"] for r in rows if r["qid"] == "Ω5"} == {1, 2}
    assert report["questions"] == 6
    assert report["no_hits"] == 3
    assert report["no_hits_empty_question"] == 1
    assert {e["qid"] for e in report["no_hits_examples"]} == {"q-2", "q 4", "q6"}
    # a qid with a space cannot go into a TREC file: refused, not mangled
    with pytest.raises(ValueError, match="TREC"):
        bm25.write_trec(
            tmp_path / "y.trec",
            pa.table(
                {"qid": ["q 4"], "rank": [1], "pid": [1], "score": [1.0]}, schema=bm25.RUN_SCHEMA
            ),
        )


def test_sanitize_query():
    assert bm25.sanitize_query("a\tb\nc\r\nd\u2028e  ") == "a b c d e"
    assert bm25.sanitize_query(None) == ""


def test_topic_breaks_are_the_line_breaks_of_splitlines_and_the_tab():
    breaks = {c for c in map(chr, range(0x110000)) if len(f"a{c}b".splitlines()) > 1}
    assert frozenset({*breaks, "\t"}) == bm25.TOPIC_BREAKS
    for c in bm25.TOPIC_BREAKS:
        assert bm25.sanitize_query(f"{c}cat{c}dog{c}{c}") == "cat dog"


# Questions as DPR's question files hold them (its TriviaQA test file has U+0085 inside
# questions), in DPR's qas CSV layout, each with the same question written with spaces.
ODD = [
    ("dog\x85cats", "dog cats"),
    ("wolf\u2028lion", "wolf lion"),
    ("fish\u2029swim", "fish swim"),
    ("red\x0bbirds\x0c", "red birds"),
    ("cat\x1cdog\x1dbird\x1e", "cat dog bird"),
    ("zürich\rbank", "zürich bank"),  # a CR inside the line, not its end
    ('"cat\tfish"', "cat fish"),  # CSV-quoted: a tab inside the question
]


def test_topics_of_questions_with_line_breaks_have_one_line_each(tmp_path):
    texts = [*(odd.strip('"') for odd, _ in ODD), "lion\nwolf", "eat\r\nfish", "cat", "\u2028"]
    left_out, normalised = bm25.write_topics(texts, tmp_path / "topics.tsv")
    data = (tmp_path / "topics.tsv").read_bytes()
    lines = data.decode("utf-8").splitlines()
    assert len(lines) == data.count(b"\n") == len(texts) - 1  # the blank question is left out
    assert left_out == [len(texts) - 1] and normalised == list(range(len(texts) - 2))
    for i, line in enumerate(lines):
        topic, text = line.split("\t")
        # Whitespace separates terms for Anserini's analyzer: the same terms, in order.
        assert (int(topic), text.split(" ")) == (i + 1, texts[i].split())


def test_dpr_csv_questions_with_line_breaks_are_searched(tiny_index, tmp_path):
    """``drpipe qa load`` keeps the questions exactly; ``drpipe bm25 search`` finds for each
    what it finds for the question written with spaces, and reports how many it normalised."""
    lines = [f"{odd}\t['x']\n" for odd, _ in ODD] + ["cat\t['x']\n"]
    (tmp_path / "trivia-test.qa.csv").write_bytes("".join(lines).encode())
    qpath, out = tmp_path / "q.parquet", tmp_path / "run.parquet"
    argv = ["qa", "load", "--format", "dpr-qa-csv", "--input", str(tmp_path / "trivia-test.qa.csv")]
    assert main([*argv, "--dataset", "trivia", "--split", "test", "--out", str(qpath)]) == 0
    questions = pq.read_table(qpath).to_pylist()
    assert [q["question"] for q in questions] == [o.strip('"') for o, _ in ODD] + ["cat"]
    qids = [q["qid"] for q in questions]
    argv = ["bm25", "search", "--index", str(tiny_index), "--questions", str(qpath)]
    argv += ["--out", str(out), "--trec", str(tmp_path / "run.trec")]
    assert main([*argv, "--report", str(tmp_path / "r.json"), "--cfg", json.dumps(CFG)]) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["questions"] == report["with_hits"] == len(qids)
    assert report["normalised_questions"] == len(ODD)
    assert report["normalised_questions_examples"] == qids[:5]

    plain = _questions(tmp_path / "plain.parquet", qids, [p for _, p in ODD] + ["cat"])
    bm25.search(tiny_index, plain, tmp_path / "plain-run.parquet", CFG)
    got, want = (
        pq.read_table(path, columns=["qid", "pid", "score"]).to_pylist()
        for path in (out, tmp_path / "plain-run.parquet")
    )
    assert {r["qid"] for r in got} == set(qids)
    assert got == want
    trec = (tmp_path / "run.trec").read_text().splitlines()
    assert len(trec) == len(got) and all(len(line.split(" ")) == 6 for line in trec)


# sha256 of the topics file of each real question file, as written before a question could
# hold a line break: questions without one give the same bytes (and the same BM25 run).
REAL_TOPICS = [
    ("dpr-qa-csv", "dpr/nq-test.qa.csv", "71abed16431b557280e00f570ce08856"),
    ("nq-open", "nq_open/NQ-open.dev.jsonl", "ec0c4b42caf2cc74cbf5411236e4e680"),
    ("dpr-jsonl", "dpr/squad1-test.qa.jsonl", "cadd68a19628799775f3f801c7d5ee68"),
    ("squad", "squad/squad-dev-v1.1.reconstructed.json.gz", "cadd68a19628799775f3f801c7d5ee68"),
    ("dpr-jsonl", "dpr/curatedtrec-test.qa.jsonl", "9e28ce828751a03f37cf7a62cdf27162"),
    ("curatedtrec-tsv", "curatedtrec/large2180-test.tsv", "9e28ce828751a03f37cf7a62cdf27162"),
    ("curatedtrec-tsv", "curatedtrec/large2180-train.tsv", "c663d8de52b01add8b7ef1caf57cfd62"),
]


@pytest.mark.parametrize(("fmt", "rel", "digest"), REAL_TOPICS)
def test_real_question_files_give_the_same_topics(data_mirror, tmp_path, fmt, rel, digest):
    questions, _ = load_questions(fmt, data_mirror / rel, "ds", "test")
    left_out, normalised = bm25.write_topics([q["question"] for q in questions], tmp_path / "t")
    assert left_out == normalised == []
    assert hashlib.sha256((tmp_path / "t").read_bytes()).hexdigest()[:32] == digest


def test_failed_java_raises_with_its_message(tmp_path):
    qpath = _questions(tmp_path / "q.parquet", ["a"], ["cat"])
    with pytest.raises(bm25.AnseriniError, match="SearchCollection"):
        bm25.search(tmp_path / "no-such-index", qpath, tmp_path / "run.parquet", CFG)
    assert not (tmp_path / "run.parquet").exists()


def test_cli_index_and_search(tiny_index, tmp_path):
    parser = argparse.ArgumentParser()
    bm25.register(parser.add_subparsers(dest="command"))
    qpath = _questions(tmp_path / "q.parquet", ["a", "b"], ["fish", "the"])
    args = parser.parse_args(
        [
            "bm25", "search", "--index", str(tiny_index), "--questions", str(qpath),
            "--out", str(tmp_path / "run.parquet"), "--report", str(tmp_path / "r.json"),
            "--cfg", '{"k1": 0.9, "b": 0.4, "hits": 5, "threads": 1, "java": null}',
        ]
    )  # fmt: skip
    assert args.func(args) == 0
    rows = pq.read_table(tmp_path / "run.parquet").to_pylist()
    assert [(r["qid"], r["pid"]) for r in rows] == [("a", 4)]
    assert bm25.read_index_meta(tiny_index)["indexed"] == len(DOCS)


def _index_of(root: Path, docs: dict[int, tuple[str, str]], fields: str) -> Path:
    rows = [
        {"pid": pid, "title": title, "text": text, "source": "t", "doc_id": pid}
        for pid, (title, text) in docs.items()
    ]
    write_parquet(root / "p.parquet", pa.Table.from_pylist(rows, schema=PASSAGE_SCHEMA))
    bm25.build_index(root / "p.parquet", root / "index", {"threads": 1, "fields": fields})
    return root / "index"


def test_two_field_bm25_is_the_sum_of_per_field_bm25(tmp_path):
    """fields: title_text scores sum(BM25 on the text field, BM25 on the title field), each
    field with its own statistics: equal to adding two single-field indexes' scores."""
    docs = {pid: (t, x) for pid, (t, x, _) in DOCS.items()}
    two = _index_of(tmp_path / "two", docs, "title_text")
    text_only = _index_of(tmp_path / "text", {p: ("", x) for p, (_, x) in docs.items()}, "single")
    title_only = _index_of(tmp_path / "title", {p: ("", t) for p, (t, _) in docs.items()}, "single")
    qpath = _questions(tmp_path / "q.parquet", ["a", "b"], ["cat bird", "fish wolf"])
    cfg2 = {**CFG, "fields": "title_text", "field_weights": {"contents": 1.0, "title": 1.0}}
    rep = bm25.search(two, qpath, tmp_path / "two.parquet", cfg2)
    assert rep["fields"] == "title_text"
    got = {
        (r["qid"], r["pid"]): r["score"]
        for r in pq.read_table(tmp_path / "two.parquet").to_pylist()
    }
    want: dict[tuple[str, int], float] = {}
    title_hits = 0
    for index, name in ((text_only, "x"), (title_only, "t")):
        bm25.search(index, qpath, tmp_path / f"{name}.parquet", CFG)
        for r in pq.read_table(tmp_path / f"{name}.parquet").to_pylist():
            want[(r["qid"], r["pid"])] = want.get((r["qid"], r["pid"]), 0.0) + r["score"]
            title_hits += name == "t" and r["score"] > 0
    assert got.keys() == want.keys()
    for key, score in want.items():
        assert got[key] == pytest.approx(score, abs=2e-4), key  # each run rounds to 4 decimals
    # The titles count: the sum is not the text field's BM25 alone.
    assert title_hits > 0


def test_the_sessions_aot_cache_starts_the_jvm_and_changes_no_search(
    tiny_index, tmp_path, monkeypatch, caplog
):
    """The tests' Anserini processes start from an AOT cache with a short-lived JVM's compiler
    and collector (anserini_aot.py): its JVM uses the cache's classes (-Xlog:aot says so), and
    the search writes the same run as a JVM with none of the session's options."""
    path = anserini_aot.cache_file()
    if path is None:
        pytest.skip("the installed Java cannot use an AOT cache (JDK < 25)")
    anserini_aot.record(path)  # waits for the session's thread where that is recording it
    qpath = _questions(tmp_path / "q.parquet", ["a", "b"], ["cat wolf", "dog fish"])
    caplog.set_level(logging.INFO, logger="drpipe.anserini")
    runs = {}
    # without: the workflow's JVM; with: the session's options, logging the cache
    with_options = anserini_aot.options(path).replace("-Xlog:aot*=off", "-Xlog:aot=info")
    for name, options in (("without", ""), ("with", with_options)):
        monkeypatch.setenv("JDK_JAVA_OPTIONS", options)
        caplog.clear()
        bm25.search(tiny_index, qpath, tmp_path / f"{name}.parquet", CFG)
        used = "Using AOT-linked classes: true" in caplog.text
        assert used == (name == "with"), caplog.text[-3000:]
        runs[name] = pq.read_table(tmp_path / f"{name}.parquet").to_pylist()
    assert runs["with"] == runs["without"] and runs["with"]
