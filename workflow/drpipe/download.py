"""Fetch each input from a mirror directory or its canonical URL, verify it, record where it came from.

A mirror (``DATA_MIRROR``) is tried first: machines without internet (CI, these development
boxes) point it at a read-only copy of the real files. Otherwise the canonical URL is
downloaded. Either way the file's sha256 is computed, checked against the configured checksum
when one is known, and written to a JSON record next to the data so that every number in a
table can be traced back to the bytes it was computed from.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import shutil
import time
import urllib.request
from pathlib import Path
from typing import Any

from drpipe.cliutil import add_cfg
from drpipe.io import atomic_path, progress, write_json

log = logging.getLogger(__name__)


def file_digest(path: str | Path, algorithm: str = "sha256", chunk: int = 1 << 20) -> str:
    h = hashlib.new(algorithm)
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


class ChecksumError(RuntimeError):
    pass


def verify(path: Path, expected: dict[str, str | None], label: str) -> None:
    """Raise if any configured digest (sha256, md5) of ``path`` differs."""
    for algorithm, want in expected.items():
        if not want:
            continue
        got = file_digest(path, algorithm)
        if got != want.lower():
            raise ChecksumError(
                f"{label}: {algorithm} mismatch for {path}: expected {want}, got {got}"
            )


def _download(url: str, dest: Path) -> None:
    with urllib.request.urlopen(url, timeout=60) as resp:  # noqa: S310 (configured URLs only)
        total = int(resp.headers.get("Content-Length") or 0) or None
        with (
            open(dest, "wb") as out,
            progress(total=total, unit="B", unit_scale=True, desc=url.rsplit("/", 1)[-1]) as bar,
        ):
            while block := resp.read(1 << 20):
                out.write(block)
                bar.update(len(block))


def fetch(name: str, source: dict[str, Any], mirror: str | Path | None, out: Path) -> dict:
    """Put source ``name`` at ``out``; return its provenance record."""
    started = time.time()
    mirror_rel = source.get("mirror")
    mirror_file = Path(mirror) / mirror_rel if mirror and mirror_rel else None
    with atomic_path(out) as tmp:
        if mirror_file is not None and mirror_file.is_file():
            log.info("%s: copying from mirror %s", name, mirror_file)
            shutil.copyfile(mirror_file, tmp)
            origin = {"kind": "mirror", "path": str(mirror_file.resolve()), "relative": mirror_rel}
            verify(tmp, {"sha256": source.get("mirror_sha256")}, name)
        elif source.get("url"):
            if mirror_file is not None:
                log.warning("%s: %s not in mirror, downloading %s", name, mirror_rel, source["url"])
            log.info("%s: downloading %s", name, source["url"])
            _download(source["url"], tmp)
            origin = {"kind": "url", "url": source["url"]}
            verify(tmp, {"sha256": source.get("sha256"), "md5": source.get("md5")}, name)
        else:
            where = f"mirror file {mirror_file}" if mirror_file else "a mirror (DATA_MIRROR)"
            raise FileNotFoundError(f"source '{name}': no URL configured and {where} not found")
    record = {
        "name": name,
        "file": str(out),
        "bytes": out.stat().st_size,
        "sha256": file_digest(out),
        "origin": origin,
        "canonical_url": source.get("url"),
        "note": source.get("note"),
        "seconds": round(time.time() - started, 3),
    }
    return record


def _cmd_fetch(args: argparse.Namespace) -> None:
    record = fetch(args.name, args.cfg, args.mirror or None, Path(args.out))
    write_json(args.record, record)
    log.info("%s: %d bytes, sha256 %s", args.name, record["bytes"], record["sha256"])


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fetch", help="copy an input from the mirror or download it; verify; record")
    p.add_argument("--name", required=True, help="source name in config `sources`")
    p.add_argument("--mirror", default="", help="mirror directory (DATA_MIRROR)")
    p.add_argument("--out", required=True)
    p.add_argument("--record", required=True, help="JSON provenance record to write")
    add_cfg(p)
    p.set_defaults(func=_cmd_fetch)
