"""The probes' shared harness (``probe_openvino.py``, ``probe_ort_static.py``): real SQuAD
passages tokenised in batches in length order, as the pipeline batches them, and forward-pass
paths timed in alternating rounds (medians), each over the pipeline's fp32 encoder.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_encode import INIT, squad_passages  # noqa: E402

BATCH, MAX_LEN, ROUNDS = 64, 128, 3
INPUTS = ("input_ids", "attention_mask", "token_type_ids")  # a tokenised batch's tensors


def load(eager: bool = False):
    """The pipeline's passage encoder (a BiEncoder, eval mode); ``eager``: eager attention, as
    the int8 export uses."""
    from drpipe.encoders import BiEncoder

    bi = BiEncoder.from_init(INIT, pooling="mean", tied=True, max_passage_len=MAX_LEN)
    if eager:
        bi.passage.model.set_attn_implementation("eager")
    bi.passage.eval()
    return bi


def tokeniser(bi, passages: int) -> Callable[[], list[dict]]:
    """The function that tokenises ``passages`` real SQuAD passages into batches, in length
    order (called once for the batches, and again for its time)."""
    from drpipe.encoders import tokenize_passages

    table = squad_passages(passages)
    titles, texts = table.column("title").to_pylist(), table.column("text").to_pylist()
    order = np.argsort([len(a) + len(b) for a, b in zip(titles, texts, strict=True)], kind="stable")

    def tokenise() -> list[dict]:
        return [tokenize_passages(bi.tokenizer, [titles[i] for i in order[s : s + BATCH]],
                                  [texts[i] for i in order[s : s + BATCH]], MAX_LEN)
                for s in range(0, len(order), BATCH)]  # fmt: skip

    return tokenise


def torch_run(encoder, batches: list[dict]) -> np.ndarray:
    import torch

    with torch.inference_mode():
        return np.concatenate([encoder(b).float().numpy() for b in batches])


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return (a * b).sum(1)


def measure(paths: dict[str, Callable[[], np.ndarray]]) -> dict[str, dict]:
    """Each path's speed over ``torch_fp32`` (model only, then with ``tokenise``'s time added
    to both) and its minimum and mean cosine to ``torch_fp32``'s vectors: one warm-up call of
    each (builds included), then ROUNDS alternating rounds, medians."""
    for fn in paths.values():
        fn()
    seconds: dict[str, list[float]] = {k: [] for k in paths}
    vectors: dict[str, np.ndarray] = {}
    for _ in range(ROUNDS):
        for name, fn in paths.items():
            t0 = time.perf_counter()
            vectors[name] = fn()
            seconds[name].append(time.perf_counter() - t0)
    tok = statistics.median(seconds.pop("tokenise"))
    base = statistics.median(seconds["torch_fp32"])
    out = {}
    for name, s in seconds.items():
        cos = cosines(vectors[name], vectors["torch_fp32"])
        out[name] = {
            "model_only_over_fp32": round(base / statistics.median(s), 2),
            "with_tokenising_over_fp32": round((base + tok) / (statistics.median(s) + tok), 2),
            "min_cosine_to_fp32": round(float(cos.min()), 4),
            "mean_cosine_to_fp32": round(float(cos.mean()), 4),
        }
    return out


def parse_args(doc: str) -> argparse.Namespace:
    """A probe's arguments: ``--passages N`` (default 256) and ``--out FILE``."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--passages", type=int, default=256)
    ap.add_argument("--out", type=Path)
    return ap.parse_args()


def report(result: dict, out: Path | None) -> None:
    """``result`` with the emulated CPU kind (``benchmarks/emulate_cpu.py``) as one JSON line,
    and indented in ``out`` when given."""
    result = {"emulated_cpu_kind": os.environ.get("CPUID_MASK"), **result}
    if out:
        out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))
