"""Shared fixtures: where the real-data mirror is, and offline settings for Hugging Face."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import tiny_run as runs

REPO = Path(__file__).resolve().parents[1]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def mirror_dir() -> Path:
    return Path(os.environ.get("DATA_MIRROR", REPO.parent / "shared" / "data")).resolve()


@pytest.fixture(scope="session")
def data_mirror() -> Path:
    """The read-only directory of real data (``DATA_MIRROR``, default ``../shared/data``)."""
    path = mirror_dir()
    if not path.is_dir():
        pytest.fail(f"data mirror {path} not found: set DATA_MIRROR to the shared data directory")
    return path


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


# ------------------------------------------------------------- the tiny real runs (tiny_run.py)
# Built once per session, on first use, and shared by every end-to-end module (and by the
# pytest-xdist workers of a session); tests only read them (dry runs included), and a test that
# changes files copies one first.


@pytest.fixture(scope="session")
def shared_tmp(tmp_path_factory) -> Path:
    """A folder of this session that its pytest-xdist workers share (the session's own
    temporary folder without xdist)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def tiny_dpr_run(shared_tmp, data_mirror) -> Path:
    """The tiny DPR run (BM25, initial encoder, DPR, its hybrid, Figure 1)."""
    return runs.once(shared_tmp, "tiny-dpr", runs.build_dpr_run)


@pytest.fixture(scope="session")
def tiny_dpr_rerun(shared_tmp, data_mirror) -> Path:
    """The same DPR run built again, independently, in another directory (Table 2's jobs)."""
    return runs.once(
        shared_tmp, "tiny-dpr-again", lambda work: runs.build_dpr_run(work, runs.RERUN_TARGETS)
    )


@pytest.fixture(scope="session")
def tiny_run(shared_tmp, tiny_dpr_run) -> Path:
    """The DPR run taken on to every method, AOpt's rounds and figures, DPR Table 3."""
    return runs.once(shared_tmp, "tiny-all", lambda work: runs.extend_run(tiny_dpr_run, work))


@pytest.fixture(scope="session")
def tiny_touched_run(shared_tmp, data_mirror) -> Path:
    """The DAG of tiny_run, every job marked done without running it (no data read)."""
    return runs.once(shared_tmp, "tiny-touched", runs.build_touched_run)


@pytest.fixture(scope="session")
def tiny_audited(shared_tmp, tiny_dpr_rerun, tiny_dpr_run) -> tuple[Path, Path]:
    """(a copy of the DPR run audited against the second one, the second one)."""
    audited = runs.once(
        shared_tmp, "tiny-audited", lambda work: runs.audit_run(tiny_dpr_run, tiny_dpr_rerun, work)
    )
    return audited, tiny_dpr_rerun


# ------------------------------------------------------------------------ pytest-xdist (-n 2)
# `make test` runs two workers. Every test that reads a tiny run goes to one worker, in one
# xdist group, first: the runs are built one after another there (each Snakemake build uses
# both cores), while the other worker takes the unit tests, which mostly use one core. Built
# in two places at once, the runs only slowed each other down. The rest is handed out by
# module (a module's fixtures are built once per worker).
TINY_FIXTURES = ("tiny_dpr_run", "tiny_dpr_rerun", "tiny_run", "tiny_audited")


def pytest_collection_modifyitems(config, items):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    tiny = []
    for item in items:
        uses = any(f in getattr(item, "fixturenames", ()) for f in TINY_FIXTURES)
        group = "tiny-runs" if uses else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(group))
        tiny.append(uses)
    items[:] = [i for i, t in zip(items, tiny, strict=True) if t] + [
        i for i, t in zip(items, tiny, strict=True) if not t
    ]
