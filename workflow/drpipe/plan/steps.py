"""The pipeline's steps: each one's files and the config slice it reads (corpus, BM25,
training, encoding, index, search, corpus subsets)."""

from __future__ import annotations

import hashlib
import json
import re
from functools import cached_property

from drpipe.config import (
    ConfigError,
    method_config,
    method_run_options,
)
from drpipe.methods import method_class, method_module
from drpipe.plan.base import PlanBase
from drpipe.subsets import parse_subset


def _digest(obj) -> str:
    """8 hex digits of a JSON value (a token key's part)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:8]


class StepsPlan(PlanBase):
    DOC_COMMAND = {"wiki_dump": ("wiki", "--dump"), "squad": ("squad-docs", "--squad")}

    # Set at search time (stored with the index as defaults, but the run passes its own).
    SEARCH_KNOBS = ("ef_search", "nprobe")

    SUBSET = "(?:p[0-9]+(?:[.][0-9]+)?|n[0-9]+)(?:-gold-[A-Za-z0-9_]+-[A-Za-z0-9_]+)?"

    def doc_entry(self, name):
        for d in self.DOCS:
            if d["name"] == name:
                return d
        raise ConfigError(f"config: no corpus.documents entry named '{name}'")

    def doc_cfg(self, name):
        """What a document step reads: the dump cleaning stops after `max_articles`; a SQuAD
        source samples `sample_articles` with the seed (and only then reads it)."""
        d = self.doc_entry(name)
        if d["kind"] == "wiki_dump":
            return {"max_articles": d.get("max_articles")}
        out = {"sample_articles": d.get("sample_articles")}
        if d.get("sample_articles") is not None:
            out["seed"] = self.C["seed"]
        return out

    def bm25_search_cfg(self, hits):
        """What a BM25 search reads: the scoring, the index's fields and its depth `hits`."""
        return {
            "k1": self.C["bm25"]["k1"],
            "b": self.C["bm25"]["b"],
            "hits": hits,
            "java": self.C["bm25"]["java"],
            "fields": self.C["bm25"]["fields"],
            **(
                {"field_weights": self.C["bm25"]["field_weights"]}
                if self.C["bm25"]["fields"] == "title_text"
                else {}
            ),
        }

    # BM25 runs, one search per use, each as deep as its use and no deeper, so that changing one
    # use's depth reruns only that use: the BM25 retriever's rows (bm25.hits), the negative
    # mining (mining.depth) and the hybrid's candidates (hybrid.depth).
    def bm25_mining_run(self, dataset):
        return f"results/bm25/mining/{dataset}-train.parquet"

    def bm25_hybrid_run(self, dataset, split):
        return f"results/bm25/hybrid/{dataset}-{split}.parquet"

    def train_examples_file(self, dataset):
        how = self.C["train_examples"].get(dataset, "mine")
        return f"results/train/{dataset}.jsonl.gz" if how == "mine" else self.source_file(how)

    def train_set_files(self, train_set):
        if train_set not in self.C["train_sets"]:
            raise ConfigError(
                f"config: unknown train set '{train_set}' (train_sets: {sorted(self.C['train_sets'])})"
            )
        return [self.train_examples_file(d) for d in self.C["train_sets"][train_set]]

    def dataset_match(self, dataset):
        """How a dataset's answers match text: its qa config's `match` (CuratedTREC: regex)."""
        modes = {s.get("match") for s in (self.C["qa"].get(dataset) or {}).values() if s}
        modes.discard(None)  # one mode per dataset: a config rule, checked at load
        return modes.pop() if modes else "string"

    def train_cfg(self, w):
        """`drpipe train --cfg`: the run's training cfg (its encoder read from a stand-in where it
        has one) and, for files of datasets whose answers are not plain strings, how they match
        (DCSR finds its positive sentences with them). From the wildcards only, not `input`:
        Snakemake does not compare a param that reads `input` when it decides what reruns.
        """
        cfg = self.with_model_paths(method_config(self.C, w.run, w.train_set))
        datasets = self.C["train_sets"][w.train_set]
        modes = {}
        for files in (self.train_set_files(w.train_set), self.val_set_files(w.train_set)):
            files = [files] if isinstance(files, str) else list(files)
            for d, f in zip(datasets, files, strict=True) if len(files) == len(datasets) else ():
                if self.dataset_match(d) != "string":
                    modes[f] = self.dataset_match(d)
        return self.cfg_json({**cfg, **({"answer_match": modes} if modes else {})})

    def train_corpus_args(self, w, input):
        """`drpipe train --corpus NAME=PATH ...` for methods that train on corpus tables."""
        names = method_class(self.run_method(w.run)).train_corpus
        return ("--corpus " + " ".join(f"{k}={input[k]}" for k in names)) if names else ""

    def train_run_options(self, w):
        """The run's settings that change no weight (checkpoint cadence, logging)."""
        return self.options(method_run_options(self.C, w.run))

    def val_set_files(self, train_set):
        """Development examples of every dataset of a train set (DPR selects checkpoints on dev);
        empty when one lacks them, and the training holds out `val_fraction` instead."""
        names = [self.C["dev_examples"].get(d) for d in self.C["train_sets"][train_set]]
        return [self.source_file(n) for n in names] if all(names) else []

    def shard_files(self, run, train_set, suffix=".npy"):
        return [
            f"results/embeddings/{run}/{train_set}/shard-{i}{suffix}"
            for i in range(self.C["encode"]["shards"])
        ]

    def corpus_inputs(self, run):
        """What encoding a run's corpus reads: the passages, and their sentences if its method's
        units are sentences (DCSR)."""
        out = {"passages": "results/corpus/passages.parquet"}
        if method_class(self.run_method(run)).corpus_units == "sentences":
            out["sentences"] = "results/corpus/sentences.parquet"
        return out

    # ---- tokenize once (drpipe.tokens): the ids of every run whose encoder shares them

    def _token_spec(self, cfg, method):
        """What ``drpipe tokenize`` writes for an encoder of ``cfg`` (its ``init`` as config
        names it) encoded by ``method``: {"key": <tokenizer key>/<format key>, "tokenizer":
        where it is read, "inputs": its stand-in, "cfg": tokenize's --cfg}; None when the method
        encodes from text only."""
        klass = method_class(method)
        fmt = klass.token_format
        if fmt is None:
            return None
        init = str(cfg["init"])
        add = list(klass.special_tokens)
        max_len = int(cfg["max_passage_len"])
        text = {} if fmt == "marked" else {
            "passage_prefix": cfg.get("passage_prefix", ""), "title": cfg.get("title", "pair"),
            **({"title_sep": cfg.get("title_sep", ". ")} if cfg.get("title") == "concat" else {}),
        }  # fmt: skip
        tok_key = "{}-{}".format(
            re.sub(r"[^A-Za-z0-9_.-]+", "_", init.rstrip("/").rsplit("/", 1)[-1]).strip("_."),
            _digest([init, add]),
        )
        fmt_key = "-".join([fmt, *([text["title"]] if text else []), f"L{max_len}",
                            _digest([fmt, max_len, text])])  # fmt: skip
        maker = next(m for m in self.METHODS if method_class(m).token_format == fmt)
        return {
            "key": f"{tok_key}/{fmt_key}",
            # the code that writes them: drpipe.tokens and the method whose format it is
            "code": self.code("drpipe.tokens", method_module(maker)),
            "tokenizer": self.model_path(init),
            "inputs": self.model_inputs(init),
            "units": klass.corpus_units,
            "cfg": {"format": fmt, "max_length": max_len, "add_tokens": add, **text},
        }

    @cached_property
    def TOKEN_SPECS(self):
        """Run -> its token spec, for the runs whose encoder the plan knows: the initial
        encoders and every configured method run (``dpr``, ``dcsr.t4_bm25_2``, ...). Other runs
        (a released checkpoint, another rule's models) encode from text."""
        out = {}
        for run in ("init", *self.ZERO_SHOT):
            cfg = dict(self.C["encoder"])
            if run != "init":
                cfg.update(self.ZERO_SHOT[run])
            out[run] = self._token_spec(cfg, "dpr")
        for method in self.METHODS:
            variants = (self.C["methods"].get(method) or {}).get("variants") or {}
            for run in (method, *(f"{method}.{v}" for v in variants)):
                if run == getattr(self, "RELEASED_RUN", None):
                    continue
                try:
                    cfg = method_config(self.C, run)
                except ConfigError:
                    continue
                out[run] = self._token_spec(cfg, method)
        return {run: spec for run, spec in out.items() if spec is not None}

    def token_spec_of(self, tokenizer, fmt):
        """The spec of tokenize's wildcards (any run's: all that share it are alike)."""
        key = f"{tokenizer}/{fmt}"
        for spec in self.TOKEN_SPECS.values():
            if spec["key"] == key:
                return spec
        raise ConfigError(f"no run of this config encodes with the token ids {key}")

    def token_prefix(self, run, shard):
        """The token shard (``drpipe tokenize --out``) a run's encoding reads, or None."""
        spec = self.TOKEN_SPECS.get(run)
        return f"results/tokens/{spec['key']}/shard-{shard}" if spec else None

    def token_corpus_inputs(self, tokenizer, fmt):
        """What tokenize reads: the passages, the sentences for marked passages, the stand-in."""
        spec = self.token_spec_of(tokenizer, fmt)
        out = {"passages": "results/corpus/passages.parquet"}
        if spec["units"] == "sentences":
            out["sentences"] = "results/corpus/sentences.parquet"
        if spec["inputs"]:
            out["tokenizer"] = spec["inputs"]
        return out

    def encode_inputs(self, run, shard):
        """What encoding a run's shard reads: its token shard where it has one, else the
        corpus tables (``corpus_inputs``)."""
        prefix = self.token_prefix(run, shard)
        if prefix is None:
            return self.corpus_inputs(run)
        return {f"tokens_{k}": f"{prefix}{suffix}"
                for k, suffix in (("ids", ".tokens.npy"), ("rows", ".rows.npy"),
                                  ("meta", ".json"))}  # fmt: skip

    @staticmethod
    def text_source(inputs):
        """``drpipe encode``'s source options for a corpus read as text: the passages, and the
        sentences where ``inputs`` (a rule's input, or ``corpus_inputs``) has them."""
        return " ".join(
            # keys(): a rule's input is a list of paths with names
            f"--{k} {inputs[k]}"
            for k in ("passages", "sentences")
            if k in inputs.keys()  # noqa: SIM118
        )

    def encode_source(self, run, shard):
        """``drpipe encode``'s source options: ``--tokens PREFIX`` or ``--passages`` (and
        ``--sentences``)."""
        prefix = self.token_prefix(run, shard)
        if prefix is not None:
            return f"--tokens {prefix}"
        return self.text_source(self.corpus_inputs(run))

    def train_corpus(self, run):
        """Corpus tables a run's method trains with (sentence-level methods: the sentences)."""
        return {k: self.corpus_table(k) for k in method_class(self.run_method(run)).train_corpus}

    def corpus_table(self, name):
        return {
            "passages": "results/corpus/passages.parquet",
            "sentences": "results/corpus/sentences.parquet",
            # Names the splitter that cut the sentences (DCSR cuts passages the corpus lacks so).
            "sentences_report": "results/corpus/sentences.report.json",
        }[name]

    def index_by_method(self, run):
        """The run's method's `index.by_method` entry (empty if none)."""
        return self.C["index"]["by_method"].get(self.run_method(run)) or {}

    def index_type(self, run):
        return self.index_by_method(run).get("type", self.C["index"]["type"])

    def index_gpus(self, run):
        """GPUs a search of the run's index asks for (at paper scale): none for HNSW, which FAISS
        searches on CPU; else the method's `gpus` (a flat index sharded over them), default 1.
        """
        if self.index_type(run) == "hnsw":
            return 0
        return self.index_by_method(run).get("gpus", 1)

    def index_file(self, w):
        return f"results/index/{w.run}/{w.train_set}/{self.index_type(w.run)}.faiss"

    def qvec_file(self, run, train_set, dataset, split):
        return f"results/qvecs/{run}/{train_set}/{dataset}-{split}.npy"

    def search_cfg(self, run):
        """What a search over a run's index reads: depth, index type and that type's search knob."""
        kind = self.index_type(run)
        knob = {
            "hnsw": {"ef_search": self.C["index"]["hnsw"]["ef_search"]},
            "ivfpq": {"nprobe": self.C["index"]["ivfpq"]["nprobe"]},
        }
        return {
            "top_k": self.C["retrieve"]["top_k"],
            "index_type": kind,
            "use_gpu": self.C["index"]["use_gpu"],
            **knob.get(kind, {}),
        }

    def index_cfg(self, itype):
        """What building an index of type `itype` reads (only its own type's parameters)."""
        cfg = {"type": itype, "use_gpu": self.C["index"]["use_gpu"]}
        if itype in ("hnsw", "ivfpq"):
            cfg[itype] = {
                k: v for k, v in self.C["index"][itype].items() if k not in self.SEARCH_KNOBS
            }
        if itype == "ivfpq":
            cfg["seed"] = self.C["seed"]  # samples the vectors the quantizer trains on
        return cfg

    def subset_dir(self, subset):
        return f"results/subsets/{subset}"

    def subset_question_input(self, subset):
        """The questions whose gold passages the subset keeps (none for a plain first-N cut)."""
        spec = parse_subset(subset)
        if not spec["dataset"]:
            return {}
        return {"questions": f"results/qa/{spec['dataset']}/{spec['split']}.parquet"}

    def subset_corpus_inputs(self, subset, run):
        """What encoding a run's corpus reads on a subset (DCSR: the sentences too)."""
        base = f"{self.subset_dir(subset)}/corpus"
        out = {"passages": f"{base}/passages.parquet"}
        if method_class(self.run_method(run)).corpus_units == "sentences":
            out["sentences"] = f"{base}/sentences.parquet"
        return out

    def subset_shard_files(self, subset, run, train_set):
        return [
            f"{self.subset_dir(subset)}/embeddings/{run}/{train_set}/shard-{i}.npy"
            for i in range(self.C["encode"]["shards"])
        ]

    def subset_metrics_file(self, subset, run, train_set, dataset, split):
        """Metrics of a run on a subset, or on the whole corpus when subset is None."""
        if subset is None:
            return self.metrics_file(run, train_set, dataset, split)
        return f"{self.subset_dir(subset)}/metrics/{run}/{train_set}/{dataset}-{split}.json"

    def is_multi(self, train_set):
        """A train set that combines several datasets (DPR's Multi setting)."""
        return len(self.C["train_sets"].get(train_set) or []) > 1
