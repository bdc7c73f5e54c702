"""The repository stays lint-clean: ruff for Python, snakefmt and `snakemake --lint` for rules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from workflow_util import REPO, SNAKEMAKE

BIN = Path(sys.executable).parent


def _run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)


def test_ruff_check_and_format():
    check = _run(str(BIN / "ruff"), "check", "workflow", "tests", "benchmarks")
    assert check.returncode == 0, check.stdout + check.stderr
    fmt = _run(str(BIN / "ruff"), "format", "--check", "workflow", "tests", "benchmarks")
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr


def test_snakefmt_clean():
    papers = sorted(str(p) for p in (REPO / "workflow/drpipe/papers").glob("*/*.smk"))
    proc = _run(str(BIN / "snakefmt"), "--check", "Snakefile", "workflow/rules", *papers)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_snakemake_lint_clean(tmp_path):
    proc = _run(
        str(SNAKEMAKE),
        "--lint",
        "-n",
        "--cores",
        "1",
        "--directory",
        str(tmp_path),
        "-s",
        str(REPO / "Snakefile"),
        "--configfile",
        str(REPO / "config.yaml"),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Congratulations" in proc.stdout + proc.stderr
