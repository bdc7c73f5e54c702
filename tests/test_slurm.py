"""The cluster path: the SLURM profile's plan, and a real SLURM on this machine.

- The SLURM profile plans the paper-scale DAG (every method of tables.methods, all five
  datasets) in at most ten seconds.
- The paper scale's whole plan (every table, Table 4's readers; a dry run the builder makes):
  each job on the partition its GPUs call for, multi-GPU jobs on one node, threads equal to
  CPUs. The cluster command gets the SLURM profile's settings (not profiles/default's), and
  downloads are local rules.
- A real single-node SLURM (Debian's slurmctld, slurmd and munge; tests/local_slurm.py),
  brought up by the session's builder (slurm_run.py) for a copy of the tiny DPR run, its
  mining forced to rerun: mining, training, encoding, index, retrieval, evaluation and
  Table 2 submitted through profiles/slurm with snakemake-executor-plugin-slurm. The first
  training job is cancelled (`scancel`) after its first checkpoint. Beside it, on copies of
  their own: faults on the evaluation job (a request the cluster cannot satisfy, Snakemake
  killed and restarted, a bad input), and a training killed by its time limit. Where SLURM
  cannot run (not root, no apt), these tests skip and say why.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml
from local_slurm import NODE, LocalCluster
from slurm_run import FORCED, OVERRIDES, TIME_LIMIT, differing_files, per_job, rule_of
from slurm_run import profile as slurm_profile
from workflow_util import local_rules

from drpipe.cluster_check import planned_resources
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


def test_paper_scale_plan_has_every_method_on_all_five_datasets_quickly(slurm_paper_plan):
    """The bound is on the dry run's CPU time: on the shared 2-core test machines other
    people's jobs stretch wall time several-fold, CPU time much less (wall is printed too)."""
    timing = json.loads((slurm_paper_plan / "timing.json").read_text())
    wall, cpu = timing["wall"], timing["cpu"]
    print(f"paper-scale SLURM dry run: {wall:.1f} s wall, {cpu:.1f} s CPU")
    jobs = planned_resources((slurm_paper_plan / "plan.txt").read_text())
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
    jobs = planned_resources((slurm_paper_plan / "plan.txt").read_text())
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


# --------------------------------------------------------------------------- a real SLURM


def _slurm(real_slurm_run: Path) -> dict:
    result = json.loads((real_slurm_run / "result.json").read_text())
    if "unavailable" in result:
        pytest.skip(f"no local SLURM on this machine: {result['unavailable']}")
    return result


def _fault(real_slurm_run: Path, name: str) -> dict:
    """The fault ``name`` of the run's faults (slurm_run._faults), which ran beside it."""
    faults = _slurm(real_slurm_run)["faults"]
    assert "error" not in faults, faults["error"]
    return faults[name]


def _job_stats(log: str) -> dict[str, int]:
    """Snakemake's "Job stats" table: jobs planned per rule."""
    block = log.split("Job stats:", 1)[1].split("total", 1)[0]
    return {m[0]: int(m[1]) for m in re.findall(r"^(\w+)\s+(\d+)$", block, flags=re.M)}


def _minutes(limit: str) -> int:
    days, _, hms = limit.rpartition("-")
    h, m, _s = (int(x) for x in hms.split(":"))
    return (int(days or 0) * 24 + h) * 60 + m


def _mem_mb(value: str) -> int:
    return int(float(value[:-1]) * {"M": 1, "G": 1024, "T": 1024**2}[value[-1]])


# The run is built by the session's builder, beside the other runs (slurm_run.py).
@pytest.mark.slow
@pytest.mark.system_packages
def test_a_real_slurm_runs_the_tiny_dag_as_submitted_and_resumes_a_cancelled_training(
    real_slurm_run, tiny_dpr_run
):
    """Mining to Table 2 through profiles/slurm and a real slurmctld/slurmd: every job with its
    profile resources as the controller recorded them, the training job cancelled after its
    first checkpoint resubmitted (`retries`) and resumed from it, and every result byte for
    byte the local run's (models, vectors, index, runs, per-question ranks, Table 2)."""
    result = _slurm(real_slurm_run)
    assert result["returncode"] == 0, result["log"]
    work = real_slurm_run / "work"
    print(f"local SLURM up {result['cluster_up_s']:.1f} s, down {result['cluster_down_s']:.1f}"
          f" s; the run through it {result['wall_s']:.0f} s; jobs' processes killed at down:"
          f" {len(result['leftovers_killed'])}")  # fmt: skip

    jobs = json.loads((real_slurm_run / "jobs.json").read_text())
    rules = [rule_of(j["Comment"]) for j in jobs]
    planned = _job_stats((real_slurm_run / "run.log").read_text())
    assert {FORCED, "train", "encode", "build_index", "encode_queries", "retrieve", "evaluate",
            "table2"} <= set(planned), planned  # fmt: skip
    # Every planned job was submitted once, the cancelled training twice.
    assert Counter(rules) == Counter({**planned, "train": planned["train"] + 1}), rules

    # What the controller recorded of each job is its rule's profile resources.
    profile = slurm_profile()
    for job, rule in zip(jobs, rules, strict=True):
        want = {**profile["default-resources"], **profile["set-resources"].get(rule, {}),
                **OVERRIDES.get(rule, {})}  # fmt: skip
        for key, got in (("mem_mb", _mem_mb(job["MinMemoryNode"])),
                         ("runtime", _minutes(job["TimeLimit"]))):  # fmt: skip
            value = str(want[key])
            allowed = (
                re.fullmatch(r"(\d+) if .+ else (\d+)", value).groups()
                if per_job(value)
                else (value,)
            )
            assert str(got) in allowed, (rule, key, got, value)
        if not per_job(want["slurm_partition"]):  # else checked on the paper-scale plan
            assert job["Partition"] == want["slurm_partition"], (rule, job["Partition"])
        assert job["NumCPUs"] == str(want["cpus_per_task"]), (rule, job["NumCPUs"])
        gres = job.get("TresPerJob", "")
        assert gres == (f"gres:gpu:{want['gpu']}" if want.get("gpu") else ""), (rule, gres)
    assert {"train", "encode"} <= {r for r, j in zip(rules, jobs, strict=True)
                                   if j.get("TresPerJob")}  # fmt: skip

    # The cancelled training: cancelled after its first checkpoint, resubmitted, resumed.
    cancelled = result["cancelled"]
    assert cancelled, "no training job was seen running with a checkpoint"
    state = {j["JobId"]: j["JobState"] for j in jobs}
    trains = [j["JobId"] for j, r in zip(jobs, rules, strict=True) if r == "train"]
    assert trains[0] == cancelled and state[cancelled] == "CANCELLED"
    assert all(s == "COMPLETED" for j, s in state.items() if j != cancelled), state
    report = json.loads((work / "results/models/dpr/squad.report.json").read_text())
    assert report["resumed_from_step"], report.get("resumed_from_step")

    # Byte for byte the local run: the resumed training's weights and everything after them.
    hashes = json.loads((real_slurm_run / "hashes.json").read_text())
    compared, differ = differing_files(hashes, tiny_dpr_run)  # reports aside: they hold timings
    assert not differ, differ
    for key in ("results/models/dpr/squad/passage/", "results/table2.csv",
                "results/runs/dpr/squad/squad-test.parquet"):  # fmt: skip
        assert any(r.startswith(key) for r in hashes), key
    assert len(compared) > 50, len(compared)


@pytest.mark.slow
@pytest.mark.system_packages
def test_the_local_cluster_is_torn_down_after_its_run(real_slurm_run):
    result = _slurm(real_slurm_run)
    alive = {name: pid for name, pid in result["pids"].items() if Path(f"/proc/{pid}").exists()
             and "Z" not in Path(f"/proc/{pid}/stat").read_text().split(") ")[1][:1]}  # fmt: skip
    assert not alive, alive
    assert not LocalCluster().root.exists()
    # Nor any process of a job: a job step cancelled as slurmd stopped once slept on, orphaned.
    assert result["leftovers_after_down"] == {}, result["leftovers_after_down"]


@pytest.mark.slow
@pytest.mark.system_packages
def test_a_job_failing_on_bad_input_reaches_the_user_with_its_log_and_is_retried_once(
    real_slurm_run,
):
    fault = _fault(real_slurm_run, "bad_input")
    assert fault["returncode"] != 0
    assert "Error in rule evaluate" in fault["log"]
    assert "Parquet magic bytes not found" in fault["log"]  # the job's own log, shown
    # `retries: 1`: one retry, then the failure; no loop.
    states = [(rule_of(j["Comment"]), j["JobState"]) for j in fault["jobs"]]
    assert states == [("evaluate", "FAILED")] * 2, states


@pytest.mark.slow
@pytest.mark.system_packages
def test_cluster_check_finds_a_request_the_cluster_cannot_satisfy_before_the_run(real_slurm_run):
    """`drpipe cluster-check` gives each distinct request of the plan to the real scheduler
    (sbatch --test-only, nothing submitted). The profile's requests pass (training's GPU,
    the index's 192 GB); evaluation's 1 TB does not, and is named with sbatch's reason.
    Submitted, it would fail with the same message (docs/cluster.md)."""
    check = _fault(real_slurm_run, "check")
    assert check["returncode"] == 1, check["log"]
    head = re.search(r"(\d+) jobs, (\d+) distinct requests checked .*: (\d+) refused", check["log"])
    assert head, check["log"]
    jobs, requests, refused = (int(x) for x in head.groups())
    assert refused == 1 and requests >= 5 and jobs >= requests, check["log"]
    [line] = [ln for ln in check["log"].splitlines() if ln.startswith("- rule")]
    assert line.startswith("- rule evaluate ("), line
    assert "--mem 1000000" in line and "Memory required by task is not available" in line, line


@pytest.mark.slow
@pytest.mark.system_packages
def test_a_killed_snakemake_restarted_submits_nothing_beside_its_earlier_jobs(
    real_slurm_run, tiny_dpr_run
):
    """Snakemake SIGKILLed while its evaluation job runs, then unlocked (`--unlock`). Started
    again while that job is still queued (suspended), it stops and names the job. Started
    after the job has ended, it submits nothing again, and the per-question ranks are the
    local run's."""
    killed = _fault(real_slurm_run, "killed")
    assert "error" not in killed, killed
    orphan = killed["orphan"]
    assert killed["unlock"] == 0
    queued = killed["while_queued"]
    assert queued["returncode"] != 0
    assert "still queued or running" in queued["log"] and orphan in queued["log"], queued["log"]
    assert killed["after"]["returncode"] == 0, killed["after"]["log"]
    # The orphan finished its job (its own Snakemake records it), so the restart has nothing
    # left to do: one submission in all.
    jobs = {j["JobId"]: j for j in killed["jobs"]}
    evaluations = [i for i, j in jobs.items() if rule_of(j["Comment"]) == "evaluate"]
    assert evaluations == [orphan] and jobs[orphan]["JobState"] == "COMPLETED", jobs
    local = tiny_dpr_run / "results/metrics/dpr/squad/squad-test.per_question.parquet"
    assert killed["per_question_sha256"] == hashlib.sha256(local.read_bytes()).hexdigest()


@pytest.mark.slow
@pytest.mark.system_packages
def test_a_training_killed_at_its_time_limit_is_retried_with_the_same_limit_and_resumes(
    real_slurm_run, tiny_dpr_run
):
    """A training whose profile gives it two minutes, run beside the main run: its first
    attempt, stopped after its first checkpoint (standing for a longer training), is killed by
    slurmctld at its limit (TIMEOUT); Snakemake reports the state and resubmits it once
    (`retries: 1`) with the same limit; the retry resumes from the checkpoint and the weights
    are the local run's, byte for byte."""
    limit = _slurm(real_slurm_run)["time_limit"]
    assert "error" not in limit, limit["error"]
    assert limit["returncode"] == 0, limit["log"]
    print(f"time-limit run: {limit['wall_s']:.0f} s beside the main run; the runs beside it "
          f"waited for after it: {limit['waited_s']:.1f} s")  # fmt: skip
    jobs = limit["jobs"]
    assert [(rule_of(j["Comment"]), j["JobState"]) for j in jobs] == [
        ("train", "TIMEOUT"),
        ("train", "COMPLETED"),
    ], jobs
    first, retry = jobs
    assert first["JobId"] == limit["frozen"]
    # The retry asks for what the first attempt did: the rule's time, not more.
    minutes = TIME_LIMIT["train"]["runtime"]
    assert [_minutes(j["TimeLimit"]) for j in jobs] == [minutes, minutes], jobs
    assert retry["Partition"] == first["Partition"] and retry["TRES"] == first["TRES"]
    assert first["TresPerJob"] == f"gres:gpu:{OVERRIDES['train']['gpu']}", first["TresPerJob"]
    # Killed at its limit (slurmctld checks limits every 30 s), not before.
    assert _minutes(first["RunTime"]) >= minutes, first["RunTime"]
    # Snakemake names the state (the squeue status command gives no further reason), shows
    # the job's SLURM log with slurmstepd's reason (`show-failed-logs`), and restarts it.
    log = limit["log"]
    assert f"SLURM-job '{first['JobId']}' failed, SLURM status is: 'TIMEOUT'" in log, log
    assert f"JOB {first['JobId']} ON {NODE} CANCELLED AT" in log and "DUE TO TIME LIMIT" in log
    assert log.index("DUE TO TIME LIMIT") < log.index("Trying to restart job"), log
    assert 1 <= limit["at_step"] <= limit["resumed_from_step"], limit
    model = "results/models/dpr/squad/"
    differ = [r for r, h in limit["hashes"].items()
              if hashlib.sha256((tiny_dpr_run / r).read_bytes()).hexdigest() != h]  # fmt: skip
    assert limit["hashes"] and not differ, differ
    assert all(r.startswith(model) for r in limit["hashes"])


@pytest.mark.slow
@pytest.mark.system_packages
def test_down_kills_a_job_that_ignores_the_cancel(real_slurm_run):
    """A job that shrugs off scancel's TERM (its KILL comes KillWait later, after slurmd has
    stopped) does not outlive the cluster: down finds it by its SLURM_CONF and kills it, and
    its slurmstepd (which blanks its environment) by the cluster's log it holds open; one was
    left asleep before. After the builder's run (its fixture), which holds the machine's one
    cluster."""
    _slurm(real_slurm_run)  # skips where SLURM cannot run
    cluster = LocalCluster()
    cluster.up()
    try:
        job = cluster.run("sbatch", "--parsable", "--partition=cpu", "--mem=100M",
                          "--output=/dev/null", "--wrap", "trap '' TERM; sleep 300").stdout.strip()  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(
            "sleep 300" in cmd for cmd in cluster.job_processes().values()
        ):
            time.sleep(0.2)
        running = cluster.job_processes()
        assert any("sleep 300" in cmd for cmd in running.values()), (job, running)
    finally:
        # down gives each daemon, then the jobs' leftovers, `timeout` (at most 5 s) from TERM
        # to KILL: the daemons stop in ~0.2 s; this job ignores TERM, so its grace is always
        # waited out, and 2 s shows the KILL as well as the default's 5.
        cluster.down(timeout=2.0)
    assert any("sleep 300" in cmd for cmd in cluster.leftovers.values()), cluster.leftovers
    assert any(cmd.startswith("slurmstepd") for cmd in cluster.leftovers.values()), (
        cluster.leftovers
    )
    assert cluster.job_processes() == {}
