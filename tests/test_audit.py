"""The audit on a small real Snakemake run: metadata lineage, table cells, staleness, checksums,
and the comparison of two results folders (a synthetic three-rule workflow, so it is fast)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from drpipe.audit.compare import compare_runs
from drpipe.audit.filediff import TOLERANCE, compare_file
from drpipe.audit.lineage import Lineage
from drpipe.audit.metadata import read_metadata
from drpipe.audit.record import audit
from drpipe.audit.render import render_markdown
from drpipe.audit.staleness import parse_dry_run, staleness

SNAKEMAKE = Path(sys.executable).with_name("snakemake")

TOOL = textwrap.dedent(
    '''
    """Steps of the synthetic workflow: an input with a fetch record, metrics, a table."""
    import argparse, hashlib, json, sys
    import pandas as pd

    p = argparse.ArgumentParser()
    p.add_argument("step")
    p.add_argument("--out")
    p.add_argument("--record")
    p.add_argument("--input")
    p.add_argument("--run")
    p.add_argument("--pq")
    p.add_argument("--metrics", nargs="*")
    p.add_argument("--cfg", type=json.loads, default={})
    a = p.parse_args()
    if a.step == "fetch":
        data = ("one two three four " * a.cfg["words"]).encode()
        open(a.out, "wb").write(data)
        rec = {"name": "src", "file": a.out, "sha256": hashlib.sha256(data).hexdigest(),
               "bytes": len(data), "origin": {"kind": "mirror"}, "seconds": 0.01}
        json.dump(rec, open(a.record, "w"))
    elif a.step == "evaluate":
        n = len(open(a.input).read().split())
        top1 = round(100.0 * (len(a.run) + a.cfg["bonus"]) / n, 6)
        json.dump({"method": a.run, "train_set": "none", "dataset": "ds", "split": "test",
                   "n_questions": n, "top_k": {"1": top1, "20": 50.0 + top1}, "seconds": 0.2},
                  open(a.out, "w"))
        pd.DataFrame({"qid": ["q1", "q2"], "first_hit_rank": [1, None]}).to_parquet(a.pq)
    elif a.step == "table":
        rows = []
        for path in a.metrics:
            m = json.load(open(path))
            rows.append({"method": m["method"].upper(), "train_set": "",
                         "ds_top1": m["top_k"]["1"], "ds_top1_paper": 40.0,
                         "ds_top20": m["top_k"]["20"]})
        pd.DataFrame(rows).to_csv(a.out, index=False, float_format="%.2f")
    '''
)

SNAKEFILE = textwrap.dedent(
    """
    import json

    TOOL = workflow.source_path("tool.py")


    rule all:
        input:
            "results/table.csv",


    rule fetch:
        output:
            data="results/data/src/in.txt",
            record="results/data/records/src/in.txt.json",
        log:
            "results/logs/fetch/src/in.txt.log",
        benchmark:
            "results/benchmarks/rules/fetch/src/in.txt.tsv"
        params:
            cfg=json.dumps({"words": 3}),
            code="0123456789abcdef",
        shell:
            "python {TOOL} fetch --out {output.data} --record {output.record}"
            " --cfg '{params.cfg}' 2> {log}"


    rule evaluate:
        input:
            "results/data/src/in.txt",
        output:
            metrics="results/metrics/{run}/none/ds-test.json",
            pq="results/metrics/{run}/none/ds-test.per_question.parquet",
        log:
            "results/logs/evaluate/{run}/none/ds-test.log",
        benchmark:
            "results/benchmarks/rules/evaluate/{run}/none/ds-test.tsv"
        params:
            cfg=lambda w: json.dumps({"run": w.run, "bonus": config.get("bonus", 0)}),
            code="1111222233334444",
        shell:
            "python {TOOL} evaluate --input {input} --run {wildcards.run} --out {output.metrics}"
            " --pq {output.pq} --cfg '{params.cfg}' 2> {log}"


    rule table:
        input:
            expand("results/metrics/{run}/none/ds-test.json", run=["bm25", "dpr"]),
        output:
            "results/table.csv",
        log:
            "results/logs/tables/table.log",
        benchmark:
            "results/benchmarks/rules/tables/table.tsv"
        params:
            code="5555666677778888",
        shell:
            "python {TOOL} table --metrics {input} --out {output} --cfg '{{}}' 2> {log}"
    """
)


def _snakemake(work: Path, *args: str) -> None:
    cmd = [str(SNAKEMAKE), *args, "-s", str(work / "Snakefile"), "--directory", str(work)]
    cmd += ["--cores", "1", "--rerun-triggers", "mtime", "params", "input", "code"]
    env_path = f"{SNAKEMAKE.parent}:{__import__('os').environ['PATH']}"
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env={**__import__("os").environ, "PATH": env_path}
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def run_a(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("audit") / "a"
    work.mkdir()
    (work / "Snakefile").write_text(SNAKEFILE)
    (work / "tool.py").write_text(TOOL)
    _snakemake(work)
    return work


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


def _args(work: Path, *extra: str) -> list[str]:
    # The synthetic workflow is not the repository's: name its Snakefile and no profile.
    return ["-s", str(work / "Snakefile"), "--rerun-triggers", "mtime", "params", "input",
            "code", *extra]  # fmt: skip


def test_metadata_records_decode_to_output_paths(run_a):
    records = read_metadata(run_a)
    assert "results/table.csv" in records
    assert records["results/metrics/dpr/none/ds-test.json"]["rule"] == "evaluate"
    lineage = Lineage(run_a)
    job = lineage.job_of("results/metrics/dpr/none/ds-test.per_question.parquet")
    assert job.rule == "evaluate" and job.cfg == {"run": "dpr", "bonus": 0}
    assert job.code == "1111222233334444"
    assert lineage.leaves() == ["results/table.csv"]


def test_every_table_cell_traces_to_its_metrics_and_the_input_sha256(run_a):
    record = audit(run_a / "results", staleness_args=None)
    cells = [c for c in record["cells"] if c["table"] == "results/table.csv"]
    # Two rows x two metric columns; the _paper column is not a metric cell.
    assert {(c["label"], c["column"]) for c in cells} == {
        ("BM25", "ds_top1"), ("BM25", "ds_top20"), ("DPR", "ds_top1"), ("DPR", "ds_top20")
    }  # fmt: skip
    by = {(c["label"], c["column"]): c["metrics"] for c in cells}
    assert by[("DPR", "ds_top1")] == "results/metrics/dpr/none/ds-test.json"
    assert by[("BM25", "ds_top20")] == "results/metrics/bm25/none/ds-test.json"
    chain = record["lineage"]["results/metrics/dpr/none/ds-test.json"]
    assert [record["steps"][s]["rule"] for s in chain] == ["evaluate", "fetch"]
    fetch = record["steps"][chain[-1]]
    assert fetch["cfg"] == {"words": 3} and fetch["code"] == "0123456789abcdef"
    assert fetch["seconds"] is not None and fetch["seconds"] >= 0  # from the benchmark file
    assert "results/data/records/src/in.txt.json" in fetch["reports"]
    [inp] = record["inputs"]
    data = (run_a / "results/data/src/in.txt").read_bytes()
    assert inp["sha256"] == hashlib.sha256(data).hexdigest()
    assert record["checksum_mismatches"] == []
    assert set(record["runtime_by_rule"]) == {"fetch", "evaluate", "table"}
    text = render_markdown(record)
    assert "results/metrics/dpr/none/ds-test.json" in text and "evaluate ← fetch" in text


def test_nothing_stale_after_a_run(run_a):
    st = staleness(Lineage(run_a), _args(run_a))
    assert st["stale_jobs"] == [] and st["by_rule"] == {}
    assert st["targets"] == ["results/table.csv"]


def test_config_change_is_named_per_rule(run_a):
    st = staleness(Lineage(run_a), _args(run_a, "--config", "bonus=1"))
    assert st["by_rule"]["evaluate"]["jobs"] == 2
    assert st["by_rule"]["evaluate"]["config_changes"] == ["bonus: 0 -> 1"]
    assert "upstream reruns" in st["by_rule"]["table"]["reasons"]
    assert "fetch" not in st["by_rule"]


def test_changed_input_bytes_are_reported(run_a, tmp_path):
    work = _copy(run_a, tmp_path / "changed")
    data = work / "results/data/src/in.txt"
    data.write_bytes(data.read_bytes() + b"extra")
    record = audit(work / "results", staleness_args=_args(work))
    problems = {(m["file"], m["problem"]) for m in record["checksum_mismatches"]}
    assert ("results/data/src/in.txt", "changed") in problems  # against the fetch record
    # ... and Snakemake's own recorded checksum of the small input (taken by evaluate).
    assert any("evaluate" in m["by"] for m in record["checksum_mismatches"])
    assert "input newer than output" in record["staleness"]["by_rule"]["evaluate"]["reasons"]


def test_records_of_deleted_files_are_set_aside_and_a_moved_folder_is_named(run_a, tmp_path):
    # Snakemake keeps a deleted file's metadata record: the audit must not read the file.
    work = _copy(run_a, tmp_path / "pruned")
    (work / "results/table.csv").unlink()
    record = audit(work / "results", staleness_args=None)
    assert record["records_without_file"] == ["results/table.csv"]
    assert record["tables"] == {} and record["cells"] == []
    assert "1 Snakemake records name files that no longer exist" in render_markdown(record)
    # A renamed results folder keeps its records under the old name: a clear error.
    (work / "results").rename(work / "results.old")
    (work / "results").mkdir()
    with pytest.raises(SystemExit, match=r"results.old.*no Snakemake record names a file"):
        audit(work / "results.old", staleness_args=None)


def test_identical_copies_compare_identical(run_a, tmp_path):
    work = _copy(run_a, tmp_path / "b")
    cmp = compare_runs(run_a / "results", work / "results")
    assert set(cmp["file_status_counts"]) == {"identical"}
    table = cmp["tables"]["results/table.csv"]
    assert table["status_counts"] == {"identical": table["cells"]} and table["cells"] == 6


def test_float_noise_is_within_tolerance_and_timings_are_set_aside(run_a, tmp_path):
    work = _copy(run_a, tmp_path / "noise")
    path = work / "results/metrics/bm25/none/ds-test.json"
    m = json.loads(path.read_text())
    m["top_k"]["20"] += 1e-9
    m["seconds"] = 99.0
    path.write_text(json.dumps(m))
    cmp = compare_runs(run_a / "results", work / "results")
    status = {f["path"]: (f["status"], f["detail"]) for f in cmp["files"]}
    assert status["results/metrics/bm25/none/ds-test.json"][0] == "within_tolerance"
    m["top_k"]["20"] -= 1e-9
    path.write_text(json.dumps(m))
    cmp = compare_runs(run_a / "results", work / "results")
    status = {f["path"]: (f["status"], f["detail"]) for f in cmp["files"]}
    assert status["results/metrics/bm25/none/ds-test.json"] == (
        "equivalent",
        "differs only in seconds",
    )


def test_a_config_change_is_where_two_runs_diverge(run_a, tmp_path):
    work = _copy(run_a, tmp_path / "bonus")
    _snakemake(work, "--config", "bonus=2")
    cmp = compare_runs(run_a / "results", work / "results")
    status = {f["path"]: f["status"] for f in cmp["files"]}
    assert status["results/data/src/in.txt"] == "identical"
    assert status["results/metrics/dpr/none/ds-test.json"] == "different"
    where = cmp["divergence"]["results/table.csv"]
    assert where["lineage_diverges_at"]["rule"] == "evaluate"
    assert where["lineage_diverges_at"]["kind"] == "config"
    assert "bonus: 0 -> 2" in where["lineage_diverges_at"]["detail"]
    assert where["outputs_first_differ_at"]["rule"] == "evaluate"
    table = cmp["tables"]["results/table.csv"]
    diffs = {(d["row"], d["column"]) for d in table["differences"]}
    assert ("BM25", "ds_top1") in diffs and ("DPR", "ds_top20") in diffs
    assert ("DPR", "ds_top1_paper") not in diffs
    # The audit's own page says where and why.
    record = audit(run_a / "results", against=work / "results", staleness_args=None)
    assert "evaluate `results/metrics/bm25/none/ds-test.json`: config (bonus: 0 -> 2)" in (
        render_markdown(record)
    )


def test_parquet_and_npy_comparisons(tmp_path):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    frame = pd.DataFrame({"qid": ["1", "2"], "rank": [1, 2], "score": [0.5, 0.25]})
    frame.to_parquet(a)
    frame.assign(score=[0.5 + 1e-9, 0.25]).to_parquet(b)
    assert compare_file(a, b, TOLERANCE)[0] == "within_tolerance"
    frame.assign(rank=[2, 1]).to_parquet(b)
    assert compare_file(a, b, TOLERANCE)[0] == "different"
    import numpy as np

    np.save(tmp_path / "x.npy", np.ones((3, 2), dtype=np.float32))
    np.save(tmp_path / "y.npy", np.ones((3, 2), dtype=np.float32) + 1e-7)
    assert compare_file(tmp_path / "x.npy", tmp_path / "y.npy", TOLERANCE)[0] == (
        "within_tolerance"
    )
    np.save(tmp_path / "y.npy", np.ones((3, 2), dtype=np.float32) * 2)
    assert compare_file(tmp_path / "x.npy", tmp_path / "y.npy", TOLERANCE)[0] == "different"


def test_dry_run_parsing_explains_params_changes():
    text = textwrap.dedent(
        """
        [Sun Nov 22 12:16:47 2026]
        rule train:
            input: results/train/squad.jsonl.gz
            output: results/models/dpr/squad, results/models/dpr/squad.report.json
            jobid: 3
            reason: Params have changed since last execution: Union of exclusive params before and now across all output: before: '{"lr": 2e-05, "seed": 13}','abcdefabcdefabcd' now: '{"lr": 3e-05, "seed": 13}','1234123412341234' ; Input files updated by another job: results/train/squad.jsonl.gz
            resources: tmpdir=/tmp
        Shell command: drpipe train --cfg '{"lr": 3e-05, "seed": 13}'

        [Sun Nov 22 12:16:47 2026]
        localrule all:
            input: results/table2.csv
            jobid: 0
        """
    )
    [job] = parse_dry_run(text)
    assert job["rule"] == "train" and job["cfg"] == {"lr": 3e-05, "seed": 13}
    kinds = [r["kind"] for r in job["reasons"]]
    assert kinds == ["params changed", "upstream reruns"]
    params = job["reasons"][0]
    assert params["config"] == ["lr: 2e-05 -> 3e-05"]
    assert params["code"] == {"before": ["abcdefabcdefabcd"], "now": ["1234123412341234"]}


def _stamp(work: Path, precision: str, flags: list[str]) -> None:
    """Make the fetch step's record say it ran in ``precision`` on a CPU with ``flags``, as a
    training or encoding report does."""
    path = work / "results/data/records/src/in.txt.json"
    rec = json.loads(path.read_text())
    rec |= {"precision": precision, "environment": {"cpu": {"model": "X", "flags": flags}}}
    path.write_text(json.dumps(rec))


def test_cell_differences_are_attributed_to_precision_and_cpu_flags(run_a, tmp_path):
    a = _copy(run_a, tmp_path / "bf16")
    b = _copy(run_a, tmp_path / "fp32")
    _stamp(a, "bf16", ["avx2", "avx512_bf16"])
    _stamp(b, "fp32", ["avx2"])
    # The same run on the other machine: DPR's top-1 moves in the second decimal.
    path = b / "results/metrics/dpr/none/ds-test.json"
    m = json.loads(path.read_text())
    m["top_k"]["1"] += 0.13
    path.write_text(json.dumps(m))
    table = b / "results/table.csv"
    frame = pd.read_csv(table)
    frame.loc[frame["method"] == "DPR", "ds_top1"] += 0.13
    frame.to_csv(table, index=False, float_format="%.2f")
    cmp = compare_runs(a / "results", b / "results")
    cells = {(c["row"], c["column"]): c for c in cmp["tables"]["results/table.csv"]["differences"]}
    cell = cells[("DPR", "ds_top1")]
    assert cell["metrics"] == "results/metrics/dpr/none/ds-test.json"
    assert cell["environment_causes"] == [
        "precision differs: bf16 vs fp32 (fetch x1)",
        "CPU flags differ (only in a: avx512_bf16)",
    ]
    assert ("BM25", "ds_top1") not in cells
    text = render_markdown(audit(a / "results", against=b / "results", staleness_args=None))
    assert "precision differs: bf16 vs fp32 (fetch x1); CPU flags differ" in text
    assert "| results/table.csv | DPR | ds_top1 |" in text


def test_descriptive_text_columns_do_not_split_rows(tmp_path):
    from drpipe.audit.filediff import compare_tables

    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    pd.DataFrame({"method": ["DPR"], "top1": [51.08], "precision": ["training bf16"]}).to_csv(a)
    pd.DataFrame({"method": ["DPR"], "top1": [50.95], "precision": ["training fp32"]}).to_csv(b)
    cells = {c["column"]: c for c in compare_tables(a, b, TOLERANCE)}
    assert cells["precision"]["status"] == "different" and cells["top1"]["status"] == "different"
    assert cells["top1"]["index_a"] == 0 and cells["precision"]["row"].startswith("DPR")
