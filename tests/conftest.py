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
    """The same DPR run built again, independently, in another directory."""
    return runs.once(shared_tmp, "tiny-dpr-again", runs.build_dpr_run)


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
# Fixtures live per worker, so tests are handed out by module (a module's fixtures are built
# once), and the tests of each tiny run by run: the two slowest units, which go first, one to
# each worker, while the other modules fill in around them.
TINY_GROUPS = {"tiny_run": "tiny-all", "tiny_audited": "tiny-pair"}


def pytest_collection_modifyitems(config, items):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    first = []
    for item in items:
        used = [TINY_GROUPS[f] for f in TINY_GROUPS if f in getattr(item, "fixturenames", ())]
        group = used[0] if used else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(group))
        first.append(bool(used))
    items[:] = [i for i, f in zip(items, first, strict=True) if f] + [
        i for i, f in zip(items, first, strict=True) if not f
    ]
