"""Run Snakemake on this repository's workflow in a scratch directory and read its plan."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

import yaml

from drpipe.forkserver import jobs_forked

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = Path(sys.executable).with_name("snakemake")


def mirror_dir() -> Path:
    """The real-data mirror: ``DATA_MIRROR``, else ``../shared/data`` beside the checkout."""
    return Path(os.environ.get("DATA_MIRROR", REPO.parent / "shared" / "data")).resolve()


def copy_run(src: Path, dest: Path, link_results: bool = False) -> Path:
    """A copy of a run's directory with its mtimes and Snakemake metadata (``cp -a``);
    ``link_results``: its ``results/`` as hard links (for a run that reads them and writes its
    own outputs anew, never in place)."""
    if not link_results:
        subprocess.run(["cp", "-a", str(src), str(dest)], check=True)
        return dest
    dest.mkdir()
    for item in src.iterdir():
        how = "-al" if item.name == "results" else "-a"
        subprocess.run(["cp", how, str(item), str(dest / item.name)], check=True)
    return dest


def copy_checkout(dest: Path) -> Path:
    """A copy of the workflow (Snakefile, config, package, profiles) at ``dest``; run it with
    ``repo=dest`` (the copy's package is put first on PYTHONPATH)."""
    import shutil

    dest.mkdir(parents=True, exist_ok=True)
    for name in ("Snakefile", "config.yaml"):
        shutil.copy2(REPO / name, dest / name)
    for name in ("workflow", "config", "profiles", "envs"):
        shutil.copytree(REPO / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


class _Zygote:
    """Client of snakemake_zygote.py: runs a `snakemake` command as a fork of a process that
    has Snakemake and torch imported (started on first use, one per pytest process). ``bare``:
    the zygote of other checkouts' commands (another PYTHONPATH), which preloads no drpipe."""

    def __init__(self, bare: bool = False) -> None:
        self.bare = bare
        self.proc: subprocess.Popen | None = None
        self.pythonpath: str | None = None
        self.cpu_seconds = 0.0  # CPU of the children, which the pytest process's rusage misses
        self.off = os.environ.get("DRPIPE_TEST_ZYGOTE") == "0"

    def _line(self, deadline: float | None) -> str | None:
        """The zygote's next answer; None if none came before ``deadline``."""
        assert self.proc is not None and self.proc.stdout is not None
        fd, data = self.proc.stdout.fileno(), b""
        while not data.endswith(b"\n"):
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([fd], [], [], wait)[0]:
                return None
            chunk = os.read(fd, 64)
            if not chunk:
                raise EOFError("the snakemake zygote exited")
            data += chunk
        return data.decode().strip()

    def run(self, cmd: list[str], env: dict, timeout: float) -> subprocess.CompletedProcess | None:
        """``cmd`` run by a fork of the zygote; None where a fork would not be the same as a
        new process (the zygote's own PYTHONPATH, or, bare, another) or the zygote is not
        available."""
        running = self.proc is not None and self.proc.poll() is None
        own = self.pythonpath if running else os.environ.get("PYTHONPATH")
        if self.off or (env.get("PYTHONPATH") == own) == self.bare:
            return None
        if not running:
            self.pythonpath = own
            self.proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).with_name("snakemake_zygote.py")),
                 *(["--bare"] if self.bare else [])],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={**os.environ},
            )  # fmt: skip
        with tempfile.TemporaryDirectory() as tmp:
            out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
            request = {"argv": cmd, "env": env, "cwd": os.getcwd(), "stdout": str(out),
                       "stderr": str(err)}  # fmt: skip
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.write((json.dumps(request) + "\n").encode())
                self.proc.stdin.flush()
                pid = int(self._line(None) or "0")
            except (EOFError, BrokenPipeError, ValueError):
                self.off = True  # it could not start: plain processes from now on
                return None
            answer = self._line(time.monotonic() + timeout)
            if answer is None:
                os.kill(pid, signal.SIGKILL)
                self._line(None)
                raise subprocess.TimeoutExpired(cmd, timeout, out.read_text(), err.read_text())
            code, cpu = answer.split()
            self.cpu_seconds += float(cpu)
            return subprocess.CompletedProcess(cmd, int(code), out.read_text(), err.read_text())


_ZYGOTE = _Zygote()
_BARE_ZYGOTE = _Zygote(bare=True)


# The job zygote (drpipe.forkserver) that the builder's runs and the benchmarks' smokes share.
RUNS_ZYGOTE = "runs"


def tool_env() -> dict[str, str]:
    """This environment with the venv's commands (snakemake, drpipe) first on PATH."""
    return {**os.environ, "PATH": f"{SNAKEMAKE.parent}{os.pathsep}{os.environ['PATH']}"}


def snakemake(
    workdir: Path,
    *args: str,
    overlay: dict | None = None,
    check: bool = True,
    # Generous: a tiny DAG takes ~5 min on a quiet 2-core box, several times that when the
    # machine is shared; the bound only stops a hung run.
    timeout: int = 3600,
    repo: Path = REPO,
    python_path: bool = True,
    fork_jobs: bool | str = False,
) -> subprocess.CompletedProcess:
    """Run a checkout's Snakefile (this repository's by default) with results under
    ``workdir``. For another checkout, ``python_path`` puts its package first on PYTHONPATH.
    ``fork_jobs``: the jobs' `drpipe` runs as forks of a preloaded process (drpipe.forkserver),
    for runs of many jobs; a name keeps that process for the next run given the same name."""
    # Targets and flags first: --configfile (below) takes every word after it.
    cmd = [
        str(SNAKEMAKE),
        *args,
        "-s",
        str(repo / "Snakefile"),
        "--directory",
        str(workdir),
        "--profile",
        str(repo / "profiles" / "default"),
        "--cores",
        "2",
        # Two one-thread jobs at once: the tests' own process runs beside them (conftest.py).
        "--max-threads",
        "1",
        "--configfile",
        str(repo / "config.yaml"),
    ]
    if overlay is not None:
        # Named by its content and written atomically: two processes (the session and its
        # background builder of tiny runs, or pytest-xdist workers) may dry-run the
        # same shared run with the same overlay at once.
        text = yaml.safe_dump(overlay)
        path = workdir / f"overlay-{hashlib.sha256(text.encode()).hexdigest()[:8]}.yaml"
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(path)
        cmd.append(str(path))
    env = tool_env()
    if repo != REPO and python_path:
        env["PYTHONPATH"] = str(repo / "workflow")
    keep = fork_jobs if isinstance(fork_jobs, str) else None
    with jobs_forked(env, keep) if fork_jobs else nullcontext(env) as env:
        proc = _ZYGOTE.run(cmd, env, timeout) or _BARE_ZYGOTE.run(cmd, env, timeout)
        if proc is None:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"snakemake {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n"
            f"{proc.stderr[-8000:]}"
        )
    return proc


_JOB = re.compile(r"^(?:local)?rule (\w+):\n(?:(?:    .*)\n)*?    output: (.*)$", re.M)


def planned_jobs(
    workdir: Path, *targets: str, overlay: dict | None = None, repo: Path = REPO
) -> set[tuple[str, str]]:
    """(rule, first output) of every job a dry run would execute."""
    proc = snakemake(workdir, "-n", *targets, overlay=overlay, repo=repo)
    text = proc.stdout + proc.stderr
    return {(m.group(1), m.group(2).split(",")[0].strip()) for m in _JOB.finditer(text)}


_BLOCK = re.compile(r"^(?:local)?rule (\w+):\n((?:    .*\n)*)", re.M)


def planned_job_files(
    workdir: Path, *targets: str, overlay: dict | None = None, repo: Path = REPO
) -> list[dict]:
    """Every job a dry run would execute: {"rule", "input": [...], "output": [...]}."""
    proc = snakemake(workdir, "-n", *targets, overlay=overlay, repo=repo)
    jobs = []
    for m in _BLOCK.finditer(proc.stdout + proc.stderr):
        fields = dict(
            line.strip().split(": ", 1) for line in m.group(2).splitlines() if ": " in line
        )
        files = {k: [f.strip() for f in fields.get(k, "").split(",") if f.strip()]
                 for k in ("input", "output")}  # fmt: skip
        jobs.append({"rule": m.group(1), **files})
    return jobs


_RULES = r"""
import json, sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.io import is_flagged
from snakemake.settings.types import OutputSettings, ResourceSettings, StorageSettings
with SnakemakeApi(OutputSettings(quiet=None)) as api:
    wf = api.workflow(snakefile=Path(sys.argv[1]), workdir=Path(sys.argv[2]),
                      resource_settings=ResourceSettings(cores=1),
                      storage_settings=StorageSettings())
    print(json.dumps({
        "directories": {r.name: [is_flagged(o, "directory") for o in r.output]
                        for r in wf._workflow.rules},
        "local": sorted(wf._workflow._localrules),
    }))
"""


def _rules(workdir: Path, repo: Path = REPO) -> dict:
    """What Snakemake's API says of a checkout's rules (loaded in a process of its own)."""
    env = {**os.environ}
    if repo != REPO:
        env["PYTHONPATH"] = str(repo / "workflow")
    proc = subprocess.run(
        [sys.executable, "-c", _RULES, str(repo / "Snakefile"), str(workdir)],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def rule_directory_outputs(workdir: Path, repo: Path = REPO) -> dict[str, list[bool]]:
    """rule -> for each of its outputs, in order, whether it is declared a `directory()`."""
    return _rules(workdir, repo)["directories"]


def local_rules(workdir: Path) -> set[str]:
    """The workflow's `localrules` (run where Snakemake runs, under any executor)."""
    return set(_rules(workdir)["local"])


def touched_run(
    workdir: Path, *targets: str, overlay: dict | None = None, repo: Path = REPO
) -> Path:
    """A finished run of ``targets`` in ``workdir`` in seconds, for questions about reruns:
    `snakemake --touch --forceall` records Snakemake's metadata (params, code, inputs, shell
    command) of every job a dry run plans, as a real run does, then each job gets empty
    outputs, dated in the dry run's (the DAG's) order. No job's command runs.

    The outputs are made after the touch, not before: Snakemake's touch sleeps 0.1 s per job
    whose outputs exist (so that their times follow the DAG on a coarse clock), ~18 s for
    the shared run's DAG; the times set here are a millisecond apart."""
    directories = rule_directory_outputs(workdir, repo)
    jobs = planned_job_files(workdir, *targets, overlay=overlay, repo=repo)
    snakemake(workdir, "--touch", "--forceall", *targets, overlay=overlay, repo=repo)
    outputs = [[workdir / out for out in job["output"]] for job in jobs]
    for job, paths in zip(jobs, outputs, strict=True):
        for path, is_dir in zip(paths, directories[job["rule"]], strict=True):
            if is_dir:
                path.mkdir(parents=True, exist_ok=True)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.touch()
    # Dated once all exist (making a file in a folder would move the folder's own time), the
    # last job now: no date in the future, where a test's edit right after would look older.
    start = time.time_ns() - len(outputs) * 1_000_000
    for step, paths in enumerate(outputs, start=1):
        for path in paths:
            os.utime(path, ns=(start + step * 1_000_000,) * 2)
    left = planned_jobs(workdir, *targets, overlay=overlay, repo=repo)
    assert not left, f"jobs left to run after touching them all: {sorted(left)[:5]}"
    return workdir


def plan_jobs(plan_dir: Path) -> list[dict]:
    """The jobs of a dry run saved as ``plan_dir/plan.txt`` with its shell commands (the
    shared paper-scale plan, slurm_run.build_paper_plan): rule, input, output and log files
    (drpipe.audit's parser), the shell command, its --cfg JSON text and the resources line.
    Parsed once per file version (~3 s for the paper scale's 4,600 jobs; several tests read
    it); the jobs are shared, not to be changed."""
    path = (plan_dir / "plan.txt").resolve()
    return list(_plan_jobs(path, path.stat().st_mtime_ns))


@functools.cache
def _plan_jobs(path: Path, mtime_ns: int) -> tuple[dict, ...]:
    from drpipe.audit.staleness import parse_dry_run

    text = path.read_text()
    blocks = [b for b in re.split(r"^(?=(?:local)?rule \w+:$)", text, flags=re.M)
              if re.match(r"(?:local)?rule (?!all:)\w+:$", b, flags=re.M)]  # fmt: skip
    jobs = parse_dry_run(text, commands=True)
    assert len(blocks) == len(jobs)
    for job, block in zip(jobs, blocks, strict=True):
        cfg = re.search(r"--cfg '([^']*)'", job["shell"] or "")
        job["cfg_text"] = cfg.group(1) if cfg else ""
        job["resources"] = (re.findall(r"^    resources: (.*)$", block, flags=re.M) or [""])[0]
    return tuple(jobs)
