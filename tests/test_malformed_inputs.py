"""Malformed external files fail with one ``InputError`` naming the file and the line or record.

Every reader of a file the pipeline did not write (QA datasets, SQuAD, DPR's TSV and biencoder
JSON, Wikipedia dumps) turns bad bytes, truncated or corrupt .gz/.bz2 streams, CSV quoting
gone wrong and empty inputs into ``InputError``; the CLI prints it and exits 2 without writing
any output. The malformed files are made in tmp_path, most of them from the real data mirror.
"""

from __future__ import annotations

import bz2
import gzip
import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from drpipe.cli import main
from drpipe.corpus.sources import iter_dpr_tsv, squad_documents
from drpipe.corpus.wiki import iter_pages
from drpipe.errors import InputError
from drpipe.io import iter_input_lines, iter_input_rows, load_input_json, read_jsonl
from drpipe.qa.datasets import LOADERS, load_questions
from drpipe.qa.mining import read_biencoder

SQUAD_DEV = "squad/squad-dev-v1.1.reconstructed.json.gz"
NQ_CSV = "dpr/nq-test.qa.csv"
NQ_OPEN = "nq_open/NQ-open.dev.jsonl"
BIENCODER = "dpr/biencoder-nq-dev.sample.json"
PSGS = "dpr/psgs_w100.sample.tsv"
TREC_TSV = "curatedtrec/large2180-test.tsv"
WIKI = "wikipedia/enwiki-table-markup.xml.bz2"


def _lines(data_mirror: Path, rel: str, n: int) -> list[str]:
    """The first ``n`` lines (with line ends) of a real text file of the mirror."""
    with open(data_mirror / rel, encoding="utf-8", newline="") as fh:
        return [fh.readline() for _ in range(n)]


def _write_bytes(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _latin1_at(lines: list[str], index: int) -> bytes:
    """The lines as UTF-8, except line ``index`` (0-based) with one Latin-1 byte in it."""
    out = [line.encode("utf-8") for line in lines]
    out[index] = out[index].replace(b" ", " caf\xe9 ".encode("latin-1"), 1)
    return b"".join(out)


def _truncated_gz(data: bytes) -> bytes:
    full = gzip.compress(data, mtime=0)
    return full[: len(full) // 2]


def _corrupt_gz(data: bytes) -> bytes:
    """A gzip stream with 64 zero bytes in the middle of its deflate data."""
    full = bytearray(gzip.compress(data, mtime=0))
    mid = len(full) // 2
    full[mid : mid + 64] = b"\x00" * 64
    return bytes(full)


def _raises(fn, *args, match: str, path: Path) -> InputError:
    with pytest.raises(InputError, match=match) as err:
        result = fn(*args)
        if hasattr(result, "__next__"):
            list(result)
    assert str(path) in str(err.value)
    return err.value


# ----------------------------------------------------------------------------- invalid UTF-8


@pytest.mark.parametrize(
    ("fmt", "rel", "name"),
    [
        ("dpr-qa-csv", NQ_CSV, "q.qa.csv"),
        ("nq-open", NQ_OPEN, "q.jsonl"),
        ("dpr-jsonl", NQ_OPEN, "q.jsonl"),
        ("curatedtrec-tsv", TREC_TSV, "t.tsv"),
    ],
)
def test_invalid_utf8_in_line_files_names_line(data_mirror, tmp_path, fmt, rel, name):
    path = _write_bytes(tmp_path / name, _latin1_at(_lines(data_mirror, rel, 5), 3))
    err = _raises(LOADERS[fmt], path, "ds", "test", match=r", line 4: invalid UTF-8", path=path)
    assert err.record == "line 4"


def test_invalid_utf8_in_json_names_line(data_mirror, tmp_path):
    # SQuAD JSON (qa loader and corpus reader), WebQuestions JSON, DPR biencoder JSON.
    squad = json.dumps(json.loads(gzip.decompress((data_mirror / SQUAD_DEV).read_bytes())))
    squad = squad.replace('{"title"', '\n{"title"')  # one article per line
    bad = squad.encode().replace(b"Normans", b"Norm\xe4ns", 1)
    line = squad[: squad.index("Normans")].count("\n") + 1
    path = _write_bytes(tmp_path / "squad.json", bad)
    expect = rf"squad.json, line {line}: invalid UTF-8 at byte \d+ of the line: b'\\xe4ns"
    _raises(LOADERS["squad"], path, "squad", "dev", match=expect, path=path)
    _raises(squad_documents, path, match=expect, path=path)

    web = '[{"url": "u", "targetValue": "(list (description X))",\n"utterance": "caf\xe9?"}]'
    path = _write_bytes(tmp_path / "webq.json", web.encode("latin-1"))
    _raises(
        LOADERS["webquestions"], path, "wq", "test", match=r", line 2: invalid UTF-8", path=path
    )

    records = json.loads((data_mirror / BIENCODER).read_text(encoding="utf-8"))
    text = "[\n" + ",\n".join(json.dumps(r, ensure_ascii=False) for r in records) + "\n]\n"
    path = _write_bytes(tmp_path / "b.json", _latin1_at(text.splitlines(keepends=True), 3))
    _raises(read_biencoder, path, match=r"b.json, line 4: invalid UTF-8", path=path)
    _raises(LOADERS["dpr-biencoder"], path, "nq", "dev", match=r"line 4: invalid UTF-8", path=path)


def test_invalid_utf8_in_dpr_biencoder_jsonl(data_mirror, tmp_path):
    records = json.loads((data_mirror / BIENCODER).read_text(encoding="utf-8"))
    lines = [json.dumps(r, ensure_ascii=False) + "\n" for r in records]
    path = _write_bytes(tmp_path / "b.jsonl", _latin1_at(lines, 2))
    _raises(read_biencoder, path, match=r"b.jsonl, line 3: invalid UTF-8", path=path)


def test_invalid_utf8_in_wiki_dump_names_page(data_mirror, tmp_path):
    xml = bz2.decompress((data_mirror / WIKI).read_bytes())
    title = b"<title>Academy Award for Best Production Design</title>"
    bad = xml.replace(title, title.replace(b"Design", b"D\xe9sign"))
    path = _write_bytes(tmp_path / "bad.xml.bz2", bz2.compress(bad))
    _raises(iter_pages, path, match=r"after page 2 .*malformed XML", path=path)


# ----------------------------------------------------------------------------- truncated / corrupt


def test_truncated_json_gz_names_file_and_line(data_mirror, tmp_path):
    data = gzip.decompress((data_mirror / SQUAD_DEV).read_bytes())
    path = _write_bytes(tmp_path / "squad.json.gz", _truncated_gz(data))
    expect = r"squad.json.gz, line 1: truncated or corrupt file \(EOFError"
    _raises(LOADERS["squad"], path, "squad", "dev", match=expect, path=path)
    _raises(squad_documents, path, match=expect, path=path)

    data = (data_mirror / BIENCODER).read_bytes()
    path = _write_bytes(tmp_path / "b.json.gz", _truncated_gz(data))
    _raises(read_biencoder, path, match=r"line \d+: truncated or corrupt", path=path)
    _raises(LOADERS["dpr-biencoder"], path, "nq", "dev", match=r"truncated", path=path)

    webq = json.dumps(
        [{"url": "u", "targetValue": f"(list (description A{i}))", "utterance": f"q{i}?"}
         for i in range(2000)],
        indent=1,
    ).encode()  # fmt: skip
    path = _write_bytes(tmp_path / "webq.json.gz", _truncated_gz(webq))
    _raises(LOADERS["webquestions"], path, "wq", "test", match=r"truncated or corrupt", path=path)


@pytest.mark.parametrize(
    ("fmt", "rel", "name"),
    [
        ("dpr-qa-csv", NQ_CSV, "q.qa.csv.gz"),
        ("nq-open", NQ_OPEN, "q.jsonl.gz"),
        ("curatedtrec-tsv", TREC_TSV, "t.tsv.gz"),
    ],
)
@pytest.mark.parametrize("damage", [_truncated_gz, _corrupt_gz])
def test_truncated_or_corrupt_gz_line_files(data_mirror, tmp_path, fmt, rel, name, damage):
    path = _write_bytes(tmp_path / name, damage((data_mirror / rel).read_bytes()))
    err = _raises(LOADERS[fmt], path, "ds", "test", match=r"line \d+: ", path=path)
    assert re.fullmatch(r"line \d+", err.record)
    if damage is _truncated_gz:
        assert "truncated or corrupt" in err.problem
    # A damaged deflate block may inflate to garbage that is only caught by the CRC at the
    # end: then the first line it makes malformed is named (bad bytes, fields or JSON).


def test_truncated_and_corrupt_gz_in_io_helpers(data_mirror, tmp_path):
    data = (data_mirror / NQ_OPEN).read_bytes()
    n_lines = data.count(b"\n")
    path = _write_bytes(tmp_path / "t.jsonl.gz", _truncated_gz(data))
    err = _raises(iter_input_lines, path, match="truncated or corrupt", path=path)
    assert 1 < int(err.record.split()[1]) < n_lines  # the line where the data stops
    _raises(read_jsonl, path, match=r"line \d+: truncated or corrupt", path=path)
    _raises(load_input_json, path, match=r"line \d+: truncated or corrupt", path=path)
    path = _write_bytes(tmp_path / "c.jsonl.gz", _corrupt_gz(data))
    _raises(read_jsonl, path, match=r"line \d+: ", path=path)
    path = _write_bytes(tmp_path / "t.tsv.bz2", bz2.compress(data)[:-100])
    _raises(iter_input_rows, path, match=r"line \d+: truncated or corrupt", path=path)


def test_truncated_dpr_tsv_gz(data_mirror, tmp_path):
    path = _write_bytes(tmp_path / "psgs.tsv.gz", _truncated_gz((data_mirror / PSGS).read_bytes()))
    _raises(iter_dpr_tsv, path, match=r"line \d+: truncated or corrupt", path=path)


# ----------------------------------------------------------------------------- CSV quoting


def test_unclosed_quote_in_qa_csv_names_its_line(data_mirror, tmp_path):
    # DPR's csv reading gives 3 questions from these 5 lines: line 2 swallows lines 3 and 4.
    lines = _lines(data_mirror, NQ_CSV, 5)
    lines[1] = '"' + lines[1]
    path = _write_bytes(tmp_path / "q.qa.csv", "".join(lines).encode())
    err = _raises(
        LOADERS["dpr-qa-csv"],
        path,
        "nq",
        "test",
        match=r"q.qa.csv, line 2: a double-quoted field is not closed on its line",
        path=path,
    )
    assert err.record == "line 2"
    # With double-quoted answers the quote closes on the same line, swallowing the tab.
    path = tmp_path / "dq.qa.csv"
    path.write_text('who a?\t["x"]\n"who b?\t["y"]\nwho c?\t["z"]\n', encoding="utf-8")
    _raises(
        LOADERS["dpr-qa-csv"], path, "nq", "test", match=r"line 2: .*unbalanced quotes", path=path
    )
    # Also on the last line (nothing after it to swallow, but the line end is inside quotes).
    lines = _lines(data_mirror, NQ_CSV, 3)
    lines[2] = '"' + lines[2]
    path = _write_bytes(tmp_path / "last.qa.csv", "".join(lines).encode())
    _raises(LOADERS["dpr-qa-csv"], path, "nq", "test", match=r"line 3: a double-quoted", path=path)


def test_unclosed_quote_in_dpr_tsv(data_mirror, tmp_path):
    lines = _lines(data_mirror, PSGS, 8)
    pid, text, title = lines[4].split("\t")
    lines[4] = f'{pid}\t"{text}\t{title}'
    path = _write_bytes(tmp_path / "psgs.tsv", "".join(lines).encode())
    _raises(iter_dpr_tsv, path, match=r"psgs.tsv, line 5: a double-quoted field", path=path)


def test_field_over_csv_limit_names_line(data_mirror, tmp_path):
    lines = _lines(data_mirror, NQ_CSV, 4)
    lines[2] = "x" * 131_073 + "?\t['a']\n"
    path = _write_bytes(tmp_path / "q.qa.csv", "".join(lines).encode())
    _raises(
        LOADERS["dpr-qa-csv"],
        path,
        "nq",
        "test",
        match=r"q.qa.csv, line 3: bad CSV/TSV row: field larger than field limit",
        path=path,
    )
    lines = _lines(data_mirror, PSGS, 4)
    pid, _, title = lines[3].split("\t")
    lines[3] = f"{pid}\t{'word ' * 30_000}\t{title}"
    path = _write_bytes(tmp_path / "psgs.tsv", "".join(lines).encode())
    _raises(iter_dpr_tsv, path, match=r"psgs.tsv, line 4: bad CSV/TSV row", path=path)


# ----------------------------------------------------------------------------- questions


_SQUAD_Q = {"id": "1", "question": "q\n", "answers": [{"text": "c"}]}
_TARGET = "(list (description X))"


# A question may hold a tab or a line break (DPR's TriviaQA test file has U+0085 inside
# questions): every loader keeps it exactly; only the BM25 topics file normalises it.
@pytest.mark.parametrize(
    ("fmt", "name", "text", "question"),
    [
        (
            "nq-open",
            "q.jsonl",
            '{"question": "a", "answer": ["x"]}\n{"question": "b\\tc", "answer": ["y"]}\n',
            "b\tc",
        ),
        ("dpr-jsonl", "q.jsonl", '{"question": "who\\nwhat", "answer": ["y"]}\n', "who\nwhat"),
        ("dpr-qa-csv", "q.qa.csv", "who?\t['a']\n\"who\tis?\"\t['b']\n", "who\tis?"),
        ("dpr-biencoder", "b.json", '[{"question": "a\\r", "answers": ["y"]}]', "a\r"),
        (
            "webquestions",
            "w.json",
            json.dumps([{"utterance": "a\u2028b", "targetValue": _TARGET}]),
            "a\u2028b",
        ),
        (
            "squad",
            "s.json",
            json.dumps(
                {"data": [{"title": "T", "paragraphs": [{"context": "c", "qas": [_SQUAD_Q]}]}]}
            ),
            "q\n",
        ),
    ],
)
def test_question_with_tab_or_line_break_loads_exactly(tmp_path, fmt, name, text, question):
    path = _write_bytes(tmp_path / name, text.encode())
    questions = LOADERS[fmt](path, "ds", "test")
    assert questions[-1]["question"] == question


@pytest.mark.parametrize(
    ("fmt", "name", "text"),
    [
        ("dpr-qa-csv", "q.qa.csv", ""),
        ("nq-open", "q.jsonl", "\n\n"),
        ("curatedtrec-tsv", "t.tsv", ""),
        ("webquestions", "w.json", "[]"),
        ("dpr-biencoder", "b.json", "[]"),
    ],
)
def test_empty_question_file_is_an_error_unless_allowed(tmp_path, fmt, name, text):
    path = _write_bytes(tmp_path / name, text.encode())
    _raises(load_questions, fmt, path, "ds", "test", match="no question records", path=path)
    questions, report = load_questions(fmt, path, "ds", "test", allow_empty=True)
    assert questions == [] and report["n_records"] == 0 and report["allow_empty"] is True


def test_split_left_empty_is_an_error_unless_allowed(tmp_path):
    path = _write_bytes(tmp_path / "q.jsonl", b'{"question": "a", "answer": [" "]}\n')
    _raises(
        load_questions,
        "nq-open",
        path,
        "ds",
        "dev",
        match=r"all 1 question records were dropped .*no_answers.*ds-dev-0",
        path=path,
    )
    questions, report = load_questions("nq-open", path, "ds", "dev", allow_empty=True)
    assert questions == [] and report["dropped"] == {"no_answers": 1}


# ----------------------------------------------------------------------------- CLI


def _qa_load(tmp_path: Path, fmt: str, src: Path, cfg: dict | None = None) -> tuple[int, Path]:
    out = tmp_path / "out" / "q.parquet"
    argv = ["qa", "load", "--format", fmt, "--input", str(src), "--dataset", "ds"]
    argv += ["--split", "test", "--out", str(out), "--report", str(out.with_suffix(".json"))]
    if cfg is not None:
        argv += ["--cfg", json.dumps(cfg)]
    return main(argv), out


@pytest.mark.parametrize(
    ("fmt", "name", "data", "expect"),
    [
        ("dpr-qa-csv", "q.qa.csv", b"", "no question records"),
        (
            "dpr-qa-csv",
            "q.qa.csv",
            b"a?\t['x']\n\"b?\t['y']\nc?\t['z']\n",
            "line 2: a double-quoted field is not closed",
        ),
        (
            "nq-open",
            "q.jsonl",
            b'{"question": "caf\xe9?", "answer": ["x"]}\n',
            "line 1: invalid UTF-8",
        ),
        (
            "squad",
            "s.json.gz",
            _truncated_gz(b'{"data": []}' * 5000),
            "line 1: truncated or corrupt",
        ),
    ],
)
def test_cli_bad_input_exits_2_and_writes_nothing(tmp_path, capsys, fmt, name, data, expect):
    src = _write_bytes(tmp_path / name, data)
    code, out = _qa_load(tmp_path, fmt, src)
    assert code == 2
    err = capsys.readouterr().err
    assert f"drpipe qa: bad input: {src}" in err and expect in err
    assert "Traceback" not in err
    assert not out.parent.exists() or list(out.parent.iterdir()) == []


def test_cli_question_with_tab_loads_exactly(tmp_path):
    src = _write_bytes(tmp_path / "q.qa.csv", b"\"a\tb?\"\t['x']\n")
    code, out = _qa_load(tmp_path, "dpr-qa-csv", src)
    assert code == 0
    assert pq.read_table(out).column("question").to_pylist() == ["a\tb?"]


def test_cli_allow_empty_from_cfg(tmp_path):
    src = _write_bytes(tmp_path / "q.qa.csv", b"")
    code, out = _qa_load(tmp_path, "dpr-qa-csv", src, cfg={"allow_empty": True})
    assert code == 0 and out.exists()
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["n_questions"] == 0 and report["allow_empty"] is True


def test_cli_corpus_bad_tsv_exits_2(data_mirror, tmp_path, capsys):
    src = _write_bytes(tmp_path / "psgs.tsv", _latin1_at(_lines(data_mirror, PSGS, 6), 3))
    out = tmp_path / "out" / "passages.parquet"
    code = main(["corpus", "dpr-tsv", "--tsv", str(src), "--out", str(out)])
    assert code == 2
    assert f"bad input: {src}, line 4: invalid UTF-8" in capsys.readouterr().err
    assert not out.parent.exists() or list(out.parent.iterdir()) == []
