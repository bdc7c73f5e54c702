"""`make verify`: a run's tables against the committed reference of its scale and precision."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from drpipe import cli
from drpipe.errors import InputError
from drpipe.verify import precision_path, verify, write_reference

REPO = Path(__file__).resolve().parents[1]
CPU = {"cpu_model": "AMD EPYC", "cpu_flags": ["avx2", "avx512_bf16", "avx512f"]}


def results_folder(
    root: Path, *, precision="training bf16, encoding bf16", cpu=CPU, top20=94.59, threads=2
):
    root.mkdir(parents=True)
    rows = [
        {"scale": "mini", "training": "None", "method": "BM25", "protocol": "standard",
         "train_set": "none", "squad_top20": 96.52, "squad_mrr100": 83.06, "precision": None},
        {"scale": "mini", "training": "Single", "method": "DPR", "protocol": "standard",
         "train_set": "squad", "squad_top20": top20, "squad_top20_paper": 63.2,
         "squad_mrr100": 64.91, "precision": precision},
    ]  # fmt: skip
    pd.DataFrame(rows).to_csv(root / "table2.csv", index=False, float_format="%.2f")
    record = {"scale": "mini", "hardware": {**cpu, "cuda_devices": []},
              "code": {"commit": "abc"},
              "step_reports": {"results/models/dpr/squad.report.json": {"threads": threads},
                               "results/embeddings/dpr/squad/shard-0.report.json": {}}}  # fmt: skip
    (root / "provenance.json").write_text(json.dumps(record))
    return root


def test_precision_path_from_the_table2_notes():
    frame = pd.DataFrame({"precision": [None, "training bf16, encoding bf16"]})
    assert precision_path(frame) == "bf16"
    assert precision_path(pd.DataFrame({"precision": [None, None]})) == "fp32"
    assert precision_path(pd.DataFrame({"precision": ["encoding int8", "training bf16"]})) == (
        "bf16+int8"
    )


def test_verify_passes_on_its_reference_and_names_a_changed_cell(tmp_path, capsys):
    ref_root = tmp_path / "reference"
    where = write_reference(results_folder(tmp_path / "made"), ref_root, "make run")
    assert where == ref_root / "mini" / "bf16"
    assert json.loads((where / "reference.json").read_text())["precision_path"] == "bf16"

    passed, cells, summary = verify(results_folder(tmp_path / "same"), ref_root)
    assert passed and summary["same"] == len(cells) == 4 and summary["tolerance"] == 0.0

    # One value changed by hand: the command fails and names the cell.
    changed = results_folder(tmp_path / "changed", top20=94.6)
    code = cli.main(["verify", "--results", str(changed), "--reference", str(ref_root)])
    out = capsys.readouterr().out
    assert code == 1 and out.startswith("FAIL")
    assert "| table2.csv | Single / DPR / standard / squad | squad_top20 | 94.60 | 94.59 | 0.01 |" \
        " differs |" in out  # fmt: skip

    # Another CPU kind on the same path: within the reference's tolerance.
    other = results_folder(tmp_path / "other", cpu={"cpu_model": "Intel", "cpu_flags": ["amx"]},
                           top20=94.62)  # fmt: skip
    passed, cells, summary = verify(other, ref_root)
    assert passed and summary["within"] == 1 and summary["tolerance"] == 0.5
    assert not verify(other, ref_root, tolerance=0.01)[0]

    # The same CPU kind, trained at another thread count (config threads): a sum splits by
    # thread count, so the reference's tolerance applies, and the summary says why.
    assert json.loads((where / "reference.json").read_text())["threads"] == [2]
    one = results_folder(tmp_path / "one-thread", top20=94.60, threads=1)
    passed, cells, summary = verify(one, ref_root)
    assert passed and summary["within"] == 1 and not summary["same_threads"]
    code = cli.main(["verify", "--results", str(one), "--reference", str(ref_root)])
    assert code == 0 and "the same CPU kind, other training threads" in capsys.readouterr().out


def test_a_reference_table_the_run_has_not_made_is_named_not_failed(tmp_path, capsys):
    """`make verify` right after `make run`: Table 4 (a target of its own) is in the bf16
    reference but not yet in the run; Table 2 is compared, Table 4 named as not made. Once
    made, its cells are compared like Table 2's."""
    ref_root = tmp_path / "reference"
    made = results_folder(tmp_path / "made")
    table4 = pd.DataFrame([{"training": "Single", "method": "DPR", "protocol": "standard",
                            "train_set": "squad", "squad_em": 9.0}])  # fmt: skip
    table4.to_csv(made / "table4.csv", index=False)
    write_reference(made, ref_root, "make run")
    run = results_folder(tmp_path / "run")
    passed, cells, summary = verify(run, ref_root)
    assert passed and summary["not_made"] == ["table4.csv"]
    assert {c["table"] for c in cells} == {"table2.csv"} and summary["same"] == len(cells) == 4
    code = cli.main(["verify", "--results", str(run), "--reference", str(ref_root)])
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("PASS")
    assert "table4.csv: not made by this run (its target: results/table4.csv)" in out
    table4.assign(squad_em=9.2).to_csv(run / "table4.csv", index=False)
    passed, cells, summary = verify(run, ref_root)
    assert not passed and summary["not_made"] == [] and summary["differs"] == 1


def test_verify_fails_on_a_missing_row_and_without_a_reference(tmp_path):
    ref_root = tmp_path / "reference"
    write_reference(results_folder(tmp_path / "made"), ref_root, "make run")
    fewer = results_folder(tmp_path / "fewer")
    frame = pd.read_csv(fewer / "table2.csv")
    frame.iloc[1:].to_csv(fewer / "table2.csv", index=False)
    passed, cells, _ = verify(fewer, ref_root)
    assert not passed and {c["verdict"] for c in cells if "BM25" in c["row"]} == {"missing"}
    fp32 = results_folder(tmp_path / "fp32", precision=None)
    with pytest.raises(InputError, match=r"no reference for scale 'mini' on the fp32 path "
                       r"\(references: mini/bf16\)"):  # fmt: skip
        verify(fp32, ref_root)


def test_the_committed_references_say_how_they_were_made():
    metas = sorted((REPO / "docs" / "reference").glob("*/*/reference.json"))
    assert metas, "no committed reference under docs/reference"
    for meta in metas:
        info = json.loads(meta.read_text())
        assert {"scale", "precision_path", "cpu_model", "cpu_flags", "commit", "command"} <= set(
            info
        )
        assert (
            meta.parent.name == info["precision_path"] and meta.parent.parent.name == info["scale"]
        )
        table2 = pd.read_csv(meta.parent / "table2.csv")
        assert precision_path(table2) == info["precision_path"]


def test_readme_quotes_the_reference_figures():
    """Every figure README.md quotes (its Table 2 excerpt and its current-figures table, mini
    and squad) is the committed bf16 reference's cell of its scale
    (docs/reference/<scale>/bf16/table2.csv): the README shows the runs of a CPU with
    AVX512-BF16, and says so in its notes."""
    text = (REPO / "README.md").read_text()
    ref = reference_rows("mini")
    squad = reference_rows("squad")
    checked = 0
    # The excerpt: | training | method | squad (test, n=...) | top1 | top5 | top20 | paper | rank
    # | top100 | paper | mrr100 | notes |
    for line in re.findall(r"^\| (?:None|Single) \| [^|]+ \| squad \(test.*$", text, re.M):
        cells = [c.strip() for c in line.strip("|").split("|")]
        row = ref.loc[(cells[1], "standard")]
        ours = [cells[3], cells[4], cells[5], cells[8], cells[10]]
        cols = ["squad_top1", "squad_top5", "squad_top20", "squad_top100", "squad_mrr100"]
        assert [float(v) for v in ours] == [row[c] for c in cols], cells[1]
        paper = row["squad_top20_paper"]
        assert (float(cells[6]) if cells[6] else None) == (None if pd.isna(paper) else paper)
        checked += 1
    # Current figures: | row | top-1 / top-20 / top-100 at mini | squad | paper |
    section = current_figures(text)
    three = r"([\d.]+ / [\d.]+ / [\d.]+)"
    for method, mini, at_squad in re.findall(
        rf"^\| ([^|]+?) \| {three} \| {three} \|", section, re.M
    ):
        for scale, cells, rows in (("mini", mini, ref), ("squad", at_squad, squad)):
            row = rows.loc[(method, "standard")]
            assert [float(v) for v in cells.split(" / ")] == [
                row["squad_top1"], row["squad_top20"], row["squad_top100"]
            ], (method, scale)  # fmt: skip
            checked += 1
    assert checked >= 16, checked


def current_figures(page: str) -> str:
    """A page's "Current figures" section, up to the next heading of its level."""
    return page.split("## Current figures", 1)[1].split("\n## ", 1)[0]


def reference_rows(scale: str) -> pd.DataFrame:
    """The committed bf16 reference's Table 2 of a scale, by (method, protocol)."""
    ref = pd.read_csv(REPO / "docs" / "reference" / scale / "bf16" / "table2.csv",
                      keep_default_na=False, na_values=[""])  # fmt: skip
    return ref.set_index(["method", "protocol"])


def test_results_page_quotes_the_reference_figures():
    """docs/results.md's current figures (top-1 / 5 / 20 / 100 at mini and at squad) are the
    committed bf16 references' cells, row by row, the oracle rows included."""
    section = current_figures((REPO / "docs" / "results.md").read_text())
    four = r"([\d.]+ / [\d.]+ / [\d.]+ / [\d.]+)"
    refs = {"mini": reference_rows("mini"), "squad": reference_rows("squad")}
    checked = 0
    for label, mini, at_squad in re.findall(rf"^\| ([^|]+?) \| {four} \| {four}", section, re.M):
        if label.startswith("DPR init"):
            label = "DPR init (no fine-tuning)"
        method, _, protocol = label.replace("**", "").partition(", ")
        protocol = ("uses the test answers (oracle)" if protocol.startswith("oracle")
                    else protocol or "standard")  # fmt: skip
        for scale, cells in (("mini", mini), ("squad", at_squad)):
            row = refs[scale].loc[(method, protocol)]
            cols = ["squad_top1", "squad_top5", "squad_top20", "squad_top100"]
            assert [float(v) for v in cells.split(" / ")] == [row[c] for c in cols], (label, scale)
            checked += 1
    assert checked == 2 * 13, checked
