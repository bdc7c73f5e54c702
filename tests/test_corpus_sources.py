"""SQuAD articles as documents and DPR's psgs_w100.tsv in and out, on the real samples."""

from __future__ import annotations

import gzip
import json

import pyarrow.parquet as pq
import pytest
from cli_util import run_corpus

from drpipe.corpus.sources import (
    iter_dpr_tsv,
    sample_article_indices,
    squad_documents,
    squad_title,
    write_dpr_tsv,
)
from drpipe.errors import InputError

DPR_SAMPLE = "dpr/psgs_w100.sample.tsv"
SQUAD_DEV = "squad/squad-dev-v1.1.reconstructed.json.gz"
SQUAD_TRAIN = "squad/squad-train-v1.1.reconstructed.json.gz"


# ----------------------------------------------------------------------------- SQuAD


def test_squad_dev_articles_as_documents(data_mirror, tmp_path):
    path = data_mirror / SQUAD_DEV
    out = tmp_path / "dev.parquet"
    report = run_corpus(
        "squad-docs", "--squad", str(path), "--out", str(out), "--report", str(tmp_path / "r.json")
    )
    assert report["articles"] == report["kept"] == 48
    docs = pq.read_table(out).to_pylist()
    with gzip.open(path, "rt") as fh:
        raw = json.load(fh)["data"]
    assert [d["doc_id"] for d in docs] == list(range(48))
    assert docs[0]["title"] == "Super Bowl 50"
    assert docs[0]["text"] == "\n\n".join(p["context"] for p in raw[0]["paragraphs"])
    assert sum(d["text"].count("\n\n") + 1 for d in docs) == 2067  # README: 2,067 paragraphs


def test_squad_train_seeded_sample(data_mirror):
    path = data_mirror / SQUAD_TRAIN
    docs, counts = squad_documents(path, sample_articles=20, seed=13)
    again, _ = squad_documents(path, sample_articles=20, seed=13)
    other, _ = squad_documents(path, sample_articles=20, seed=14)
    ids = [d["doc_id"] for d in docs]
    assert counts == {"articles": 442, "sampled": 20, "kept": 20, "empty": 0}
    assert ids == sorted(ids) and len(set(ids)) == 20  # file order
    assert docs == again and ids != [d["doc_id"] for d in other]
    assert ids == sample_article_indices(442, 20, 13)


def test_squad_empty_article_skipped_and_counted(tmp_path):
    path = tmp_path / "squad.json"
    data = {
        "data": [
            {"title": "A_b", "paragraphs": [{"context": "One."}, {"context": "Two."}]},
            {"title": "Empty", "paragraphs": []},
            {"title": "Blank", "paragraphs": [{"context": "  "}]},
        ]
    }
    path.write_text(json.dumps(data))
    docs, counts = squad_documents(path)
    assert docs == [{"doc_id": 0, "title": "A b", "text": "One.\n\nTwo."}]
    assert counts["empty"] == 2 and counts["kept"] == 1


def test_squad_bad_inputs(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"data": [')
    with pytest.raises(InputError, match="bad.json, line 1: invalid JSON"):
        squad_documents(bad)
    bad.write_text(json.dumps({"data": [{"title": "X", "paragraphs": [{"text": "no context"}]}]}))
    with pytest.raises(InputError, match="article 0 'X'"):
        squad_documents(bad)


def test_squad_title():
    assert squad_title("Super_Bowl_50") == "Super Bowl 50"
    assert squad_title("Beyonc%C3%A9") == "Beyoncé"


# ----------------------------------------------------------------------------- DPR TSV


def test_dpr_sample_round_trips_byte_identical(data_mirror, tmp_path):
    tsv = data_mirror / DPR_SAMPLE
    table = tmp_path / "passages.parquet"
    back = tmp_path / "psgs_w100.tsv"
    report = run_corpus(
        "dpr-tsv", "--tsv", str(tsv), "--out", str(table), "--report", str(tmp_path / "r.json")
    )
    assert report["passages"] == 751 and report["dropped"] == {"beyond_subset": 0}
    rows = pq.read_table(table).to_pylist()
    first = rows[0]
    assert (
        first["pid"] == 128529 and first["title"] == "Erie Canal" and first["source"] == "psgs_w100"
    )
    assert first["text"].startswith("elevation of . Lake Erie")
    # Quoted fields come back unquoted, with their inner quotes undoubled.
    assert any('"inland lakes,"' in r["text"] for r in rows)
    run_corpus("export-tsv", "--passages", str(table), "--out", str(back))
    assert back.read_bytes() == tsv.read_bytes()


def test_dpr_subset_keeps_first_passages(data_mirror, tmp_path):
    table = tmp_path / "p.parquet"
    report = run_corpus(
        "dpr-tsv", "--tsv", str(data_mirror / DPR_SAMPLE), "--out", str(table),
        "--report", str(tmp_path / "r.json"), cfg={"subset": 100},
    )  # fmt: skip
    assert report["passages"] == 100 and report["dropped"]["beyond_subset"] == 651
    expected = [pid for pid, _, _ in iter_dpr_tsv(data_mirror / DPR_SAMPLE)][:100]
    assert pq.read_table(table).column("pid").to_pylist() == expected


def test_dpr_doc_ids_follow_title_runs(data_mirror, tmp_path):
    table = tmp_path / "p.parquet"
    run_corpus("dpr-tsv", "--tsv", str(data_mirror / DPR_SAMPLE), "--out", str(table))
    rows = pq.read_table(table).to_pylist()
    for prev, cur in zip(rows, rows[1:], strict=False):
        assert cur["doc_id"] == prev["doc_id"] + (cur["title"] != prev["title"])


def _sample_lines(data_mirror, n: int) -> list[bytes]:
    return (data_mirror / DPR_SAMPLE).read_bytes().splitlines(keepends=True)[:n]


def test_dpr_wrong_field_count(data_mirror, tmp_path):
    lines = _sample_lines(data_mirror, 6)
    lines[4] = lines[4].rstrip(b"\n") + b"\textra\n"
    bad = tmp_path / "extra.tsv"
    bad.write_bytes(b"".join(lines))
    with pytest.raises(InputError, match=r"extra.tsv, line 5: expected 3 tab-separated fields"):
        list(iter_dpr_tsv(bad))
    lines = _sample_lines(data_mirror, 6)
    lines[3] = lines[3].replace(b"\t", b" ", 1)
    bad.write_bytes(b"".join(lines))
    with pytest.raises(InputError, match=r"line 4: .*found 2"):
        list(iter_dpr_tsv(bad))


def test_dpr_invalid_utf8(data_mirror, tmp_path):
    lines = _sample_lines(data_mirror, 8)
    lines[6] = lines[6].replace(b" ", b" \xff\xfe ", 1)
    bad = tmp_path / "latin.tsv"
    bad.write_bytes(b"".join(lines))
    with pytest.raises(InputError, match=r"latin.tsv, line 7: invalid UTF-8"):
        list(iter_dpr_tsv(bad))


def test_dpr_bad_header_and_id(tmp_path):
    bad = tmp_path / "h.tsv"
    bad.write_text("pid\ttext\ttitle\n1\tx\ty\n")
    with pytest.raises(InputError, match="line 1: expected header"):
        list(iter_dpr_tsv(bad))
    bad.write_text("id\ttext\ttitle\nwiki:1\tx\ty\n")
    with pytest.raises(InputError, match="line 2: id 'wiki:1'"):
        list(iter_dpr_tsv(bad))


def test_write_dpr_tsv_quotes_like_dpr(tmp_path):
    out = tmp_path / "o.tsv"
    rows = [(1, 'say "hi"', "T"), (2, "tab\there", 'Q"t'), (3, "plain", "P")]
    assert write_dpr_tsv(out, rows) == 3
    assert out.read_text() == (
        'id\ttext\ttitle\n1\t"say ""hi"""\tT\n2\t"tab\there"\t"Q""t"\n3\tplain\tP\n'
    )
    assert list(iter_dpr_tsv(out)) == rows
    gz = tmp_path / "o.tsv.gz"
    write_dpr_tsv(gz, rows)
    assert list(iter_dpr_tsv(gz)) == rows
