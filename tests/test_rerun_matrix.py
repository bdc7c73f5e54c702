"""What a config change reruns: for each setting, the rules a dry run plans after changing it.

The finished run asked is the shared tiny run's DAG (tiny_run.OVERLAY) touched, not run
(workflow_util.touched_run: every job marked done with Snakemake's own metadata, in seconds);
test_workflow_e2e.py checks that the real tiny run plans the same jobs.
"""

from __future__ import annotations

from functools import reduce
from pathlib import Path

import pytest
from tiny_run import OVERLAY
from workflow_util import planned_jobs

from drpipe.config import deep_merge

TARGETS = ("all", "results/dpr/table3.csv", "results/dpr/figure1.png")


@pytest.fixture(scope="module")
def run_dir(tiny_touched_run) -> Path:
    return tiny_touched_run


def _rules(jobs):
    return {rule for rule, _ in jobs}


# Settings that change no result: a dry run after changing one plans nothing at all.
NO_RESULT_CHANGE = {
    "encode.batch_size": {"encode": {"shards": 2, "batch_size": 7}},
    "encode.block_size": {"encode": {"shards": 2, "batch_size": 32, "block_size": 33}},
    "retrieve.batch_size": {"retrieve": {"top_k": 100, "batch_size": 9}},
    "methods.dpr.checkpoint_every": {"methods": {"dpr": {**OVERLAY["methods"]["dpr"],
                                                         "checkpoint_every": 5}}},
    "threads": {"threads": 1},
    "corpus.wiki_processes": {"corpus": {**OVERLAY["corpus"], "wiki_processes": 1}},
    "corpus.sentences.batch_size": {"corpus": {**OVERLAY["corpus"], "sentences": {
        "splitter": "dcsr", "model": None, "batch_size": 17}}},
    "index.hnsw (index type flat)": {"index": {"hnsw": {"m": 16, "ef_construction": 40,
                                                        "ef_search": 16}}},
    "a source's note": {"sources": {"enwiki_tables": {"note": "edited"}}},
    # int8's weight width, where no pass runs int8 (`auto` never picks it)
    "encode.int8_weight_bits (precision auto)": {"encode": {"shards": 2, "batch_size": 32,
                                                            "int8_weight_bits": 7}},
    "reader.int8_weight_bits (precision auto)": {"reader": {**OVERLAY["reader"],
                                                            "int8_weight_bits": 7}},
    # The transfer table is a target of its own: its block reruns nothing of the others.
    "transfer": {"transfer": {"collections": [], "runs": ["bm25"], "measures": ["RR@10"],
                              "depth": 50}},
    # The seeds are targets of their own (make seeds): other seeds, or other claims tested
    # over them, rerun nothing of the others.
    "seeds.extra, seeds.claims": {"seeds": {"extra": [21, 22],
                                            "claims": ["dpr_t2_hybrid_beats_dpr_on_squad"]}},
    # Own claims change only the claims table (make audit's, not among these targets).
    "own_claims": {"own_claims": [{"id": "own_bm25_beats_dpr", "sentence": "BM25 wins.",
                                   "scope": {"dataset": "squad"}, "a": {"run": "bm25"},
                                   "b": {"method": "dpr"}, "metric": "top20",
                                   "expect": "greater"}]},
}  # fmt: skip


def _changes(base, patch, path=()):
    """The leaves ``patch`` sets to other values than ``base`` has: {path: value}."""
    out = {}
    for key, value in patch.items():
        old = base.get(key) if isinstance(base, dict) else None
        if isinstance(value, dict) and isinstance(old, dict):
            out |= _changes(old, value, (*path, key))
        elif value != old:
            out[(*path, key)] = value
    return out


def test_settings_that_change_no_result_rerun_nothing(run_dir):
    """Every such setting changed at once, in one dry run (each costs seconds); where it plans
    anything, each setting alone names which did it."""
    changes: dict = {}
    for name, patch in NO_RESULT_CHANGE.items():
        changed = _changes(OVERLAY, patch)
        assert changed, f"{name} changes nothing"
        for path, value in changed.items():
            assert changes.setdefault(path, value) == value, f"{name} clashes at {path}"
    overlay = OVERLAY
    for path, value in changes.items():
        overlay = deep_merge(overlay, reduce(lambda v, k: {k: v}, reversed(path), value))
    jobs = planned_jobs(run_dir, *TARGETS, overlay=overlay)
    if jobs:
        culprits = {name: sorted(planned_jobs(run_dir, *TARGETS, overlay={**OVERLAY, **patch}))
                    for name, patch in NO_RESULT_CHANGE.items()}  # fmt: skip
        pytest.fail(f"planned {sorted(jobs)[:5]}; by setting: "
                    f"{ {k: v[:3] for k, v in culprits.items() if v} }")  # fmt: skip


# AOpt starts from DPR's vectors and runs: whatever reruns DPR's vectors reruns AOpt.
AOPT_RULES = {"aopt_passage_round", "aopt_linear", "aopt_query_round", "aopt_index",
              "aopt_retrieve", "aopt_evaluate", "aopt_grid", "aopt_figure6", "aopt_figure7",
              "aopt_table3"}  # fmt: skip
DENSE_RULES = {"train", "encode", "encode_queries", "build_index", "retrieve", "hybrid",
               "evaluate", "export_trec", "table2", "table2_curves", "table3", "figure1",
               "provenance", "all"} | AOPT_RULES  # fmt: skip
TABLES = {"table2", "table2_curves", "table3", "figure1", "provenance", "all"}
# BM25 searches: the BM25 retriever's runs, the mining candidates, the hybrid's candidates.
BM25_SEARCHES = {"bm25_search", "bm25_mining_search", "bm25_hybrid_search"}
# What a deeper hybrid candidate search may rerun on the retriever side.
HYBRID_DEPTH_RULES = {"bm25_hybrid_search", "hybrid", "evaluate", "export_trec", "table2",
                      "table2_curves", "provenance"}  # fmt: skip
# Setting -> (rules that must run, rules that may run); anything else planned is a bug.
RESULT_CHANGE = {
    "hybrid.grid": (
        {"hybrid": {**OVERLAY["hybrid"], "grid": [1.0, 30.0]}},
        {"hybrid", "evaluate", "table2"},
        {"hybrid", "evaluate", "export_trec", *TABLES},
    ),
    "evaluate.ks": (
        {"evaluate": {"ks": [1, 5, 20, 50, 100]}},
        {"evaluate", "table2"},
        # The hybrid averages ks when tuning its weight; AOpt evaluates its rounds.
        {"evaluate", "hybrid", "export_trec", *TABLES, *AOPT_RULES},
    ),
    "encode.dtype": (
        {"encode": {"shards": 2, "batch_size": 32, "dtype": "float16"}},
        {"encode", "build_index", "retrieve", "evaluate", "table2"},
        DENSE_RULES - {"train", "encode_queries"},
    ),
    "index.type": (
        {"index": {"type": "hnsw", "hnsw": {"m": 16, "ef_construction": 40, "ef_search": 32}}},
        {"build_index", "retrieve", "evaluate", "table2"},
        DENSE_RULES - {"train", "encode", "encode_queries"},
    ),
    "encoder.max_query_len": (
        {"encoder": {**OVERLAY["encoder"], "max_query_len": 24}},
        {"init_model", "train", "encode", "encode_queries", "retrieve", "evaluate", "table2"},
        DENSE_RULES | {"init_model"},
    ),
    # The passages' token ids are keyed by tokenizer, maximum length and format: another
    # maximum passage length tokenizes once more (shared by every run), a query length never.
    "encoder.max_passage_len": (
        {"encoder": {**OVERLAY["encoder"], "max_passage_len": 80}},
        {"tokenize", "init_model", "train", "encode", "retrieve", "evaluate", "table2"},
        DENSE_RULES | {"init_model", "tokenize"},
    ),
    "bm25.b": (
        {"bm25": {"k1": 0.9, "b": 0.5, "hits": 100, "java": None}},
        {*BM25_SEARCHES, "mine", "train", "evaluate", "table2"},
        DENSE_RULES | BM25_SEARCHES | {"mine"},
    ),
    "mining.hard_negatives": (
        {"mining": {**OVERLAY["mining"], "hard_negatives": 3}},
        {"mine", "train", "evaluate", "table2"},
        DENSE_RULES | {"mine"},
    ),
    # Each BM25 search is as deep as its one use: a depth reruns that use and what follows it.
    # Mining's depth reruns mining, training and everything after (the hybrid too, as its
    # models change), never the other searches ...
    "mining.depth": (
        {"mining": {**OVERLAY["mining"], "depth": 50}},
        {"bm25_mining_search", "mine", "train", "hybrid", "evaluate", "table2"},
        DENSE_RULES | {"bm25_mining_search", "mine"},
    ),
    # ... the hybrid's depth reruns its own candidate searches and the hybrid, never mining or
    # training ...
    "hybrid.depth": (
        {"hybrid": {**OVERLAY["hybrid"], "depth": 60}},
        {"bm25_hybrid_search", "hybrid", "evaluate", "table2", "provenance"},
        HYBRID_DEPTH_RULES,
    ),
    # ... a fixed weight instead of a tuned one reruns the hybrid alone (the deeper BM25 run of
    # the training questions it tuned on is no longer read) ...
    "hybrid.lambda (tune -> 1.1)": (
        {"hybrid": {**OVERLAY["hybrid"], "lambda": 1.1}},
        {"hybrid", "evaluate", "table2", "provenance"},
        {"hybrid", "evaluate", "export_trec", "table2", "table2_curves", "provenance"},
    ),
    # ... and the BM25 retriever's own depth reruns its rows (Table 2, DPR Figure 1).
    "bm25.hits": (
        {"bm25": {"k1": 0.9, "b": 0.4, "hits": 150, "java": None}},
        {"bm25_search", "evaluate", "table2", "figure1", "provenance"},
        {"bm25_search", "evaluate", "table2", "table2_curves", "figure1", "provenance"},
    ),
    # A round's epochs (AOpt: one, the paper's reading) rerun every round and what reads them.
    "aopt.epochs_per_round": (
        {"aopt": {**OVERLAY["aopt"], "epochs_per_round": 2}},
        {"aopt_passage_round", "aopt_query_round"},
        AOPT_RULES - {"aopt_linear", "aopt_grid", "aopt_figure6"}
        | {"export_trec", "table2", "table2_curves", "provenance", "all"},
    ),
    "tables.split (same data, renamed tables)": (
        {"tables": {**OVERLAY["tables"], "datasets": ["squad"], "single": {"squad": "squad"}}},
        set(),
        TABLES,
    ),
}


@pytest.mark.parametrize("name", list(RESULT_CHANGE))
def test_result_changing_settings_rerun_exactly_their_steps(run_dir, name):
    patch, required, allowed = RESULT_CHANGE[name]
    rules = _rules(planned_jobs(run_dir, *TARGETS, overlay={**OVERLAY, **patch}))
    assert required <= rules, (name, sorted(rules))
    assert rules <= allowed, (name, sorted(rules - allowed))


# Table 4 (the reader over every Table 2 row): a reader setting reruns the reader's steps from
# the first one that reads it, never a retriever's; a retriever's setting reruns what reads its
# passages. The touched run holds Table 4 (tiny_run.TARGETS).
READER_TARGETS = (*TARGETS, "results/table4.csv")
# The warm start trains with the reader's settings (lr, batch) too; its data does not.
READER_RULES = {"reader_warm_start", "reader_train", "reader_score", "reader_choose_k", "read",
                "table4"}  # fmt: skip
READER_CHANGE = {
    # Table 4's k view is a target of its own (results/table4-k.csv): Table 4 reruns nothing.
    "reader.k_view": (
        {"reader": {**OVERLAY["reader"], "k_view": {"ks": [1, 2], "runs": None, "sample": None}}},
        set(),
        set(),
    ),
    "reader.ks": (
        {"reader": {**OVERLAY["reader"], "ks": [1, 3]}},
        {"reader_score", "reader_choose_k", "read", "table4"},
        {"reader_score", "reader_choose_k", "read", "table4"},
    ),
    "reader.precision": (
        {"reader": {**OVERLAY["reader"], "precision": "int8"}},
        {"reader_score", "reader_choose_k", "read", "table4"},
        {"reader_score", "reader_choose_k", "read", "table4"},
    ),
    "reader.lr": (
        {"reader": {**OVERLAY["reader"], "lr": 1.0e-4}},
        READER_RULES,
        READER_RULES,
    ),
    "hybrid.depth (with Table 4)": (
        {"hybrid": {**OVERLAY["hybrid"], "depth": 60}},
        {"bm25_hybrid_search", "hybrid", "reader_score", "read", "table4"},
        HYBRID_DEPTH_RULES | READER_RULES - {"reader_warm_start", "reader_train"},
    ),
}


@pytest.mark.parametrize("name", list(READER_CHANGE))
def test_reader_settings_rerun_exactly_the_readers_steps(run_dir, name):
    patch, required, allowed = READER_CHANGE[name]
    rules = _rules(planned_jobs(run_dir, *READER_TARGETS, overlay={**OVERLAY, **patch}))
    assert required <= rules, (name, sorted(rules))
    assert rules <= allowed, (name, sorted(rules - allowed))
