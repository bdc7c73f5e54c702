"""Config resolution and validation, and the shape of the DAG at every scale (dry runs)."""

from __future__ import annotations

import copy

import pytest
import yaml
from workflow_util import REPO, plan_jobs, planned_job_files, planned_jobs, snakemake

from drpipe.config import ConfigError, deep_merge, method_config, read_defaults, resolve
from drpipe.methods import method_class

SCHEMA = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
RAW = read_defaults(REPO)


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
        # a number or a word: the error names the word, not "none of the given schemas"
        ({"hybrid": {"lambda": "tuned"}}, "key hybrid.lambda: 'tuned' does not match '^tune$'"),
    ],
)
def test_bad_config_names_the_key(patch, message):
    raw = deep_merge(copy.deepcopy(RAW), patch)
    with pytest.raises(ConfigError) as err:
        resolve(raw, SCHEMA)
    assert message in str(err.value)


def test_unknown_scale_is_an_error():
    with pytest.raises(ConfigError, match="scale"):
        resolve(RAW, SCHEMA, {"scale": "huge"})


def test_method_variants_merge_onto_method_and_encoder():
    cfg = resolve(RAW, SCHEMA)
    base = method_config(cfg, "dpr")
    assert base["init"] == cfg["encoder"]["init"]
    # DPR's lr: its class's default (config.yaml's block overrides none at mini)
    assert base["lr"] == method_class("dpr").defaults["lr"] and "lr" not in cfg["methods"]["dpr"]
    variant = method_config(cfg, "dpr.t3_gold_7")
    assert variant["negative_type"] == "gold" and variant["in_batch"] is False
    assert variant["lr"] == base["lr"]
    with pytest.raises(ConfigError):
        method_config(cfg, "dpr.nope")


def test_invalid_config_stops_snakemake_naming_the_key(tmp_path):
    proc = snakemake(tmp_path, "-n", overlay={"bm25": {"k2": 3}}, check=False)
    assert proc.returncode != 0
    assert "unknown key bm25.k2" in proc.stdout + proc.stderr


def test_paper_scale_dag(slurm_paper_plan):
    """The shared paper-scale plan (tests/slurm_run.py; its time: tests/test_slurm.py)."""
    jobs = [(j["rule"], j["output"][0]) for j in plan_jobs(slurm_paper_plan) if j["output"]]
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
    paper = resolve(RAW, SCHEMA, {"scale": "paper"})
    assert "results/data/enwiki_20181220/enwiki-20181220-pages-articles.xml.bz2" in outputs
    # DPR's released training files are used at paper scale: nothing is mined; checkpoints
    # are selected on DPR's dev biencoder files (fetched), not on held-out training examples.
    assert "mine" not in rules
    for name in paper["dev_examples"].values():
        assert any(o.startswith(f"results/data/{name}/") for o in outputs), name
    assert set(paper["dev_examples"]) == {"nq", "triviaqa", "wq", "trec", "squad"}
    assert "results/index/dpr/multi/hnsw.faiss" in outputs
    # 50 shards for the initial encoder, for each method x (5 single + multi) train sets, and
    # for each of DPR's released checkpoints (evaluated without training).
    # (The plan holds every paper's tables: count the encodings of Table 2's runs.)
    n_runs = 1 + len(paper["tables"]["methods"]) * 6 + len(paper["released"])
    table2_runs = {"init", "dpr.released", *paper["tables"]["methods"]}
    encoded = [o for r, o in jobs if r == "encode" and o.split("/")[2] in table2_runs]
    assert len(encoded) == n_runs * 50


def test_mini_dag_reaches_table2_from_the_mirror(tmp_path):
    jobs = planned_jobs(tmp_path)
    outputs = {o for _, o in jobs}
    assert "results/table2.csv" in outputs
    assert "results/train/squad.jsonl.gz" in outputs
    assert "results/runs/dpr+bm25/squad/squad-test.parquet" in outputs
    assert "results/models/init/none" in outputs


def test_slurm_profile_assigns_per_rule_resources(slurm_paper_plan):
    """The SLURM executor plugin plans the paper-scale DAG with the profile's resources
    (conda needs a cluster, so software deployment is switched off for this dry run)."""
    jobs = plan_jobs(slurm_paper_plan)
    train = [j for j in jobs if j["rule"] == "train"]
    encode = [j for j in jobs if j["rule"] == "encode"]
    assert train and all("gpu=8" in j["resources"] for j in train)
    assert all("slurm_partition=gpu" in j["resources"] for j in train)
    assert all("--nproc 8" in j["shell"] for j in train)
    assert encode and all("gpu=1" in j["resources"] for j in encode)


RULE_ENVS = r"""
import json, sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.types import (ConfigSettings, OutputSettings, ResourceSettings,
                                      StorageSettings)
with SnakemakeApi(OutputSettings(quiet=None)) as api:
    wf = api.workflow(
        snakefile=Path(sys.argv[1]), workdir=Path(sys.argv[2]),
        config_settings=ConfigSettings(config={"scale": sys.argv[3]}),
        resource_settings=ResourceSettings(cores=1), storage_settings=StorageSettings())
    def found(r):  # where Snakemake looks for the file: relative to the rule's own folder
        e = r.conda_env
        return Path(r.basedir.join(e).get_path_or_uri(secret_free=True)).is_file() if isinstance(e, str) else None
    print(json.dumps({r.name: [r.conda_env, "gpu" in r.resources, found(r)]
                      for r in wf._workflow.rules}))
"""


def rule_envs(tmp_path, scale: str) -> dict[str, list]:
    """rule -> [its conda environment file, whether it declares a `gpu` resource, whether
    that file is where Snakemake looks for it]."""
    import json
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", RULE_ENVS, str(REPO / "Snakefile"), str(tmp_path), scale],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_gpu_rules_get_the_cuda_environment_at_paper_scale(tmp_path):
    paper = rule_envs(tmp_path, "paper")
    on_gpu = {r for r, (e, _, _) in paper.items() if e and e.endswith("gpu.yaml")}
    assert {"train", "encode", "encode_queries", "build_index", "retrieve"} <= on_gpu
    # Exactly the rules that ask for GPUs get the CUDA environment.
    assert on_gpu == {r for r, (_, gpu, _) in paper.items() if gpu}
    assert paper["bm25_search"][0].endswith("java.yaml")
    assert paper["evaluate"][0].endswith("cpu.yaml")
    # (That a local scale gets no GPU: tests/test_plan.py, the plan's resources.gpus.)
    assert all(e for r, (e, _, _) in paper.items() if r != "all"), "every rule names its env"
    # Snakemake reads the file (it hashes it into each job's record, conda or not): a rule
    # derived with `use rule` in a paper's folder resolves it from there (DCSR's hard round
    # failed so, after each job, until it named its own).
    missing = sorted(r for r, (e, _, found) in paper.items() if e and not found)
    assert not missing, f"environment files not found for rules {missing}"


def test_torch_pins_agree():
    import re

    make = re.search(r"^TORCH \?= torch==(\S+)", (REPO / "Makefile").read_text(), re.M)
    assert make, "the Makefile pins torch"
    for name in ("cpu", "gpu"):
        env = yaml.safe_load((REPO / f"envs/{name}.yaml").read_text())
        pins = [d for d in env["dependencies"] if isinstance(d, dict)][0]["pip"]
        torch = [p for p in pins if p.startswith("torch==")]
        assert torch == [f"torch=={make.group(1)}"], (name, torch)
        assert not [d for d in env["dependencies"] if str(d).startswith("pytorch")]


def test_precedence_defaults_scale_user_file_command_line():
    user = {"encode": {"shards": 3}, "bm25": {"k1": 1.1}}
    cfg = resolve(RAW, SCHEMA, {"scale": "squad"}, user_files=[user])
    assert cfg["encode"]["shards"] == 3  # the user's file beats the squad overlay's 4
    assert cfg["qa"]["squad"]["train"]["sample"] == 5000  # the overlay beats the defaults
    cfg = resolve(RAW, SCHEMA, {"scale": "squad", "encode": {"shards": 5}}, user_files=[user])
    assert cfg["encode"]["shards"] == 5 and cfg["bm25"]["k1"] == 1.1  # --config wins
    # A user file can choose the scale too; --config still wins.
    assert resolve(RAW, SCHEMA, {}, user_files=[{"scale": "squad"}])["scale"] == "squad"
    assert resolve(RAW, SCHEMA, {"scale": "mini"}, user_files=[{"scale": "squad"}])["scale"] == (
        "mini"
    )


def test_user_configfile_beats_the_scale_overlay_in_snakemake(tmp_path):
    jobs = planned_jobs(
        tmp_path, "--config", "scale=squad", overlay={"encode": {"shards": 3}}
    )  # the overlay file is passed as a second --configfile
    shards = {o for r, o in jobs if r == "encode" and o.startswith("results/embeddings/dpr/")}
    assert len(shards) == 3, sorted(shards)


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"evaluate": {"ks": [1, 20, 1000]}}, r"evaluate\.ks.*top-1000.*retrieve\.top_k = 100"),
        ({"bm25": {"hits": 20}, "retrieve": {"top_k": 100}}, r"evaluate\.ks.*bm25\.hits = 20"),
        ({"methods": {"dpr": {"lr": "1e-4"}}}, r"methods\.dpr\.lr.*write 1\.0e-4"),
    ],
)
def test_cross_key_and_yaml_number_errors(patch, message):
    raw = deep_merge(copy.deepcopy(RAW), patch)
    with pytest.raises(ConfigError, match=message):
        resolve(raw, SCHEMA)


# ------------------------------------------------------------ an evaluation-only dataset column


def _test_only_dataset(tmp_path, data_mirror, name: str) -> dict:
    """Config for a dataset `name` that has a test split and nothing else (as XQuAD's English
    file, and most of the papers' test sets): 20 real questions of DPR's SQuAD test file, in
    its JSONL layout, as a source of its own."""
    src = tmp_path / f"{name}-test.qa.jsonl"
    lines = (data_mirror / "dpr" / "squad1-test.qa.jsonl").read_text().splitlines()[:20]
    src.write_text("\n".join(lines) + "\n")
    return {
        "sources": {f"{name}_test": {"mirror": str(src)}},
        "qa": {name: {"test": {"format": "dpr-jsonl", "source": f"{name}_test",
                               "sample": None, "restrict_to_corpus": False}}},
    }  # fmt: skip


def _reads_a_test_split(path: str) -> bool:
    return "-test." in path or "/test." in path


@pytest.mark.parametrize("scale", ["mini", "squad", "paper"])
def test_an_evaluation_only_dataset_is_a_column_at_every_scale(tmp_path, data_mirror, scale):
    """A test-only dataset beside SQuAD plans at every scale; its hybrid rows tune their weight
    (where the scale tunes it) on the model's own held-out training questions, never on a test
    split: the weight belongs to the model, whatever dataset is evaluated."""
    work = tmp_path / "work"
    work.mkdir()
    overlay = {
        **_test_only_dataset(tmp_path, data_mirror, "xquad"),
        "tables": {"datasets": ["squad", "xquad"], "single": {"squad": "squad", "xquad": "squad"}},
    }
    jobs = planned_job_files(work, "--config", f"scale={scale}", overlay=overlay)
    outputs = {o for j in jobs for o in j["output"]}
    inputs = {i for j in jobs for i in j["input"]}
    assert "results/metrics/dpr/squad/xquad-test.json" in outputs
    assert not any("xquad/train" in p or "xquad-train" in p for p in outputs | inputs)
    hybrids = [j for j in jobs if j["rule"] == "hybrid" and "xquad-test" in j["output"][0]]
    assert hybrids, "no hybrid row on the evaluation-only dataset"
    tune = resolve(RAW, SCHEMA, {"scale": scale})["hybrid"]["lambda"] == "tune"
    for job in hybrids:
        run, train_set = job["output"][0].split("/")[2:4]
        model = run.removesuffix("+bm25")
        evaluated = {f"results/qvecs/{model}/{train_set}/xquad-test.npy",
                     "results/bm25/hybrid/xquad-test.parquet"}  # fmt: skip
        assert {i for i in job["input"] if _reads_a_test_split(i)} == evaluated, job
        tuning = {
            f"results/models/{model}/{train_set}.report.json",  # names the held-out questions
            "results/qa/squad/train.parquet",
            f"results/qvecs/{model}/{train_set}/squad-train.npy",
            "results/bm25/hybrid/squad-train.parquet",
        }
        assert (tuning <= set(job["input"])) == tune, job
        if not tune:  # DPR's fixed weight at paper scale: no tuning input at all
            assert not [i for i in job["input"] if "train" in i], job


def _make_snakemake_args(target: str, *assignments: str) -> list[str]:
    """The arguments `make TARGET` would pass to Snakemake (`make -n`, nothing runs)."""
    import shlex
    import subprocess

    out = subprocess.run(
        ["make", "-n", "-C", str(REPO), target, "STAMP=/dev/null", *assignments],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    line = next(ln for ln in out.replace("\\\n", " ").splitlines() if "snakemake --profile" in ln)
    words = shlex.split(line)  # after the snakemake binary (a local run's comes forked)
    return words[next(i for i, w in enumerate(words) if w.endswith("/snakemake")) + 1 :]


@pytest.mark.parametrize(
    ("make_target", "scale", "target"),
    [
        ("run", None, "results/table4.csv"),
        ("squad", "squad", "results/table4.csv"),
        ("rehearse", "rehearsal", "results/run_summary.md"),
    ],  # fmt: skip
)
def test_make_targets_reach_snakemake_as_targets(make_target, scale, target, tmp_path) -> None:
    # `--config` takes every word after it: a target placed after it was read as a config
    # value (`make rehearse` stopped at once), and a second --config replaces the first. So
    # does an option of several values in SNAKEMAKE_ARGS (--forcerun RULE...) if the target
    # follows it.
    from snakemake.cli import get_argument_parser, parse_config

    args = get_argument_parser().parse_args(
        _make_snakemake_args(
            make_target,
            f"TARGET={target}",
            """CONFIG=encode="{precision: int8}" seed=7""",
            "SNAKEMAKE_ARGS=-n --forcerun evaluate",
            "DATA_MIRROR=../shared/data",
        )  # fmt: skip
    )
    assert args.targets == [target] and args.dryrun and args.forcerun == {"evaluate"}
    assert args.config == [*([f"scale={scale}"] if scale else []), "encode={precision: int8}",
                           "seed=7"]  # fmt: skip
    assert parse_config(args.config) == {
        **({"scale": scale} if scale else {}), "encode": {"precision": "int8"}, "seed": 7
    }  # fmt: skip


@pytest.mark.parametrize(("args", "shown"), [("-n", False), ("", True)])
def test_make_rehearse_shows_the_summary_only_after_a_real_run(args, shown) -> None:
    # A dry run writes no summary: showing it failed `make rehearse SNAKEMAKE_ARGS=-n`.
    import subprocess

    out = subprocess.run(
        ["make", "-n", "-C", str(REPO), "rehearse", "STAMP=/dev/null", f"SNAKEMAKE_ARGS={args}"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert ("cat rehearsal/results/run_summary.md" in out) is shown


def test_nested_config_values_on_the_command_line_are_typed_as_yaml() -> None:
    # Snakemake reads a nested --config value with YAML's BaseLoader: every scalar text. A
    # number or boolean there reaches the config as the number (encode.shards: '2' was refused
    # as text, and int8_weight_bits: '8' was not one of 7, 8); text stays text.
    from snakemake.cli import parse_config

    given = parse_config(["scale=squad", "encode={shards: 2, precision: int8, int8_weight_bits: 7}",
                          "reader={bf16: off, ks: [1, 2], sample: null}", "seed=7"])  # fmt: skip
    assert given["encode"] == {"shards": "2", "precision": "int8", "int8_weight_bits": "7"}
    cfg = resolve(RAW, SCHEMA, given)
    assert (cfg["encode"]["shards"], cfg["encode"]["int8_weight_bits"], cfg["seed"]) == (2, 7, 7)
    assert cfg["encode"]["precision"] == "int8" and cfg["scale"] == "squad"
    assert (cfg["reader"]["bf16"], cfg["reader"]["ks"], cfg["reader"]["sample"]) == (
        False, [1, 2], None,
    )  # fmt: skip


@pytest.mark.parametrize("how", ["environment", "command line"])
def test_make_exports_the_mirror_absolute(how: str) -> None:
    # `make rehearse` runs in --directory rehearsal/, where ../shared/data is another folder.
    import os
    import subprocess

    given = {"DATA_MIRROR": "../shared/data"}
    out = subprocess.run(
        ["make", "-s", "-C", str(REPO), "--eval", "show-mirror: ; @echo $$DATA_MIRROR",
         "show-mirror", *(["DATA_MIRROR=../shared/data"] if how == "command line" else [])],
        capture_output=True, text=True, check=True,
        env={**os.environ, **(given if how == "environment" else {})},
    ).stdout.strip()  # fmt: skip
    assert out == str((REPO / "../shared/data").resolve()), out


def test_documented_snakemake_commands_keep_their_targets() -> None:
    # `--config` takes every word after it: README's cluster command once put its target
    # there, which Snakemake rejects as a config value. Every documented `snakemake` line
    # must parse with its targets as targets and its config as name=value pairs.
    import re
    import shlex

    from snakemake.cli import get_argument_parser, parse_config

    parser = get_argument_parser()
    found = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")),
                 *sorted((REPO / "profiles").glob("*/config.yaml"))]:  # fmt: skip
        text = path.read_text()
        commands = [
            m.group(1).replace("\n", " ") for m in re.finditer(r"`(snakemake [^`]+)`", text)
        ]
        commands += re.findall(r"^[#\s]*(snakemake --.*)$", text, re.M)  # code blocks, comments
        for command in commands:
            argv = shlex.split(command)[1:]
            if not any(a == "--config" for a in argv):
                continue
            args = parser.parse_args(argv)
            found.append((path.name, argv))
            assert args.targets, (path.name, argv)
            parse_config(args.config)  # raises on a word that is not name=value
    assert len(found) >= 2, found
