"""A real single-node SLURM on this machine, for the tests and for a user's rehearsal.

Debian's ``slurmctld slurmd slurm-client munge`` (installed by ``ensure_packages`` where this
runs as root with apt), started without systemd as children of the process that brings the
cluster up: munged, slurmctld and slurmd in the foreground, their PIDs recorded in
``state.json``. Everything they write is under one folder (default ``/tmp/drpipe-slurm``,
``DRPIPE_SLURM_DIR`` to change it).

The node advertises what the SLURM profile's paper-scale jobs ask for (64 CPUs, 512 GB, 8 GPUs
as GRES, ``SlurmdParameters=config_overrides``), so every request is checked against a real
scheduler on a CPU box; ``EnforcePartLimits=ALL`` and the partitions' ``MaxMemPerNode`` make a
request the cluster cannot satisfy fail at sbatch, as on a real cluster. No accounting daemon
by default (the profile must work without one; that is where the executor plugin's default
``sacct`` status command hangs). ``up --accounting`` adds one, opt-in and not used by make test
(``python tests/slurm_run.py accounting DIR`` runs the tiny DAG on it):
a MariaDB server (``mariadbd``, its data under the cluster's folder, on a free local port) and
``slurmdbd`` storing in it, so that ``sacct`` answers as on most real clusters (Debian's
``slurmdbd mariadb-server``, installed if missing).

Slurm runs configless (``enable_configless``; slurmd fetches the configuration from
slurmctld): the executor plugin's in-job ``srun`` drops ``SLURM_CONF``, and a client without
it finds slurmd's cached copy at ``/run/slurm/conf``, as on most real clusters. Outside jobs
the commands read ``SLURM_CONF`` (``LocalCluster.env()``).

One cluster per machine: ``up`` takes ``<dir>.lock`` (fcntl) while it checks and starts, and
refuses when a recorded cluster is still alive. ``down`` cancels every job, sends TERM to each
recorded PID, KILL after a timeout, kills what is left of the jobs' processes (found by their
``SLURM_CONF``), and removes what ``up`` wrote.

Command line: ``tests/slurm/local-cluster up|down|status|install``, or ``run -- COMMAND``
(up, the command with ``SLURM_CONF`` set, down even if it fails); ``--accounting`` with ``up``,
``run`` or ``install``.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import system_packages

DAEMONS = ("munged", "slurmctld", "slurmd")
# With accounting (``up --accounting``): the database and slurmdbd start before slurmctld.
ACCOUNTING_DAEMONS = ("munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd")
ACCOUNTING_PACKAGES = ("slurmdbd", "mariadb-server")
ACCOUNTING_BINARIES = ("slurmdbd", "mariadbd", "mariadb-install-db", "mariadb", "sacct",
                       "sacctmgr")  # fmt: skip
NODE = "drpipe-node"
# What the node advertises: the profile's largest requests (training: 8 GPUs, 32 CPUs,
# 256 GB; DCSR's index: 320 GB) fit; MAX_MEM_MB is each partition's per-node limit.
CPUS, REAL_MEM_MB, MAX_MEM_MB, GPUS = 64, 512_000, 400_000, 8
CONF_LINK = Path("/run/slurm/conf")
# munge's own socket path: slurmd asks slurmctld for its configuration (configless) before it
# has read any AuthInfo, so it can only reach munged where munge puts it by default.
MUNGE_SOCKET = Path("/run/munge/munge.socket.2")


class ClusterUnavailable(RuntimeError):
    """SLURM cannot be started here (not root, no packages and no way to install them)."""


def default_dir() -> Path:
    return Path(os.environ.get("DRPIPE_SLURM_DIR", "/tmp/drpipe-slurm"))


def ensure_packages(accounting: bool = False) -> None:
    """Debian's SLURM and munge (and with ``accounting`` slurmdbd and MariaDB), installed if
    missing (system_packages.py); ClusterUnavailable with the reason where that cannot be done
    (not root, no apt-get, the install failed)."""
    reason = system_packages.available("slurm")
    if reason:
        raise ClusterUnavailable(reason)
    if not accounting or all(system_packages.which(b) for b in ACCOUNTING_BINARIES):
        return
    reason = system_packages.why_not()
    if reason:
        raise ClusterUnavailable(f"{' '.join(ACCOUNTING_PACKAGES)} not installed and {reason}")
    # system_packages' apt-get, under its lock (the tests' background install may hold it).
    script = (f"{' '.join(system_packages.APT[:-2])} update -qq && DEBIAN_FRONTEND=noninteractive "
              f"{' '.join(system_packages.APT)} install {' '.join(ACCOUNTING_PACKAGES)}")  # fmt: skip
    proc = subprocess.run(["flock", str(system_packages.LOCK), "sh", "-c", script],
                          capture_output=True, text=True)  # fmt: skip
    if proc.returncode != 0 or not all(system_packages.which(b) for b in ACCOUNTING_BINARIES):
        raise ClusterUnavailable(f"installing {' '.join(ACCOUNTING_PACKAGES)} failed: "
                                 f"{(proc.stdout + proc.stderr)[-500:]}")  # fmt: skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of this process is not alive (it only waits to be reaped).
    state = _stat(pid)
    return bool(state) and state[0] != "Z"


def _stat(pid: int) -> list[str]:
    """/proc/<pid>/stat's fields after the command name (state, parent, ...); [] if gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def slurm_conf(root: Path, ctld_port: int, slurmd_port: int, dbd_port: int | None = None) -> str:
    """The cluster's slurm.conf; with ``dbd_port``, accounting through slurmdbd there."""
    host = socket.gethostname().split(".")[0]
    storage = (f"accounting_storage/slurmdbd\nAccountingStorageHost={host}\n"
               f"AccountingStoragePort={dbd_port}" if dbd_port else "accounting_storage/none")  # fmt: skip
    return f"""\
ClusterName=drpipe
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
SlurmctldParameters=enable_configless
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
SlurmdParameters=config_overrides
EnforcePartLimits=ALL
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType={storage}
GresTypes=gpu
MinJobAge=3600
KillWait=5
InactiveLimit=0
SchedulerParameters=sched_interval=1
NodeName={NODE} NodeHostname={host} NodeAddr=127.0.0.1 CPUs={CPUS} RealMemory={REAL_MEM_MB} Gres=gpu:{GPUS} State=UNKNOWN
PartitionName=cpu Nodes={NODE} Default=YES MaxTime=INFINITE MaxMemPerNode={MAX_MEM_MB} State=UP
PartitionName=gpu Nodes={NODE} MaxTime=INFINITE MaxMemPerNode={MAX_MEM_MB} State=UP
"""  # noqa: E501


def slurmdbd_conf(root: Path, dbd_port: int, db_port: int) -> str:
    host = socket.gethostname().split(".")[0]
    return f"""\
AuthType=auth/munge
DbdHost={host}
DbdAddr=127.0.0.1
DbdPort={dbd_port}
SlurmUser=root
LogFile={root}/log/slurmdbd.log
PidFile={root}/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={db_port}
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
"""


@dataclass
class LocalCluster:
    root: Path = field(default_factory=default_dir)
    # pid -> command of the jobs' processes the last ``down`` found alive and killed.
    leftovers: dict[int, str] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """An environment whose SLURM commands talk to this cluster."""
        return {**(os.environ if base is None else base), "SLURM_CONF": str(self.conf)}

    def run(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, env=self.env(), capture_output=True, text=True, check=check,
                              timeout=60)  # fmt: skip

    # ------------------------------------------------------------------ lifecycle

    @contextmanager
    def _lock(self):
        lock = self.root.with_name(self.root.name + ".lock")
        with open(lock, "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def recorded(self) -> dict | None:
        try:
            return json.loads(self.state_file.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def is_up(self) -> bool:
        state = self.recorded()
        return bool(state) and all(_alive(p) for p in state["pids"].values())

    def up(
        self, timeout: float = 60.0, owner: int | None = None, accounting: bool = False
    ) -> float:
        """Start the cluster and wait until its node is idle; the seconds it took. ``owner``:
        the process the cluster belongs to (a test session's), recorded; a later ``up`` stops
        a cluster whose owner has died without taking it down (a killed session). A cluster
        without one (the command line's) runs until ``down``. ``accounting``: with a database
        and slurmdbd (the module's docstring)."""
        if os.geteuid() != 0:
            raise ClusterUnavailable("a local SLURM runs its daemons as root; this is not root")
        ensure_packages(accounting)
        self.root.parent.mkdir(parents=True, exist_ok=True)
        with self._lock():
            left = self.recorded()
            if self.is_up() and left.get("owner") and not _alive(left["owner"]):
                print(f"local-cluster: stopping the cluster of process {left['owner']}, which "
                      "died without taking it down", file=sys.stderr)  # fmt: skip
                self._stop(left)
            if self.is_up():
                raise ClusterUnavailable(
                    f"a local cluster is already up in {self.root} (pids "
                    f"{self.recorded()['pids']}); `tests/slurm/local-cluster down` stops it"
                )
            if self.recorded():  # a dead one: clean what it left
                self._stop(self.recorded())
            start = time.perf_counter()
            self._start(owner, accounting)
        try:
            self._wait_idle(timeout)
        except BaseException:
            self.down()
            raise
        return time.perf_counter() - start

    def _start(self, owner: int | None, accounting: bool = False) -> None:
        if self.root.exists():
            shutil.rmtree(self.root)
        for sub in ("etc", "state", "spool", "log", "munge", *(("db",) if accounting else ())):
            (self.root / sub).mkdir(parents=True)
        self.root.chmod(0o755)
        (self.root / "munge").chmod(0o700)
        if MUNGE_SOCKET.exists():
            raise ClusterUnavailable(
                f"{MUNGE_SOCKET} exists: another munged runs here (stop it, or use its cluster)"
            )
        MUNGE_SOCKET.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(128))
        key.chmod(0o400)
        dbd_port, db_port = (_free_port(), _free_port()) if accounting else (None, None)
        self.conf.write_text(slurm_conf(self.root, _free_port(), _free_port(), dbd_port))
        self._gres()
        log = self.root / "log"
        mdir = self.root / "munge"
        db = self.root / "db"
        cmds = {
            "munged": ["munged", "-F", "-f", f"--key-file={key}", f"--socket={MUNGE_SOCKET}",
                       f"--pid-file={mdir}/munged.pid", f"--seed-file={mdir}/munged.seed",
                       f"--log-file={log}/munged.log"],
            "mariadbd": ["mariadbd", "--no-defaults", f"--datadir={db}", "--user=root",
                         f"--socket={self.root}/mariadb.sock", f"--port={db_port}",
                         "--bind-address=127.0.0.1", f"--pid-file={self.root}/mariadbd.pid",
                         f"--log-error={log}/mariadbd.log",
                         # SLURM's accounting guide's value (slurmdbd's log still warns
                         # of the default innodb_buffer_pool_size: harmless at this size).
                         "--innodb-lock-wait-timeout=900"],
            # slurmdbd reads slurmdbd.conf beside SLURM_CONF's slurm.conf.
            "slurmdbd": ["slurmdbd", "-D"],
            "slurmctld": ["slurmctld", "-D", "-i", "-f", str(self.conf)],
            "slurmd": ["slurmd", "-D", "-N", NODE, "--conf-server",
                       f"127.0.0.1:{self._ctld_port()}"],
        }  # fmt: skip
        if accounting:
            dbd_conf = self.conf.with_name("slurmdbd.conf")
            dbd_conf.write_text(slurmdbd_conf(self.root, dbd_port, db_port))
            dbd_conf.chmod(0o600)  # slurmdbd refuses a conf others can read (it holds a password)
            install = subprocess.run(
                ["mariadb-install-db", "--no-defaults", f"--datadir={db}", "--user=root",
                 "--auth-root-authentication-method=socket", "--skip-test-db"],
                capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            if install.returncode != 0:
                raise ClusterUnavailable(f"mariadb-install-db failed: {install.stderr[-500:]}")
        pids: dict[str, int] = {}
        state = {"root": str(self.root), "pids": pids, "started": time.time(), "owner": owner,
                 "accounting": accounting}  # fmt: skip
        try:
            for name in ACCOUNTING_DAEMONS if accounting else DAEMONS:
                out = open(log / f"{name}.out", "w")  # noqa: SIM115
                proc = subprocess.Popen(
                    cmds[name], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    env=self.env(), start_new_session=True,
                )  # fmt: skip
                out.close()
                pids[name] = proc.pid
                self.state_file.write_text(json.dumps(state, indent=1))
                if name == "munged":
                    self._wait_for(MUNGE_SOCKET.exists, 10, "munged")
                if name == "mariadbd":
                    self._wait_for(lambda: self._sql("SELECT 1").returncode == 0, 60, "mariadbd")
                    setup = self._sql(
                        "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm'; GRANT ALL ON "
                        "slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
                    )
                    if setup.returncode != 0:
                        raise ClusterUnavailable(f"database setup failed: {setup.stderr}")
                if name == "slurmdbd":
                    # slurmctld registers its cluster with slurmdbd when it starts.
                    self._wait_for(lambda: self.run("sacctmgr", "-n", "show", "cluster",
                                                    check=False).returncode == 0,
                                   60, "slurmdbd")  # fmt: skip
                if name == "slurmctld":
                    self._wait_for(lambda: self.run("scontrol", "ping", check=False)
                                   .stdout.count("UP") > 0, 20, "slurmctld")  # fmt: skip
        except BaseException:
            self._stop(state)
            raise

    def _sql(self, statement: str) -> subprocess.CompletedProcess:
        """``statement`` run as the database's root, through its socket."""
        return subprocess.run(["mariadb", "--no-defaults", f"--socket={self.root}/mariadb.sock",
                               "-u", "root", "-e", statement],
                              capture_output=True, text=True, timeout=30)  # fmt: skip

    def _gres(self) -> None:
        """GPUs as GRES: a character device each, /dev/null's numbers (slurmd counts them;
        with TaskPlugin=task/none nothing confines a job to them)."""
        dev = self.root / "dev"
        dev.mkdir()
        for i in range(GPUS):
            os.mknod(dev / f"gpu{i}", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        (self.root / "etc" / "gres.conf").write_text(
            f"NodeName={NODE} Name=gpu File={dev}/gpu[0-{GPUS - 1}]\n"
        )

    def _ctld_port(self) -> int:
        for line in self.conf.read_text().splitlines():
            if line.startswith("SlurmctldPort="):
                return int(line.split("=", 1)[1])
        raise AssertionError("no SlurmctldPort")

    def _wait_for(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        pids = (self.recorded() or {}).get("pids", {})
        while time.monotonic() < deadline:
            if ready():
                return
            dead = [n for n, p in pids.items() if not _alive(p)]
            if dead:
                raise ClusterUnavailable(f"{', '.join(dead)} exited at start: {self._tail()}")
            time.sleep(0.2)
        raise ClusterUnavailable(f"{what} not ready after {timeout:.0f} s: {self._tail()}")

    def _tail(self) -> str:
        parts = []
        for f in sorted((self.root / "log").glob("*")):
            text = f.read_text(errors="replace").strip().splitlines()[-5:]
            if text:
                parts.append(f"{f.name}: " + " | ".join(text))
        return "; ".join(parts)

    def node_state(self) -> str:
        out = self.run("sinfo", "-h", "-N", "-n", NODE, "-o", "%T", check=False)
        return out.stdout.strip().splitlines()[0] if out.stdout.strip() else "unknown"

    def _wait_idle(self, timeout: float) -> None:
        self._wait_for(lambda: self.node_state() in ("idle", "mixed", "allocated"),
                       timeout, f"node {NODE}")  # fmt: skip

    def down(self, timeout: float = 15.0) -> float:
        """Cancel every job, stop the daemons (TERM, then KILL), kill the jobs' leftover
        processes, remove the folder."""
        start = time.perf_counter()
        with self._lock():
            state = self.recorded()
            if state:
                self._stop(state, timeout)
            elif self.root.exists():
                shutil.rmtree(self.root, ignore_errors=True)
        return time.perf_counter() - start

    def _stop(self, state: dict, timeout: float = 15.0) -> None:
        pids = state.get("pids", {})
        if pids.get("slurmctld") and _alive(pids["slurmctld"]):
            subprocess.run(["scancel", "--full", "--quiet", "--partition=cpu,gpu"],
                           env=self.env(), capture_output=True, timeout=30)  # fmt: skip
        # slurmd first (its job steps end with it), munged last (the others use it to stop).
        for name in reversed(ACCOUNTING_DAEMONS):
            pid = pids.get(name)
            if pid and _alive(pid):
                _terminate(pid, timeout)
        # A job cancelled just before slurmd stops gets TERM but never the KILL that follows
        # (KillWait later): a Snakemake job step caught in its shutdown was left asleep.
        self.leftovers = self.job_processes()
        _terminate_all(list(self.leftovers), min(timeout, 5.0))
        # slurmd's link to its configless cache, where it points here.
        if CONF_LINK.is_symlink() and str(os.readlink(CONF_LINK)).startswith(str(self.root)):
            CONF_LINK.unlink()
        shutil.rmtree(self.root, ignore_errors=True)

    # ------------------------------------------------------------------ jobs

    def job_processes(self) -> dict[int, str]:
        """pid -> command of every process of this cluster's jobs: one whose environment
        holds a job id and names this cluster's configuration (``SLURM_CONF`` under its
        folder, as slurmd sets it for each job step; the daemons have no job id), and each job
        step's ``slurmstepd``, which blanks its own environment but keeps slurmd's log (under
        the folder) open; this process and its ancestors are not."""
        mine, pid = set(), os.getpid()
        while pid > 1:  # this process and its ancestors: `run --` passes SLURM_CONF down
            mine.add(pid)
            pid = _parent(pid)
        found = {}
        marker = f"SLURM_CONF={self.root}".encode()
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or int(proc.name) in mine:
                continue
            try:
                env = (proc / "environ").read_bytes().split(b"\0")
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:  # gone, or not ours to read
                continue
            a_step = any(v.startswith(marker) for v in env) and any(
                v.startswith(b"SLURM_JOB_ID=") for v in env
            )
            if a_step or cmd.startswith(b"slurmstepd") and self._holds_a_file_of_mine(proc):
                found[int(proc.name)] = cmd.decode(errors="replace")[:200]
        return found

    def _holds_a_file_of_mine(self, proc: Path) -> bool:
        """Whether ``proc`` has a file under this cluster's folder open (deleted or not)."""
        try:
            fds = list((proc / "fd").iterdir())
        except OSError:
            return False
        for fd in fds:
            try:
                if os.readlink(fd).startswith(f"{self.root}/"):
                    return True
            except OSError:
                continue
        return False

    def jobs(self) -> list[dict]:
        """Every job the controller remembers (MinJobAge keeps finished ones an hour)."""
        out = self.run("scontrol", "show", "job", "-o", "--details", check=False).stdout
        jobs = []
        for line in out.splitlines():
            if not line.startswith("JobId="):
                continue
            fields = {}
            for token in line.split(" "):
                if "=" in token:
                    k, v = token.split("=", 1)
                    fields.setdefault(k, v)
            jobs.append(fields)
        return jobs


def _parent(pid: int) -> int:
    state = _stat(pid)
    return int(state[1]) if state else 0


def _terminate_all(pids: list[int], timeout: float) -> None:
    """TERM each of ``pids`` (processes, not groups), KILL those alive after ``timeout``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.1)


def _terminate(pid: int, timeout: float) -> None:
    """TERM the process group of ``pid`` (each daemon leads its own), KILL after timeout."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
                if done:
                    return
            except ChildProcessError:  # not our child: poll
                if not _alive(pid):
                    return
            time.sleep(0.1)


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="local-cluster", description=__doc__.split("\n\n")[0])
    ap.add_argument("action", choices=("up", "down", "status", "install", "run"),
                    help="run: up, then COMMAND with SLURM_CONF set, then down")  # fmt: skip
    ap.add_argument("--dir", type=Path, default=default_dir(), help="where the cluster lives")
    ap.add_argument("--accounting", action="store_true",
                    help="(up, run, install) with slurmdbd and a MariaDB server, so that sacct "
                         "answers")  # fmt: skip
    ap.epilog = "run -- COMMAND ...: everything after the first `--` is the command"
    # Split by hand: options may follow the action (`up --accounting`), and the command keeps
    # its own options.
    argv = sys.argv[1:] if argv is None else argv
    cut = argv.index("--") if "--" in argv else len(argv)
    args, command = ap.parse_args(argv[:cut]), argv[cut + 1 :]
    if (args.action == "run") != bool(command):
        ap.error("a COMMAND goes with `run` (and only with it): run -- COMMAND ...")
    cluster = LocalCluster(args.dir)
    try:
        if args.action == "install":
            ensure_packages(args.accounting)
        elif args.action == "up":
            took = cluster.up(accounting=args.accounting)
            print(
                f"local SLURM up in {took:.1f} s; use it with:\n  export SLURM_CONF={cluster.conf}"
            )
        elif args.action == "run":
            print(
                f"local SLURM up in {cluster.up(owner=os.getpid(), accounting=args.accounting):.1f}"
                f" s ({cluster.conf})",
                flush=True,
            )
            try:
                return subprocess.run(command, env=cluster.env()).returncode
            finally:
                print(f"local SLURM down in {cluster.down():.1f} s", flush=True)
        elif args.action == "down":
            print(f"local SLURM down in {cluster.down():.1f} s")
        else:
            if not cluster.is_up():
                print("down")
                return 1
            accounting = " (with accounting)" if cluster.recorded().get("accounting") else ""
            print(f"up{accounting}: {cluster.recorded()['pids']}; node {NODE} "
                  f"{cluster.node_state()}")  # fmt: skip
    except ClusterUnavailable as err:
        print(f"local-cluster: {err}")
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
