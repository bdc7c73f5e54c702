"""Config resolution: one ``config.yaml`` holds the defaults and a per-scale overlay for each
scale. Precedence, lowest first: ``config.yaml`` defaults < the active scale's overlay < the
user's ``--configfile`` files < ``--config key=value``. The result is validated against the
JSON schema, completed with each registered method's own keys, before Snakemake builds the
DAG."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from drpipe.papers import papers


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


def _number_hint(error: jsonschema.ValidationError) -> str:
    """YAML 1.1 reads ``1e-4`` (no dot) as a string; say how to write it as a number."""
    value = error.instance
    if error.validator != "type" or not isinstance(value, str):
        return ""
    try:
        number = float(value)
    except ValueError:
        return ""
    mantissa, _, exponent = value.lower().partition("e")
    fixed = f"{mantissa if '.' in mantissa else mantissa + '.0'}e{exponent}" if exponent else value
    return f" (YAML read {value!r} as text; write {fixed} to give the number {number:g})"


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
                lines.append(f"key {_key_path(e)}: {e.message}{_number_hint(e)}")
        raise ConfigError(f"{label} is invalid:\n  " + "\n  ".join(lines))


NAME_PATTERN = "^[A-Za-z0-9_]+$"


def with_methods(schema: dict) -> dict:
    """``schema`` with one ``methods.<name>`` block per registered method: the shared training
    keys (``$defs.train_hparams``) plus the method's own, and its ``variants``, whose
    ``overrides`` take the same keys; ``tables.methods`` lists the registered names."""
    # lazy: the methods import torch (~1 s); deep_merge and ConfigError users need none of it
    from drpipe.methods import method_class, method_names

    schema = copy.deepcopy(schema)
    shared = schema["$defs"]["train_hparams"]["properties"]
    blocks = {}
    for name in method_names():
        keys = {**shared, **method_class(name).config_schema()}
        overrides = {"type": "object", "additionalProperties": False, "properties": keys}
        variant = {
            "type": "object",
            "additionalProperties": False,
            "required": ["overrides"],
            "properties": {"overrides": overrides, "paper_row": {"type": "string"}},
        }
        variants = {
            "type": "object",
            "propertyNames": {"pattern": NAME_PATTERN},
            "additionalProperties": variant,
        }
        blocks[name] = {
            "type": "object",
            "additionalProperties": False,
            "properties": {**keys, "variants": variants},
        }
    schema["properties"]["methods"]["properties"] = blocks
    schema["properties"]["tables"]["properties"]["methods"]["items"] = {"enum": method_names()}
    return schema


def merge_schema(base: dict, fragment: dict) -> dict:
    """``base`` with a schema ``fragment`` merged in: mappings merge, ``required`` lists join,
    anything else given twice is an error (two papers claiming one key)."""
    out = copy.deepcopy(base)
    for key, value in fragment.items():
        if key == "required":
            out[key] = list(dict.fromkeys([*out.get(key, []), *value]))
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_schema(out[key], value)
        elif key in out and out[key] != value:
            raise ConfigError(f"config schema: key '{key}' is defined twice")
        else:
            out[key] = copy.deepcopy(value)
    return out


def with_papers(schema: dict) -> dict:
    """``schema`` with each registered paper's block (``papers/<paper>/schema.yaml``)."""
    for p in papers():
        path = p.file("schema.yaml")
        if path is not None:
            schema = merge_schema(schema, yaml.safe_load(path.read_text()) or {})
    return schema


def check_consistency(config: dict, label: str) -> None:
    """Cross-key rules a JSON schema cannot say; errors name both keys."""
    ks = config["evaluate"]["ks"]
    for key, depth in (("retrieve.top_k", config["retrieve"]["top_k"]),
                       ("bm25.hits", config["bm25"]["hits"])):  # fmt: skip
        if max(ks) > depth:
            raise ConfigError(
                f"{label} is invalid:\n  key evaluate.ks: top-{max(ks)} is deeper than "
                f"{key} = {depth} (a run that deep does not exist)"
            )


def scale_overlay(scales: dict[str, Any], name: str) -> dict:
    """The overlay of scale ``name``: an overlay with ``extends: OTHER`` is OTHER's overlay
    (itself resolved) with its own keys merged in, so a scale can be another one with only some
    values changed (the rehearsal: the paper scale with stand-in inputs and tiny sizes)."""
    chain: list[str] = []
    overlay: dict = {}
    while name is not None:
        if name in chain:
            raise ConfigError(f"key scales.{chain[0]}.extends: a cycle ({' -> '.join(chain)})")
        if name not in scales:
            where = f"scales.{chain[-1]}.extends" if chain else "scale"
            raise ConfigError(f"key {where}: '{name}' is not one of the scales {sorted(scales)}")
        chain.append(name)
        own = dict(scales[name] or {})
        name = own.pop("extends", None)
        overlay = deep_merge(own, overlay)
    return overlay


def typed_overrides(value: Any) -> Any:
    """``snakemake --config`` values as YAML types. Snakemake reads a nested value
    (``encode='{shards: 2}'``) with YAML's BaseLoader, which keeps every scalar as text, so each
    text scalar is read again as YAML reads it in a config file (``2`` -> 2, ``true`` -> True,
    ``null`` -> None); any other text stays text."""
    if isinstance(value, dict):
        return {k: typed_overrides(v) for k, v in value.items()}
    if isinstance(value, list):
        return [typed_overrides(v) for v in value]
    if isinstance(value, str):
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            return value
        return parsed if parsed is None or isinstance(parsed, (bool, int, float)) else value
    return value


def resolve(
    raw: dict,
    schema: dict,
    overrides: dict | None = None,
    user_files: list[dict] | None = None,
) -> dict:
    """The chosen scale's config: ``raw`` defaults, then the scale's overlay, then the user's
    ``--configfile`` contents (``user_files``, in order), then command-line ``overrides``
    (``snakemake --config key=value``, typed as YAML: ``typed_overrides``). Every scale is
    validated; returns the chosen one."""
    overrides = typed_overrides(dict(overrides or {}))
    user = {}
    for extra in user_files or []:
        user = deep_merge(user, extra or {})
    scales = deep_merge(raw.get("scales", {}), user.pop("scales", None) or {})
    overrides.pop("scales", None)  # already merged into raw; overlays apply below
    scale = overrides.pop("scale", None) or user.pop("scale", None) or raw.get("scale", "mini")
    if scale not in scales:
        raise ConfigError(f"key scale: '{scale}' is not one of the scales {sorted(scales)}")
    base = {k: v for k, v in raw.items() if k != "scales"}
    schema = with_methods(with_papers(schema))
    resolved = {}
    for name in scales:
        overlay = scale_overlay(scales, name)
        merged = deep_merge(deep_merge(deep_merge(base, overlay), user), overrides)
        merged["scale"] = name
        label = f"config (scale '{name}')"
        validate(merged, schema, label=label)
        check_consistency(merged, label)
        resolved[name] = merged
    return resolved[scale]


# libyaml's loader where PyYAML has it: config.yaml and its schema parse 10x faster, a fifth
# of a second off every Snakemake start (the same documents either way).
YamlSafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_yaml(path: str | Path) -> Any:
    with open(path) as fh:
        return yaml.load(fh, Loader=YamlSafeLoader)


def load(path: str | Path, schema_path: str | Path, overrides: dict | None = None) -> dict:
    return resolve(read_yaml(path), read_yaml(schema_path), overrides)


def load_workflow_config(
    root: str | Path, overrides: dict | None = None, config_files: list[str | Path] = ()
) -> dict:
    """The resolved config of the workflow checked out at ``root``: its ``config.yaml``, the
    user's ``--configfile`` files (``config_files``; config.yaml itself among them is the
    defaults, not a user file) and the ``--config key=value`` ``overrides``."""
    root = Path(root)
    defaults = root / "config.yaml"
    user = [read_yaml(f) or {} for f in config_files if Path(f).resolve() != defaults.resolve()]
    schema = read_yaml(root / "workflow" / "schemas" / "config.schema.yaml")
    return resolve(read_yaml(defaults), schema, dict(overrides or {}), user_files=user)


# Settings that change no result (scheduling, batching, checkpoint cadence, notes): passed
# outside the hashed params, and left out of the provenance record's config so that changing
# one reruns nothing. (encode batch/block sizes change vectors only at float rounding: tested.)
RUNTIME_SETTINGS = (
    ("threads",),
    ("resources",),
    ("encode", "batch_size"),
    ("encode", "block_size"),
    ("retrieve", "batch_size"),
    ("corpus", "wiki_processes"),
    ("corpus", "sentences", "batch_size"),
)


def result_config(config: dict) -> dict:
    """The config without the settings that change no result (for the provenance record)."""
    out = copy.deepcopy(config)
    for path in RUNTIME_SETTINGS:
        node = out
        for key in path[:-1]:
            node = node.get(key, {})
        node.pop(path[-1], None)
    for block in out["methods"].values():
        for key in ("checkpoint_every", "log_every"):
            block.pop(key, None)
        for variant in (block.get("variants") or {}).values():
            for key in ("checkpoint_every", "log_every"):
                variant["overrides"].pop(key, None)
    for src in out["sources"].values():
        src.pop("note", None)
    return out


# Keys of a method block that are not training hyper-parameters: ``variants`` (other runs),
# and settings that change no weight (passed to `drpipe train` outside the hashed cfg).
NOT_TRAINING = ("variants", "checkpoint_every", "log_every")


def split_run_name(run: str) -> tuple[str, str | None]:
    """``"dpr.t3_gold_7"`` -> ``("dpr", "t3_gold_7")``; ``"dpr"`` -> ``("dpr", None)``."""
    base, _, variant = run.partition(".")
    return base, variant or None


def method_block(config: dict, method: str) -> dict[str, Any]:
    """The config block of ``method`` (a registered method; empty when not configured)."""
    from drpipe.methods import method_names  # lazy: see with_methods

    base, _ = split_run_name(method)
    if base not in method_names():
        raise ConfigError(f"unknown method '{base}' (registered: {method_names()})")
    return config["methods"].get(base) or {}


def method_variant(config: dict, method: str) -> dict[str, Any]:
    """The ``variants.<v>`` entry of ``method = "<base>.<v>"``; error naming the key if absent."""
    base, variant = split_run_name(method)
    variants = method_block(config, base).get("variants") or {}
    if variant not in variants:
        raise ConfigError(
            f"key methods.{base}.variants.{variant}: no such variant of method '{base}' "
            f"(configured: {sorted(variants)})"
        )
    return variants[variant]


def method_config(config: dict, method: str, train_set: str | None = None) -> dict[str, Any]:
    """Training cfg of ``method`` (``dpr`` or a variant ``dpr.<variant>``) for ``train_set``:
    the encoder settings, the method's keys, the variant's overrides; ``epochs_by_train_set``
    picks the epochs of ``train_set`` (DPR: 100 for WebQuestions and CuratedTREC)."""
    block = method_block(config, method)
    cfg = deep_merge(config["encoder"], {k: v for k, v in block.items() if k not in NOT_TRAINING})
    if split_run_name(method)[1]:
        overrides = method_variant(config, method)["overrides"]
        cfg = deep_merge(cfg, {k: v for k, v in overrides.items() if k not in NOT_TRAINING})
    by_set = cfg.pop("epochs_by_train_set", None) or {}
    if train_set is not None and train_set in by_set:
        cfg["epochs"] = by_set[train_set]
    cfg.setdefault("seed", config["seed"])
    return cfg


def method_run_options(config: dict, method: str) -> dict[str, Any]:
    """Settings of ``method`` that change no result (checkpoint cadence, logging)."""
    block = method_block(config, method)
    out = {k: block[k] for k in ("checkpoint_every", "log_every") if k in block}
    if split_run_name(method)[1]:
        overrides = method_variant(config, method)["overrides"]
        out.update({k: overrides[k] for k in ("checkpoint_every", "log_every") if k in overrides})
    return out
