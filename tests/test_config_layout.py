"""The config's layout (config.yaml, config/sources.yaml, config/scales/<scale>.yaml), the
cross-key rules checked at load, and `drpipe config show` (no Snakemake run here)."""

from __future__ import annotations

import copy
import io
import shutil
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import yaml
from workflow_util import REPO

from drpipe.cli import main
from drpipe.config import (
    SCALES_DIR,
    ConfigError,
    complete,
    deep_merge,
    load_workflow_config,
    read_defaults,
    resolve,
    untag,
)
from drpipe.config_show import explained
from drpipe.tables import compare
from drpipe.tables.notes import note_keys, setup_notes

SCHEMA = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
RAW = read_defaults(REPO)
SCALES = sorted(p.stem for p in (REPO / SCALES_DIR).glob("*.yaml"))


def test_a_scale_is_its_file_and_the_catalogue_its_own_file():
    assert SCALES == ["mini", "paper", "rehearsal", "squad"]
    own = yaml.safe_load((REPO / "config.yaml").read_text())
    assert "scales" not in own and "sources" not in own  # the user's file: shared knobs only
    assert RAW["sources"] == yaml.safe_load((REPO / "config/sources.yaml").read_text())
    assert RAW["scales"]["rehearsal"]["extends"] == "paper"
    for scale in SCALES:
        assert load_workflow_config(REPO, {"scale": scale})["scale"] == scale
    assert "enum" not in SCHEMA["properties"]["scale"]  # no list of scale names anywhere


def test_an_unknown_scale_lists_the_scale_files():
    with pytest.raises(ConfigError) as err:
        load_workflow_config(REPO, {"scale": "huge"})
    text = str(err.value)
    assert "config/scales/huge.yaml" in text
    assert all(f"config/scales/{s}.yaml" in text for s in SCALES)


def _copy_config(dest: Path) -> Path:
    """The config of the checkout (config.yaml, config/, the schema) under ``dest``."""
    shutil.copy2(REPO / "config.yaml", dest / "config.yaml")
    shutil.copytree(REPO / "config", dest / "config")
    (dest / "workflow/schemas").mkdir(parents=True)
    shutil.copy2(REPO / "workflow/schemas/config.schema.yaml", dest / "workflow/schemas")
    return dest


def test_a_new_scale_file_is_a_scale_and_users_scales_keys_still_apply(tmp_path):
    root = _copy_config(tmp_path)
    (root / "config/scales/big.yaml").write_text("extends: squad\nencode: {shards: 9}\n")
    cfg = load_workflow_config(root, {"scale": "big"})
    assert cfg["scale"] == "big" and cfg["encode"]["shards"] == 9
    assert cfg["qa"]["squad"]["train"]["sample"] == 5000  # squad's overlay, extended
    # A --configfile's `scales:` key still overlays a scale (file or not).
    user = tmp_path / "mine.yaml"
    user.write_text(yaml.safe_dump({"scales": {"big": {"encode": {"shards": 5}}}}))
    assert load_workflow_config(root, {"scale": "big"}, [user])["encode"]["shards"] == 5
    cfg = resolve(RAW, SCHEMA, {"scale": "squad"}, user_files=[{"scales": {"squad": {
        "encode": {"shards": 6}}}}])  # fmt: skip
    assert cfg["encode"]["shards"] == 6
    (root / "config/scales/bad-name.yaml").write_text("{}\n")
    with pytest.raises(ConfigError, match="plain identifier"):
        load_workflow_config(root)


def test_every_scale_resolves_as_the_tagged_tree_says():
    """`drpipe config show` merges the same layers as the workflow: its values are the config."""
    for scale in SCALES:
        config, tagged = explained(REPO, {"scale": scale})
        assert untag(tagged) == config, scale


def test_defaults_a_dataset_need_not_spell_out():
    raw = deep_merge(RAW, {"qa": {"mine": {"train": {"source": "squad_train", "format": "squad"},
                                           "test": {"source": "dpr_squad_test"}}},
                           "tables": {"datasets": ["squad", "mine"]}})  # fmt: skip
    cfg = resolve(raw, SCHEMA)
    assert cfg["qa"]["mine"]["test"] == {"source": "dpr_squad_test", "format": "auto",
                                         "sample": None, "restrict_to_corpus": False}  # fmt: skip
    assert cfg["train_sets"]["mine"] == ["mine"] and cfg["tables"]["single"]["mine"] == "mine"
    # Nothing is derived for the shipped scales: their config is what the files say.
    for scale in SCALES:
        cfg = resolve(RAW, SCHEMA, {"scale": scale})
        assert complete(cfg) == cfg


# ------------------------------------------------------------------------- cross-key rules

XQ = {"qa": {"xq": {"test": {"source": "dpr_squad_test"}}}}


@pytest.mark.parametrize(
    ("patch", "scale", "message"),
    [
        ({"evaluate": {"ks": [1, 10, 500]}}, "mini",
         r"key evaluate\.ks: .*top-500 is deeper than retrieve\.top_k = 100"),
        ({"qa": {"squad": {"test": {"source": "nope"}}}}, "mini",
         r"key qa\.squad\.test\.source: 'nope' is not a configured source"),
        ({"corpus": {"documents": [{"name": "d", "kind": "squad", "source": "nope"}]}}, "mini",
         r"key corpus\.documents\[0\]\.source: 'nope'"),
        ({"standins": {"sources": {"nope": {"kind": "qa_csv", "inputs": {}}}}}, "mini",
         r"key standins\.sources\.nope"),
        ({"qa": {"squad": {"test": {"match": "regex"}}}}, "mini",
         r"key qa\.squad: its splits match answers differently"),
        ({"sources": {"odd": {"mirror": "odd/questions.json"}},
          "qa": {"squad": {"test": {"format": "auto", "source": "odd"}}}}, "mini",
         r"key qa\.squad\.test\.format: 'auto' cannot tell the format of questions\.json"),
        ({"tables": {"single": {"squad": "nope"}}}, "mini",
         r"key tables\.single\.squad: 'nope' is not a train set"),
        ({"tables": {"table3": {"train_set": "nope"}}}, "mini",
         r"key tables\.table3\.train_set: 'nope' is not a train set"),
        ({"tables": {"datasets": ["squad", "ghost"]}}, "mini",
         r"key tables\.datasets: 'ghost' has no qa\.ghost\.test"),
        ({"train_sets": {"g": ["ghost"]}, "tables": {"single": {"squad": "g"}}}, "mini",
         r"key train_sets\.g: dataset 'ghost' has no training examples"),
        ({"hybrid": {"lambda": "tune"}}, "paper",
         r"key hybrid\.lambda: hybrid\.lambda 'tune' .* dev_examples files"),
        ({"train_examples": {"squad": "dpr_squad_train"}}, "mini",
         r"key hybrid\.lambda: .*train_examples\.squad is a released file"),
        ({"reader": {"multi_finetune": {"nq": "nq"}}}, "paper",
         r"key reader\.multi_finetune\.nq: names the dataset itself"),
        ({"reader": {"warm_start": {"source": "squad_train", "articles": 4, "questions": 10,
                                    "passages": 2, "epochs": 1}}}, "squad",
         r"key reader\.warm_start: .*corpus\.documents 'squad_train' takes all of them"),
        ({"aopt": {"datasets": ["squad", "ghost"]}}, "mini",
         r"key aopt\.datasets\[1\]: 'ghost' has no train set in tables\.single"),
        ({**XQ, "tables": {"single": {"xq": "squad"}}, "aopt": {"datasets": ["squad", "xq"]}},
         "mini", r"key aopt\.datasets: \['squad', 'xq'\] share the Single train set 'squad'"),
        ({"tables": {"dcsr": {"table3": {"datasets": ["ghost"]}}}}, "mini",
         r"key tables\.dcsr\.table3\.datasets\[0\]: dataset 'ghost' has no train set"),
    ],
)  # fmt: skip
def test_a_cross_key_problem_names_the_key_at_load(patch, scale, message):
    with pytest.raises(ConfigError, match=message):
        resolve(RAW, SCHEMA, {"scale": scale}, user_files=[patch])


def test_every_cross_key_problem_is_reported_at_once():
    patch = {"evaluate": {"ks": [1, 1000]}, "tables": {"single": {"squad": "nope"}}}
    with pytest.raises(ConfigError) as err:
        resolve(RAW, SCHEMA, user_files=[patch])
    assert "key evaluate.ks" in str(err.value) and "key tables.single.squad" in str(err.value)


def test_rules_judge_the_chosen_scale_only():
    # A user file written for mini (a warm start beside the squad corpus's every article) is no
    # error at mini, whatever the squad scale would make of it.
    ws = {"source": "squad_train", "articles": 4, "questions": 10, "passages": 2, "epochs": 1}
    assert resolve(RAW, SCHEMA, user_files=[{"reader": {"warm_start": ws}}])["scale"] == "mini"


# ------------------------------------------------------------------------ drpipe config show


def _show(*args: str) -> str:
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["config", "show", "--root", str(REPO), *args]) == 0
    return out.getvalue()


def test_config_show_names_the_layer_of_each_value(tmp_path):
    user = tmp_path / "mine.yaml"
    user.write_text("encoder: {max_query_len: 48}\n")
    text = _show("--scale", "paper", "--configfile", str(user), "--config", "seed=7",
                 "--key", "encoder", "--key", "seed", "--key", "sources.squad_dev")  # fmt: skip
    lines = text.splitlines()
    assert "  init: bert-base-uncased  # config/scales/paper.yaml" in lines
    assert "  tied: false  # config.yaml" in lines
    assert f"  max_query_len: 48  # --configfile {user}" in lines
    assert "seed: 7  # --config" in lines
    assert "    mirror: squad/squad-dev-v1.1.reconstructed.json.gz  # config/sources.yaml" in lines
    assert yaml.safe_load(text)["encoder"]["init"] == "bert-base-uncased"  # YAML as it reads


def test_config_show_of_a_run_names_the_config_key_behind_each_setting():
    text = _show("--scale", "paper", "--run", "dpr.f1_n1000", "--train-set", "wq")
    lines = text.splitlines()
    assert "epochs: 100  # methods.dpr.epochs_by_train_set.wq, config/scales/paper.yaml" in lines
    assert any(ln.startswith("max_examples: 1000  # methods.dpr.variants.f1_n1000.overrides")
               for ln in lines)  # fmt: skip
    assert "init: bert-base-uncased  # encoder.init, config/scales/paper.yaml" in lines
    assert "seed: 13  # seed, config.yaml" in lines


def test_config_show_reports_a_config_error(capsys):
    assert main(["config", "show", "--root", str(REPO), "--scale", "huge"]) == 2
    assert "config/scales/mini.yaml" in capsys.readouterr().err


# ------------------------------------------------------------- what the tables say per scale


@pytest.mark.parametrize(
    ("scale", "cfg"),
    [
        ("mini", {"scale": "mini"}),  # the defaults: a table's params do not change
        ("squad", {"scale": "squad"}),
        ("paper", {"scale": "paper", "paper_diff": True, "scale_note": None}),
        ("rehearsal", {"scale": "rehearsal", "paper_diff": True, "scale_note": "standin"}),
    ],
)
def test_table_behaviour_comes_from_the_overlay_keys(scale, cfg):
    resolved = resolve(RAW, SCHEMA, {"scale": scale})
    assert compare.scale_cfg(resolved) == cfg
    s = compare.scale_of(cfg)
    assert s == scale and s.paper_diff == (scale in ("paper", "rehearsal"))
    assert ("scale" in note_keys([], s)) == (scale != "paper")


def test_a_renamed_scale_behaves_as_its_keys_say():
    s = compare.Scale("cluster", paper_diff=True, note="standin")
    text = setup_notes({"encoder": "x"}, s)["scale"]
    assert text.startswith("Scale `cluster`: the paper scale's DAG on stand-in inputs")
    assert "differences mean nothing" in compare.comparison_note(s)
    assert "not printed" in compare.comparison_note(compare.Scale("paper"))  # a plain name
    assert copy.deepcopy(s).note == "standin"
