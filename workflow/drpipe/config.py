"""Config resolution: ``config.yaml`` holds the defaults, ``config/sources.yaml`` the data
catalogue and ``config/scales/<name>.yaml`` each scale's overlay. Precedence, lowest first:
defaults < the active scale's overlay < the user's ``--configfile`` files <
``--config key=value``. The result is validated against the
JSON schema, completed with each registered method's own keys, before Snakemake builds the
DAG."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from drpipe.errors import ConfigError  # noqa: F401  (raised here; its home is drpipe.errors)
from drpipe.papers import papers
from drpipe.runtime import ANY, SCHEMA_PATH, runtime_keys, runtime_paths
from drpipe.runtime import MARK as RUNTIME_MARK


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


def method_keys(cls: type, schema: dict) -> dict:
    """JSON-schema properties of the keys of method class ``cls``'s config block: the shared
    training keys (``schema``'s ``$defs.train_hparams``) and its own. Its ``defaults`` must
    validate against them, and its own keys may not be runtime ones: those are the loop's
    (``drpipe train`` takes them as options)."""
    own = cls.config_schema()
    marked = sorted(k for k, s in own.items() if s.get(RUNTIME_MARK))
    if marked:
        raise ConfigError(f"method {cls.name!r}: own key(s) {', '.join(marked)} marked runtime")
    keys = {**schema["$defs"]["train_hparams"]["properties"], **own}
    block = {"$defs": schema["$defs"], "additionalProperties": False, "properties": keys}
    validate(cls.cfg_defaults(), block, label=f"method {cls.name!r}: its class's defaults")
    return keys


def with_methods(schema: dict) -> dict:
    """``schema`` with one ``methods.<name>`` block per registered method: the shared training
    keys (``$defs.train_hparams``) plus the method's own, and its ``variants``, whose
    ``overrides`` take the same keys; ``tables.methods`` lists the registered names."""
    # lazy: the methods import torch (~1 s); deep_merge and ConfigError users need none of it
    from drpipe.methods import method_class, method_names

    schema = copy.deepcopy(schema)
    blocks = {}
    for name in method_names():
        keys = method_keys(method_class(name), schema)
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
    """Cross-key rules a JSON schema cannot say (drpipe.config_rules: a name one key gives must
    be configured under another, evaluate.ks covers the tables' columns, ...); one ConfigError
    naming each offending key and its fix."""
    from drpipe.config_rules import problems  # lazy: the rules import the method registry

    found = problems(config)
    if found:
        raise ConfigError(f"{label} is invalid:\n  " + "\n  ".join(found))


def complete(config: dict) -> dict:
    """The defaults a dataset need not spell out, filled in (a copy): each ``qa`` split's
    ``format`` (auto), ``sample`` (null, all) and ``restrict_to_corpus`` (false); a train set
    ``<d>: [<d>]`` for each dataset with training examples (``qa.<d>.train`` or
    ``train_examples.<d>``) that has none of that name; and ``tables.single.<d>: <d>`` for each
    dataset of ``tables.datasets`` with such a train set and no Single entry."""
    out = copy.deepcopy(config)
    for splits in out["qa"].values():
        for entry in (splits or {}).values():
            if entry:
                for key, value in QA_SPLIT_DEFAULTS.items():
                    entry.setdefault(key, value)
    trained = [d for d, s in out["qa"].items() if (s or {}).get("train")]
    for dataset in trained + [d for d in out["train_examples"] if d not in trained]:
        out["train_sets"].setdefault(dataset, [dataset])
    single = out["tables"].setdefault("single", {})
    for dataset in out["tables"]["datasets"]:
        if dataset not in single and dataset in out["train_sets"]:
            single[dataset] = dataset
    return out


QA_SPLIT_DEFAULTS = {"format": "auto", "sample": None, "restrict_to_corpus": False}


class _Leaf:
    """A config value and the layer that set it (``drpipe config show``)."""

    __slots__ = ("value", "origin")

    def __init__(self, value: Any, origin: str) -> None:
        self.value, self.origin = value, origin

    def __deepcopy__(self, memo: dict) -> _Leaf:
        return _Leaf(copy.deepcopy(self.value, memo), self.origin)


# The key under which a tagged mapping keeps the layer that last named it.
ORIGIN = "\0origin"


def tag(tree: Any, origin: str) -> Any:
    """``tree`` with each leaf (and mapping) marked with the layer ``origin``; deep_merge merges
    tagged trees as it merges the plain ones, so the merge says where each value came from."""
    if isinstance(tree, dict):
        return {**{k: tag(v, origin) for k, v in tree.items()}, ORIGIN: origin}
    return _Leaf(tree, origin)


def untag(tree: Any) -> Any:
    if isinstance(tree, dict):
        return {k: untag(v) for k, v in tree.items() if k != ORIGIN}
    return tree.value if isinstance(tree, _Leaf) else tree


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, _Leaf) else value


def _no_tag(tree: Any, origin: str) -> Any:
    return tree


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
        own = dict(_plain(scales[name]) or {})
        name = _plain(own.pop("extends", None))
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


def compose(
    raw: dict,
    overrides: dict | None = None,
    user_files: list[dict] | None = None,
    *,
    tagged: bool = False,
    labels: dict[str, str] | None = None,
) -> tuple[str, dict[str, dict]]:
    """The chosen scale's name and every scale's merged config (not yet validated): ``raw``
    defaults (``read_defaults``: config.yaml with config/sources.yaml and config/scales/ in),
    then the scale's overlay, then the user's ``--configfile`` contents (``user_files``, in
    order), then command-line ``overrides`` (``snakemake --config key=value``, typed as YAML:
    ``typed_overrides``). ``tagged``: each value marked with the layer that set it (``tag``;
    ``labels`` names the layers: ``defaults``, ``sources``, ``user<i>``)."""
    labels = labels or {}
    wrap = tag if tagged else _no_tag
    overrides = wrap(typed_overrides(dict(overrides or {})), "--config")
    user: dict = {}
    for i, extra in enumerate(user_files or []):
        label = labels.get(f"user{i}", f"--configfile #{i + 1}")
        user = deep_merge(user, wrap(extra or {}, label))
    base = {k: v for k, v in raw.items() if k != "scales"}
    if tagged:
        defaults = labels.get("defaults", CONFIG_FILE)
        sources = labels.get("sources", SOURCES_FILE)
        base = {k: tag(v, sources if k == "sources" else defaults) for k, v in base.items()}
        base[ORIGIN] = defaults
    scales = {
        name: wrap(overlay or {}, labels.get(f"scale:{name}", f"{SCALES_DIR}/{name}.yaml"))
        for name, overlay in (raw.get("scales") or {}).items()
    }
    scales = deep_merge(scales, _plain(user.pop("scales", None)) or {})
    scales.pop(ORIGIN, None)
    overrides.pop("scales", None)  # already merged into raw; overlays apply below
    chosen = None
    for layer in (overrides, user, base):
        if chosen is None and _plain(layer.get("scale")):
            chosen = layer["scale"]
    overrides.pop("scale", None)
    user.pop("scale", None)
    scale = _plain(chosen) or "mini"
    if scale not in scales:
        files = ", ".join(f"{SCALES_DIR}/{n}.yaml" for n in sorted(scales))
        raise ConfigError(
            f"key scale: '{scale}' is not a scale: no file {SCALES_DIR}/{scale}.yaml (scale "
            f"files found: {files}; a new scale is a new file there, docs/adding-a-scale.md)"
        )
    origin = chosen.origin if isinstance(chosen, _Leaf) else "the default scale"
    merged = {}
    for name in scales:
        overlay = scale_overlay(scales, name)
        config = deep_merge(deep_merge(deep_merge(base, overlay), user), overrides)
        config["scale"] = wrap(name, origin)
        merged[name] = config
    return scale, merged


def resolve(
    raw: dict,
    schema: dict,
    overrides: dict | None = None,
    user_files: list[dict] | None = None,
) -> dict:
    """The chosen scale's config (``compose``), its defaults completed (``complete``). Every
    scale is validated against the schema; the chosen one against the cross-key rules too
    (``check_consistency``: a rule about what a run plans is the chosen scale's business)."""
    scale, merged = compose(raw, overrides, user_files)
    schema = with_methods(with_papers(schema))
    for name, config in merged.items():
        validate(config, schema, label=f"config (scale '{name}')")
    config = complete(merged[scale])
    check_consistency(config, f"config (scale '{scale}')")
    return config


# libyaml's loader where PyYAML has it: config.yaml and its schema parse 10x faster, a fifth
# of a second off every Snakemake start (the same documents either way).
YamlSafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_yaml(path: str | Path) -> Any:
    with open(path) as fh:
        return yaml.load(fh, Loader=YamlSafeLoader)


# Where a checkout keeps its config, relative to its root: the user's knobs (config.yaml), the
# data catalogue (sources) and one overlay file per scale (a scale is its file).
CONFIG_FILE = "config.yaml"
SOURCES_FILE = "config/sources.yaml"
SCALES_DIR = "config/scales"
SCHEMA_FILE = "workflow/schemas/config.schema.yaml"


def scale_files(root: str | Path) -> dict[str, Path]:
    """Scale name -> its overlay file (``config/scales/<name>.yaml``) in the checkout ``root``."""
    found = {}
    for path in sorted((Path(root) / SCALES_DIR).glob("*.yaml")):
        if not re.fullmatch(NAME_PATTERN.strip("^$"), path.stem):
            raise ConfigError(f"{path}: a scale's file name is a plain identifier ([A-Za-z0-9_])")
        found[path.stem] = path
    return found


def read_defaults(root: str | Path, config_file: str | Path | None = None) -> dict:
    """The defaults of the checkout ``root`` as one mapping: ``config.yaml`` (or
    ``config_file``) with ``sources`` (config/sources.yaml, under any ``sources:`` entries of
    config.yaml) and ``scales`` (each config/scales/<name>.yaml, under any ``scales:`` of
    config.yaml) in; what ``resolve`` takes as ``raw``."""
    root = Path(root)
    raw = read_yaml(Path(config_file) if config_file else root / CONFIG_FILE) or {}
    catalogue = root / SOURCES_FILE
    sources = (read_yaml(catalogue) or {}) if catalogue.is_file() else {}
    scales = {name: read_yaml(path) or {} for name, path in scale_files(root).items()}
    out = {k: v for k, v in raw.items() if k not in ("sources", "scales")}
    out["sources"] = deep_merge(sources, raw.get("sources") or {})
    out["scales"] = deep_merge(scales, raw.get("scales") or {})
    return out


def load(path: str | Path, schema_path: str | Path, overrides: dict | None = None) -> dict:
    """The resolved config of the checkout whose config.yaml is ``path``."""
    return resolve(read_defaults(Path(path).parent, path), read_yaml(schema_path), overrides)


def user_config_files(root: str | Path, config_files: Iterable[str | Path]) -> list[Path]:
    """The user's ``--configfile`` files among ``config_files`` (the checkout's config.yaml is
    the defaults, not a user file)."""
    defaults = (Path(root) / CONFIG_FILE).resolve()
    return [Path(f) for f in config_files if Path(f).resolve() != defaults]


def load_workflow_config(
    root: str | Path, overrides: dict | None = None, config_files: list[str | Path] = ()
) -> dict:
    """The resolved config of the workflow checked out at ``root``: its defaults
    (``read_defaults``), the user's ``--configfile`` files (``config_files``; config.yaml itself
    among them is the defaults, not a user file) and the ``--config key=value`` ``overrides``."""
    user = [read_yaml(f) or {} for f in user_config_files(root, config_files)]
    schema = read_yaml(Path(root) / SCHEMA_FILE)
    return resolve(read_defaults(root), schema, dict(overrides or {}), user_files=user)


def runtime_settings(schema: dict | None = None) -> tuple[tuple[str, ...], ...]:
    """Config paths of the settings that change no result (``x-runtime`` in ``schema``, by
    default the workflow's, with each method's and paper's keys): passed outside the hashed
    params, and left out of the provenance record's config, so that changing one reruns
    nothing. ``*`` stands for every key of a mapping (``sources.*.note``)."""
    return runtime_paths(_workflow_schema() if schema is None else schema)


@cache
def _workflow_schema() -> dict:
    return with_methods(with_papers(read_yaml(SCHEMA_PATH)))


def _drop(node: Any, path: tuple[str, ...]) -> None:
    """Remove the key at ``path`` under ``node`` (``*``: under every key), where present."""
    if not isinstance(node, dict):
        return
    head, rest = path[0], path[1:]
    if not rest:
        for key in list(node) if head == ANY else [head]:
            node.pop(key, None)
        return
    for child in list(node.values()) if head == ANY else [node.get(head)]:
        _drop(child, rest)


def result_config(config: dict) -> dict:
    """The config without the settings that change no result (for the provenance record), each
    method's block completed with its class's defaults (what its runs use)."""
    out = copy.deepcopy(config)
    out["methods"] = {m: method_block(config, m, with_defaults=True) for m in out["methods"]}
    for path in runtime_settings():
        _drop(out, path)
    return out


def runtime_options(config: dict, *section: str) -> dict[str, Any]:
    """The settings of ``config``'s ``section`` (``"encode"``; ``"corpus", "sentences"``) that
    change no result, as a rule passes them outside ``--cfg``: {"batch_size": 64, ...}."""
    keys = runtime_keys(*(step for key in section for step in ("properties", key)))
    node = config
    for key in section:
        node = node[key]
    return {k: node[k] for k in keys if k in node}


def method_runtime_keys() -> tuple[str, ...]:
    """Keys of a method block that change no weight (``x-runtime`` training keys: checkpoint
    cadence, logging), passed to `drpipe train` outside the hashed cfg."""
    return runtime_keys("$defs", "train_hparams")


# A run trained again under another seed (config ``seeds``): the run's name, "@s", the seed.
SEED_SUFFIX = re.compile(r"@s([0-9]+)$")


def split_run_name(run: str) -> tuple[str, str | None]:
    """``"dpr.t3_gold_7"`` -> ``("dpr", "t3_gold_7")``; ``"dpr"`` -> ``("dpr", None)``; a seed
    replica's suffix is not part of either (``"dpr.t3_gold_7@s14"`` -> the same)."""
    base, _, variant = unseeded(run).partition(".")
    return base, variant or None


def unseeded(run: str) -> str:
    """The run a seed replica repeats: ``"dpr@s14"`` -> ``"dpr"`` (any other run: itself)."""
    return SEED_SUFFIX.sub("", run)


def run_seed(run: str) -> int | None:
    """The seed a replica's name gives (``"dpr@s14"`` -> 14); None for every other run."""
    m = SEED_SUFFIX.search(run)
    return int(m.group(1)) if m else None


def seeded(run: str, seed: int) -> str:
    """The name of ``run`` trained under ``seed``: ``("dpr.t3_gold_7", 14)`` ->
    ``"dpr.t3_gold_7@s14"``; a hybrid's seed goes on its dense run (``"dpr@s14+bm25"``)."""
    dense, plus, rest = run.partition("+")
    return f"{unseeded(dense)}@s{int(seed)}{plus}{rest}"


def method_block(config: dict, method: str, with_defaults: bool = False) -> dict[str, Any]:
    """The config block of ``method`` (a registered method; empty when not configured); with
    ``with_defaults``, over its class's defaults (``Method.defaults``, inherited)."""
    from drpipe.methods import method_class, method_names  # lazy: see with_methods

    base, _ = split_run_name(method)
    if base not in method_names():
        raise ConfigError(f"unknown method '{base}' (registered: {method_names()})")
    block = config["methods"].get(base) or {}
    return deep_merge(method_class(base).cfg_defaults(), block) if with_defaults else block


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
    the encoder settings, the method class's defaults, its config block, the variant's
    overrides (none of the runtime keys); ``epochs_by_train_set`` picks the epochs of
    ``train_set`` (DPR: 100 for WebQuestions and CuratedTREC)."""
    skip = ("variants", *method_runtime_keys())  # variants: other runs, not settings
    block = method_block(config, method, with_defaults=True)
    cfg = deep_merge(config["encoder"], {k: v for k, v in block.items() if k not in skip})
    if split_run_name(method)[1]:
        overrides = method_variant(config, method)["overrides"]
        cfg = deep_merge(cfg, {k: v for k, v in overrides.items() if k not in skip})
    by_set = cfg.pop("epochs_by_train_set", None) or {}
    if train_set is not None and train_set in by_set:
        cfg["epochs"] = by_set[train_set]
    cfg.setdefault("seed", config["seed"])
    if run_seed(method) is not None:  # a seed replica: its seed is the only change
        cfg["seed"] = run_seed(method)
    return cfg


def method_run_options(config: dict, method: str) -> dict[str, Any]:
    """Settings of ``method`` that change no result (checkpoint cadence, logging)."""
    keys = method_runtime_keys()
    block = method_block(config, method, with_defaults=True)
    out = {k: block[k] for k in keys if k in block}
    if split_run_name(method)[1]:
        overrides = method_variant(config, method)["overrides"]
        out.update({k: overrides[k] for k in keys if k in overrides})
    return out


def parse_config_values(values: list[str]) -> dict[str, Any]:
    """``--config`` values as Snakemake reads them: NAME=VALUE, a mapping or list as YAML, a
    scalar as text (typed by the config's own reading: drpipe.config.typed_overrides)."""
    out: dict[str, Any] = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ConfigError(f"--config takes NAME=VALUE, not {item!r}")
        parsed = yaml.safe_load(value) if value.strip() else None
        out[name] = parsed if isinstance(parsed, (dict, list)) else value
    return out
