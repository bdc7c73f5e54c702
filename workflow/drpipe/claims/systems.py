"""A claim's systems as runs of a config: the scope (dataset, split, train set) a claim is
evaluated on, the run each system spec names (or the reason there is none), and where
``drpipe evaluate`` wrote that run's per-question ranks."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

NO_TRAINING = ("bm25", "init")  # runs that are not trained: train set "none"
# ... and so are the zero-shot encoders (init.<name>) and runs imported from elsewhere
# (ext.<name>, config external_runs).
UNTRAINED_PREFIXES = ("init.", "ext.")


def _dig(config: dict, dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def resolve_scope(scope: dict, config: dict) -> tuple[dict, str]:
    """(dataset, split, train_set and, when the table's config block lists them, its variants
    and its ``rows`` {run: paper row}) a claim is evaluated on, and a note on where they came
    from. A block with ``datasets`` uses the claim's dataset when listed, else the first."""
    tables = config.get("tables") or {}
    block_name = scope.get("config")
    block = _dig(config, block_name) if block_name else None
    if isinstance(block, dict) and isinstance(block.get("datasets"), list) and block["datasets"]:
        listed = block["datasets"]
        block = {
            **block,
            "dataset": scope["dataset"] if scope.get("dataset") in listed else listed[0],
        }
    if isinstance(block, dict) and block.get("dataset"):
        dataset = block["dataset"]
        split = block.get("split") or tables.get("split")
        train_set = block.get("train_set") or (tables.get("single") or {}).get(dataset)
        out = {"dataset": dataset, "split": split, "train_set": train_set}
        if isinstance(block.get("variants"), list):
            out["variants"] = list(block["variants"])
        if isinstance(block.get("rows"), dict):  # run -> the paper's row label
            out["rows"] = dict(block["rows"])
        return out, ""
    dataset = scope.get("dataset")
    note = ""
    if block_name:
        note = (
            f"config has no {block_name} block: evaluated in the Table 2 setting "
            f"({dataset}/{tables.get('split')})"
        )
    train_set = (tables.get("single") or {}).get(dataset)
    return {"dataset": dataset, "split": tables.get("split"), "train_set": train_set}, note


def _registry() -> tuple[list[str], Any]:
    from drpipe.methods import method_class, method_names

    return method_names(), method_class


def _method_value(config: dict, method: str, key: str) -> Any:
    block = (config.get("methods") or {}).get(method) or {}
    if key in block:
        return block[key]
    return (config.get("encoder") or {}).get(key)


def _fill(template: str, config: dict) -> tuple[str, str]:
    """A run name with ``{dotted.config.key}`` placeholders filled from the config."""
    missing = ""

    def value(m: re.Match) -> str:
        nonlocal missing
        found = _dig(config, m.group(1))
        if found is None and not missing:
            missing = m.group(1)
        return str(found)

    return re.sub(r"\{([A-Za-z0-9_.]+)\}", value, template), missing


def resolve_system(spec: dict, config: dict, scope: dict) -> tuple[dict | None, str]:
    """The run a system spec names under ``config``, or (None, the reason it has none). A
    system is named by the config alone, never picked by its accuracy on the results (which
    are the test questions'): see docs/claims.md."""
    for dotted, want in (spec.get("requires") or {}).items():
        have = _dig(config, dotted)
        if have is None or (want not in have if isinstance(have, list) else have != want):
            return (
                None,
                f"config {dotted} is {json.dumps(have)}, the claim needs {json.dumps(want)}",
            )
    if "run" in spec:
        run, missing = _fill(str(spec["run"]), config)
        if missing:
            return None, f"config has no {missing} (run name {spec['run']})"
        untrained = run in NO_TRAINING or run.startswith(UNTRAINED_PREFIXES)
        train_set = "none" if untrained else scope["train_set"]
        if train_set is None:
            return None, f"no Single train set for {scope['dataset']} (tables.single)"
        return {"run": run, "train_set": train_set, "label": run}, ""
    method = str(spec["method"])
    names, method_class = _registry()
    if method not in names:
        return None, f"method '{method}' is not registered (no drpipe/methods/{method}.py)"
    if scope["train_set"] is None:
        return None, f"no train set for {scope['dataset']} in the claim's scope (tables.single)"
    out = {"train_set": scope["train_set"]}
    variants = ((config.get("methods") or {}).get(method) or {}).get("variants") or {}
    if "paper_row" in spec:
        by_table = [
            run
            for run, row in (scope.get("rows") or {}).items()
            if row == spec["paper_row"] and (run == method or run.startswith(method + "."))
        ]
        if len(by_table) == 1 and not spec.get("overrides"):
            return {**out, "run": by_table[0], "label": by_table[0]}, ""
        want = spec.get("overrides") or {}
        found = [
            name
            for name, v in variants.items()
            if v.get("paper_row") == spec["paper_row"]
            and all((v.get("overrides") or {}).get(k) == val for k, val in want.items())
        ]
        extra = f" and overrides {want}" if want else ""
        if len(found) != 1:
            what = "no variant" if not found else f"several variants ({', '.join(found)})"
            return None, (
                f"{what} of methods.{method}.variants has paper_row '{spec['paper_row']}'{extra}"
            )
        return {**out, "run": f"{method}.{found[0]}", "label": f"{method}.{found[0]}"}, ""
    if "key" in spec:
        key = spec["key"]
        base = _method_value(config, method, key)
        listed = scope.get("variants")
        options = [(base, method)]
        for name, v in variants.items():
            overrides = v.get("overrides") or {}
            # The table's own variants when its config block lists them; otherwise the
            # variants that change only `key`.
            chosen = name in listed if listed is not None else set(overrides) == {key}
            if chosen:
                options.append((overrides.get(key, base), f"{method}.{name}"))
        options = [o for o in options if isinstance(o[0], (int, float))]
        if len({o[0] for o in options}) < 2:
            return None, (
                f"method '{method}' has no variants that change '{key}' "
                f"(need two values of methods.{method}.{key} to compare)"
            )
        value, run = (max if spec["pick"] == "max" else min)(options, key=lambda o: o[0])
        return {**out, "run": run, "label": f"{run} ({key}={value})"}, ""
    if spec.get("hybrid"):
        if not (config.get("hybrid") or {}).get("enabled", False):
            return None, "the BM25 hybrid is disabled (hybrid.enabled: false)"
        if not method_class(method).hybrid:
            return None, f"method '{method}' has no BM25 hybrid"
        return {**out, "run": f"{method}+bm25", "label": f"BM25+{method}"}, ""
    return {**out, "run": method, "label": method}, ""


def per_question_file(results: str | Path, system: dict, scope: dict, metric: str = "") -> Path:
    """Where a system's per-question outcomes are: ``drpipe evaluate``'s first-hit ranks, or
    for ``metric`` "em" the answers of ``drpipe reader predict`` (exact match per question)."""
    base = Path(results) / ("answers" if metric == "em" else "metrics")
    name = f"{scope['dataset']}-{scope['split']}"
    name += ".parquet" if metric == "em" else ".per_question.parquet"
    return base / system["run"] / system["train_set"] / name
