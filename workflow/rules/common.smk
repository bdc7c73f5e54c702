# Shared helpers: the resolved config (`C`), where inputs land, config slices for params.
import json
import os
from pathlib import Path

import drpipe
from drpipe.codehash import code_hash
from drpipe.config import (
    method_config,
    method_run_options,
    method_variant,
    split_run_name,
)
from drpipe.config import resolve as resolve_config
from drpipe.methods import method_class, method_module, method_names

import yaml

PKG = Path(workflow.basedir) / "workflow" / "drpipe"
# The code hashes below describe PKG; the jobs run the installed drpipe. They must be one.
if Path(drpipe.__file__).resolve().parent != PKG.resolve():
    raise WorkflowError(
        f"the installed drpipe is {Path(drpipe.__file__).parent}, not this checkout's {PKG}: "
        "its code hashes would not describe what runs. Install this checkout "
        "(pip install -e .) or run the workflow of the checkout that is installed."
    )

SCHEMA = Path(workflow.basedir) / "workflow" / "schemas" / "config.schema.yaml"
DEFAULT_CONFIG = Path(workflow.basedir) / "config.yaml"


def _user_config_files():
    """Contents of the user's --configfile files (config.yaml itself is the defaults)."""
    out = []
    for path in workflow.overwrite_configfiles or []:
        if Path(path).resolve() != DEFAULT_CONFIG.resolve():
            with open(path) as fh:
                out.append(yaml.safe_load(fh) or {})
    return out


with open(SCHEMA) as _fh, open(DEFAULT_CONFIG) as _dfh:
    # defaults < scale overlay < --configfile < --config key=value; every scale is validated
    # and errors name the key.
    C = resolve_config(
        yaml.safe_load(_dfh),
        yaml.safe_load(_fh),
        dict(workflow.config_settings.config),
        user_files=_user_config_files(),
    )

MIRROR = os.environ.get("DATA_MIRROR", "")
SCALE = C["scale"]
# Beside each paper value at the paper scale: ours - paper is "ok" within this many points.
TOLERANCE = C["tables"].get("paper_tolerance", 1.0)
DOCS = C["corpus"]["documents"]
METHODS = method_names()
# A run: a registered method or one of its variants ("dpr", "dpr.t3_gold_7").
RUN = "(?:{})(?:\\.[A-Za-z0-9_]+)?".format("|".join(METHODS))
# Runs with an encoder: the initial (not fine-tuned) encoder or a trained run.
DENSE = f"init|{RUN}"


def cfg_json(obj):
    """A config slice as the JSON string a rule passes to `drpipe ... --cfg`."""
    return json.dumps(obj, sort_keys=True)


_CODE_HASHES = {}


def code(*modules):
    """Hash of the code a job runs: the import closure of its command's modules (computed
    once per module set: a paper-scale DAG asks for it thousands of times)."""
    if modules not in _CODE_HASHES:
        _CODE_HASHES[modules] = code_hash(modules)
    return _CODE_HASHES[modules]


def run_method(run):
    """The method of a run ("init" is the initial encoder, used the way DPR uses one)."""
    return "dpr" if run == "init" else split_run_name(run)[0]


def method_code(run, *modules):
    """Code hash of a command plus the one method module the run uses (its own code only)."""
    return code(*modules, method_module(run_method(run)))


def runtime(fn):
    """A params function for settings that change no output (batch sizes, checkpoint cadence).
    Snakemake leaves params functions that read `resources` out of its rerun trigger."""
    return lambda wildcards, resources: fn(wildcards)


def options(values):
    """Command-line options from a dict: {"batch_size": 64} -> "--batch-size 64"."""
    return " ".join(
        f"--{k.replace('_', '-')} {int(v)}" for k, v in sorted(values.items())
    )


def env(gpu=False):
    """Conda environment of a rule: the CUDA one for rules that use a GPU at paper scale."""
    name = "gpu" if gpu and SCALE == "paper" else "cpu"
    return f"../../envs/{name}.yaml"


def gpus(n=1):
    """GPUs a job asks for: at paper scale only."""
    return n if SCALE == "paper" else 0


def source_file(name):
    """Where input `name` is put by the fetch rule (file name from the mirror or the URL)."""
    if name not in C["sources"]:
        raise ValueError(
            f"config: unknown source '{name}' (known: {sorted(C['sources'])})"
        )
    src = C["sources"][name]
    # A fetched, recorded file keeps its name wherever DATA_MIRROR points now.
    names = [Path(src["mirror"]).name] if src.get("mirror") else []
    if src.get("url"):
        names.append(src["url"].rsplit("/", 1)[-1])
    for base in names:
        if Path(f"results/data/records/{name}/{base}.json").is_file():
            return f"results/data/{name}/{base}"
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
    names += list(C["dev_examples"].values())
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


def doc_cfg(name):
    """What a document step reads: the dump cleaning stops after `max_articles`; a SQuAD
    source samples `sample_articles` with the seed (and only then reads it)."""
    d = doc_entry(name)
    if d["kind"] == "wiki_dump":
        return {"max_articles": d.get("max_articles")}
    out = {"sample_articles": d.get("sample_articles")}
    if d.get("sample_articles") is not None:
        out["seed"] = C["seed"]
    return out


# --- bm25 ---


def bm25_depth(split):
    """Hits kept: the evaluation/mining depth, or the hybrid's candidate depth for the split
    the tables evaluate (a deeper run costs search time and disk, so only there)."""
    depth = max(C["bm25"]["hits"], C["mining"]["depth"])
    if C["hybrid"]["enabled"] and split in hybrid_splits():
        depth = max(depth, C["hybrid"]["depth"])
    return depth


def hybrid_splits():
    """Splits the hybrid fuses: the tables' split, and the training split it tunes on."""
    return {
        C["tables"]["split"],
        *(["train"] if C["hybrid"]["lambda"] == "tune" else []),
    }


def hybrid_tuning_inputs(w):
    """Inputs of the weight's tuning: the held-out training questions of the model (named
    in its training report), their vectors, their BM25 run, and the passages."""
    if C["hybrid"]["lambda"] != "tune":
        return {}
    if w.run == "init":
        raise ValueError("config: hybrid.lambda 'tune' needs a trained run, not init")
    return {
        "tune_queries": qvec_file(w.run, w.train_set, w.dataset, "train"),
        "tune_bm25_run": f"results/runs/bm25/none/{w.dataset}-train.parquet",
        "tune_questions": f"results/qa/{w.dataset}/train.parquet",
        "tune_report": f"results/models/{w.run}/{w.train_set}.report.json",
        "passages": "results/corpus/passages.parquet",
    }


def hybrid_cfg(run):
    keys = ("lambda", "depth") + (("grid",) if C["hybrid"]["lambda"] == "tune" else ())
    cfg = {**search_cfg(run), **{k: C["hybrid"][k] for k in keys}}
    if C["hybrid"]["lambda"] == "tune":
        cfg["ks"] = C["evaluate"]["ks"]
    return cfg


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


def val_set_files(train_set):
    """Development examples of every dataset of a train set (DPR selects checkpoints on dev);
    empty when one lacks them, and the training holds out `val_fraction` instead."""
    names = [C["dev_examples"].get(d) for d in C["train_sets"][train_set]]
    return [source_file(n) for n in names] if all(names) else []


# --- encode ---


def shard_files(run, train_set, suffix=".npy"):
    return [
        f"results/embeddings/{run}/{train_set}/shard-{i}{suffix}"
        for i in range(C["encode"]["shards"])
    ]


def corpus_inputs(run):
    """What encoding a run's corpus reads: the passages, and their sentences if its method's
    units are sentences (DCSR)."""
    out = {"passages": "results/corpus/passages.parquet"}
    if method_class(run_method(run)).corpus_units == "sentences":
        out["sentences"] = "results/corpus/sentences.parquet"
    return out


def train_corpus(run):
    """Corpus tables a run's method trains with (sentence-level methods: the sentences)."""
    return {k: corpus_table(k) for k in method_class(run_method(run)).train_corpus}


def corpus_table(name):
    return {
        "passages": "results/corpus/passages.parquet",
        "sentences": "results/corpus/sentences.parquet",
    }[name]


# --- index and retrieve ---


def index_type(run):
    by_method = C["index"]["by_method"].get(run_method(run)) or {}
    return by_method.get("type", C["index"]["type"])


def index_file(w):
    return f"results/index/{w.run}/{w.train_set}/{index_type(w.run)}.faiss"


def qvec_file(run, train_set, dataset, split):
    return f"results/qvecs/{run}/{train_set}/{dataset}-{split}.npy"


def search_cfg(run):
    """What a search over a run's index reads: depth, index type and that type's search knob."""
    kind = index_type(run)
    knob = {
        "hnsw": {"ef_search": C["index"]["hnsw"]["ef_search"]},
        "ivfpq": {"nprobe": C["index"]["ivfpq"]["nprobe"]},
    }
    return {
        "top_k": C["retrieve"]["top_k"],
        "index_type": kind,
        "use_gpu": C["index"]["use_gpu"],
        **knob.get(kind, {}),
    }


def index_cfg(itype):
    """What building an index of type `itype` reads (only its own type's parameters)."""
    cfg = {"type": itype, "use_gpu": C["index"]["use_gpu"]}
    if itype in ("hnsw", "ivfpq"):
        cfg[itype] = {
            k: v for k, v in C["index"][itype].items() if k not in SEARCH_KNOBS
        }
    if itype == "ivfpq":
        cfg["seed"] = C["seed"]  # samples the vectors the quantizer trains on
    return cfg


# Set at search time (stored with the index as defaults, but the run passes its own).
SEARCH_KNOBS = ("ef_search", "nprobe")


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
            cls = method_class(method)
            settings = [("Single", t["single"].get(dataset))]
            if t["multi"]:
                settings.append(("Multi", t["multi"]))
            for training, train_set in settings:
                if train_set is None:
                    continue
                rows.append((method, train_set, dataset, training, cls.label))
                if C["hybrid"]["enabled"] and cls.hybrid:
                    label = f"BM25+{cls.label}"
                    rows.append((f"{method}+bm25", train_set, dataset, training, label))
    return rows + aopt_table2_runs()


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
        base = run.split("+")[0]
        if base in METHODS:  # the numbers beside a method's row come from its own paper
            rows[run]["paper"] = base
        if aopt_protocol(run):  # AOpt rows say which answers their labels came from
            rows[run].update(training=training, protocol=aopt_protocol(run))
    return rows


def table2_setup():
    """What Table 2's notes say about this run's setup (see drpipe.tables.setup_notes)."""
    methods = C["tables"]["methods"]
    train_sets = {ts for _, ts, _, _, _ in table2_runs() if ts != "none"}
    fractions = [C["methods"][m]["val_fraction"] for m in methods] or [0.0]
    return {
        "encoder": C["encoder"]["init"],
        "bm25_fields": C["bm25"]["fields"],
        "field_weights": C["bm25"]["field_weights"],
        "hybrid_lambda": C["hybrid"]["lambda"],
        "hybrid_grid": C["hybrid"]["grid"],
        "training": {
            m: {k: C["methods"][m][k] for k in ("epochs", "batch_size")}
            for m in methods
        },
        # A train set with dev files selects on them (val_set_files); else the held-out fraction.
        "validation": {
            ts: "dev" if val_set_files(ts) else max(fractions)
            for ts in sorted(train_sets)
        },
    }


def variant_inputs(which, per_question=False):
    t = C["tables"][which]
    suffix = ".per_question.parquet" if per_question else ".json"
    runs = [
        (f"dpr.{v}", t["train_set"]) for v in t["variants"]
    ]  # DPR's Table 3, Figure 1
    if which == "figure1":
        runs = [("bm25", "none"), *runs, ("dpr", t["train_set"])]
    return [
        metrics_file(r, ts, t["dataset"], t["split"]).removesuffix(".json") + suffix
        for r, ts in runs
    ]


# Settings that change no result (scheduling, batching, checkpoint cadence, notes): passed
# outside the hashed params, and left out of the provenance record's config so that changing
# one reruns nothing. (encode batch/block sizes change vectors only at float rounding: tested.)
RUNTIME_SETTINGS = (
    ("threads",),
    ("encode", "batch_size"),
    ("encode", "block_size"),
    ("retrieve", "batch_size"),
    ("corpus", "wiki_processes"),
    ("corpus", "sentences", "batch_size"),
)


def result_config():
    """The config without the settings that change no result (for the provenance record)."""
    import copy

    out = copy.deepcopy(C)
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
        if aopt_protocol(run):
            _, protocol, arm, rnd = run.split("-")
            reports += aopt_reports(protocol, arm, rnd[1:], ts, dataset)
            reports.append(
                f"results/qa/{dataset}/{aopt_label_split(protocol)}.report.json"
            )
            run = AOPT["base"]  # and the reports of the run AOpt starts from
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


# --- xMoCo tables (rules in xmoco.smk) ---

XMOCO_HYBRID_LABELS = {"dpr": "DPR+BM25", "xmoco": "xMoCo+BM25"}


def xmoco_table2_runs():
    """(run, train_set, dataset, training, label) of xMoCo's Table 2: BM25, DPR, xMoCo and
    their BM25 hybrids, with the paper's row labels (it writes "xMoCo+BM25")."""
    t = C["tables"]
    rows = []
    for dataset in t["datasets"]:
        rows.append(("bm25", "none", dataset, "None", "BM25"))
        settings = [("Single", t["single"].get(dataset))]
        if t["multi"]:
            settings.append(("Multi", t["multi"]))
        for method in ("dpr", "xmoco"):
            for training, train_set in settings:
                if train_set is None:
                    continue
                rows.append(
                    (method, train_set, dataset, training, method_class(method).label)
                )
                if C["hybrid"]["enabled"]:
                    label = XMOCO_HYBRID_LABELS[method]
                    rows.append((f"{method}+bm25", train_set, dataset, training, label))
    return rows


def xmoco_table2_inputs():
    split = C["tables"]["split"]
    return [metrics_file(r, ts, d, split) for r, ts, d, _, _ in xmoco_table2_runs()]


def xmoco_table2_row_map():
    return {
        run: {"method": label, **({"training": tr} if tr == "None" else {})}
        for run, _, _, tr, label in xmoco_table2_runs()
    }


def xmoco_runs(which):
    """Runs of xMoCo's Table 3 or Figure 2: the main run plus the configured variants."""
    t = C["tables"]["xmoco"][which]
    return ["xmoco"] + [f"xmoco.{v}" for v in t["variants"]]


def xmoco_inputs(which):
    t = C["tables"]["xmoco"][which]
    return [
        metrics_file(r, t["train_set"], t["dataset"], t["split"])
        for r in xmoco_runs(which)
    ]


def xmoco_table3_variants():
    """Run -> whether its encoders are tied and the Table 3 row it reproduces."""
    ts = C["tables"]["xmoco"]["table3"]["train_set"]
    out = {}
    for run in xmoco_runs("table3"):
        row = (
            method_variant(C, run).get("paper_row")
            if "." in run
            else method_class("xmoco").label
        )
        out[run] = {"tied": bool(method_config(C, run, ts)["tied"]), "paper_row": row}
    return out


def xmoco_figure2_variants():
    """Run -> its queue size, batch size and hard negatives (the x axis, and which queue size
    is in-batch negatives)."""
    ts = C["tables"]["xmoco"]["figure2"]["train_set"]
    out = {}
    for run in xmoco_runs("figure2"):
        cfg = method_config(C, run, ts)
        out[run] = {k: cfg[k] for k in ("queue_size", "batch_size", "hard_negatives")}
    return out


# --- AOpt (rules in aopt.smk) ---
# AOpt's runs are named aopt-{protocol}-{arm}-r{round}; round 0 is the base run itself (for
# AOpt-hybrid: the last round of AOpt-query). Its vectors, indexes, runs and metrics sit in
# the same folders as every other run's.

AOPT = C["aopt"]
AOPT_PROTOCOLS = {"oracle": "uses the test answers (oracle)", "leakfree": "leak-free"}
AOPT_LABELS = {
    "query": "DPR + AOpt(query)",
    "passage": "DPR + AOpt(passage)",
    "hybrid": "DPR + AOpt(hybrid)",
}


def aopt_train_set(dataset):
    """The base run's train set for a dataset: its Single train set (AOpt starts from it)."""
    ts = C["tables"]["single"].get(dataset)
    if ts is None:
        raise ValueError(
            f"config: aopt.datasets has {dataset}, but tables.single does not"
        )
    return ts


def aopt_dataset(train_set):
    """The AOpt dataset whose base is trained on ``train_set`` (one per train set)."""
    found = [d for d in AOPT["datasets"] if aopt_train_set(d) == train_set]
    if len(found) != 1:
        raise ValueError(
            f"config: aopt.datasets must have exactly one dataset trained on {train_set} "
            f"(tables.single), found {found}"
        )
    return found[0]


def aopt_run(protocol, arm, rnd):
    return f"aopt-{protocol}-{arm}-r{rnd}"


def aopt_final(arm):
    """Rounds behind an arm's table row (linear weights: one update)."""
    return 1 if arm == "linear" else AOPT["rounds"][arm]


def aopt_label_split(protocol):
    """Whose answers label the passages: the evaluated split's (oracle) or training's."""
    return C["tables"]["split"] if protocol == "oracle" else AOPT["label_split"]


def aopt_linear_label(lin=None):
    lin = lin or AOPT["linear"]
    return f"Weighted-based (beta={lin['beta']:g}, gamma={lin['gamma']:g})"


def aopt_label(arm):
    return aopt_linear_label() if arm == "linear" else AOPT_LABELS[arm]


def aopt_vectors_run(protocol, arm, rnd):
    """The run whose passage vectors (and index) an arm uses at a round."""
    rnd = int(rnd)
    if arm == "query" or rnd == 0:
        return AOPT["base"]
    return aopt_run(protocol, arm, rnd)


def aopt_shards(protocol, arm, rnd, train_set):
    return shard_files(aopt_vectors_run(protocol, arm, rnd), train_set)


def aopt_index(protocol, arm, rnd, train_set):
    run = aopt_vectors_run(protocol, arm, rnd)
    return f"results/index/{run}/{train_set}/{index_type(AOPT['base'])}.faiss"


def aopt_qvecs(protocol, arm, rnd, train_set, dataset, split):
    """Question vectors an arm uses at a round (hybrid: AOpt-query's last round)."""
    rnd = int(rnd)
    if arm == "hybrid":
        return aopt_qvecs(
            protocol, "query", AOPT["rounds"]["query"], train_set, dataset, split
        )
    if arm != "query" or rnd == 0:
        return qvec_file(AOPT["base"], train_set, dataset, split)
    return qvec_file(aopt_run(protocol, "query", rnd), train_set, dataset, split)


def aopt_file(kind, protocol, arm, rnd, train_set, dataset, split):
    """Run (``kind="run"``) or metrics (``"metrics"``) of an arm's round; round 0 is the base
    run's (hybrid: AOpt-query's last round)."""
    rnd = int(rnd)
    if rnd == 0 and arm == "hybrid":
        return aopt_file(
            kind, protocol, "query", AOPT["rounds"]["query"], train_set, dataset, split
        )
    run = AOPT["base"] if rnd == 0 else aopt_run(protocol, arm, rnd)
    if kind == "metrics":
        return metrics_file(run, train_set, dataset, split)
    return f"results/runs/{run}/{train_set}/{dataset}-{split}.parquet"


def aopt_opt_cfg(labels):
    """Config of one optimisation round (no round count: more rounds rerun no old round)."""
    cfg = {k: AOPT[k] for k in ("depth", "lr", "max_epochs", "patience")}
    cfg["labels"] = labels
    if labels == "prf":
        cfg["prf_positives"] = AOPT["prf_positives"]
    return cfg


def aopt_passage_inputs(w):
    """A passage-side round (AOpt-passage, AOpt-hybrid, linear weights): the previous round's
    passage vectors, the labelled questions' vectors, their run over those passages, and their
    answers (oracle: the evaluated split's; leak-free: the training split's)."""
    return aopt_label_inputs(w.protocol, w.arm, int(w.round) - 1, w.train_set)


def aopt_label_inputs(protocol, arm, rnd, train_set):
    dataset = aopt_dataset(train_set)
    split = aopt_label_split(protocol)
    args = (protocol, arm, rnd, train_set)
    return {
        "shards": aopt_shards(*args),
        "queries": aopt_qvecs(*args, dataset, split),
        "run": aopt_file("run", *args, dataset, split),
        "questions": f"results/qa/{dataset}/{split}.parquet",
        "passages": "results/corpus/passages.parquet",
    }


def aopt_query_inputs(w):
    """A query-side round: the previous round's vectors of these questions, their run over the
    base passages; the oracle also reads their answers, the leak-free protocol does not.
    """
    rnd = int(w.round) - 1
    args = (w.protocol, "query", rnd, w.train_set, w.dataset, w.split)
    out = {
        "queries": aopt_qvecs(*args),
        "run": aopt_file("run", *args),
        "shards": shard_files(AOPT["base"], w.train_set),
    }
    if w.protocol == "oracle":
        out["questions"] = f"results/qa/{w.dataset}/{w.split}.parquet"
        out["passages"] = "results/corpus/passages.parquet"
    return out


def aopt_reports(protocol, arm, rnd, train_set, dataset):
    """Optimisation reports of every round behind an arm's round ``rnd``."""
    split = C["tables"]["split"]
    out = []
    if arm == "hybrid":
        out += aopt_reports(
            protocol, "query", AOPT["rounds"]["query"], train_set, dataset
        )
        if protocol == "leakfree":
            q = AOPT["rounds"]["query"]
            label = AOPT["label_split"]
            out += [
                f"results/aopt/reports/{aopt_run(protocol, 'query', r)}/{train_set}/"
                f"{dataset}-{label}.json"
                for r in range(1, q + 1)
            ]
    for r in range(1, int(rnd) + 1):
        run = aopt_run(protocol, arm, r)
        if arm == "query":
            out.append(f"results/aopt/reports/{run}/{train_set}/{dataset}-{split}.json")
        else:
            out.append(f"results/aopt/reports/{run}/{train_set}.json")
    return out


def aopt_table_rows():
    """(protocol, arm, round, train_set, dataset) of AOpt's Table 3 rows."""
    return [
        (p, arm, aopt_final(arm), aopt_train_set(d), d)
        for d in AOPT["datasets"]
        for p in AOPT["protocols"]
        for arm in ("linear", "query", "passage", "hybrid")
    ]


def aopt_table3_inputs():
    split = C["tables"]["split"]
    base = [
        metrics_file(AOPT["base"], aopt_train_set(d), d, split)
        for d in AOPT["datasets"]
    ]
    rows = [aopt_file("metrics", *r, split) for r in aopt_table_rows()]
    return base + rows


def aopt_table3_cfg():
    rows = {
        aopt_run(p, arm, r): {
            "protocol": p,
            "arm": arm,
            "rounds": r,
            "method": aopt_label(arm),
        }
        for p, arm, r, _, _ in aopt_table_rows()
    }
    rows[AOPT["base"]] = {
        "protocol": "base",
        "arm": "base",
        "rounds": 0,
        "method": "DPR",
    }
    return {
        "scale": SCALE,
        "rows": rows,
        "linear": AOPT["linear"],
        "tolerance": TOLERANCE,
    }


def aopt_figure7_series():
    """(protocol, arm, round) of every point of Figure 7, in order."""
    return [
        (p, arm, r)
        for p in AOPT["protocols"]
        for arm in ("passage", "query")
        for r in range(AOPT["figure7"]["rounds"] + 1)
    ]


def aopt_figure7_inputs():
    d = AOPT["figure7"]["dataset"]
    ts, split = aopt_train_set(d), C["tables"]["split"]
    return [
        aopt_file("metrics", p, arm, r, ts, d, split)
        for p, arm, r in aopt_figure7_series()
    ]


def aopt_figure6_inputs():
    d = AOPT["figure6"]["dataset"]
    return [
        f"results/aopt/figure6/{p}/{aopt_train_set(d)}/{d}.csv"
        for p in AOPT["protocols"]
    ]


def aopt_protocol(run):
    """The protocol label of an AOpt run name, None for any other run."""
    parts = run.split("-")
    if len(parts) == 4 and parts[0] == "aopt":
        return AOPT_PROTOCOLS[parts[1]]
    return None


def aopt_table2_runs():
    """AOpt's cells of Table 2: the configured arms, each protocol, on the AOpt datasets."""
    rows = []
    for d in AOPT["datasets"]:
        if d not in C["tables"]["datasets"]:
            continue
        for p in AOPT["protocols"]:
            for arm in AOPT["table2"]:
                run = aopt_run(p, arm, aopt_final(arm))
                rows.append((run, aopt_train_set(d), d, "Single", aopt_label(arm)))
    return rows


# --- corpus subsets (workflow/rules/subsets.smk; DCSR Table 7, any method) ---

from drpipe.dcsr_tables import parse_subset


def subset_dir(subset):
    return f"results/subsets/{subset}"


def subset_question_input(subset):
    """The questions whose gold passages the subset keeps (none for a plain first-N cut)."""
    spec = parse_subset(subset)
    if not spec["dataset"]:
        return {}
    return {"questions": f"results/qa/{spec['dataset']}/{spec['split']}.parquet"}


def subset_corpus_inputs(subset, run):
    """What encoding a run's corpus reads on a subset (DCSR: the sentences too)."""
    base = f"{subset_dir(subset)}/corpus"
    out = {"passages": f"{base}/passages.parquet"}
    if method_class(run_method(run)).corpus_units == "sentences":
        out["sentences"] = f"{base}/sentences.parquet"
    return out


def subset_shard_files(subset, run, train_set):
    return [
        f"{subset_dir(subset)}/embeddings/{run}/{train_set}/shard-{i}.npy"
        for i in range(C["encode"]["shards"])
    ]


def subset_metrics_file(subset, run, train_set, dataset, split):
    """Metrics of a run on a subset, or on the whole corpus when subset is None."""
    if subset is None:
        return metrics_file(run, train_set, dataset, split)
    return f"{subset_dir(subset)}/metrics/{run}/{train_set}/{dataset}-{split}.json"


# --- DCSR (workflow/rules/dcsr.smk): table cells, hard-negative round, Figure 4 ---


def dcsr_tcfg(name):
    """tables.dcsr.<name> of the config."""
    return C["tables"]["dcsr"][name]


def dcsr_single(dataset):
    """The Single-setting train set of a dataset (tables.single)."""
    ts = C["tables"]["single"].get(dataset)
    if ts is None:
        raise ValueError(
            f"config: tables.single has no train set for dataset '{dataset}'"
        )
    return ts


def paper_split_of(dataset, split):
    """The paper's split for ours (its tables are on test sets; SQuAD v1.1 dev is DPR's and
    DCSR's SQuAD test)."""
    return "test" if split == "test" or (dataset, split) == ("squad", "dev") else split


def dcsr_cell(
    group,
    row,
    run,
    train_set,
    dataset,
    split,
    *,
    setting,
    paper_method=None,
    paper_dataset=None,
    subset=None,
    delta_of=None,
    paper_delta="delta",
    paper_suffix="",
):
    """One table cell: the metrics file it reads and what it is compared with."""
    cell = {
        "group": group,
        "row": row,
        "run": run,
        "train_set": train_set,
        "dataset": dataset,
        "split": split,
        "subset": subset,
        "paper": None,
        "file": subset_metrics_file(subset, run, train_set, dataset, split),
    }
    if paper_method is not None:
        cell["paper"] = {
            "setting": setting,
            "method": paper_method,
            "dataset": paper_dataset or dataset,
            "split": paper_split_of(dataset, split) if not paper_dataset else "test",
        }
    if delta_of:
        cell.update({"delta_of": delta_of, "paper_delta": paper_delta})
    cell["paper_suffix"] = paper_suffix
    return cell


def paper_dataset_for(dataset, paper_datasets, fallback):
    """Ours when the paper's table has it, else the configured stand-in."""
    return dataset if dataset in paper_datasets else fallback


def dcsr_table2_cells():
    cells = []
    split = C["tables"]["split"]
    for d in C["tables"]["datasets"]:
        settings = [("Single", C["tables"]["single"].get(d))]
        if C["tables"]["multi"]:
            settings.append(("Multi", C["tables"]["multi"]))
        for training, ts in settings:
            if ts is None:
                continue
            for method, label in (("dpr", "DPR"), ("dcsr", "DCSR")):
                cells.append(
                    dcsr_cell(
                        training, label, method, ts, d, split,
                        setting=training, paper_method=label,
                        delta_of="DPR" if method == "dcsr" else None,
                    )
                )  # fmt: skip
    return cells


def dcsr_table3_cells():
    t = dcsr_tcfg("table3")
    cells = []
    for d in t["datasets"]:
        ts = dcsr_single(d)
        pd_ = paper_dataset_for(d, ("nq", "triviaqa"), t["paper_dataset"])
        for run, row, other in (
            ("dpr", "DPR + adv-train", None),
            ("dcsr", "DCSR + adv-train", "DPR + adv-train"),
        ):
            cells.append(
                dcsr_cell(
                    "Adversarial Training", row, f"{run}.hard_{run}", ts, d, t["split"],
                    setting="Adversarial Training", paper_method=row, paper_dataset=pd_,
                    delta_of=other,
                )
            )  # fmt: skip
    return cells


def dcsr_table4_cells():
    t = dcsr_tcfg("table4")
    cells = []
    for d in t["datasets"]:
        ts = dcsr_single(d)
        pd_ = paper_dataset_for(d, ("nq", "triviaqa", "squad"), t["paper_dataset"])
        for run, row in t["rows"].items():
            cells.append(
                dcsr_cell(
                    "Single", row, run, ts, d, t["split"], subset=t.get("subset"),
                    setting="Single, 1.05M subset", paper_method=row, paper_dataset=pd_,
                    delta_of="DPR" if row != "DPR" else None,
                )
            )  # fmt: skip
    return cells


TABLE5_ROWS = (
    # (row, run, paper row, the row its difference is taken against)
    ("DPR (raw-data)", "dpr", "DPR (raw-data)", None),
    ("DCSR (raw-data)", "dcsr", None, "DPR (raw-data)"),
    ("DPR (DPR-hard)", "dpr.hard_dpr", "DPR (DPR-hard)", "DPR (raw-data)"),
    ("DCSR (DPR-hard)", "dcsr.hard_dpr", "DCSR (DPR-hard)", "DPR (DPR-hard)"),
    ("DCSR (DCSR-hard)", "dcsr.hard_dcsr", "DCSR (DCSR-hard)", "DCSR (DPR-hard)"),
)


def dcsr_table5_cells():
    t = dcsr_tcfg("table5")
    cells = []
    for d in t["datasets"]:
        ts = dcsr_single(d)
        pd_ = paper_dataset_for(d, ("nq", "triviaqa"), t["paper_dataset"])
        for row, run, paper_row, other in TABLE5_ROWS:
            cells.append(
                dcsr_cell(
                    "Single", row, run, ts, d, t["split"], subset=t.get("subset"),
                    setting="Single, 1.05M subset", paper_method=paper_row, paper_dataset=pd_,
                    delta_of=other,
                )
            )  # fmt: skip
    return cells


def dcsr_table6_cells():
    t = dcsr_tcfg("table6")
    if t is None:
        raise ValueError(
            "config: tables.dcsr.table6 is null at this scale (it needs TriviaQA and NQ "
            "training data: scale=paper)"
        )
    cells = []
    target, split = t["target"], t["split"]
    for setting, source in t["transfers"].items():
        for run, label in (("dpr", "DPR"), ("dcsr", "DCSR")):
            home = f"{label} in-domain"
            cells.append(
                dcsr_cell(
                    setting, home, run, dcsr_single(target), target, split,
                    subset=t.get("subset"), setting=setting, paper_method=label,
                    paper_suffix="_in_domain",
                )
            )  # fmt: skip
            cells.append(
                dcsr_cell(
                    setting, label, run, dcsr_single(source), target, split,
                    subset=t.get("subset"), setting=setting, paper_method=label,
                    delta_of=home, paper_delta="drop",
                )
            )  # fmt: skip
    return cells


def dcsr_table7_cells():
    t = dcsr_tcfg("table7")
    cells = []
    for d in t["datasets"]:
        ts = dcsr_single(d)
        pd_ = paper_dataset_for(d, ("nq", "triviaqa"), t["paper_dataset"])
        for label, subset in t["subsets"].items():
            for run, row in (("dpr", "DPR"), ("dcsr", "DCSR")):
                cells.append(
                    dcsr_cell(
                        label, row, run, ts, d, t["split"], subset=subset,
                        setting=label, paper_method=row, paper_dataset=pd_,
                        delta_of="DPR" if run == "dcsr" else None,
                    )
                )  # fmt: skip
    return cells


def dcsr_table8_cells():
    t = dcsr_tcfg("table8")
    ts = dcsr_single(t["dataset"])
    return [
        dcsr_cell(
            "SQuAD-test", row, run, ts, t["dataset"], t["split"],
            setting="SQuAD-test", paper_method=row, paper_dataset="squad",
            delta_of="DPR" if run == "dcsr" else None,
        )
        for run, row in (("dpr", "DPR"), ("dcsr", "DCSR"))
    ]  # fmt: skip


TABLE8_PAPER_ONLY = [
    # The paper's SQuAD dev block (DPR's dev split of SQuAD train, which we do not hold).
    {
        "group": "SQuAD-dev",
        "row": row,
        "setting": "SQuAD-dev",
        "dataset": "squad",
        "split": "dev",
    }
    for row in ("DPR", "DCSR")
]

CELLS = {
    "2": dcsr_table2_cells,
    "3": dcsr_table3_cells,
    "4": dcsr_table4_cells,
    "5": dcsr_table5_cells,
    "6": dcsr_table6_cells,
    "7": dcsr_table7_cells,
    "8": dcsr_table8_cells,
}
NOTES = {
    "4": "The paper's Table 4 is on a 1.05M-passage Wikipedia subset; ours on the corpus named "
    "in the subset column (empty = the whole corpus of this scale).",
    "5": "DPR-hard / DCSR-hard: hard negatives mined by our own trained DPR / DCSR checkpoint "
    "(retrieval over the training questions, top passages without an answer; DCSR's "
    "retrieval ranks passages by Score Normalization over their sentences), then a second "
    "training round. A DCSR-mined negative is sentence-specific: the sentence of that "
    "passage the DCSR checkpoint retrieved first (a DPR-mined one: a random sentence of it). "
    "The paper's DPR-hard is DPR's released adversarial file.",
    "6": "Transfer rows: Δ = transfer - in-domain (the paper prints the drop, in-domain - "
    "transfer, shown negated).",
    "7": "Corpus subsets keep every gold passage of the evaluated questions, then the first "
    "passages of the corpus up to the size (the paper took the first N passages).",
    "8": "Only the SQuAD-test block is ours (SQuAD v1.1 dev questions); the paper's SQuAD-dev "
    "block (DPR's dev split of SQuAD train) is listed with no value of ours.",
}


def dcsr_cells(table):
    return CELLS[table]()


def dcsr_table_cfg(table):
    cells = [{k: v for k, v in c.items() if k != "file"} for c in dcsr_cells(table)]
    cfg = {"scale": SCALE, "table": table, "cells": cells, "note": NOTES.get(table, "")}
    cfg["tolerance"] = TOLERANCE
    if table == "8":
        cfg["paper_only"] = TABLE8_PAPER_ONLY
    return cfg


def released_examples(dataset):
    """DPR's released training file of a dataset (an error when its examples are mined)."""
    how = C["train_examples"].get(dataset, "mine")
    if how == "mine":
        raise ValueError(
            f"dataset '{dataset}': training examples are mined, not released"
        )
    return source_file(how)


def miner_split(dataset):
    """The training questions a miner retrieves for: the configured train split, or (paper
    scale, where DPR's released files are the training data) the questions of that file.
    """
    if (C["qa"].get(dataset) or {}).get("train"):
        return "train"
    released_examples(dataset)
    return "train.released"


def dcsr_vectors_inputs():
    """The main DCSR run of the first Table 2 dataset: its model and a retrieval report."""
    d, split = C["tables"]["datasets"][0], C["tables"]["split"]
    ts = dcsr_single(d)
    return {
        "passages": "results/corpus/passages.parquet",
        "sentences": "results/corpus/sentences.report.json",
        "model": f"results/models/dcsr/{ts}",
        "retrieve": f"results/runs/dcsr/{ts}/{d}-{split}.report.json",
    }


def figure4_runs():
    f = dcsr_tcfg("figure4")
    return [
        (label, run, ts) for ts in f["train_sets"] for label, run in f["runs"].items()
    ]
