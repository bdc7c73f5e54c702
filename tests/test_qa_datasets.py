"""QA dataset loaders on the real files of the data mirror, plus malformed-input handling."""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from drpipe.errors import InputError
from drpipe.io import read_json, write_parquet
from drpipe.qa import cli as qa_cli
from drpipe.qa.datasets import (
    LOADERS,
    load_questions,
    parse_target_value,
    read_curatedtrec_tsv,
    read_dpr_biencoder,
    read_dpr_jsonl,
    read_dpr_qa_csv,
    read_nq_open,
    read_questions,
    read_squad,
    read_webquestions,
    write_questions,
)

SQUAD_DEV = "squad/squad-dev-v1.1.reconstructed.json.gz"
SQUAD_TRAIN = "squad/squad-train-v1.1.reconstructed.json.gz"


@pytest.fixture(scope="module")
def squad_dev(data_mirror):
    return read_squad(data_mirror / SQUAD_DEV, "squad", "dev")


# (format, file, dataset, split, count, match) for every real file, counts from the data README.
REAL = [
    ("squad", SQUAD_TRAIN, "squad", "train", 87_599, "string"),
    ("squad", SQUAD_DEV, "squad", "dev", 10_570, "string"),
    ("nq-open", "nq_open/NQ-open.dev.jsonl", "nq", "dev", 3_610, "string"),
    ("dpr-qa-csv", "dpr/nq-test.qa.csv", "nq", "test", 3_610, "string"),
    ("dpr-jsonl", "dpr/squad1-test.qa.jsonl", "squad", "test", 10_570, "string"),
    ("dpr-jsonl", "dpr/curatedtrec-test.qa.jsonl", "curatedtrec", "test", 694, "regex"),
    ("curatedtrec-tsv", "curatedtrec/large2180-test.tsv", "curatedtrec", "test", 694, "regex"),
    ("curatedtrec-tsv", "curatedtrec/large2180-train.tsv", "curatedtrec", "train", 1_479, "regex"),
    ("dpr-biencoder", "dpr/biencoder-nq-dev.sample.json", "nq", "dev", 5, "string"),
]


@pytest.mark.parametrize(("fmt", "rel", "dataset", "split", "count", "match"), REAL)
def test_real_files_load_with_published_counts(data_mirror, fmt, rel, dataset, split, count, match):
    questions, report = load_questions(fmt, data_mirror / rel, dataset, split)
    assert len(questions) == count
    assert report["n_records"] == count and report["dropped"] == {}
    assert len({q["qid"] for q in questions}) == count
    assert {q["match"] for q in questions} == {match}
    for q in questions:
        assert q["question"].strip() and q["answers"]
        assert all(isinstance(a, str) and a.strip() for a in q["answers"])


def test_squad_fields(squad_dev):
    q = squad_dev[0]
    assert q["qid"] == "56be4db0acb8001400a502ec"
    assert q["question"] == "Which NFL team represented the AFC at Super Bowl 50?"
    assert q["answers"] == ["Denver Broncos"]  # three identical annotations -> one
    assert q["gold_title"] == "Super Bowl 50"  # underscores -> spaces
    assert "Denver Broncos" in q["gold_context"]
    assert len({q["gold_title"] for q in squad_dev}) == 48
    assert len({q["gold_context"] for q in squad_dev}) == 2_067


def test_dpr_squad_test_equals_squad_dev(data_mirror, squad_dev):
    dpr = read_dpr_jsonl(data_mirror / "dpr/squad1-test.qa.jsonl", "squad", "test")
    assert [q["question"] for q in dpr] == [q["question"] for q in squad_dev]
    # DPR keeps every annotation; distinct answers in order are the SQuAD loader's answers.
    assert [list(dict.fromkeys(q["answers"])) for q in dpr] == [q["answers"] for q in squad_dev]
    assert dpr[5]["qid"] == "squad-test-5"


def test_nq_files(data_mirror):
    csv_q = read_dpr_qa_csv(data_mirror / "dpr/nq-test.qa.csv", "nq", "test")
    assert csv_q[0]["answers"] == ["Wilhelm Conrad Röntgen"]
    # CSV-quoted fields: the answer list itself contains double quotes.
    proud = next(
        q for q in csv_q if q["question"].startswith("who sings the theme song for the proud")
    )
    assert proud["answers"] == ["Solange Knowles", "Destiny 's Child"]
    nq_open = read_nq_open(data_mirror / "nq_open/NQ-open.dev.jsonl", "nq", "dev")
    assert nq_open[0]["answers"] == ["14 December 1972 UTC", "December 1972"]
    assert nq_open[0]["qid"] == "nq-dev-0" and nq_open[0]["gold_title"] is None
    # The same 3,610 NQ test questions, mostly with identical text (order and spacing differ).
    common = {q["question"] for q in csv_q} & {q["question"] for q in nq_open}
    assert len(common) > 3_000


def test_curatedtrec_tsv_matches_dpr_jsonl(data_mirror):
    tsv = read_curatedtrec_tsv(
        data_mirror / "curatedtrec/large2180-test.tsv", "curatedtrec", "test"
    )
    dpr = read_dpr_jsonl(data_mirror / "dpr/curatedtrec-test.qa.jsonl", "curatedtrec", "test")
    assert tsv[0]["qid"] == "1669" and dpr[0]["qid"] == "curatedtrec-test-0"
    assert [q["question"] for q in tsv] == [q["question"] for q in dpr]
    same = sum(a["answers"] == b["answers"] for a, b in zip(tsv, dpr, strict=True))
    assert same >= 693  # one pattern has no-break spaces in the TSV where DPR has spaces


def test_curatedtrec_regex_with_tab_inside(data_mirror):
    train = read_curatedtrec_tsv(
        data_mirror / "curatedtrec/large2180-train.tsv", "curatedtrec", "train"
    )
    q = next(q for q in train if q["qid"] == "462")
    assert q["question"] == "What is measured in curies?"
    assert "\t" in q["answers"][0] and q["answers"][0].endswith("Pierre\\;")


def test_dpr_biencoder_gold_from_first_positive(data_mirror):
    path = data_mirror / "dpr/biencoder-nq-dev.sample.json"
    raw = json.loads(path.read_text())
    questions = read_dpr_biencoder(path, "nq", "dev")
    for q, rec in zip(questions, raw, strict=True):
        assert q["question"] == rec["question"] and q["answers"] == rec["answers"]
        assert q["gold_title"] == rec["positive_ctxs"][0]["title"]
        assert q["gold_context"] == rec["positive_ctxs"][0]["text"]


def test_dpr_biencoder_jsonl_gz_with_qids(tmp_path, data_mirror):
    raw = json.loads((data_mirror / "dpr/biencoder-nq-dev.sample.json").read_text())
    path = tmp_path / "train.jsonl.gz"
    with gzip.open(path, "wt") as fh:
        for i, rec in enumerate(raw):
            fh.write(json.dumps({**rec, "qid": f"q{i}"}) + "\n")
    questions = read_dpr_biencoder(path, "nq", "train")
    assert [q["qid"] for q in questions] == [f"q{i}" for i in range(5)]


WEBQ = [
    {
        "url": "http://www.freebase.com/view/en/justin_bieber",
        "targetValue": '(list (description "Jazmyn Bieber") (description "Jaxon Bieber"))',
        "utterance": "what is the name of justin bieber brother?",
    },
    {
        "url": "http://www.freebase.com/view/en/jamaica",
        "targetValue": "(list (description Jamaican))",
        "utterance": "what character did natalie portman play in star wars?",
    },
    {
        "url": "http://www.freebase.com/view/en/x",
        "targetValue": '(list (description "The \\"Boss\\" (song)") (description 1979))',
        "utterance": "which song?",
    },
]


def test_webquestions(tmp_path):
    path = tmp_path / "webquestions.examples.test.json"
    path.write_text(json.dumps(WEBQ, indent=1))
    questions, report = load_questions("webquestions", path, "webq", "test")
    assert [q["answers"] for q in questions] == [
        ["Jazmyn Bieber", "Jaxon Bieber"],
        ["Jamaican"],
        ['The "Boss" (song)', "1979"],
    ]
    assert [q["qid"] for q in questions] == ["webq-test-0", "webq-test-1", "webq-test-2"]
    assert questions[0]["question"] == "what is the name of justin bieber brother?"
    assert report["n_questions"] == 3

    bad = [*WEBQ, {"url": "u", "targetValue": "(list (description Jamaican)", "utterance": "q"}]
    path.write_text(json.dumps(bad))
    with pytest.raises(InputError, match=r"record 3: bad targetValue"):
        read_webquestions(path, "webq", "test")
    with pytest.raises(ValueError):
        parse_target_value("(description X)")


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _write_bytes(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    ("fmt", "name", "text", "expect"),
    [
        (
            "nq-open",
            "q.jsonl",
            '{"question": "a", "answer": ["x"]}\n\n{"question": "b", "answer": ["y"]\n',
            r"line 3: invalid JSON",
        ),
        (
            "nq-open",
            "q.jsonl",
            '{"question": "a", "answer": "x"}\n',
            r"line 1: answers must be a list",
        ),
        (
            "dpr-jsonl",
            "q.jsonl",
            '{"question": "a", "answer": ["x"]}\n{"answer": ["x"]}\n',
            r"line 2: expected a JSON object with a 'question'",
        ),
        (
            "dpr-qa-csv",
            "q.qa.csv",
            "who\t['a']\nwhat\t['b', \n",
            r"line 2: answer list is not a Python literal",
        ),
        (
            "dpr-qa-csv",
            "q.qa.csv",
            "who\t['a']\nwhat\t['b']\textra\n",
            r"line 2: expected 2 tab-separated fields, got 3",
        ),
        (
            "dpr-qa-csv",
            "q.qa.csv",
            "who\t['a']\n\t['b']\n",
            r"line 2: question must be a non-empty",
        ),
        (
            "curatedtrec-tsv",
            "t.tsv",
            "1\tfactoid\tWho?\tBob\n2\tfactoid\tWhat?\n",
            r"line 2: expected 4 tab-separated fields, got 3",
        ),
        (
            "squad",
            "s.json",
            '{"data": [{"title": "T", "paragraphs": [{"context": "c", "qas": [{"id": "1", "question": "q"}]}]}]}',
            r"article 0: malformed SQuAD record",
        ),
        ("squad", "s.json", '{"data": [', r"invalid JSON"),
        (
            "dpr-biencoder",
            "b.json",
            '[{"question": "q", "answers": ["a"]}, {"question": "q"}]',
            r"record 1: expected an object",
        ),
    ],
)
def test_malformed_records_name_file_and_line(tmp_path, fmt, name, text, expect):
    path = _write(tmp_path / name, text)
    with pytest.raises(InputError, match=expect) as exc:
        LOADERS[fmt](path, "ds", "test")
    assert str(path) in str(exc.value)


# Questions holding characters that str.splitlines() breaks lines at, or a tab: DPR's own
# TriviaQA test file has U+0085 NEXT LINE inside questions. Each layout keeps them exactly.
ODD_QUESTIONS = [
    "who sang\x85the song?",  # U+0085 NEXT LINE
    "what is\u2028this\u2029?",  # LINE SEPARATOR, PARAGRAPH SEPARATOR
    "vertical\x0btab, form\x0cfeed",
    "file\x1cgroup\x1drecord\x1eseparators",
    "carriage\rreturn",  # a CR inside the line, not its end
]


def _qa_load_cli(tmp_path: Path, fmt: str, src: Path) -> list[str]:
    """``drpipe qa load`` of ``src``; the question column of the Parquet it wrote, as bytes."""
    parser = argparse.ArgumentParser()
    qa_cli.register(parser.add_subparsers(dest="command", required=True))
    out = tmp_path / "out.parquet"
    args = parser.parse_args(
        ["qa", "load", "--format", fmt, "--input", str(src), "--dataset", "ds",
         "--split", "test", "--out", str(out)]
    )  # fmt: skip
    assert args.func(args) == 0
    column = pq.read_table(out).column("question").cast(pa.binary()).to_pylist()
    return [b.decode("utf-8") for b in column]


def test_dpr_qa_csv_questions_with_line_breaks_load_exactly(tmp_path):
    # DPR's layout, question<TAB>answers; CSV quoting where a question holds a tab or quote.
    plain = [f"{q}\t['a{i}']\n" for i, q in enumerate(ODD_QUESTIONS)]
    quoted = ['"a\ttab"\t["t"]\n', '"quoted\rCR, ""quote"""\t["q"]\r\n']
    path = _write_bytes(tmp_path / "trivia-test.qa.csv", "".join(plain + quoted).encode())
    want = [*ODD_QUESTIONS, "a\ttab", 'quoted\rCR, "quote"']
    assert _qa_load_cli(tmp_path, "dpr-qa-csv", path) == want
    questions = read_dpr_qa_csv(path, "trivia", "test")
    assert [q["answers"] for q in questions] == [[f"a{i}"] for i in range(5)] + [["t"], ["q"]]


@pytest.mark.parametrize("ensure_ascii", [True, False])
@pytest.mark.parametrize("fmt", ["dpr-jsonl", "nq-open"])
def test_qas_jsonl_questions_with_line_breaks_load_exactly(tmp_path, fmt, ensure_ascii):
    # json.dumps escapes the C0 controls; with ensure_ascii=False U+0085/U+2028 stay raw.
    texts = [*ODD_QUESTIONS, "a\ttab", "CR LF\r\ninside", "new\nline"]
    lines = [json.dumps({"question": q, "answer": ["x"]}, ensure_ascii=ensure_ascii) for q in texts]
    path = _write_bytes(tmp_path / "q.qa.jsonl", ("\n".join(lines) + "\n").encode())
    assert _qa_load_cli(tmp_path, fmt, path) == texts


def test_squad_and_curatedtrec_questions_with_line_breaks_load_exactly(tmp_path):
    qas = [
        {"id": str(i), "question": q, "answers": [{"text": "c"}]}
        for i, q in enumerate([*ODD_QUESTIONS, "a\ttab\n"])
    ]
    squad = {"data": [{"title": "T", "paragraphs": [{"context": "c", "qas": qas}]}]}
    path = _write_bytes(tmp_path / "dev.json", json.dumps(squad).encode())
    assert _qa_load_cli(tmp_path, "squad", path) == [q["question"] for q in qas]
    # The TSV has no quoting: its questions cannot hold a tab, every other character stays.
    lines = [f"{i}\tfactoid\t{q}\tc{i}\n" for i, q in enumerate(ODD_QUESTIONS)]
    path = _write_bytes(tmp_path / "large2180-test.tsv", "".join(lines).encode())
    assert _qa_load_cli(tmp_path, "curatedtrec-tsv", path) == ODD_QUESTIONS


@pytest.mark.parametrize(
    ("fmt", "name", "text", "expect"),
    [
        ("dpr-qa-csv", "q.qa.csv", "a\x85b\t['x']\n\x85\u2028\t['y']\n", r"line 2: question must"),
        ("dpr-qa-csv", "q.qa.csv", "a\u2028b\t['x']\nc\rd\t'y'\n", r"line 2: answers must"),
        (
            "dpr-jsonl",
            "q.jsonl",
            '{"question": "a\\u2028b", "answer": ["x"]}\n{"question": "\\r\\n", "answer": ["y"]}\n',
            r"line 2: question must be a non-empty string",
        ),
        (
            "nq-open",
            "q.jsonl",
            '{"question": "a\\tb", "answer": ["x"]}\n{"question": "c\\u0085", "answer": "y"}\n',
            r"line 2: answers must be a list",
        ),
    ],
)
def test_line_breaks_pass_but_empty_questions_and_bad_answers_do_not(
    tmp_path, fmt, name, text, expect
):
    path = _write(tmp_path / name, text)
    with pytest.raises(InputError, match=expect) as exc:
        LOADERS[fmt](path, "ds", "test")
    assert str(path) in str(exc.value)


def test_duplicate_qids_rejected(tmp_path):
    path = _write(tmp_path / "q.jsonl", '{"id": "1", "question": "a", "answer": ["x"]}\n' * 2)
    with pytest.raises(InputError, match="duplicate qid '1'"):
        load_questions("dpr-jsonl", path, "ds", "test")


def test_empty_answers_dropped_and_counted(tmp_path):
    path = _write(
        tmp_path / "q.jsonl",
        '{"question": "a", "answer": ["x", " "]}\n{"question": "b", "answer": ["", "\u200b"]}\n'
        '{"question": "c", "answer": []}\n',
    )
    questions, report = load_questions("nq-open", path, "ds", "dev")
    assert [q["question"] for q in questions] == ["a"] and questions[0]["answers"] == ["x"]
    assert report["dropped"] == {"no_answers": 2}
    assert report["dropped_examples"] == {"no_answers": ["ds-dev-1", "ds-dev-2"]}
    assert report["empty_answer_strings_removed"] == 3


def test_dropped_examples_name_at_most_five_qids_per_reason(tmp_path, data_mirror):
    lines = [json.dumps({"id": f"q{i}", "question": f"q {i}?", "answer": []}) for i in range(8)]
    lines.append(json.dumps({"id": "keep", "question": "k?", "answer": ["x"]}))
    path = _write(tmp_path / "q.jsonl", "\n".join(lines) + "\n")
    questions, report = load_questions("dpr-jsonl", path, "ds", "dev")
    assert [q["qid"] for q in questions] == ["keep"]
    assert report["dropped"] == {"no_answers": 8}
    assert report["dropped_examples"] == {"no_answers": ["q0", "q1", "q2", "q3", "q4"]}
    # Every reason gets its own list (real SQuAD dev, restricted and sampled).
    titles = {"Super Bowl 50", "Warsaw"}
    kept, report = load_questions(
        "squad", data_mirror / SQUAD_DEV, "squad", "dev", sample=10, restrict_titles=titles
    )
    examples = report["dropped_examples"]
    assert set(examples) == {"gold_title_not_in_corpus", "not_sampled"}
    assert all(len(v) == 5 for v in examples.values())
    kept_ids = {q["qid"] for q in kept}
    assert not kept_ids & set(examples["not_sampled"])


def test_curatedtrec_regex_that_does_not_compile_is_kept_and_counted(tmp_path):
    # DPR's regex_match returns False for a pattern that does not compile: the question stays
    # (it counts in the accuracy denominator) and the report counts it.
    path = _write(
        tmp_path / "t.tsv",
        "1\tfactoid\tWho?\tBob|(Alice\n2\tfactoid\tWhere?\tParis\n",
    )
    questions, report = load_questions("curatedtrec-tsv", path, "curatedtrec", "test")
    assert [q["qid"] for q in questions] == ["1", "2"]
    assert report["regex_answers_not_compiling"] == 1
    assert report["regex_answers_not_compiling_examples"][0]["qid"] == "1"
    assert "does not compile" in report["regex_answers_not_compiling_examples"][0]["error"]
    assert report["regex_questions_without_compiling_answer"] == 1


@pytest.mark.parametrize(
    ("match", "not_compiling", "escaped"),
    [(None, 3, 10), ("regex", 3, 10), ("regex_repaired", 0, 10)],
)
def test_curatedtrec_dpr_regex_default_and_repaired_option(
    data_mirror, match, not_compiling, escaped
):
    path = data_mirror / "curatedtrec/large2180-test.tsv"
    questions, report = load_questions("curatedtrec-tsv", path, "curatedtrec", "test", match=match)
    assert len(questions) == 694
    assert report["match"] == [match or "regex"]
    assert report["regex_answers_not_compiling"] == not_compiling
    # CuratedTREC has one pattern per question: DPR never finds an answer for those three.
    assert report["regex_questions_without_compiling_answer"] == not_compiling
    # Answers the repaired reading changes are always counted, whichever mode is used.
    assert report["regex_answers_with_escaped_non_ascii"] == escaped
    if not_compiling:
        bad = {e["qid"] for e in report["regex_answers_not_compiling_examples"]}
        assert bad == {"10025", "231", "1144"}


def test_restrict_titles_and_seeded_sample(data_mirror):
    path = data_mirror / SQUAD_DEV
    titles = {"Super Bowl 50", "Warsaw", "Normans", "Not An Article"}
    full, report = load_questions("squad", path, "squad", "dev", restrict_titles=titles)
    assert {q["gold_title"] for q in full} == titles - {"Not An Article"}
    assert report["dropped"] == {"gold_title_not_in_corpus": 10_570 - len(full)}

    a, rep_a = load_questions(
        "squad", path, "squad", "dev", sample=50, seed=1, restrict_titles=titles
    )
    b, _ = load_questions("squad", path, "squad", "dev", sample=50, seed=1, restrict_titles=titles)
    c, _ = load_questions("squad", path, "squad", "dev", sample=50, seed=2, restrict_titles=titles)
    assert [q["qid"] for q in a] == [q["qid"] for q in b] != [q["qid"] for q in c]
    order = {q["qid"]: i for i, q in enumerate(full)}
    assert [order[q["qid"]] for q in a] == sorted(order[q["qid"]] for q in a)  # file order kept
    assert rep_a["n_questions"] == 50
    assert rep_a["dropped"]["not_sampled"] == len(full) - 50
    assert sum(rep_a["dropped"].values()) + 50 == 10_570


def test_questions_parquet_round_trip(tmp_path, squad_dev):
    path = tmp_path / "q.parquet"
    write_questions(path, squad_dev[:100])
    assert read_questions(path) == squad_dev[:100]


def test_cli_load_with_restrict_docs(tmp_path, data_mirror):
    docs = tmp_path / "docs.parquet"
    write_parquet(
        docs,
        pa.table(
            {
                "doc_id": pa.array([0, 1], pa.int64()),
                "title": ["Warsaw", "Normans"],
                "text": ["...", "..."],
            }
        ),
    )
    parser = argparse.ArgumentParser()
    qa_cli.register(parser.add_subparsers(dest="command", required=True))
    out, rep = tmp_path / "q.parquet", tmp_path / "report.json"
    args = parser.parse_args(
        [
            "qa", "load", "--format", "squad", "--input", str(data_mirror / SQUAD_DEV),
            "--dataset", "squad", "--split", "dev", "--out", str(out), "--report", str(rep),
            "--restrict-docs", str(docs), "--cfg", '{"sample": 25, "seed": 13}',
        ]
    )  # fmt: skip
    assert args.func(args) == 0
    questions = read_questions(out)
    report = read_json(rep)
    assert len(questions) == 25 == report["n_questions"]
    assert {q["gold_title"] for q in questions} <= {"Warsaw", "Normans"}
    assert report["dropped"]["gold_title_not_in_corpus"] > 9_000
    assert report["restrict_docs"] == [str(docs)]


def test_cli_heldout_split_excludes_the_training_split(tmp_path, data_mirror):
    """A held-out split drawn from the same articles shares no question with the training
    split, and the report counts (and names) the questions it left out for that reason."""
    parser = argparse.ArgumentParser()
    qa_cli.register(parser.add_subparsers(dest="command", required=True))
    docs = tmp_path / "docs.parquet"
    write_parquet(docs, pa.table({"doc_id": pa.array([0], pa.int64()), "title": ["Warsaw"],
                                  "text": ["..."]}))  # fmt: skip

    def load(split: str, cfg: str, *extra: str) -> tuple[list[dict], dict]:
        out, rep = tmp_path / f"{split}.parquet", tmp_path / f"{split}.json"
        args = parser.parse_args(
            ["qa", "load", "--format", "squad", "--input", str(data_mirror / SQUAD_DEV),
             "--dataset", "squad", "--split", split, "--out", str(out), "--report", str(rep),
             "--restrict-docs", str(docs), "--cfg", cfg, *extra]
        )  # fmt: skip
        assert args.func(args) == 0
        return read_questions(out), read_json(rep)

    train, _ = load("train", '{"sample": 20, "seed": 13}')
    everything, _ = load("all", "{}")
    held, report = load("heldout", "{}", "--exclude-questions", str(tmp_path / "train.parquet"))
    train_ids = {q["qid"] for q in train}
    assert not train_ids & {q["qid"] for q in held}
    assert len(held) == len(everything) - 20
    assert report["dropped"]["in_excluded_split"] == 20
    assert set(report["dropped_examples"]["in_excluded_split"]) <= train_ids
    assert report["exclude_questions"] == [str(tmp_path / "train.parquet")]
