"""Probe for issue 20: does ONNX Runtime's static int8 (calibrated activation scales) reach 2x
the fp32 loop where the pipeline's dynamic int8 does not?

Not part of the pipeline or its tests; it needs only the package's own dependencies. Like
``probe_openvino.py``, it times the passage encoder's forward passes alone on already
tokenised batches (the tokenising's share is added to every path for the second ratio), in one
process, rounds alternating, medians:

- ``torch_fp32``: the pipeline's fp32 encoder (SDPA attention), the baseline;
- ``ort_int8``: the pipeline's int8 path (``BiEncoder.for_inference("int8")``: dynamic int8);
- ``ort_fp32``: the same export (eager attention) in ONNX Runtime, not quantized;
- ``ort_static``: static int8 in QDQ form, u8 activations x s8 weights per output channel
  (weights 7-bit where the CPU lacks VNNI, as the pipeline's), the products with a constant
  weight only; scales calibrated (min-max) on the first two batches of these passages, corpus
  text, never questions;
- ``ort_static_attention``: the same, the attention's two products quantized too;
- ``ort_static_u8u8``: ``ort_static`` with u8 weights (8-bit; the kernels ONNX Runtime
  recommends on x86 without VNNI, whose products cannot saturate).

Run as another kind of CPU under ``benchmarks/emulate_cpu.py KIND --``. Prints one JSON line
(``probe_paths.measure``: each path's speed over ``torch_fp32`` and its cosines to it).

    python benchmarks/probe_ort_static.py [--passages 256] [--out FILE]
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import probe_paths as harness  # noqa: E402


def variants(calibration: list[dict]) -> dict[str, type]:
    """The ONNX Runtime paths beside the pipeline's: ``OnnxInt8`` with another quantization."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    from drpipe.quantize import OnnxInt8

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = iter(calibration)

        def get_next(self) -> dict | None:
            return next(self.batches, None)

    def variant(quantize) -> type:
        """``OnnxInt8`` with ``quantize(fp32, out, bits)`` in place of its dynamic
        quantization (which its build imports from ``onnxruntime.quantization`` when it runs)."""

        class Variant(OnnxInt8):
            def _build(self, feeds: dict) -> None:
                import onnxruntime.quantization as q

                saved = q.quantize_dynamic
                q.quantize_dynamic = lambda fp32, out, **_: quantize(fp32, out, self.bits)
                try:
                    super()._build(feeds)
                finally:
                    q.quantize_dynamic = saved

        return Variant

    def static(weights: QuantType, const_only: bool) -> type:
        def quantize(fp32: str, out: str, bits: int) -> None:
            quantize_static(
                fp32, out, Reader(), quant_format=QuantFormat.QDQ,
                op_types_to_quantize=["MatMul", "Gemm"], per_channel=True,
                reduce_range=bits == 7 and weights == QuantType.QInt8,
                activation_type=QuantType.QUInt8, weight_type=weights,
                calibrate_method=CalibrationMethod.MinMax,
                extra_options={"MatMulConstBOnly": const_only},
            )  # fmt: skip

        return variant(quantize)

    return {"ort_fp32": variant(lambda fp32, out, bits: shutil.copyfile(fp32, out)),
            "ort_static": static(QuantType.QInt8, True),
            "ort_static_attention": static(QuantType.QInt8, False),
            "ort_static_u8u8": static(QuantType.QUInt8, True)}  # fmt: skip


def main() -> None:
    args = harness.parse_args(__doc__)
    import onnxruntime
    import torch

    from drpipe.encoders import HIDDEN
    from drpipe.precision import int8_backend

    torch.set_num_threads(2)
    bi = harness.load()
    tokenise = harness.tokeniser(bi, args.passages)
    batches = tokenise()
    calibration = [{k: b[k].numpy() for k in harness.INPUTS} for b in batches[:2]]
    encoders = {"torch_fp32": bi.passage, "ort_int8": bi.for_inference("int8").passage}
    for name, cls in variants(calibration).items():
        encoders[name] = bi.with_models(lambda m, cls=cls: cls(m, HIDDEN)).passage
    paths = {"tokenise": tokenise,
             **{n: (lambda e=e: harness.torch_run(e, batches)) for n, e in encoders.items()}}  # fmt: skip
    result = {
        "passages": args.passages,
        "onnxruntime": onnxruntime.__version__, "int8_backend": int8_backend(),
        "paths": harness.measure(paths),
    }  # fmt: skip
    harness.report(result, args.out)


if __name__ == "__main__":
    main()
