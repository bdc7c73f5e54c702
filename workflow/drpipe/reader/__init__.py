"""End-to-end QA (DPR section 6.1): a reader over a retriever's top passages, exact match.

Modules, from the bottom up:

- ``em``: SQuAD's ``normalize_answer`` and exact match (CuratedTREC's answers are regexes)
- ``model``: the ``transformers.DPRReader`` built from a BERT-shaped encoder or loaded (ours,
  DPR's released checkpoints), saved with ``save_pretrained``
- ``inputs``: ``[CLS] question [SEP] title [SEP] text [SEP]`` inputs, answer spans
- ``examples``: training examples from a retriever's own results (skips counted)
- ``loss``: span marginal log-likelihood + passage selection log-likelihood
- ``decode``: the best span of bounded length
- ``settings``: the cfg keys and defaults
- ``train``: the loop, on ``drpipe.training``'s optimizer, schedule, data order, checkpoints
  and DDP helpers
- ``score``: scores per (question, passage), shared across retrievers; predictions, EM
- ``cli``: ``drpipe reader train | score | choose-k | predict``

Only ``cli`` is imported here (no torch until a handler runs).
"""

from drpipe.reader.cli import register

__all__ = ["register"]
