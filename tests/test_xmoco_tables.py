"""xMoCo's Table 2, Table 3 and Figure 2 from hand-made metrics, beside the xMoCo paper's numbers."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from cli_util import run_cli

from drpipe.papers.xmoco import tables as xmoco_tables
from drpipe.tables.metrics import KS

ROW_MAP = {
    "bm25": {"method": "BM25", "training": "None"},
    "dpr": {"method": "DPR"},
    "xmoco": {"method": "xMoCo"},
    "dpr+bm25": {"method": "DPR+BM25"},
    "xmoco+bm25": {"method": "xMoCo+BM25"},
}


def metric(method, train_set, dataset="squad", split="test", top=(30.0, 50.0, 70.0, 80.0)):
    return {
        "method": method,
        "train_set": train_set,
        "dataset": dataset,
        "split": split,
        "n_questions": 10570,
        "top_k": {str(k): v for k, v in zip(KS, top, strict=True)},
    }


def test_table2_has_the_xmoco_papers_numbers_beside_ours():
    metrics = [
        metric("xmoco+bm25", "squad", top=(40.0, 60.0, 74.0, 83.0)),
        metric("xmoco", "squad", top=(30.0, 50.0, 66.104, 78.0)),
        metric("bm25", None, top=(35.0, 55.0, 70.0, 81.0)),
        metric("dpr", "squad"),
        metric("dpr+bm25", "squad"),
        metric("xmoco", "multi", dataset="nq", top=(40.0, 60.0, 80.0, 85.0)),
    ]
    frame = xmoco_tables.table2(metrics, "mini", ROW_MAP, train_sets={"multi": ["nq", "trec"]})
    rows = list(frame[["training", "method", "dataset"]].itertuples(index=False, name=None))
    assert rows == [
        ("None", "BM25", "squad"),
        ("Single", "DPR", "squad"),
        ("Single", "xMoCo", "squad"),
        ("Single", "DPR+BM25", "squad"),
        ("Single", "xMoCo+BM25", "squad"),
        ("Multi", "xMoCo", "nq"),
    ]
    by = frame.set_index(["training", "method", "dataset"])
    # The xMoCo paper's own numbers (its BM25 SQuAD top-20 is 68.9; DPR's paper printed 68.8).
    assert by.loc[("None", "BM25", "squad"), "top20_paper"] == 68.9
    assert by.loc[("Single", "DPR", "squad"), "top20_paper"] == 64.3
    x = by.loc[("Single", "xMoCo", "squad")]
    assert (x["top20"], x["top20_paper"], x["top20_diff"]) == (66.10, 65.1, 1.0)
    assert x["top100_paper"] == 77.5 and x["top100_diff"] == 0.5
    assert by.loc[("Single", "xMoCo+BM25", "squad"), "top100_paper"] == 81.2
    assert by.loc[("Multi", "xMoCo", "nq"), "top20_paper"] == 82.5
    assert "Yang et al. 2021" in x["source"]
    assert "top1_paper" not in frame.columns  # the paper prints top-20/100 only
    md = xmoco_tables.table2_markdown(frame, "mini")
    assert "xMoCo+BM25" in md and "65.10" in md


def test_table2_off_test_split_and_duplicates():
    frame = xmoco_tables.table2([metric("xmoco", "squad", split="train")], "mini", ROW_MAP)
    assert frame["top20_paper"].isna().all() and "paper:" not in frame["source"][0]
    # Our squad dev is the paper's squad test.
    frame = xmoco_tables.table2([metric("xmoco", "squad", split="dev")], "mini", ROW_MAP)
    assert frame["top20_paper"][0] == 65.1
    with pytest.raises(ValueError, match="two metrics"):
        xmoco_tables.table2([metric("xmoco", "squad")] * 2, "mini", ROW_MAP)


VARIANTS3 = {
    "xmoco": {"tied": False, "paper_row": "xMoCo"},
    "xmoco.t3_tied": {"tied": True, "paper_row": "xMoCo +tied encoders"},
}


def test_table3_tied_against_separate_with_the_papers_change():
    metrics = [
        metric("xmoco.t3_tied", "squad", top=(1.0, 2.0, 60.0, 75.0)),
        metric("xmoco", "squad", top=(1.0, 2.0, 64.0, 76.5)),
    ]
    frame = xmoco_tables.table3(metrics, "mini", VARIANTS3)
    assert frame["run"].tolist() == ["xmoco", "xmoco.t3_tied"]
    sep, tied = frame.iloc[0], frame.iloc[1]
    assert (sep["top20_paper"], tied["top20_paper"], tied["top100_paper"]) == (82.3, 75.4, 81.2)
    assert tied["delta_top20"] == -4.0 and tied["delta_top100"] == -1.5
    assert tied["delta_top20_paper"] == pytest.approx(-6.9) and sep["delta_top20"] == 0.0
    assert tied["paper_dataset"] == "nq" and tied["paper_split"] == "test"
    md = xmoco_tables.table3_markdown(frame, "mini")
    assert "-6.90" in md and "tied" in md
    with pytest.raises(SystemExit, match="not a row of xMoCo Table 3"):
        xmoco_tables.table3(metrics, "mini", {**VARIANTS3, "xmoco": {"tied": False,
                                                                     "paper_row": "DPR"}})  # fmt: skip
    with pytest.raises(ValueError, match="match no"):
        xmoco_tables.table3([metric("xmoco.other", "squad")], "mini", VARIANTS3)


def test_figure2_cli_writes_png_and_points(tmp_path):
    sizes = {"xmoco": 256, "xmoco.f2_q32": 32, "xmoco.f2_q1024": 1024}
    paths = []
    for i, (run, _) in enumerate(sorted(sizes.items())):
        path = tmp_path / f"m{i}.json"
        path.write_text(json.dumps(metric(run, "squad", top=(1.0, 2.0, 50.0 + i, 70.0))))
        paths.append(str(path))
    variants = {run: {"queue_size": q, "batch_size": 16} for run, q in sizes.items()}
    variants["xmoco.f2_q1024"]["hard_negatives"] = 63  # 16 x (1 + 63) = 1024: in-batch
    out, csv = tmp_path / "f2.png", tmp_path / "f2.csv"
    run_cli(
        "tables-xmoco", "figure2", "--metrics", *paths, "--out", str(out), "--csv", str(csv),
        cfg={"scale": "mini", "variants": variants},
    )  # fmt: skip
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    points = pd.read_csv(csv)
    assert points["queue_size"].tolist() == [32, 256, 1024]
    assert points["in_batch_equivalent"].tolist() == [True, False, True]
    assert points["run"].tolist() == ["xmoco.f2_q32", "xmoco", "xmoco.f2_q1024"]
    assert "prints no values" in points["source"][0]
    first = out.read_bytes()
    run_cli(
        "tables-xmoco", "figure2", "--metrics", *paths, "--out", str(out),
        cfg={"scale": "mini", "variants": variants},
    )  # fmt: skip
    assert out.read_bytes() == first  # deterministic bytes
    with pytest.raises(ValueError, match="one queue size"):
        xmoco_tables.figure2_points(
            [metric("xmoco", "squad"), metric("xmoco.f2_q32", "squad")],
            {
                "xmoco": {"queue_size": 32, "batch_size": 16},
                "xmoco.f2_q32": variants["xmoco.f2_q32"],
            },
        )


def test_table_clis_write_csv_and_markdown(tmp_path):
    paths = []
    for i, m in enumerate([metric("xmoco", "squad"), metric("xmoco.t3_tied", "squad")]):
        (tmp_path / f"{i}.json").write_text(json.dumps(m))
        paths.append(str(tmp_path / f"{i}.json"))
    run_cli(
        "tables-xmoco", "table3", "--metrics", *paths, "--out", str(tmp_path / "t3.csv"),
        "--md", str(tmp_path / "t3.md"), cfg={"scale": "mini", "variants": VARIANTS3},
    )  # fmt: skip
    assert len(pd.read_csv(tmp_path / "t3.csv")) == 2
    run_cli(
        "tables-xmoco", "table2", "--metrics", paths[0], "--out", str(tmp_path / "t2.csv"),
        "--md", str(tmp_path / "t2.md"), cfg={"scale": "mini", "row_map": ROW_MAP},
    )  # fmt: skip
    t2 = pd.read_csv(tmp_path / "t2.csv")
    assert t2["top20_paper"].tolist() == [65.1]
    assert "# xMoCo Table 2" in (tmp_path / "t2.md").read_text()
