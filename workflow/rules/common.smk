# Shared helpers: the resolved config (`C`), where inputs land, config slices for params.
import json
import os
from pathlib import Path

from drpipe.config import method_config
from drpipe.config import resolve as resolve_config
from drpipe.provenance import code_hash

import yaml

SCHEMA = Path(workflow.basedir) / "workflow" / "schemas" / "config.schema.yaml"
with open(SCHEMA) as _fh:
    # Merges the active scale's overlay (then `--config key=value` values, which win over it)
    # and validates every scale; errors name the key. `--configfile` values are base-level.
    C = resolve_config(
        config, yaml.safe_load(_fh), dict(workflow.config_settings.config)
    )

PKG = Path(workflow.basedir) / "workflow" / "drpipe"
MIRROR = os.environ.get("DATA_MIRROR", "")
SCALE = C["scale"]
DOCS = C["corpus"]["documents"]
DENSE = "init|dpr(\\.[A-Za-z0-9_]+)?"


wildcard_constraints:
    dataset="[A-Za-z0-9_]+",
    split="[A-Za-z0-9_]+",
    train_set="[A-Za-z0-9_]+",
    shard="[0-9]+",


def cfg_json(obj):
    """A config slice as the JSON string a rule passes to `drpipe ... --cfg`."""
    return json.dumps(obj, sort_keys=True)


def code(*parts):
    """Hash of the package code a rule runs (plus the shared helpers): a change reruns it."""
    common = ["io.py", "errors.py", "cliutil.py", "cli.py"]
    return code_hash([PKG / p for p in (*common, *parts)])


def source_file(name):
    """Where input `name` is put by the fetch rule (file name from the mirror or the URL)."""
    if name not in C["sources"]:
        raise ValueError(f"config: unknown source '{name}' (known: {sorted(C['sources'])})")
    src = C["sources"][name]
    in_mirror = MIRROR and src.get("mirror") and (Path(MIRROR) / src["mirror"]).is_file()
    if in_mirror or not src.get("url"):
        base = Path(src["mirror"]).name
    else:
        base = src["url"].rsplit("/", 1)[-1]
    return f"results/data/{name}/{base}"


def source_record(name):
    path = Path(source_file(name))
    return f"results/data/records/{name}/{path.name}.json"


def qa_split(dataset, split):
    try:
        entry = C["qa"][dataset][split]
    except KeyError:
        entry = None
    if entry is None:
        raise ValueError(f"config: qa.{dataset}.{split} is not configured")
    return entry


def qa_format(dataset, split):
    entry = qa_split(dataset, split)
    if entry["format"] != "auto":
        return entry["format"]
    name = source_file(entry["source"])
    for suffix, fmt in ((".qa.csv", "dpr-qa-csv"), (".csv", "dpr-qa-csv"), (".jsonl", "dpr-jsonl"),
                        (".qa.csv.gz", "dpr-qa-csv"), (".tsv", "curatedtrec-tsv")):
        if name.endswith(suffix):
            return fmt
    raise ValueError(f"config: cannot tell the format of {name}; set qa.{dataset}.{split}.format")


def used_sources():
    names = [d["source"] for d in DOCS] if not C["corpus"]["passages_tsv"] else []
    if C["corpus"]["passages_tsv"]:
        names.append(C["corpus"]["passages_tsv"])
    for dataset, splits in C["qa"].items():
        names += [s["source"] for s in splits.values() if s]
    names += [v for v in C["train_examples"].values() if v != "mine"]
    return sorted(set(names))


def log_path(rule, name):
    return f"results/logs/{rule}/{name}.log"


def bench_path(rule, name):
    return f"results/benchmarks/rules/{rule}/{name}.tsv"
