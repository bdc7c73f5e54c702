"""Top-k accuracy: hand-made runs with known first hits, and a cross-check with trec_eval."""

from __future__ import annotations

import argparse
import collections
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from drpipe import evaluate
from drpipe.corpus.passages import PASSAGE_SCHEMA
from drpipe.errors import InputError
from drpipe.io import write_parquet
from drpipe.qa.datasets import read_squad, write_questions
from drpipe.qa.matching import AnswerMatcher, match_tokens

RUN_SCHEMA = pa.schema(
    [("qid", pa.string()), ("rank", pa.int32()), ("pid", pa.int64()), ("score", pa.float64())]
)


def write_passages(path, texts: dict[int, str]) -> None:
    pids = sorted(texts)
    table = pa.Table.from_pydict(
        {
            "pid": pids,
            "title": [f"T{p}" for p in pids],
            "text": [texts[p] for p in pids],
            "source": ["test"] * len(pids),
            "doc_id": [0] * len(pids),
        },
        schema=PASSAGE_SCHEMA,
    )
    write_parquet(path, table)


def write_run(path, ranking: dict[str, list[int]]) -> None:
    rows = collections.defaultdict(list)
    for qid, pids in ranking.items():
        for rank, pid in enumerate(pids, 1):
            rows["qid"].append(qid)
            rows["rank"].append(rank)
            rows["pid"].append(pid)
            rows["score"].append(1000.0 - rank)
    write_parquet(path, pa.Table.from_pydict(dict(rows), schema=RUN_SCHEMA))


def q(qid, answers, match="string"):
    return {
        "qid": qid,
        "question": f"question {qid}?",
        "answers": answers,
        "match": match,
        "gold_title": None,
        "gold_context": None,
    }


@pytest.fixture
def small(tmp_path):
    texts = {
        1: "The Denver Broncos won Super Bowl 50.",
        2: "Warsaw is the capital of Poland.",
        3: "Nothing relevant at all.",
        4: "Nikola Tesla was born in 1856.",
        5: "Title words only: Broncos",  # answer in text
        6: "Chinatown is a neighbourhood.",
    }
    questions = [
        q("a", ["Denver Broncos"]),  # first hit at rank 3
        q("b", ["Poland"]),  # hit at rank 1
        q("c", ["1856"]),  # not in the run -> miss
        q("d", ["Tesla coil"]),  # never found
        q("e", [r"China\w*"], "regex"),  # hit at rank 6
    ]
    ranking = {
        "a": [3, 4, 1, 2, 5, 6],
        "b": [2, 3, 4, 1, 5, 6],
        "d": [4, 3, 2, 1, 5, 6],
        "e": [1, 2, 3, 4, 5, 6],
    }
    paths = {k: tmp_path / f"{k}.parquet" for k in ("passages", "questions", "run")}
    write_passages(paths["passages"], texts)
    write_questions(paths["questions"], questions)
    write_run(paths["run"], ranking)
    return paths


def test_known_first_hits(small):
    summary, first = evaluate.top_k_accuracy(
        small["run"], small["questions"], small["passages"], ks=[1, 2, 3, 5, 6]
    )
    assert first == {"a": 3, "b": 1, "c": None, "d": None, "e": 6}
    assert summary["n_questions"] == 5 and summary["n_missing_from_run"] == 1
    assert summary["top_k"] == {"1": 20.0, "2": 20.0, "3": 40.0, "5": 40.0, "6": 60.0}
    # depth cuts what is checked: beyond depth there are no hits.
    _, first5 = evaluate.top_k_accuracy(small["run"], small["questions"], small["passages"], ks=[5])
    assert first5["e"] is None and first5["a"] == 3


def test_cli_writes_metrics_and_per_question(small, tmp_path):
    parser = argparse.ArgumentParser()
    evaluate.register(parser.add_subparsers(dest="command", required=True))
    out, pq_path = tmp_path / "metrics.json", tmp_path / "pq.parquet"
    cfg = {
        "ks": [1, 5, 20, 100],
        "method": "bm25",
        "train_set": "none",
        "dataset": "toy",
        "split": "test",
    }
    args = parser.parse_args(
        [
            "evaluate", "--run", str(small["run"]), "--questions", str(small["questions"]),
            "--passages", str(small["passages"]), "--out", str(out),
            "--per-question", str(pq_path), "--cfg", json.dumps(cfg),
        ]
    )  # fmt: skip
    assert args.func(args) == 0
    metrics = json.loads(out.read_text())
    assert {k: metrics[k] for k in ("method", "train_set", "dataset", "split")} == {
        "method": "bm25",
        "train_set": "none",
        "dataset": "toy",
        "split": "test",
    }
    assert metrics["n_questions"] == 5 and metrics["n_missing_from_run"] == 1
    assert metrics["top_k"] == {"1": 20.0, "5": 40.0, "20": 60.0, "100": 60.0}
    assert metrics["seconds"] >= 0
    table = pq.read_table(pq_path)
    assert table.schema.field("first_hit_rank").type == pa.int32()
    assert table.to_pydict() == {
        "qid": ["a", "b", "c", "d", "e"],
        "first_hit_rank": [3, 1, None, None, 6],
    }


def test_bad_runs(small, tmp_path):
    bad = tmp_path / "bad.parquet"
    write_run(bad, {"a": [1, 2], "zzz": [1]})
    with pytest.raises(InputError, match="run qids are not in"):
        evaluate.top_k_accuracy(bad, small["questions"], small["passages"])
    write_run(bad, {"a": [1, 99]})
    with pytest.raises(InputError, match="unknown passages"):
        evaluate.top_k_accuracy(bad, small["questions"], small["passages"])
    table = pa.Table.from_pydict(
        {"qid": ["a", "a"], "rank": [1, 3], "pid": [1, 2], "score": [2.0, 1.0]}, schema=RUN_SCHEMA
    )
    write_parquet(bad, table)
    with pytest.raises(InputError, match="without gaps or repeats"):
        evaluate.top_k_accuracy(bad, small["questions"], small["passages"])


def chunk100(text: str) -> list[str]:
    words = text.split()
    return [" ".join(words[i : i + 100]) for i in range(0, len(words), 100)]


def test_top_k_matches_trec_eval(tmp_path, data_mirror):
    """A real lexical-overlap run over SQuAD dev passages, scored by us and by trec_eval.

    (pytrec_eval rather than ranx: ranx's numba compilation alone takes tens of seconds.)
    """
    import pytrec_eval

    squad = read_squad(data_mirror / "squad/squad-dev-v1.1.reconstructed.json.gz", "squad", "dev")
    contexts = list(dict.fromkeys(x["gold_context"] for x in squad))
    texts = {pid: t for pid, t in enumerate((c for ctx in contexts for c in chunk100(ctx)), 1)}
    questions = squad[::53][:200]
    # Rank passages by the number of distinct question tokens they share (ties by pid).
    index = collections.defaultdict(set)
    for pid, text in texts.items():
        for tok in set(match_tokens(text)):
            index[tok].add(pid)
    ranking = {}
    for question in questions:
        counts = collections.Counter()
        for tok in set(match_tokens(question["question"])):
            if len(index[tok]) < 500:  # skip stop-word-like tokens
                counts.update(index[tok])
        ranking[question["qid"]] = [
            pid for pid, _ in sorted(counts.items(), key=lambda x: (-x[1], x[0]))[:100]
        ]
    ranking.pop(questions[7]["qid"])  # one question missing from the run
    paths = {k: tmp_path / f"{k}.parquet" for k in ("passages", "questions", "run")}
    write_passages(paths["passages"], texts)
    write_questions(paths["questions"], questions)
    write_run(paths["run"], ranking)

    ks = [1, 5, 10, 20, 100]
    summary, first = evaluate.top_k_accuracy(
        paths["run"], paths["questions"], paths["passages"], ks
    )
    assert summary["n_missing_from_run"] == 1

    # Qrels from answer matching on the retrieved passages (all that success@k looks at); a
    # question without an answer-bearing passage gets an unretrievable judged document.
    matcher = AnswerMatcher(texts)
    qrels = {}
    for question in questions:
        pids = ranking.get(question["qid"], [])
        hits = matcher.hits(question["answers"], "string", pids)
        rel = [p for p, hit in zip(pids, hits, strict=True) if hit]
        qrels[question["qid"]] = {str(p): 1 for p in rel} or {"none": 1}
    run = {
        question["qid"]: {
            str(p): 1000.0 - r for r, p in enumerate(ranking.get(question["qid"], [-1]), 1)
        }
        for question in questions
    }
    measure = "success." + ",".join(map(str, ks))
    trec = pytrec_eval.RelevanceEvaluator(qrels, {measure}).evaluate(run)
    assert len(trec) == len(questions)
    for k in ks:
        expected = 100 * sum(v[f"success_{k}"] for v in trec.values()) / len(questions)
        assert summary["top_k"][str(k)] == pytest.approx(expected)
    assert 10 < summary["top_k"]["1"] < summary["top_k"]["100"] < 100
    assert sum(r is not None for r in first.values()) == round(summary["top_k"]["100"] * 2)


def test_mrr_from_first_hits_agrees_with_ir_measures(small):
    """MRR@k from the stored first-hit ranks is ir_measures' RR@k with the answer-bearing
    passages of each question as its relevant documents."""
    import ir_measures
    from ir_measures import Qrel, ScoredDoc

    ks = [1, 3, 5, 6]
    summary, first = evaluate.top_k_accuracy(
        small["run"], small["questions"], small["passages"], ks=ks
    )
    assert summary["mrr"] == pytest.approx(
        {"1": 0.2, "3": (1 + 1 / 3) / 5, "5": (1 + 1 / 3) / 5, "6": (1 + 1 / 3 + 1 / 6) / 5}
    )
    # The same numbers through ir_measures: qrels = every passage holding an answer.
    runs = {
        "a": [3, 4, 1, 2, 5, 6], "b": [2, 3, 4, 1, 5, 6],
        "d": [4, 3, 2, 1, 5, 6], "e": [1, 2, 3, 4, 5, 6],
    }  # fmt: skip
    relevant = {"a": {1, 5}, "b": {2}, "c": {4}, "d": set(), "e": {6}}
    qrels = [Qrel(q, str(p), 1) for q, ps in relevant.items() for p in ps]
    qrels += [Qrel(q, "none", 0) for q, ps in relevant.items() if not ps]
    run = [ScoredDoc(q, str(p), -float(r)) for q, ps in runs.items() for r, p in enumerate(ps)]
    for k in ks:
        per_query = {
            m.query_id: m.value for m in ir_measures.iter_calc([ir_measures.RR @ k], qrels, run)
        }
        # ir_measures averages over the queries in qrels; a question missing from the run is 0.
        ours = sum(per_query.get(q, 0.0) for q in relevant) / len(relevant)
        assert summary["mrr"][str(k)] == pytest.approx(ours)
