"""int8 forward passes on a CPU: dynamic quantization of a model's matrix products (weights per
output channel, activations per batch at run time).

Two implementations; :func:`quantize_int8` takes ONNX Runtime's when it is installed (it is in
the package's dependencies), PyTorch's otherwise, and ``drpipe.precision.int8_backend`` names the
one that runs (every report of an int8 pass records it). ONNX Runtime's was chosen by measurement
(MiniLM, 256 real SQuAD passages at 128 tokens, batch 64, 2 cores, ``benchmarks/bench_encode.py``):
the same speed as PyTorch's (2.1x the fp32 loop) with a quarter of its error, min / mean cosine
to fp32 0.989 / 0.994 against 0.960 / 0.981. PyTorch's x86 kernels quantize activations to 7
bits (``reduce_range``, against overflow in the u8 x s8 products); ONNX Runtime's use all 8.

The weights' width (7 bits where the products saturate: x86 without VNNI) is decided in
``drpipe.precision``; these figures are of a CPU with VNNI.

The model is exported to ONNX (TorchScript exporter) at its first batch, which fixes the input
names, quantized, and loaded into an in-memory session; the files live in a temporary folder
only while that happens. Activations are quantized per batch, so an int8 output depends
slightly on the batch it was computed in.
"""

from __future__ import annotations

import copy
import logging
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

from drpipe.precision import has_onnxruntime, int8_backend, weight_bits

log = logging.getLogger(__name__)


def quantize_int8(model: nn.Module, outputs: Sequence[str], bits: int | None = None) -> nn.Module:
    """An int8 copy of ``model`` (a Hugging Face model called with keyword tensors) for a CPU.
    Its forward takes the same keywords and returns an object with the ``outputs`` fields
    (e.g. ``last_hidden_state``); ``model`` is left as it is. ``bits``: ONNX Runtime's weight
    width (``drpipe.precision.weight_bits``; default this CPU's); PyTorch's has its own."""
    if has_onnxruntime():
        return OnnxInt8(model, outputs, bits)
    return torch_quantize_int8(model)


def torch_quantize_int8(module: nn.Module) -> nn.Module:
    """PyTorch's dynamic quantization of a copy of ``module``'s Linear layers."""
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    with warnings.catch_warnings():
        # torch.ao's eager quantization warns that it is deprecated in favour of torchao
        # (not installed here); the API is what torch 2.x ships and tests exercise.
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        return quantize_dynamic(
            copy.deepcopy(module).eval(), {nn.Linear: per_channel_dynamic_qconfig},
            dtype=torch.qint8,
        )  # fmt: skip


class _Export(nn.Module):
    """``model`` as positional tensors in, the named outputs out (what the exporter traces)."""

    def __init__(self, model: nn.Module, inputs: Sequence[str], outputs: Sequence[str]):
        super().__init__()
        self.model, self.inputs, self.outputs = model, tuple(inputs), tuple(outputs)

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.model(**dict(zip(self.inputs, args, strict=True)), return_dict=True)
        return tuple(getattr(out, name) for name in self.outputs)


class OnnxInt8(nn.Module):
    """``model``'s forward pass in ONNX Runtime, int8 (see the module's docstring)."""

    def __init__(self, model: nn.Module, outputs: Sequence[str], bits: int | None = None):
        super().__init__()
        self.outputs, self.bits = tuple(outputs), weight_bits() if bits is None else bits
        self.config = getattr(model, "config", None)
        self._source: nn.Module | None = copy.deepcopy(model).float().eval()
        # Exported with eager attention, not SDPA: ONNX Runtime fuses the eager graph's
        # attention, and the quantized model ran 13-31% faster for it (bench_encode, CPU kinds
        # emulated by benchmarks/emulate_cpu.py: AVX2 1.17x -> 1.51x the fp32 loop, AVX-512
        # VNNI 1.27x -> 1.67x); the same attention, computed in another order.
        if hasattr(self._source, "set_attn_implementation"):
            self._source.set_attn_implementation("eager")
        self._session = None
        self._inputs: tuple[str, ...] = ()

    def forward(self, **kwargs) -> SimpleNamespace:
        feeds = {k: v for k, v in kwargs.items() if isinstance(v, torch.Tensor)}
        if self._session is None:
            self._build(feeds)
        if set(feeds) != set(self._inputs):
            raise ValueError(f"int8 model built for inputs {sorted(self._inputs)}, "
                             f"called with {sorted(feeds)}")  # fmt: skip
        arrays = {k: feeds[k].detach().cpu().numpy() for k in self._inputs}
        values = self._session.run(list(self.outputs), arrays)
        return SimpleNamespace(
            **{n: torch.from_numpy(v) for n, v in zip(self.outputs, values, strict=True)}
        )

    def _build(self, feeds: dict[str, torch.Tensor]) -> None:
        import onnxruntime as ort
        from onnxruntime.quantization import QuantType, quantize_dynamic

        names = tuple(feeds)
        wrapper = _Export(self._source, names, self.outputs).eval()
        axes = {k: {d: f"{k}_{d}" for d in range(v.dim())} for k, v in feeds.items()}
        with tempfile.TemporaryDirectory(prefix="drpipe-int8-") as tmp:
            fp32, int8 = Path(tmp) / "model.onnx", Path(tmp) / "model.int8.onnx"
            with warnings.catch_warnings(), torch.no_grad():
                warnings.simplefilter("ignore")  # the exporter's tracer warnings
                torch.onnx.export(
                    wrapper, tuple(feeds[k] for k in names), str(fp32), input_names=list(names),
                    output_names=list(self.outputs), dynamic_axes=axes, opset_version=17,
                    dynamo=False,
                )  # fmt: skip
            root = logging.getLogger()
            level = root.level
            root.setLevel(logging.ERROR)  # quantize_dynamic's advice to pre-process the graph
            try:
                quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8,
                                 per_channel=True, reduce_range=self.bits == 7)  # fmt: skip
            finally:
                root.setLevel(level)
            options = ort.SessionOptions()
            options.intra_op_num_threads = torch.get_num_threads()
            options.inter_op_num_threads = 1
            options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            self._session = ort.InferenceSession(str(int8), options,
                                                 providers=["CPUExecutionProvider"])  # fmt: skip
        self._inputs = names
        self._source = None  # the fp32 copy is no longer needed
        log.info("int8 (%s): %s exported and quantized, inputs %s",
                 int8_backend(self.bits), type(wrapper.model).__name__, ", ".join(names))  # fmt: skip
