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


def cfg_json(obj):
    """A config slice as the JSON string a rule passes to `drpipe ... --cfg`."""
    return json.dumps(obj, sort_keys=True)


def code(*parts):
    """Hash of the package code a job runs, plus the shared helpers (a change reruns it)."""
    common = ["io.py", "errors.py", "cliutil.py", "cli.py"]
    return code_hash([PKG / p for p in (*common, *parts)])


def source_file(name):
    """Where input `name` is put by the fetch rule (file name from the mirror or the URL)."""
    if name not in C["sources"]:
        raise ValueError(
            f"config: unknown source '{name}' (known: {sorted(C['sources'])})"
        )
    src = C["sources"][name]
    in_mirror = (
        MIRROR and src.get("mirror") and (Path(MIRROR) / src["mirror"]).is_file()
    )
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
    for suffix, fmt in (
        (".qa.csv", "dpr-qa-csv"),
        (".csv", "dpr-qa-csv"),
        (".jsonl", "dpr-jsonl"),
        (".qa.csv.gz", "dpr-qa-csv"),
        (".tsv", "curatedtrec-tsv"),
    ):
        if name.endswith(suffix):
            return fmt
    raise ValueError(
        f"config: cannot tell the format of {name}; set qa.{dataset}.{split}.format"
    )


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


# --- corpus ---


def doc_entry(name):
    for d in DOCS:
        if d["name"] == name:
            return d
    raise ValueError(f"config: no corpus.documents entry named '{name}'")


DOC_COMMAND = {"wiki_dump": ("wiki", "--dump"), "squad": ("squad-docs", "--squad")}


# --- bm25 ---


def bm25_depth(split):
    """Hits kept: the evaluation/mining depth, or the hybrid's candidate depth for the split
    the tables evaluate (a deeper run costs search time and disk, so only there)."""
    depth = max(C["bm25"]["hits"], C["mining"]["depth"])
    if C["hybrid"]["enabled"] and split == C["tables"]["split"]:
        depth = max(depth, C["hybrid"]["depth"])
    return depth


# --- train ---


def train_examples_file(dataset):
    how = C["train_examples"].get(dataset, "mine")
    return f"results/train/{dataset}.jsonl.gz" if how == "mine" else source_file(how)


def train_set_files(train_set):
    if train_set not in C["train_sets"]:
        raise ValueError(
            f"config: unknown train set '{train_set}' (train_sets: {sorted(C['train_sets'])})"
        )
    return [train_examples_file(d) for d in C["train_sets"][train_set]]


# --- encode ---


def shard_files(method, train_set, suffix=".npy"):
    return [
        f"results/embeddings/{method}/{train_set}/shard-{i}{suffix}"
        for i in range(C["encode"]["shards"])
    ]


# --- retrieve ---


def index_file(w):
    return f"results/index/{w.method}/{w.train_set}/{C['index']['type']}.faiss"


def retrieve_cfg(lambda_=None, depth=None):
    cfg = {
        **C["retrieve"],
        "index_type": C["index"]["type"],
        "ef_search": C["index"]["hnsw"]["ef_search"],
        "nprobe": C["index"]["ivfpq"]["nprobe"],
        "max_query_len": C["encoder"]["max_query_len"],
        "bf16": C["encoder"]["bf16"],
    }
    if lambda_ is not None:
        cfg.update({"lambda": lambda_, "depth": depth})
    return cfg_json(cfg)


# --- tables ---


def metrics_file(run, train_set, dataset, split):
    return f"results/metrics/{run}/{train_set}/{dataset}-{split}.json"


def table2_runs():
    """(run, train_set, dataset, training label, row label) of every Table 2 cell we compute."""
    t = C["tables"]
    rows = []
    for dataset in t["datasets"]:
        rows.append(("bm25", "none", dataset, "None", "BM25"))
        rows.append(("init", "none", dataset, "None", "DPR init (no fine-tuning)"))
        for method in t["methods"]:
            settings = [("Single", t["single"].get(dataset))]
            if t["multi"]:
                settings.append(("Multi", t["multi"]))
            for training, train_set in settings:
                if train_set is None:
                    continue
                rows.append((method, train_set, dataset, training, method.upper()))
                if C["hybrid"]["enabled"]:
                    label = f"BM25+{method.upper()}"
                    rows.append((f"{method}+bm25", train_set, dataset, training, label))
    return rows


def table2_inputs():
    split = C["tables"]["split"]
    return [metrics_file(r, ts, d, split) for r, ts, d, _, _ in table2_runs()]


def table2_row_map():
    """Our run names -> the paper's row labels; Single/Multi follow from the train set."""
    rows = {}
    for run, _, _, training, label in table2_runs():
        rows[run] = {
            "method": label,
            **({"training": training} if training == "None" else {}),
        }
    return rows


def variant_inputs(which, per_question=False):
    t = C["tables"][which]
    suffix = ".per_question.parquet" if per_question else ".json"
    runs = [(f"dpr.{v}", t["train_set"]) for v in t["variants"]]
    if which == "figure1":
        runs = [("bm25", "none"), *runs, ("dpr", t["train_set"])]
    return [
        metrics_file(r, ts, t["dataset"], t["split"]).removesuffix(".json") + suffix
        for r, ts in runs
    ]


def step_reports():
    """Report JSONs of the steps behind Table 2 (inputs of the provenance record)."""
    split = C["tables"]["split"]
    reports = ["results/corpus/passages.report.json"]
    if not C["corpus"]["passages_tsv"]:
        reports += [f"results/corpus/docs/{d['name']}.report.json" for d in DOCS]
    for run, ts, dataset, _, _ in table2_runs():
        reports.append(f"results/qa/{dataset}/{split}.report.json")
        if run == "bm25" or run.startswith("init"):
            continue
        if "+" not in run:
            reports.append(f"results/models/{run}/{ts}.report.json")
            for d in C["train_sets"][ts]:
                if C["train_examples"].get(d, "mine") == "mine":
                    reports.append(f"results/train/{d}.report.json")
    return sorted(set(reports))


def used_source_records():
    names = {d["source"] for d in DOCS} if not C["corpus"]["passages_tsv"] else set()
    if C["corpus"]["passages_tsv"]:
        names.add(C["corpus"]["passages_tsv"])
    split = C["tables"]["split"]
    for dataset in C["tables"]["datasets"]:
        names.add(qa_split(dataset, split)["source"])
    for ts in {ts for _, ts, _, _, _ in table2_runs() if ts != "none"}:
        for d in C["train_sets"][ts]:
            how = C["train_examples"].get(d, "mine")
            names.add(qa_split(d, "train")["source"] if how == "mine" else how)
    return [source_record(n) for n in sorted(names)]
