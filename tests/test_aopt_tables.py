"""AOpt's Table 3 and Figures 6 and 7 from hand-made metrics and grids."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from cli_util import run_cli

from drpipe.papers.aopt import tables as aopt_tables

ORACLE = "uses the test answers (oracle)"
ROWS = {
    "dpr": {"protocol": "base", "arm": "base", "rounds": 0, "method": "DPR"},
    "aopt-oracle-hybrid-r2": {
        "protocol": "oracle", "arm": "hybrid", "rounds": 2, "method": "DPR + AOpt(hybrid)",
    },
    "aopt-leakfree-hybrid-r2": {
        "protocol": "leakfree", "arm": "hybrid", "rounds": 2, "method": "DPR + AOpt(hybrid)",
    },
    "aopt-oracle-linear-r1": {
        "protocol": "oracle", "arm": "linear", "rounds": 1,
        "method": "Weighted-based (beta=0.6, gamma=-0.1)",
    },
}  # fmt: skip


def metric(method, dataset="squad", top=(40.0, 70.0, 85.0, 95.0), n=1000):
    return {
        "method": method,
        "train_set": dataset,
        "dataset": dataset,
        "split": "test",
        "n_questions": n,
        "top_k": {str(k): v for k, v in zip((1, 5, 20, 100), top, strict=True)},
    }


def test_table3_gains_and_paper_values_beside_the_oracle_only():
    metrics = [
        metric("aopt-leakfree-hybrid-r2", top=(41.0, 70.0, 85.5, 95.0)),
        metric("aopt-oracle-hybrid-r2", top=(60.0, 80.0, 90.0, 96.0)),
        metric("dpr"),
        metric("aopt-oracle-linear-r1", top=(45.0, 72.0, 86.0, 95.0)),
    ]
    frame = aopt_tables.table3(metrics, "mini", ROWS)
    assert list(frame["run"]) == [
        "dpr", "aopt-leakfree-hybrid-r2", "aopt-oracle-linear-r1", "aopt-oracle-hybrid-r2",
    ]  # fmt: skip
    by = frame.set_index("run")
    assert by.loc["dpr", "protocol"] == "standard"
    assert by.loc["aopt-oracle-hybrid-r2", "protocol"] == ORACLE
    assert by.loc["aopt-leakfree-hybrid-r2", "gain_top1"] == 1.0
    assert by.loc["aopt-oracle-hybrid-r2", "gain_top1"] == 20.0
    # SQuAD is not one of the paper's datasets: NQ's values stand beside, with no diff.
    oracle = by.loc["aopt-oracle-hybrid-r2"]
    assert oracle["paper_dataset"] == "nq"
    assert (oracle["top1_paper"], oracle["gain_top1_paper"]) == (57.1, 11.4)  # vs DPR* 45.7
    assert (oracle["top20_paper"], oracle["gain_top20_paper"]) == (81.2, 2.8)  # vs DPR 78.4
    assert math.isnan(oracle["top1_diff"])
    assert by.loc["aopt-oracle-linear-r1", "top1_paper"] == 51.6
    assert by.loc["dpr", "top1_paper"] == 45.7 and by.loc["dpr", "top20_paper"] == 78.4
    leak = by.loc["aopt-leakfree-hybrid-r2"]
    assert math.isnan(leak["top1_paper"]) and leak["paper_dataset"] == ""
    md = aopt_tables.table3_markdown(frame, "mini")
    assert ORACLE in md and "upper bound" in md and "Leak-free rows read no test answer" in md
    assert "A round is one epoch of the paper" in md
    # On the paper's own dataset the diff is given.
    nq = aopt_tables.table3(
        [metric("dpr", "nq"), metric("aopt-oracle-hybrid-r2", "nq", top=(57.0, 74.5, 81.2, 85.4))],
        "paper",
        ROWS,
    ).set_index("run")
    assert nq.loc["aopt-oracle-hybrid-r2", "top1_diff"] == pytest.approx(-0.1)


def test_table3_needs_the_base_and_known_runs():
    with pytest.raises(SystemExit, match="no entry for run 'x'"):
        aopt_tables.table3([metric("x")], "mini", ROWS)
    with pytest.raises(Exception, match="no base run metrics"):
        aopt_tables.table3([metric("aopt-oracle-hybrid-r2")], "mini", ROWS)


def _grid(path, shift=0.0):
    rows = []
    for b in (0.0, 0.3, 0.6):
        for g in (0.0, -0.1):
            top = [10 + 20 * b + 10 * g + shift + 5 * i for i in range(4)]
            rows.append({"alpha": 1.0, "beta": b, "gamma": g, "n_questions": 50}
                        | {f"top{k}": t for k, t in zip((1, 5, 20, 100), top, strict=True)})  # fmt: skip
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_figure6_cli(tmp_path):
    a, b = _grid(tmp_path / "lf.csv"), _grid(tmp_path / "or.csv", shift=3.0)
    out, csv = tmp_path / "f6.png", tmp_path / "f6.csv"
    cfg = {"scale": "mini", "protocols": ["leakfree", "oracle"], "dataset": "squad"}
    run_cli("tables-aopt", "figure6", "--grids", str(a), str(b), "--out", str(out),
            "--csv", str(csv), cfg=cfg)  # fmt: skip
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    frame = pd.read_csv(csv)
    assert len(frame) == 12 and set(frame["protocol"]) == {"leak-free", ORACLE}
    best = aopt_tables.grid_optimum(frame[frame["protocol"] == ORACLE], 1)
    assert (best["beta"], best["gamma"]) == (0.6, 0.0)


def test_figure6_marks_the_papers_optimum_read_from_its_numbers(monkeypatch, tmp_path):
    from drpipe.papers.numbers import load_paper_numbers

    numbers = load_paper_numbers("aopt")
    assert aopt_tables.paper_optimum(numbers) == (0.6, -0.1)  # AOpt 3.2.2 and its Table 3
    other = numbers.assign(method=numbers["method"].str.replace("beta=0.6", "beta=0.5"))
    with pytest.raises(ValueError, match="several"):
        aopt_tables.paper_optimum(pd.concat([numbers, other]))
    assert aopt_tables.paper_optimum(numbers[numbers["table"] != "3"]) is None

    figures = []
    monkeypatch.setattr(aopt_tables, "save_figure", lambda fig, out: figures.append(fig))
    table = aopt_tables.figure6_table([pd.read_csv(_grid(tmp_path / "g.csv"))], ["oracle"])
    for paper, inside in [((0.6, -0.1), True), ((0.5, -0.1), False)]:
        aopt_tables.plot_figure6(table, tmp_path / "f.png", "t", paper=paper)
        ax = figures[-1].axes[0]
        circles = [ln for ln in ax.get_lines() if ln.get_marker() == "o"]
        assert f"paper (NQ): β={paper[0]:g}, γ={paper[1]:g}" in ax.get_title()
        assert ("not in this grid" in ax.get_title()) is not inside
        assert len(circles) == int(inside)
        if inside:  # x: the beta's column, y: the gamma's row (gammas descending)
            assert (circles[0].get_xdata()[0], circles[0].get_ydata()[0]) == (2, 1)


def test_figure7_cli(tmp_path):
    paths, series = [], []
    for p in ("leakfree", "oracle"):
        for arm in ("passage", "query"):
            for r in (0, 1):
                path = tmp_path / f"{p}{arm}{r}.json"
                run = "dpr" if r == 0 else f"aopt-{p}-{arm}-r{r}"
                path.write_text(json.dumps(metric(run, top=(40.0 + r, 70.0, 85.0, 95.0))))
                paths.append(str(path))
                series.append([p, arm, r])
    out, csv = tmp_path / "f7.png", tmp_path / "f7.csv"
    run_cli("tables-aopt", "figure7", "--metrics", *paths, "--out", str(out), "--csv", str(csv),
            cfg={"scale": "mini", "series": series})  # fmt: skip
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    frame = pd.read_csv(csv)
    assert len(frame) == 8 * 4
    top1 = frame[(frame["k"] == 1) & (frame["arm"] == "query") & (frame["protocol"] == ORACLE)]
    assert top1.sort_values("round")["accuracy"].tolist() == [40.0, 41.0]
    with pytest.raises(ValueError, match="series"):
        aopt_tables.figure7_table([metric("dpr")], [])
