"""Run Snakemake on this repository's workflow in a scratch directory and read its plan."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = Path(sys.executable).with_name("snakemake")


def copy_checkout(dest: Path) -> Path:
    """A copy of the workflow (Snakefile, config, package, profiles) at ``dest``; run it with
    ``repo=dest`` (the copy's package is put first on PYTHONPATH)."""
    import shutil

    dest.mkdir(parents=True, exist_ok=True)
    for name in ("Snakefile", "config.yaml"):
        shutil.copy2(REPO / name, dest / name)
    for name in ("workflow", "profiles", "envs"):
        shutil.copytree(REPO / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


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
) -> subprocess.CompletedProcess:
    """Run a checkout's Snakefile (this repository's by default) with results under
    ``workdir``. For another checkout, ``python_path`` puts its package first on PYTHONPATH."""
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
        "--configfile",
        str(repo / "config.yaml"),
    ]
    if overlay is not None:
        path = workdir / f"overlay-{abs(hash(yaml.safe_dump(overlay))) % 10**8}.yaml"
        path.write_text(yaml.safe_dump(overlay))
        cmd.append(str(path))
    env = {**os.environ, "PATH": f"{SNAKEMAKE.parent}{os.pathsep}{os.environ['PATH']}"}
    if repo != REPO and python_path:
        env["PYTHONPATH"] = str(repo / "workflow")
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
