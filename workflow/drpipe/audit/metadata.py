"""Snakemake's metadata records of a working directory, merged into jobs.

``.snakemake/metadata/`` (next to ``results/``) holds one JSON record per output file, named by
the base64 of its path: the job's rule, inputs, shell command (with the ``--cfg`` config
slice), params (with the ``code=`` hash of the job's import closure) and the checksums of its
small inputs.
"""

from __future__ import annotations

import ast
import base64
import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# A code hash param (drpipe.codehash: 16 hex digits).
HEX16 = re.compile(r"^[0-9a-f]{16}$")


@dataclass
class Job:
    """One recorded Snakemake job: the records of its outputs merged."""

    rule: str
    outputs: list[str]
    inputs: list[str]
    shellcmd: str
    params: list[str]
    log: list[str]
    starttime: float | None
    endtime: float | None
    input_checksums: dict[str, str] = field(default_factory=dict)
    conda_env: str | None = None

    @property
    def id(self) -> str:
        return self.outputs[0]

    @property
    def cfg(self) -> dict | None:
        return shell_cfg(self.shellcmd)

    @property
    def code(self) -> str | None:
        for p in self.params:
            value = literal(p)
            if isinstance(value, str) and HEX16.match(value):
                return value
        return None


def literal(text: str) -> Any:
    """A recorded param's Python value (its repr evaluated), or the text itself."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def shell_cfg(shellcmd: str | None) -> dict | None:
    """The ``--cfg`` JSON object of a recorded shell command (the step's config slice)."""
    if not shellcmd:
        return None
    try:
        words = shlex.split(shellcmd)
    except ValueError:
        return None
    for i, word in enumerate(words[:-1]):
        if word == "--cfg":
            try:
                value = json.loads(words[i + 1])
            except json.JSONDecodeError:
                return None
            return value if isinstance(value, dict) else None
    return None


def _flat(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out or {prefix.rstrip("."): {}}
    return {prefix.rstrip("."): obj}


def config_diff(old: dict | None, new: dict | None) -> list[str]:
    """``key: old -> new`` for every leaf of two config slices that differs."""
    a, b = _flat(old or {}), _flat(new or {})
    out = []
    for key in sorted(set(a) | set(b)):
        if a.get(key, "<absent>") != b.get(key, "<absent>"):
            out.append(
                f"{key}: {json.dumps(a.get(key, '<absent>'))} -> {json.dumps(b.get(key, '<absent>'))}"
            )
    return out


def _decode_key(rel: Path) -> str | None:
    parts = [p[1:] if p.startswith("@") else p for p in rel.parts]
    try:
        return base64.urlsafe_b64decode("".join(parts).encode()).decode()
    except (ValueError, UnicodeDecodeError):
        return None


def read_metadata(workdir: str | Path) -> dict[str, dict]:
    """Snakemake's metadata records of a working directory: output path -> record."""
    root = Path(workdir) / ".snakemake" / "metadata"
    records: dict[str, dict] = {}
    if not root.is_dir():
        return records
    for path in root.rglob("*"):
        if not path.is_file():
            continue
        key = _decode_key(path.relative_to(root))
        if key is None:
            continue
        try:
            rec = json.loads(path.read_text())
        except (json.JSONDecodeError, OSError):
            continue
        if rec.get("rule") and not rec.get("incomplete"):
            records[key] = rec
    return records
