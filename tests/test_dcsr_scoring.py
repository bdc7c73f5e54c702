"""DCSR's Score Normalization (section 3.3): hand-computed cases and a loop reference."""

from __future__ import annotations

import math

import numpy as np
import pytest

from drpipe.methods import get_method
from drpipe.methods.base import SENT_SLOTS, unit_id
from drpipe.methods.dcsr_parts.scoring import positive_passage_ranks, score_normalization


def u(pid: int, sent: int) -> int:
    return int(unit_id([pid], [sent])[0])


def test_hand_computed_one_and_several_sentences():
    # Question 0: passage 7 has one retrieved sentence (score 2), passage 9 two (1 and 1),
    # passage 4 one (0); the last slot is padding.
    # Question 1: passage 3 one sentence at 1.0 against passage 5 with three at 0.9 each.
    units = np.array(
        [
            [u(7, 0), u(9, 1), u(9, 0), u(4, 2), -1],
            [u(3, 0), u(5, 0), u(5, 1), u(5, 2), -1],
        ]
    )
    scores = np.array([[2.0, 1.0, 1.0, 0.0, -np.inf], [1.0, 0.9, 0.9, 0.9, -np.inf]])
    pids, has_ans = score_normalization(units, scores, 5)

    z0 = math.exp(2) + 2 * math.exp(1) + 1
    p7, p9, p4 = math.exp(2) / z0, math.exp(1) / z0, 1 / z0
    assert pids[0].tolist() == [7, 9, 4, -1, -1]
    assert has_ans[0, :3] == pytest.approx([p7, 1 - (1 - p9) ** 2, p4], rel=1e-12)
    assert p7 == pytest.approx(0.534447, abs=1e-6) and 1 - (1 - p9) ** 2 == pytest.approx(
        0.354568, abs=1e-6
    )

    z1 = math.exp(1.0) + 3 * math.exp(0.9)
    p3, p5 = math.exp(1.0) / z1, math.exp(0.9) / z1
    # Three good sentences beat one slightly better one: HasAns(5) = 1 - (1 - p5)^3.
    assert pids[1].tolist() == [5, 3, -1, -1, -1]
    assert has_ans[1, :2] == pytest.approx([1 - (1 - p5) ** 3, p3], rel=1e-12)
    assert np.isneginf(has_ans[:, 3:]).all() and np.isneginf(has_ans[1, 2])

    # The best sentence alone ("max") ranks passage 3 first instead.
    pids_max, best = score_normalization(units, scores, 2, how="max")
    assert pids_max.tolist() == [[7, 9], [3, 5]] and best[1].tolist() == [1.0, 0.9]


def test_top_k_cut_ties_and_saturation():
    # Equal HasAns: the passage whose sentence was retrieved first ranks first.
    units = np.array([[u(2, 0), u(1, 0), u(8, 3)]])
    scores = np.array([[0.5, 0.5, 0.1]])
    pids, _ = score_normalization(units, scores, 2)
    assert pids.tolist() == [[2, 1]]
    # One overwhelming sentence: p = 1 exactly; the others still rank in retrieval order.
    units = np.array([[u(6, 0), u(5, 0), u(5, 1), u(4, 0)]])
    scores = np.array([[1000.0, 0.0, -1.0, -2.0]])
    pids, has_ans = score_normalization(units, scores, 3)
    assert pids.tolist() == [[6, 5, 4]] and has_ans[0, 0] == 1.0
    assert has_ans[0, 1] == pytest.approx(0.0, abs=1e-300)
    # No valid unit at all.
    pids, has_ans = score_normalization(np.full((2, 3), -1), np.full((2, 3), -np.inf), 2)
    assert (pids == -1).all() and np.isneginf(has_ans).all()


def _loop_reference(units: np.ndarray, scores: np.ndarray, k: int) -> list[list[int]]:
    out = []
    for row_u, row_s in zip(units, scores, strict=True):
        keep = row_u >= 0
        s = row_s[keep].astype(np.float64)
        p = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
        miss: dict[int, float] = {}
        first: dict[int, int] = {}
        for j, (unit, prob) in enumerate(zip(row_u[keep], p, strict=True)):
            pid = int(unit) // SENT_SLOTS
            miss[pid] = miss.get(pid, 1.0) * (1.0 - prob)
            first.setdefault(pid, j)
        ranked = sorted(miss, key=lambda q: (miss[q], first[q]))
        out.append(ranked[:k])
    return out


def test_vectorised_equals_loop_reference():
    rng = np.random.default_rng(3)
    n, depth, k = 40, 60, 12
    pids = rng.integers(0, 25, size=(n, depth))
    sents = rng.integers(0, 6, size=(n, depth))
    units = unit_id(pids.ravel(), sents.ravel()).reshape(n, depth)
    scores = np.sort(rng.normal(size=(n, depth)) * 3, axis=1)[:, ::-1]
    units[:, -5:] = -1  # padding at the end, as FAISS pads
    scores[:, -5:] = -np.inf
    got, _ = score_normalization(units, scores, k)
    want = _loop_reference(units, scores, k)
    for g, w in zip(got, want, strict=True):
        assert g[: len(w)].tolist() == w


def test_method_search_depth_and_units_to_passages():
    method = get_method("dcsr", {"sentences_per_passage": 4.2})
    assert method.search_depth(100) == 420 and method.search_depth(1) == 5
    units = np.array([[u(1, 0), u(2, 0), u(1, 1)]])
    pids, _ = method.units_to_passages(units, np.array([[3.0, 2.9, 2.8]]), 2)
    assert pids.tolist() == [[1, 2]]
    with pytest.raises(ValueError, match="sentences_per_passage"):
        get_method("dcsr").search_depth(100)


def test_positive_passage_ranks_merge_sentences_of_one_passage():
    # Candidates: two sentences of passage 1 (the positive's passage), one of passage 2.
    units = np.array([u(1, 0), u(1, 3), u(2, 0)])
    scores = np.array([[0.0, 0.0, 0.3], [5.0, 0.0, 0.0]])
    # Question 0: passage 2's single sentence scores best, but passage 1's two sentences
    # together have the larger HasAns; question 1's positive is the passage-2 sentence.
    ranks = positive_passage_ranks(scores, units, np.array([0, 2]))
    assert ranks.tolist() == [1, 2]
