"""Precision of forward-only passes (fp32 | bf16 | int8 | auto): each path encodes real SQuAD
passages and questions with the real packaged MiniLM, the low-precision vectors agree with fp32
within stated cosines, ``auto`` resolves by the CPU's flags (faked here), and the precision that
ran reaches the reports and Table 2's notes."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch
from test_retrieve import packaged_model_dir, squad_passages_and_questions
from test_tables import ROW_MAP, metric, run_cli

from drpipe import precision
from drpipe.encode import encode_queries, encode_shard
from drpipe.encoders import to_device
from drpipe.errors import InputError
from drpipe.io import write_parquet
from drpipe.papers import table2
from drpipe.precision import (
    AUTO_PATHS,
    AUTO_RULES,
    PRECISIONS,
    cpu_has_fast_bf16,
    cpu_kind,
    resolve_precision,
)

# The agreement the paths promise against fp32 on real passages (MiniLM, mean pooling).
# Measured on these 48 passages and 24 questions: bf16 autocast min 0.99998; int8 through ONNX
# Runtime (dynamic, per-channel weights) min 0.989 / 0.990, mean 0.994 (passages / questions);
# PyTorch's int8 min 0.970, mean 0.981, which this bound would reject.
MIN_COS = {"bf16": 0.999, "int8": 0.98}
MEAN_COS = {"bf16": 0.9999, "int8": 0.99}
ENC = {"batch_size": 16, "block_size": 64}

FLAGS = {
    "amx": {"avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8"},
    "avx512_bf16": {"avx2", "avx512f", "avx512_vnni", "avx512_bf16"},
    "vnni": {"avx2", "avx512f", "avx512_vnni"},
    "avx_vnni": {"avx2", "avx_vnni"},
    "avx512": {"avx2", "fma", "avx512f"},
    "avx2": {"avx2", "fma"},
    "arm": {"asimd"},
}


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


# ---- auto, by (faked) CPU flags


@pytest.mark.parametrize(
    ("cpu", "path", "wide_path", "kind"),
    [("amx", "bf16", "bf16", "amx"), ("avx512_bf16", "bf16", "bf16", "avx512_bf16"),
     ("vnni", "fp32", "int8", "vnni"), ("avx_vnni", "fp32", "fp32", "avx_vnni"),
     ("avx2", "fp32", "int8", "x86"), ("avx512", "fp32", "int8", "x86"), ("arm", "fp32", "fp32", "other")],
)  # fmt: skip
def test_auto_resolves_by_cpu_flags(cpu, path, wide_path, kind, monkeypatch):
    got = resolve_precision("auto", "cpu", flags=FLAGS[cpu])
    assert (got.path, got.setting) == (path, "auto")
    assert f"kind {kind}" in got.reason
    # The same answer as the training's bf16 "auto" gives on that CPU (one rule for both).
    assert (got.path == "bf16") == cpu_has_fast_bf16(FLAGS[cpu])
    # A caller that admits int8 gets it where the CPU's rule ranks it first, and only with
    # ONNX Runtime (PyTorch's int8 is outside the accuracy bound).
    wide = resolve_precision("auto", "cpu", flags=FLAGS[cpu], allowed=("int8", *AUTO_PATHS))
    assert wide.path == wide_path
    if wide_path == "int8":  # the weights' width follows the CPU: 7 bits without VNNI
        assert wide.int8_bits == (8 if cpu == "vnni" else 7)
    monkeypatch.setattr(precision, "has_onnxruntime", lambda: False)
    narrow = resolve_precision("auto", "cpu", flags=FLAGS[cpu], allowed=("int8", *AUTO_PATHS))
    assert narrow.path == path


def test_auto_reads_this_machines_flags_and_fakes_reach_it(monkeypatch):
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset(FLAGS["amx"]))
    assert resolve_precision("auto", "cpu").path == "bf16"
    assert precision.use_bf16("auto", "cpu") is True
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset(FLAGS["avx2"]))
    assert resolve_precision("auto", "cpu").path == "fp32"
    assert precision.use_bf16("auto", "cpu") is False


def test_auto_rules_are_well_formed():
    assert set(AUTO_PATHS) <= set(PRECISIONS) and "fp32" in AUTO_PATHS
    for _, _, ranked in AUTO_RULES:
        assert ranked and set(ranked) <= set(PRECISIONS)
    assert AUTO_RULES[-1][1] == ()  # the last rule takes every CPU
    assert cpu_kind(set())[0] == "other"
    # int8 (ONNX Runtime) is fastest on avx512_bf16 CPUs in steady state, but not in the
    # pipeline at mini (per-job export): bf16 first there. Where bf16 is slow it is the fastest
    # path, but its accuracy sits on the bound: `auto` does not take it unasked.
    assert cpu_kind(FLAGS["avx512_bf16"])[1][0] == "bf16"
    assert cpu_kind(FLAGS["vnni"])[1][0] == cpu_kind(FLAGS["avx2"])[1][0] == "int8"
    assert "int8" not in AUTO_PATHS


def test_explicit_settings_and_errors(monkeypatch):
    for p in PRECISIONS:
        got = resolve_precision(p, "cpu", flags=set())
        assert (got.path, got.reason) == (p, "as configured")
    with pytest.raises(ValueError, match="precision must be one of"):
        resolve_precision("fp16", "cpu")
    with pytest.raises(ValueError, match="int8 .* CPUs only"):
        resolve_precision("int8", "cuda")
    # The CUDA path: bf16 autocast where the GPU has it (checked without a GPU).
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert resolve_precision("auto", "cuda:0").path == "bf16"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert resolve_precision("auto", "cuda:0").path == "fp32"


def test_batches_stay_put_on_a_cpu():
    batch = {"input_ids": torch.ones(2, 3, dtype=torch.long)}
    moved = to_device(batch, torch.device("cpu"))
    assert moved["input_ids"] is batch["input_ids"]  # no copy, no pinning without CUDA


@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16])
def test_a_half_precision_checkpoint_loads_as_fp32_weights(tmp_path, half):
    # transformers 5 keeps a checkpoint's dtype by default: an fp16/bf16 init would otherwise
    # train and "fp32"-encode in half precision (seen with an fp16 copy of MiniLM, issue 20).
    from tiny_models import save_tiny_bert
    from transformers import AutoModel

    from drpipe.encoders import BiEncoder

    path = tmp_path / "tiny"
    save_tiny_bert(path, ["who wrote the book", "a passage about the book"])
    AutoModel.from_pretrained(path).to(half).save_pretrained(path)
    stored = AutoModel.from_pretrained(path, dtype=half).state_dict()
    bi = BiEncoder.from_init(str(path), pooling="mean")
    got = bi.query.model.state_dict()
    floats = {k: v.dtype for k, v in got.items() if v.is_floating_point()}
    assert floats and set(floats.values()) == {torch.float32}, floats
    for k, v in stored.items():  # the upcast is exact
        assert torch.equal(got[k], v.float() if v.is_floating_point() else v), k


def test_bad_precision_in_cfg_names_the_key(corpus, tiny_model, tmp_path):
    model_dir, bi = tiny_model
    with pytest.raises(SystemExit, match="precision must be one of"):
        encode_shard(model_dir, corpus / "passages.parquet", 0, 1, tmp_path / "x.npy",
                     {**ENC, "precision": "half"}, model=bi)  # fmt: skip


# ---- every path on real passages and questions, with the real MiniLM


@pytest.fixture(scope="module")
def squad_dev(data_mirror):
    import gzip

    with gzip.open(data_mirror / "squad" / "squad-dev-v1.1.reconstructed.json.gz", "rt") as fh:
        return json.load(fh)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("model")
    return path, packaged_model_dir(path)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, corpus):
    """A random 2-layer BERT (hidden 32) of the corpus's words: for what int8's settings and
    builds do, not for accuracy (an ONNX build in a tenth of the two-layer MiniLM's time)."""
    from tiny_models import save_tiny_bert

    rows = pq.read_table(corpus / "passages.parquet").to_pylist()
    init = save_tiny_bert(tmp_path_factory.mktemp("tiny_bert"),
                          [t for r in rows for t in (r["title"], r["text"])])  # fmt: skip
    path = tmp_path_factory.mktemp("tiny_model")
    return path, packaged_model_dir(path, init)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, squad_dev):
    d = tmp_path_factory.mktemp("corpus")
    passages, questions = squad_passages_and_questions(squad_dev, 2, 24)
    write_parquet(d / "passages.parquet", passages.slice(0, 48))
    write_parquet(d / "questions.parquet", questions)
    return d


@pytest.fixture(scope="module")
def encoded(corpus, model, tmp_path_factory):
    """Corpus and question vectors and reports of every path (forced on this CPU)."""
    model_dir, bi = model
    out = tmp_path_factory.mktemp("enc")
    got = {}
    for p in PRECISIONS:
        rep = encode_shard(model_dir, corpus / "passages.parquet", 0, 1, out / f"{p}.npy",
                           {**ENC, "precision": p}, model=bi)  # fmt: skip
        qrep = encode_queries(model_dir, corpus / "questions.parquet", out / f"q-{p}.npy",
                              {"batch_size": 16, "precision": p}, model=bi)  # fmt: skip
        got[p] = (np.load(out / f"{p}.npy"), rep, np.load(out / f"q-{p}.npy"), qrep)
    return got


def test_each_path_encodes_real_passages_and_says_so(encoded):
    n = encoded["fp32"][0].shape[0]
    assert n == 48
    for p, (vecs, rep, qvecs, qrep) in encoded.items():
        assert vecs.shape == (n, 384) and np.isfinite(vecs).all()
        assert qvecs.shape == (24, 384) and np.isfinite(qvecs).all()
        for r in (rep, qrep):
            assert (r["precision"], r["precision_setting"], r["precision_reason"]) == (
                p, p, "as configured",
            )  # fmt: skip
            # int8's numbers are its implementation's: the report names it
            assert ("precision_backend" in r) == (p == "int8")
            assert p != "int8" or r["precision_backend"].startswith("onnxruntime ")


@pytest.mark.parametrize("path", ["bf16", "int8"])
def test_low_precision_vectors_agree_with_fp32(encoded, path):
    ref, _, qref, _ = encoded["fp32"]
    vecs, _, qvecs, _ = encoded[path]
    for a, b in ((ref, vecs), (qref, qvecs)):
        cos = cosines(a, b)
        assert cos.min() >= MIN_COS[path], (path, cos.min())
        assert cos.mean() >= MEAN_COS[path], (path, cos.mean())
    assert not np.array_equal(ref, vecs)  # the path really ran differently


@pytest.mark.parametrize("cpu", FLAGS)
def test_int8_weights_are_7_bit_only_on_x86_without_vnni(cpu):
    from drpipe.precision import saturates

    flags = frozenset({"asimd"} if cpu == "arm" else FLAGS[cpu])
    assert saturates(flags) == (cpu in ("avx2", "avx512"))


def test_int8_with_7_bit_weights_stays_within_the_cosine_bound(corpus, model, encoded, tmp_path,
                                                               monkeypatch):  # fmt: skip
    """The weights an x86 CPU without VNNI gets (this CPU computes them without saturating,
    so this measures their rounding alone) keep the int8 bound on the same real passages."""
    model_dir, bi = model
    monkeypatch.setattr(precision, "reduce_range", lambda: True)
    rep = encode_shard(model_dir, corpus / "passages.parquet", 0, 1, tmp_path / "v.npy",
                       {**ENC, "precision": "int8"}, model=bi)  # fmt: skip
    assert rep["precision_backend"].endswith("7-bit weights (x86 without VNNI)")
    cos = cosines(encoded["fp32"][0], np.load(tmp_path / "v.npy"))
    assert cos.min() >= MIN_COS["int8"] and cos.mean() >= MEAN_COS["int8"], (cos.min(), cos.mean())


@pytest.mark.parametrize("cpu", ["vnni", "avx2"])
def test_int8_weight_bits_resolve_by_cpu_and_setting(cpu):
    # auto: 7 where u8 x s8 products saturate (x86 without VNNI), 8 elsewhere; 7 or 8 as set.
    for setting, bits in (("auto", 7 if cpu == "avx2" else 8), ("7", 7), (8, 8)):
        got = resolve_precision("int8", "cpu", flags=FLAGS[cpu], int8_bits=setting)
        assert got.int8_bits == bits
        assert got.label == ("int8 (7-bit weights)" if bits == 7 else "int8")
    # other paths carry no width, but a bad one is refused whatever the path
    assert resolve_precision("fp32", "cpu", flags=FLAGS[cpu], int8_bits=7).int8_bits is None
    with pytest.raises(ValueError, match="int8_weight_bits must be one of auto, 7, 8, not 6"):
        resolve_precision("fp32", "cpu", int8_bits=6)


def test_int8_backend_names_a_width_that_is_not_this_cpus(monkeypatch):
    for native, bits, says in (
        (False, 8, None),
        (False, 7, "7-bit weights (as configured; this CPU has VNNI)"),
        (True, 7, "7-bit weights (x86 without VNNI)"),
        (True, 8, "8-bit weights (as configured; products can saturate on this CPU)"),
    ):
        monkeypatch.setattr(precision, "reduce_range", lambda native=native: native)
        name = precision.int8_backend(bits)
        assert name.startswith("onnxruntime ") and (says is None) == ("," not in name)
        assert says is None or name.endswith(says), name


def test_configured_7_bit_weights_are_what_auto_picks_without_vnni(corpus, tiny_model, tmp_path,
                                                                   monkeypatch):  # fmt: skip
    """``int8_weight_bits: 7`` on this CPU gives exactly the vectors this CPU gives when it is
    taken for one without VNNI (7 bits by ``auto``): the width is the setting's whole effect.
    (A CPU without VNNI also runs other kernels, whose vectors differ slightly: that is
    measured under ``benchmarks/emulate_cpu.py``, tests/test_emulate_cpu.py.) Their reports and
    Table 2's precision say 7-bit apart from 8-bit int8."""
    from drpipe.tables.precision import report_precision

    model_dir, bi = tiny_model
    cfg = {**ENC, "precision": "int8"}
    paths = {k: tmp_path / f"{k}.npy" for k in ("seven", "eight", "native7")}
    seven = encode_shard(model_dir, corpus / "passages.parquet", 0, 1, paths["seven"],
                         {**cfg, "int8_weight_bits": 7}, model=bi)  # fmt: skip
    eight = encode_shard(model_dir, corpus / "passages.parquet", 0, 1, paths["eight"],
                         {**cfg, "int8_weight_bits": 8}, model=bi)  # fmt: skip
    monkeypatch.setattr(precision, "reduce_range", lambda: True)
    native = encode_shard(model_dir, corpus / "passages.parquet", 0, 1, paths["native7"], cfg,
                          model=bi)  # fmt: skip
    a, b, c = (np.load(paths[k]) for k in ("seven", "eight", "native7"))
    assert np.array_equal(a, c) and not np.array_equal(a, b)
    assert "7-bit weights" in seven["precision_backend"]
    assert "7-bit weights (x86 without VNNI)" in native["precision_backend"]
    assert [report_precision(r) for r in (seven, eight, native)] == [
        "int8 (7-bit weights)", "int8", "int8 (7-bit weights)",
    ]  # fmt: skip
    with pytest.raises(SystemExit, match="int8_weight_bits must be one of"):
        encode_shard(model_dir, corpus / "passages.parquet", 0, 1, tmp_path / "x.npy",
                     {**cfg, "int8_weight_bits": 6}, model=bi)  # fmt: skip


def test_int8_quantizes_a_copy_and_leaves_the_model_alone(tiny_model, monkeypatch):
    from torch.ao.nn.quantized.dynamic import Linear as QLinear

    from drpipe import quantize

    _, bi = tiny_model
    q = bi.for_inference("int8")
    assert q is not bi and q.tied and q.query is q.passage and q.method == bi.method
    assert isinstance(q.query.model, quantize.OnnxInt8)  # ONNX Runtime is installed
    assert precision.int8_backend().startswith("onnxruntime ")
    assert not any(isinstance(m, QLinear) for m in bi.query.modules())
    assert bi.for_inference("bf16") is bi and bi.for_inference("fp32") is bi
    # Without ONNX Runtime: PyTorch's quantization, and the reports say so.
    # (the quantizer's choice and the report's record of it each ask, in their own module)
    monkeypatch.setattr(quantize, "has_onnxruntime", lambda: False)
    monkeypatch.setattr(precision, "has_onnxruntime", lambda: False)
    q = bi.for_inference("int8")
    assert any(isinstance(m, QLinear) for m in q.query.modules())
    assert precision.int8_backend().startswith("torch ")
    assert resolve_precision("int8", "cpu").report()["precision_backend"].startswith("torch ")


def test_onnx_int8_is_fixed_to_the_inputs_of_its_first_batch(tiny_model):
    from drpipe.quantize import OnnxInt8

    _, bi = tiny_model  # a BERT as MiniLM is, hidden size 32
    q = OnnxInt8(bi.query.model, ("last_hidden_state",))
    batch = bi.tokenize_queries(["who wrote it?", "where is the tower?"])
    out = q(**batch, return_dict=True).last_hidden_state  # non-tensor keywords are ignored
    assert out.shape == (2, batch["input_ids"].shape[1], 32) and out.dtype == torch.float32
    with pytest.raises(ValueError, match="built for inputs"):
        q(input_ids=batch["input_ids"])


def test_auto_on_a_faked_cpu_is_recorded_with_its_reason(corpus, tiny_model, tmp_path, monkeypatch):
    model_dir, bi = tiny_model
    small = tmp_path / "small.parquet"
    write_parquet(small, pq.read_table(corpus / "passages.parquet").slice(0, 4))
    for cpu, path in (("amx", "bf16"), ("avx2", "fp32"), ("arm", "fp32")):
        monkeypatch.setattr(precision, "cpu_flags", lambda cpu=cpu: frozenset(FLAGS[cpu]))
        rep = encode_shard(model_dir, small, 0, 1, tmp_path / f"{cpu}.npy",
                           {**ENC, "precision": "auto"}, model=bi)  # fmt: skip
        assert rep["precision"] == path and rep["precision_setting"] == "auto"
        assert "auto on a CPU of kind" in rep["precision_reason"]


# ---- Table 2: the precision of each row, beside it


def _reports(tmp_path, training: str, shards: list[str], queries: str) -> dict:
    (tmp_path / "emb").mkdir(exist_ok=True)
    files = {"training": tmp_path / "train.report.json", "queries": tmp_path / "q.report.json"}
    files["training"].write_text(json.dumps({"precision": training, "precision_setting": "auto"}))
    files["queries"].write_text(
        json.dumps({"precision": queries, "precision_setting": "auto",
                    "precision_reason": "auto on a CPU of kind amx (flags: amx_bf16)"})
    )  # fmt: skip
    shard_files = []
    for i, p in enumerate(shards):
        shard_files.append(tmp_path / "emb" / f"shard-{i}.report.json")
        shard_files[-1].write_text(json.dumps({"bf16": p == "bf16"}))  # an older report
    sources = {"training": [str(files["training"])], "corpus": str(tmp_path / "emb"),
               "queries": [str(files["queries"])]}  # fmt: skip
    return {"sources": sources, "files": [str(f) for f in (*files.values(), *shard_files)]}


def test_table2_names_each_rows_training_and_encoding_precision(tmp_path):
    rep = _reports(tmp_path, "bf16", ["bf16", "bf16"], "bf16")
    runs = [metric("bm25", None), metric("dpr", "squad"), metric("dpr+bm25", "squad")]
    paths = []
    for i, m in enumerate(runs):
        paths.append(tmp_path / f"m{i}.json")
        paths[-1].write_text(json.dumps(m))
    precision = {f"{run}|squad|squad": rep["sources"] for run in ("dpr", "dpr+bm25")}
    row_map = {k: v for k, v in ROW_MAP.items() if k != "init"}
    setup = {"encoder": "packaged:x", "training": {"dpr": {"epochs": 1, "batch_size": 16}}}
    cfg = {"scale": "mini", "row_map": row_map, "setup": setup, "precision": precision}
    out, md = tmp_path / "t.csv", tmp_path / "t.md"
    argv = ["tables", "table2", "--metrics", *map(str, paths), "--reports", *rep["files"],
            "--out", str(out), "--md", str(md), "--cfg", json.dumps(cfg)]  # fmt: skip
    assert run_cli(argv) == 0
    frame = pd.read_csv(out, keep_default_na=False).set_index("method")
    assert frame.loc["DPR", "precision"] == "training bf16, encoding bf16"
    assert frame.loc["BM25+DPR", "precision"] == "training bf16, encoding bf16"
    assert frame.loc["BM25", "precision"] == ""
    assert "precision" in frame.loc["DPR", "notes"].split("; ")
    assert "precision" not in frame.loc["BM25", "notes"].split("; ")
    text = md.read_text()
    assert "precision: training bf16, encoding bf16" in text
    assert "- **precision**:" in text and "Training here: bf16 (encoder.bf16: auto)" in text
    assert "auto on a CPU of kind amx" in text


def test_table2_precision_that_differs_between_shards_reads_both(tmp_path):
    rep = _reports(tmp_path, "fp32", ["bf16", "fp32"], "fp32")
    from drpipe.tables.precision import read_precision

    cells = read_precision({"dpr|squad|squad": rep["sources"]}, rep["files"])
    frame = table2.table2([metric("dpr", "squad")], "mini", {"dpr": {"method": "DPR"}},
                          precision=cells)  # fmt: skip
    assert frame.loc[0, "precision"] == (
        "training fp32, corpus encoding bf16/fp32, question encoding fp32"
    )
    with pytest.raises(InputError, match="training report of this Table 2 cell"):
        read_precision({"dpr|squad|squad": rep["sources"]}, rep["files"][1:])
