"""AOpt: pseudo-labels, linear weights, the per-vector optimiser, and the leak-free protocol.

Hand-built corpora and runs with known answers; the optimiser against torch autograd on the
paper's formula and against the plain batch-size-1 loop.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from cli_util import run_cli

from drpipe.aopt.labels import Labels, build_labels
from drpipe.aopt.linear import label_means, linear_update
from drpipe.aopt.optimise import early_stop, group_problems, optimise, optimise_loop
from drpipe.aopt.settings import DEFAULT_CFG, merged_cfg
from drpipe.aopt.vectors import read_passage_vectors, write_query_vectors
from drpipe.corpus.passages import PASSAGE_SCHEMA
from drpipe.io import write_parquet
from drpipe.qa.datasets import read_questions, write_questions
from drpipe.runs import run_table, write_run
from drpipe.vectors import read_query_vectors

D = 8


def _question(qid, question, answers):
    return {"qid": qid, "question": question, "answers": answers, "match": "string",
            "gold_title": None, "gold_context": None}  # fmt: skip


def _save_shards(dirpath: Path, pids: np.ndarray, vecs: np.ndarray, n_shards: int = 2):
    from drpipe.vectors import ids_path_for

    dirpath.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, (p, v) in enumerate(
        zip(np.array_split(pids, n_shards), np.array_split(vecs, n_shards), strict=True)
    ):
        path = dirpath / f"shard-{i}.npy"
        np.save(path, v.astype(np.float32))
        np.save(ids_path_for(path), p.astype(np.int64))
        paths.append(path)
    return paths


def _save_qvecs(path: Path, qids, vecs):
    write_query_vectors(qids, vecs, path)
    return path


def _brute_run(path: Path, qids, qvecs, pids, pvecs, k):
    """Exact top-k run by inner product (ties by pid), as `drpipe retrieve` writes it."""
    scores = qvecs.astype(np.float64) @ pvecs.astype(np.float64).T
    plist, slist = [], []
    for row in scores:
        order = np.lexsort((pids, -row))[:k]
        plist.append(pids[order])
        slist.append(row[order])
    write_run(path, run_table(list(qids), plist, slist))
    return path


# --------------------------------------------------------------------------- labels


@pytest.fixture()
def small(tmp_path):
    """Four passages, two questions, a hand-written run."""
    passages = [
        (10, "Paris", "Paris is the capital of France and its largest city."),
        (11, "Berlin", "Berlin is the capital of Germany."),
        (12, "Rome", "Rome was founded, legend says, by Romulus."),
        (13, "France", "France borders Spain; its capital is Paris."),
    ]
    write_parquet(
        tmp_path / "passages.parquet",
        pa.Table.from_pylist(
            [
                {"pid": p, "title": t, "text": x, "source": "s", "doc_id": i}
                for i, (p, t, x) in enumerate(passages)
            ],  # fmt: skip
            schema=PASSAGE_SCHEMA,
        ),
    )
    write_questions(
        tmp_path / "q.parquet",
        [
            _question("a", "capital of France?", ["Paris"]),
            _question("b", "who founded Rome?", ["Romulus", "Remus"]),
        ],
    )
    # a: 11, 10, 13, 12   b: 12, 10, 11
    write_run(
        tmp_path / "run.parquet",
        run_table(
            ["a", "b"],
            [np.array([11, 10, 13, 12]), np.array([12, 10, 11])],
            [np.array([4.0, 3.0, 2.0, 1.0]), np.array([3.0, 2.0, 1.0])],
        ),
    )
    rng = np.random.default_rng(0)
    pids = np.array([13, 12, 11, 10])  # shard rows are not pid order
    shards = _save_shards(tmp_path / "p", pids, rng.standard_normal((4, D)))
    return tmp_path, shards, pids


def test_answer_labels_knowledge_filtering(small):
    tmp, shards, pids = small
    pvec = read_passage_vectors(shards)
    cfg = merged_cfg({"depth": 3}, DEFAULT_CFG)
    labels = build_labels(
        tmp / "run.parquet", ["b", "a"], pvec, cfg, tmp / "q.parquet", tmp / "passages.parquet"
    )
    row_of_pid = {int(p): i for i, p in enumerate(pids)}
    got = [
        (["b", "a"][q], int(pids[p]), bool(f))
        for q, p, f in zip(labels.q_rows, labels.p_rows, labels.positive, strict=True)
    ]
    # Top 3 only; a passage is positive iff it contains an answer (eq. 8).
    assert got == [
        ("a", 11, False), ("a", 10, True), ("a", 13, True),
        ("b", 12, True), ("b", 10, False), ("b", 11, False),
    ]  # fmt: skip
    assert labels.answers_from == str(tmp / "q.parquet")
    # Passage-centric view: each passage with the questions that retrieved it.
    prob = group_problems(labels.p_rows, labels.q_rows, labels.positive)
    by_pid = {
        int(pids[r]): sorted(
            (["b", "a"][q], bool(f))
            for q, f in zip(
                prob.others[prob.ptr[i] : prob.ptr[i + 1]],
                prob.positive[prob.ptr[i] : prob.ptr[i + 1]],
                strict=True,
            )
        )
        for i, r in enumerate(prob.rows)
    }
    assert by_pid == {
        10: [("a", True), ("b", False)],
        11: [("a", False), ("b", False)],
        12: [("b", True)],
        13: [("a", True)],
    }
    assert row_of_pid[10] == prob.rows[list(by_pid).index(10)]


def test_prf_labels_read_no_answers(small):
    tmp, shards, _ = small
    pvec = read_passage_vectors(shards)
    cfg = merged_cfg({"labels": "prf", "prf_positives": 2, "depth": 100}, DEFAULT_CFG)
    labels = build_labels(tmp / "run.parquet", ["a", "b"], pvec, cfg)
    assert labels.positive.tolist() == [True, True, False, False, True, True, False]
    assert labels.answers_from is None
    with pytest.raises(SystemExit, match="read no answers"):
        build_labels(tmp / "run.parquet", ["a", "b"], pvec, cfg, tmp / "q.parquet")


# --------------------------------------------------------------------------- linear weights


def test_linear_update_by_hand_and_identity():
    P = np.array([[1.0, 0.0], [0.0, 2.0], [5.0, 5.0]], np.float32)
    Q = np.array([[1.0, 1.0], [3.0, -1.0], [0.0, 4.0]], np.float32)
    labels = Labels(
        q_rows=np.array([0, 1, 2, 0]),
        p_rows=np.array([0, 0, 0, 1]),
        positive=np.array([True, True, False, False]),
        n_questions=3,
        answers_from=None,
    )
    pos, neg = label_means(3, Q, labels)
    new = linear_update(P, pos, neg, 1.0, 0.6, -0.1)
    # p0: 1*(1,0) + 0.6*mean((1,1),(3,-1)) - 0.1*(0,4) = (1+1.2, 0-0.4) = (2.2, -0.4)
    # p1: (0,2) + 0 (no positives) - 0.1*(1,1) = (-0.1, 1.9); p2 has no labels: unchanged.
    np.testing.assert_allclose(new, [[2.2, -0.4], [-0.1, 1.9], [5.0, 5.0]], rtol=1e-6)
    same = linear_update(P, pos, neg, 1.0, 0.0, 0.0)
    assert same.dtype == np.float32 and same.tobytes() == P.tobytes()


# --------------------------------------------------------------------------- optimiser


def _problems(rng, n, d, sizes, pos_rate=0.2):
    m = 3 * max(sizes)
    centres = rng.standard_normal((n, d))
    partners = rng.standard_normal((m, d))
    c_rows, o_rows, flags = [], [], []
    for i, k in enumerate(sizes):
        others = rng.choice(m, k, replace=False)
        f = rng.random(k) < pos_rate
        f[0], f[-1] = True, False  # at least one of each
        c_rows += [i] * k
        o_rows += others.tolist()
        flags += f.tolist()
    prob = group_problems(np.array(c_rows), np.array(o_rows), np.array(flags))
    return centres, partners, prob


@pytest.mark.parametrize("k", [5, 3 * D])  # K <= d: span form; K > d: plain form
def test_one_step_equals_autograd_on_the_papers_formula(k):
    import torch

    rng = np.random.default_rng(1)
    centres, partners, prob = _problems(rng, 3, D, [k, k, k])
    res = optimise(centres, partners, prob, lr=0.1, max_epochs=1, patience=5)
    for i in range(3):
        a, b = prob.ptr[i], prob.ptr[i + 1]
        Y = torch.tensor(partners[prob.others[a:b]], dtype=torch.float64)
        pos = torch.tensor(prob.positive[a:b])
        x = torch.tensor(centres[prob.rows[i]], dtype=torch.float64, requires_grad=True)
        s = Y @ x
        # Equation 13 as printed, with the exponentials of the softmax form.
        loss = -torch.log(torch.exp(s[pos]).sum() / torch.exp(s).sum())
        loss.backward()
        expected = (x - 0.1 * x.grad).detach().numpy()
        np.testing.assert_allclose(res.vectors[i], expected, rtol=0, atol=1e-12)
        assert res.loss_first[i] == pytest.approx(loss.item(), abs=1e-12)
    assert res.steps.tolist() == [1, 1, 1]


def test_early_stop_rule_on_a_given_loss_sequence():
    losses = [5.0, 4.0, 4.0, 4.5, 3.9, 3.95, 3.95, 3.91, 3.9, 3.99, 1.0]
    best, bad = np.array([np.inf]), np.array([0])
    steps = 0
    for loss in losses:
        best, bad, go = early_stop(np.array([loss]), best, bad, patience=5)
        if not go[0]:
            break
        steps += 1
    # 3.9 at index 4 is the last improvement; indices 5..9 do not go below it (3.9 is not
    # lower than 3.9): the fifth such epoch (index 9) stops before its step.
    assert steps == 9 and best[0] == 3.9
    best, bad, go = early_stop(np.array([2.0, 2.0]), np.array([1.0, 3.0]), np.array([0, 4]), 2)
    assert go.tolist() == [True, True] and bad.tolist() == [1, 0]


def test_vectorised_equals_the_plain_batch_1_loop():
    rng = np.random.default_rng(2)
    sizes = list(rng.integers(2, 4 * D, size=40))
    centres, partners, prob = _problems(rng, 40, D, sizes)
    for lr in (0.1, 1.0):
        vec = optimise(centres, partners, prob, lr=lr, max_epochs=100, patience=5, threads=2)
        loop = optimise_loop(centres, partners, prob, lr=lr, max_epochs=100, patience=5)
        np.testing.assert_allclose(vec.vectors, loop.vectors, rtol=0, atol=1e-9)
        assert (vec.steps == loop.steps).all() and (vec.stopped == loop.stopped).all()
        np.testing.assert_allclose(vec.loss_last, loop.loss_last, atol=1e-9)
    # lr 3 overshoots and saturates: vectors stop early, at different epochs. Where the loss
    # has flattened to rounding level the two may stop an epoch apart; the vectors then
    # barely move, so they still agree to the benchmark's 1e-5.
    vec = optimise(centres, partners, prob, lr=3.0, max_epochs=100, patience=5)
    loop = optimise_loop(centres, partners, prob, lr=3.0, max_epochs=100, patience=5)
    np.testing.assert_allclose(vec.vectors, loop.vectors, rtol=0, atol=1e-5)
    assert vec.stopped.sum() >= 5 and len(set(vec.steps[vec.stopped].tolist())) >= 3
    # The optimisation lowers every vector's loss (lr 0.1 is small for these scales).
    low = optimise(centres, partners, prob, lr=0.01, max_epochs=100, patience=5)
    assert (low.loss_last < low.loss_first).all()


# --------------------------------------------------------------------------- protocols


WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
         "juliet", "kilo", "lima", "mike", "november", "oscar", "papa"]  # fmt: skip


def _world(tmp: Path, seed: int = 3):
    """A corpus, training and test questions with answers, vectors and DPR-style runs."""
    rng = np.random.default_rng(seed)
    n_p, n_train, n_test, d = 30, 12, 10, 6
    pids = np.arange(100, 100 + n_p)
    texts = [" ".join(rng.choice(WORDS, 12)) for _ in range(n_p)]
    write_parquet(
        tmp / "passages.parquet",
        pa.Table.from_pylist(
            [
                {"pid": int(p), "title": f"t{p}", "text": t, "source": "s", "doc_id": i}
                for i, (p, t) in enumerate(zip(pids, texts, strict=True))
            ],  # fmt: skip
            schema=PASSAGE_SCHEMA,
        ),
    )
    qs = {}
    for split, n in (("train", n_train), ("test", n_test)):
        qs[split] = [
            _question(f"{split}{i}", f"question {i}", [str(rng.choice(WORDS))]) for i in range(n)
        ]
        write_questions(tmp / f"{split}.parquet", qs[split])
    shards = _save_shards(tmp / "base", pids, rng.standard_normal((n_p, d)))
    pvecs = np.concatenate([np.load(p) for p in shards])
    pall = np.concatenate([np.load(str(p).replace(".npy", ".ids.npy")) for p in shards])
    for split, n in (("train", n_train), ("test", n_test)):
        qids = [q["qid"] for q in qs[split]]
        qv = rng.standard_normal((n, d)).astype(np.float32)
        _save_qvecs(tmp / f"{split}.npy", qids, qv)
        _brute_run(tmp / f"{split}-run.parquet", qids, qv, pall, pvecs, 10)
    return pall, pvecs


def _pipeline(tmp: Path, out: Path, pall, pvecs) -> dict[str, list[Path]]:
    """Both protocols' first rounds, wired as aopt.smk wires them."""
    base = sorted((tmp / "base").glob("shard-?.npy"))
    cfg = {"depth": 10, "lr": 0.1, "max_epochs": 20, "patience": 5}
    prf = {**cfg, "labels": "prf", "prf_positives": 2}
    out.mkdir()
    files: dict[str, list[Path]] = {}

    def passage(name, queries, run, questions, cfg=cfg, cmd="optimise"):
        outs = [out / name / f"shard-{i}.npy" for i in range(len(base))]
        side = ["--side", "passage"] if cmd == "optimise" else []
        run_cli(
            "aopt", cmd, *side, "--shards", *map(str, base), "--queries", str(queries),
            "--run", str(run), "--questions", str(questions),
            "--passages", str(tmp / "passages.parquet"), "--out", *map(str, outs),
            "--report", str(out / f"{name}.json"), cfg=cfg,
        )  # fmt: skip
        files[name] = outs

    def query(name, split, questions=None, cfg=prf):
        target = out / f"{name}.npy"
        extra = ["--questions", str(questions), "--passages", str(tmp / "passages.parquet")]
        run_cli(
            "aopt", "optimise", "--side", "query", "--shards", *map(str, base),
            "--queries", str(tmp / f"{split}.npy"), "--run", str(tmp / f"{split}-run.parquet"),
            *(extra if questions else []), "--out", str(target),
            "--report", str(out / f"{name}.json"), cfg=cfg,
        )  # fmt: skip
        files[name] = [target, target.with_name(f"{name}.ids.npy")]

    # leak-free: passages from training answers; queries by PRF (no questions file at all)
    passage("leakfree-passage", tmp / "train.npy", tmp / "train-run.parquet", tmp / "train.parquet")
    query("leakfree-query-test", "test")
    query("leakfree-query-train", "train")
    qids, qv = read_query_vectors(out / "leakfree-query-train.npy")
    _brute_run(out / "lf-train-run.parquet", qids, qv, pall, pvecs, 10)
    passage("leakfree-hybrid", out / "leakfree-query-train.npy", out / "lf-train-run.parquet",
            tmp / "train.parquet")  # fmt: skip
    lin = {"depth": 10, "alpha": 1.0, "beta": 0.6, "gamma": -0.1}
    passage("leakfree-linear", tmp / "train.npy", tmp / "train-run.parquet",
            tmp / "train.parquet", cfg=lin, cmd="linear")  # fmt: skip
    # oracle: the test questions' own answers
    passage("oracle-passage", tmp / "test.npy", tmp / "test-run.parquet", tmp / "test.parquet")
    query("oracle-query", "test", tmp / "test.parquet", cfg={**cfg, "labels": "answers"})
    passage("oracle-linear", tmp / "test.npy", tmp / "test-run.parquet", tmp / "test.parquet",
            cfg=lin, cmd="linear")  # fmt: skip
    return files


def test_leak_free_vectors_never_read_a_test_answer(tmp_path):
    pall, pvecs = _world(tmp_path)
    real = _pipeline(tmp_path, tmp_path / "real", pall, pvecs)
    # Swap every test answer for garbage that occurs in no passage.
    garbage = [
        _question(q["qid"], q["question"], ["zzqx unanswerable garbage"])
        for q in read_questions(tmp_path / "test.parquet")
    ]
    write_questions(tmp_path / "test.parquet", garbage)
    swapped = _pipeline(tmp_path, tmp_path / "swapped", pall, pvecs)
    for name, paths in real.items():
        same = all(
            a.read_bytes() == b.read_bytes() for a, b in zip(paths, swapped[name], strict=True)
        )
        if name.startswith("leakfree"):
            assert same, f"{name} changed when the test answers changed"
        else:
            assert not same, f"{name} did not change with the test answers"
    # The reports say whose answers each output read.
    for name in real:
        report = json.loads((tmp_path / "real" / f"{name}.json").read_text())
        read = report["answers_read_from"]
        if name.startswith("leakfree"):
            assert read is None or read.endswith("train.parquet")
        else:
            assert read.endswith("test.parquet")
    # Optimised passages differ from the base where labels exist, ids are kept.
    base = sorted((tmp_path / "base").glob("shard-?.npy"))
    new = real["oracle-passage"]
    assert any(not np.array_equal(np.load(a), np.load(b)) for a, b in zip(base, new, strict=True))
    for a, b in zip(base, new, strict=True):
        ia, ib = (Path(str(p).replace(".npy", ".ids.npy")) for p in (a, b))
        assert ia.read_bytes() == ib.read_bytes()
    shutil.rmtree(tmp_path / "swapped")


def test_a_round_is_one_step_per_vector(small):
    """AOpt 2.3.3 / 3.1.4: an epoch is one forward and backward step per vector, after which the
    index and the labels are rebuilt, so one command (one round) takes exactly one step. (Read
    as 100 epochs on one round's labels, the oracle put every answerable question's positive
    at rank 1: top-1 = top-100.)"""
    import torch

    tmp, shards, pids = small
    qv = _save_qvecs(tmp / "qv.npy", ["a", "b"], np.random.default_rng(0).standard_normal((2, D)))
    outs = [str(tmp / "o0.npy"), str(tmp / "o1.npy")]
    report = run_cli(
        "aopt", "optimise", "--side", "passage", "--shards", *map(str, shards),
        "--queries", str(qv), "--run", str(tmp / "run.parquet"),
        "--questions", str(tmp / "q.parquet"), "--passages", str(tmp / "passages.parquet"),
        "--out", *outs, "--report", str(tmp / "r.json"), cfg={"depth": 3},
    )  # fmt: skip
    assert report["max_epochs"] == 1 and report["epochs_max"] == 1
    # Passage 10, the one optimised: question a retrieved it and it holds a's answer (Paris),
    # b retrieved it without b's answer. One step of equation 14 on equation 13, by autograd.
    before = read_passage_vectors(shards)
    after = read_passage_vectors(outs)
    row = int(np.flatnonzero(pids == 10)[0])
    _, q = read_query_vectors(qv)
    Y = torch.tensor(q, dtype=torch.float64)
    x = torch.tensor(before.vectors[row], dtype=torch.float64, requires_grad=True)
    s = Y @ x
    (torch.logsumexp(s, 0) - s[0]).backward()
    step = (x - 0.1 * x.grad).detach().numpy()
    np.testing.assert_allclose(after.vectors[row], step, rtol=0, atol=1e-5)
    assert not np.allclose(before.vectors[row], step)
    others = np.arange(len(pids)) != row
    np.testing.assert_array_equal(after.vectors[others], before.vectors[others])


def test_optimise_report_and_errors(small):
    tmp, shards, _ = small
    qv = _save_qvecs(tmp / "qv.npy", ["a", "b"], np.random.default_rng(0).standard_normal((2, D)))
    report = run_cli(
        "aopt", "optimise", "--side", "passage", "--shards", *map(str, shards),
        "--queries", str(qv), "--run", str(tmp / "run.parquet"),
        "--questions", str(tmp / "q.parquet"), "--passages", str(tmp / "passages.parquet"),
        "--out", str(tmp / "o0.npy"), str(tmp / "o1.npy"), "--report", str(tmp / "r.json"),
        cfg={"depth": 3},
    )  # fmt: skip
    # Passage 10 has a positive and a negative question; 11 none positive; 12, 13 no negative.
    assert report["n_labelled"] == 4 and report["n_optimised"] == 1
    assert report["n_without_positive"] == 1 and report["n_without_negative"] == 2
    assert report["pairs"] == 6 and report["positive_pairs"] == 3
    with pytest.raises(SystemExit, match="unknown keys"):
        merged_cfg({"learning_rate": 1}, DEFAULT_CFG)
    with pytest.raises(SystemExit, match="labels"):
        merged_cfg({"labels": "gold"}, DEFAULT_CFG)
