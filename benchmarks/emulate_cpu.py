"""Run a command as if on an older kind of x86 CPU, for the libraries' kernel dispatch.

    python benchmarks/emulate_cpu.py KIND -- COMMAND [ARG ...]
    python benchmarks/emulate_cpu.py avx2 -- python benchmarks/bench_encode.py --paths-only

KIND: ``avx512_vnni`` (AVX-512 with VNNI, no bf16 or AMX), ``avx512`` (AVX-512 without VNNI)
or ``avx2`` (AVX2 and FMA only). ``benchmarks/cpuid_mask.c`` is compiled (gcc, once per
source, in the temporary folder, ``$TMPDIR/drpipe-cpuid-mask/``) and preloaded: CPUID faults and is
answered without that kind's features, so torch, oneDNN, MKL and ONNX Runtime choose the
kernels they would choose there, and ``drpipe.environment.cpu_flags`` (which follows torch's
CPUID view) resolves ``auto`` as there. What it does not emulate: the other kind's cores,
caches and clocks; the kernels run on this CPU. A ratio of two paths measured so (say int8
over fp32) says which kernels are faster per core where the vector units are alike, not the
other machine's passages/s; it is labelled emulated wherever it is reported.

A whole run can be emulated (``emulate_cpu.py avx2 -- make test``): a process that installs its
own SIGSEGV handler (pytest's faulthandler, Anserini's JVM) keeps CPUID answered, as the mask
chains that handler behind its own (see ``cpuid_mask.c``).

Needs Linux on x86-64 with CPUID faulting (``cpuid_fault`` in /proc/cpuinfo; most Intel CPUs
since Ivy Bridge, and the VMs on them) and gcc; says so and exits 2 otherwise.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("cpuid_mask.c")
KINDS = ("avx512_vnni", "avx512", "avx2")


def unavailable() -> str | None:
    """Why CPU kinds cannot be emulated here, or None when they can."""
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        return f"needs Linux on x86-64, not {platform.system()} on {platform.machine()}"
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError as exc:
        return f"cannot read /proc/cpuinfo: {exc}"
    if "cpuid_fault" not in flags:
        return "this CPU (or its hypervisor) has no CPUID faulting (no cpuid_fault flag)"
    if shutil.which("gcc") is None:
        return "needs gcc to build benchmarks/cpuid_mask.c"
    return None


def library(build_dir: Path | None = None) -> Path:
    """The compiled mask library, built once per source (named by its hash)."""
    build_dir = build_dir or Path(tempfile.gettempdir()) / "drpipe-cpuid-mask"
    source = SOURCE.read_bytes()
    lib = build_dir / f"cpuid_mask-{hashlib.sha256(source).hexdigest()[:12]}.so"
    if not lib.exists():
        build_dir.mkdir(parents=True, exist_ok=True)
        tmp = lib.with_suffix(f".{os.getpid()}.tmp")
        subprocess.run(
            ["gcc", "-O2", "-shared", "-fPIC", "-o", str(tmp), str(SOURCE), "-ldl"], check=True
        )
        tmp.replace(lib)
    return lib


def environment(kind: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default this process's environment) with the mask for ``kind`` preloaded."""
    if kind not in KINDS:
        raise ValueError(f"unknown CPU kind {kind!r}: one of {', '.join(KINDS)}")
    env = dict(os.environ if base is None else base)
    preload = " ".join(filter(None, [str(library()), env.get("LD_PRELOAD")]))
    return {**env, "LD_PRELOAD": preload, "CPUID_MASK": kind}


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] not in KINDS or argv[1] != "--":
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    why = unavailable()
    if why:
        print(f"emulate_cpu: cannot emulate a CPU kind here: {why}", file=sys.stderr)
        return 2
    env = environment(argv[0])
    print(f"emulate_cpu: {argv[0]} (CPUID masked; kernels run on this CPU)", file=sys.stderr)
    rc = subprocess.run(argv[2:], env=env, check=False).returncode
    return 128 - rc if rc < 0 else rc  # killed by a signal: the shell's 128 + signal number


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
