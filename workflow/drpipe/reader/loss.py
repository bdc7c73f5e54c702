"""The reader's loss (DPR section 6.1): the marginal log-likelihood of all answer spans in the
positive passage plus the log-likelihood of selecting the positive passage.

For question i with passages 0..m-1 (the positive first) and answer spans S_i in the positive:

    loss_i = -log sum_{(s, e) in S_i} P_start(s) P_end(e)  -  log P_select(0)

P_start and P_end are softmaxes over the positive passage's text tokens (question, title,
special and pad tokens are no span candidates; DPR leaves them in its softmax, which changes
nothing a span can score against another); P_select is the softmax of the selection logits
over the question's passages (missing passages masked out). The batch loss is the mean over
questions (DPR sums; with Adam the scale barely matters, and the mean keeps ``grad_clip``
independent of the batch size).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

NEG = -1e4  # a masked logit (finite, so bf16 autocast and empty masks stay NaN-free)


def span_log_likelihood(
    start: torch.Tensor,
    end: torch.Tensor,
    text_mask: torch.Tensor,
    spans: Sequence[tuple[int, int]],
) -> torch.Tensor:
    """log sum over ``spans`` of P_start(s) P_end(e), for one passage's logits [seq]."""
    if not spans:
        raise ValueError("a positive passage without an answer span")
    ls = torch.log_softmax(start.float().masked_fill(~text_mask, NEG), dim=-1)
    le = torch.log_softmax(end.float().masked_fill(~text_mask, NEG), dim=-1)
    s = torch.tensor([a for a, _ in spans], device=start.device)
    e = torch.tensor([b for _, b in spans], device=start.device)
    return torch.logsumexp(ls[s] + le[e], dim=0)


def reader_loss(
    start: torch.Tensor,
    end: torch.Tensor,
    select: torch.Tensor,
    text_mask: torch.Tensor,
    passage_mask: torch.Tensor,
    spans: Sequence[Sequence[tuple[int, int]]],
    denominator: int | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Loss of a batch: logits [q, m, seq] (start, end), [q, m] (select), masks of the same
    shapes, the positive's spans per question. ``denominator``: the global batch size under
    DDP (each rank's loss is its questions' sum over it), default this batch's questions."""
    n = start.shape[0]
    span_ll = torch.stack(
        [span_log_likelihood(start[i, 0], end[i, 0], text_mask[i, 0], spans[i]) for i in range(n)]
    )
    sel = torch.log_softmax(select.float().masked_fill(~passage_mask, NEG), dim=-1)[:, 0]
    denom = float(denominator or n)
    loss = -(span_ll.sum() + sel.sum()) / denom
    return loss, {
        "loss": float(loss.detach()),
        "span_nll": float(-span_ll.detach().mean()),
        "select_nll": float(-sel.detach().mean()),
        "select_acc": float((select.detach().masked_fill(~passage_mask, NEG).argmax(-1) == 0)
                            .float().mean()),
    }  # fmt: skip
