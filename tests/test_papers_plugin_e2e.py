"""Plug-ins on the shared tiny run (the session fixture ``tiny_run``), as a new user adds them:

- a method with no paper (a DPR subclass under a new name, its config block and
  ``tables.methods``): the Table 2 target plans only that method's jobs and the table, and
  Table 2 gives its rows without paper values, noted;
- a throwaway paper folder with one table over existing metrics: found with no edit
  elsewhere, its target plans only its own job, adding it reruns nothing and removing it
  plans nothing.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
from test_papers_plugin import add_toy_paper
from tiny_run import OVERLAY, RAW
from workflow_util import copy_checkout, planned_jobs, snakemake

# The default target and DPR's extra tables of the tiny run (test_workflow_e2e.TARGETS).
TARGETS = ("all", "results/dpr/table3.csv", "results/dpr/figure1.png")
DRPIPE = Path(sys.executable).with_name("drpipe")

NEW_METHOD = '''"""A throwaway method: DPR under another name, with no paper of its own."""

from drpipe.methods.dpr import DPR


class MyMethod(DPR):
    name = "mymethod"
    label = "MyMethod"


METHOD = MyMethod
'''

TOY_RULES = """
rule toy_table1:
    input:
        [
            metrics_file(run, ts, "squad", C["tables"]["split"])
            for run, ts in (("bm25", "none"), ("dpr", C["tables"]["single"]["squad"]))
        ],
    output:
        "results/toy/table1.csv",
    log:
        "results/logs/tables/toy_table1.log",
    benchmark:
        "results/benchmarks/rules/tables/toy_table1.tsv"
    params:
        cfg=cfg_json({"scale": SCALE}),
        code=code("drpipe.papers.toy.tables"),
    shell:
        "drpipe tables-toy table1 --metrics {input:q} --out {output:q} --cfg {params.cfg:q}"
        " 2> {log:q}"
"""


def _with_new_method(overlay: dict) -> dict:
    """The overlay plus a block for the new method and its name in tables.methods."""
    methods = overlay["tables"].get("methods", RAW["tables"]["methods"])
    return {
        **overlay,
        "methods": {**overlay.get("methods", {}), "mymethod": {"epochs": 1, "batch_size": 8}},
        "tables": {**overlay["tables"], "methods": [*methods, "mymethod"]},
    }


def test_a_method_without_a_paper_reaches_table2_with_no_paper_values(tiny_run, tmp_path):
    repo = copy_checkout(tmp_path / "repo")
    (repo / "workflow/drpipe/methods/mymethod.py").write_text(NEW_METHOD)
    overlay = _with_new_method(OVERLAY)
    jobs = planned_jobs(tiny_run, "results/table2.csv", overlay=overlay, repo=repo)
    # Only the new method's own jobs (training, encoding, retrieval, its hybrid) and the table.
    others = {(r, o) for r, o in jobs if r != "table2" and "mymethod" not in o}
    assert not others, others
    assert ("table2", "results/table2.csv") in jobs
    assert {r for r, _ in jobs} >= {"train", "encode", "retrieve", "hybrid", "evaluate"}

    # Table 2 with the rule's own command and cfg, over the tiny run's metrics, with the new
    # method's metrics stood in by copies of DPR's (its rows only need to exist).
    proc = snakemake(
        tiny_run, "-n", "-p", "--forcerun", "table2", "results/table2.csv",
        overlay=overlay, repo=repo,
    )  # fmt: skip
    command = next(
        line for line in (proc.stdout + proc.stderr).splitlines() if "drpipe tables table2 " in line
    )
    argv = shlex.split(command.split("2>")[0].strip())
    cfg = json.loads(argv[argv.index("--cfg") + 1])
    assert cfg["row_map"]["mymethod"]["paper"] is None
    assert cfg["row_map"]["dpr"]["paper"] == "dpr"
    # The stand-in metrics below have no encoding reports to read a precision from.
    cfg.pop("precision", None)
    metrics = []
    start = argv.index("--metrics") + 1
    end = next(i for i in range(start, len(argv)) if argv[i].startswith("--"))
    for path in argv[start:end]:
        src = tiny_run / path
        if not src.exists():
            stand_in = Path(re.sub(r"/mymethod(\+bm25)?/", r"/dpr\1/", str(src)))
            record = json.loads(stand_in.read_text())
            record["method"] = record["method"].replace("dpr", "mymethod")
            src = tmp_path / path
            src.parent.mkdir(parents=True, exist_ok=True)
            src.write_text(json.dumps(record))
        metrics.append(str(src))
    out = tmp_path / "table2.csv"
    subprocess.run(
        [str(DRPIPE), "tables", "table2", "--metrics", *metrics, "--out", str(out),
         "--md", str(tmp_path / "table2.md"), "--cfg", json.dumps(cfg)],
        check=True, env={**os.environ, "PYTHONPATH": str(repo / "workflow")},
    )  # fmt: skip
    rows = pd.read_csv(out).set_index("method")
    for label in ("MyMethod", "BM25+MyMethod"):
        paper_cols = [c for c in rows.columns if c.endswith("_paper")]
        assert rows.loc[label, paper_cols].isna().all(), label
        assert "paper" in rows.loc[label, "notes"].split("; ")
    assert rows.loc["DPR", "squad_top20_paper"] == 63.2
    assert "**paper**: No paper of this workflow" in (tmp_path / "table2.md").read_text()


def test_a_throwaway_paper_plans_only_its_job_and_removing_it_plans_nothing(tiny_run, tmp_path):
    repo = copy_checkout(tmp_path / "repo")
    folder = add_toy_paper(repo / "workflow" / "drpipe", rules=TOY_RULES)
    (folder / "claims.yaml").unlink()  # claims would (rightly) rerun the claims table
    # Found with no edit elsewhere: its target plans its one job over existing metrics.
    jobs = planned_jobs(tiny_run, "results/toy/table1.csv", overlay=OVERLAY, repo=repo)
    assert jobs == {("toy_table1", "results/toy/table1.csv")}
    # Adding it reruns nothing else; removing it again plans nothing.
    assert planned_jobs(tiny_run, *TARGETS, overlay=OVERLAY, repo=repo) == set()
    shutil.rmtree(folder)
    assert planned_jobs(tiny_run, *TARGETS, overlay=OVERLAY, repo=repo) == set()
