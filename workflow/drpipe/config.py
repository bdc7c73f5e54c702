"""Config resolution: one ``config.yaml`` holds the defaults and a per-scale overlay for each
scale; the active scale's overlay is merged onto the defaults and the result validated against
the JSON schema before Snakemake builds the DAG."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import yaml


class ConfigError(ValueError):
    pass


def deep_merge(base: dict, overlay: dict) -> dict:
    """A copy of ``base`` with ``overlay`` merged in; mappings merge, everything else replaces."""
    out = copy.deepcopy(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _key_path(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "<top level>"


def validate(config: dict, schema: dict, label: str = "config") -> None:
    """Raise ConfigError naming the offending key (all problems, most specific first)."""
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: (-len(e.path), e.message))
    if errors:
        lines = []
        for e in errors[:10]:
            if e.validator == "additionalProperties":
                extra = sorted(set(e.instance) - set(e.schema.get("properties", {})))
                where = _key_path(e)
                names = ", ".join(f"{where}.{k}" if where != "<top level>" else k for k in extra)
                lines.append(f"unknown key {names}")
            else:
                lines.append(f"key {_key_path(e)}: {e.message}")
        raise ConfigError(f"{label} is invalid:\n  " + "\n  ".join(lines))


def resolve(raw: dict, schema: dict, overrides: dict | None = None) -> dict:
    """Merge the chosen scale's overlay onto the defaults, then command-line ``overrides``
    (``snakemake --config key=value``, which must win over the overlay too); validate every
    scale and return the chosen one."""
    overrides = dict(overrides or {})
    scales = raw.get("scales", {})
    overrides.pop("scales", None)  # already merged into raw; overlays apply below
    scale = overrides.pop("scale", None) or raw.get("scale", "mini")
    if scale not in scales:
        raise ConfigError(f"key scale: '{scale}' is not one of the scales {sorted(scales)}")
    base = {k: v for k, v in raw.items() if k != "scales"}
    resolved = {}
    for name, overlay in scales.items():
        merged = deep_merge(deep_merge(base, overlay or {}), overrides)
        merged["scale"] = name
        validate(merged, schema, label=f"config (scale '{name}')")
        resolved[name] = merged
    return resolved[scale]


def load(path: str | Path, schema_path: str | Path, overrides: dict | None = None) -> dict:
    with open(path) as fh:
        raw = yaml.safe_load(fh)
    with open(schema_path) as fh:
        schema = yaml.safe_load(fh)
    return resolve(raw, schema, overrides)


def method_config(config: dict, method: str) -> dict[str, Any]:
    """Hyper-parameters of ``method`` (``dpr`` or a variant ``dpr.<variant>``) merged onto the
    shared encoder settings."""
    base, _, variant = method.partition(".")
    if base not in config["methods"]:
        raise ConfigError(f"unknown method '{base}' (configured: {sorted(config['methods'])})")
    cfg = deep_merge(config["encoder"], config["methods"][base])
    if variant:
        variants = config.get("variants", {})
        if variant not in variants:
            raise ConfigError(f"unknown variant '{variant}' of method '{base}'")
        cfg = deep_merge(cfg, variants[variant]["overrides"])
    cfg.setdefault("seed", config["seed"])
    return cfg
