"""docs/adding-a-dataset.md and docs/adding-a-scale.md, followed as written in a copy of the
checkout (no code edit), checked on the resolved config and a dry run's plan."""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import yaml
from workflow_util import copy_checkout, planned_job_files

from drpipe.cli import main
from drpipe.config import load_workflow_config
from drpipe.tables import compare


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    return copy_checkout(tmp_path_factory.mktemp("guides") / "repo")


def test_adding_a_test_only_dataset_as_the_guide_says(checkout, tmp_path, data_mirror):
    # The dataset's file: 20 real questions of DPR's SQuAD test file, in its JSONL layout.
    lines = (data_mirror / "dpr" / "squad1-test.qa.jsonl").read_text().splitlines()[:20]
    (tmp_path / "mydata-test.qa.jsonl").write_text("\n".join(lines) + "\n")
    # 1. its entry in the catalogue, config/sources.yaml
    entry = {"mydata_test": {"url": None, "mirror": str(tmp_path / "mydata-test.qa.jsonl")}}
    with open(checkout / "config/sources.yaml", "a") as fh:
        fh.write("\n" + yaml.safe_dump(entry))
    # 2.-4. qa.mydata.test, tables.datasets and tables.single.mydata in a file of our own
    mine = {"qa": {"mydata": {"test": {"source": "mydata_test"}}},
            "tables": {"datasets": ["squad", "mydata"], "single": {"mydata": "squad"}}}  # fmt: skip
    cfg = load_workflow_config(checkout, {}, [_write(tmp_path / "mine.yaml", mine)])
    assert cfg["qa"]["mydata"]["test"] == {"source": "mydata_test", "format": "auto",
                                           "sample": None, "restrict_to_corpus": False}  # fmt: skip
    work = tmp_path / "work"
    work.mkdir()
    jobs = planned_job_files(work, "results/table2.csv", overlay=mine, repo=checkout)
    outputs = {o for j in jobs for o in j["output"]}
    assert "results/qa/mydata/test.parquet" in outputs
    assert {"results/metrics/dpr/squad/mydata-test.json",
            "results/metrics/bm25/none/mydata-test.json"} <= outputs  # fmt: skip
    [table2] = [j for j in jobs if j["rule"] == "table2"]
    assert "results/metrics/dpr/squad/mydata-test.json" in table2["input"]


def test_adding_a_scale_as_the_guide_says(checkout, tmp_path):
    (checkout / "config/scales/cluster.yaml").write_text(
        "extends: mini\nthreads: 1\nencode: {shards: 3}\ntables: {paper_diff: true}\n"
    )
    cfg = load_workflow_config(checkout, {"scale": "cluster"})
    assert (cfg["scale"], cfg["encode"]["shards"], cfg["threads"]) == ("cluster", 3, 1)
    assert compare.scale_cfg(cfg) == {"scale": "cluster", "paper_diff": True}
    out = io.StringIO()
    with redirect_stdout(out):
        args = ["config", "show", "--root", str(checkout), "--scale", "cluster", "--key", "encode"]
        assert main(args) == 0
    assert "  shards: 3  # config/scales/cluster.yaml" in out.getvalue().splitlines()
    work = tmp_path / "work"
    work.mkdir()
    jobs = planned_job_files(work, "results/table2.csv", overlay={"scale": "cluster"},
                             repo=checkout)  # fmt: skip
    shards = {o for j in jobs if j["rule"] == "encode" for o in j["output"]
              if o.startswith("results/embeddings/dpr/squad/shard-")}  # fmt: skip
    assert {Path(o).name.split(".")[0] for o in shards} == {"shard-0", "shard-1", "shard-2"}


def _write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path
