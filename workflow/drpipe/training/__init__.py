"""The one training loop every method shares: data order, optimisation, validation, checkpoints, DDP.

Commands::

    drpipe train --method dpr --train A.jsonl.gz [B.jsonl.gz ...] [--val V.jsonl.gz]
                 --out MODEL_DIR --report report.json --cfg '{...}'
    drpipe init-model --out MODEL_DIR --cfg '{"init": ..., "pooling": "cls", "tied": false}'

Training examples are DPR biencoder records (our ``train.jsonl.gz`` or DPR's released ``.json``
list); records without a positive passage are discarded and counted. Checkpoints go to
``MODEL_DIR.ckpt/`` (model, optimizer, scheduler, RNG states, data position); a killed run
started again with the same inputs and cfg resumes there and ends with the same weights as an
uninterrupted run. The best epoch by validation (average rank of the positive among the
passages of its validation batch, then loss, as DPR's "average rank" validation) becomes
MODEL_DIR, written atomically; the checkpoint folder is removed on success.

Distributed: run under ``torchrun``; each global batch of ``batch_size`` questions is split
over the ranks, question and passage vectors are gathered (this rank's slot keeps its
gradient) so in-batch negatives span the global batch, every rank computes the loss of the
whole global batch, and parameter gradients are summed over ranks: the update equals the
single-process update on the same global batch.

Modules, from the bottom up (cfg keys and their defaults are in ``settings``):

- ``settings``: the shared cfg keys, their defaults, checking a run's cfg
- ``data``: reading examples, the validation split, the seeded order of global batches
- ``distributed``: process group, gradient and statistic sums over ranks, thread counts
- ``checkpoints``: RNG states, what a checkpoint belongs to, saving and loading one
- ``build``: the bi-encoder, its optimizer and learning-rate schedule, ``init_model``
- ``base``: ``BaseTrainer``, what the loop and the reader's trainer share (process setup,
  batches, schedule, optimizer step, checkpoints, the model directory)
- ``validation``: loss and average rank of the positive on the validation examples
- ``loop``: ``Trainer`` and ``train_model``, the loop itself
- ``cli``: the ``train`` and ``init-model`` subcommands

Only ``cli`` is imported here: ``drpipe.cli`` imports this package for every command, and the
loop and what it builds import torch (about a second). The code hash of ``drpipe.training``
still covers every module: ``cli`` imports the loop (in its handlers), the loop the rest.
"""

from drpipe.training.cli import register

__all__ = ["register"]
