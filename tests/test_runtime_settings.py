"""Settings that change no result are declared once (``x-runtime: true`` in the config schema)
and every list of them derives from that mark. test_rerun_matrix.py checks that changing one
reruns nothing; these check the lists themselves."""

from __future__ import annotations

import pytest

from drpipe import encode
from drpipe.config import (
    method_config,
    method_run_options,
    method_runtime_keys,
    result_config,
    runtime_options,
    runtime_settings,
)
from drpipe.methods import method_names
from drpipe.runtime import ANY, runtime_keys, runtime_paths
from drpipe.training import checkpoints, settings

# The lists as they were written out by hand before the mark (behaviour must not change).
CONFIG_PATHS = {
    ("threads",),
    ("resources",),
    ("sources", ANY, "note"),
    ("encode", "batch_size"),
    ("encode", "block_size"),
    ("retrieve", "batch_size"),
    ("corpus", "wiki_processes"),
    ("corpus", "sentences", "batch_size"),
}


def test_the_workflow_schema_marks_the_settings_the_lists_held():
    assert set(runtime_paths()) == CONFIG_PATHS
    method_paths = {
        (*prefix, key)
        for m in method_names()
        for prefix in (("methods", m), ("methods", m, "variants", ANY, "overrides"))
        for key in ("checkpoint_every", "log_every")
    }
    # The full schema adds every method's block (and its variants' overrides); papers add none.
    assert set(runtime_settings()) == CONFIG_PATHS | method_paths


def test_every_list_derives_from_the_mark():
    assert set(method_runtime_keys()) == {"checkpoint_every", "log_every"}
    assert set(settings.RUNTIME_KEYS) == {"checkpoint_every", "log_every", "threads"}
    assert checkpoints.RUNTIME_KEYS is settings.RUNTIME_KEYS
    assert encode.RUNTIME == ("batch_size", "block_size")
    assert runtime_keys("properties", "retrieve") == ("batch_size",)


def test_the_walk_follows_refs_mappings_and_alternatives():
    schema = {
        "$defs": {"leaf": {"type": "object", "properties": {"n": {"x-runtime": True}}}},
        "properties": {
            "a": {"x-runtime": True, "properties": {"inner": {"x-runtime": True}}},
            "b": {"additionalProperties": {"$ref": "#/$defs/leaf"}},
            "c": {"oneOf": [{"type": "null"}, {"properties": {"d": {"x-runtime": True}}}]},
            "e": {"type": "integer"},
        },
    }
    assert runtime_paths(schema) == (("a",), ("b", ANY, "n"), ("c", "d"))
    assert runtime_keys(schema=schema) == ("a",)
    assert runtime_keys("properties", "b", "additionalProperties", schema=schema) == ("n",)


@pytest.fixture(scope="module")
def config():
    """The parts of a resolved config these functions read (no scale files)."""
    return {
        "seed": 1,
        "threads": 2,
        "resources": {"gpus": False},
        "encoder": {"init": "x", "pooling": "mean"},
        "encode": {"shards": 2, "batch_size": 3, "block_size": 4, "dtype": "float32"},
        "retrieve": {"top_k": 5, "batch_size": 6},
        "corpus": {"wiki_processes": 2, "sentences": {"batch_size": 7, "model": None}},
        "sources": {"s": {"url": "u", "note": "n"}},
        "methods": {
            "dpr": {
                "epochs": 1,
                "checkpoint_every": 9,
                "log_every": 8,
                "variants": {"v": {"overrides": {"checkpoint_every": 3, "batch_size": 2}}},
            }
        },
    }


def test_runtime_keys_stay_out_of_the_cfg_and_go_to_the_options(config):
    cfg = method_config(config, "dpr.v")
    assert not {"checkpoint_every", "log_every", "variants"} & set(cfg)
    assert cfg["batch_size"] == 2 and cfg["epochs"] == 1
    assert method_run_options(config, "dpr") == {"checkpoint_every": 9, "log_every": 8}
    assert method_run_options(config, "dpr.v") == {"checkpoint_every": 3, "log_every": 8}


def test_the_provenance_config_drops_exactly_the_marked_settings(config):
    out = result_config(config)
    assert "threads" not in out and "resources" not in out
    assert out["encode"] == {"shards": 2, "dtype": "float32"}
    assert out["retrieve"] == {"top_k": 5}
    assert out["corpus"] == {"sentences": {"model": None}}
    assert out["sources"] == {"s": {"url": "u"}}
    dpr = out["methods"]["dpr"]
    assert "checkpoint_every" not in dpr and "log_every" not in dpr
    assert dpr["variants"]["v"]["overrides"] == {"batch_size": 2}
    assert dpr["lr"] == method_config(config, "dpr")["lr"]  # the class's defaults, recorded
    assert config["methods"]["dpr"]["checkpoint_every"] == 9  # the input is left as it was


def test_a_rule_passes_a_sections_runtime_settings_as_options(config):
    assert runtime_options(config, "encode") == {"batch_size": 3, "block_size": 4}
    assert runtime_options(config, "retrieve") == {"batch_size": 6}
    assert runtime_options(config, "corpus") == {"wiki_processes": 2}
    assert runtime_options(config, "corpus", "sentences") == {"batch_size": 7}
