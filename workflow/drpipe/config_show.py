"""``drpipe config show``: the resolved config of a scale, or one run's training cfg, as YAML with
the layer that set each value in a comment (config.yaml, config/sources.yaml,
config/scales/<scale>.yaml, a --configfile, --config, or ``derived``: a default filled in by
``drpipe.config.complete``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from drpipe.config import (
    CONFIG_FILE,
    ORIGIN,
    SCHEMA_FILE,
    SOURCES_FILE,
    ConfigError,
    _Leaf,
    compose,
    method_block,
    method_config,
    method_variant,
    parse_config_values,
    read_defaults,
    read_yaml,
    resolve,
    split_run_name,
    user_config_files,
)

DERIVED = "derived"


def default_root() -> Path:
    """The checkout to read: the working directory if it is one, else drpipe's own."""
    here = Path.cwd()
    if (here / CONFIG_FILE).is_file() and (here / SCHEMA_FILE).is_file():
        return here
    return Path(__file__).resolve().parents[2]


def explained(
    root: str | Path,
    overrides: dict | None = None,
    config_files: list[str | Path] = (),
) -> tuple[dict, dict]:
    """The resolved config of the checkout ``root`` (as the workflow resolves it) and the same
    tree with each value a ``_Leaf`` naming the layer that set it."""
    root = Path(root)
    files = user_config_files(root, config_files)
    user = [read_yaml(f) or {} for f in files]
    raw = read_defaults(root)
    config = resolve(raw, read_yaml(root / SCHEMA_FILE), dict(overrides or {}), user_files=user)
    # The catalogue: config/sources.yaml, with any sources: entries of config.yaml over it.
    own = read_yaml(root / CONFIG_FILE) or {}
    labels = {f"user{i}": f"--configfile {f}" for i, f in enumerate(files)}
    labels["sources"] = SOURCES_FILE + (f" + {CONFIG_FILE}" if own.get("sources") else "")
    scale, merged = compose(raw, overrides, user, tagged=True, labels=labels)
    return config, _mark_derived(config, merged[scale])


def _mark_derived(config: Any, tagged: Any) -> Any:
    """``tagged`` completed to the shape of ``config``: what ``complete`` added is derived."""
    if isinstance(config, dict):
        node = tagged if isinstance(tagged, dict) else {}
        out = {k: _mark_derived(v, node.get(k)) for k, v in config.items()}
        out[ORIGIN] = node.get(ORIGIN, DERIVED)
        return out
    return tagged if isinstance(tagged, _Leaf) else _Leaf(config, DERIVED)


def origin_at(tagged: dict, path: tuple[str, ...]) -> str | None:
    """The layer that set the value at ``path`` (None: no such key)."""
    node: Any = tagged
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node.origin if isinstance(node, _Leaf) else node.get(ORIGIN)


def run_origins(config: dict, tagged: dict, run: str, train_set: str | None) -> dict[str, str]:
    """Where each key of the run's training cfg (``method_config``) comes from: the config key
    and its layer, or the method class's default."""
    from drpipe.methods import method_module

    base, variant = split_run_name(run)
    own = method_block(config, base)
    overrides = method_variant(config, run)["overrides"] if variant else {}
    defaults = method_block(config, base, with_defaults=True)

    def where(key: str) -> str:
        if key in overrides:
            path = ("methods", base, "variants", variant, "overrides", key)
        elif key in own:
            path = ("methods", base, key)
        elif key in defaults:
            return f"default of method {base} ({method_module(base)})"
        elif key in config["encoder"]:
            path = ("encoder", key)
        else:
            return "seed" if key == "seed" else DERIVED
        return f"{'.'.join(path)}, {origin_at(tagged, path)}"

    out = {}
    for key in method_config(config, run, train_set):
        out[key] = where(key)
    by_set = {
        **(defaults.get("epochs_by_train_set") or {}),
        **(own.get("epochs_by_train_set") or {}),
    }
    by_set.update(overrides.get("epochs_by_train_set") or {})
    if train_set in by_set:
        out["epochs"] = where("epochs_by_train_set").replace(
            "epochs_by_train_set", f"epochs_by_train_set.{train_set}", 1
        )
    if "seed" in out and out["seed"] == "seed":
        out["seed"] = f"seed, {origin_at(tagged, ('seed',))}"
    return out


def _scalar(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6, sort_keys=False)
    return text.strip().removesuffix("...").strip()


def render(tagged: dict, indent: int = 0) -> list[str]:
    """YAML lines of a tagged tree, each leaf with its layer in a comment."""
    lines = []
    pad = "  " * indent
    for key, node in tagged.items():
        if key == ORIGIN:
            continue
        name = _scalar(key)
        if isinstance(node, dict) and len(node) > 1:
            lines.append(f"{pad}{name}:")
            lines += render(node, indent + 1)
        elif isinstance(node, dict):
            lines.append(f"{pad}{name}: {{}}  # {node.get(ORIGIN, DERIVED)}")
        else:
            lines.append(f"{pad}{name}: {_scalar(node.value)}  # {node.origin}")
    return lines


def _select(tagged: dict, keys: list[str]) -> dict:
    """The subtrees named by dotted ``keys`` (``encoder``, ``qa.squad``)."""
    if not keys:
        return tagged
    out: dict = {ORIGIN: tagged.get(ORIGIN)}
    for dotted in keys:
        node, into = tagged, out
        parts = dotted.split(".")
        for i, part in enumerate(parts):
            if not isinstance(node, dict) or part not in node:
                raise ConfigError(f"key {dotted}: not in the resolved config")
            node = node[part]
            if i < len(parts) - 1:
                into = into.setdefault(part, {ORIGIN: node.get(ORIGIN)})
        into[parts[-1]] = node
    return out


def show(args: argparse.Namespace) -> str:
    overrides = parse_config_values(args.config or [])
    if args.scale:
        overrides["scale"] = args.scale
    root = Path(args.root) if args.root else default_root()
    config, tagged = explained(root, overrides, args.configfile or [])
    order = "config.yaml < config/scales/<scale>.yaml < --configfile < --config"
    if args.run:
        origins = run_origins(config, tagged, args.run, args.train_set)
        cfg = method_config(config, args.run, args.train_set)
        head = [
            f"# run {args.run}" + (f", train set {args.train_set}" if args.train_set else "")
            + f", scale {config['scale']}: its training cfg (drpipe.config.method_config);",
            "# each comment: the config key it comes from and the layer that set it",
            f"# ({order}; sources: {SOURCES_FILE})",
        ]  # fmt: skip
        body = [f"{_scalar(k)}: {_scalar(v)}  # {origins[k]}" for k, v in cfg.items()]
        return "\n".join(head + body) + "\n"
    head = [
        f"# drpipe config, scale {config['scale']} (checkout {root}); each comment names the",
        f"# layer that set the value: {order} (sources: {SOURCES_FILE});",
        f"# {DERIVED}: a default drpipe.config.complete filled in",
    ]
    return "\n".join(head + render(_select(tagged, args.key or []))) + "\n"


def _cmd_show(args: argparse.Namespace) -> int:
    try:
        sys.stdout.write(show(args))
    except ConfigError as exc:
        print(f"drpipe config show: {exc}", file=sys.stderr)
        return 2
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("config", help="inspect the workflow's resolved config")
    csub = p.add_subparsers(dest="config_command", required=True)
    s = csub.add_parser(
        "show",
        help="the resolved config of a scale (or one run's training cfg), each value with the "
        "layer that set it",
    )
    s.add_argument("--scale", help="a scale (config/scales/<scale>.yaml); default: config.yaml's")
    s.add_argument("--run", help="a method or method.variant: show its training cfg")
    s.add_argument("--train-set", help="with --run: the train set (its epochs_by_train_set)")
    s.add_argument("--config", nargs="+", metavar="NAME=VALUE", help="as snakemake --config")
    s.add_argument("--configfile", nargs="+", metavar="FILE", help="as snakemake --configfile")
    s.add_argument("--key", action="append", help="show only this (dotted) key; repeatable")
    s.add_argument("--root", help="the checkout (default: the working directory, if one)")
    s.set_defaults(func=_cmd_show)
