"""Probe for issue 20: would OpenVINO's CPU runtime reach 2x the fp32 loop where bf16 does not?

Not part of the pipeline or its tests: it needs ``pip install openvino nncf`` (OpenVINO 2026.4
and NNCF 3.4 when measured), which the package does not depend on. It times the passage
encoder's forward passes alone on already tokenised batches (the tokenising's share is added to
every path for the second ratio), in one process, rounds alternating, medians:

- ``torch_fp32``: the pipeline's fp32 encoder (SDPA attention), the baseline;
- ``ort_int8``: the pipeline's int8 path (``BiEncoder.for_inference("int8")``, ONNX Runtime);
- ``ov_fp32``: the same model (eager attention, as the int8 export) through OpenVINO, fp32;
- ``ov_int8_static``: NNCF post-training quantization (activations and weights int8, scales
  calibrated on the first two batches of these passages: corpus text, never questions);
- ``ov_int8_weights``: NNCF int8 weight compression (OpenVINO quantizes activations per
  group at run time).

Run as another kind of CPU under ``benchmarks/emulate_cpu.py KIND --``. Prints one JSON line:
each path's speed over ``torch_fp32`` (model only, then with tokenising) and its minimum cosine
to the fp32 vectors.

    python benchmarks/probe_openvino.py [--passages 256] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_encode import INIT, squad_passages  # noqa: E402

BATCH, MAX_LEN, ROUNDS = 64, 128, 3
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def min_cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return float((a * b).sum(1).min())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--passages", type=int, default=256)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    import nncf
    import openvino as ov
    import torch

    from drpipe.encoders import BiEncoder, tokenize_passages

    torch.set_num_threads(2)
    table = squad_passages(args.passages)
    titles, texts = table.column("title").to_pylist(), table.column("text").to_pylist()

    def load(eager: bool):
        bi = BiEncoder.from_init(INIT, pooling="mean", tied=True, max_passage_len=MAX_LEN)
        if eager:
            bi.passage.model.set_attn_implementation("eager")
        bi.passage.eval()
        return bi

    bi, bi_eager = load(False), load(True)
    order = np.argsort([len(a) + len(b) for a, b in zip(titles, texts, strict=True)], kind="stable")

    def tokenise() -> list[dict]:
        return [tokenize_passages(bi.tokenizer, [titles[i] for i in order[s : s + BATCH]],
                                  [texts[i] for i in order[s : s + BATCH]], MAX_LEN)
                for s in range(0, len(order), BATCH)]  # fmt: skip

    batches = tokenise()

    class Inputs(torch.nn.Module):  # positional inputs for the converter
        def __init__(self, encoder):
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.encoder({"input_ids": input_ids, "attention_mask": attention_mask,
                                 "token_type_ids": token_type_ids})  # fmt: skip

    example = {k: batches[0][k] for k in INPUTS}
    shapes = [(k, [-1, -1], ov.Type.i64) for k in INPUTS]
    model = ov.convert_model(Inputs(bi_eager.passage), example_input=example, input=shapes)
    calibration = nncf.Dataset([{k: b[k].numpy() for k in INPUTS} for b in batches[:2]])
    # NNCF may transform the model it is given in place: each gets its own copy
    static = nncf.quantize(model.clone(), calibration, model_type=nncf.ModelType.TRANSFORMER)
    weights = nncf.compress_weights(model.clone(), mode=nncf.CompressWeightsMode.INT8_ASYM)
    core = ov.Core()
    props = {"INFERENCE_NUM_THREADS": 2, "INFERENCE_PRECISION_HINT": "f32",
             "PERFORMANCE_HINT": "LATENCY"}  # fmt: skip
    compiled = {name: core.compile_model(m, "CPU", props)
                for name, m in (("ov_fp32", model), ("ov_int8_static", static),
                                ("ov_int8_weights", weights))}  # fmt: skip
    ort = bi.for_inference("int8").passage

    def torch_run(encoder):
        with torch.inference_mode():
            return np.concatenate([encoder(b).float().numpy() for b in batches])

    def ov_run(c):
        return np.concatenate([c({k: b[k].numpy() for k in INPUTS})[0] for b in batches])

    paths = {"tokenise": tokenise, "torch_fp32": lambda: torch_run(bi.passage),
             "ort_int8": lambda: torch_run(ort)}  # fmt: skip
    paths.update({name: (lambda c=c: ov_run(c)) for name, c in compiled.items()})
    for run in paths.values():  # warm-up
        run()
    seconds: dict[str, list[float]] = {k: [] for k in paths}
    vectors: dict[str, np.ndarray] = {}
    for _ in range(ROUNDS):
        for name, run in paths.items():
            t0 = time.perf_counter()
            vectors[name] = run()
            seconds[name].append(time.perf_counter() - t0)
    tok = statistics.median(seconds.pop("tokenise"))
    base = statistics.median(seconds["torch_fp32"])
    result = {
        "emulated_cpu_kind": os.environ.get("CPUID_MASK"),
        "passages": len(order), "openvino": ov.get_version(), "nncf": nncf.__version__,
        "paths": {name: {"model_only_over_fp32": round(base / statistics.median(s), 2),
                         "with_tokenising_over_fp32": round((base + tok) / (statistics.median(s) + tok), 2),
                         "min_cosine_to_fp32": round(min_cosine(vectors[name], vectors["torch_fp32"]), 4)}
                  for name, s in seconds.items()},
    }  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
