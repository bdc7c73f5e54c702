"""Runs out in the field's formats: TREC runs that ir_measures reads back, and DPR / pyserini
retrieval JSON whose top-k pyserini's own evaluator reproduces."""

from __future__ import annotations

import contextlib
import io
import json

import pyarrow.parquet as pq
import pytest
from test_evaluate import q, write_passages, write_run

from drpipe import runfiles
from drpipe.cli import main
from drpipe.evaluate import top_k_accuracy
from drpipe.qa.datasets import write_questions

TEXTS = {
    1: "The Denver Broncos won Super Bowl 50.",
    2: "Warsaw is the capital of Poland.",
    3: "Nothing relevant at all.",
    4: "Nikola Tesla was born in 1856.",
    5: "Title words only: Broncos",
    6: "Chinatown is a neighbourhood in Kraków, Poland.",
}
QUESTIONS = [q("a", ["Denver Broncos"]), q("b", ["Poland"]), q("c", ["1856"]),
             q("d", ["Tesla coil"]), q("e", ["kraków"])]  # fmt: skip
RANKING = {"a": [3, 4, 1, 2, 5, 6], "b": [3, 2, 4, 1, 5, 6], "d": [4, 3, 2, 1, 5, 6],
           "e": [1, 2, 3, 4, 5, 6]}  # fmt: skip


@pytest.fixture
def small(tmp_path):
    paths = {k: tmp_path / f"{k}.parquet" for k in ("passages", "questions", "run")}
    write_passages(paths["passages"], TEXTS)
    write_questions(paths["questions"], QUESTIONS)
    write_run(paths["run"], RANKING)
    return paths


def pyserini_topk(path, ks):
    from pyserini.eval.evaluate_dpr_retrieval import evaluate_retrieval

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        evaluate_retrieval(str(path), ks)
    lines = [line.split() for line in out.getvalue().splitlines() if line.startswith("Top")]
    return {line[0].removeprefix("Top"): float(line[-1]) for line in lines}


def test_pyserini_evaluator_reproduces_our_top_k(small, tmp_path):
    ks = [1, 2, 3, 6]
    ours, _ = top_k_accuracy(small["run"], small["questions"], small["passages"], ks=ks)
    argv = ["runs", "export", "--run", str(small["run"]), "--questions", str(small["questions"]),
            "--passages", str(small["passages"]), "--dpr-json", str(tmp_path / "r.dpr.json"),
            "--pyserini-json", str(tmp_path / "r.pys.json"), "--trec", str(tmp_path / "r.trec"),
            "--report", str(tmp_path / "report.json")]  # fmt: skip
    assert main(argv) == 0
    expect = {k: round(v / 100, 4) for k, v in ours["top_k"].items()}
    # With our has_answer flags, pyserini's evaluator counts our first hits ...
    assert pyserini_topk(tmp_path / "r.pys.json", ks) == expect
    # ... and deciding the hits itself (its DrQA tokenizer, NFD-normalised) it agrees.
    runfiles.write_retrieval_json(
        tmp_path / "bare.json", runfiles.read_run(small["run"]),
        [dict(x) for x in QUESTIONS], {p: ("t", t) for p, t in TEXTS.items()},
        layout="pyserini", with_has_answer=False,
    )  # fmt: skip
    assert pyserini_topk(tmp_path / "bare.json", ks) == expect
    # DPR's layout: a list in questions order, contexts in rank order with has_answer.
    dpr = json.loads((tmp_path / "r.dpr.json").read_text())
    assert [e["qid"] for e in dpr] == ["a", "b", "c", "d", "e"]
    assert [c["id"] for c in dpr[0]["ctxs"]] == ["3", "4", "1", "2", "5", "6"]
    assert [c["has_answer"] for c in dpr[0]["ctxs"]][:3] == [False, False, True]
    assert dpr[2]["ctxs"] == []  # "c" is not in the run: kept, with no contexts
    assert json.loads((tmp_path / "report.json").read_text())["dpr_json"]["not_in_run"] == 1


def test_trec_file_reads_back_with_ir_measures(small, tmp_path):
    import ir_measures

    out = tmp_path / "r.trec"
    assert main(["runs", "trec", "--run", str(small["run"]), "--out", str(out),
                 "--cfg", '{"tag": "drpipe:dpr:squad"}']) == 0  # fmt: skip
    back = sorted((d.query_id, d.doc_id, d.score) for d in ir_measures.read_trec_run(str(out)))
    table = pq.read_table(small["run"]).to_pylist()
    assert back == sorted((r["qid"], str(r["pid"]), round(r["score"], 6)) for r in table)
    assert out.read_text().splitlines()[0].endswith(" drpipe:dpr:squad")
    with pytest.raises(ValueError, match="must be non-empty without whitespace"):
        runfiles.write_trec(tmp_path / "x.trec", pq.read_table(small["run"]), "a tag")
    assert not (tmp_path / "x.trec").exists()  # nothing half-written


def test_every_table2_row_exports_a_trec_file_in_the_default_target():
    from test_plan import plan_of

    plan = plan_of("mini")
    files = plan.export_files()
    assert len(files) == len(plan.table2_runs())
    assert "results/runs/dpr/squad/squad-test.trec" in files
    assert "results/runs/aopt-oracle-query-r1/squad/squad-test.trec" in files
    json_files = plan.export_files(("dpr.json",))
    assert "results/runs/bm25/none/squad-test.dpr.json" in json_files
