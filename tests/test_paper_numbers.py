"""The transcribed paper numbers: spot checks against the papers, counts, and cross-checks.

Cross-checks use what the papers themselves repeat: DCSR and AOpt copy DPR's Table 2 rows,
DCSR prints DCSR - DPR deltas, AOpt's prose quotes differences of its Table 3.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pandas as pd
import pytest

from drpipe.errors import InputError
from drpipe.papers.numbers import (
    COLUMNS,
    _validate,
    load_paper_numbers,
    load_papers,
    paper_value,
)

EXPECTED_COUNTS = {
    ("dpr", "2"): 50,
    ("dpr", "3"): 27,
    ("dpr", "4"): 48,  # Table 4 (EM): all 12 rows, "-" cells left out
    ("dcsr", "2"): 36,
    ("dcsr", "3"): 10,
    ("dcsr", "4"): 24,
    ("dcsr", "5"): 12,
    ("dcsr", "6"): 24,
    ("dcsr", "7"): 36,
    ("dcsr", "8"): 16,
    ("xmoco", "2"): 90,
    ("xmoco", "3"): 4,
    ("xmoco", "4"): 25,  # Table 4 (EM): 5 rows x 5 datasets
    ("aopt", "1"): 6,
    ("aopt", "3"): 69,
    ("aopt", "4"): 16,  # Table 4 (EM): 8 rows x NQ and TriviaQA
}


@pytest.fixture(scope="module")
def numbers() -> pd.DataFrame:
    return load_paper_numbers()


def v(
    numbers: pd.DataFrame,
    paper: str,
    table: str,
    setting: str,
    method: str,
    dataset: str,
    metric: str,
):
    value = paper_value(
        numbers[numbers["paper"] == paper],
        table=table,
        setting=setting,
        method=method,
        dataset=dataset,
        metric=metric,
    )
    assert value is not None, (paper, table, setting, method, dataset, metric)
    return value


def test_counts_per_table(numbers):
    counts = numbers.groupby(["paper", "table"]).size().to_dict()
    assert counts == EXPECTED_COUNTS


def test_schema_and_citations(numbers):
    assert list(numbers.columns) == COLUMNS
    assert numbers["value"].dtype == float
    papers = load_papers()
    assert set(papers["paper"]) == {"dpr", "dcsr", "xmoco", "aopt"}
    assert "Karpukhin" in papers.set_index("paper").loc["dpr", "citation"]
    assert numbers["page_ref"].str.match(r"Table \d+: '").all()
    assert load_paper_numbers("xmoco")["paper"].eq("xmoco").all()
    with pytest.raises(ValueError, match="unknown paper"):
        load_paper_numbers("ance")


def test_dpr_table4_spot_checks(numbers):
    assert v(numbers, "dpr", "4", "None", "BM25", "squad", "em") == 38.1
    assert v(numbers, "dpr", "4", "Single", "DPR", "squad", "em") == 29.8
    assert v(numbers, "dpr", "4", "Single", "BM25+DPR", "nq", "em") == 39.0
    assert v(numbers, "dpr", "4", "Multi", "DPR", "trec", "em") == 49.4
    hard_em = numbers[(numbers["table"] == "4") & numbers["method"].str.startswith("HardEM")]
    assert sorted(hard_em["dataset"]) == ["nq", "triviaqa"]  # its "-" cells have no row


def test_xmoco_and_aopt_table4_spot_checks(numbers):
    # xMoCo Table 4 (Section 5.6.3): its BM25, its DPR re-implementation and xMoCo.
    assert v(numbers, "xmoco", "4", "None", "BM25", "squad", "em") == 39.2
    assert v(numbers, "xmoco", "4", "Single", "xMoCo", "squad", "em") == 30.1
    assert v(numbers, "xmoco", "4", "Single", "DPR", "nq", "em") == 42.1
    assert v(numbers, "xmoco", "4", "Multi", "xMoCo", "trec", "em") == 48.1
    assert v(numbers, "xmoco", "4", "Multi", "DPR", "squad", "em") == 24.0
    # AOpt Table 4 (Section 3.2.3): NQ and TriviaQA only.
    assert v(numbers, "aopt", "4", "unspecified", "DPR + AOpt(hybrid)", "nq", "em") == 47.2
    assert v(numbers, "aopt", "4", "unspecified", "GAR", "triviaqa", "em") == 62.7
    assert v(numbers, "aopt", "4", "None", "BM25", "triviaqa", "em") == 52.4
    t4 = numbers[(numbers["paper"] == "aopt") & (numbers["table"] == "4")]
    assert set(t4["dataset"]) == {"nq", "triviaqa"} and set(t4["metric"]) == {"em"}
    # AOpt's prose: "a maximum improvement of 5.7% when compared to ... DPR" on NQ, 4.3% on
    # TriviaQA: its best AOpt row minus DPR's row, as printed.
    for dataset, gain in (("nq", 5.7), ("triviaqa", 4.3)):
        aopt = t4[(t4["dataset"] == dataset) & t4["method"].str.contains("AOpt")]["value"].max()
        dpr = v(numbers, "aopt", "4", "unspecified", "DPR", dataset, "em")
        assert round(aopt - dpr, 1) == gain
        # AOpt copies DPR's own Table 4 BM25 and DPR rows.
        assert dpr == v(numbers, "dpr", "4", "Single", "DPR", dataset, "em")
        assert v(numbers, "aopt", "4", "None", "BM25", dataset, "em") == v(
            numbers, "dpr", "4", "None", "BM25", dataset, "em"
        )


def test_dpr_table2_spot_checks(numbers):
    assert v(numbers, "dpr", "2", "None", "BM25", "squad", "top20") == 68.8
    assert v(numbers, "dpr", "2", "None", "BM25", "squad", "top100") == 80.0
    assert v(numbers, "dpr", "2", "Single", "DPR", "squad", "top20") == 63.2
    assert v(numbers, "dpr", "2", "Single", "DPR", "squad", "top100") == 77.2
    assert v(numbers, "dpr", "2", "Single", "BM25+DPR", "squad", "top20") == 71.5
    assert v(numbers, "dpr", "2", "Single", "BM25+DPR", "squad", "top100") == 81.3
    # Quoted in DPR's prose: 78.4% vs. 59.1% top-20 on NQ; 75.0/89.1 Multi on WQ/TREC.
    assert v(numbers, "dpr", "2", "Single", "DPR", "nq", "top20") == 78.4
    assert v(numbers, "dpr", "2", "None", "BM25", "nq", "top20") == 59.1
    assert v(numbers, "dpr", "2", "Multi", "DPR", "wq", "top20") == 75.0
    assert v(numbers, "dpr", "2", "Multi", "DPR", "trec", "top20") == 89.1
    assert v(numbers, "dpr", "2", "Multi", "BM25+DPR", "trec", "top100") == 94.1
    t2 = numbers[(numbers["paper"] == "dpr") & (numbers["table"] == "2")]
    assert set(t2["split"]) == {"test"}
    assert set(t2["metric"]) == {"top20", "top100"}


def test_dpr_table3_spot_checks(numbers):
    row = "G.+BM25(1) #N=31+32 IB"
    assert v(numbers, "dpr", "3", "in-batch + BM25", row, "nq", "top5") == 65.0
    assert v(numbers, "dpr", "3", "in-batch + BM25", row, "nq", "top20") == 77.3
    assert v(numbers, "dpr", "3", "in-batch + BM25", row, "nq", "top100") == 84.4
    assert v(numbers, "dpr", "3", "1-of-N", "Random #N=7", "nq", "top5") == 47.0
    assert v(numbers, "dpr", "3", "in-batch", "Gold #N=127 IB", "nq", "top100") == 83.1
    t3 = numbers[(numbers["paper"] == "dpr") & (numbers["table"] == "3")]
    assert set(t3["split"]) == {"dev"} and set(t3["dataset"]) == {"nq"}
    assert t3["method"].nunique() == 9


def test_other_papers_spot_checks(numbers):
    assert v(numbers, "dcsr", "2", "Single", "DCSR", "squad", "top20") == 63.7
    assert v(numbers, "dcsr", "2", "Single", "DPR", "squad", "top100") == 71.0
    assert (
        v(
            numbers,
            "dcsr",
            "4",
            "Single, 1.05M subset",
            "DCSR + 1 in-passage & +1 BM25 random",
            "squad",
            "top100",
        )
        == 68.5
    )
    assert (
        v(numbers, "dcsr", "5", "Single, 1.05M subset", "DCSR (DCSR-hard)", "triviaqa", "top100")
        == 75.0
    )
    assert v(numbers, "dcsr", "6", "SQuAD-to-Trivia", "DCSR", "triviaqa", "top20") == 54.0
    assert v(numbers, "dcsr", "7", "corpus 0.10M", "DPR", "nq", "top20") == 25.5
    assert v(numbers, "xmoco", "2", "Single", "xMoCo", "nq", "top20") == 82.3
    assert v(numbers, "xmoco", "2", "Multi", "xMoCo+BM25", "squad", "top100") == 79.2
    assert v(numbers, "xmoco", "3", "Single", "xMoCo +tied encoders", "nq", "top20") == 75.4
    assert v(numbers, "aopt", "3", "unspecified", "DPR + AOpt(hybrid)", "nq", "top1") == 57.1
    assert v(numbers, "aopt", "1", "None", "BM25", "entityquestions", "top20") == 72.0
    assert v(numbers, "aopt", "3", "unspecified", "GAR", "triviaqa", "top5") == 73.1
    # Cells printed as "-" have no row.
    dash = numbers[(numbers["paper"] == "dcsr") & (numbers["method"] == "DPR (DPR-hard)")]
    assert set(dash["dataset"]) == {"nq"}


def _cells(numbers, paper, table, setting, method):
    sel = numbers[
        (numbers["paper"] == paper)
        & (numbers["table"] == table)
        & (numbers["setting"] == setting)
        & (numbers["method"] == method)
    ]
    return {(r.dataset, r.metric): r.value for r in sel.itertuples()}


def test_copied_rows_agree_with_dpr(numbers):
    for setting in ("Single", "Multi"):
        dpr = _cells(numbers, "dpr", "2", setting, "DPR")
        dcsr = _cells(numbers, "dcsr", "2", setting, "DPR")
        for cell, value in dcsr.items():
            if setting == "Single" and cell[0] == "squad":
                continue  # the † cells: DCSR's own rerun
            assert dpr[cell] == value, (setting, cell)
    aopt_to_dpr = {
        ("None", "BM25"): ("None", "BM25"),
        ("Single", "DPR"): ("Single", "DPR"),
        ("Multi", "DPR"): ("Multi", "DPR"),
        ("Single", "Hybrid"): ("Single", "BM25+DPR"),
        ("Multi", "Hybrid"): ("Multi", "BM25+DPR"),
    }
    for (s, m), (ds, dm) in aopt_to_dpr.items():
        aopt = _cells(numbers, "aopt", "3", s, m)
        dpr = _cells(numbers, "dpr", "2", ds, dm)
        assert aopt and all(dpr[c] == val for c, val in aopt.items()), (s, m)
    # DCSR Table 7 at 21M repeats Table 2 Single; its 1.05M DPR row is Table 4's DPR row.
    t7 = _cells(numbers, "dcsr", "7", "corpus 21.0M", "DPR")
    t2 = _cells(numbers, "dcsr", "2", "Single", "DPR")
    assert all(t2[c] == val for c, val in t7.items())
    t4 = _cells(numbers, "dcsr", "4", "Single, 1.05M subset", "DPR")
    t7 = _cells(numbers, "dcsr", "7", "corpus 1.05M", "DPR")
    assert all(t4[c] == val for c, val in t7.items())
    xm2 = _cells(numbers, "xmoco", "2", "Single", "xMoCo")
    xm3 = _cells(numbers, "xmoco", "3", "Single", "xMoCo")
    assert all(xm2[c] == val for c, val in xm3.items())


def test_printed_deltas_match_printed_values(numbers):
    checks = [("2", "Single"), ("2", "Multi")] + [
        ("7", f"corpus {s}") for s in ("0.10M", "1.05M", "21.0M")
    ]
    n = 0
    for table, setting in checks:
        dcsr = _cells(numbers, "dcsr", table, setting, "DCSR")
        dpr = _cells(numbers, "dcsr", table, setting, "DPR")
        for (dataset, metric), delta in dcsr.items():
            if metric.endswith("_delta"):
                base = metric.removesuffix("_delta")
                assert round(dcsr[(dataset, base)] - dpr[(dataset, base)], 1) == delta
                n += 1
    assert n == 12 + 12
    for setting in ("SQuAD-to-Trivia", "NQ-to-Trivia"):
        for method in ("DPR", "DCSR"):
            c = _cells(numbers, "dcsr", "6", setting, method)
            for k in ("top20", "top100"):
                drop = round(c[("triviaqa", f"{k}_in_domain")] - c[("triviaqa", k)], 1)
                assert drop == c[("triviaqa", f"{k}_drop")]


def test_aopt_prose_differences(numbers):
    def a(method, dataset, metric="top1", setting="unspecified"):
        return v(numbers, "aopt", "3", setting, method, dataset, metric)

    hybrid, query, passage = "DPR + AOpt(hybrid)", "DPR + AOpt(query)", "DPR + AOpt(passage)"
    claims = [
        (a(hybrid, "nq") - a("DPR*", "nq"), 11.4),
        (a("Weighted-based (beta=0.6, gamma=-0.1)", "nq") - a("DPR*", "nq"), 5.9),
        (a(hybrid, "nq") - a(query, "nq"), 4.2),
        (a(hybrid, "nq") - a(passage, "nq"), 5.8),
        (a(hybrid, "triviaqa") - a("DPR*", "triviaqa"), 12.1),
        (a(hybrid, "triviaqa") - a(query, "triviaqa"), 3.9),
        (a(hybrid, "triviaqa") - a(passage, "triviaqa"), 6.3),
        (a(query, "nq", "top5") - a(passage, "nq", "top5"), 3.0),
    ]
    for got, printed in claims:
        assert round(got, 1) == printed


def _papers_dir() -> Path:
    """The paper texts sit beside the data mirror (``../shared/papers``) unless PAPERS_DIR says."""
    repo = Path(__file__).resolve().parents[1]
    mirror = Path(os.environ.get("DATA_MIRROR", repo.parent / "shared" / "data"))
    return Path(os.environ.get("PAPERS_DIR", mirror.resolve().parent / "papers"))


def test_table_rows_appear_in_the_paper_text(numbers):
    """Each transcribed DPR/xMoCo row's numbers occur, in order, on one line of the paper text."""
    papers = _papers_dir()
    if not (papers / "dpr-karpukhin-2020.txt").is_file():
        pytest.skip(f"paper texts not found in {papers} (set PAPERS_DIR)")
    for paper, name in (("dpr", "dpr-karpukhin-2020.txt"), ("xmoco", "xmoco-yang-2021.txt")):
        lines = [
            " " + " ".join(re.findall(r"\d+\.\d", line)) + " "
            for line in (papers / name).read_text(encoding="utf-8").splitlines()
        ]
        sel = numbers[numbers["paper"] == paper]
        for (table, setting, method), group in sel.groupby(
            ["table", "setting", "method"], sort=False
        ):
            row = " " + " ".join(f"{x:.1f}" for x in group["value"]) + " "
            assert any(row in line for line in lines), (paper, table, setting, method, row)


def _frame(rows: list[list[str]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=COLUMNS, dtype=str)


def test_validation_rejects_duplicates_and_non_numbers():
    good = ["dpr", "2", "None", "BM25", "nq", "test", "top20", "59.1", "Table 2: 'x'", ""]
    assert _validate("x.csv", _frame([good]), "dpr")["value"].iloc[0] == 59.1
    with pytest.raises(InputError, match="duplicate"):
        _validate("x.csv", _frame([good, good[:7] + ["60.0"] + good[8:]]), "dpr")
    with pytest.raises(InputError, match="line 2: value 'n/a' is not a number"):
        _validate("x.csv", _frame([good[:7] + ["n/a"] + good[8:]]), "dpr")
    with pytest.raises(InputError, match="unknown dataset"):
        _validate("x.csv", _frame([good[:4] + ["msmarco"] + good[5:]]), "dpr")
