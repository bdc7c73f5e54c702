"""Fetched inputs with their recorded sha256, and the inputs whose bytes no longer match
(fetch records, and the small inputs whose checksum Snakemake recorded with each job)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from drpipe.audit.lineage import Lineage
from drpipe.io import read_json


def input_records(lineage: Lineage) -> list[dict[str, Any]]:
    """Fetched inputs: each record's file, sha256 and where it came from."""
    out = []
    for job in lineage.jobs.values():
        for rel in job.outputs:
            if "/records/" in rel and rel.endswith(".json"):
                try:
                    rec = read_json(lineage.workdir / rel)
                except (OSError, ValueError):
                    continue
                out.append(
                    {
                        "record": rel,
                        "name": rec.get("name"),
                        "file": rec.get("file"),
                        "sha256": rec.get("sha256"),
                        "bytes": rec.get("bytes"),
                        "origin": (rec.get("origin") or {}).get("kind"),
                        "url": rec.get("canonical_url"),
                    }
                )
    return sorted(out, key=lambda r: r["record"])


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def checksum_mismatches(lineage: Lineage, inputs: list[dict]) -> list[dict[str, Any]]:
    """Inputs whose bytes differ from their recorded checksums (fetch records and the small
    inputs whose sha256 Snakemake recorded with each job)."""
    work = lineage.workdir
    out = []
    for rec in inputs:
        path = work / (rec["file"] or "")
        if not rec["file"] or not path.is_file():
            out.append({"file": rec["file"], "recorded": rec["sha256"], "now": None,
                        "by": rec["record"], "problem": "missing"})  # fmt: skip
            continue
        now = sha256_file(path)
        if now != rec["sha256"]:
            out.append({"file": rec["file"], "recorded": rec["sha256"], "now": now,
                        "by": rec["record"], "problem": "changed"})  # fmt: skip
    seen = set()
    for job in lineage.jobs.values():
        for rel, recorded in sorted(job.input_checksums.items()):
            if (rel, recorded) in seen:
                continue
            seen.add((rel, recorded))
            path = work / rel
            algo, _, digest = str(recorded).partition(":")
            if algo != "sha256" or not digest:
                continue
            now = sha256_file(path) if path.is_file() else None
            if now != digest:
                out.append(
                    {
                        "file": rel,
                        "recorded": digest,
                        "now": now,
                        "by": f"{job.rule} ({job.id})",
                        "problem": "missing" if now is None else "changed",
                    }
                )
    return out
