"""BEIR-layout reader (drpipe.beir) and ir_measures scoring (drpipe.irmetrics)."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from drpipe import beir, irmetrics
from drpipe.errors import InputError
from drpipe.evaluate import accuracy_at_k


def _write_beir(root, corpus=None, queries=None, qrels=None):
    corpus = (
        corpus
        if corpus is not None
        else [
            json.dumps({"_id": "d1", "title": "A", "text": "alpha"}),
            json.dumps({"_id": "d2", "title": "B", "text": "beta"}),
        ]
    )
    queries = (
        queries
        if queries is not None
        else [
            json.dumps({"_id": "q1", "text": "what is alpha"}),
            json.dumps({"_id": "q2", "text": "no judgement"}),
        ]
    )
    qrels = qrels if qrels is not None else ["query-id\tcorpus-id\tscore", "q1\td1\t1"]
    (root / "qrels").mkdir(parents=True, exist_ok=True)
    (root / "corpus.jsonl").write_text("\n".join(corpus) + "\n")
    (root / "queries.jsonl").write_text("\n".join(queries) + "\n")
    (root / "qrels" / "test.tsv").write_text("\n".join(qrels) + "\n")
    return root


def test_convert_writes_our_forms_and_drops_unjudged_queries(tmp_path):
    src = _write_beir(tmp_path / "in")
    report = beir.convert(src, tmp_path / "out")
    passages = pq.read_table(tmp_path / "out" / "passages.parquet").to_pylist()
    assert passages == [
        {"pid": 0, "title": "A", "text": "alpha"},
        {"pid": 1, "title": "B", "text": "beta"},
    ]
    docmap = pq.read_table(tmp_path / "out" / "docmap.parquet").to_pylist()
    assert docmap == [{"docid": "d1", "pid": 0}, {"docid": "d2", "pid": 1}]
    assert report.queries_read == 2 and report.queries_kept == 1
    assert report.queries_without_qrels == 1
    assert (tmp_path / "out" / "qrels.tsv").read_text() == "qid\tpid\tscore\nq1\t0\t1\n"
    lines = (tmp_path / "out" / "queries.jsonl").read_text().splitlines()
    assert [json.loads(x) for x in lines] == [{"qid": "q1", "text": "what is alpha"}]


def test_malformed_json_names_file_and_line(tmp_path):
    src = _write_beir(tmp_path, corpus=[json.dumps({"_id": "d1", "text": "x"}), "{not json"])
    with pytest.raises(InputError, match=r"corpus\.jsonl, line 2: malformed JSON"):
        beir.convert(src, tmp_path / "out")


def test_unknown_document_in_qrels_names_file_line_and_id(tmp_path):
    src = _write_beir(tmp_path, qrels=["query-id\tcorpus-id\tscore", "q1\td1\t1", "q1\td9\t1"])
    with pytest.raises(InputError, match=r"test\.tsv, line 3: unknown document id 'd9'"):
        beir.convert(src, tmp_path / "out")


@pytest.mark.parametrize("which", ["corpus", "queries"])
def test_duplicate_ids_are_errors(tmp_path, which):
    dup = [json.dumps({"_id": "x", "text": "a"}), json.dumps({"_id": "x", "text": "b"})]
    if which == "corpus":
        src = _write_beir(tmp_path, corpus=dup, qrels=["query-id\tcorpus-id\tscore", "q1\tx\t1"])
    else:
        src = _write_beir(tmp_path, queries=dup, qrels=["query-id\tcorpus-id\tscore", "x\td1\t1"])
    with pytest.raises(InputError, match=rf"{which}\.jsonl, line 2: duplicate"):
        beir.convert(src, tmp_path / "out")


def test_qrels_header_required(tmp_path):
    src = _write_beir(tmp_path, qrels=["q1\td1\t1"])
    with pytest.raises(InputError, match="header"):
        beir.convert(src, tmp_path / "out")


def test_ir_measures_success_at_k_agrees_with_accuracy_at_k():
    # three questions: answer at rank 1, at rank 3, never; success@k as qrels = relevant
    # passages are the ones that hold an answer, so Success@k == top-k accuracy.
    run = {
        "a": {"p1": 3.0, "p2": 2.0, "p3": 1.0},
        "b": {"p1": 3.0, "p2": 2.0, "p3": 1.0},
        "c": {"p1": 3.0, "p2": 2.0, "p3": 1.0},
    }
    qrels = {"a": {"p1": 1}, "b": {"p3": 1}, "c": {"p9": 1}}
    first_hits = {"a": 1, "b": 3, "c": None}
    ours = accuracy_at_k(first_hits, [1, 2, 3])
    agg, per_query = irmetrics.evaluate(qrels, run, ["Success@1", "Success@2", "Success@3"])
    for k in (1, 2, 3):
        assert agg[f"Success@{k}"] * 100 == pytest.approx(ours[str(k)])
    assert per_query["Success@3"] == {"a": 1.0, "b": 1.0, "c": 0.0}


def test_defaults_and_missing_queries_score_zero():
    agg, per_query = irmetrics.evaluate({"a": {"p1": 1}, "b": {"p2": 1}}, {"a": {"p1": 1.0}})
    assert set(agg) == {"nDCG@10", "RR@10", "R@100"}
    assert per_query["RR@10"] == {"a": 1.0, "b": 0.0}
    assert agg["RR@10"] == pytest.approx(0.5)


def test_bad_measure_name():
    with pytest.raises(ValueError, match="unknown ir_measures measure"):
        irmetrics.parse_measures(["NotAMeasure@@3"])


def _tiny_squad(path):
    data = {
        "version": "1.1",
        "data": [
            {
                "title": f"Art_{a}",
                "paragraphs": [
                    {
                        "context": f"article {a} paragraph {p}",
                        "qas": [{"id": f"q{a}{p}", "question": f"what {a} {p}?", "answers": []}],
                    }
                    for p in range(3)
                ],
            }
            for a in range(4)
        ],
    }
    path.write_text(json.dumps(data))
    return path


def test_squad_dev_builder_writes_beir_layout_and_round_trips(tmp_path):
    squad = _tiny_squad(tmp_path / "dev.json")
    notes = beir.build_squad_dev_collection(
        squad, tmp_path / "c", articles=2, queries=4, exclude_articles=[0, 1], seed=13
    )
    assert notes["articles"] == [2, 3] and notes["documents"] == 6 and notes["queries"] == 4
    c = tmp_path / "c"
    corpus = [json.loads(x) for x in (c / "corpus.jsonl").read_text().splitlines()]
    assert corpus[0] == {"_id": "squad-dev-2-0", "title": "Art 2", "text": "article 2 paragraph 0"}
    queries = [json.loads(x) for x in (c / "queries.jsonl").read_text().splitlines()]
    assert all(set(q) == {"_id", "text"} for q in queries)
    qrels = (c / "qrels" / "test.tsv").read_text().splitlines()
    assert qrels[0] == "query-id\tcorpus-id\tscore" and len(qrels) == 5
    for row in qrels[1:]:
        qid, docid, score = row.split("\t")
        assert score == "1" and docid == f"squad-dev-{qid[1]}-{qid[2]}"
    report = beir.convert(c, tmp_path / "o")
    assert report.documents == 6 and report.queries_kept == 4 and report.qrels == 4


def test_cli_score_a_run(tmp_path):
    import pyarrow as pa

    from drpipe.cli import main
    from drpipe.io import write_parquet

    src = _write_beir(tmp_path / "in")
    beir.convert(src, tmp_path / "o")
    write_parquet(
        tmp_path / "run.parquet",
        pa.table({"qid": ["q1", "q1"], "rank": [1, 2], "pid": [1, 0], "score": [2.0, 1.0]}),
    )
    rc = main(
        [
            "collection",
            "score",
            "--run",
            str(tmp_path / "run.parquet"),
            "--qrels",
            str(tmp_path / "o" / "qrels.tsv"),
            "--measures",
            "RR@10",
            "--out",
            str(tmp_path / "s.json"),
        ]
    )
    assert rc == 0
    out = json.loads((tmp_path / "s.json").read_text())
    assert out["measures"]["RR@10"] == pytest.approx(0.5)
    assert out["per_query"]["RR@10"] == {"q1": 0.5}
