"""A verified input is never lost to a wrong or broken data mirror, and only what determines an
input's bytes (URL, checksums) reruns its fetch (real Snakemake runs on one 5-page source)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from workflow_util import planned_jobs, snakemake

TARGET = "results/data/enwiki_tables/enwiki-table-markup.xml.bz2"
RECORD = "results/data/records/enwiki_tables/enwiki-table-markup.xml.bz2.json"
LOG = "results/logs/fetch/enwiki_tables/enwiki-table-markup.xml.bz2.log"
MIRRORED = "wikipedia/enwiki-table-markup.xml.bz2"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _truncated_mirror(root: Path, data_mirror: Path) -> Path:
    """A mirror holding the enwiki_tables file with its second half cut off."""
    (root / "wikipedia").mkdir(parents=True, exist_ok=True)
    data = (data_mirror / MIRRORED).read_bytes()
    (root / MIRRORED).write_bytes(data[: len(data) // 2])
    return root


@pytest.fixture(scope="module")
def fetched(tmp_path_factory, data_mirror) -> Path:
    """A results folder whose enwiki_tables input was fetched and verified from the mirror."""
    work = tmp_path_factory.mktemp("fetched")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DATA_MIRROR", str(data_mirror))
        snakemake(work, TARGET)
    assert _sha(work / TARGET) == _sha(data_mirror / MIRRORED)
    return work


def _assert_input_intact(work: Path, data_mirror: Path) -> None:
    want = _sha(data_mirror / MIRRORED)
    assert _sha(work / TARGET) == want
    assert json.loads((work / RECORD).read_text())["sha256"] == want


def test_another_path_to_the_mirror_or_an_edited_note_plans_nothing(
    fetched, data_mirror, tmp_path, monkeypatch
):
    link = tmp_path / "mirror-link"
    link.symlink_to(data_mirror, target_is_directory=True)
    monkeypatch.setenv("DATA_MIRROR", str(link))
    # Both at once (a dry run costs seconds): neither is in what the fetch's bytes depend on.
    note = {"sources": {"enwiki_tables": {"note": "an edited note"}}}
    assert planned_jobs(fetched, TARGET, overlay=note) == set()
    # What determines the bytes still does rerun the fetch.
    checksum = {"sources": {"enwiki_tables": {"mirror_sha256": "0" * 64}}}
    assert planned_jobs(fetched, TARGET, overlay=checksum) == {("fetch", TARGET)}


@pytest.mark.parametrize("mirror", ["empty", "truncated"])
def test_a_wrong_mirror_keeps_the_verified_input(
    fetched, data_mirror, tmp_path, monkeypatch, mirror
):
    root = tmp_path / mirror
    root.mkdir()
    if mirror == "truncated":
        _truncated_mirror(root, data_mirror)
    monkeypatch.setenv("DATA_MIRROR", str(root))
    proc = snakemake(fetched, TARGET)
    assert "Nothing to be done" in proc.stdout + proc.stderr
    _assert_input_intact(fetched, data_mirror)


def test_a_forced_refetch_from_a_broken_mirror_keeps_the_verified_input(
    fetched, data_mirror, tmp_path, monkeypatch
):
    # Snakemake deletes a job's outputs before running it: the kept copy (a hard link outside
    # its outputs) has the verified bytes, so the refetch neither needs the mirror nor loses them.
    monkeypatch.setenv("DATA_MIRROR", str(_truncated_mirror(tmp_path / "bad", data_mirror)))
    snakemake(fetched, TARGET, "--forcerun", "fetch")
    _assert_input_intact(fetched, data_mirror)
    record = json.loads((fetched / RECORD).read_text())
    assert record["origin"]["path"] == str((data_mirror / MIRRORED).resolve())
    assert os.path.samefile(fetched / TARGET, fetched / record["kept_copy"])


def test_a_checksum_mismatch_is_one_clear_message(data_mirror, tmp_path, monkeypatch):
    bad = _truncated_mirror(tmp_path / "bad", data_mirror)
    monkeypatch.setenv("DATA_MIRROR", str(bad))
    work = tmp_path / "work"
    work.mkdir()
    proc = snakemake(work, TARGET, check=False)
    assert proc.returncode != 0
    log = (work / LOG).read_text()
    assert "Traceback" not in log and ".tmp" not in log
    message = log.strip().splitlines()[-1]
    assert message.startswith("drpipe fetch: bad input: ")
    assert str(bad / MIRRORED) in message and "sha256 mismatch" in message
    assert _sha(data_mirror / MIRRORED) in message and _sha(bad / MIRRORED) in message
    assert not (work / TARGET).exists()
