"""A fake SLURM for tests: sbatch, squeue, sacct, scancel, srun, sinfo, scontrol on one machine.

The wrapper scripts next to this file (put first on PATH) call ``fake_slurm.py <command> ...``.
State lives in ``$FAKE_SLURM_DIR``:

- ``requests.jsonl``: one line per sbatch, srun and scancel call (argv, job id, time);
- ``jobs/<id>.json``: name, comment, state (PENDING, RUNNING, COMPLETED, FAILED, CANCELLED),
  the runner's process group; ``jobs/<id>.out``: the job's output (``--output``).

``sbatch`` starts each job at once, in its own session, through ``fake_slurm.py _run <id>``,
which runs the ``--wrap`` command (or the script read from stdin) in the ``-D`` directory with
``SLURM_JOB_ID`` and friends set, and records how it ended. ``scancel`` marks the job CANCELLED
and kills its process group, as SLURM would. ``srun`` drops its options and runs the command.
Nothing here enforces resources: the tests read what was asked from ``requests.jsonl``.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager, suppress
from pathlib import Path

STATE = Path(os.environ.get("FAKE_SLURM_DIR", "/tmp/fake_slurm"))
JOBS = STATE / "jobs"
NO_VALUE = {"--parsable", "--requeue", "--no-requeue", "--noheader", "-X", "--parsable2"}


@contextmanager
def locked():
    STATE.mkdir(parents=True, exist_ok=True)
    JOBS.mkdir(exist_ok=True)
    with open(STATE / "lock", "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def record(entry: dict) -> None:
    with locked(), open(STATE / "requests.jsonl", "a") as fh:
        fh.write(json.dumps({**entry, "time": time.time()}) + "\n")


def parse(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """Options (``--key=value``, ``--key value``, ``-k value``, flags) and positionals."""
    opts: dict[str, str] = {}
    pos: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--") and "=" in a:
            key, value = a.split("=", 1)
            opts[key] = value
        elif a in NO_VALUE:
            opts[a] = ""
        elif a.startswith("-") and len(a) > 1 and i + 1 < len(argv):
            opts[a] = argv[i + 1]
            i += 1
        else:
            pos.append(a)
        i += 1
    return opts, pos


def job_path(job_id: str) -> Path:
    return JOBS / f"{job_id}.json"


def read_job(job_id: str) -> dict:
    return json.loads(job_path(job_id).read_text())


def write_job(job: dict) -> None:
    tmp = job_path(job["id"]).with_suffix(".tmp")
    tmp.write_text(json.dumps(job))
    os.replace(tmp, job_path(job["id"]))


def sbatch(argv: list[str]) -> int:
    opts, pos = parse(argv)
    with locked():
        counter = STATE / "next_id"
        job_id = str(int(counter.read_text()) if counter.exists() else 1000)
        counter.write_text(str(int(job_id) + 1))
    if "--wrap" in opts:
        command = opts["--wrap"]
    elif pos:
        script = JOBS / f"{job_id}.sh"
        script.write_text(sys.stdin.read() if pos[0] == "/dev/stdin" else Path(pos[0]).read_text())
        command = f"/bin/sh {script}"
    else:
        print("sbatch: error: no command: use --wrap or a script", file=sys.stderr)
        return 1
    output = opts.get("--output", str(JOBS / "%j.out")).replace("%j", job_id)
    job = {
        "id": job_id,
        "name": opts.get("--job-name", ""),
        "comment": opts.get("--comment", ""),
        "state": "PENDING",
        "command": command,
        "workdir": opts.get("-D", os.getcwd()),
        "output": output,
        "options": opts,
    }
    write_job(job)
    record({"cmd": "sbatch", "job_id": job_id, "argv": argv, "options": opts})
    runner = subprocess.Popen(
        [sys.executable, __file__, "_run", job_id],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )
    with locked():
        job = read_job(job_id)
        job["pgid"] = runner.pid  # a new session: its process group id is its pid
        write_job(job)
    print(job_id)
    return 0


def run_job(job_id: str) -> int:
    """The body of one job (runs detached, in the job's own session)."""
    with locked():
        job = read_job(job_id)
        if job["state"] == "CANCELLED":
            return 0
        job["state"] = "RUNNING"
        job["pgid"] = os.getpgid(0)
        write_job(job)
    opts = job["options"]
    env = dict(os.environ)
    env.update(
        {
            "SLURM_JOB_ID": job_id,
            "SLURM_JOBID": job_id,
            "SLURM_JOB_NAME": job["name"],
            "SLURM_CPUS_PER_TASK": opts.get("--cpus-per-task", "1"),
            "SLURM_SUBMIT_DIR": job["workdir"],
        }
    )
    if opts.get("--gpus"):
        env["SLURM_GPUS"] = opts["--gpus"].split(":")[-1]
    Path(job["output"]).parent.mkdir(parents=True, exist_ok=True)
    with open(job["output"], "ab") as out:
        rc = subprocess.call(
            ["/bin/sh", "-c", job["command"]],
            cwd=job["workdir"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    with locked():
        job = read_job(job_id)
        if job["state"] != "CANCELLED":
            job["state"] = "COMPLETED" if rc == 0 else "FAILED"
            job["exit_code"] = rc
            write_job(job)
    return 0


def jobs_named(name: str | None) -> list[dict]:
    out = []
    for path in sorted(JOBS.glob("*.json")):
        try:
            job = json.loads(path.read_text())
        except json.JSONDecodeError:
            continue
        if name is None or job["name"] == name:
            out.append(job)
    return out


def squeue(argv: list[str]) -> int:
    opts, _ = parse(argv)
    for job in jobs_named(opts.get("--name")):
        print(f"{job['id']}|{job['state']}")
    return 0


def sacct(argv: list[str]) -> int:
    opts, _ = parse(argv)
    fmt = opts.get("--format", opts.get("-o", ""))
    if "Account" in fmt:  # the plugin guessing an account: this cluster has none
        return 0
    for job in jobs_named(opts.get("--name")):
        print(f"{job['id']}|{job['state']}")
    return 0


def scancel(argv: list[str]) -> int:
    _, ids = parse(argv)
    record({"cmd": "scancel", "argv": argv, "job_ids": ids})
    for job_id in ids:
        if not job_path(job_id).exists():
            continue
        with locked():
            job = read_job(job_id)
            if job["state"] in ("COMPLETED", "FAILED", "CANCELLED"):
                continue
            job["state"] = "CANCELLED"
            write_job(job)
        if job.get("pgid"):
            with suppress(ProcessLookupError):
                os.killpg(job["pgid"], signal.SIGTERM)
    return 0


def srun(argv: list[str]) -> int:
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        i += 1
    record({"cmd": "srun", "job_id": os.environ.get("SLURM_JOB_ID"), "argv": argv[:i]})
    if i == len(argv):
        print("srun: error: no command", file=sys.stderr)
        return 1
    os.execvp(argv[i], argv[i:])
    return 1  # not reached


def scontrol(argv: list[str]) -> int:
    if argv[:2] == ["show", "config"]:
        print("MinJobAge               = 300 sec\nMaxArraySize            = 1001")
    return 0


def quiet(argv: list[str]) -> int:
    return 0


COMMANDS = {
    "sbatch": sbatch,
    "squeue": squeue,
    "sacct": sacct,
    "scancel": scancel,
    "srun": srun,
    "scontrol": scontrol,
    "sinfo": quiet,
    "sacctmgr": quiet,
    "sshare": quiet,
}


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "_run":
        sys.exit(run_job(args[0]))
    sys.exit(COMMANDS[cmd](args))
