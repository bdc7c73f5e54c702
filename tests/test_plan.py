"""The workflow's plan as Python (drpipe.plan): built from a resolved config without Snakemake,
so planning questions are answered in milliseconds. The Snakemake dry runs that check the same
plan end to end are in test_workflow_config.py and the papers' workflow tests."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest
from workflow_util import REPO, mirror_dir

from drpipe.config import ConfigError, load_workflow_config
from drpipe.plan import build_plan, exports, plan_class, targets
from drpipe.plan.base import PlanBase

SCALES = ("mini", "squad", "paper", "rehearsal")


def plan_of(scale: str = "mini", **overrides):
    """The plan of a scale, with ``--config``-style overrides (nested dicts merge)."""
    config = load_workflow_config(REPO, {"scale": scale, **overrides})
    return build_plan(config, mirror=str(mirror_dir()))


@pytest.fixture(scope="module")
def paper_plan():
    """One paper-scale plan shared by the tests that read it."""
    return plan_of("paper")


def test_the_plan_imports_without_snakemake():
    code = (
        "import sys, drpipe.plan, drpipe.papers.dpr.plan;"
        "bad = [m for m in sys.modules if m.split('.')[0] == 'snakemake'];"
        "assert not bad, bad"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("scale", SCALES)
def test_every_scale_plans_its_tables(scale):
    plan = plan_of(scale)
    rows = plan.table2_runs()
    assert rows and all(len(r) == 5 for r in rows)
    assert ("bm25", "none") in {(r, ts) for r, ts, *_ in rows}
    assert plan.table4_rows() and set(plan.table4_rows()) <= {r[:3] for r in rows}
    assert plan.step_reports() == sorted(set(plan.step_reports()))
    # Every paper contributes its tables and figures, in the papers' order.
    assert targets(plan)[:2] == ["results/dpr/table3.csv", "results/dpr/figure1.png"]
    assert "results/aopt/table3.csv" in targets(plan)


def test_the_plan_is_composed_of_each_papers_parts():
    mro = [c.__name__ for c in plan_class().__mro__]
    assert mro.index("DprPlan") < mro.index("AoptPlan") < mro.index("StepsPlan")
    assert mro[-2:] == ["PlanBase", "object"]
    # AOpt's rows reach the shared Table 2 through its hook, and its runs' reports too.
    plan = plan_of("mini")
    aopt_rows = [r for r in plan.table2_runs() if r[0].startswith("aopt-")]
    hooks = [h.__func__.__qualname__.split(".")[0] for h in plan.hooks("table2_hook")]
    # Zero-shot and external rows come from drpipe.plan's own parts.
    assert aopt_rows and hooks == ["AoptPlan", "ExternalRunsPlan", "ZeroShotPlan"]
    row_map = plan.table2_row_map()
    protocols = {row_map[r[0]]["protocol"] for r in aopt_rows}
    assert protocols == set(plan.AOPT_PROTOCOLS.values())
    run, ts, dataset = aopt_rows[0][:3]
    assert plan.precision_sources(run, ts, dataset, "test")["corpus"].startswith(
        f"results/embeddings/{plan.AOPT['base']}/"
    )


def test_exports_are_what_the_rules_read():
    plan = plan_of("mini")
    names = exports(plan)
    for name in ("C", "RUN", "DENSE", "SCALE", "source_file", "table2_runs", "train_cfg",
                 "aopt_passage_inputs", "dcsr_cells", "xmoco_inputs", "table3_cfg"):  # fmt: skip
        assert name in names, name
    assert not {"check", "hooks", "targets", "workdir"} & set(names)
    assert names["source_file"].__self__ is plan


def test_gpus_follow_the_resources_key_not_the_scale_name(paper_plan):
    assert paper_plan.gpus(8) == 8 and paper_plan.env_file(gpu=True) == "envs/gpu.yaml"
    assert paper_plan.env_file(gpu=False) == "envs/cpu.yaml"
    for scale in ("mini", "rehearsal"):
        plan = plan_of(scale)
        assert plan.gpus(8) == 0 and plan.env_file(gpu=True) == "envs/cpu.yaml"
    # A GPU run of a local scale: one key, no code.
    on_gpu = plan_of("squad", resources={"gpus": True})
    assert on_gpu.gpus(1) == 1 and on_gpu.env_file(gpu=True) == "envs/gpu.yaml"


def test_the_paper_scale_plan(paper_plan):
    c = paper_plan.C
    rows = paper_plan.table2_runs()
    trained = {(r, ts) for r, ts, *_ in rows if r in c["tables"]["methods"]}
    # Each method on the five Single train sets and the Multi one.
    assert len(trained) == len(c["tables"]["methods"]) * 6
    assert any(r == "dpr.released" for r, *_ in rows)
    assert len(paper_plan.shard_files("dpr", "multi")) == c["encode"]["shards"] == 50
    # DPR's released training files: nothing is mined; checkpoints select on the dev files.
    for dataset in ("nq", "triviaqa", "wq", "trec", "squad"):
        assert not paper_plan.train_examples_file(dataset).startswith("results/train/")
    assert paper_plan.val_set_files("multi")
    assert paper_plan.index_file(SimpleNamespace(run="dpr", train_set="multi")).endswith(
        "hnsw.faiss"
    )


def test_a_tuned_weight_without_held_out_questions_stops_the_plan():
    """At paper scale every train set selects its checkpoint on DPR's dev files and holds no
    training question out: a tuned weight has nothing to tune on, and the plan says so."""
    with pytest.raises(ConfigError, match="hybrid.lambda 'tune'.*dev_examples"):
        plan_of("paper", hybrid={"lambda": "tune"})


def test_a_multi_dataset_model_tunes_its_weight_on_each_datasets_training_questions():
    plan = plan_of(
        "mini",
        qa={"trec": {"train": {"format": "curatedtrec-tsv", "source": "trec_train",
                               "sample": 50, "restrict_to_corpus": False, "match": "regex"}}},
        sources={"trec_train": {"mirror": "curatedtrec/large2180-train.tsv"}},
        train_sets={"squad": ["squad"], "multi": ["squad", "trec"]},
        tables={"multi": "multi", "methods": ["dpr"]},
    )  # fmt: skip
    assert plan.C["hybrid"]["lambda"] == "tune"
    inputs = plan.hybrid_tuning_inputs(SimpleNamespace(run="dpr", train_set="multi"))
    assert inputs["tune_questions"] == ["results/qa/squad/train.parquet",
                                        "results/qa/trec/train.parquet"]  # fmt: skip
    assert inputs["tune_report"] == "results/models/dpr/multi.report.json"
    assert not any("test" in f for files in inputs.values() for f in [files] if isinstance(f, str))
    single = plan.hybrid_tuning_inputs(SimpleNamespace(run="dpr", train_set="squad"))
    assert single["tune_questions"] == ["results/qa/squad/train.parquet"]
    # The regex-matched dataset's file says how its answers match (DCSR's positives use it).
    cfg = plan.train_cfg(SimpleNamespace(run="dpr", train_set="multi"))
    assert '"answer_match"' in cfg and '"regex"' in cfg


def test_aopt_checks_its_config_at_start():
    with pytest.raises(ConfigError, match="aopt.depth"):
        plan_of("mini", aopt={"depth": plan_of("mini").C["retrieve"]["top_k"] + 1})


def test_an_unknown_standin_source_is_an_error():
    with pytest.raises(ConfigError, match="standins.sources.nope"):
        plan_of("rehearsal", standins={"sources": {"nope": {"kind": "x", "inputs": {}}}})


def test_dpr_table3_and_figure1_read_their_variants():
    plan = plan_of("mini")
    cfg = plan.table3_cfg()
    variants = plan.C["tables"]["table3"]["variants"]
    assert list(cfg["variants"]) == [f"dpr.{v}" for v in variants]
    labels = plan.figure1_labels()
    assert labels[0] == "BM25" and labels[-1] == "# Train: all"
    assert len(labels) == len(plan.C["tables"]["figure1"]["variants"]) + 2
    with pytest.raises(ConfigError, match="methods.dpr.variants.t3_nope"):
        plan_of("mini", tables={"table3": {"variants": ["t3_nope"]}}).table3_cfg()


def test_sources_land_by_their_mirror_name_and_keep_a_recorded_name(tmp_path):
    plan = plan_of("mini")
    name = plan.qa_split("squad", "test")["source"]
    path = plan.source_file(name)
    assert path.startswith(f"results/data/{name}/")
    # Once fetched and recorded, a source keeps the name it was fetched under.
    src = plan.C["sources"][name]
    other = (src.get("url") or src["mirror"]).rsplit("/", 1)[-1]
    record = tmp_path / f"results/data/records/{name}/{other}.json"
    record.parent.mkdir(parents=True)
    record.write_text("{}")
    recorded = build_plan(plan.C, mirror=str(mirror_dir()), workdir=tmp_path)
    assert recorded.source_file(name) == f"results/data/{name}/{other}"
    with pytest.raises(ConfigError, match="unknown source 'nope'"):
        plan.source_file("nope")


def test_a_plan_part_adds_checks_and_hooks_by_name():
    """A new part (as a paper's plan.py would define) composes with the shared ones."""

    class Extra(PlanBase):
        def check(self):
            super().check()
            if self.C["seed"] < 0:
                raise ConfigError("config: seed must be >= 0")

        def targets(self):
            return ["results/extra.csv"]

    cls = type("Plan", (Extra, plan_class()), {})
    config = load_workflow_config(REPO, {"scale": "mini"})
    plan = cls(config, mirror=str(mirror_dir()))
    assert targets(plan)[0] == "results/extra.csv"
    with pytest.raises(ConfigError, match="seed"):
        cls({**config, "seed": -1}, mirror=str(mirror_dir()))


def test_one_grid_builds_the_single_multi_hybrid_rows():
    plan = plan_of("paper")
    rows = plan.grid(
        "nq", ["dpr", "xmoco"], label=str.upper, hybrid_label=lambda m: m == "dpr" and "H",
        multi=lambda m: "multi",
    )  # fmt: skip
    assert rows == [
        ("dpr", "nq", "nq", "Single", "DPR"), ("dpr+bm25", "nq", "nq", "Single", "H"),
        ("dpr", "multi", "nq", "Multi", "DPR"), ("dpr+bm25", "multi", "nq", "Multi", "H"),
        ("xmoco", "nq", "nq", "Single", "XMOCO"), ("xmoco", "multi", "nq", "Multi", "XMOCO"),
    ]  # fmt: skip
    # A dataset without a Single train set (an evaluation-only column) gets Multi rows only.
    assert {r[3] for r in plan.grid("nope", ["dpr"], label=str, hybrid_label=lambda m: None,
                                    multi=lambda m: "multi")} == {"Multi"}  # fmt: skip


def test_planning_imports_no_torch():
    """The planner reads the method classes (labels, defaults, corpus units) without torch:
    about a second of every Snakemake start and config load (drpipe.lazy)."""
    code = (
        "import sys; from drpipe.config import load_workflow_config; from drpipe.plan import "
        f"build_plan; p = build_plan(load_workflow_config({str(REPO)!r}, {{'scale': 'paper'}}));"
        "p.table2_runs(); p.run_config('dcsr', 'nq'); p.corpus_inputs('dcsr');"
        "assert 'torch' not in sys.modules, 'torch imported while planning'"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_table2_curves_follow_the_table2_rows():
    """One curve per Table 2 cell, from the cell's per-question ranks, with a line kind: BM25,
    hybrid, dense, and oracle rows (they saw the test answers) apart."""
    plan = plan_of("mini")
    files, cfg = plan.table2_curves()
    runs = plan.table2_runs()
    assert len(files) == len(cfg["rows"]) == len(runs)
    assert files[0] == "results/metrics/bm25/none/squad-test.per_question.parquet"
    kinds = {r["label"]: r["kind"] for r in cfg["rows"]}
    assert kinds["BM25"] == "bm25" and kinds["BM25+DPR"] == "hybrid" and kinds["DPR"] == "dense"
    assert {k for label, k in kinds.items() if "oracle" in label} == {"oracle"}
    assert cfg["max_k"] == 100
