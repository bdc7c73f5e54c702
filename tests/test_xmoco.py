"""xMoCo's pieces against hand computations: momentum update, the loss on a hand-built batch and
queue (masked entries included), queue order and ids, state round-trips, validation purity.

The encoders here are lookup tables (input id i -> row i of a parameter matrix), so every vector
the loss sees is chosen by hand and the formula can be written out in plain Python.
"""

from __future__ import annotations

import io
import math

import pytest
import torch
from torch import nn

from drpipe.methods import get_method, method_class
from drpipe.methods.base import DistContext
from drpipe.methods.dpr import DPRBatch
from drpipe.methods.xmoco import EMPTY, Queue, XMoCoBatch, momentum_update
from drpipe.training.build import make_optimizer


class Lookup(nn.Module):
    """Vector of input row r = table[input_ids[r, 0]]; a LayerNorm-free stand-in encoder."""

    def __init__(self, table: torch.Tensor):
        super().__init__()
        self.table = nn.Parameter(table.clone())
        self.register_buffer("seen", torch.zeros(1))

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.table[batch["input_ids"][:, 0]]


class FakeBiEncoder(nn.Module):
    def __init__(self, q: torch.Tensor, p: torch.Tensor | None):
        super().__init__()
        self.query = Lookup(q)
        self.tied = p is None
        self.passage = self.query if self.tied else Lookup(p)


def ids(*rows: int) -> dict[str, torch.Tensor]:
    return {"input_ids": torch.tensor([[r] for r in rows])}


def make_batch(q_rows, p_rows, positive, owner, pids, qids) -> XMoCoBatch:
    dpr = DPRBatch(
        queries=ids(*q_rows),
        passages=ids(*p_rows),
        positive=torch.tensor(positive),
        owner=torch.tensor(owner),
        pids=torch.tensor(pids),
        n_questions=len(q_rows),
    )
    return XMoCoBatch(dpr, torch.tensor(qids))


def xmoco(**cfg):
    return get_method("xmoco", {"queue_size": 6, "alpha": 0.25, **cfg})


def test_registered_with_paper_defaults():
    cls = method_class("xmoco")
    assert cls.label == "xMoCo" and cls.corpus_units == "passages" and cls.hybrid
    d = cls.config_defaults()
    # Section 5.4 and 4.2: queue 16,384, alpha 0.001, lambda 0.5; 4.5: one BM25 hard negative.
    assert (d["queue_size"], d["alpha"], d["lambda_qp"]) == (16384, 0.001, 0.5)
    assert d["hard_negatives"] == 1 and d["negative_type"] == "bm25"
    assert set(cls.config_schema()) == set(d)


# ------------------------------------------------------------------ momentum update


@pytest.mark.parametrize("alpha", [0.0, 1.0, 0.3])
def test_momentum_update_by_hand(alpha):
    torch.manual_seed(0)
    fast = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4)).double()
    slow = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4)).double()
    f0 = {k: v.clone() for k, v in fast.state_dict().items()}
    s0 = {k: v.clone() for k, v in slow.state_dict().items()}
    momentum_update(fast, slow, alpha)
    for k, s in slow.state_dict().items():
        want = alpha * f0[k] + (1 - alpha) * s0[k]
        if alpha in (0.0, 1.0):  # exact: nothing of the other side may leak in
            assert torch.equal(s, s0[k] if alpha == 0.0 else f0[k]), k
        else:
            torch.testing.assert_close(s, want, rtol=0, atol=1e-15)
    assert all(torch.equal(v, f0[k]) for k, v in fast.state_dict().items())


@pytest.mark.parametrize("tied", [False, True])
def test_after_step_moves_slow_encoders_once_and_optimizer_never_sees_them(tied):
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    p = None if tied else torch.tensor([[2.0, 0.0], [0.0, 2.0]])
    model = FakeBiEncoder(q, p)
    m = xmoco(alpha=0.25)
    m.attach(model)
    assert (m.slow_q is m.slow_p) == tied and m.slow_q is not model.query
    assert not any(t.requires_grad for t in m.slow_q.parameters())
    opt = make_optimizer(model, {"lr": 1e-3, "weight_decay": 0.0, "adam_eps": 1e-8})
    in_opt = {id(t) for g in opt.param_groups for t in g["params"]}
    assert in_opt == {id(t) for t in model.parameters()}
    assert not in_opt & {id(t) for t in [*m.slow_q.parameters(), *m.slow_p.parameters()]}
    with torch.no_grad():
        model.query.table += 4.0
        if not tied:
            model.passage.table -= 4.0
    m.after_step(model)
    # One update per distinct encoder: a tied slow encoder is not moved twice.
    torch.testing.assert_close(m.slow_q.table, 0.25 * (q + 4.0) + 0.75 * q)
    if not tied:
        torch.testing.assert_close(m.slow_p.table, 0.25 * (p - 4.0) + 0.75 * p)


# ------------------------------------------------------------------ queues


def test_queue_ring_order_and_ids():
    qu = Queue(5)
    assert qu.order().tolist() == []
    for step in range(3):
        vec = torch.full((2, 3), float(step))
        slots = qu.push(vec, torch.tensor([10 * step, 10 * step + 1]), torch.tensor([step] * 2))
        assert slots.tolist() == [(2 * step) % 5, (2 * step + 1) % 5]
    order = qu.order()
    # Six pushed into five slots: the very first entry is gone, the rest oldest first.
    assert qu.key[order].tolist() == [1, 10, 11, 20, 21]
    assert qu.ident[order].tolist() == [0, 1, 1, 2, 2]
    assert qu.vectors[order, 0].tolist() == [0.0, 1.0, 1.0, 2.0, 2.0]
    with pytest.raises(ValueError, match="queue_size 5 is smaller than the 6"):
        qu.push(torch.zeros(6, 3), torch.zeros(6, dtype=torch.long), torch.zeros(6).long())


def hand_setup(**cfg):
    """Two questions; passages: q0's positive (pid 10) and hard negative (pid 20), q1's
    positive (pid 11) and hard negative (pid 10 = q0's positive: a false negative for q0).
    Queues hold three older entries each, one of them sharing a positive's passage id."""
    fq = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    fp = torch.tensor([[0.9, 0.1], [0.5, 0.5], [0.1, 0.8], [0.7, 0.2]])
    model = FakeBiEncoder(fq, fp)
    m = xmoco(**cfg)
    m.attach(model)
    with torch.no_grad():  # slow encoders differ from the fast ones, as after some steps
        m.slow_q.table.copy_(torch.tensor([[0.8, 0.3], [0.2, 0.9]]))
        m.slow_p.table.copy_(torch.tensor([[1.0, 0.2], [0.4, 0.4], [0.3, 0.7], [0.6, 0.1]]))
    old_p = torch.tensor([[0.5, -0.5], [0.95, 0.0], [0.0, 0.3]])
    m.queue_p.push(old_p, torch.tensor([99, 10, 11]), torch.tensor([99, 10, 11]))
    old_q = torch.tensor([[0.3, 0.3], [0.9, 0.1], [-0.2, 0.4]])
    m.queue_q.push(old_q, torch.tensor([50, 10, 60]), torch.tensor([7, 8, 9]))
    batch = make_batch([0, 1], [0, 1, 2, 3], [0, 2], [0, 0, 1, 1], [10, 20, 11, 10], [3, 4])
    return model, m, batch, fq, fp, old_p, old_q


def nll(scores: list[float], pos: int) -> float:
    top = max(scores)
    return -(scores[pos] - top - math.log(sum(math.exp(s - top) for s in scores)))


def dot(a, b) -> float:
    return float(sum(x * y for x, y in zip(a.tolist(), b.tolist(), strict=True)))


@pytest.mark.parametrize("mask", [True, False])
def test_loss_on_hand_built_batch_and_queue(mask):
    model, m, batch, fq, fp, old_p, old_q = hand_setup(mask_false_negatives=mask, hard_weight=0.5)
    sq, sp = m.slow_q.table.detach().clone(), m.slow_p.table.detach().clone()
    loss, stats = m.loss(model, batch, DistContext(), train=True)

    # Passage queue after the push (size 6): the oldest entry (pid 99) is evicted; left are
    # pid 10 and 11 (old) and the batch's four slow passage vectors, pids 10, 20, 11, 10.
    p_entries = [(old_p[1], 10), (old_p[2], 11)] + [(sp[j], pid) for j, pid in
                                                    enumerate([10, 20, 11, 10])]  # fmt: skip
    # Question queue (size 6, 3 old + 2 new): nothing evicted; keys = positives' pids.
    q_entries = [(old_q[0], 50), (old_q[1], 10), (old_q[2], 60), (sq[0], 10), (sq[1], 11)]
    positives, pos_pid = [0, 2], [10, 11]
    l_qp = l_pq = 0.0
    masked_qp = masked_pq = 0
    for i in range(2):
        own_p = 2 + positives[i]  # index of this question's positive in p_entries
        keep = [
            k for k, (_, pid) in enumerate(p_entries) if k == own_p or not (mask and pid == pos_pid[i])
        ]  # fmt: skip
        masked_qp += len(p_entries) - len(keep)
        l_qp += nll([dot(fq[i], p_entries[k][0]) for k in keep], keep.index(own_p))
        own_q = 3 + i
        keep = [
            k for k, (_, pid) in enumerate(q_entries) if k == own_q or not (mask and pid == pos_pid[i])
        ]  # fmt: skip
        masked_pq += len(q_entries) - len(keep)
        l_pq += nll([dot(fp[positives[i]], q_entries[k][0]) for k in keep], keep.index(own_q))
    # L_hard: fast vectors, the batch's four passages; q0 cannot see q1's hard negative (pid 10
    # = its own positive) when masking.
    l_hard = 0.0
    for i in range(2):
        cols = [j for j in range(4) if j == positives[i] or not (mask and [10, 20, 11, 10][j] ==
                                                                  pos_pid[i])]  # fmt: skip
        l_hard += nll([dot(fq[i], fp[j]) for j in cols], cols.index(positives[i]))
    want = 0.5 * l_qp / 2 + 0.5 * l_pq / 2 + 0.5 * l_hard / 2
    assert float(loss.detach()) == pytest.approx(want, rel=1e-6)
    assert stats["loss_qp"] == pytest.approx(l_qp / 2, rel=1e-6)
    assert stats["loss_pq"] == pytest.approx(l_pq / 2, rel=1e-6)
    assert stats["loss_hard"] == pytest.approx(l_hard / 2, rel=1e-6)
    # q0 (pid 10): the old pid-10 entry and q1's hard negative; q1 (pid 11): the old pid 11.
    # p0 (pid 10): the old question whose positive is pid 10.
    assert (masked_qp, masked_pq) == ((3, 1) if mask else (0, 0))
    assert (stats["masked_qp"], stats["masked_pq"]) == (masked_qp, masked_pq)
    rep = m.report()["xmoco"]["masked_false_negatives"]
    assert rep["qp_per_step"] == masked_qp and rep["pq_per_question"] == masked_pq / 2
    # Gradients reach both fast encoders, never the slow ones.
    loss.backward()
    assert model.query.table.grad.abs().sum() > 0 and model.passage.table.grad.abs().sum() > 0
    assert m.slow_q.table.grad is None and m.slow_p.table.grad is None


def test_lambda_weights_the_two_directions():
    out = {}
    for lam in (0.0, 1.0):
        model, m, batch, *_ = hand_setup(lambda_qp=lam, hard_negatives=0)
        loss, stats = m.loss(model, batch, DistContext(), train=True)
        out[lam] = (float(loss.detach()), stats)
    assert out[1.0][0] == pytest.approx(out[1.0][1]["loss_qp"], rel=1e-7)
    assert out[0.0][0] == pytest.approx(out[0.0][1]["loss_pq"], rel=1e-7)


def snapshot(m) -> bytes:
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    return buf.getvalue()


def test_validation_leaves_queues_alone():
    model, m, batch, *_ = hand_setup()
    before = snapshot(m)
    _, stats = m.loss(model, batch, DistContext(), train=False)
    assert snapshot(m) == before and m.stats["steps"] == 0
    assert stats["n_questions"] == 2 and 2 <= stats["rank_sum"] <= 8


def test_queue_order_and_ids_after_steps_and_state_round_trip(tmp_path):
    """Four steps of two questions (three passages pushed per question: positive and two hard
    negatives) through a queue of 10: the queues end holding the newest entries, oldest first;
    a checkpoint loaded with weights_only gives a method that continues identically."""
    table = torch.randn(40, 3, generator=torch.Generator().manual_seed(1))

    def run(m, model, steps):
        for s in steps:
            q_rows, p_rows = [2 * s, 2 * s + 1], list(range(6 * s, 6 * s + 6))
            pids = [100 + r for r in p_rows]
            batch = make_batch(q_rows, p_rows, [0, 3], [0, 0, 0, 1, 1, 1], pids, q_rows)
            loss, _ = m.loss(model, batch, DistContext(), train=True)
            loss.backward()
            m.after_step(model)

    model = FakeBiEncoder(table, table * 0.5)
    m = xmoco(queue_size=10, hard_negatives=2)
    m.attach(model)
    run(m, model, range(4))
    order = m.queue_p.order()
    assert m.queue_p.pushed == 24 and m.queue_q.pushed == 8
    assert m.queue_p.ident[order].tolist() == [100 + r for r in range(14, 24)]
    qo = m.queue_q.order()
    assert m.queue_q.ident[qo].tolist() == list(range(8))  # question queue not full yet
    assert m.queue_q.key[qo].tolist() == [100 + 6 * s + k for s in range(4) for k in (0, 3)]
    assert (m.queue_q.key[m.queue_q.pushed :] == EMPTY).all()

    path = tmp_path / "state.pt"
    torch.save({"method": m.state_dict(), "model": model.state_dict()}, path)
    state = torch.load(path, weights_only=True)
    model2 = FakeBiEncoder(table * 0, table * 0)
    model2.load_state_dict(state["model"])
    m2 = xmoco(queue_size=10, hard_negatives=2)
    m2.attach(model2)
    m2.load_state_dict(state["method"])
    run(m, model, [4, 5])
    run(m2, model2, [4, 5])
    for a, b in ((m.queue_p, m2.queue_p), (m.queue_q, m2.queue_q)):
        assert torch.equal(a.vectors, b.vectors) and torch.equal(a.ident, b.ident)
        assert torch.equal(a.order(), b.order())
    assert torch.equal(m.slow_p.table, m2.slow_p.table)
    assert m.stats == m2.stats
    assert m.queue_p.ident[m.queue_p.order()].tolist() == [100 + r for r in range(26, 36)]
