"""DCSR's tables beside the paper, Figure 4, k, the Table 8 transcription, corpus subsets."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from cli_util import run_cli, run_corpus

from drpipe.papers.dcsr.tables import (
    comparison,
    comparison_markdown,
    figure4_curves,
    paper_only_rows,
    vectors_per_passage,
)
from drpipe.papers.numbers import load_paper_numbers
from drpipe.subsets import parse_subset, subset_pids

SQUAD_DEV = "squad/squad-dev-v1.1.reconstructed.json.gz"


def metric(run, train_set, dataset, top, split="test", n=100):
    return {"method": run, "train_set": train_set, "dataset": dataset, "split": split,
            "n_questions": n, "top_k": {str(k): v for k, v in zip((1, 5, 20, 100), top, strict=True)}}  # fmt: skip


def cell(group, row, run, dataset, *, setting, paper_method, paper_dataset=None, **extra):
    return {"group": group, "row": row, "run": run, "train_set": "squad", "dataset": dataset,
            "split": "test", "paper": {"setting": setting, "method": paper_method,
                                       "dataset": paper_dataset or dataset, "split": "test"},
            **extra}  # fmt: skip


def test_table4_rows_beside_the_paper_with_differences():
    setting = "Single, 1.05M subset"
    rows = [("DPR", "dpr"), ("DCSR + 1 BM25 random", "dcsr.t4_bm25_1"),
            ("DCSR + 1 in-passage & +1 BM25 random", "dcsr")]  # fmt: skip
    cells = [cell("Single", r, run, "squad", setting=setting, paper_method=r,
                  delta_of=None if r == "DPR" else "DPR") for r, run in rows]  # fmt: skip
    metrics = [metric(run, "squad", "squad", (40.0, 60.0, 80.0 + i, 90.0 + i))
               for i, (_, run) in enumerate(rows)]  # fmt: skip
    frame = comparison(metrics, cells, "mini", "4")
    assert frame["top20_paper"].tolist() == [46.5, 51.1, 54.5]
    assert frame["top100_paper"].tolist() == [63.6, 66.6, 68.5]
    assert frame["top1_paper"].isna().all()  # the paper prints top-20 and top-100 only
    assert frame["top20_diff"].tolist() == pytest.approx([80 - 46.5, 81 - 51.1, 82 - 54.5])
    # The paper's SQuAD claim: in-passage negatives +8.0 top-20 over DPR.
    last = frame.iloc[2]
    assert last["top20_delta"] == 2.0 and last["top20_delta_paper"] == pytest.approx(8.0)
    assert "paper: Wu et al. 2022 (DCSR), Table 4" in last["source"]
    md = comparison_markdown(frame, "mini", "4")
    assert "Table 4" in md and "+2.00 / +8.0" in md
    with pytest.raises(ValueError, match="cell expects 'dpr'"):
        comparison(list(reversed(metrics)), cells, "mini", "4")


def test_printed_differences_and_stand_in_datasets():
    # Table 2 prints "(+10.9)" beside DCSR's SQuAD top-20.
    cells = [cell("Single", "DPR", "dpr", "squad", setting="Single", paper_method="DPR"),
             cell("Single", "DCSR", "dcsr", "squad", setting="Single", paper_method="DCSR",
                  delta_of="DPR")]  # fmt: skip
    metrics = [metric("dpr", "squad", "squad", (1, 2, 50, 70)),
               metric("dcsr", "squad", "squad", (1, 2, 55, 71))]  # fmt: skip
    frame = comparison(metrics, cells, "mini", "2")
    assert frame["top20_delta_paper"].tolist()[1] == 10.9 and frame["top20_delta"][1] == 5.0
    # Table 6: in-domain values and the printed drop (shown as transfer - in-domain).
    cells = [cell("SQuAD-to-Trivia", "DCSR in-domain", "dcsr", "triviaqa",
                  setting="SQuAD-to-Trivia", paper_method="DCSR", paper_suffix="_in_domain"),
             cell("SQuAD-to-Trivia", "DCSR", "dcsr", "triviaqa", setting="SQuAD-to-Trivia",
                  paper_method="DCSR", delta_of="DCSR in-domain", paper_delta="drop")]  # fmt: skip
    metrics = [metric("dcsr", "squad", "triviaqa", (1, 2, 60, 70)),
               metric("dcsr", "squad", "triviaqa", (1, 2, 50, 65))]  # fmt: skip
    frame = comparison(metrics, cells, "paper", "6")
    assert frame["top20_paper"].tolist() == [63.4, 54.0]
    assert frame["top20_delta_paper"][1] == -9.4 and frame["top20_delta"][1] == -10.0
    # Table 5 has no SQuAD: NQ stands in, and the source says so.
    c = cell("Single", "DCSR (DCSR-hard)", "dcsr.hard_dcsr", "squad",
             setting="Single, 1.05M subset", paper_method="DCSR (DCSR-hard)",
             paper_dataset="nq")  # fmt: skip
    frame = comparison([metric("dcsr.hard_dcsr", "squad", "squad", (1, 2, 3, 4))], [c], "mini",
                       "5")  # fmt: skip
    assert frame["top20_paper"][0] == 48.8 and "measured on nq, not ours" in frame["source"][0]


def test_table8_transcription_and_labels():
    t8 = load_paper_numbers("dcsr").query("table == '8'")
    assert len(t8) == 16 and set(t8["split"]) == {"test", "dev"}
    t2 = load_paper_numbers("dcsr").query("table == '2' and setting == 'Single'")
    for method in ("DPR", "DCSR"):
        for k in (20, 100):
            test = t8.query(f"split == 'test' and method == '{method}' and metric == 'top{k}'")
            same = t2.query(f"dataset == 'squad' and method == '{method}' and metric == 'top{k}'")
            assert test["value"].item() == same["value"].item()  # the test block is Table 2's
    dev = paper_only_rows(
        [{"group": "SQuAD-dev", "row": "DCSR", "setting": "SQuAD-dev", "dataset": "squad",
          "split": "dev"}], "mini", "8")  # fmt: skip
    assert dev[["top1_paper", "top5_paper", "top20_paper", "top100_paper"]].values.tolist() == [
        [49.5, 69.6, 79.6, 86.4]
    ]


def test_figure4_curves_and_plot(tmp_path):
    reports = [
        {"method": m, "cfg": {"batch_size": 16, "val_batch_size": None},
         "val_curve": [{"epoch": e, "accuracy": a, "avg_rank": 1.5, "loss": 0.4,
                        "n_questions": 96, **extra} for e, a in enumerate(accs)]}
        for m, accs, extra in (("dpr", [0.5, 0.6], {}),
                               ("dcsr", [0.55, 0.7], {"passage_accuracy": 0.75}))
    ]  # fmt: skip
    for i, r in enumerate(reports):
        (tmp_path / f"r{i}.json").write_text(json.dumps(r))
    run_cli("tables-dcsr", "figure4", "--reports", str(tmp_path / "r0.json"),
            str(tmp_path / "r1.json"), "--labels", "DPR", "DCSR", "--out",
            str(tmp_path / "f.png"), "--csv", str(tmp_path / "f.csv"),
            cfg={"scale": "mini", "dataset": "squad"})  # fmt: skip
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    csv = pd.read_csv(tmp_path / "f.csv")
    assert csv["accuracy"].tolist() == pytest.approx([50, 60, 55, 70])
    # DCSR's curve is its sentence measure; its passage measure sits beside it.
    assert csv["passage_accuracy"].isna().tolist() == [True, True, False, False]
    assert csv["passage_accuracy"].dropna().tolist() == pytest.approx([75, 75])
    assert csv["task"].str.contains("positive sentence among the batch's sentences").all()
    assert csv["epoch"].tolist() == [1, 2, 1, 2] and (csv["val_batch_size"] == 16).all()
    with pytest.raises(ValueError, match="no validation curve"):
        figure4_curves([{**reports[0], "val_curve": []}], ["x"])


def test_vectors_per_passage():
    frame = vectors_per_passage(
        100, {"sentences": 450, "splitter": "dcsr"},
        {"n_index": 440, "search_depth": 450, "top_k": 100},
        {"method": {"name": "dcsr", "cfg": {"sentences_per_passage": 4.5}}},
    )  # fmt: skip
    row = frame.iloc[0]
    assert row["vectors_per_passage"] == 4.4 and row["sentences_without_vector"] == 10
    assert row["k_for_search_depth"] == 4.5 and pd.isna(row["paper_k"])


def test_subset_rule():
    assert parse_subset("p10-gold-squad-test") == {"percent": 10.0, "count": None,
                                                   "dataset": "squad", "split": "test"}  # fmt: skip
    assert parse_subset("n1050000")["count"] == 1050000
    for bad in ("p0", "p101", "x10", "p10-gold-squad"):
        with pytest.raises(ValueError):
            parse_subset(bad)
    pids = np.arange(10, 20)
    # Gold first (wherever it sits), then the first others up to the size, in corpus order.
    assert subset_pids(pids, parse_subset("p50"), {18, 19}).tolist() == [10, 11, 12, 18, 19]
    assert subset_pids(pids, parse_subset("n1"), {15, 17}).tolist() == [15, 17]
    assert subset_pids(pids, parse_subset("p100"), set()).tolist() == pids.tolist()


def test_subset_corpus_keeps_gold_passages(data_mirror, tmp_path):
    docs, passages, sentences = (tmp_path / n for n in ("d.parquet", "p.parquet", "s.parquet"))
    run_corpus("squad-docs", "--squad", str(data_mirror / SQUAD_DEV), "--out", str(docs))
    run_corpus("chunk", "--docs", str(docs), "--sources", "squad_dev", "--out", str(passages),
               cfg={"words": 100, "subset": None})  # fmt: skip
    run_corpus("sentences", "--passages", str(passages), "--out", str(sentences),
               cfg={"splitter": "dcsr"})  # fmt: skip
    questions = tmp_path / "q.parquet"
    run_cli("qa", "load", "--format", "squad", "--input", str(data_mirror / SQUAD_DEV),
            "--dataset", "squad", "--split", "test", "--out", str(questions),
            cfg={"sample": 300, "seed": 4})  # fmt: skip
    out_p, out_s = tmp_path / "sub_p.parquet", tmp_path / "sub_s.parquet"
    report = run_cli("subset-corpus", "--subset", "p20-gold-squad-test", "--passages",
                     str(passages), "--sentences", str(sentences), "--questions", str(questions),
                     "--out-passages", str(out_p), "--out-sentences", str(out_s), "--report",
                     str(tmp_path / "r.json"))  # fmt: skip
    from drpipe.qa.mining import gold_passages

    gold, counts = gold_passages(questions, passages)
    assert counts["gold_matched"] > 280 and report["gold_passages"] == len(set(gold.values()))
    all_pids = pq.read_table(passages).column("pid").to_pylist()
    kept = pq.read_table(out_p).column("pid").to_pylist()
    assert set(gold.values()) <= set(kept)
    assert len(kept) == max(round(0.2 * len(all_pids)), len(set(gold.values())))
    assert kept == [p for p in all_pids if p in set(kept)]  # corpus order
    sent_pids = set(pq.read_table(out_s).column("pid").to_pylist())
    assert sent_pids == set(kept)
    assert report["passages_kept"] == len(kept) and report["passages_in_corpus"] == len(all_pids)
