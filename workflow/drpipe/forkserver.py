"""A local run's `drpipe` jobs as forks of one process that has torch, transformers' BERT and
drpipe already imported: `make run` (and `make squad`, `make seeds`, `make rehearse` without
the SLURM profile) runs Snakemake under ``python -m drpipe.forkserver run -- snakemake ...``;
``FORK=0`` runs every job as a process of its own.

Each job that loads a model spends ~4-5 s of CPU importing torch and transformers before it
does anything (a rehearsal's question encoding: 6.7 s for 0.01 s of work). ``jobs_forked(env)``
starts a server and returns the environment to run Snakemake with: a folder first on PATH whose
`drpipe` is a small client (stdlib only) that hands the server its arguments, environment,
working directory and standard streams (the descriptors themselves, so `2> log` and
Snakemake's pipes are the job's own) and exits with the fork's status; Snakemake stopping the
client stops the fork. A fork is otherwise a fresh `drpipe` process; what it cannot share with
one is said here:

- the hash seed (one per server; no result depends on it: the tests compare two runs under two
  servers byte for byte);
- Snakemake's benchmark files time the client: wall time is the job's, memory and CPU are not,
  so a forked job ends its log with its own (``USAGE``, read back by ``fork_usage``);
- the code: a server imports drpipe once, so an edit to the package during a run reaches the
  jobs of the next run (Snakemake plans a run from the files as they were at its start, too).

The server never runs a torch operation, so no OpenMP pool exists to break in a fork; it forks
from one thread, and never initialises CUDA (a cluster's jobs run as processes of their own:
the SLURM profile does not use it). ``DRPIPE_TEST_ZYGOTE=0`` in the environment turns it off, and
a client that cannot reach its server runs the real `drpipe` itself.

The tests build their tiny runs and the benchmarks' smokes with it (tests/workflow_util.py;
``forkserver.py python SCRIPT ARGS`` for the smokes: each would otherwise import torch anew).

Protocol: the client sends a length-prefixed JSON request {"argv", "env", "cwd", "python"} with
its fds 0, 1 and 2 attached; the server answers the fork's pid on one line, then its exit code.
The client runs as ``python -I forkserver.py client ARGS`` (stdlib only: no venv site import).
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import NoReturn

# What a job's `drpipe` imports before its work starts (one import that fails is skipped).
PRELOAD = (
    "torch",
    "transformers",
    "transformers.models.bert.modeling_bert",
    "drpipe.cli",
    "drpipe.encoders",
    "drpipe.encode",
    "drpipe.methods",
    "drpipe.training.loop",
    "drpipe.reader.model",
    "pandas",
    "pyarrow.parquet",
    "faiss",
    "matplotlib.pyplot",
    "scipy.stats",
)


def _recv_request(conn: socket.socket) -> tuple[dict, list[int]]:
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    while len(data) < 8 or len(data) < 8 + int.from_bytes(data[:8], "big"):
        chunk = conn.recv(1 << 16)
        if not chunk:
            raise EOFError("the client left before its request was complete")
        data += chunk
    size = int.from_bytes(data[:8], "big")
    return json.loads(data[8 : 8 + size]), list(fds)


# The last line a forked job writes to its stderr (its log): what Snakemake's benchmark file,
# which measures the client, cannot say. drpipe.audit and drpipe.provenance read it back.
USAGE = "drpipe.forkserver: forked job: peak RSS {rss:.1f} MB, CPU {cpu:.2f} s"
_USAGE = re.compile(
    r"^drpipe\.forkserver: forked job: peak RSS ([0-9.]+) MB, CPU ([0-9.]+) s$", re.M
)


def fork_usage(log: str | Path) -> dict[str, float] | None:
    """The peak RSS (MB) and CPU seconds a forked job wrote at the end of its log ``log``; None
    for a job that ran as a process of its own (its benchmark file measured it)."""
    try:
        with open(log, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 4096))
            tail = fh.read().decode(errors="replace")
    except OSError:
        return None
    found = _USAGE.findall(tail)
    return (
        {"max_rss_mb": float(found[-1][0]), "cpu_seconds": float(found[-1][1])} if found else None
    )


def _write_usage() -> None:
    import resource

    own, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    cpu = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    rss = max(own.ru_maxrss, kids.ru_maxrss) / 1024  # KiB on Linux; MB as Snakemake's max_rss
    print(USAGE.format(rss=rss, cpu=cpu), file=sys.stderr)


def become(request: dict, run: Callable[[], int | None], usage: bool = False) -> NoReturn:
    """In a fork: take the request's working directory and environment, ``run()``, and exit
    as a process would (its status, SystemExit's code, 1 on an exception; atexit handlers and
    buffered output flushed). Both zygotes' children end here. ``usage``: end stderr with the
    job's peak memory and CPU (``USAGE``)."""
    code = 1
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        code = int(run() or 0)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            atexit._run_exitfuncs()  # what a normal exit runs (logging.shutdown and the like)
            if usage:
                _write_usage()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _drpipe(request: dict, fds: list[int], close: list[socket.socket]) -> int | None:
    """`drpipe ARGV` with the client's streams (the server's sockets closed first); or, for a
    request with ``"python": true``, `python SCRIPT ARGS...` (ARGV is ``SCRIPT ARGS...``)."""
    for s in close:
        s.close()
    for fd, received in zip((0, 1, 2), fds, strict=True):
        os.dup2(received, fd)
        os.close(received)
    argv = request["argv"]
    if request.get("python"):
        if not argv or argv[0].startswith("-"):
            raise ValueError(f"a python request is SCRIPT ARGS..., not {argv[:1]}")
        import runpy

        sys.argv = list(argv)
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))  # as `python SCRIPT` has it
        runpy.run_path(argv[0], run_name="__main__")
        return None
    sys.argv = ["drpipe", *argv]
    from drpipe.cli import main

    return main(argv)


def serve(path: str, preload: tuple[str, ...] = PRELOAD) -> None:
    """Preload, then fork one child per client until stdin closes (the run is over)."""
    import importlib

    # Listening first: a job that starts while the server imports waits in the backlog.
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    for name in preload:
        if select.select([0], [], [], 0)[0] and not os.read(0, 1024):
            return  # the run ended before the preload did (a run with no job): no use for it
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - a module not preloaded is imported by the job
            print(f"drpipe zygote: not preloaded: {name}: {exc}", file=sys.stderr)
    # Every subcommand's module, as each job's argument parser imports them (~0.2 s a job).
    try:
        importlib.import_module("drpipe.cli").build_parser()
    except Exception as exc:  # noqa: BLE001 - the job's own parser reports it
        print(f"drpipe zygote: no parser preloaded: {exc}", file=sys.stderr)
    # What is loaded now stays out of the garbage collector's reach: a fork's collections
    # would otherwise walk every inherited object, copying the pages they touch.
    gc.freeze()
    sys.stdout.flush()
    sys.stderr.flush()
    children: dict[int, socket.socket] = {}  # pid -> the client waiting for it
    while True:
        ready = select.select([listener, 0, *children.values()], [], [], 0.2)[0]
        if 0 in ready and not os.read(0, 1024):
            break
        for pid, conn in children.items():
            if conn in ready and not conn.recv(1):  # the client is gone (killed): so is its job
                os.kill(pid, signal.SIGTERM)
        if listener in ready:
            conn, _ = listener.accept()
            try:
                request, fds = _recv_request(conn)
            except (OSError, EOFError, ValueError) as exc:
                print(f"drpipe zygote: bad request: {exc}", file=sys.stderr)
                conn.close()
                continue
            pid = os.fork()
            if pid == 0:
                socks = [listener, conn, *children.values()]
                become(request, lambda: _drpipe(request, fds, socks),  # noqa: B023 - runs now
                       usage=not request.get("python"))  # fmt: skip
            for fd in fds:
                os.close(fd)
            conn.sendall(f"{pid}\n".encode())
            children[pid] = conn
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            conn = children.pop(pid)
            with suppress(OSError):
                conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            conn.close()
    for pid in children:
        os.kill(pid, signal.SIGTERM)


def client(argv: list[str], python: bool = False) -> int:
    """`drpipe ARGV` (``python``: `python ARGV`, ARGV being ``SCRIPT ARGS...``) run by the
    server named in DRPIPE_ZYGOTE, or the real command (DRPIPE_REAL) if that is unreachable."""
    real = os.environ["DRPIPE_REAL"]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(os.environ["DRPIPE_ZYGOTE"])
    except (KeyError, OSError):
        os.execv(real, [real, *argv])
    request = {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd(), "python": python}
    body = json.dumps(request).encode()
    socket.send_fds(sock, [len(body).to_bytes(8, "big") + body], [0, 1, 2])
    reader = sock.makefile("rb")
    pid = int(reader.readline() or b"0")
    if pid <= 0:
        print("drpipe (test zygote): the server did not start the job", file=sys.stderr)
        return 1

    def forward(signum, _frame) -> None:  # Snakemake stopping the job stops the fork
        os.kill(pid, signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    line = reader.readline()
    if not line:
        print(f"drpipe (test zygote): the server lost job {pid}", file=sys.stderr)
        return 1
    code = int(line)
    return code if code >= 0 else 128 - code  # killed by signal N: 128 + N, as a shell says


def _start(
    env: dict[str, str], folder: str, preload: tuple[str, ...] = PRELOAD
) -> tuple[subprocess.Popen, str]:
    """A server listening on a socket in ``folder`` (bound before this returns, or gone), and
    the client as ``folder/bin/drpipe``."""
    path = str(Path(folder) / "socket")
    shim = Path(folder) / "bin" / "drpipe"
    shim.parent.mkdir()
    shim.write_text(
        f'#!/bin/sh\nexec "{sys.executable}" -I "{Path(__file__).resolve()}" client "$@"\n'
    )
    shim.chmod(0o755)
    server = subprocess.Popen([sys.executable, __file__, "serve", path, *preload],
                              stdin=subprocess.PIPE, env=env)  # fmt: skip
    for _ in range(200):  # bound before the first job asks (else it runs unforked)
        if os.path.exists(path) or server.poll() is not None:
            break
        time.sleep(0.05)
    return server, path


def _stop(server: subprocess.Popen) -> None:
    assert server.stdin is not None
    server.stdin.close()
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


# Servers kept between runs (jobs_forked's ``keep``): (name, environment) -> (server, socket,
# its folder). Stopped when this process exits.
_KEPT: dict[tuple[str, str], tuple[subprocess.Popen, str, tempfile.TemporaryDirectory]] = {}


@atexit.register
def _stop_kept() -> None:
    while _KEPT:
        server, _, folder = _KEPT.popitem()[1]
        _stop(server)
        folder.cleanup()


@contextmanager
def jobs_forked(env: dict[str, str], keep: str | None = None,
                preload: tuple[str, ...] = PRELOAD):  # fmt: skip
    """``env`` for a Snakemake run whose `drpipe` jobs are forks of a server started here (and
    stopped when the block ends); ``env`` itself where ``DRPIPE_TEST_ZYGOTE=0``.

    ``keep``: the server is named so and kept for the next run that asks for that name with the
    same environment (stopped when this process exits), so that runs share one preload (~8 s
    of CPU each) where sharing a hash seed is fine; runs that must differ in it name two.
    ``preload``: the modules the server imports before it forks (a test of the forking itself
    needs none of the heavy ones)."""
    if env.get("DRPIPE_TEST_ZYGOTE") == "0":
        yield env
        return
    real = Path(sys.executable).with_name("drpipe")

    def forked(path: str) -> dict[str, str]:
        shims = Path(path).with_name("bin")
        return {**env, "PATH": f"{shims}{os.pathsep}{env['PATH']}", "DRPIPE_ZYGOTE": path,
                "DRPIPE_REAL": str(real)}  # fmt: skip

    if keep is None:
        with tempfile.TemporaryDirectory(prefix="drpipe-zygote-") as tmp:
            server, path = _start(env, tmp, preload)
            try:
                yield forked(path)
            finally:
                _stop(server)
        return
    key = (keep, json.dumps([env, preload], sort_keys=True))
    if key in _KEPT and _KEPT[key][0].poll() is not None:
        _KEPT.pop(key)[2].cleanup()  # it died: a new one
    if key not in _KEPT:
        folder = tempfile.TemporaryDirectory(prefix="drpipe-zygote-")
        _KEPT[key] = (*_start(env, folder.name, preload), folder)
    yield forked(_KEPT[key][1])


def run(argv: list[str], preload: tuple[str, ...] = PRELOAD) -> int:
    """``argv`` (e.g. a Snakemake run) with its `drpipe` jobs forked from one server, stopped
    when it exits; its exit status."""
    if not argv:
        raise SystemExit("usage: python -m drpipe.forkserver run [--preload M,M] -- COMMAND ...")
    with jobs_forked(dict(os.environ), preload=preload) as env:
        proc = subprocess.Popen(argv, env=env)
        while True:
            try:
                return proc.wait()
            except KeyboardInterrupt:  # the command, in the same process group, stops its jobs
                continue


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2], tuple(sys.argv[3:]))
    elif sys.argv[1] == "run":  # run [--preload M,M] [--] COMMAND ARGS...
        args, modules = sys.argv[2:], PRELOAD
        if args[:1] == ["--preload"]:
            modules, args = tuple(filter(None, args[1].split(","))), args[2:]
        sys.exit(run(args[1:] if args[:1] == ["--"] else args, modules))
    else:  # client: `drpipe ARGS`; python: `python SCRIPT ARGS`
        sys.exit(client(sys.argv[2:], python=sys.argv[1] == "python"))
