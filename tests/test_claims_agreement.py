"""``drpipe claims-agreement``: two runs' claims tables paired by claim id."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from workflow_util import REPO

from drpipe.claims import COLUMNS
from drpipe.claims.agreement import agreement, read_claims, render
from drpipe.cli import main
from drpipe.errors import InputError


def _table(path: Path, rows: list[tuple]) -> Path:
    frame = pd.DataFrame(
        [{"id": i, "verdict": v, "diff": d, "ci_low": lo, "ci_high": hi, "p_holm": p}
         for i, v, d, lo, hi, p in rows],
        columns=COLUMNS,
    )  # fmt: skip
    frame.to_csv(path, index=False)
    return path


def test_verdicts_pair_by_claim_and_agreement_is_named(tmp_path):
    nan = float("nan")
    a = _table(tmp_path / "a.csv", [
        ("c1", "holds", 1.5, 0.5, 2.5, 0.01),
        ("c2", "not significant", 0.2, -0.1, 0.5, 0.6),
        ("c3", "holds", 2.0, 1.0, 3.0, 0.01),
        ("c4", "not tested", nan, nan, nan, nan),
    ])  # fmt: skip
    b = _table(tmp_path / "b.csv", [
        ("c1", "holds", 6.0, 5.0, 7.0, 0.002),
        ("c2", "holds", 1.1, 0.7, 1.4, 0.002),
        ("c3", "not tested", nan, nan, nan, nan),
        ("c4", "not tested", nan, nan, nan, nan),
        ("c5", "reversed", -3.0, -4.0, -2.0, 0.002),  # a newer claim the older run lacks
    ])  # fmt: skip
    frame = agreement({"mini": read_claims(a), "squad": read_claims(b)})
    got = dict(zip(frame["id"], frame["agreement"], strict=True))
    assert got == {"c1": "agree", "c2": "differ", "c3": "not comparable", "c4": "not tested",
                   "c5": "not comparable"}  # fmt: skip
    row = frame.set_index("id").loc["c1"]
    assert (row["mini_diff"], row["mini_ci"], row["squad_verdict"]) == (1.5, "[+0.50, +2.50]",
                                                                        "holds")  # fmt: skip
    assert frame.set_index("id").loc["c5", "mini_verdict"] == "not tested"
    page = render(frame, ["mini", "squad"])
    assert "| c2 | not significant (+0.20 [-0.10, +0.50]; Holm p 0.6) | holds" in page
    assert page.rstrip().endswith("agree: 1, differ: 1, not comparable: 2, not tested: 1")


def test_bad_tables_are_named(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("id,verdict\nc1,holds\n")
    with pytest.raises(InputError, match="bad.csv.*no columns"):
        read_claims(bad)
    dup = _table(tmp_path / "dup.csv", [("c1", "holds", 1, 0, 2, 0.1)] * 2)
    with pytest.raises(InputError, match="dup.csv.*c1.*more than once"):
        read_claims(dup)
    with pytest.raises(SystemExit, match="at least two"):
        main(["claims-agreement", f"a={bad}"])
    # a bad table given to the command: status 2 and the file named (drpipe's bad-input path)
    assert main(["claims-agreement", f"a={dup}", f"b={bad}"]) == 2


def test_cli_on_the_committed_mini_and_squad_claims(tmp_path, capsys):
    # The evidence README cites: every claim of the two committed runs is paired.
    mini, squad = REPO / "docs/claims-mini.csv", REPO / "docs/claims-squad.csv"
    assert main(["claims-agreement", f"mini={mini}", f"squad={squad}",
                 "--out", str(tmp_path / "a.csv"), "--markdown", str(tmp_path / "a.md"),
                 "--plot", str(tmp_path / "forest.png")]) == 0  # fmt: skip
    assert (tmp_path / "forest.png").read_bytes()[:4] == b"\x89PNG"
    out = pd.read_csv(tmp_path / "a.csv")
    assert set(out["id"]) == set(pd.read_csv(mini)["id"]) | set(pd.read_csv(squad)["id"])
    assert set(out["agreement"]) <= {"agree", "differ", "not comparable", "not tested"}
    assert (tmp_path / "a.md").read_text() == capsys.readouterr().out


def test_forest_plot_draws_every_tested_claim(tmp_path):
    from drpipe.claims.forest import plot_forest

    tables = {k: read_claims(REPO / f"docs/claims-{k}.csv") for k in ("mini", "squad")}
    tested = {i for t in tables.values() for i in t.index[t["diff"].notna()]}
    assert plot_forest(tables, tmp_path / "f.png") == len(tested) > 0
