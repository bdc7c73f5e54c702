"""Config resolution and validation, and the shape of the DAG at every scale (dry runs)."""

from __future__ import annotations

import copy
import time

import pytest
import yaml
from workflow_util import REPO, planned_jobs, snakemake

from drpipe.config import ConfigError, deep_merge, method_config, resolve

SCHEMA = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
RAW = yaml.safe_load((REPO / "config.yaml").read_text())


def test_every_scale_validates_and_mini_is_default():
    assert resolve(RAW, SCHEMA)["scale"] == "mini"
    for scale in ("mini", "squad", "paper"):
        cfg = resolve(RAW, SCHEMA, {"scale": scale})
        assert cfg["scale"] == scale
        assert "scales" not in cfg


def test_scale_overlay_and_command_line_precedence():
    squad = resolve(RAW, SCHEMA, {"scale": "squad"})
    assert squad["qa"]["squad"]["train"]["sample"] == 5000  # from the overlay
    assert squad["encode"]["shards"] == 4
    over = resolve(RAW, SCHEMA, {"scale": "squad", "encode": {"shards": 7}})
    assert over["encode"]["shards"] == 7  # --config wins over the overlay
    paper = resolve(RAW, SCHEMA, {"scale": "paper"})
    assert [d["name"] for d in paper["corpus"]["documents"]] == ["enwiki"]  # lists replace
    assert paper["encoder"]["init"] == "bert-base-uncased"


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"bm25": {"kk1": 1.0}}, "unknown key bm25.kk1"),
        ({"bm25": {"k1": "high"}}, "key bm25.k1"),
        ({"methods": {"dpr": {"lr": -1}}}, "key methods.dpr.lr"),
        ({"corpus": {"sentences": {"splitter": "nltk"}}}, "key corpus.sentences.splitter"),
        ({"bogus": 1}, "unknown key bogus"),
    ],
)
def test_bad_config_names_the_key(patch, message):
    raw = deep_merge(copy.deepcopy(RAW), patch)
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        resolve(raw, SCHEMA)


def test_unknown_scale_is_an_error():
    with pytest.raises(ConfigError, match="scale"):
        resolve(RAW, SCHEMA, {"scale": "huge"})


def test_method_variants_merge_onto_method_and_encoder():
    cfg = resolve(RAW, SCHEMA)
    base = method_config(cfg, "dpr")
    assert base["init"] == cfg["encoder"]["init"] and base["lr"] == cfg["methods"]["dpr"]["lr"]
    variant = method_config(cfg, "dpr.t3_gold_7")
    assert variant["negative_type"] == "gold" and variant["in_batch"] is False
    assert variant["lr"] == base["lr"]
    with pytest.raises(ConfigError):
        method_config(cfg, "dpr.nope")


def test_invalid_config_stops_snakemake_naming_the_key(tmp_path):
    proc = snakemake(tmp_path, "-n", overlay={"bm25": {"k2": 3}}, check=False)
    assert proc.returncode != 0
    assert "unknown key bm25.k2" in proc.stdout + proc.stderr


def test_paper_scale_dag_builds_quickly(tmp_path):
    start = time.perf_counter()
    jobs = planned_jobs(tmp_path, "--config", "scale=paper")
    elapsed = time.perf_counter() - start
    rules = {r for r, _ in jobs}
    assert {
        "fetch",
        "documents",
        "passages",
        "sentences",
        "bm25_index",
        "bm25_search",
        "train",
        "encode",
        "build_index",
        "retrieve",
        "hybrid",
        "evaluate",
        "table2",
    } <= rules
    outputs = {o for _, o in jobs}
    assert "results/data/enwiki_20181220/enwiki-20181220-pages-articles.xml.bz2" in outputs
    # DPR's released training files are used at paper scale: nothing is mined.
    assert "mine" not in rules
    assert "results/index/dpr/multi/hnsw.faiss" in outputs
    assert sum(r == "encode" for r, _ in jobs) == 7 * 50  # 5 single + multi + init, 50 shards
    print(f"paper-scale dry run: {len(jobs)} jobs in {elapsed:.1f} s")
    assert elapsed < 120


def test_mini_dag_reaches_table2_from_the_mirror(tmp_path):
    jobs = planned_jobs(tmp_path)
    outputs = {o for _, o in jobs}
    assert "results/table2.csv" in outputs
    assert "results/train/squad.jsonl.gz" in outputs
    assert "results/runs/dpr+bm25/squad/squad-test.parquet" in outputs
    assert "results/models/init/none" in outputs


def test_slurm_profile_assigns_per_rule_resources(tmp_path):
    """The SLURM executor plugin plans the paper-scale DAG with the profile's resources
    (conda needs a cluster, so software deployment is switched off for this dry run)."""
    proc = snakemake(
        tmp_path, "-n", "--config", "scale=paper", "--profile", str(REPO / "profiles/slurm"),
        "--sdm", "env-modules",
    )  # fmt: skip
    text = proc.stdout + proc.stderr
    blocks = text.split("\n\n")
    train = [b for b in blocks if "rule train:" in b]
    encode = [b for b in blocks if "rule encode:" in b]
    assert train and all("gpu=8" in b and "slurm_partition=gpu" in b for b in train)
    assert all("--nproc 8" in b for b in train)
    assert encode and all("gpu=1" in b for b in encode)
