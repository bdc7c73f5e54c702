"""Inputs come from the mirror or the URL, are checksum-verified, and leave no partial file."""

from __future__ import annotations

import hashlib

import pytest

from drpipe.download import ChecksumError, fetch

NAME = "squad/squad-dev-v1.1.reconstructed.json.gz"


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_mirror_copy_is_verified_and_recorded(tmp_path, data_mirror):
    src = {"mirror": NAME, "mirror_sha256": _sha(data_mirror / NAME), "url": "https://x/y.json"}
    out = tmp_path / "d" / "dev.json.gz"
    rec = fetch("squad_dev", src, data_mirror, out)
    assert out.read_bytes() == (data_mirror / NAME).read_bytes()
    assert rec["sha256"] == src["mirror_sha256"] and rec["origin"]["kind"] == "mirror"
    assert rec["bytes"] == out.stat().st_size and rec["canonical_url"] == "https://x/y.json"


def test_mirror_checksum_mismatch_leaves_nothing(tmp_path, data_mirror):
    src = {"mirror": NAME, "mirror_sha256": "0" * 64}
    out = tmp_path / "dev.json.gz"
    with pytest.raises(ChecksumError, match="sha256 mismatch"):
        fetch("squad_dev", src, data_mirror, out)
    assert list(tmp_path.iterdir()) == []


def test_url_download_checks_md5_and_sha256(tmp_path, data_mirror):
    # file:// goes through the same urllib download path as https:// (no network here).
    path = data_mirror / NAME
    md5 = hashlib.md5(path.read_bytes()).hexdigest()
    src = {"url": path.resolve().as_uri(), "md5": md5, "sha256": _sha(path)}
    rec = fetch("squad_dev", src, None, tmp_path / "a.json.gz")
    assert rec["origin"] == {"kind": "url", "url": src["url"]}
    bad = {**src, "md5": "f" * 32}
    with pytest.raises(ChecksumError, match="md5 mismatch"):
        fetch("squad_dev", bad, None, tmp_path / "b.json.gz")
    assert not (tmp_path / "b.json.gz").exists()


def test_missing_everywhere_is_a_clear_error(tmp_path, data_mirror):
    with pytest.raises(FileNotFoundError, match="source 'x': no URL configured"):
        fetch("x", {"mirror": "nope/missing.bz2"}, data_mirror, tmp_path / "x.bz2")
    assert list(tmp_path.iterdir()) == []
