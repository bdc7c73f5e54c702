"""Inputs come from the mirror or the URL, are checksum-verified, leave no partial file, and a
failed fetch never loses a verified file."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from drpipe.cli import main
from drpipe.download import ChecksumError, FetchError, fetch

NAME = "squad/squad-dev-v1.1.reconstructed.json.gz"
TABLES = "wikipedia/enwiki-table-markup.xml.bz2"


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
    with pytest.raises(ChecksumError, match="md5 mismatch") as err:
        fetch("squad_dev", bad, None, tmp_path / "b.json.gz")
    assert src["url"] in str(err.value)  # names the URL, not a temporary file
    assert not (tmp_path / "b.json.gz").exists()


def test_missing_everywhere_is_a_clear_error(tmp_path, data_mirror):
    with pytest.raises(FetchError, match="source 'x': not found, and no URL is configured"):
        fetch("x", {"mirror": "nope/missing.bz2"}, data_mirror, tmp_path / "x.bz2")
    assert list(tmp_path.iterdir()) == []


def _truncated_mirror(tmp_path, data_mirror):
    """A copy of the mirror's enwiki_tables file with its second half cut off."""
    bad = tmp_path / "bad-mirror"
    (bad / "wikipedia").mkdir(parents=True)
    data = (data_mirror / TABLES).read_bytes()
    (bad / TABLES).write_bytes(data[: len(data) // 2])
    return bad


def test_checksum_mismatch_names_mirror_file_and_both_checksums(tmp_path, data_mirror):
    bad = _truncated_mirror(tmp_path, data_mirror)
    want = _sha(data_mirror / TABLES)
    src = {"mirror": TABLES, "mirror_sha256": want}
    with pytest.raises(ChecksumError) as err:
        fetch("enwiki_tables", src, bad, tmp_path / "out" / "t.bz2")
    message = str(err.value)
    assert str(bad / TABLES) in message and "enwiki_tables" in message
    assert want in message and _sha(bad / TABLES) in message
    assert ".tmp" not in message


def test_cli_reports_a_checksum_mismatch_in_one_line(tmp_path, data_mirror, capsys):
    bad = _truncated_mirror(tmp_path, data_mirror)
    src = {"mirror": TABLES, "mirror_sha256": _sha(data_mirror / TABLES)}
    argv = ["fetch", "--name", "enwiki_tables", "--mirror", str(bad)]
    argv += ["--out", str(tmp_path / "t.bz2"), "--record", str(tmp_path / "t.json")]
    assert main([*argv, "--cfg", json.dumps(src)]) != 0
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]  # earlier lines are the INFO log
    assert last.startswith("drpipe fetch: bad input: ")
    assert str(bad / TABLES) in last and "sha256 mismatch" in last
    assert "Traceback" not in err and ".tmp" not in err


def test_mirror_read_from_environment_at_run_time(tmp_path, data_mirror, monkeypatch):
    monkeypatch.setenv("DATA_MIRROR", str(data_mirror))
    src = {"mirror": TABLES, "mirror_sha256": _sha(data_mirror / TABLES)}
    out, rec = tmp_path / "t.bz2", tmp_path / "t.json"
    argv = ["fetch", "--name", "enwiki_tables", "--out", str(out), "--record", str(rec)]
    assert main([*argv, "--cfg", json.dumps(src)]) == 0
    assert _sha(out) == src["mirror_sha256"]
    assert json.loads(rec.read_text())["origin"]["path"] == str((data_mirror / TABLES).resolve())


def test_failed_fetch_leaves_the_verified_file(tmp_path, data_mirror):
    src = {"mirror": TABLES, "mirror_sha256": _sha(data_mirror / TABLES)}
    out = tmp_path / "d" / "t.bz2"
    fetch("enwiki_tables", src, data_mirror, out)
    for mirror in (tmp_path / "empty", _truncated_mirror(tmp_path, data_mirror)):
        mirror.mkdir(exist_ok=True)
        with pytest.raises(FetchError):
            fetch("enwiki_tables", src, mirror, out)
        assert _sha(out) == src["mirror_sha256"]
    assert sorted(p.name for p in out.parent.iterdir()) == ["t.bz2"]  # no temporary left


def test_kept_copy_survives_deletion_and_is_reused_only_when_intact(tmp_path, data_mirror):
    src = {"mirror": TABLES, "mirror_sha256": _sha(data_mirror / TABLES), "note": "a"}
    out, keep = tmp_path / "d" / "t.bz2", tmp_path / "keep" / "t.bz2"
    first = fetch("enwiki_tables", src, data_mirror, out, keep)
    assert os.path.samefile(out, keep)  # a hard link: no second copy on disk
    out.unlink()  # what Snakemake does to a job's outputs before running it
    # A wrong mirror does not matter (nor does the note): the kept copy has the bytes.
    rec = fetch("enwiki_tables", {**src, "note": "b"}, tmp_path / "nowhere", out, keep)
    assert _sha(out) == src["mirror_sha256"] and rec["origin"] == first["origin"]
    assert rec["kept_copy"] == str(keep)
    # Another config (here another checksum) is not served from the kept copy.
    out.unlink()
    with pytest.raises(ChecksumError):
        fetch("enwiki_tables", {**src, "mirror_sha256": "0" * 64}, data_mirror, out, keep)
    assert _sha(keep) == src["mirror_sha256"]
    # A kept copy whose bytes changed is not reused.
    keep.unlink()
    keep.write_bytes(b"corrupt")
    with pytest.raises(FetchError):
        fetch("enwiki_tables", src, tmp_path / "nowhere", out, keep)
    fetch("enwiki_tables", src, data_mirror, out, keep)
    assert _sha(keep) == src["mirror_sha256"]
