"""DPR's released checkpoints evaluated without training (drpipe.released): tiny DPR-shaped
checkpoints written here in both released layouts (Hugging Face DPR encoders, DPR's own .cp)
load into model directories that encode exactly as the checkpoints' own models do."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from tiny_models import save_tiny_bert

from drpipe.encoders import BiEncoder
from drpipe.errors import InputError
from drpipe.released import released_model
from drpipe.standins import make_standin

QUESTIONS = ["who sings does he love me with reba", "when was the erie canal built"]
PASSAGES = [
    ("Does He Love You", "a song written by Sandy Knox and Billy Stritch, recorded by Reba"),
    ("Erie Canal", "The Erie Canal is a canal in New York, completed in 1825."),
]
LENS = {"max_query_len": 32, "max_passage_len": 64}


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    texts = QUESTIONS + [f"{t} {x}" for t, x in PASSAGES]
    return Path(save_tiny_bert(tmp_path_factory.mktemp("bert") / "bert", texts, 128))


def _make(kind: str, base: Path, out: Path, **cfg) -> Path:
    make_standin(kind, {"base": [base]}, out, cfg)
    return out


def _ours(model_dir: Path) -> tuple[torch.Tensor, torch.Tensor]:
    model = BiEncoder.load(model_dir).eval()
    with torch.inference_mode():
        q = model.query(model.tokenize_queries(QUESTIONS))
        p = model.passage(model.tokenize_passages(*zip(*PASSAGES, strict=True)))
    return q, p


def test_hf_layout_encodes_as_the_dpr_encoders(base: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer, DPRContextEncoder, DPRQuestionEncoder

    q_dir = _make("dpr_hf", base, tmp_path / "q", encoder="question", seed=1)
    c_dir = _make("dpr_hf", base, tmp_path / "c", encoder="ctx", seed=2)
    cfg = {"layout": "hf", "question_encoder": str(q_dir), "ctx_encoder": str(c_dir), **LENS}
    report = released_model(tmp_path / "m", cfg)
    assert report["trained_here"] is False and report["meta"]["pooling"] == "cls"
    q, p = _ours(tmp_path / "m")

    tok = AutoTokenizer.from_pretrained(q_dir)
    with torch.inference_mode():
        ref_q = (
            DPRQuestionEncoder.from_pretrained(q_dir)
            .eval()(**tok(QUESTIONS, padding=True, return_tensors="pt"))
            .pooler_output
        )
        batch = tok(*map(list, zip(*PASSAGES, strict=True)), padding=True, return_tensors="pt")
        batch["token_type_ids"] = torch.zeros_like(batch["token_type_ids"])  # as DPR
        ref_p = DPRContextEncoder.from_pretrained(c_dir).eval()(**batch).pooler_output
    torch.testing.assert_close(q, ref_q)
    torch.testing.assert_close(p, ref_p)
    assert not torch.allclose(q[:, :4], p[:, :4])  # two encoders, not one


def test_cp_layout_encodes_as_its_state_dict(base: Path, tmp_path: Path) -> None:
    from transformers import BertConfig, BertModel, BertTokenizerFast

    cp = _make(
        "dpr_cp", base, tmp_path / "hf_bert_base.cp", pretrained_model_cfg="bert-base-uncased"
    )
    cfg = {"layout": "dpr_cp", "base": "bert-base-uncased", "base_path": str(base), **LENS}
    report = released_model(tmp_path / "m", cfg, str(cp))
    assert report["encoder_params"]["pretrained_model_cfg"] == "bert-base-uncased"
    q, p = _ours(tmp_path / "m")

    # DPR's HFBertEncoder: the [CLS] state of a BertModel holding question_model.* weights.
    state = torch.load(cp, weights_only=True)["model_dict"]
    tok = BertTokenizerFast.from_pretrained(base)
    for prefix, ours, texts in (("question_model.", q, [QUESTIONS]),
                                ("ctx_model.", p, list(map(list, zip(*PASSAGES, strict=True))))):  # fmt: skip
        bert = BertModel(BertConfig.from_pretrained(base)).eval()
        bert.load_state_dict(
            {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
        )
        batch = tok(*texts, padding=True, return_tensors="pt")
        batch["token_type_ids"] = torch.zeros_like(batch["token_type_ids"])
        with torch.inference_mode():
            torch.testing.assert_close(ours, bert(**batch).last_hidden_state[:, 0])


def test_cp_built_on_another_model_is_refused(base: Path, tmp_path: Path) -> None:
    cp = _make("dpr_cp", base, tmp_path / "x.cp", pretrained_model_cfg="roberta-base")
    cfg = {"layout": "dpr_cp", "base": "bert-base-uncased", "base_path": str(base), **LENS}
    with pytest.raises(InputError, match=re.escape("built on 'roberta-base'")):
        released_model(tmp_path / "m", cfg, str(cp))
    assert not (tmp_path / "m").exists()


def test_cp_with_foreign_or_missing_weights_is_refused(base: Path, tmp_path: Path) -> None:
    cp = _make("dpr_cp", base, tmp_path / "x.cp", pretrained_model_cfg="bert-base-uncased")
    cfg = {"layout": "dpr_cp", "base": "bert-base-uncased", "base_path": str(base), **LENS}
    state = torch.load(cp, weights_only=True)
    state["model_dict"]["question_model.encode_proj.weight"] = torch.zeros(4, 32)
    torch.save(state, tmp_path / "proj.cp")
    with pytest.raises(InputError, match="unexpected.*encode_proj"):
        released_model(tmp_path / "m", cfg, str(tmp_path / "proj.cp"))
    del state["model_dict"]["question_model.encode_proj.weight"]
    del state["model_dict"]["ctx_model.encoder.layer.0.attention.self.query.weight"]
    torch.save(state, tmp_path / "missing.cp")
    with pytest.raises(InputError, match="missing.*layer.0.attention.self.query.weight"):
        released_model(tmp_path / "m", cfg, str(tmp_path / "missing.cp"))
    (tmp_path / "junk.cp").write_bytes(b"not a checkpoint")
    with pytest.raises(InputError, match="not a readable DPR checkpoint"):
        released_model(tmp_path / "m", cfg, str(tmp_path / "junk.cp"))


def test_table2_puts_the_papers_dpr_numbers_beside_released_rows() -> None:
    from drpipe.papers.table2 import table2

    metrics = [
        {"method": m, "train_set": ts, "dataset": "nq", "split": "test", "n_questions": 10,
         "top_k": {"1": 10.0, "5": 20.0, "20": 30.0, "100": 40.0}}
        for m, ts in (("dpr", "nq"), ("dpr.released", "nq"), ("dpr.released", "multi"))
    ]  # fmt: skip
    row_map = {
        "dpr": {"method": "DPR", "paper": "dpr"},
        "dpr.released": {"method": "DPR (released checkpoint)", "paper": "dpr",
                         "paper_method": "DPR"},
    }  # fmt: skip
    frame = table2(metrics, "paper", row_map, train_sets={"nq": ["nq"], "multi": ["nq", "wq"]})
    rows = {(r["training"], r["method"]): r for _, r in frame.iterrows()}
    single, released = rows["Single", "DPR"], rows["Single", "DPR (released checkpoint)"]
    assert released["nq_top20_paper"] == single["nq_top20_paper"] == 78.4  # DPR Table 2
    assert rows["Multi", "DPR (released checkpoint)"]["nq_top20_paper"] == 79.4
