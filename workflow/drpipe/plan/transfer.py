"""The transfer table (config ``transfer``): each run scored on each collection in BEIR's layout.

A collection ``<c>`` lives under ``results/transfer/<c>/``: its BEIR folder (the config's
``folder``, or ``beir/`` made by a builder), converted once into ``collection/`` (passages,
qrels, the queries as a questions Parquet; ``drpipe collection convert``), then per run the
generic steps on that corpus (encode, flat index, encode the queries and search, or BM25),
``runs/<run>/<train set>.parquet``, scored with ir_measures into
``scores/<run>/<train set>.json`` (``drpipe collection score``). ``results/transfer.csv`` /
``.md`` (``drpipe transfer table``) has a row per run and a column per collection and measure.
The models are the ones Table 2 trains: nothing is trained or tuned on a collection."""

from __future__ import annotations

import re
from functools import cached_property
from pathlib import Path

from drpipe.config import ConfigError, method_config, split_run_name
from drpipe.methods import method_class
from drpipe.plan.base import PlanBase

TRANSFER_DIR = "results/transfer"
# What a builder entry may set (besides name and label), with its defaults.
BUILDER_KEYS = {"squad_dev": {"source": "squad_dev", "articles": 6, "queries": 200}}


class TransferPlan(PlanBase):
    @cached_property
    def TRANSFER(self):
        return self.C.get("transfer") or {"collections": [], "runs": None, "measures": [],
                                          "depth": 100}  # fmt: skip

    @cached_property
    def TRANSFER_COLLECTIONS(self):
        """Collection name -> its ``transfer.collections`` entry, in config order."""
        return {e["name"]: e for e in self.TRANSFER["collections"]}

    @cached_property
    def TRANSFER_COLLECTION(self):
        """The regex of the configured collection names (matches nothing without any)."""
        names = "|".join(map(re.escape, self.TRANSFER_COLLECTIONS))
        return f"(?:{names})" if names else "(?!)"

    @cached_property
    def TRANSFER_BUILT(self):
        """The regex of the collections a builder makes (their BEIR files are outputs)."""
        built = [n for n, e in self.TRANSFER_COLLECTIONS.items() if "build" in e]
        names = "|".join(map(re.escape, built))
        return f"(?:{names})" if names else "(?!)"

    def transfer_collection(self, name):
        if name not in self.TRANSFER_COLLECTIONS:
            raise ConfigError(
                f"config: no transfer.collections entry named {name!r} "
                f"(configured: {sorted(self.TRANSFER_COLLECTIONS)})"
            )
        return self.TRANSFER_COLLECTIONS[name]

    # ------------------------------------------------------------------------------ paths
    def transfer_dir(self, collection):
        return f"{TRANSFER_DIR}/{collection}"

    def transfer_folder(self, collection):
        """The collection's BEIR folder: the configured one, or where its builder writes."""
        entry = self.transfer_collection(collection)
        return entry["folder"] if "folder" in entry else f"{self.transfer_dir(collection)}/beir"

    def transfer_split(self, collection):
        return self.transfer_collection(collection).get("split", "test")

    def transfer_beir_files(self, collection):
        """The BEIR files the conversion reads (corpus, queries, qrels): the configured
        folder's, or those its builder writes."""
        folder = Path(self.transfer_folder(collection))
        qrels = folder / "qrels" / f"{self.transfer_split(collection)}.tsv"
        return {"corpus": str(folder / "corpus.jsonl"), "queries": str(folder / "queries.jsonl"),
                "qrels": str(qrels)}  # fmt: skip

    def transfer_notes(self, collection):
        """What a builder says of the collection it made (None for a folder)."""
        if "build" not in self.transfer_collection(collection):
            return None
        return f"{self.transfer_folder(collection)}/notes.json"

    def transfer_converted_dir(self, collection):
        """Where ``drpipe collection convert`` writes the collection in our forms."""
        return f"{self.transfer_dir(collection)}/collection"

    def transfer_file(self, collection, name):
        """A file of the converted collection (passages.parquet, questions.parquet, qrels.tsv,
        report.json, sentences.parquet, ...)."""
        return f"{self.transfer_converted_dir(collection)}/{name}"

    def transfer_corpus_inputs(self, collection, run):
        """What encoding a run's corpus of the collection reads (DCSR: the sentences too)."""
        out = {"passages": self.transfer_file(collection, "passages.parquet")}
        if method_class(self.run_method(run)).corpus_units == "sentences":
            out["sentences"] = self.transfer_file(collection, "sentences.parquet")
        return out

    def transfer_shard_files(self, collection, run, train_set):
        return [
            f"{self.transfer_dir(collection)}/embeddings/{run}/{train_set}/shard-{i}.npy"
            for i in range(self.C["encode"]["shards"])
        ]

    def transfer_run_file(self, collection, run, train_set):
        return f"{self.transfer_dir(collection)}/runs/{run}/{train_set}.parquet"

    def transfer_score_file(self, collection, run, train_set):
        return f"{self.transfer_dir(collection)}/scores/{run}/{train_set}.json"

    # ------------------------------------------------------------------------ the rows
    def _default_train_set(self):
        t = self.C["tables"]
        return (t.get("single") or {}).get(t["datasets"][0]) if t["datasets"] else None

    def _table2_labels(self):
        """(run, train set) -> Table 2's row label, of its BM25 and dense rows, in its order."""
        out = {}
        for run, ts, _, _, label in getattr(self, "table2_runs", list)():
            if run == "bm25" or re.fullmatch(self.DENSE, run):
                out.setdefault((run, ts), label)
        return out

    def _label(self, run, train_set):
        if run == "bm25":
            return "BM25"
        if run == "init":
            return "Initial encoder (no fine-tuning)"
        if run.startswith("init."):
            return self.zero_shot_label(run)
        method, variant = split_run_name(run)
        label = method_class(method).label
        return f"{label} ({variant})" if variant else label

    def _parse_run(self, where, entry):
        """``(run, train set)`` of a ``transfer.runs`` entry; ConfigError naming it if there is
        no such run."""
        run, _, ts = entry.partition("/")
        zero_shot = ", ".join(n.removeprefix("init.") for n in getattr(self, "ZERO_SHOT", {}))
        known = (
            f"bm25, init, init.<zero_shot name> ({zero_shot or 'none configured'}), "
            f"a method or its variant ({', '.join(self.METHODS)})"
        )
        if run == "bm25" or re.fullmatch(self.INIT_RUNS, run):
            if ts not in ("", "none"):
                raise ConfigError(f"key {where}: {run} is not trained (train set none), not {ts!r}")
            return run, "none"
        if run.startswith("init"):
            raise ConfigError(f"key {where}: unknown run {run!r} (runs: {known})")
        if not re.fullmatch(self.RUN, run):
            raise ConfigError(f"key {where}: unknown run {run!r} (runs: {known})")
        released = getattr(self, "RELEASED_RUN", None)
        if run == released:
            sets = sorted(self.C.get("released") or {})
            ts = ts or self._default_train_set()
            if ts not in sets:
                raise ConfigError(f"key {where}: no released checkpoint for train set {ts!r} "
                                  f"(released: {sets})")  # fmt: skip
            return run, ts
        try:
            method_config(self.C, run)
        except ConfigError as err:
            raise ConfigError(f"key {where}: unknown run {run!r}: {err}") from None
        ts = ts or self._default_train_set()
        if ts is None:
            raise ConfigError(
                f"key {where}: {run} names no train set and tables.single has none for "
                f"{self.C['tables']['datasets'][:1]}: write {run}/<train set>"
            )
        if ts not in self.C["train_sets"]:
            raise ConfigError(f"key {where}: unknown train set {ts!r} "
                              f"(train_sets: {sorted(self.C['train_sets'])})")  # fmt: skip
        return run, ts

    @cached_property
    def TRANSFER_RUNS(self):
        """The table's rows: [(run, train set, label)], in config order (``runs: null``: Table
        2's BM25 and dense rows, in its order). A label shared by two rows gets its train
        set."""
        labels = self._table2_labels()
        if self.TRANSFER["runs"] is None:
            pairs = list(labels)
        else:
            pairs = []
            for i, entry in enumerate(self.TRANSFER["runs"]):
                pair = self._parse_run(f"transfer.runs[{i}] ({entry!r})", entry)
                if pair in pairs:
                    raise ConfigError(f"key transfer.runs[{i}]: {entry!r} names {pair[0]}/"
                                      f"{pair[1]} a second time")  # fmt: skip
                pairs.append(pair)
        named = [(r, ts, labels.get((r, ts)) or self._label(r, ts)) for r, ts in pairs]
        counts = {}
        for _, _, label in named:
            counts[label] = counts.get(label, 0) + 1
        return [(r, ts, f"{label} [{ts}]" if counts[label] > 1 else label)
                for r, ts, label in named]  # fmt: skip

    def transfer_cells(self):
        """Every (collection, run, train set) the table shows, collections outermost."""
        return [(c, r, ts) for c in self.TRANSFER_COLLECTIONS for r, ts, _ in self.TRANSFER_RUNS]

    def transfer_score_files(self):
        return [self.transfer_score_file(c, r, ts) for c, r, ts in self.transfer_cells()]

    # ------------------------------------------------------------------- step configs
    def transfer_build_args(self, collection):
        """`drpipe collection build-squad-dev` options of a built collection: its sizes, the
        seed and the articles the corpus samples from the same source (left out)."""
        entry = {**BUILDER_KEYS["squad_dev"], **self.transfer_collection(collection)}
        args = {"articles": entry["articles"], "queries": entry["queries"], "seed": self.C["seed"]}
        sample = self._corpus_sample(entry["source"])
        if sample is not None:
            args["exclude_sample"] = sample
        return args

    def transfer_build_source(self, collection):
        """The source file a built collection is made from."""
        entry = {**BUILDER_KEYS["squad_dev"], **self.transfer_collection(collection)}
        return self.source_file(entry["source"])

    def _corpus_sample(self, source):
        """``sample_articles`` of the corpus document entry that reads ``source`` (None: the
        corpus reads none of its articles); ConfigError if the corpus holds every one."""
        if self.C["corpus"]["passages_tsv"]:
            return None
        entries = [d for d in self.DOCS if d["source"] == source and d["kind"] == "squad"]
        if not entries:
            return None
        if len(entries) > 1 or entries[0].get("sample_articles") is None:
            raise ConfigError(
                f"config: transfer.collections builds a collection of {source} articles the "
                f"corpus does not hold, but corpus.documents {[d['name'] for d in entries]} "
                "holds every one (sample_articles: null): remove the entry, or sample"
            )
        return entries[0]["sample_articles"]

    def transfer_search_cfg(self, run):
        """A dense search of a collection: exact (flat index), ``transfer.depth`` deep."""
        return {"top_k": self.TRANSFER["depth"], "index_type": "flat",
                "use_gpu": self.C["index"]["use_gpu"]}  # fmt: skip

    def transfer_bm25_cfg(self):
        return self.bm25_search_cfg(self.TRANSFER["depth"])

    def transfer_table_cfg(self):
        """`drpipe transfer table --cfg`: the cells in the order of its --scores, the rows,
        the collections (label, built or a folder) and the measures."""
        cols = []
        for name, e in self.TRANSFER_COLLECTIONS.items():
            built = "build" in e
            if built:
                source = e.get("source", BUILDER_KEYS["squad_dev"]["source"])
                origin = f"built by `drpipe collection build-squad-dev` from source {source}"
            else:
                origin = f"BEIR folder {e['folder']}, split {self.transfer_split(name)}"
            label = e.get("label") or name
            cols.append({"name": name, "label": label, "origin": origin, "built": built})
        return {
            "cells": [list(c) for c in self.transfer_cells()],
            "rows": [
                {"run": r, "train_set": ts, "label": label} for r, ts, label in self.TRANSFER_RUNS
            ],  # fmt: skip
            "collections": cols,
            "measures": list(self.TRANSFER["measures"]),
            "depth": self.TRANSFER["depth"],
            "scale": self.SCALE,
            "scale_note": self.C["tables"].get("scale_note"),
        }

    def transfer_table_inputs(self):
        """The table's inputs: the scores (in ``transfer_cells`` order), each collection's
        conversion report (its counts) and each built one's notes (in collection order)."""
        names = list(self.TRANSFER_COLLECTIONS)
        return {
            "scores": self.transfer_score_files(),
            "reports": [self.transfer_file(c, "report.json") for c in names],
            "notes": [n for n in map(self.transfer_notes, names) if n],
        }

    # --------------------------------------------------------------------------- checks
    def check(self):
        """A run or measure the table cannot have, a collection folder without its files, a
        builder key on a folder: named at load, before any job runs."""
        super().check()
        from drpipe.irmetrics import parse_measures

        t = self.TRANSFER
        try:
            measures = parse_measures(t["measures"])
        except ValueError as err:
            raise ConfigError(f"key transfer.measures: {err}") from None
        for name, m in zip(t["measures"], measures, strict=True):
            cutoff = (getattr(m, "params", None) or {}).get("cutoff")
            if cutoff is not None and cutoff > t["depth"]:
                raise ConfigError(f"key transfer.measures: {name} reads deeper than "
                                  f"transfer.depth = {t['depth']}")  # fmt: skip
        for i, e in enumerate(t["collections"]):
            where = f"transfer.collections[{i}] ({e['name']})"
            if [x["name"] for x in t["collections"]].count(e["name"]) > 1:
                raise ConfigError(f"key {where}: a second collection named {e['name']!r}")
            if "build" in e:
                self.transfer_build_args(e["name"])
                self.transfer_build_source(e["name"])
                if "split" in e:
                    raise ConfigError(f"key {where}.split: a built collection has one split")
                continue
            extra = sorted(set(e) & set(BUILDER_KEYS["squad_dev"]))
            if extra:
                raise ConfigError(f"key {where}: {extra} are a builder's keys, not a folder's")
            for path in self.transfer_beir_files(e["name"]).values():
                if not (self.workdir / path).is_file():
                    raise ConfigError(
                        f"key {where}.folder: no {path} (a BEIR folder holds corpus.jsonl, "
                        "queries.jsonl and qrels/<split>.tsv)"
                    )
        self.TRANSFER_RUNS  # noqa: B018 - an unknown run is an error now, not in a job
