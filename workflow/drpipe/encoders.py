"""Bi-encoders: Hugging Face transformers with pooling, the on-disk model layout, and encoding.

A model directory holds ``query/`` and ``passage/`` (each ``save_pretrained`` of the encoder
plus its tokenizer, loadable with ``transformers.AutoModel.from_pretrained``; a method's
special tokens are in the tokenizer and the resized embeddings) and ``drpipe_encoder.json``:
pooling, tied, the maximum query and passage lengths (the one place encoding and retrieval read
them from), and the method that trained it (name and its cfg), which says how the model is
used: which corpus units get vectors and how retrieved units become passages; and how text
becomes a vector (``drpipe.encoder_settings``): pooling (cls | mean | max), normalize, the query
and passage prefixes, and how a title joins its text. Queries are tokenised alone; passages by
default as the pair (title, text), i.e. ``[CLS] title [SEP] text [SEP]`` as in DPR, or as one
text ``title + title_sep + text`` (``title: concat``). A model directory saved before these
settings loads with the defaults (no normalisation, no prefixes, the pair).

Which precision a pass runs at is ``drpipe.precision``'s to decide; here it runs: bf16 by
``autocast``, int8 by ``BiEncoder.for_inference`` (``drpipe.quantize``).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from drpipe.encoder_settings import (  # noqa: F401 (resolve_init: imported from here too)
    META_DEFAULTS,
    PACKAGED_PREFIX,
    POOLINGS,
    TEXT_DEFAULTS,
    resolve_init,
    resolve_pooling,
)
from drpipe.errors import InputError
from drpipe.io import progress
from drpipe.quantize import quantize_int8

log = logging.getLogger(__name__)

META_FILE = "drpipe_encoder.json"
HIDDEN = ("last_hidden_state",)  # what an encoder's int8 copy returns (Encoder.hidden_states)
# Config attributes that hold dropout probabilities across HF architectures.
DROPOUT_ATTRS = (
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "dropout",
    "attention_dropout",
)


def select_device() -> torch.device:
    """CUDA (the local rank's GPU under torchrun) when available, else CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return torch.device("cpu")


def autocast(device: torch.device, enabled: bool):
    """bf16 autocast context for ``device`` (a no-op context when disabled)."""
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=enabled)


@dataclass(frozen=True)
class TextFormat:
    """What an encoder is fed: prefixes before questions and passages, and how a passage's
    title joins its text (``pair`` | ``concat`` with ``title_sep`` | ``none``)."""

    query_prefix: str = TEXT_DEFAULTS["query_prefix"]
    passage_prefix: str = TEXT_DEFAULTS["passage_prefix"]
    title: str = TEXT_DEFAULTS["title"]
    title_sep: str = TEXT_DEFAULTS["title_sep"]

    def __post_init__(self):
        if self.title not in ("pair", "concat", "none"):
            raise ValueError(f"title must be pair, concat or none, not {self.title!r}")

    @classmethod
    def of(cls, settings: dict[str, Any]) -> TextFormat:
        """From a cfg or meta dict (missing keys: the defaults)."""
        return cls(**{k: settings.get(k, v) for k, v in TEXT_DEFAULTS.items()})


class Encoder(nn.Module):
    """A transformer encoder whose output is one vector per input ("cls", "mean" or "max"
    pooling; unit length with ``normalize``)."""

    def __init__(self, model: nn.Module, pooling: str = "cls", normalize: bool = False):
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, not {pooling!r}")
        self.model = model
        self.pooling = pooling
        self.normalize = bool(normalize)

    @classmethod
    def from_pretrained(
        cls,
        path: str,
        pooling: str = "cls",
        dropout: float | None = None,
        grad_checkpointing: bool = False,
        normalize: bool = False,
    ) -> Encoder:
        # lazy: transformers costs ~1 s; the methods (and so the Snakefile) import this module
        from transformers import AutoConfig, AutoModel

        config = AutoConfig.from_pretrained(path)
        if dropout is not None:
            for attr in DROPOUT_ATTRS:
                if hasattr(config, attr):
                    setattr(config, attr, float(dropout))
        # fp32 master weights whatever the checkpoint stores: transformers 5 loads a half-
        # precision checkpoint as half (dtype "auto"), which would train and encode in fp16/bf16
        # without autocast (and without the fp32 path). Upcasting after loading is exact.
        model = AutoModel.from_pretrained(path, config=config).float()
        enc = cls(model, pooling, normalize)
        if grad_checkpointing:
            enc.enable_grad_checkpointing()
        return enc

    def enable_grad_checkpointing(self) -> None:
        # Non-reentrant checkpointing works when one module is used twice per step (tied).
        self.model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": False}
        )

    def hidden_states(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Last-layer token states [batch, seq, dim] (DCSR reads its <sent> positions here)."""
        return self.model(**batch).last_hidden_state

    def pool(self, states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        if self.pooling == "cls":
            return states[:, 0]
        if self.pooling == "max":  # over the real tokens (padding never wins)
            pad = attention_mask.unsqueeze(-1) == 0
            return states.masked_fill(pad, torch.finfo(states.dtype).min).max(1).values
        mask = attention_mask.unsqueeze(-1).to(states.dtype)
        return (states * mask).sum(1) / mask.sum(1).clamp(min=1.0)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        vecs = self.pool(self.hidden_states(batch), batch["attention_mask"])
        # In fp32 under bf16 autocast too (a unit vector's norm is then 1 to fp32's precision).
        return nn.functional.normalize(vecs.float(), dim=-1) if self.normalize else vecs


def tokenize_queries(
    tokenizer, questions: Sequence[str], max_length: int, fmt: TextFormat | None = None
) -> dict[str, torch.Tensor]:
    """Each question alone, after ``fmt``'s query prefix."""
    prefix = fmt.query_prefix if fmt is not None else ""
    return tokenizer(
        [prefix + q for q in questions],
        truncation=True,
        max_length=max_length,
        padding=True,
        return_tensors="pt",
    )


def passage_inputs(
    titles: Sequence[str], texts: Sequence[str], fmt: TextFormat | None = None
) -> tuple[list[str], list[str] | None]:
    """The tokenizer's (first, second) inputs of passages under ``fmt``: (prefix + title, text)
    as a pair, else one text per passage (second None)."""
    fmt = fmt or TextFormat()
    if fmt.title == "pair":
        return [fmt.passage_prefix + (t or "") for t in titles], list(texts)
    if fmt.title == "concat":
        joined = [f"{t}{fmt.title_sep}{x}" if t else x for t, x in zip(titles, texts, strict=True)]
        return [fmt.passage_prefix + j for j in joined], None
    return [fmt.passage_prefix + x for x in texts], None


def tokenize_passages(
    tokenizer,
    titles: Sequence[str],
    texts: Sequence[str],
    max_length: int,
    fmt: TextFormat | None = None,
) -> dict[str, torch.Tensor]:
    """``[CLS] title [SEP] text [SEP]``, truncated to ``max_length`` (the text loses tokens first);
    with ``fmt`` (``TextFormat``) its passage prefix before the title, or one text per passage
    (``title: concat`` or ``none``).

    Segment ids are all 0, as in DPR's code (its encoders are called with zero segments):
    the [SEP] alone marks the title, and an encoder pretrained on single segments (such as
    all-MiniLM-L6-v2) is not fed a segment embedding it never learned.
    """
    first, second = passage_inputs(titles, texts, fmt)
    batch = tokenizer(
        *((first,) if second is None else (first, second)),
        truncation="longest_first",
        max_length=max_length,
        padding=True,
        return_tensors="pt",
    )
    if "token_type_ids" in batch:
        batch["token_type_ids"] = torch.zeros_like(batch["token_type_ids"])
    return batch


class BiEncoder(nn.Module):
    """Question and passage encoders (one shared module when ``tied``) and their tokenizer."""

    def __init__(
        self,
        query: Encoder,
        passage: Encoder | None,
        tokenizer,
        *,
        max_query_len: int = 64,
        max_passage_len: int = 256,
        init: str | None = None,
        text: TextFormat | None = None,
    ):
        super().__init__()
        self.query = query
        self.tied = passage is None or passage is query
        self.passage = query if self.tied else passage
        self.tokenizer = tokenizer
        self.max_query_len = max_query_len
        self.max_passage_len = max_passage_len
        self.init = init
        self.text = text or TextFormat()
        # {"name": method, "cfg": its keys}; models saved before methods were recorded: DPR.
        self.method: dict[str, Any] = {"name": "dpr", "cfg": {}}

    @property
    def pooling(self) -> str:
        return self.query.pooling

    @property
    def normalize(self) -> bool:
        return self.query.normalize

    @classmethod
    def from_init(
        cls,
        init: str,
        pooling: str = "cls",
        tied: bool = False,
        dropout: float | None = None,
        *,
        max_query_len: int = 64,
        max_passage_len: int = 256,
        grad_checkpointing: bool = False,
        add_tokens: Sequence[str] = (),
        normalize: bool | None = None,
        text: TextFormat | None = None,
    ) -> BiEncoder:
        """Build from a pretrained model (``init`` as in config; ``add_tokens``: e.g. ``<sent>``;
        ``pooling`` ``auto`` and ``normalize`` None: drpipe.encoder_settings.resolve_pooling)."""
        from transformers import AutoTokenizer  # lazy: ~1 s, see Encoder.from_pretrained

        where = "config key encoder.init (or methods.<method>.init)"
        try:
            path = resolve_init(init)
            tokenizer = AutoTokenizer.from_pretrained(path)
        except (OSError, ValueError) as exc:
            # Offline, an unknown hub id ends deep inside transformers: name the key instead.
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise InputError(init, None, f"cannot load this encoder ({where}): {first}") from None
        try:
            pooling, normalize = resolve_pooling(path, pooling, normalize)
        except (OSError, ValueError) as exc:
            raise InputError(init, None, f"encoder pooling ({where}): {exc}") from None
        if add_tokens:
            tokenizer.add_special_tokens({"additional_special_tokens": list(add_tokens)})

        def build() -> Encoder:
            enc = Encoder.from_pretrained(path, pooling, dropout, grad_checkpointing, normalize)
            if add_tokens:
                enc.model.resize_token_embeddings(len(tokenizer))
            return enc

        query = build()
        passage = None if tied else build()
        return cls(
            query,
            passage,
            tokenizer,
            max_query_len=max_query_len,
            max_passage_len=max_passage_len,
            init=init,
            text=text,
        )

    def meta(self) -> dict[str, Any]:
        return {
            "pooling": self.pooling,
            "tied": self.tied,
            "max_query_len": self.max_query_len,
            "max_passage_len": self.max_passage_len,
            "init": self.init,
            "method": self.method,
            "normalize": self.normalize,
            **asdict(self.text),
        }

    def save(self, directory: str | Path) -> None:
        """Write ``query/``, ``passage/`` and ``drpipe_encoder.json`` into ``directory``."""
        directory = Path(directory)
        for name, enc in (("query", self.query), ("passage", self.passage)):
            enc.model.save_pretrained(directory / name)
            self.tokenizer.save_pretrained(directory / name)
        (directory / META_FILE).write_text(json.dumps(self.meta(), indent=2, sort_keys=True) + "\n")

    @staticmethod
    def read_meta(directory: str | Path) -> dict[str, Any]:
        """``drpipe_encoder.json`` of a model directory (no weights are loaded)."""
        meta_path = Path(directory) / META_FILE
        if not meta_path.is_file():
            raise FileNotFoundError(f"{directory} is not a drpipe model directory (no {META_FILE})")
        meta = json.loads(meta_path.read_text())
        meta.setdefault("method", {"name": "dpr", "cfg": {}})
        for key, value in META_DEFAULTS.items():  # saved before the key existed: as then
            meta.setdefault(key, value)
        return meta

    @classmethod
    def load(
        cls,
        directory: str | Path,
        *,
        dropout: float | None = None,
        grad_checkpointing: bool = False,
    ) -> BiEncoder:
        from transformers import AutoTokenizer  # lazy: ~1 s, see Encoder.from_pretrained

        directory = Path(directory)
        meta = cls.read_meta(directory)
        tokenizer = AutoTokenizer.from_pretrained(directory / "query")
        norm = bool(meta["normalize"])
        query = Encoder.from_pretrained(
            str(directory / "query"), meta["pooling"], dropout, grad_checkpointing, norm
        )
        passage = None
        if not meta["tied"]:
            passage = Encoder.from_pretrained(
                str(directory / "passage"), meta["pooling"], dropout, grad_checkpointing, norm
            )
        model = cls(
            query,
            passage,
            tokenizer,
            max_query_len=int(meta["max_query_len"]),
            max_passage_len=int(meta["max_passage_len"]),
            init=meta.get("init"),
            text=TextFormat.of(meta),
        )
        model.method = meta.get("method") or model.method
        return model

    def for_inference(self, precision: str, int8_bits: int | None = None) -> BiEncoder:
        """This model as a forward pass of ``precision`` runs it: itself for fp32 and bf16
        (autocast is applied around the pass), an int8-quantized copy for int8 (ties kept;
        this model is left as it is; ``int8_bits`` as ``drpipe.quantize.quantize_int8``)."""
        if precision != "int8":
            return self
        return self.with_models(lambda model: quantize_int8(model, HIDDEN, int8_bits))

    def with_models(self, convert: Callable[[nn.Module], nn.Module]) -> BiEncoder:
        """A copy whose encoders run ``convert`` of their Hugging Face models (ties kept)."""
        query = Encoder(convert(self.query.model), self.pooling, self.normalize)
        passage = (
            None
            if self.tied
            else Encoder(convert(self.passage.model), self.pooling, self.normalize)
        )
        out = BiEncoder(query, passage, self.tokenizer, max_query_len=self.max_query_len,
                        max_passage_len=self.max_passage_len, init=self.init,
                        text=self.text)  # fmt: skip
        out.method = self.method
        return out

    def tokenize_queries(self, questions: Sequence[str]) -> dict[str, torch.Tensor]:
        return tokenize_queries(self.tokenizer, questions, self.max_query_len, self.text)

    def tokenize_passages(
        self, titles: Sequence[str], texts: Sequence[str]
    ) -> dict[str, torch.Tensor]:
        return tokenize_passages(self.tokenizer, titles, texts, self.max_passage_len, self.text)


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """A tokenised batch on ``device``: on CUDA through pinned memory, copied asynchronously
    (the copy overlaps the previous batch's compute); on a CPU the tensors themselves."""
    if device.type != "cuda":
        return {k: v.to(device) for k, v in batch.items()}
    return {k: v.pin_memory().to(device, non_blocking=True) for k, v in batch.items()}


def encode_texts(
    encoder: Encoder,
    tokenizer,
    texts: Sequence[str],
    pairs: Sequence[str] | None = None,
    *,
    batch_size: int,
    max_length: int,
    bf16: bool,
    device: torch.device | str,
    show_progress: bool = True,
    fmt: TextFormat | None = None,
) -> np.ndarray:
    """Vectors [len(texts), dim] float32 in input order.

    With ``pairs``, input i is the pair (texts[i], pairs[i]) — for passages: (title, text),
    joined as ``fmt`` (a model's ``TextFormat``: prefixes, title) says; without, questions.
    Inputs are batched in order of length so padding stays small.
    """
    device = torch.device(device)
    n = len(texts)
    if pairs is not None and len(pairs) != n:
        raise ValueError(f"{len(texts)} texts but {len(pairs)} pairs")
    lengths = [len(t) + (len(pairs[i]) if pairs is not None else 0) for i, t in enumerate(texts)]
    order = np.argsort(np.asarray(lengths, dtype=np.int64), kind="stable")
    out: np.ndarray | None = None
    was_training = encoder.training
    encoder.eval()
    bar = progress(total=n, desc="encode", unit="text", disable=not show_progress)
    try:
        with torch.inference_mode(), autocast(device, bf16):
            for start in range(0, n, batch_size):
                idx = order[start : start + batch_size]
                first = [texts[i] for i in idx]
                if pairs is None:
                    batch = tokenize_queries(tokenizer, first, max_length, fmt)
                else:
                    second = [pairs[i] for i in idx]
                    batch = tokenize_passages(tokenizer, first, second, max_length, fmt)
                vecs = encoder(to_device(batch, device)).float().cpu().numpy()
                if out is None:
                    out = np.empty((n, vecs.shape[1]), dtype=np.float32)
                out[idx] = vecs
                bar.update(len(idx))
    finally:
        bar.close()
        encoder.train(was_training)
    if out is None:
        dim = getattr(encoder.model.config, "hidden_size", 0)
        out = np.empty((0, dim), dtype=np.float32)
    return out
