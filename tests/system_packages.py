"""Debian packages that some tests need: a real SLURM (tests/local_slurm.py) and a headless
browser (the report's test). Where the session runs as root with apt-get, conftest.py starts
installing the missing ones in the background at the start of the session, beside the tests,
under a file lock that the tests needing them wait on. Elsewhere those tests skip, saying why.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

PACKAGES = {
    "slurm": ("slurmctld", "slurmd", "slurm-client", "munge"),
    "chromium": ("chromium",),
}
BINARIES = {
    "slurm": ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol"),
    "chromium": ("chromium",),
}
LOCK = Path("/tmp/drpipe-apt.lock")
# apt-get waits for another apt-get's lock rather than failing at once.
APT = ["apt-get", "-o", "DPkg::Lock::Timeout=600", "-y", "-qq"]


def which(binary: str) -> str | None:
    return shutil.which(binary, path=f"{os.environ.get('PATH', '')}:/usr/sbin:/usr/bin")


def missing(names=PACKAGES) -> list[str]:
    return [n for n in names if not all(which(b) for b in BINARIES[n])]


def why_not() -> str | None:
    """Why packages cannot be installed here, or None."""
    if os.geteuid() != 0:
        return "this does not run as root"
    if not shutil.which("apt-get") or not shutil.which("flock"):
        return "there is no apt-get here"
    return None


def install_command(names: list[str]) -> list[str]:
    pkgs = [p for n in names for p in PACKAGES[n]]
    script = (f"{' '.join(APT[:-2])} update -qq && DEBIAN_FRONTEND=noninteractive "
              f"{' '.join(APT)} install {' '.join(pkgs)}")  # fmt: skip
    return ["flock", str(LOCK), "sh", "-c", script]


def start_install(log: Path) -> subprocess.Popen | None:
    """Install what is missing in the background (None: nothing to do, or not possible)."""
    names = missing()
    if not names or why_not():
        return None
    out = open(log, "w")  # noqa: SIM115 - the child's
    proc = subprocess.Popen(install_command(names), stdout=out, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    out.close()
    return proc


def wait_for_install() -> None:
    """Return once no background install holds the lock."""
    if not LOCK.exists():
        return
    with open(LOCK) as fh:
        fcntl.flock(fh, fcntl.LOCK_SH)
        fcntl.flock(fh, fcntl.LOCK_UN)


def available(name: str) -> str | None:
    """None once ``name``'s binaries are here (installing them if needed and possible), else
    why they are not."""
    wait_for_install()
    if not missing([name]):
        return None
    reason = why_not()
    if reason:
        return f"{' '.join(PACKAGES[name])} not installed and {reason}"
    proc = subprocess.run(install_command([name]), capture_output=True, text=True)
    if proc.returncode != 0 or missing([name]):
        return f"installing {' '.join(PACKAGES[name])} failed: {proc.stdout[-500:]}"
    return None
