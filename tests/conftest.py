"""Shared fixtures: where the real-data mirror is, and offline settings for Hugging Face."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

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
