"""The cluster path without a cluster.

- The SLURM profile plans the paper-scale DAG (every method of tables.methods, all five
  datasets) in at most ten seconds.
- A fake SLURM (``tests/fake_slurm``: sbatch, squeue, sacct, scancel, srun, ... first on PATH)
  runs the jobs that the real snakemake-executor-plugin-slurm submits for a tiny real DAG (a
  copy of the session's tiny DPR run, its mining forced to rerun: one CPU job and every GPU
  rule from training to retrieval; run by the session's builder, ``slurm_run.py``, which
  cancels the first training job with the fake ``scancel``); the test checks the resources
  each job was submitted with against the profile, and that the cancelled job was
  resubmitted and the workflow completed. That every rule, CPU or GPU, carries its profile
  resources is checked on the paper-scale plan above.
- The paper scale's whole plan (every table, Table 4's readers; a dry run the builder makes):
  each job on the partition its GPUs call for, multi-GPU jobs on one node, threads equal to
  CPUs. The cluster command gets the SLURM profile's settings (not profiles/default's), and
  downloads are local rules.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from slurm_run import (
    FORCED,
    OVERRIDES,
    TARGET,
    per_job,
    rule_of,
)
from slurm_run import profile as slurm_profile
from slurm_run import requests as slurm_requests
from workflow_util import local_rules

from drpipe.config import read_defaults, resolve
from drpipe.index import estimate_memory, merged_cfg
from drpipe.methods import method_class
from drpipe.papers import paper_of_run

REPO = Path(__file__).resolve().parents[1]
RAW = read_defaults(REPO)
SCHEMA = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
# The one shared paper-scale plan (every table, Table 4's readers, shell commands printed):
# a bound against regressions such as a quadratic planner, not a benchmark; the measured
# figure is printed.
PLAN_SECONDS = 40.0


# --------------------------------------------------------------------------- paper-scale plan


def _jobs(text: str) -> list[dict]:
    jobs = []
    for block in re.split(r"^(?=(?:local)?rule \w+:$)", text, flags=re.M):
        head = re.match(r"(?:local)?rule (\w+):$", block, flags=re.M)
        if not head:
            continue
        fields = dict(re.findall(r"^    (\w+): (.*)$", block, flags=re.M))
        resources = dict(re.findall(r"(\w+)=([^,]+)", fields.get("resources", "")))
        jobs.append(
            {
                "rule": head.group(1),
                "output": [o.strip() for o in fields.get("output", "").split(",") if o.strip()],
                "resources": resources,
            }
        )
    return jobs


def test_paper_scale_plan_has_every_method_on_all_five_datasets_quickly(slurm_paper_plan):
    """The bound is on the dry run's CPU time: on the shared 2-core test machines other
    people's jobs stretch wall time several-fold, CPU time much less (wall is printed too)."""
    timing = json.loads((slurm_paper_plan / "timing.json").read_text())
    wall, cpu = timing["wall"], timing["cpu"]
    print(f"paper-scale SLURM dry run: {wall:.1f} s wall, {cpu:.1f} s CPU")
    jobs = _jobs((slurm_paper_plan / "plan.txt").read_text())
    outputs = {o for j in jobs for o in j["output"]}
    cfg = resolve(RAW, SCHEMA, {"scale": "paper"})
    tables = cfg["tables"]
    assert sorted(tables["datasets"]) == sorted(["nq", "triviaqa", "wq", "trec", "squad"])
    missing = []
    for dataset in tables["datasets"]:
        split = tables["split"]
        runs = [("bm25", "none"), ("init", "none")]
        for method in tables["methods"]:
            # Each paper's own Multi set (DCSR: NQ + TriviaQA + SQuAD), else DPR's.
            own = (tables.get(paper_of_run(method) or "") or {}).get("multi")
            for train_set in (tables["single"].get(dataset), own or tables["multi"]):
                if train_set is None:
                    continue
                runs.append((method, train_set))
                if cfg["hybrid"]["enabled"] and method_class(method).hybrid:
                    runs.append((f"{method}+bm25", train_set))
        for run, train_set in runs:
            path = f"results/metrics/{run}/{train_set}/{dataset}-{split}.json"
            if path not in outputs:
                missing.append(path)
    assert not missing, f"not planned: {missing[:10]}"
    # Every planned job carries its rule's resources from the profile (a value chosen per job
    # by an expression, the partition of index builds and searches, is checked below).
    profile = slurm_profile()
    for job in jobs:
        want = {**profile["default-resources"], **profile["set-resources"].get(job["rule"], {})}
        for key in ("mem_mb", "runtime", "slurm_partition", "gpu"):
            if key in want and not per_job(want[key]):
                assert job["resources"].get(key) == str(want[key]), (job["rule"], key)
    assert cpu <= PLAN_SECONDS, f"the dry run took {cpu:.1f} s of CPU (> {PLAN_SECONDS} s)"


def test_the_cluster_command_runs_with_the_slurm_profiles_settings(monkeypatch):
    """Snakemake adds profiles/default (the workflow profile) to `--profile profiles/slurm`,
    and its values win. It once held `cores: all`, which capped every cluster job's threads
    at the login node's cores (bm25_index's 32 became 2 here), and `latency-wait: 5`, which
    replaced the cluster's 60 s."""
    from snakemake.cli import parse_args

    monkeypatch.chdir(REPO)  # where users run it: Snakemake finds both profiles from here
    _, args = parse_args(["--profile", "profiles/slurm", "results/table2.csv"])
    slurm = slurm_profile()
    assert args.cores is None  # remote jobs keep their set-threads
    assert (args.executor, args.jobs, args.latency_wait, args.retries) == (
        slurm["executor"], slurm["jobs"], slurm["latency-wait"], slurm["retries"]
    )  # fmt: skip
    # The workflow profile holds nothing an executor's profile would set otherwise.
    default = yaml.safe_load((REPO / "profiles/default/config.yaml").read_text())
    assert {k: v for k, v in default.items() if slurm.get(k) != v} == {}


def test_every_paper_scale_job_asks_slurm_for_the_partition_nodes_and_cores_it_uses(
    slurm_paper_plan,
):
    """The paper scale's whole plan (every table, Table 4's readers; built by the session's
    builder): GPU jobs on the GPU partition and nothing else there, multi-GPU jobs on one
    node, and each rule's threads its job's CPUs. Rules that asked for GPUs on the CPU
    partition (question encoding, the reader, DCSR's hard-negative training, the subsets'
    encodings), HNSW builds and searches holding a GPU FAISS cannot use, and 8 ranks of 8
    threads on 32 CPUs were all in this plan before this test."""
    jobs = _jobs((slurm_paper_plan / "plan.txt").read_text())
    profile = slurm_profile()
    gpu_partition = profile["set-resources"]["train"]["slurm_partition"]
    assert gpu_partition != profile["default-resources"]["slurm_partition"]
    planned = {j["rule"] for j in jobs}
    assert {"train", "train_hard", "reader_train", "reader_score", "encode_queries",
            "subset_encode", "build_index", "retrieve", "hybrid", "aopt_index"} <= planned  # fmt: skip
    wrong = set()
    for job in jobs:
        res, rule = job["resources"], job["rule"]
        gpu = int(res.get("gpu", 0))
        if (gpu > 0) != (res.get("slurm_partition") == gpu_partition):
            wrong.add((rule, f"gpu={gpu}", res.get("slurm_partition")))
        if gpu > 1 and res.get("nodes") != "1":
            wrong.add((rule, f"gpu={gpu}", f"nodes={res.get('nodes')}"))
    assert not wrong, sorted(wrong)
    # Each full index's jobs hold it: drpipe.index's estimate at the paper's corpus, 21,015,324
    # passages, DCSR's sentences ~3.74 per passage (measured: docs/measured.md). DCSR's HNSW
    # (~530 GB) was planned in 192 GB before its flat index (and 320 GB) came in. HNSW, the
    # passage methods' index, is built and searched on CPU: no GPU held.
    cfg = resolve(RAW, SCHEMA, {"scale": "paper"})
    index_cfg = merged_cfg({k: v for k, v in cfg["index"].items() if k != "by_method"})
    short = set()
    for job in jobs:
        if job["rule"] not in ("build_index", "retrieve", "hybrid"):
            continue
        run = job["output"][0].split("/")[2].removesuffix("+bm25")
        method = run.split(".")[0]
        kind = (cfg["index"]["by_method"].get(method) or {}).get("type", cfg["index"]["type"])
        n = int(21_015_324 * (3.74 if method == "dcsr" else 1))
        need = estimate_memory(kind, n, 768, index_cfg)["total"]
        if int(job["resources"]["mem_mb"]) * 10**6 < need:
            short.add((job["rule"], run, kind, f"{need / 1e9:.0f} GB"))
        if kind == "hnsw":
            assert job["resources"].get("gpu", "0") == "0", job
    assert not short, sorted(short)
    # Snakemake passes a job's threads to its command (--threads): they match its CPUs.
    for rule, threads in profile["set-threads"].items():
        cpus = {**profile["default-resources"], **profile["set-resources"].get(rule, {})}
        assert threads == cpus["cpus_per_task"], rule


def test_downloads_run_where_snakemake_runs(tmp_path):
    # Compute nodes often have no network: `fetch` is a local rule under any executor.
    assert "fetch" in local_rules(tmp_path)


# --------------------------------------------------------------------------- fake SLURM


# The run is built by the session's builder, beside the other runs (slurm_run.py).
@pytest.mark.slow
def test_fake_slurm_runs_a_tiny_dag_with_profile_resources_and_resubmits_a_cancelled_job(
    fake_slurm_run,
):
    state, work = fake_slurm_run / "slurm", fake_slurm_run / "work"
    result = json.loads((fake_slurm_run / "result.json").read_text())
    assert result["returncode"] == 0, result["log"]
    assert (work / TARGET).is_file()

    requests = slurm_requests(state)
    submitted = [r for r in requests if r["cmd"] == "sbatch"]
    rules = [rule_of(r) for r in submitted]
    assert sorted(rules) == sorted([FORCED, "train", "train", "encode", "encode", "build_index",
                                    "encode_queries", "retrieve"]), rules  # fmt: skip

    # Every submission carries its rule's resources from the profile (and this run's override).
    profile = slurm_profile()
    for req, rule in zip(submitted, rules, strict=True):
        want = {
            **profile["default-resources"],
            **profile["set-resources"].get(rule, {}),
            **OVERRIDES.get(rule, {}),
        }
        opts = req["options"]
        # A per-job expression ("A if ... else B"): one of its values (the plan test: which).
        for opt, key in (("--mem", "mem_mb"), ("-t", "runtime")):
            value = str(want[key])
            allowed = (
                re.fullmatch(r"(\d+) if .+ else (\d+)", value).groups()
                if per_job(value)
                else (value,)
            )
            assert opts.get(opt) in allowed, (rule, opt, opts)
        if not per_job(want["slurm_partition"]):  # else checked on the paper-scale plan
            assert opts.get("-p") == want["slurm_partition"], (rule, opts)
        assert opts.get("--cpus-per-task") == str(want["cpus_per_task"]), (rule, opts)
        assert opts.get("--gpus") == (str(want["gpu"]) if want.get("gpu") else None), (rule, opts)
    gpu_rules = {r for r, kv in profile["set-resources"].items() if kv.get("gpu")}
    assert {"train", "encode"} <= gpu_rules & set(rules)
    # Inside each GPU job, the job step asks srun for the same GPUs.
    sruns = [r for r in requests if r["cmd"] == "srun"]
    by_job = {r["job_id"]: rule for r, rule in zip(submitted, rules, strict=True)}
    for s in sruns:
        rule = by_job.get(s["job_id"])
        if rule in gpu_rules:
            gpus = {**profile["set-resources"][rule], **OVERRIDES.get(rule, {})}["gpu"]
            assert f"--gpus={gpus}" in s["argv"], (rule, s)

    # The cancelled train job was resubmitted, and the second submission completed.
    cancelled = result["cancelled"]
    assert cancelled, "no train job was seen running"
    assert any(r["cmd"] == "scancel" and cancelled in r["job_ids"] for r in requests)
    states = {p.stem: json.loads(p.read_text())["state"] for p in (state / "jobs").glob("*.json")}
    assert states[cancelled] == "CANCELLED"
    train_jobs = [r["job_id"] for r, rule in zip(submitted, rules, strict=True) if rule == "train"]
    assert len(train_jobs) == 2 and train_jobs[0] == cancelled
    assert states[train_jobs[1]] == "COMPLETED"
    assert all(s == "COMPLETED" for j, s in states.items() if j != cancelled), states
