"""What a retrieval method is: a plug-in to the one training loop, to encoding and to retrieval.

A method is one module in ``drpipe/methods/`` whose ``METHOD`` names a ``Method`` subclass; the
registry is built from the module names (``drpipe.methods.method_names``). The class declares

- ``label``: the row label the papers print ("DPR", "DCSR", "xMoCo");
- ``corpus_units``: which vectors the corpus gets, ``"passages"`` or ``"sentences"``;
- ``hybrid``: whether its tables have a BM25 + method hybrid row;
- ``defaults``: the settings its runs use (shared training keys and its own), which the config
  block ``methods.<name>`` overrides; ``schema``: JSON-schema types of its own keys (class
  attributes; a subclass inherits its parent's and adds its own, see ``cfg_defaults``);
- ``special_tokens``: tokens added to the tokenizer (embeddings resized, saved with the model);
- ``train_corpus``: corpus tables its training reads besides the examples (DCSR:
  ``("passages", "sentences", "sentences_report")``), handed to ``prepare`` before the
  first batch;
- ``extra_measures``: validation measures reported beside the one checkpoints are selected on
  (DCSR: ``passage``, the passage rank beside its paper's sentence rank).

and implements

- ``collate``: training examples -> a batch; ``loss``: the loss over the global batch
  (``train=False`` in validation, which must not change method state);
- ``encode_corpus``: a block of passages -> unit ids and vectors (passages: one vector each);
- ``search_depth`` and ``units_to_passages``: how deep to search and how retrieved units
  become ranked passages (identity for passages).

Stateful methods (xMoCo: slow encoders, queues) keep their state on the method object, never in
the model, so the optimizer never sees it: the loop calls ``attach`` once, ``after_step`` after
every optimizer step, and checkpoints ``state_dict`` (tensors and plain types only).

Unit ids (one scheme for every method, see ``unit_id``): a passage's unit id is its pid; a
sentence's is ``pid * SENT_SLOTS + sentence number``, unique across the corpus as the index's
uniqueness check requires.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from drpipe.lazy import lazy_module

# Re-exported: methods and tests know the unit ids from here.
from drpipe.units import SENT_SLOTS, UNIT_KINDS, unit_id, unit_pid, unit_sentence  # noqa: F401

# torch at first use: the planner reads these classes without it (drpipe.lazy).
torch = lazy_module("torch")
dist = lazy_module("torch.distributed")


@dataclass
class DistContext:
    """Where this process sits in a torch.distributed job (world_size 1: single process)."""

    rank: int = 0
    world_size: int = 1

    def sizes(self, n: int, device: torch.device | None = None) -> list[int]:
        """``n`` of every rank, in rank order."""
        if self.world_size == 1:
            return [n]
        local = torch.tensor([n], dtype=torch.int64, device=device)
        out = [torch.zeros_like(local) for _ in range(self.world_size)]
        dist.all_gather(out, local)
        return [int(t.item()) for t in out]

    def gather(self, t: torch.Tensor) -> torch.Tensor:
        """Concatenate ``t`` of all ranks along dim 0 (sizes may differ), in rank order.

        The local slot is ``t`` itself, so gradients flow back into this rank's tensors; other
        ranks' slots are constants here (their own gradients are computed on their ranks).
        """
        if self.world_size == 1:
            return t
        sizes = self.sizes(t.shape[0], t.device)
        width = max(sizes)
        pad = width - t.shape[0]
        padded = torch.cat([t, t.new_zeros((pad, *t.shape[1:]))]) if pad else t
        bufs = [torch.empty_like(padded) for _ in range(self.world_size)]
        dist.all_gather(bufs, padded.detach().contiguous())
        bufs[self.rank] = padded
        return torch.cat([b[:n] for b, n in zip(bufs, sizes, strict=True)])

    def gather_index(self, index: torch.Tensor, local_count: int) -> torch.Tensor:
        """Gather indices into per-rank lists of ``local_count`` items as global indices."""
        if self.world_size == 1:
            return index
        sizes = self.sizes(local_count, index.device)
        offset = sum(sizes[: self.rank])
        shifted = torch.where(index >= 0, index + offset, index)
        return self.gather(shifted)


@dataclass
class CollateContext:
    """What ``collate`` may use besides the examples themselves."""

    model: Any  # a drpipe.encoders.BiEncoder (tokenisation and max lengths)
    seed: int
    epoch: int
    sample: bool  # True for training (seeded shuffling), False for deterministic validation
    pool: Sequence[dict] = field(default_factory=list)  # all examples of the split (gold negatives)


@dataclass
class CorpusBlock:
    """Consecutive passages of the corpus, with their sentences when the method needs them."""

    pids: np.ndarray  # int64 [n]
    titles: list[str]
    texts: list[str]
    # Per passage, the (start, end) character offsets of its sentences (None for passages).
    sentences: list[list[tuple[int, int]]] | None = None


@dataclass
class EncodeSettings:
    """How to run an encoder over the corpus (none of these change a vector)."""

    batch_size: int
    bf16: bool
    device: Any  # torch.device


class Method(ABC):
    """A retrieval method plugged into training, encoding and retrieval."""

    name: ClassVar[str] = ""
    label: ClassVar[str] = ""
    corpus_units: ClassVar[str] = "passages"
    hybrid: ClassVar[bool] = True
    special_tokens: ClassVar[tuple[str, ...]] = ()
    train_corpus: ClassVar[tuple[str, ...]] = ()  # "passages", "sentences", "sentences_report"
    extra_measures: ClassVar[tuple[str, ...]] = ()  # loss stats <name>_correct, <name>_rank_sum
    # The settings its runs use unless config.yaml's ``methods.<name>`` block says otherwise:
    # shared training keys (the schema's $defs.train_hparams) and its own keys. Every one is
    # written into each run's cfg (hashed, recorded in the model directory). A subclass gets
    # its parent's, then its own (``cfg_defaults``). These: the recipe all three methods
    # here train with (the loop's own defaults, drpipe.training.settings, apply to the rest).
    defaults: ClassVar[dict[str, Any]] = {
        "weight_decay": 0.0,
        "adam_eps": 1e-8,
        "grad_clip": 2.0,
        "dropout": 0.1,
        "val_fraction": 0.1,
        "grad_checkpointing": False,
        "max_examples": None,
    }
    # JSON-schema properties of its own keys. An own key absent from ``defaults`` takes the
    # schema's "default" and stays out of the cfg (fixed switches: adding one later leaves
    # every existing run's cfg as it was).
    schema: ClassVar[dict[str, Any]] = {}

    def __init__(self, cfg: dict[str, Any] | None = None):
        own = self.config_defaults()
        # The training loop passes its whole cfg; a method reads only its own keys.
        self.cfg = {**own, **{k: v for k, v in (cfg or {}).items() if k in own}}

    @classmethod
    def _merged(cls, attr: str) -> dict[str, Any]:
        """``attr`` of the method ancestors, then of this class (a subclass may override)."""
        out: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):
            out.update(vars(klass).get(attr, {}))
        return out

    @classmethod
    def cfg_defaults(cls) -> dict[str, Any]:
        """The settings its runs' cfg gets (``defaults``, inherited), before its config block."""
        return cls._merged("defaults")

    @classmethod
    def config_schema(cls) -> dict[str, Any]:
        """JSON-schema properties of its own keys (same inheritance); each has a default."""
        out = cls._merged("schema")
        defaults = cls.cfg_defaults()
        missing = sorted(k for k, s in out.items() if k not in defaults and "default" not in s)
        if missing:
            raise TypeError(f"method {cls.name!r}: no default for key(s) {', '.join(missing)}")
        return out

    @classmethod
    def config_defaults(cls) -> dict[str, Any]:
        """Its own keys with their defaults (``defaults``, else the schema's "default"): what
        ``drpipe train`` adds to a cfg lacking them. A shared key missing there takes the
        loop's default, so that a cfg given by hand trains as it always did; the workflow's
        (``drpipe.config.method_config``) holds every key of ``cfg_defaults``."""
        defaults = cls.cfg_defaults()
        return {
            k: defaults[k] if k in defaults else s["default"]
            for k, s in cls.config_schema().items()
        }

    # ---- training

    def prepare(self, corpus: dict[str, Any], examples: Sequence[dict]) -> None:
        """Called once before training with the tables named in ``train_corpus`` (name ->
        path) and every training and validation example (DCSR: sentence spans of their
        passages). Default: nothing."""
        return None

    def dropped_examples(self) -> dict[int, str]:
        """Examples ``prepare`` found unusable: index in its ``examples`` -> why, in words the
        user can act on. The loop reports them per file and stops a run that would lose more
        than ``max_dropped_fraction`` of a file's examples. Default: none."""
        return {}

    @abstractmethod
    def collate(self, items: Sequence[tuple[int, dict]], ctx: CollateContext) -> Any:
        """Turn (index in pool, training example) pairs of this rank into a batch.

        Random choices must depend only on (seed, epoch, index), so a batch is the same
        whichever rank builds it and after a resume.
        """

    @abstractmethod
    def loss(
        self, model: torch.nn.Module, batch: Any, dist: DistContext, train: bool = True
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Loss over the global batch (identical on every rank) and float statistics.

        Gradients of the returned loss w.r.t. this rank's tensors must be those of the global
        loss; the loop sums parameter gradients over ranks. ``train`` is False in validation,
        where method state (queues, ...) must not change. ``stats`` holds (validation reads
        them): ``loss``, ``n_questions``, ``correct`` (positives ranked first) and
        ``rank_sum`` (sum of the 1-based ranks of the positives): the validation measure of
        the method's paper, which checkpoint selection uses; and ``<name>_correct`` /
        ``<name>_rank_sum`` for each of its ``extra_measures``.
        """

    def batch_size_of(self, batch: Any) -> int:
        """Number of training examples (questions) in this rank's batch."""
        return int(batch.n_questions)

    # Hooks for stateful methods; no-ops for DPR.
    def attach(self, model: torch.nn.Module) -> None:
        """Called once the model is built (xMoCo: create slow encoders and queues)."""
        return None

    def after_step(self, model: torch.nn.Module) -> None:
        """Called after every optimizer step (xMoCo: momentum update)."""
        return None

    def state_dict(self) -> dict[str, Any]:
        """Method state for checkpoints: tensors and plain types (loads with weights_only)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None

    def report(self) -> dict[str, Any]:
        """Method statistics for the training report (plain JSON types)."""
        return {}

    # ---- encoding the corpus

    def encode_corpus(
        self, model: Any, block: CorpusBlock, settings: EncodeSettings
    ) -> tuple[np.ndarray, np.ndarray]:
        """Unit ids [m] and vectors [m, d] of a block of passages (one vector per passage)."""
        from drpipe.encoders import encode_texts  # torch and transformers: at first use

        vecs = encode_texts(
            model.passage.to(settings.device), model.tokenizer, block.titles, block.texts,
            batch_size=settings.batch_size, max_length=model.max_passage_len,
            bf16=settings.bf16, device=settings.device, show_progress=False, fmt=model.text,
        )  # fmt: skip
        return unit_id(block.pids), vecs

    # What ``drpipe tokenize`` writes for its encoding (``drpipe.tokens``: "passages", one
    # text or pair per passage; "marked", DCSR's); None: it encodes from text only.
    token_format: ClassVar[str | None] = "passages"

    @classmethod
    def tokenize_corpus(
        cls, tokenizer, fmt: dict[str, Any], max_length: int, titles, texts, spans=None
    ) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
        """``drpipe tokenize``'s ids of a block of passages in ``token_format`` (``fmt``: its
        keys, ``drpipe.tokens.passage_format``), exactly those ``encode_corpus`` feeds the model
        (padding stripped); and per passage its sentences and whether its text was cut (0 and
        False here)."""
        from drpipe.encoders import TextFormat, tokenize_passages  # torch: at first use
        from drpipe.tokens import unpadded

        n = len(texts)
        text_fmt = TextFormat.of({k: v for k, v in fmt.items() if k != "format"})
        batch = tokenize_passages(tokenizer, titles, texts, max_length, text_fmt)
        ids = unpadded(batch, n, tokenizer.padding_side)
        return ids, np.zeros(n, np.int32), np.zeros(n, bool)

    def encode_tokens(
        self, model: Any, shard: Any, settings: EncodeSettings, block_size: int
    ) -> Iterator[tuple[np.ndarray, np.ndarray, int]]:
        """``encode_corpus`` of a token shard (``drpipe.tokens.TokenShard`` of ``token_format``)
        in blocks of ``block_size`` rows: (unit ids, vectors, passages) per block, the vectors
        those of the same rows encoded from text (same batches, bit for bit)."""
        from drpipe.tokens import encode_passage_tokens  # torch: at first use

        return encode_passage_tokens(model, shard, settings, block_size)

    def encode_report(self) -> dict[str, Any]:
        """Statistics of ``encode_corpus`` calls for the shard's report (e.g. cut sentences)."""
        return {}

    # ---- retrieval

    def search_depth(self, k: int) -> int:
        """How many units to retrieve to rank ``k`` passages."""
        return k

    def units_to_passages(
        self, unit_ids: np.ndarray, scores: np.ndarray, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Ranked units [n_questions, depth] -> ranked pids and scores [n_questions, k]
        (padding: pid -1)."""
        return unit_ids[:, :k], scores[:, :k]
