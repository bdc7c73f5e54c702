"""Documents -> 100-word passages: by hand on made-up documents, and the real enwiki sample
through the whole corpus stage (wiki -> chunk -> sentences)."""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cli_util import run_corpus

from drpipe.corpus.chunk import chunk_words
from drpipe.corpus.passages import PASSAGE_SCHEMA, iter_passages, num_passages
from drpipe.corpus.wiki import DOC_SCHEMA

WIKI_SAMPLE = "wikipedia/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"


def _words(prefix: str, n: int) -> str:
    return " ".join(f"{prefix}{i}" for i in range(1, n + 1))


def test_chunk_words_by_hand():
    assert chunk_words("a b c d e", 2) == ["a b", "c d", "e"]
    assert chunk_words("  a\n\nb\tc  ", 2) == ["a b", "c"]  # any whitespace, single spaces out
    assert chunk_words("", 100) == [] and chunk_words(" \n ", 100) == []
    text = _words("w", 250)
    chunks = chunk_words(text)
    assert [len(c.split()) for c in chunks] == [100, 100, 50]
    assert " ".join(chunks) == text
    with pytest.raises(ValueError):
        chunk_words("a", 0)


def _docs(path: Path, rows: list[tuple[int, str, str]]) -> Path:
    table = pa.Table.from_pylist(
        [{"doc_id": i, "title": t, "text": x} for i, t, x in rows], schema=DOC_SCHEMA
    )
    pq.write_table(table, path)
    return path


def test_chunk_made_up_documents(tmp_path):
    a = _docs(tmp_path / "a.parquet", [(7, "Alpha", _words("a", 5)), (8, "Empty", " \n\n ")])
    b = _docs(tmp_path / "b.parquet", [(0, "Beta", _words("b", 3) + "\n\n" + _words("c", 4))])
    out = tmp_path / "p.parquet"
    report = run_corpus(
        "chunk", "--docs", str(a), str(b), "--sources", "src_a", "src_b", "--out", str(out),
        "--report", str(tmp_path / "r.json"), cfg={"words": 2, "subset": None},
    )  # fmt: skip
    rows = pq.read_table(out).to_pylist()
    assert pq.read_schema(out).equals(PASSAGE_SCHEMA)
    assert [(r["pid"], r["title"], r["text"], r["source"], r["doc_id"]) for r in rows] == [
        (1, "Alpha", "a1 a2", "src_a", 7),
        (2, "Alpha", "a3 a4", "src_a", 7),
        (3, "Alpha", "a5", "src_a", 7),
        (4, "Beta", "b1 b2", "src_b", 0),
        (5, "Beta", "b3 c1", "src_b", 0),  # paragraphs run on, as in DPR
        (6, "Beta", "c2 c3", "src_b", 0),
        (7, "Beta", "c4", "src_b", 0),
    ]
    assert report["docs"] == 3 and report["empty_docs_skipped"] == 1 and report["passages"] == 7
    assert report["dropped"] == {"empty_docs": 1, "beyond_subset": 0}

    sub = tmp_path / "sub.parquet"
    report = run_corpus(
        "chunk", "--docs", str(a), str(b), "--sources", "src_a", "src_b", "--out", str(sub),
        "--report", str(tmp_path / "r2.json"), cfg={"words": 2, "subset": 4},
    )  # fmt: skip
    assert pq.read_table(sub).to_pylist() == rows[:4]
    assert report["passages"] == 4 and report["passages_beyond_subset"] == 3


def test_chunk_rejects_mismatched_sources(tmp_path):
    a = _docs(tmp_path / "a.parquet", [(0, "A", "x")])
    with pytest.raises(SystemExit):
        run_corpus("chunk", "--docs", str(a), str(a), "--sources", "one", "--out", "o.parquet")


def test_enwiki_sample_whole_corpus_stage(data_mirror, tmp_path):
    docs = tmp_path / "docs.parquet"
    passages = tmp_path / "passages.parquet"
    sentences = tmp_path / "sentences.parquet"
    wiki = run_corpus(
        "wiki", "--dump", str(data_mirror / WIKI_SAMPLE), "--out", str(docs),
        "--report", str(tmp_path / "wiki.json"), cfg={"processes": 2},
    )  # fmt: skip
    chunk = run_corpus(
        "chunk", "--docs", str(docs), "--sources", "enwiki", "--out", str(passages),
        "--report", str(tmp_path / "chunk.json"), cfg={"words": 100, "subset": None},
    )  # fmt: skip
    # The workflow's splitter (config.yaml: dcsr). spaCy's sentencizer (~6 s of CPU on these
    # 4,108 passages) is shown to tile real passages in test_corpus_sentences.
    sent = run_corpus(
        "sentences", "--passages", str(passages), "--out", str(sentences),
        "--report", str(tmp_path / "sent.json"), cfg={"splitter": "dcsr"},
    )  # fmt: skip
    texts = pq.read_table(docs).column("text").to_pylist()
    expected = sum(math.ceil(len(t.split()) / 100) for t in texts)
    assert wiki["kept"] == chunk["docs"] == 96 and chunk["empty_docs_skipped"] == 0
    assert chunk["passages"] == expected == num_passages(passages) == 4108
    table = pq.read_table(passages)
    assert table.column("pid").to_pylist() == list(range(1, expected + 1))
    assert set(table.column("source").to_pylist()) == {"enwiki"}
    lengths = [len(t.split()) for t in table.column("text").to_pylist()]
    assert max(lengths) == 100 and min(lengths) >= 1
    # Every passage's sentences tile its text.
    assert sent["passages"] == expected and sent["sentences"] > expected
    spans: dict[int, list[tuple[int, int]]] = {}
    for row in pq.read_table(sentences).to_pylist():
        spans.setdefault(row["pid"], []).append((row["start"], row["end"]))
    for batch in iter_passages(passages, columns=["pid", "text"]):
        for pid, text in zip(*(c.to_pylist() for c in batch.columns), strict=True):
            cuts = spans[pid]
            assert cuts[0][0] == 0 and cuts[-1][1] == len(text)
            assert all(e == s for (_, e), (s, _) in zip(cuts, cuts[1:], strict=False))
            assert "".join(text[s:e] for s, e in cuts) == text
