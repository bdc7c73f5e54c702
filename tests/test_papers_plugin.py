"""Papers are plug-ins: the registry is the folders of ``drpipe/papers``; a new folder is found
by the schema, the CLI, the claims and the tables with no edit elsewhere; a method that no
paper lists still gets its Table 2 rows, with no paper value and a note saying so."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml

from drpipe.claims import load_claims
from drpipe.cli import build_parser
from drpipe.config import read_defaults, resolve
from drpipe.papers import paper_names, paper_of_run, papers, row_order
from drpipe.papers.numbers import load_paper_numbers, load_papers
from drpipe.papers.table2 import table2, table2_markdown
from drpipe.tables.notes import setup_notes

REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "workflow" / "drpipe"


def metric(method, train_set, dataset="squad", split="dev", top=(30.0, 50.0, 70.0, 80.0)):
    return {
        "method": method,
        "train_set": train_set,
        "dataset": dataset,
        "split": split,
        "n_questions": 100,
        "top_k": {str(k): v for k, v in zip((1, 5, 20, 100), top, strict=True)},
    }


def test_the_registry_is_the_folders_listed_by_year():
    folders = sorted(p.name for p in (PKG / "papers").iterdir() if (p / "__init__.py").is_file())
    assert sorted(paper_names()) == folders == ["aopt", "dcsr", "dpr", "xmoco"]
    assert paper_names() == ["dpr", "xmoco", "dcsr", "aopt"]  # 2020, 2021, 2022, 2023
    assert list(load_papers()["paper"]) == paper_names()
    assert set(load_paper_numbers()["paper"]) == set(paper_names())
    # Which rows carry whose numbers: by the run's method, hybrids and variants included.
    assert paper_of_run("bm25") == paper_of_run("init") == paper_of_run("dpr.t3_gold_7") == "dpr"
    assert paper_of_run("xmoco+bm25") == "xmoco"
    assert paper_of_run("aopt-oracle-hybrid-r2") == "aopt"
    assert paper_of_run("mymethod") is None
    assert row_order()[:4] == ("BM25", "DPR init (no fine-tuning)", "DPR", "BM25+DPR")


def test_every_paper_brings_its_commands_claims_rules_and_schema():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert {"tables", "tables-xmoco", "tables-dcsr", "tables-aopt"} <= set(sub.choices)
    assert {"table2", "table3", "figure1"} <= set(sub.choices["tables"]._actions[-1].choices)
    claimed = {c["paper"] for c in load_claims()[1]}
    assert claimed == set(paper_names())
    for p in papers():
        assert p.file("rules.smk") and p.file("schema.yaml"), p.key
        assert p.commands == f"drpipe.papers.{p.key}.tables"
    # The shared schema holds no paper's block; the merged one has every paper's.
    shared = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
    assert "aopt" not in shared["properties"]
    assert not {"xmoco", "dcsr", "table3", "figure1"} & set(
        shared["properties"]["tables"]["properties"]
    )


def test_a_method_with_no_paper_gets_rows_without_paper_values():
    row_map = {
        "bm25": {"method": "BM25", "training": "None", "paper": "dpr"},
        "dpr": {"method": "DPR", "paper": "dpr"},
        "mymethod": {"method": "MyMethod", "paper": None},
        "mymethod+bm25": {"method": "BM25+MyMethod", "paper": None},
    }
    metrics = [metric(r, None if r == "bm25" else "squad", split="test") for r in row_map]
    setup = {"encoder": "tiny", "training": {"mymethod": {"epochs": 1, "batch_size": 4}}}
    frame = table2(metrics, "mini", row_map, setup=setup)
    rows = frame.set_index("method")
    assert rows.loc["DPR", "squad_top20_paper"] == 63.2  # DPR Table 2, SQuAD Single
    for label in ("MyMethod", "BM25+MyMethod"):
        assert rows.loc[label, [c for c in frame if c.endswith("_paper")]].isna().all()
        assert "paper" in rows.loc[label, "notes"].split("; ")
        assert "paper:" not in rows.loc[label, "source"]
    assert "paper" not in rows.loc["DPR", "notes"].split("; ")
    md = table2_markdown(frame, "mini", setup_notes(setup, "mini"))
    assert "**paper**: No paper of this workflow" in md


TOY_INIT = """
from drpipe.papers import Paper

PACKAGE_DATA = ("papers/toy/numbers.csv", "papers/toy/citation.csv")
PAPER = Paper(key="toy", label="Toy", year=2030)
"""
TOY_TABLES = """
import argparse

from drpipe.cliutil import need
from drpipe.tables.cli import add_table_command, command_group
from drpipe.tables.metrics import read_metrics
from drpipe.tables.output import write_csv
from drpipe.tables.rows import REPRODUCED, lookup
from drpipe.papers.numbers import load_paper_numbers


def _cmd(args: argparse.Namespace) -> int:
    numbers = load_paper_numbers("toy")
    rows = [
        {"method": m["method"], "top20": m["top_k"]["20"],
         "top20_paper": lookup(numbers, method=m["method"], metric="top20"),
         "scale": need(args.cfg, "scale"), "source": REPRODUCED}
        for m in read_metrics(args.metrics)
    ]
    write_csv(pd.DataFrame(rows), args.out)
    return 0


def register(sub):
    add_table_command(command_group(sub, "tables-toy", "Toy's table"), "table1", _cmd, "Toy T1")
"""
TOY_SCHEMA = """
properties:
  tables:
    properties:
      toy: {type: object, additionalProperties: false, properties: {dataset: {type: string}}}
"""
TOY_CLAIMS = """
claims:
  - id: toy_bm25_beats_dpr
    paper: toy
    source: Table 1
    sentence: "BM25 beats DPR."
    scope: {dataset: squad}
    a: {run: bm25}
    b: {method: dpr}
    metric: top20
    expect: greater
"""


def add_toy_paper(package: Path, rules: str | None = None) -> Path:
    """A throwaway paper folder in a copy of the package: one table over existing metrics."""
    folder = package / "papers" / "toy"
    folder.mkdir()
    (folder / "__init__.py").write_text(TOY_INIT)
    (folder / "tables.py").write_text(TOY_TABLES)
    (folder / "schema.yaml").write_text(TOY_SCHEMA)
    (folder / "claims.yaml").write_text(TOY_CLAIMS)
    (folder / "citation.csv").write_text(
        "paper,citation,venue,year,source_file\ntoy,A. Toy. A Toy Paper. 2030,Nowhere,2030,x\n"
    )
    (folder / "numbers.csv").write_text(
        "paper,table,setting,method,dataset,split,metric,value,page_ref,note\n"
        "toy,1,Single,dpr,squad,test,top20,50.0,Table 1,\n"
    )
    if rules is not None:
        (folder / "rules.smk").write_text(rules)
    return folder


def test_a_new_paper_folder_is_found_with_no_edit_elsewhere(tmp_path):
    package = tmp_path / "drpipe"
    shutil.copytree(PKG, package, ignore=shutil.ignore_patterns("__pycache__"))
    # beside the package as in the checkout: drpipe.runtime reads the schema's x-runtime marks
    shutil.copytree(PKG.parent / "schemas", tmp_path / "schemas")
    add_toy_paper(package)
    script = textwrap.dedent(
        f"""
        import json, yaml
        from drpipe.claims import load_claims
        from drpipe.cli import build_parser
        from drpipe.config import read_defaults, resolve
        from drpipe.papers import paper_names
        from drpipe.papers.numbers import load_paper_numbers
        raw = read_defaults({str(REPO)!r})
        raw["tables"]["toy"] = {{"dataset": "squad"}}
        schema = yaml.safe_load(open({str(REPO / "workflow/schemas/config.schema.yaml")!r}))
        cfg = resolve(raw, schema)
        sub = next(a for a in build_parser()._actions if a.dest == "command")
        print(json.dumps({{
            "papers": paper_names(),
            "numbers": len(load_paper_numbers("toy")),
            "config": cfg["tables"]["toy"],
            "commands": sorted(sub.choices),
            "claims": [c["id"] for c in load_claims()[1] if c["paper"] == "toy"],
        }}))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=False
    )
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    assert found["papers"] == ["dpr", "xmoco", "dcsr", "aopt", "toy"]
    assert found["numbers"] == 1
    assert found["config"] == {"dataset": "squad"}
    assert "tables-toy" in found["commands"]
    assert found["claims"] == ["toy_bm25_beats_dpr"]
    # Without the folder, its config key is unknown again: the schema block was the paper's.
    raw = read_defaults(REPO)
    raw["tables"]["toy"] = {"dataset": "squad"}
    schema = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
    try:
        resolve(raw, schema)
    except ValueError as exc:
        assert "tables.toy" in str(exc)
    else:
        raise AssertionError("tables.toy accepted without the toy paper")


def test_each_paper_table2_source_names_a_table_it_transcribed():
    numbers = load_paper_numbers()
    for p in papers():
        for source in p.table2:
            mine = numbers[(numbers["paper"] == p.key) & (numbers["table"] == source.table)]
            assert not mine.empty, (p.key, source.table)
            assert source.cite.endswith(f"Table {source.table}"), source
