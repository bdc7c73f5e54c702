# Shared helpers: the resolved config (`C`), where inputs land, config slices for params.
import json
import os
from pathlib import Path, PurePosixPath

import drpipe
from drpipe.codehash import code_hash
from drpipe.config import (
    ConfigError,
    method_config,
    method_run_options,
    method_variant,
    split_run_name,
)
from drpipe.config import resolve as resolve_config
from drpipe.methods import method_class, method_module, method_names
from drpipe.papers import paper, paper_of_run, papers
from drpipe.subsets import parse_subset
from drpipe.training.settings import DEFAULTS as TRAIN_DEFAULTS

import yaml

PKG = Path(workflow.basedir) / "workflow" / "drpipe"
# The code hashes below describe PKG; the jobs run the installed drpipe. They must be one.
if Path(drpipe.__file__).resolve().parent != PKG.resolve():
    raise WorkflowError(
        f"the installed drpipe is {Path(drpipe.__file__).parent}, not this checkout's {PKG}: "
        "its code hashes would not describe what runs. Install this checkout "
        "(pip install -e .) or run the workflow of the checkout that is installed."
    )

# libyaml's loader where PyYAML has it: config.yaml and its schema parse 10x faster, a fifth
# of a second off every Snakemake start (the same documents either way).
YamlSafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
SCHEMA = Path(workflow.basedir) / "workflow" / "schemas" / "config.schema.yaml"
DEFAULT_CONFIG = Path(workflow.basedir) / "config.yaml"


def _user_config_files():
    """Contents of the user's --configfile files (config.yaml itself is the defaults)."""
    out = []
    for path in workflow.overwrite_configfiles or []:
        if Path(path).resolve() != DEFAULT_CONFIG.resolve():
            with open(path) as fh:
                out.append(yaml.load(fh, Loader=YamlSafeLoader) or {})
    return out


with open(SCHEMA) as _fh, open(DEFAULT_CONFIG) as _dfh:
    # defaults < scale overlay < --configfile < --config key=value; every scale is validated
    # and errors name the key.
    C = resolve_config(
        yaml.load(_dfh, Loader=YamlSafeLoader),
        yaml.load(_fh, Loader=YamlSafeLoader),
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


def precision_cfg(section):
    """A forward pass's precision keys from a config section (encode, reader): int8's weight
    width only where it is asked for, so that it reruns no fp32, bf16 or auto pass (`auto`
    never picks int8 for these: drpipe.encoders.AUTO_PATHS)."""
    out = {"precision": section["precision"]}
    if str(section["precision"]).lower() == "int8":
        out["int8_weight_bits"] = section["int8_weight_bits"]
    return out


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
    """Conda environment of a rule: the CUDA one for rules that use a GPU at paper scale
    (a path relative to the .smk file being read: stage files and paper folders alike).
    """
    name = "gpu" if gpu and SCALE == "paper" else "cpu"
    envs = Path(workflow.basedir) / "envs" / f"{name}.yaml"
    return os.path.relpath(envs, workflow.current_basedir)


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


# --- stand-ins (the rehearsal scale: workflow/rules/standins.smk) ---

STANDIN_SOURCES = (C.get("standins") or {}).get("sources") or {}
STANDIN_MODELS = (C.get("standins") or {}).get("models") or {}
for _name in STANDIN_SOURCES:
    if _name not in C["sources"]:
        raise ValueError(f"config: standins.sources.{_name} is not a configured source")


def model_slug(model):
    """A hub id as one path component (as Hugging Face's cache names it)."""
    return "--".join(PurePosixPath(model).parts)


def model_id(slug):
    return str(PurePosixPath(*slug.split("--")))


def model_path(model):
    """Where a model the config names by hub id is read from: its stand-in directory when it
    has one (the rehearsal), else the id itself (transformers resolves it)."""
    if model in STANDIN_MODELS:
        return f"results/data/models/{model_slug(model)}"
    return model


def model_inputs(*models):
    """The stand-in directories among ``models`` (inputs of the jobs that load them)."""
    return [model_path(m) for m in models if m in STANDIN_MODELS]


def standin_inputs(spec):
    """A stand-in's inputs: name -> files (sources, or "model:<hub id>" stand-in models)."""
    out = {}
    for name, refs in spec["inputs"].items():
        out[name] = [
            (
                model_path(r.removeprefix("model:"))
                if r.startswith("model:")
                else source_file(r)
            )
            for r in refs
        ]
    return out


def standin_args(input):
    """``NAME=PATH`` arguments of `drpipe standin --inputs`."""
    out = []
    for k in input.keys():
        paths = [input[k]] if isinstance(input[k], str) else list(input[k])
        out += [f"{k}={p}" for p in paths]
    return " ".join(out)


def init_inputs(run):
    """The stand-in of the encoder a run starts from, if it has one. A run whose variant is
    not configured (the hard-negative round's "<method>.hard_<miner>", another rule's) starts
    from its method's encoder."""
    try:
        cfg = method_config(C, run)
    except ConfigError:
        cfg = method_config(C, split_run_name(run)[0])
    return model_inputs(cfg["init"])


def with_model_paths(cfg):
    """A training/encoder cfg whose ``init`` is read from its stand-in when it has one."""
    if cfg.get("init") in STANDIN_MODELS:
        return {**cfg, "init": model_path(cfg["init"])}
    return cfg


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


def bm25_search_cfg(hits):
    """What a BM25 search reads: the scoring, the index's fields and its depth `hits`."""
    return {
        "k1": C["bm25"]["k1"],
        "b": C["bm25"]["b"],
        "hits": hits,
        "java": C["bm25"]["java"],
        "fields": C["bm25"]["fields"],
        **(
            {"field_weights": C["bm25"]["field_weights"]}
            if C["bm25"]["fields"] == "title_text"
            else {}
        ),
    }


# BM25 runs, one search per use, each as deep as its use and no deeper, so that changing one
# use's depth reruns only that use: the BM25 retriever's rows (bm25.hits), the negative
# mining (mining.depth) and the hybrid's candidates (hybrid.depth).
def bm25_mining_run(dataset):
    return f"results/bm25/mining/{dataset}-train.parquet"


def bm25_hybrid_run(dataset, split):
    return f"results/bm25/hybrid/{dataset}-{split}.parquet"


def hybrid_tuning_datasets(run, train_set):
    """Datasets whose training questions the model of (run, train_set) held out for
    validation: those the weight is tuned on, whatever dataset the hybrid evaluates (the
    weight belongs to the model; an evaluation-only dataset has no training questions).
    """
    if run == "init":
        raise ValueError("config: hybrid.lambda 'tune' needs a trained run, not init")
    datasets = C["train_sets"][train_set]
    fix = "set hybrid.lambda to a number (DPR: 1.1, chosen on its dev set)"
    if val_set_files(train_set):
        raise ValueError(
            f"config: hybrid.lambda 'tune' tunes on the training questions a model held out "
            f"for validation, but train set '{train_set}' validates on dev_examples files "
            f"and holds none out; {fix}"
        )
    released = [d for d in datasets if C["train_examples"].get(d, "mine") != "mine"]
    if released:
        raise ValueError(
            f"config: hybrid.lambda 'tune' tunes on the held-out training questions of train "
            f"set '{train_set}', but train_examples.{released[0]} is a released file whose "
            f"questions are no question table (qa.{released[0]}.train); {fix}"
        )
    return datasets


def hybrid_tuning_inputs(w):
    """Inputs of the weight's tuning: the model's training report (naming the questions it
    held out of training), and, for each dataset of its train set, the training questions,
    their vectors and their BM25 candidates; and the passages. Never a test question."""
    if C["hybrid"]["lambda"] != "tune":
        return {}
    datasets = hybrid_tuning_datasets(w.run, w.train_set)
    return {
        "tune_queries": [qvec_file(w.run, w.train_set, d, "train") for d in datasets],
        "tune_bm25_run": [bm25_hybrid_run(d, "train") for d in datasets],
        "tune_questions": [f"results/qa/{d}/train.parquet" for d in datasets],
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


def dataset_match(dataset):
    """How a dataset's answers match text: its qa config's `match` (CuratedTREC: regex)."""
    modes = {s.get("match") for s in (C["qa"].get(dataset) or {}).values() if s}
    modes.discard(None)
    if len(modes) > 1:
        raise ValueError(
            f"config: qa.{dataset} splits match answers differently: {modes}"
        )
    return modes.pop() if modes else "string"


def train_cfg(w):
    """`drpipe train --cfg`: the run's training cfg (its encoder read from a stand-in where it
    has one) and, for files of datasets whose answers are not plain strings, how they match
    (DCSR finds its positive sentences with them). From the wildcards only, not `input`:
    Snakemake does not compare a param that reads `input` when it decides what reruns.
    """
    cfg = with_model_paths(method_config(C, w.run, w.train_set))
    datasets = C["train_sets"][w.train_set]
    modes = {}
    for files in (train_set_files(w.train_set), val_set_files(w.train_set)):
        files = [files] if isinstance(files, str) else list(files)
        for d, f in zip(datasets, files) if len(files) == len(datasets) else ():
            if dataset_match(d) != "string":
                modes[f] = dataset_match(d)
    return cfg_json({**cfg, **({"answer_match": modes} if modes else {})})


def val_set_files(train_set):
    """Development examples of every dataset of a train set (DPR selects checkpoints on dev);
    empty when one lacks them, and the training holds out `val_fraction` instead."""
    names = [C["dev_examples"].get(d) for d in C["train_sets"][train_set]]
    return [source_file(n) for n in names] if all(names) else []


# --- released checkpoints (rule released_model) ---

RELEASED_RUN = "dpr.released"
# Runs that training makes (every run but the released checkpoints).
TRAINED = "(?!{}/){}".format(RELEASED_RUN.replace(".", "[.]"), RUN)


def released_inputs(w):
    """What loading a released checkpoint reads: its .cp file (a source) and the stand-in
    directories of the models it names (the rehearsal)."""
    entry = C["released"][w.train_set]
    if entry["layout"] == "dpr_cp":
        return {
            "checkpoint": source_file(entry["source"]),
            "models": model_inputs(entry["base"]),
        }
    return {"models": model_inputs(entry["question_encoder"], entry["ctx_encoder"])}


def released_cfg(train_set):
    entry = dict(C["released"][train_set])
    for key in ("question_encoder", "ctx_encoder"):
        if key in entry:
            entry[key] = model_path(entry[key])
    if "base" in entry:
        entry["base_path"] = model_path(entry["base"])
    entry.pop("source", None)  # its bytes are the input file
    lens = {k: C["encoder"][k] for k in ("max_query_len", "max_passage_len")}
    return {**entry, **lens}


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
        # Names the splitter that cut the sentences (DCSR cuts passages the corpus lacks so).
        "sentences_report": "results/corpus/sentences.report.json",
    }[name]


# --- index and retrieve ---


def index_by_method(run):
    """The run's method's `index.by_method` entry (empty if none)."""
    return C["index"]["by_method"].get(run_method(run)) or {}


def index_type(run):
    return index_by_method(run).get("type", C["index"]["type"])


def index_gpus(run):
    """GPUs a search of the run's index asks for (at paper scale): none for HNSW, which FAISS
    searches on CPU; else the method's `gpus` (a flat index sharded over them), default 1.
    """
    if index_type(run) == "hnsw":
        return 0
    return index_by_method(run).get("gpus", 1)


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
# Papers add rows to the shared Table 2 through hooks that their rules.smk appends to:
# TABLE2_HOOKS: functions returning rows (run, train_set, dataset, training, label) and a
# dict run -> extra row_map fields (a protocol, say); RUN_REPORT_HOOKS: functions (run,
# train_set, dataset) -> (step reports behind the run, the trained run it starts from), or
# None for a run that is not theirs.
TABLE2_HOOKS = []
RUN_REPORT_HOOKS = []
# Each paper's tables and figures (its rules.smk appends them): what `make rehearse` builds.
PAPER_TARGETS = []


def metrics_file(run, train_set, dataset, split):
    return f"results/metrics/{run}/{train_set}/{dataset}-{split}.json"


def multi_train_set(method):
    """The train set of a method's Multi rows: the Multi set of the paper that lists the method
    (`tables.<paper>.multi`: DCSR trains on NQ + TriviaQA + SQuAD), else `tables.multi` (DPR's
    NQ + TriviaQA + WQ + TREC); None: no Multi rows."""
    key = paper_of_run(method)
    own = (C["tables"].get(key) or {}).get("multi") if key else None
    return own or C["tables"]["multi"]


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
            if multi_train_set(method):
                settings.append(("Multi", multi_train_set(method)))
            for training, train_set in settings:
                if train_set is None:
                    continue
                rows.append((method, train_set, dataset, training, cls.label))
                if C["hybrid"]["enabled"] and cls.hybrid:
                    label = f"BM25+{cls.label}"
                    rows.append((f"{method}+bm25", train_set, dataset, training, label))
        rows += released_rows(dataset)
    for hook in TABLE2_HOOKS:
        rows += hook()[0]
    return rows


RELEASED_SUFFIX = " (released checkpoint)"
RELEASED_LABEL = f"DPR{RELEASED_SUFFIX}"


def released_rows(dataset):
    """Table 2 rows of DPR's released checkpoints on ``dataset``: where our DPR of the same
    train set has a row (Single: tables.single; Multi: DPR's Multi set), and its BM25 hybrid
    when the weight is fixed (tuning needs the held-out questions of a training run)."""
    rows = []
    for training, ts in (
        ("Single", C["tables"]["single"].get(dataset)),
        ("Multi", multi_train_set("dpr")),
    ):
        if ts is None or ts not in C["released"]:
            continue
        rows.append((RELEASED_RUN, ts, dataset, training, RELEASED_LABEL))
        if C["hybrid"]["enabled"] and C["hybrid"]["lambda"] != "tune":
            rows.append(
                (
                    f"{RELEASED_RUN}+bm25",
                    ts,
                    dataset,
                    training,
                    f"BM25+{RELEASED_LABEL}",
                )
            )
    return rows


def table2_inputs():
    split = C["tables"]["split"]
    return [metrics_file(r, ts, d, split) for r, ts, d, _, _ in table2_runs()]


def table2_row_map():
    """Our run names -> the paper's row labels and the paper whose numbers sit beside them
    (None: no paper lists the run's method); Single/Multi follow from the train set."""
    extras = {}
    for hook in TABLE2_HOOKS:
        extras.update(hook()[1])
    rows = {}
    for run, _, _, training, label in table2_runs():
        rows[run] = {
            "method": label,
            **({"training": training} if training == "None" else {}),
            "paper": paper_of_run(run),
            **extras.get(run, {}),
        }
        if run.startswith(RELEASED_RUN):
            # Beside the numbers the paper printed for the model it released.
            rows[run]["paper_method"] = label.removesuffix(RELEASED_SUFFIX)
    return rows


def precision_sources(run, train_set, dataset, split):
    """Where the reports are that say in which precision a cell was made (see
    drpipe.tables.precision): its training (none for BM25 and the initial encoder), the
    folder of its corpus shard reports, its question encoding; a hybrid or AOpt run's are those
    of the dense run it starts from."""
    if run == "bm25":
        return {}
    for hook in RUN_REPORT_HOOKS:
        found = hook(run, train_set, dataset)
        if found:
            run = found[1]
    run = run.split("+")[0]
    out = {
        "corpus": f"results/embeddings/{run}/{train_set}",
        "queries": [
            qvec_file(run, train_set, dataset, split).removesuffix(".npy")
            + ".report.json"
        ],
    }
    if not run.startswith("init"):
        out["training"] = [f"results/models/{run}/{train_set}.report.json"]
    return out


def table2_precision():
    """Per Table 2 cell, where its precision reports are (drpipe.tables.precision)."""
    split = C["tables"]["split"]
    return {
        f"{run}|{ts}|{d}": precision_sources(run, ts, d, split)
        for run, ts, d, _, _ in table2_runs()
        if run != "bm25"
    }


def table2_reports(precision=None):
    """The report files behind table2_precision (inputs of the Table 2 rule), or behind
    another table's cells (`precision`: a subset of table2_precision)."""
    files = set()
    for roles in (table2_precision() if precision is None else precision).values():
        files.update(roles.get("training", []), roles["queries"])
        shards = range(C["encode"]["shards"])
        files.update(f"{roles['corpus']}/shard-{i}.report.json" for i in shards)
    return sorted(files)


def table2_code():
    """Code hash of Table 2: its module and the papers whose numbers sit beside its rows."""
    keys = {v["paper"] for v in table2_row_map().values() if v["paper"]}
    return code("drpipe.papers.table2", *(paper(k).module for k in sorted(keys)))


def train_setting(method, key):
    """A method's training setting as `drpipe train` reads it: its config block (over the
    encoder's), else the default every method shares (a new block may name only a few keys).
    """
    return method_config(C, method).get(key, TRAIN_DEFAULTS.get(key))


def table2_setup():
    """What Table 2's notes say about this run's setup (see drpipe.tables.notes.setup_notes)."""
    methods = C["tables"]["methods"]
    train_sets = {ts for _, ts, _, _, _ in table2_runs() if ts != "none"}
    fractions = [train_setting(m, "val_fraction") for m in methods] or [0.0]
    return {
        "encoder": C["encoder"]["init"],
        "bm25_fields": C["bm25"]["fields"],
        "field_weights": C["bm25"]["field_weights"],
        "hybrid_lambda": C["hybrid"]["lambda"],
        "hybrid_grid": C["hybrid"]["grid"],
        "training": {
            m: {k: train_setting(m, k) for k in ("epochs", "batch_size")}
            for m in methods
        },
        # Each paper's own Multi set (the notes say so when they differ).
        "multi_sets": {
            ts: C["train_sets"][ts]
            for _, ts, _, training, _ in table2_runs()
            if training == "Multi"
        },
        # DPR's released checkpoints behind the "(released checkpoint)" rows (if any).
        **({"released": C["released"]} if C["released"] else {}),
        # A train set with dev files selects on them (val_set_files); else the held-out fraction.
        "validation": {
            ts: "dev" if val_set_files(ts) else max(fractions)
            for ts in sorted(train_sets)
        },
    }


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
        for hook in RUN_REPORT_HOOKS:
            found = hook(run, ts, dataset)
            if found:
                more, run = found  # and the reports of the run it starts from
                reports += more
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


def summary_cfg():
    """What the run summary says from config: each paper's Multi set, epochs per train set
    (per method), the configured depths and index types."""
    multi = {}
    for p in papers():
        for m in p.methods:
            ts = multi_train_set(m) if m in METHODS else None
            if ts:
                multi[p.key] = (ts, C["train_sets"][ts])
    epochs = {
        m: {ts: method_config(C, m, ts)["epochs"] for ts in sorted(C["train_sets"])}
        for m in C["tables"]["methods"]
    }
    depths = {
        "bm25.hits": C["bm25"]["hits"],
        "mining.depth": C["mining"]["depth"],
        "hybrid.depth": C["hybrid"]["depth"],
        "hybrid.lambda": C["hybrid"]["lambda"],
        "retrieve.top_k": C["retrieve"]["top_k"],
        "index.type": C["index"]["type"],
    }
    return {"scale": SCALE, "multi_sets": multi, "epochs": epochs, "depths": depths}


# --- corpus subsets (rules in subsets.smk; any method can be evaluated on a subset) ---

SUBSET = "(?:p[0-9]+(?:[.][0-9]+)?|n[0-9]+)(?:-gold-[A-Za-z0-9_]+-[A-Za-z0-9_]+)?"


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


# --- reader (workflow/rules/reader.smk) ---


RC = C["reader"]


def _check_warm_start():
    """The warm start reads SQuAD train articles the corpus does not hold; a scale whose
    corpus takes every article of that source leaves none (the squad scale): stop at planning,
    not after the corpus is built. Called where a reader's start is planned, so that scales
    that build no reader are not stopped."""
    ws = RC["warm_start"]
    if not ws:
        return
    for doc in C["corpus"]["documents"]:
        if doc.get("source") == ws["source"] and doc.get("sample_articles") is None:
            raise ValueError(
                f"config: reader.warm_start reads articles of '{ws['source']}' outside the "
                f"corpus, but corpus.documents '{doc['name']}' takes all of them; set "
                "reader.warm_start: null (or sample that source's articles)"
            )


READER_KEYS = (
    "init", "passages", "depth", "batch_size", "epochs", "lr", "warmup_ratio", "weight_decay",
    "grad_clip", "dropout", "max_len", "max_question_len", "max_answer_len", "val_fraction",
    "val_k", "seed", "bf16",
)  # fmt: skip
ANY_RUN = "[A-Za-z0-9_.+-]+"


def table4_rows():
    """(run, train_set, dataset) of every Table 4 cell: Table 2's rows on reader.datasets."""
    return [(r, ts, d) for r, ts, d, _, _ in table2_runs() if d in RC["datasets"]]


def reader_of(run, train_set):
    """The (run, train_set) whose reader reads this row: 'released', the shared one, or its own."""
    if RC["released"]:
        return ("released", "none")
    if RC["per_retriever"]:
        return (run, train_set)
    return (RC["train_run"]["run"], RC["train_run"]["train_set"])


def reader_rows(rrun, rts, dataset):
    """The rows one reader reads on `dataset`."""
    return [
        (r, ts)
        for r, ts, d in table4_rows()
        if d == dataset and reader_of(r, ts) == (rrun, rts)
    ]


def k_row(run, train_set):
    """The row whose held-out questions choose a row's k: its own (reader.k_per_row, and
    always with a reader per retriever), else the run the shared reader trains on."""
    if RC["k_per_row"] or reader_mode() == "per_retriever":
        return (run, train_set)
    return (RC["train_run"]["run"], RC["train_run"]["train_set"])


def scored_rows(rrun, rts, dataset, split):
    """The runs a reader scores on a split: every row it reads on the evaluated split; on the
    split k is chosen on, only the rows that choose k."""
    rows = reader_rows(rrun, rts, dataset)
    if split == RC["k_split"]:
        return sorted({k_row(r, ts) for r, ts in rows})
    return rows


def reader_k_file(run, train_set, dataset):
    kr, kts = k_row(run, train_set)
    return f"results/answers/{kr}/{kts}/{dataset}.k.json"


def reader_sample(split):
    """The seeded sample of a split's questions the reader reads (reader.sample): on the
    evaluated split and on the split k is chosen on."""
    if split not in (C["tables"]["split"], RC["k_split"]) or not RC["sample"]:
        return {}
    return {"sample": RC["sample"], "seed": C["seed"]}


def reader_dir(rrun, rts, dataset):
    return [] if rrun == "released" else [f"results/readers/{rrun}/{rts}/{dataset}"]


def is_multi(train_set):
    """A train set that combines several datasets (DPR's Multi setting)."""
    return len(C["train_sets"].get(train_set) or []) > 1


def reader_start(rrun, rts, dataset):
    """The reader a reader starts from, if any: in the Multi setting, reader.multi_finetune
    names the dataset whose reader (same retriever, same train set) a dataset fine-tunes;
    else the warm-started reader (reader.warm_start, local scales), else none (reader.init).
    """
    source = RC["multi_finetune"].get(dataset)
    if source is None or not is_multi(rts):
        _check_warm_start()
        return [WARM_START_READER] if RC["warm_start"] else []
    if source == dataset:
        raise ValueError(
            f"config: reader.multi_finetune.{dataset} names the dataset itself"
        )
    return [f"results/readers/{rrun}/{rts}/{source}"]


WARM_START_READER = "results/readers/warm_start"


def warm_start_data_cfg():
    ws = RC["warm_start"]
    return {"articles": ws["articles"], "questions": ws["questions"], "seed": C["seed"]}


def warm_start_train_cfg():
    """The reader's training cfg for its warm start: reader.warm_start's epochs and m."""
    cfg = with_model_paths({k: RC[k] for k in READER_KEYS})
    ws = RC["warm_start"]
    return {**cfg, "epochs": ws["epochs"], "passages": ws["passages"]}


def reader_batch_size(dataset):
    return RC["batch_size_by_dataset"].get(dataset, RC["batch_size"])


def reader_train_cfg(rrun, rts, dataset, start):
    """The reader's training cfg for a dataset: its batch size and where it starts."""
    cfg = with_model_paths({k: RC[k] for k in READER_KEYS})
    cfg["batch_size"] = reader_batch_size(dataset)
    if start:
        cfg["init"] = start[0]
    return cfg


def reader_scores(run, train_set, dataset, split):
    rrun, rts = reader_of(run, train_set)
    return f"results/reader_scores/{rrun}/{rts}/{dataset}-{split}.parquet"


def table4_inputs():
    split = C["tables"]["split"]
    return [f"results/answers/{r}/{ts}/{d}-{split}.json" for r, ts, d in table4_rows()]


def table4_precision():
    """Table 2's precision sources for the cells Table 4 reads (the retrievers' precision)."""
    cells = {f"{r}|{ts}|{d}" for r, ts, d in table4_rows()}
    return {k: v for k, v in table2_precision().items() if k in cells}


def table4_row_map():
    """Table 2's row map, for the runs Table 4 reads."""
    runs = {r for r, _, _ in table4_rows()}
    return {run: v for run, v in table2_row_map().items() if run in runs}


def table4_code():
    """Code hash of Table 4: its module and the papers whose numbers sit beside its rows."""
    keys = {v["paper"] for v in table4_row_map().values() if v["paper"]}
    return code("drpipe.papers.table4", *(paper(k).module for k in sorted(keys)))


def reader_mode():
    if RC["released"]:
        return "released"
    return "per_retriever" if RC["per_retriever"] else "shared"


def table4_setup():
    """What Table 4's notes say: Table 2's setup and the reader's (drpipe.tables.notes)."""
    keys = ("init", "passages", "depth", "max_len", "epochs", "batch_size", "ks", "k_split",
            "k_per_row", "precision", "released", "sample", "val_k", "warm_start")  # fmt: skip
    reader = {k: RC[k] for k in keys}
    reader["mode"] = reader_mode()
    reader["train_run"] = "{run}/{train_set}".format(**RC["train_run"])
    return {**table2_setup(), "reader": reader}
