"""DCSR trains on the passages its examples name, whatever ids the corpus gives them.

Real data: DPR's released biencoder JSON (the mirror's 5 records of biencoder-nq-dev.json, with
psgs_w100 ids) against a corpus of DPR's psgs_w100 sample numbered by us, as the paper scale's
corpus built from the dump numbers its passages. A run that would lose more than
``max_dropped_fraction`` of a file's examples stops with an error naming the file.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_dcsr_method import tiny_cfg
from tiny_models import save_tiny_bert

from drpipe.corpus.passages import PASSAGE_SCHEMA
from drpipe.corpus.sentences import iter_sentence_groups, split_passages
from drpipe.errors import InputError
from drpipe.methods import get_method
from drpipe.methods.dcsr_parts.training_data import SYNTHETIC_PID, unit_pid
from drpipe.training.data import check_dropped, read_examples
from drpipe.training.loop import train_model

NQ_DEV = "biencoder-nq-dev.sample.json"


@pytest.fixture(scope="module")
def released(tmp_path_factory, data_mirror) -> dict:
    """DPR's released examples, and a corpus of the same passages under ids of our own.

    Our pids are 1..751 in file order, except that the first example's positive passage id
    (a psgs_w100 id) is given to another passage: an id hit with another text.
    """
    out = tmp_path_factory.mktemp("dcsr_released")
    src = data_mirror / "dpr" / NQ_DEV
    shutil.copy(src, out / NQ_DEV)
    examples, _ = read_examples(out / NQ_DEV)
    with open(data_mirror / "dpr" / "psgs_w100.sample.tsv", newline="") as fh:
        tsv = list(csv.DictReader(fh, delimiter="\t"))
    clash = int(examples[0]["positive_ctxs"][0]["passage_id"])
    rows = []
    for i, r in enumerate(tsv):
        pid = i + 1
        if r["text"] != examples[0]["positive_ctxs"][0]["text"] and not any(
            row["pid"] == clash for row in rows
        ):
            pid = clash
        rows.append({"pid": pid, "title": r["title"], "text": r["text"], "source": "psgs_w100",
                     "doc_id": i})  # fmt: skip
    assert len({r["pid"] for r in rows}) == len(rows)
    pq.write_table(pa.Table.from_pylist(rows, schema=PASSAGE_SCHEMA), out / "p.parquet")
    report = split_passages(out / "p.parquet", out / "s.parquet", splitter="dcsr")
    (out / "s.report.json").write_text(json.dumps(report))
    spans_of_text = {}
    by_pid = dict(iter_sentence_groups(out / "s.parquet"))
    for r in rows:
        spans_of_text[r["text"]] = by_pid[r["pid"]]
    return {
        "file": out / NQ_DEV,
        "examples": examples,
        "rows": rows,
        "tsv": tsv,
        "clash": clash,
        "spans_of_text": spans_of_text,
        "paths": {
            "passages": out / "p.parquet",
            "sentences": out / "s.parquet",
            "sentences_report": out / "s.report.json",
        },  # fmt: skip
    }


def test_released_ids_against_our_ids_keep_every_example(released):
    """No psgs_w100 id of the file names the same passage in our corpus, yet every example is
    kept, and each of its passages is cut exactly as the corpus cut the same text."""
    examples = released["examples"]
    method = get_method("dcsr")
    method.prepare(released["paths"], examples)
    c = method.counts
    assert c["examples"] == 5 and c["dropped_positive_not_in_corpus"] == 0
    assert c["dropped_no_answer_sentence"] == 0 and method.dropped_examples() == {}
    assert c["positives_cut_from_own_text"] == 5
    for ex in examples:
        pos = method._positive(ex)
        ctx = ex["positive_ctxs"][0]
        assert pos is not None and pos[1], ex["question"]
        psg = pos[0]
        assert psg.pid == -1 and psg.text == ctx["text"]
        assert psg.spans == released["spans_of_text"][ctx["text"]]  # the corpus's cut
        # Its units come from its text, never from the corpus passage holding its id.
        assert unit_pid(psg) >= SYNTHETIC_PID
    # The first example's id is held by another passage: its spans are not used.
    clash = released["clash"]
    other = next(r for r in released["rows"] if r["pid"] == clash)
    assert other["text"] != examples[0]["positive_ctxs"][0]["text"]
    assert method._positive(examples[0])[0].spans != released["spans_of_text"][other["text"]]


def test_the_same_ids_use_the_corpus_passages(released, tmp_path):
    """A corpus with the file's own ids and texts (DPR's psgs_w100) gives the corpus's pids."""
    own = [{**r, "pid": int(t["id"])} for r, t in zip(released["rows"], released["tsv"],
                                                     strict=True)]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(own, schema=PASSAGE_SCHEMA), tmp_path / "p.parquet")
    report = split_passages(tmp_path / "p.parquet", tmp_path / "s.parquet", splitter="dcsr")
    (tmp_path / "s.report.json").write_text(json.dumps(report))
    paths = {"passages": tmp_path / "p.parquet", "sentences": tmp_path / "s.parquet",
             "sentences_report": tmp_path / "s.report.json"}  # fmt: skip
    method = get_method("dcsr")
    method.prepare(paths, released["examples"])
    assert method.counts["positives_cut_from_own_text"] == 0
    assert method.counts["passages_cut_from_own_text"] == 0
    for ex in released["examples"]:
        psg = method._positive(ex)[0]
        assert psg.pid == int(ex["positive_ctxs"][0]["passage_id"])


def test_drop_mode_stops_a_run_that_loses_a_file(released, tmp_path):
    """unmatched_passages: drop loses all 5 examples: the run stops before training, naming
    the file, the count and the cause; a looser max_dropped_fraction lets it through."""
    method = get_method("dcsr", {"unmatched_passages": "drop"})
    method.prepare(released["paths"], released["examples"])
    assert method.counts["dropped_positive_not_in_corpus"] == 5
    origins = [str(released["file"])] * 5
    with pytest.raises(InputError) as err:
        check_dropped(method.dropped_examples(), origins, 0.05, "dcsr")
    msg = str(err.value)
    assert str(released["file"]) in msg and "5 of its 5 examples" in msg
    assert "not in the corpus" in msg and "max_dropped_fraction 0.05" in msg
    per_file = check_dropped(method.dropped_examples(), origins, 1.0, "dcsr")
    assert per_file[str(released["file"])]["dropped"] == 5
    # One file of two losing 1 of 3 (33%): that file is named, not the other.
    a, b = "a.json", "b.json"
    with pytest.raises(InputError, match=r"^b\.json: .*1 of its 3 examples \(33\.3%"):
        check_dropped({4: "why"}, [a, a, b, b, b], 0.2, "dcsr")
    assert check_dropped({4: "why"}, [a, a, b, b, b], 0.34, "dcsr")[b]["causes"] == {"why": 1}


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory, released) -> str:
    texts = [r["title"] + " " + r["text"] for r in released["rows"]]
    texts += [ex["question"] for ex in released["examples"]]
    return save_tiny_bert(tmp_path_factory.mktemp("tiny_bert"), texts, max_positions=512)


def _cfg(init: str, **over) -> dict:
    """test_dcsr_method's tiny DCSR cfg, one short epoch with nothing held out."""
    one_epoch = {"warmup_steps": 1, "epochs": 1, "batch_size": 2, "val_fraction": 0.0,
                 "checkpoint_every": 100}  # fmt: skip
    return tiny_cfg(init, **one_epoch, **over)


def test_training_on_released_files(released, tiny_bert, tmp_path):
    """The whole run: with a corpus of other ids it trains on every example (drops counted
    per file in the report); with unmatched_passages: drop it stops before the first step."""
    file = released["file"]
    report = train_model("dcsr", [file], tmp_path / "m", _cfg(tiny_bert),
                         corpus=released["paths"])  # fmt: skip
    assert report["dcsr"]["train_questions"] == 5 and report["dcsr"]["examples"] == 5
    assert report["dropped_by_file"] == {
        str(file): {"examples": 5, "dropped": 0, "causes": {}, "fraction": 0.0}
    }
    with pytest.raises(InputError, match=r"biencoder-nq-dev\.sample\.json: method dcsr cannot "
                       r"use 5 of its 5 examples"):  # fmt: skip
        train_model("dcsr", [file], tmp_path / "d", _cfg(tiny_bert, unmatched_passages="drop"),
                    corpus=released["paths"])  # fmt: skip
    assert not (tmp_path / "d").exists()


def test_regex_answers_find_their_sentences(tmp_path: Path) -> None:
    """CuratedTREC's answers are regular expressions (DPR's released TREC files too): read as
    strings they match no sentence, and DCSR dropped most TREC examples at paper scale (found
    by the rehearsal). The train rule names the files whose answers are regexes."""
    from drpipe.methods.dcsr_parts.training_data import Passage, answer_sentences
    from drpipe.qa.mining import write_dpr_json
    from drpipe.training.data import load_training_data
    from drpipe.training.settings import DEFAULTS

    text = "Lindbergh flew alone. He took off from Roosevelt Field in 1927."
    ctx = {"title": "Lindbergh", "text": text, "passage_id": "1"}
    rec = {"question": "What site did Lindbergh begin his flight from in 1927?",
           "answers": [r"Long Island|New\s?York|Roosevelt Field"], "positive_ctxs": [ctx],
           "negative_ctxs": [], "hard_negative_ctxs": []}  # fmt: skip
    path = tmp_path / "biencoder-curatedtrec-train.json"
    write_dpr_json(path, [rec])
    psg = Passage(1, "Lindbergh", text, spans=[(0, 21), (22, len(text))])
    for modes, want in (({str(path): "regex"}, [1]), ({}, [])):
        cfg = {**DEFAULTS, "seed": 1, "answer_match": modes}
        train, _, _, _ = load_training_data([path], [path], cfg)
        assert answer_sentences(psg, train[0]) == want
