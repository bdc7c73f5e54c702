"""Released DPR checkpoints as model directories (``drpipe released-model``): DPR's encoders
evaluated without training (run ``dpr.released``; Table 2 rows "DPR (released checkpoint)").

Two layouts:

- ``hf``: Hugging Face ``DPRQuestionEncoder`` / ``DPRContextEncoder`` checkpoints (hub ids such
  as ``facebook/dpr-question_encoder-single-nq-base``, or their directories). The BERT inside
  each (``question_encoder.bert_model`` / ``ctx_encoder.bert_model``) becomes our ``query/`` and
  ``passage/`` encoders.
- ``dpr_cp``: DPR's original checkpoint file (``dpr/utils/model_utils.py``: ``torch.save`` of
  ``CheckpointState._asdict()``, i.e. ``model_dict``, ``optimizer_dict``, ``scheduler_dict``,
  ``offset``, ``epoch``, ``encoder_params``). ``model_dict`` holds DPR's BiEncoder:
  ``question_model.*`` and ``ctx_model.*``, each an ``HFBertEncoder`` (a ``BertModel``, pooler
  included, plus ``encode_proj`` when ``projection_dim`` > 0). Its BERT config and tokenizer
  are those of ``encoder_params.pretrained_model_cfg`` (``bert-base-uncased``), which the
  config names as ``base`` and this module checks. DCSR's released checkpoints use this layout.

DPR reads a question or passage as the [CLS] state of the last layer (no projection in the
released models), with zero segment ids and passages as the pair (title, text): our ``cls``
pooling and tokenisation (``drpipe.encoders``). A projection layer is refused, never dropped.
The file is read with ``torch.load(weights_only=True)``: tensors and plain values only, no
code from the file runs.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from drpipe.cliutil import add_cfg, need
from drpipe.errors import InputError
from drpipe.io import atomic_path, write_json

log = logging.getLogger(__name__)

LAYOUTS = ("hf", "dpr_cp")
CP_KEYS = ("model_dict", "optimizer_dict", "scheduler_dict", "offset", "epoch", "encoder_params")
CP_PREFIXES = {"query": "question_model.", "passage": "ctx_model."}
# Buffers some transformers versions save and others rebuild: never a weight.
IGNORED = ("embeddings.position_ids",)


def _bert_config(config: Any):
    """A ``BertConfig`` with a DPR (or BERT) config's architecture, for ``AutoModel``."""
    from transformers import BertConfig

    keys = set(BertConfig().to_dict()) - {"architectures", "model_type", "transformers_version"}
    return BertConfig(**{k: v for k, v in config.to_dict().items() if k in keys})


def _as_bert(state: dict[str, Any], config: Any, where: str, pooler: bool):
    """A ``BertModel`` holding ``state`` exactly (every weight used, none missing)."""
    from transformers import BertModel

    bert = BertModel(_bert_config(config), add_pooling_layer=pooler)
    state = {k: v for k, v in state.items() if k not in IGNORED}
    result = bert.load_state_dict(state, strict=False)
    missing = [k for k in result.missing_keys if k not in IGNORED]
    if missing or result.unexpected_keys:
        raise InputError(
            where, None,
            f"weights do not fit a BERT of this config: missing {missing[:5]}, "
            f"unexpected {result.unexpected_keys[:5]}",
        )  # fmt: skip
    return bert


def load_hf(question: str, ctx: str) -> tuple[dict[str, Any], Any, dict[str, Any]]:
    """(BERTs by side, tokenizer, info) of Hugging Face DPR encoders."""
    from transformers import AutoTokenizer, DPRContextEncoder, DPRQuestionEncoder

    berts: dict[str, Any] = {}
    for side, name, cls, attr in (
        ("query", question, DPRQuestionEncoder, "question_encoder"),
        ("passage", ctx, DPRContextEncoder, "ctx_encoder"),
    ):
        try:
            model = cls.from_pretrained(name)
        except (OSError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise InputError(name, None, f"cannot load this {cls.__name__}: {first}") from None
        enc = getattr(model, attr)
        if getattr(enc, "encode_proj", None) is not None:
            raise InputError(name, None, "has a projection layer (projection_dim > 0): "
                             "not DPR's released layout, and our encoders have none")  # fmt: skip
        bert = enc.bert_model
        berts[side] = _as_bert(bert.state_dict(), bert.config, name, pooler=False)
    tok = AutoTokenizer.from_pretrained(question)
    ctx_tok = AutoTokenizer.from_pretrained(ctx)
    if tok.get_vocab() != ctx_tok.get_vocab():
        raise InputError(ctx, None, f"its tokenizer's vocabulary differs from {question}'s")
    return berts, tok, {"question_encoder": question, "ctx_encoder": ctx}


def read_cp(path: str | Path) -> dict[str, Any]:
    """DPR's checkpoint file as its dict, checked for ``CheckpointState``'s fields."""
    import pickle

    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(path, None, f"not a readable DPR checkpoint: {first}") from None
    if not isinstance(state, dict) or "model_dict" not in state:
        raise InputError(path, None, f"no model_dict: not DPR's CheckpointState (fields {CP_KEYS})")
    return state


def load_dpr_cp(
    path: str | Path, base: str, base_path: str | None = None
) -> tuple[dict[str, Any], Any, dict[str, Any]]:
    """(BERTs by side, tokenizer, info) of DPR's checkpoint file on ``base``'s config (read
    from ``base_path`` when given: a local copy or stand-in of that model)."""
    from transformers import AutoConfig, AutoTokenizer

    state = read_cp(path)
    params = state.get("encoder_params") or {}
    named = params.get("pretrained_model_cfg")
    if named is not None and named != base:
        raise InputError(
            path, "encoder_params.pretrained_model_cfg",
            f"the checkpoint was built on {named!r}, the config names base {base!r}",
        )  # fmt: skip
    if int(params.get("projection_dim") or 0) > 0:
        raise InputError(path, "encoder_params.projection_dim", "a projection layer: not "
                         "DPR's released layout, and our encoders have none")  # fmt: skip
    try:
        config = AutoConfig.from_pretrained(base_path or base)
        tok = AutoTokenizer.from_pretrained(base_path or base)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(base, None, f"cannot load the checkpoint's base model: {first}") from None
    model_dict = state["model_dict"]
    berts = {}
    for side, prefix in CP_PREFIXES.items():
        part = {k[len(prefix) :]: v for k, v in model_dict.items() if k.startswith(prefix)}
        if not part:
            raise InputError(path, "model_dict", f"no {prefix}* weights")
        berts[side] = _as_bert(part, config, f"{path} ({prefix}*)", pooler=True)
    other = sorted(k for k in model_dict if not k.startswith(tuple(CP_PREFIXES.values())))
    if other:
        raise InputError(path, "model_dict", f"weights of neither encoder: {other[:5]}")
    info = {
        "checkpoint": str(path),
        "base": base,
        "epoch": state.get("epoch"),
        "encoder_params": {
            k: v for k, v in params.items() if isinstance(v, (str, int, float, bool, type(None)))
        },
    }
    return berts, tok, info


def released_model(out_dir: str | Path, cfg: dict[str, Any], checkpoint: str | None = None) -> dict:
    """Write a released checkpoint as a model directory (``drpipe.encoders`` layout) used the
    way DPR uses its encoders; return the report."""
    from drpipe.encoders import BiEncoder, Encoder

    layout = need(cfg, "layout")
    if layout == "hf":
        berts, tok, info = load_hf(need(cfg, "question_encoder"), need(cfg, "ctx_encoder"))
    elif layout == "dpr_cp":
        if checkpoint is None:
            raise SystemExit("error: layout dpr_cp needs --checkpoint")
        berts, tok, info = load_dpr_cp(checkpoint, need(cfg, "base"), cfg.get("base_path"))
    else:
        raise SystemExit(f"error: unknown layout {layout!r} (expected one of {LAYOUTS})")
    model = BiEncoder(
        Encoder(berts["query"], "cls"),
        Encoder(berts["passage"], "cls"),
        tok,
        max_query_len=int(need(cfg, "max_query_len")),
        max_passage_len=int(need(cfg, "max_passage_len")),
        init=f"released:{layout}",
    )
    model.method = {"name": "dpr", "cfg": {}}
    with atomic_path(out_dir, directory=True) as tmp:
        model.save(tmp)
    n_params = sum(p.numel() for p in model.parameters())
    return {"layout": layout, **info, "parameters": n_params, "meta": model.meta(),
            "trained_here": False}  # fmt: skip


def _cmd_released(args: argparse.Namespace) -> None:
    report = released_model(args.out, args.cfg, args.checkpoint)
    if args.report:
        write_json(args.report, report)
    log.info("released %s checkpoint -> %s", report["layout"], args.out)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "released-model", help="a released DPR checkpoint (hf or .cp) as a model directory"
    )
    p.add_argument("--out", required=True, type=Path, help="model directory to write")
    p.add_argument("--checkpoint", help="DPR .cp file (layout dpr_cp)")
    p.add_argument("--report", type=Path)
    add_cfg(p)
    p.set_defaults(func=_cmd_released)
