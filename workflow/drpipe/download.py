"""Fetch each input from a mirror directory or its canonical URL, verify it, record where it came from.

A mirror (``DATA_MIRROR``) is tried first: machines without internet (CI, these development
boxes) point it at a read-only copy of the real files. Otherwise the canonical URL is
downloaded. Either way the file's sha256 is computed, checked against the configured checksum
when one is known, and written to a JSON record next to the data so that every number in a
table can be traced back to the bytes it was computed from.

Inputs are never lost. The mirror's location is read at run time (``DATA_MIRROR``) and is not
part of the source's config, so moving or renaming the mirror does not refetch anything. A
fetch writes under a temporary name and replaces the output only with a verified file. Each
verified file is also hard-linked into a *kept copy* (``--keep``) outside Snakemake's outputs:
Snakemake deletes a job's outputs before running it and after it fails, so a refetch (forced,
or after a code change) first reuses the kept copy when it was fetched for the same source
config (URL, checksums, mirror-relative path) and still has the recorded sha256; the mirror
and the URL are only consulted when there is no such copy.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import shutil
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from drpipe.cliutil import add_cfg
from drpipe.errors import InputError
from drpipe.io import atomic_path, progress, read_json, write_json

log = logging.getLogger(__name__)

# Source keys that do not determine the bytes (kept out of the rule's params and the kept copy's
# identity, so editing them reruns nothing).
NOT_BYTES = ("note",)


def file_digest(path: str | Path, algorithm: str = "sha256", chunk: int = 1 << 20) -> str:
    h = hashlib.new(algorithm)
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


class FetchError(InputError):
    """A source could not be fetched: names the mirror file or URL and the source."""

    def __init__(self, where: str | Path, name: str, problem: str):
        super().__init__(where, f"source '{name}'", problem)


class ChecksumError(FetchError):
    """The fetched bytes differ from the configured checksum."""


def byte_config(source: dict[str, Any]) -> dict[str, Any]:
    """The part of a source entry that determines its bytes (what may trigger a refetch)."""
    return {k: v for k, v in source.items() if k not in NOT_BYTES}


def verify(path: Path, expected: dict[str, str | None], name: str, where: str | Path) -> None:
    """Raise ChecksumError naming ``where`` (the mirror file or URL the bytes of ``path`` came
    from) if any configured digest (sha256, md5) of ``path`` differs."""
    for algorithm, want in expected.items():
        if not want:
            continue
        got = file_digest(path, algorithm)
        if got != want.lower():
            raise ChecksumError(
                where, name, f"{algorithm} mismatch: expected {want.lower()}, got {got}"
            )


def _download(url: str, dest: Path, name: str) -> None:
    try:
        with urllib.request.urlopen(url, timeout=60) as resp:  # noqa: S310 (configured URLs only)
            total = int(resp.headers.get("Content-Length") or 0) or None
            got = 0
            with (
                open(dest, "wb") as out,
                progress(
                    total=total, unit="B", unit_scale=True, desc=url.rsplit("/", 1)[-1]
                ) as bar,
            ):
                while block := resp.read(1 << 20):
                    out.write(block)
                    got += len(block)
                    bar.update(len(block))
    except (urllib.error.URLError, OSError) as exc:
        raise FetchError(url, name, f"download failed: {exc}") from None
    if total is not None and got != total:
        raise FetchError(url, name, f"download truncated: {got} of {total} bytes")


def _link_or_copy(src: Path, dest: Path) -> None:
    """Make ``dest`` (which must not exist) a hard link to ``src``, or a copy across devices."""
    try:
        os.link(src, dest)
    except OSError:
        shutil.copyfile(src, dest)


def _kept_record(keep: Path) -> Path:
    return keep.with_name(keep.name + ".json")


def _keep(out: Path, record: dict, want: dict, keep: Path) -> None:
    """Hard-link the verified ``out`` to ``keep`` (replacing any older kept copy) and record it."""
    keep.parent.mkdir(parents=True, exist_ok=True)
    tmp = keep.with_name(f".{keep.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    _link_or_copy(out, tmp)
    os.replace(tmp, keep)
    write_json(_kept_record(keep), {"source": want, "record": record})


def _reuse(name: str, want: dict, keep: Path, out: Path) -> dict | None:
    """Put the kept copy at ``out`` if it was fetched for this source config and is intact."""
    meta_path = _kept_record(keep)
    if not (keep.is_file() and meta_path.is_file()):
        return None
    try:
        meta = read_json(meta_path)
    except (OSError, ValueError):
        return None
    if meta.get("source") != want:
        log.info("%s: kept copy %s was fetched for another config; fetching", name, keep)
        return None
    record = meta["record"]
    if keep.stat().st_size != record["bytes"] or file_digest(keep) != record["sha256"]:
        log.warning("%s: kept copy %s no longer has its recorded sha256; fetching", name, keep)
        return None
    log.info("%s: reusing kept verified copy %s (sha256 %s)", name, keep, record["sha256"])
    with atomic_path(out) as tmp:
        tmp.unlink()
        _link_or_copy(keep, tmp)
    return {**record, "file": str(out), "kept_copy": str(keep)}


def fetch(
    name: str,
    source: dict[str, Any],
    mirror: str | Path | None,
    out: Path,
    keep: Path | None = None,
) -> dict:
    """Put source ``name`` at ``out``; return its provenance record.

    ``out`` is replaced only by a verified file: a failed fetch leaves what was there. With
    ``keep``, a kept copy fetched for the same source config is reused, and a fresh fetch is
    kept there.
    """
    started = time.time()
    out = Path(out)
    want = byte_config(source)
    if keep is not None:
        reused = _reuse(name, want, Path(keep), out)
        if reused is not None:
            return {**reused, "seconds": round(time.time() - started, 3)}
    mirror_rel = source.get("mirror")
    mirror_file = Path(mirror) / mirror_rel if mirror and mirror_rel else None
    with atomic_path(out) as tmp:
        if mirror_file is not None and mirror_file.is_file():
            log.info("%s: copying from mirror %s", name, mirror_file)
            shutil.copyfile(mirror_file, tmp)
            origin = {"kind": "mirror", "path": str(mirror_file.resolve()), "relative": mirror_rel}
            verify(tmp, {"sha256": source.get("mirror_sha256")}, name, mirror_file)
        elif source.get("url"):
            if mirror_file is not None:
                log.warning("%s: %s not in mirror, downloading %s", name, mirror_rel, source["url"])
            log.info("%s: downloading %s", name, source["url"])
            try:
                _download(source["url"], tmp, name)
            except FetchError as exc:
                if mirror_file is None:
                    raise
                problem = f"{exc.problem} (and the mirror has no {mirror_file})"
                raise FetchError(exc.path, name, problem) from None
            origin = {"kind": "url", "url": source["url"]}
            verify(
                tmp, {"sha256": source.get("sha256"), "md5": source.get("md5")}, name, source["url"]
            )
        else:
            if mirror_file is not None:
                where = mirror_file
            elif mirror:
                where = f"mirror {mirror} (the source has no mirror path)"
            else:
                where = "DATA_MIRROR (not set)"
            raise FetchError(where, name, "not found, and no URL is configured")
    record = {
        "name": name,
        "file": str(out),
        "bytes": out.stat().st_size,
        "sha256": file_digest(out),
        "origin": origin,
        "canonical_url": source.get("url"),
        "seconds": round(time.time() - started, 3),
    }
    if keep is not None:
        _keep(out, record, want, Path(keep))
    return record


def _cmd_fetch(args: argparse.Namespace) -> None:
    mirror = args.mirror if args.mirror is not None else os.environ.get("DATA_MIRROR", "")
    keep = Path(args.keep) if args.keep else None
    record = fetch(args.name, args.cfg, mirror or None, Path(args.out), keep)
    write_json(args.record, record)
    log.info("%s: %d bytes, sha256 %s", args.name, record["bytes"], record["sha256"])


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fetch", help="copy an input from the mirror or download it; verify; record")
    p.add_argument("--name", required=True, help="source name in config `sources`")
    p.add_argument(
        "--mirror",
        default=None,
        help="mirror directory (default: env DATA_MIRROR, read at run time so that where the "
        "mirror is never reruns a fetch; the record names the file copied)",
    )
    p.add_argument("--out", required=True)
    p.add_argument("--record", required=True, help="JSON provenance record to write")
    p.add_argument(
        "--keep",
        default=None,
        help="where to hard-link the verified file (outside Snakemake's outputs, so a failed "
        "refetch cannot lose it); a copy kept for the same source config is reused",
    )
    add_cfg(p)
    p.set_defaults(func=_cmd_fetch)
