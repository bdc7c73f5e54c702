"""The real-SLURM run that test_slurm.py checks, built by the session's background builder
(tiny_run.py) beside the other runs: it is mostly waiting (the executor plugin's status checks,
a job cancelled and resubmitted), which the builder overlaps with its own jobs.

Also the paper scale's whole plan with the SLURM profile (``build_paper_plan``, a dry run of
every table and Table 4's readers, ~25 s of CPU): what each job would ask SLURM for.

A copy of the tiny DPR run, its mining forced to rerun (one CPU job and every GPU rule from
training to retrieval), through profiles/slurm and snakemake-executor-plugin-slurm to a real
single-node SLURM on this machine (local_slurm.py: munged, slurmctld, slurmd, brought up for
the run and down after it). The first training job is cancelled with `scancel` once it has
written a checkpoint. Beside it, each in a copy of its own: faults on the smallest jobs (a
request the cluster cannot satisfy, Snakemake killed and restarted, a job that fails on a bad
input; ``_faults_run``), and a training that SLURM kills at its time limit
(``_time_limit_run``). What happened is left in its folder for the tests.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

import yaml
from local_slurm import ClusterUnavailable, LocalCluster
from workflow_util import REPO, copy_run, mirror_dir

from drpipe.config import deep_merge
from drpipe.training.settings import PROGRESS_FILE

SNAKEMAKE = Path(sys.executable).with_name("snakemake")
DRPIPE = Path(sys.executable).with_name("drpipe")
PROFILE = REPO / "profiles" / "slurm"
TARGET = "results/table2.csv"
FORCED = "mine"  # a CPU rule; everything after it up to TARGET reruns with it
METRICS = "results/metrics/dpr/squad/squad-test.json"
# The profile's train jobs ask for 8 GPUs; `drpipe train` starts one process per GPU, which a
# 2-core test machine cannot afford: this run asks for one (still a GPU job to SLURM). The
# change goes into a copy of the profile: `--set-resources` on the command line would replace
# the profile's whole set-resources block (every rule back to the defaults), which is what
# this test first caught.
OVERRIDES = {"train": {"gpu": 1}, "train_hard": {"gpu": 1}}


def env_with(**extra: str) -> dict[str, str]:
    """This process's environment with ``extra``, its PATH (if any) and Snakemake's first."""
    env = {**os.environ, **extra}
    env["PATH"] = os.pathsep.join(
        p for p in (extra.get("PATH"), str(SNAKEMAKE.parent), os.environ["PATH"]) if p
    )
    return env


def profile() -> dict:
    return yaml.safe_load((PROFILE / "config.yaml").read_text())


def profile_with_overrides(where: Path, extra: dict | None = None) -> Path:
    """profiles/slurm with OVERRIDES, then ``extra``, applied key by key (everything else as
    the repository has it)."""
    prof = profile()
    for rule, values in [*OVERRIDES.items(), *(extra or {}).items()]:
        prof["set-resources"][rule] = {**prof["set-resources"][rule], **values}
    where.mkdir(parents=True)
    (where / "config.yaml").write_text(yaml.safe_dump(prof))
    return where


def rule_of(comment: str) -> str:
    """The rule a job was submitted for, from the comment the executor plugin gives it."""
    m = re.match(r"rule_(\w+?)(?:_wildcards_|$)", comment)
    assert m, comment
    return m.group(1)


# The training's checkpoint folder and its progress record (drpipe.training.settings).
CKPT_DIR = "results/models/dpr/squad.ckpt"
# Checkpoints after every step (a runtime setting: no result changes), so that the job can be
# cancelled between two of them, well before the training ends.
SLURM_OVERLAY = {"methods": {"dpr": {"checkpoint_every": 1}}}


def _progress(work: Path) -> dict | None:
    try:
        return json.loads((work / CKPT_DIR / PROGRESS_FILE).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def jobs_of(cluster: LocalCluster, work: Path) -> list[dict]:
    """The jobs the controller remembers of the Snakemake runs in ``work`` (two runs share
    the cluster: the main one and the time-limit one)."""
    return [j for j in cluster.jobs() if j.get("WorkDir") == str(work.resolve())]


def _cancel_first_train(cluster: LocalCluster, work: Path, done: threading.Event,
                        out: dict) -> None:  # fmt: skip
    """Once the first train job has written a checkpoint before its last step, `scancel` it
    (a preemption), and record the step it had reached."""
    while not done.is_set():
        progress = _progress(work)
        if progress and progress["step"] < progress["total_steps"]:
            for job in jobs_of(cluster, work):
                if rule_of(job.get("Comment", "")) == "train" and job["JobState"] == "RUNNING":
                    cluster.run("scancel", job["JobId"])
                    out.update(cancelled=job["JobId"], at_step=progress["step"])
                    return
        time.sleep(0.2)


def build_slurm_run(dpr_run: Path, where: Path, overlay: dict) -> Path:
    """The real-SLURM run of a copy of ``dpr_run`` (built with ``overlay``) in ``where``, its
    jobs on one thread each as the local run's (``--max-threads 1``), so their results are
    byte-identical to it. A local cluster (local_slurm.py) is brought up for it and down after
    it; the first training job is cancelled once it has written a checkpoint. Left for the
    tests: ``result.json`` (exit status, log tail, the cancelled job, the cluster's start and
    stop times, the run's wall time), ``jobs.json`` (what the controller recorded of every
    job) and the run (``work/``). A machine that cannot run SLURM leaves ``result.json`` with
    the reason (``unavailable``)."""
    where.mkdir()
    result: dict = {}
    cluster = LocalCluster()
    try:
        result["cluster_up_s"] = cluster.up(owner=os.getpid())
        result["pids"] = cluster.recorded()["pids"]
    except ClusterUnavailable as err:
        (where / "result.json").write_text(json.dumps({"unavailable": str(err)}))
        return where
    limit: dict = {}
    faults: dict = {}
    # Beside the main run, each on a copy of its own (the three mostly wait on the executor
    # plugin's status checks, whose interval grows by 10 s while no job ends): the time-limit
    # run and the faults, which took ~150 s after it.
    beside = [
        threading.Thread(target=_time_limit_run,
                         args=(cluster, dpr_run, where / "time-limit", overlay, limit)),
        threading.Thread(target=_faults_run,
                         args=(cluster, dpr_run, where / "faults", overlay, faults)),
    ]  # fmt: skip
    try:
        work = copy_run(dpr_run, where / "work")
        for thread in beside:
            thread.start()
        result.update(_run_through(cluster, work, where, overlay))
        (where / "hashes.json").write_text(json.dumps(result_hashes(work), indent=1))
        (where / "jobs.json").write_text(json.dumps(jobs_of(cluster, work), indent=1))
    finally:
        start = time.perf_counter()
        for thread in beside:
            if thread.ident is not None:  # started
                thread.join()
        # What the runs beside added to this one: the wait for them after it.
        limit["waited_s"] = time.perf_counter() - start
        result["time_limit"], result["faults"] = limit, faults
        result["cluster_down_s"] = cluster.down()
        # Jobs' processes that outlived their daemons (killed by down), and any still alive.
        result["leftovers_killed"] = cluster.leftovers
        result["leftovers_after_down"] = cluster.job_processes()
        (where / "result.json").write_text(json.dumps(result, indent=1))
    return where


def build_accounting_run(dpr_run: Path, where: Path, overlay: dict) -> dict:
    """The main run of ``build_slurm_run`` (a copy of ``dpr_run``, its mining forced, the
    first training cancelled after a checkpoint) on a cluster with accounting (``up
    --accounting``: slurmdbd and MariaDB, so ``sacct`` answers, and says ``CANCELLED by 0``),
    compared file for file with ``dpr_run``. Not in make test (the database takes its own
    minute to install and start): `python tests/slurm_run.py accounting DIR`. Returns, and
    leaves in ``where/result.json``: exit status, wall time, the cancelled job, what ``sacct``
    says of each job, and the files that differ from the local run."""
    where.mkdir(parents=True)
    cluster = LocalCluster()
    result: dict = {"cluster_up_s": cluster.up(owner=os.getpid(), accounting=True)}
    try:
        work = copy_run(dpr_run, where / "work")
        result.update(_run_through(cluster, work, where, overlay))
        hashes = result_hashes(work)
        result["sacct"] = cluster.run(
            "sacct", "-a", "-X", "-n", "-P", "-o", "JobID,JobName,State,ExitCode"
        ).stdout.splitlines()
    finally:
        result["cluster_down_s"] = cluster.down()
    compared, result["differ"] = differing_files(hashes, dpr_run)
    result["compared"] = len(compared)
    (where / "result.json").write_text(json.dumps(result, indent=1))
    return result


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def differing_files(hashes: dict[str, str], local: Path) -> tuple[list[str], list[str]]:
    """The files of ``hashes`` (result_hashes of a run) compared with the run ``local`` (those
    it has, reports aside: they hold timings), and those of them whose bytes differ."""
    compared = [r for r in hashes if not r.endswith(".json") and (local / r).is_file()]
    return compared, [r for r in compared if hashes[r] != _sha256(local / r)]


def result_hashes(work: Path) -> dict[str, str]:
    """sha256 of every file under ``work/results`` but logs and benchmarks' timings."""
    out = {}
    for path in sorted((work / "results").rglob("*")):
        rel = str(path.relative_to(work))
        if path.is_file() and not rel.startswith(("results/logs/", "results/benchmarks/")):
            out[rel] = _sha256(path)
    return out


def slurm_cmd(work: Path, profile_dir: Path, overlay_file: Path, *args: str) -> list[str]:
    return [str(SNAKEMAKE), *args, "--profile", str(profile_dir), "-s", str(REPO / "Snakefile"),
            "--directory", str(work), "--sdm", "env-modules", "--jobs", "2", "--max-threads", "1",
            "--slurm-init-seconds-before-status-checks", "1", "--latency-wait", "5",
            "--configfile", str(REPO / "config.yaml"), str(overlay_file)]  # fmt: skip


def _env(cluster: LocalCluster) -> dict[str, str]:
    return cluster.env(env_with(DATA_MIRROR=str(mirror_dir()), HF_HUB_OFFLINE="1",
                                TOKENIZERS_PARALLELISM="false"))  # fmt: skip


def _overlay_file(work: Path, overlay: dict) -> Path:
    """``overlay`` with SLURM_OVERLAY, written as the run ``work``'s config file."""
    path = work / "tiny.yaml"
    path.write_text(yaml.safe_dump(deep_merge(overlay, SLURM_OVERLAY)))
    return path


def _run_through(cluster: LocalCluster, work: Path, where: Path, overlay: dict) -> dict:
    overlay_file = _overlay_file(work, overlay)
    profile_dir = profile_with_overrides(where / "profile")
    cmd = slurm_cmd(work, profile_dir, overlay_file, TARGET, "--forcerun", FORCED)
    done, cancelled = threading.Event(), {}
    killer = threading.Thread(target=_cancel_first_train, args=(cluster, work, done, cancelled))
    killer.start()
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(cluster),
                              timeout=3000)  # fmt: skip
    finally:
        done.set()
        killer.join()
    (where / "run.log").write_text(proc.stdout + proc.stderr)
    return {"returncode": proc.returncode, "wall_s": time.perf_counter() - start,
            "log": proc.stdout[-3000:] + proc.stderr[-6000:],
            "cancelled": cancelled.get("cancelled"), "at_step": cancelled.get("at_step")}  # fmt: skip


# The time-limit run: a second copy of the DPR run, its training alone rerun through a copy of
# the profile that gives it two minutes (Snakemake's `runtime` is in minutes). Its first attempt
# is frozen after its first checkpoint, standing for a training longer than its limit without
# spending a core of the test machine on it meanwhile. The retry must finish within the same
# limit: two Snakemake start-ups, drpipe's imports and the remaining steps took 62 s on a slow
# 2-core machine under the test suite's load (Intel Xeon VM, AVX-512, no bf16), so one minute,
# the least SLURM takes, timed the retry out too. Its memory is lowered so that it never holds
# what the main run's jobs need (two trainings' 256 GB would fill the node).
TIME_LIMIT = {"train": {"runtime": 2, "mem_mb": 16000}}
MODEL_REPORT = "results/models/dpr/squad.report.json"


def _trainings_in(work: Path) -> list[int]:
    """PIDs of the `drpipe train` processes running in ``work``."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if os.readlink(proc / "cwd") != str(work.resolve()):
                continue
            argv = [Path(a.decode(errors="replace")).name
                    for a in (proc / "cmdline").read_bytes().split(b"\0")]  # fmt: skip
        except OSError:  # it has ended
            continue
        if "drpipe" in argv and argv[argv.index("drpipe") + 1 :][:1] == ["train"]:
            pids.append(int(proc.name))
    return pids


def _freeze_first_train(cluster: LocalCluster, work: Path, done: threading.Event,
                        out: dict) -> None:  # fmt: skip
    """Once the first train job in ``work`` has written a checkpoint before its last step,
    stop its training (SIGSTOP): the job holds its allocation and its clock runs, as a longer
    training's would, until SLURM kills it at its limit (SIGTERM, then SIGKILL KillWait
    later). Records the job and the step its checkpoint holds."""
    while not done.is_set():
        progress = _progress(work)
        if progress and progress["step"] < progress["total_steps"]:
            running = [j["JobId"] for j in jobs_of(cluster, work)
                       if rule_of(j.get("Comment", "")) == "train" and j["JobState"] == "RUNNING"]  # fmt: skip
            pids = _trainings_in(work)
            if running and pids:
                for pid in pids:
                    os.kill(pid, signal.SIGSTOP)
                # Read again once stopped: a step may have ended since.
                out.update(frozen=running[0], at_step=_progress(work)["step"])
                return
        time.sleep(0.2)


def _time_limit_run(cluster: LocalCluster, dpr_run: Path, where: Path, overlay: dict,
                    out: dict) -> None:  # fmt: skip
    """The time-limit run (TIME_LIMIT) in ``where``, beside the main run: a copy of
    ``dpr_run``, its training forced to rerun with a checkpoint every step, its first attempt
    frozen after its first checkpoint. Left in ``out``: Snakemake's exit status, log and wall
    time, the frozen job and the step its checkpoint held, every job of the run as the
    controller recorded it, the step the final report says the training resumed from, and
    the hashes of the model's files (``error`` if the run could not be made)."""
    try:
        where.mkdir()
        work = copy_run(dpr_run, where / "work")
        overlay_file = _overlay_file(work, overlay)
        prof = profile_with_overrides(where / "profile", TIME_LIMIT)
        cmd = slurm_cmd(work, prof, overlay_file, MODEL_REPORT, "--forcerun", "train")
        done = threading.Event()
        freezer = threading.Thread(target=_freeze_first_train, args=(cluster, work, done, out))
        freezer.start()
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(cluster),
                                  timeout=1200)  # fmt: skip
        finally:
            done.set()
            freezer.join()
        log = _short(proc)
        (where / "run.log").write_text(log)
        out.update(returncode=proc.returncode, wall_s=time.perf_counter() - start,
                   log=log, jobs=jobs_of(cluster, work))  # fmt: skip
        report = work / MODEL_REPORT
        if report.is_file():
            out["resumed_from_step"] = json.loads(report.read_text()).get("resumed_from_step")
        model = MODEL_REPORT.removesuffix(".report.json") + "/"
        out["hashes"] = {r: h for r, h in result_hashes(work).items() if r.startswith(model)}
    except Exception:
        out["error"] = traceback.format_exc()


def _killed_and_restarted(cluster: LocalCluster, work: Path, prof: Path,
                          overlay_file: Path) -> dict:  # fmt: skip
    """Snakemake SIGKILLed while its evaluation job runs, unlocked (`--unlock`, as Snakemake
    says), then started again twice: while the job is still in the queue (held there with
    `scontrol suspend`), and after it has ended."""
    out: dict = {}
    before = {j["JobId"] for j in jobs_of(cluster, work)}
    cmd = slurm_cmd(work, prof, overlay_file, METRICS, "--forcerun", "evaluate")
    first = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env=_env(cluster), start_new_session=True)  # fmt: skip
    deadline, orphan = time.monotonic() + 300, None
    while orphan is None and time.monotonic() < deadline and first.poll() is None:
        running = [j for j in jobs_of(cluster, work) if j["JobId"] not in before
                   and j["JobState"] == "RUNNING"]  # fmt: skip
        orphan = running[0]["JobId"] if running else None
        time.sleep(0.2)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    if orphan is None:
        return {"error": "the evaluation job was not seen running"}
    cluster.run("scontrol", "suspend", orphan)
    out["orphan"] = orphan
    # Snakemake's lock on the folder outlives a SIGKILL: what a user is told to do first.
    unlock = subprocess.run(slurm_cmd(work, prof, overlay_file, METRICS, "--unlock"),
                            capture_output=True, text=True, env=_env(cluster), timeout=600)  # fmt: skip
    out["unlock"] = unlock.returncode
    again = subprocess.run(slurm_cmd(work, prof, overlay_file, METRICS), capture_output=True,
                           text=True, env=_env(cluster), timeout=600)  # fmt: skip
    out["while_queued"] = {"returncode": again.returncode, "log": _short(again)}
    cluster.run("scontrol", "resume", orphan)
    while time.monotonic() < deadline and any(
        j["JobId"] == orphan and j["JobState"] not in ("COMPLETED", "FAILED", "CANCELLED")
        for j in cluster.jobs()
    ):
        time.sleep(0.5)
    done = subprocess.run(slurm_cmd(work, prof, overlay_file, METRICS), capture_output=True,
                          text=True, env=_env(cluster), timeout=600)  # fmt: skip
    out["after"] = {"returncode": done.returncode, "log": _short(done)}
    out["jobs"] = [j for j in jobs_of(cluster, work) if j["JobId"] not in before]
    metrics = work / METRICS.replace(".json", ".per_question.parquet")
    out["per_question_sha256"] = hashlib.sha256(metrics.read_bytes()).hexdigest()
    return out


def _short(proc: subprocess.CompletedProcess) -> str:
    """A Snakemake run's output without the base64 arguments of the job commands it prints
    (kilobytes each)."""
    return re.sub(r"base64//\S+", "…", proc.stdout + proc.stderr)


def _faults_run(cluster: LocalCluster, dpr_run: Path, where: Path, overlay: dict,
               out: dict) -> None:  # fmt: skip
    """_faults on a copy of ``dpr_run`` in ``where`` (a finished run, as the main run's is
    once it ends), with the main run's overlay and profile; an exception is left in ``out``
    as ``error``."""
    try:
        where.mkdir(parents=True)
        work = copy_run(dpr_run, where / "work")
        _overlay_file(work, overlay)
        profile_with_overrides(where / "profile")
        out.update(_faults(cluster, work, where, overlay))
    except Exception:  # noqa: BLE001 - the tests read it
        out["error"] = traceback.format_exc()[-4000:]


def _faults(cluster: LocalCluster, work: Path, where: Path, overlay: dict) -> dict:
    """Faults on a finished run's smallest jobs:
    - ``check``: `drpipe cluster-check` of the plan with evaluation asking for more memory
      than a node of its partition has;
    - ``killed``: Snakemake killed while a job runs, and started again (twice);
    - ``bad_input``: evaluation reads a run file that is not a Parquet file."""
    overlay_file = work / "tiny.yaml"
    faults = {}
    # A request the cluster cannot satisfy, found before the run: `drpipe cluster-check` of
    # the whole plan with a profile whose evaluation asks for 1 TB (its submission would fail
    # with the same sbatch message; docs/cluster.md).
    big = profile_with_overrides(where / "profile-big", {"evaluate": {"mem_mb": 10**6}})
    proc = subprocess.run(
        [str(DRPIPE), "cluster-check", TARGET, "--directory", str(work), "--snakemake-args",
         shlex.join(["--profile", str(big), "--forcerun", FORCED, "--sdm", "env-modules",
                     "--configfile",
                     str(REPO / "config.yaml"), str(overlay_file)])],
        capture_output=True, text=True, env=_env(cluster), timeout=600,
    )  # fmt: skip
    faults["check"] = {"returncode": proc.returncode, "log": proc.stdout + proc.stderr[-3000:]}
    faults["killed"] = _killed_and_restarted(cluster, work, where / "profile", overlay_file)
    before = {j["JobId"] for j in jobs_of(cluster, work)}
    run = work / "results/runs/dpr/squad/squad-test.parquet"
    run.write_text("not a parquet file\n")
    os.utime(run)  # newer than its metrics: mtime reruns the evaluation
    proc = subprocess.run(slurm_cmd(work, where / "profile", overlay_file, METRICS),
                          capture_output=True, text=True, env=_env(cluster), timeout=600)  # fmt: skip
    faults["bad_input"] = {
        "returncode": proc.returncode, "log": _short(proc),
        "jobs": [j for j in jobs_of(cluster, work) if j["JobId"] not in before],
    }  # fmt: skip
    return faults


# Every paper-scale table, Table 4's readers and its k view, DCSR's hard-negative trainings.
PAPER_PLAN_TARGETS = ("results/run_summary.md", "results/table4.csv", "results/table4-k.csv")


def paper_plan_cmd(workdir: Path, *targets: str) -> list[str]:
    """The paper scale's dry run of ``targets`` with the SLURM profile, in ``workdir``."""
    # Conda is absent on these machines: environment modules instead (no rule declares any).
    return [str(SNAKEMAKE), "-n", "-p", *targets, "--profile", str(PROFILE), "--config", "scale=paper",
            "-s", str(REPO / "Snakefile"), "--directory", str(workdir),
            "--sdm", "env-modules"]  # fmt: skip


def per_job(value: object) -> bool:
    """Whether a profile value is an expression Snakemake evaluates per job (a partition that
    follows the index type, DCSR's index memory), not the value itself."""
    return " if " in str(value)


def build_paper_plan(where: Path) -> Path:
    """The paper scale's dry run of PAPER_PLAN_TARGETS with the SLURM profile, its output in
    ``where/plan.txt`` (each job with the resources the executor plugin would submit and its
    shell command) and its time in ``where/timing.json``: the one paper-scale plan that the
    tests of the paper scale's structure read."""
    where.mkdir()
    cmd = paper_plan_cmd(where / "work", *PAPER_PLAN_TARGETS)
    env = env_with(DATA_MIRROR=str(mirror_dir()))
    start = time.perf_counter()
    # The dry run's own CPU time (os.wait4), not the builder's RUSAGE_CHILDREN: the real-SLURM
    # run's processes, in another thread, end meanwhile and would be counted in it.
    with (where / "plan.txt").open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        timer = threading.Timer(900, proc.kill)  # a hung plan fails rather than waits
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:
            proc.kill()
            raise
        finally:
            timer.cancel()
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    assert code == 0, (where / "plan.txt").read_text()[-4000:]
    # CPU time, not wall: other processes on a shared 2-core machine stretch wall time.
    cpu = usage.ru_utime + usage.ru_stime
    (where / "timing.json").write_text(json.dumps({"wall": wall, "cpu": cpu}))
    return where


if __name__ == "__main__":
    # `python slurm_run.py profile DIR`: profiles/slurm with OVERRIDES (make rehearse
    # PROFILE=slurm submits through it). `python slurm_run.py accounting DIR`: the tiny DPR run
    # built in DIR, then through SLURM with accounting (build_accounting_run).
    if sys.argv[1:2] not in (["profile"], ["accounting"]) or len(sys.argv) != 3:
        sys.exit("usage: python slurm_run.py profile|accounting DIR")
    if sys.argv[1] == "profile":
        print(profile_with_overrides(Path(sys.argv[2])))
    else:
        import tiny_run  # imports this module: here, not at the top

        root = Path(sys.argv[2])
        root.mkdir(parents=True, exist_ok=True)
        dpr = tiny_run.build(root, "tiny-dpr")
        done = build_accounting_run(dpr, root / "accounting", tiny_run.DPR_OVERLAY)
        print(json.dumps(done, indent=1))
        sys.exit(0 if done["returncode"] == 0 and not done["differ"] else 1)
