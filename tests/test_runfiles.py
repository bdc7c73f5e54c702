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


def test_runs_in_rank_by_score_and_count_what_is_missing(small, tmp_path):
    from drpipe.errors import InputError  # noqa: F401  (the errors below)
    from drpipe.runs import read_run

    trec = tmp_path / "theirs.trec"
    # Out of order, a tie (docid descending wins, as trec_eval), "wiki:" ids, "b" absent.
    trec.write_text("a Q0 wiki:4 9 1.5 x\na Q0 wiki:1 1 2.0 x\na Q0 wiki:6 2 1.5 x\n"
                    "e Q0 wiki:2 1 0.1 x\n")  # fmt: skip
    out = tmp_path / "imported.parquet"
    report = runfiles.import_run(trec, small["questions"], small["passages"], out,
                                 id_prefix="wiki:", depth=3)  # fmt: skip
    run = read_run(out)
    assert run["a"][0].tolist() == [1, 6, 4] and run["e"][0].tolist() == [2]
    assert report["questions_without_results"] == 3 and report["questions_below_depth"] == 1
    # DPR JSON without qids names its questions by their text.
    dpr = tmp_path / "theirs.json"
    dpr.write_text(json.dumps([{"question": QUESTIONS[1]["question"], "answers": [],
                                "ctxs": [{"id": "2", "score": 3}, {"id": "5", "score": 1}]}]))  # fmt: skip
    runfiles.import_run(dpr, small["questions"], small["passages"], out)
    assert read_run(out)["b"][0].tolist() == [2, 5]


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("dup.trec", "a Q0 1 1 2.0 x\na Q0 1 2 1.0 x\n",
         r"line 2: passage 1 given twice for qid 'a' \(first at line 1\)"),
        ("unknown.trec", "a Q0 1 1 2.0 x\na Q0 99 2 1.0 x\n", r"line 2: docid '99' is not in the corpus"),
        ("score.trec", "a Q0 1 1 high x\n", r"line 1: score 'high' is not a number"),
        ("fields.trec", "a Q0 1 1 2.0\n", r"line 1: expected 6 fields .* found 5"),
        ("qid.trec", "zz Q0 1 1 2.0 x\n", r"line 1: qid 'zz' is not in the questions file"),
        ("bad.json", '[{"qid": "a", "ctxs": [}]', r"line 1: not JSON"),
        ("text.json", '[{"question": "who?", "ctxs": []}]', r"entry 0: no qid, and its question"),
        ("id.json", '[{"qid": "a", "ctxs": [{"id": "x1", "score": 1}]}]',
         r"entry 0 context 0: docid 'x1' is not a passage id"),
    ],
)  # fmt: skip
def test_bad_runs_in_name_the_file_line_and_id(small, tmp_path, name, text, message):
    from drpipe.errors import InputError

    path = tmp_path / name
    path.write_text(text)
    out = tmp_path / "imported.parquet"
    with pytest.raises(InputError, match=message):
        runfiles.import_run(path, small["questions"], small["passages"], out)
    assert not out.exists()  # nothing half-written


def test_an_external_run_is_a_table2_row():
    from test_plan import plan_of

    plan = plan_of("mini", external_runs={"theirs": {"file": "theirs.trec", "dataset": "squad",
                                                     "label": "Their BM25"}})  # fmt: skip
    rows = [r for r in plan.table2_runs() if r[0] == "ext.theirs"]
    assert rows == [("ext.theirs", "none", "squad", "None", "Their BM25")]
    assert plan.table2_row_map()["ext.theirs"]["paper"] is None
    assert "results/metrics/ext.theirs/none/squad-test.json" in plan.table2_inputs()
    assert "results/runs/ext.theirs/none/squad-test.report.json" in plan.step_reports()
    with pytest.raises(Exception, match=r"external_runs\.theirs\.dataset: 'nq' is not"):
        plan_of("mini", external_runs={"theirs": {"file": "t", "dataset": "nq", "label": "x"}})


def test_evaluate_scores_a_trec_file_as_its_parquet(small, tmp_path):
    """`drpipe evaluate --run their.trec`: the same numbers as the Parquet it was written from."""
    trec = tmp_path / "r.trec"
    assert main(["runs", "trec", "--run", str(small["run"]), "--out", str(trec)]) == 0
    outs = {}
    for name, run in (("parquet", small["run"]), ("trec", trec)):
        outs[name] = tmp_path / f"{name}.json"
        cfg = {"method": "x", "train_set": None, "dataset": "toy", "split": "test"}
        assert main(["evaluate", "--run", str(run), "--questions", str(small["questions"]),
                     "--passages", str(small["passages"]), "--out", str(outs[name]),
                     "--cfg", json.dumps(cfg)]) == 0  # fmt: skip
    a, b = (json.loads(p.read_text()) for p in outs.values())
    assert a["top_k"] == b["top_k"] and a["mrr"] == b["mrr"]
