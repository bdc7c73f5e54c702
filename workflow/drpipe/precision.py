"""The precision of a forward pass: the path it runs (fp32, bf16, int8), how ``auto`` picks one
by the machine, the int8 path's weight width, and training's bf16 switch. Policy only: the
passes themselves run in ``drpipe.encoders`` (bf16 autocast) and ``drpipe.quantize`` (int8).

``bf16`` settings (training): ``"on"``, ``"off"`` or ``"auto"`` (on for CUDA devices with bf16
support and for CPUs with AMX or AVX512-BF16; autocast keeps fp32 master weights).

``precision`` settings (forward-only passes: corpus and question encoding, reader inference):
``"fp32"``, ``"bf16"`` (autocast), ``"int8"`` (dynamic quantization, weights per output
channel; CPU only; ONNX Runtime's, else PyTorch's: ``drpipe.quantize``) or ``"auto"``: on
CUDA bf16 where supported, on a CPU the path ``AUTO_RULES`` names for its flags (the fastest
that ``benchmarks/bench_encode.py`` measured on that kind of CPU among the paths within the
accuracy bound, ``AUTO_PATHS``).
``resolve_precision`` says which path and why; every encoding report records both.

int8 weights: on an x86 CPU without VNNI, ONNX Runtime multiplies u8 activations by s8 weights
with instructions whose int16 sums saturate; there weights are quantized to 7 bits (its
``reduce_range``, the remedy its documentation gives), and the backend's name says so. The
figures measured in ``drpipe.quantize`` are of a CPU with VNNI. The width can be set
(``int8_weight_bits``: 7 or 8, ``auto`` as above): 7 on a CPU with VNNI measures the width's
cost; a CPU without VNNI also runs other kernels, whose vectors differ slightly (its accuracy is
measured by emulating it, ``benchmarks/emulate_cpu.py``); 8 where products saturate is allowed
and said.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

from drpipe.environment import cpu_flags

# Precision paths of a forward-only pass, and the setting that picks one by the machine.
PRECISIONS = ("fp32", "bf16", "int8")
PRECISION_SETTINGS = (*PRECISIONS, "auto")
# Paths within the accuracy bound (top-20 and top-100 within 0.2 points of fp32 on the `squad`
# scale, issue 20) that `auto` picks. Measured on the squad scale (DPR, 10,570 questions,
# paired; docs/measured.md): bf16 top-20 -0.01, top-100 +0.01; PyTorch's int8 -0.83 / -0.60
# (outside). int8 through ONNX Runtime sits on the bound: -0.08 / -0.10 on one checkpoint, and
# on another, each CPU kind's own kernels (emulated), -0.16 / -0.21 (AVX-512 VNNI, 8-bit
# weights), -0.12 / -0.21 (AVX-512, 7-bit), -0.18 / -0.21 (AVX2, 7-bit), top-100's loss
# significant; so it stays an explicit choice (`precision: int8`), which
# ``resolve_precision(allowed=...)`` also lets a caller admit.
AUTO_PATHS = ("bf16", "fp32")
# What `auto` picks on a CPU, first matching rule wins: (kind of CPU, any of these
# /proc/cpuinfo flags, the paths by measured speed, fastest first). Measured with MiniLM on
# real passages, benchmarks/bench_encode.py (paths over the plain fp32 loop, same run); the
# kinds without bf16 on an AMX CPU whose CPUID was masked (benchmarks/emulate_cpu.py: those
# kinds' kernels on this core, not their machines; docs/measured.md#cpu-kinds-emulated).
AUTO_RULES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    # AMX: bf16 autocast 1.8-3.1x, int8 (ONNX Runtime) 1.7x.
    ("amx", ("amx_bf16",), ("bf16", "int8", "fp32")),
    # Quiet AMD EPYC: int8 2.17x, bf16 1.95x in steady state, but each job's ~4 s export made
    # the mini run's encoding 1.22x slower in int8 than in bf16: bf16 first.
    ("avx512_bf16", ("avx512_bf16",), ("bf16", "int8", "fp32")),
    # AVX-512 with VNNI, no bf16 (emulated): int8 1.67x (8-bit weights, the vectors of this
    # CPU's int8 exactly), fp32 0.95x, bf16 0.33x: `auto` runs fp32 (int8 is not in AUTO_PATHS).
    ("vnni", ("avx512_vnni",), ("int8", "fp32", "bf16")),
    # AVX-VNNI without AVX-512 (Alder Lake and later cores): not measured.
    ("avx_vnni", ("avx_vnni",), ("fp32", "bf16")),
    # x86 without VNNI, AVX-512 or AVX2 only (emulated): int8 with 7-bit weights 1.22x on
    # AVX-512, 1.51x on AVX2; bf16 0.19-0.31x: `auto` runs fp32.
    ("x86", ("avx2",), ("int8", "fp32")),
    ("other", (), ("fp32",)),
)


def cpu_has_fast_bf16(flags: Iterable[str] | None = None) -> bool:
    """True when the CPU has bf16 matrix instructions (AMX or AVX512-BF16)."""
    flags = cpu_flags() if flags is None else set(flags)
    return "amx_bf16" in flags or "avx512_bf16" in flags


def cpu_kind(flags: Iterable[str]) -> tuple[str, tuple[str, ...]]:
    """The ``AUTO_RULES`` entry these CPU flags match: (kind, paths fastest first)."""
    have = set(flags)
    for kind, need, ranked in AUTO_RULES:
        if not need or have & set(need):
            return kind, ranked
    raise AssertionError("AUTO_RULES ends with a rule that matches every CPU")


@dataclass(frozen=True)
class Precision:
    """A resolved precision: the path that runs, the setting that chose it, and why."""

    path: str
    setting: str
    reason: str
    int8_bits: int | None = None  # ONNX Runtime's weight width, on the int8 path only

    @property
    def label(self) -> str:
        """The path as a table column says it (int8 with 7-bit weights apart): what its report
        says, read as the tables read reports."""
        from drpipe.tables.precision import report_precision

        return report_precision(self.report())

    def report(self) -> dict[str, str]:
        out = {"precision": self.path, "precision_setting": self.setting,
               "precision_reason": self.reason}  # fmt: skip
        if self.path == "int8":  # which implementation's numbers these are
            out["precision_backend"] = int8_backend(self.int8_bits)
        return out


def resolve_precision(
    setting: str,
    device: torch.device | str,
    flags: Iterable[str] | None = None,
    allowed: Sequence[str] = AUTO_PATHS,
    int8_bits: str | int = "auto",
) -> Precision:
    """The forward-pass path for ``setting`` (fp32 | bf16 | int8 | auto) on ``device``.

    ``flags``: the CPU flags to decide by (default: this CPU's, ``cpu_flags()``; tests fake
    them). ``allowed``: the paths ``auto`` may pick (those measured within the accuracy bound
    for this pass). int8 is dynamic quantization, which runs on CPUs only: asking for it on a
    GPU is an error; ``auto`` never picks it there, nor where ONNX Runtime is not installed
    (PyTorch's int8 is outside the bound). ``int8_bits``: the int8 path's weight width
    (:func:`weight_bits`), checked whatever the path.
    """
    device = torch.device(device)
    setting = str(setting).lower()
    if setting not in PRECISION_SETTINGS:
        raise ValueError(f"precision must be one of {', '.join(PRECISION_SETTINGS)}, "
                         f"not {setting!r}")  # fmt: skip
    if setting == "int8" and device.type != "cpu":
        raise ValueError(f"precision int8 (dynamic quantization) runs on CPUs only, not on "
                         f"{device}: use bf16 or fp32 there")  # fmt: skip
    bits = weight_bits(int8_bits, None if flags is None else frozenset(flags))
    if setting != "auto":
        return Precision(setting, setting, "as configured", bits if setting == "int8" else None)
    if device.type == "cuda":
        ok = torch.cuda.is_bf16_supported()
        return Precision("bf16" if ok else "fp32", setting,
                         f"auto on {device}: bf16 {'supported' if ok else 'not supported'}")  # fmt: skip
    flags = cpu_flags() if flags is None else frozenset(flags)
    kind, ranked = cpu_kind(flags)
    path = next((p for p in ranked if p in allowed and (p != "int8" or has_onnxruntime())),
                "fp32")  # fmt: skip
    named = ", ".join(sorted(f for f in flags if f in {f for r in AUTO_RULES for f in r[1]}))
    return Precision(path, setting, f"auto on a CPU of kind {kind} (flags: {named or 'none'})",
                     bits if path == "int8" else None)  # fmt: skip


def use_bf16(setting: str | bool, device: torch.device | str) -> bool:
    """Resolve a training ``bf16`` setting ("auto" | "on" | "off", or a bool) for ``device``."""
    device = torch.device(device)
    if isinstance(setting, bool):
        return setting
    setting = str(setting).lower()
    if setting in ("on", "true"):
        return True
    if setting in ("off", "false"):
        return False
    if setting != "auto":
        raise ValueError(f"bf16 must be 'auto', 'on' or 'off', not {setting!r}")
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu" and cpu_has_fast_bf16()


# The int8 path: which implementation runs it, and its weights' width.
def has_onnxruntime() -> bool:
    return (importlib.util.find_spec("onnxruntime") is not None
            and importlib.util.find_spec("onnx") is not None)  # fmt: skip


X86_FLAGS = frozenset({"sse4_2", "avx", "avx2", "avx512f"})
VNNI_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})


def saturates(flags: frozenset[str]) -> bool:
    """Whether ONNX Runtime's int8 products can saturate on a CPU with these flags: x86
    without VNNI."""
    return bool(flags & X86_FLAGS) and not flags & VNNI_FLAGS


WEIGHT_BITS = ("auto", 7, 8)


def reduce_range() -> bool:
    """7-bit weights for ONNX Runtime's int8 on this CPU (see the module's docstring)."""
    return saturates(cpu_flags())


def weight_bits(setting: str | int = "auto", flags: frozenset[str] | None = None) -> int:
    """The width of ONNX Runtime's int8 weights for ``setting`` (``WEIGHT_BITS``) on a CPU
    with ``flags`` (default this one's)."""
    if str(setting).lower() == "auto":
        return 7 if (reduce_range() if flags is None else saturates(flags)) else 8
    if str(setting) not in ("7", "8"):
        raise ValueError(f"int8_weight_bits must be one of auto, 7, 8, not {setting!r}")
    return int(setting)


def int8_backend(bits: int | None = None) -> str:
    """The implementation ``drpipe.quantize.quantize_int8`` uses here, with its version and,
    for ONNX Runtime, the weights' width where it is not the full 8 bits or differs from this
    CPU's."""
    if not has_onnxruntime():
        return f"torch {torch.__version__} (onnxruntime not installed)"
    name = f"onnxruntime {importlib.metadata.version('onnxruntime')}"
    native = 7 if reduce_range() else 8
    bits = native if bits is None else bits
    if bits == native:
        return name + (", 7-bit weights (x86 without VNNI)" if bits == 7 else "")
    if bits == 7:
        return name + ", 7-bit weights (as configured; this CPU has VNNI)"
    return name + ", 8-bit weights (as configured; products can saturate on this CPU)"
