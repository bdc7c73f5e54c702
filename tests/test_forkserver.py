"""The job fork server (drpipe.forkserver: `make run`'s jobs, the tests' tiny runs) runs a
`drpipe` job as the real command would: same exit status, same streams, the real command where
no server answers, and `python -m drpipe.forkserver run -- CMD` runs CMD with it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from drpipe import forkserver
from drpipe.forkserver import jobs_forked

# Forking is what is tested, not the preload (the builder's runs use the whole one): the
# servers here import only what `drpipe` itself does, not torch and the rest (~8 s of CPU).
LIGHT = ("drpipe.cli",)
# The venv's `drpipe` first, as in a Snakemake run of the tests (workflow_util.snakemake).
ENV = {**os.environ, "DRPIPE_TEST_ZYGOTE": "1",
       "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}  # fmt: skip


def _run(cmd: str, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, shell=True, env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=300)  # fmt: skip


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """`drpipe encode --bogus` run by the real command, and its log: one run (~1 s of CPU) for
    both tests that compare a forked job with it."""
    cwd = tmp_path_factory.mktemp("plain")
    return _run("drpipe encode --bogus 2> plain.log", ENV, cwd), cwd / "plain.log"


def test_a_forked_job_has_the_real_commands_status_and_streams(tmp_path: Path, plain_run) -> None:
    """... by a server kept between runs by name (tiny_run's runs share one), which another
    name does not share and which stops when this process would exit."""
    env = ENV
    plain, plain_log = plain_run
    with jobs_forked(env, keep="runs", preload=LIGHT) as forked_env:
        shims = Path(forked_env["PATH"].split(os.pathsep)[0])
        assert (shims / "drpipe").is_file() and shims.parent == Path(
            forked_env["DRPIPE_ZYGOTE"]
        ).parent
        forked = _run("drpipe encode --bogus 2> forked.log", forked_env, tmp_path)
    with (
        jobs_forked(env, keep="runs", preload=LIGHT) as again,
        jobs_forked(env, keep="other", preload=LIGHT) as other,
    ):
        helped = _run("drpipe --help", again, tmp_path)
    assert again["DRPIPE_ZYGOTE"] == forked_env["DRPIPE_ZYGOTE"] != other["DRPIPE_ZYGOTE"]
    assert forked.returncode == plain.returncode == 2
    *job, usage = (tmp_path / "forked.log").read_text().splitlines(keepends=True)
    assert "".join(job) == plain_log.read_text()  # and its memory and CPU:
    assert usage.startswith("drpipe.forkserver: forked job: peak RSS ")
    assert "--model" in (tmp_path / "forked.log").read_text()
    assert helped.returncode == 0 and "encode" in helped.stdout
    servers = [server for server, _, _ in forkserver._KEPT.values()]
    forkserver._stop_kept()  # what exiting runs
    assert len(servers) == 2 and all(s.poll() is not None for s in servers)
    assert not Path(forked_env["DRPIPE_ZYGOTE"]).exists()


def test_without_a_server_the_client_runs_the_real_drpipe(tmp_path: Path) -> None:
    with jobs_forked(ENV, preload=LIGHT) as env:
        pass  # the server has stopped; its environment still names it
    done = _run("drpipe --help", env, tmp_path)
    assert done.returncode == 0 and "encode" in done.stdout


def test_run_gives_a_command_forked_jobs_and_its_exit_status(tmp_path: Path) -> None:
    """What `make run` does with Snakemake: the command's `drpipe` is the client, a job's
    status is the command's, and the server is gone after it."""
    script = (
        "command -v drpipe > where.txt; drpipe encode --bogus 2> err.log; code=$?;"
        ' echo "$DRPIPE_ZYGOTE" > socket.txt; exit $((code + 1))'
    )
    env = {k: v for k, v in ENV.items() if k != "DRPIPE_TEST_ZYGOTE"}
    done = subprocess.run([sys.executable, "-m", "drpipe.forkserver", "run", "--preload",
                           ",".join(LIGHT), "--", "sh", "-c", script], env=env, cwd=tmp_path,
                          timeout=300)  # fmt: skip
    assert done.returncode == 3  # drpipe's usage error (2), plus one
    assert "--model" in (tmp_path / "err.log").read_text()
    shim = Path((tmp_path / "where.txt").read_text().strip())
    assert (
        shim.name == "drpipe"
        and shim.parent.parent == Path((tmp_path / "socket.txt").read_text().strip()).parent
    )
    assert not shim.parent.parent.exists()  # the server's folder, removed with it
    off = {**env, "DRPIPE_TEST_ZYGOTE": "0"}
    plain = subprocess.run([sys.executable, "-m", "drpipe.forkserver", "run", "--", "sh", "-c",
                            "command -v drpipe"], env=off, cwd=tmp_path, capture_output=True,
                           text=True, timeout=300)  # fmt: skip
    assert plain.stdout.strip() == str(Path(sys.executable).with_name("drpipe"))


def test_a_forked_jobs_log_ends_with_its_memory_and_cpu_which_the_audit_reads(
    tmp_path: Path, plain_run
):
    """Snakemake's benchmark file measures the client of a forked job; the job writes its own
    peak RSS and CPU as its log's last line, and the audit's and provenance's readers take
    them from there (a plain job's log has no such line: its benchmark stands)."""
    from drpipe.audit.timings import read_benchmark
    from drpipe.provenance import rule_timings

    logs, bench = tmp_path / "results/logs/encode", tmp_path / "results/benchmarks/rules/encode"
    logs.mkdir(parents=True)
    bench.mkdir(parents=True)
    with jobs_forked(ENV, preload=LIGHT) as env:
        _run(f"drpipe encode --bogus 2> {logs}/forked.log", env, tmp_path)
    shutil.copy(plain_run[1], logs / "plain.log")  # the same job run plainly
    usage = forkserver.fork_usage(logs / "forked.log")
    assert usage is not None and usage["max_rss_mb"] > 10 and usage["cpu_seconds"] > 0
    assert (logs / "forked.log").read_text().splitlines()[-1].startswith("drpipe.forkserver:")
    assert forkserver.fork_usage(logs / "plain.log") is None
    header = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
    for name in ("forked", "plain"):  # what Snakemake wrote for a client: 17 MB, no CPU
        (bench / f"{name}.tsv").write_text(
            header + "143.6\t0:02:23\t17.59\t22\t8\t9\t0\t0\t0\t0.03\n"
        )
    forked, plain = (read_benchmark(bench / f"{n}.tsv") for n in ("forked", "plain"))
    assert forked == {"seconds": 143.6, **usage}
    assert plain == {"seconds": 143.6, "max_rss_mb": 17.59, "cpu_seconds": 0.03}
    timings = rule_timings(tmp_path / "results/benchmarks/rules")
    assert timings["encode/forked.tsv"]["max_rss_mb"] == usage["max_rss_mb"]
    assert timings["encode/plain.tsv"]["max_rss_mb"] == 17.59
