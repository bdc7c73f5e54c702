"""Settings that change no result (scheduling, batch sizes, checkpoint cadence, notes), declared
once: ``x-runtime: true`` on their keys in the config schema (workflow/schemas/
config.schema.yaml; a method's own keys in its class's ``schema``). Every list of them derives
from that mark: the config paths left out of the provenance record and of a method's training
cfg (drpipe.config), the options ``drpipe train`` and ``drpipe encode`` take outside ``--cfg``.

A module of its own, importing no other drpipe module: the training and encoding commands read
it, and their code hashes cover what they import (drpipe.config would bring the papers along).
The schema file is not in those hashes, rightly: the mark changes which options exist, not a
result.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml

MARK = "x-runtime"
SCHEMA_PATH = Path(__file__).resolve().parent.parent / "schemas" / "config.schema.yaml"
ANY = "*"  # a path step standing for every key of a mapping (``sources.*.note``)


@cache
def _schema() -> dict[str, Any]:
    with open(SCHEMA_PATH) as fh:
        return yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def runtime_paths(schema: dict[str, Any] | None = None) -> tuple[tuple[str, ...], ...]:
    """Key paths of the marked settings of ``schema`` (default: the workflow's), in schema
    order; ``ANY`` stands for each key of a mapping. ``$ref``s to ``$defs`` are followed."""
    schema = _schema() if schema is None else schema
    defs = schema.get("$defs", {})
    out: list[tuple[str, ...]] = []

    def walk(node: Any, path: tuple[str, ...], seen: frozenset[str]) -> None:
        if not isinstance(node, dict):
            return
        if node.get(MARK):
            out.append(path)
            return
        ref = node.get("$ref", "")
        if ref.startswith("#/$defs/") and ref not in seen:
            walk(defs.get(ref.rsplit("/", 1)[1]), path, seen | {ref})
        for key, sub in (node.get("properties") or {}).items():
            walk(sub, (*path, key), seen)
        walk(node.get("additionalProperties"), (*path, ANY), seen)
        for alt in (*node.get("oneOf", ()), *node.get("anyOf", ()), *node.get("allOf", ())):
            walk(alt, path, seen)

    walk(schema, (), frozenset())
    return tuple(dict.fromkeys(out))


def runtime_keys(*where: str, schema: dict[str, Any] | None = None) -> tuple[str, ...]:
    """The marked keys directly under the schema node at ``where`` (e.g. ``"$defs",
    "train_hparams"`` or ``"properties", "encode"``; none: the top level)."""
    schema = _schema() if schema is None else schema
    node = schema
    for step in where:
        node = node[step]
    sub = {**node, "$defs": schema.get("$defs", {})}
    return tuple(p[0] for p in runtime_paths(sub) if len(p) == 1)
