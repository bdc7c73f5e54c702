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

Run as another kind of CPU under ``benchmarks/emulate_cpu.py KIND --``. Prints one JSON line
(``probe_paths.measure``: each path's speed over ``torch_fp32`` and its cosines to it).

    python benchmarks/probe_openvino.py [--passages 256] [--out FILE]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import probe_paths as harness  # noqa: E402


def main() -> None:
    args = harness.parse_args(__doc__)
    import nncf
    import openvino as ov
    import torch

    torch.set_num_threads(2)
    bi, bi_eager = harness.load(), harness.load(eager=True)
    tokenise = harness.tokeniser(bi, args.passages)
    batches = tokenise()

    class Inputs(torch.nn.Module):  # positional inputs for the converter
        def __init__(self, encoder):
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.encoder({"input_ids": input_ids, "attention_mask": attention_mask,
                                 "token_type_ids": token_type_ids})  # fmt: skip

    example = {k: batches[0][k] for k in harness.INPUTS}
    shapes = [(k, [-1, -1], ov.Type.i64) for k in harness.INPUTS]
    model = ov.convert_model(Inputs(bi_eager.passage), example_input=example, input=shapes)
    calibration = nncf.Dataset([{k: b[k].numpy() for k in harness.INPUTS} for b in batches[:2]])
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

    def ov_run(c):
        return np.concatenate([c({k: b[k].numpy() for k in harness.INPUTS})[0] for b in batches])

    paths = {"tokenise": tokenise, "torch_fp32": lambda: harness.torch_run(bi.passage, batches),
             "ort_int8": lambda: harness.torch_run(ort, batches)}  # fmt: skip
    paths.update({name: (lambda c=c: ov_run(c)) for name, c in compiled.items()})
    result = {
        "passages": args.passages,
        "openvino": ov.get_version(), "nncf": nncf.__version__, "paths": harness.measure(paths),
    }  # fmt: skip
    harness.report(result, args.out)


if __name__ == "__main__":
    main()
