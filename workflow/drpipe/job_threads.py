"""The threads each job gets: config ``threads``, a number or ``auto``.

``auto`` is one thread per job on a CPU without fast bf16 (neither AMX nor AVX512-BF16, where
``precision: auto`` runs fp32) and two on one with it. On the 2-core machines measured, two
one-thread jobs side by side took 0.79x the time of one two-thread job at a time with AVX2's
kernels (emulated) and 0.76x with AVX-512's (no bf16), the tables the same but for one cell of
65 (0.01 points); on a CPU with AVX512-BF16 one thread per job gained nothing and its bf16
kernels changed the trained rows (docs/measured.md). Resolved where the Snakefile reads the
config (workflow/rules/common.smk), so the jobs get a number; the thread count is in each
training report, and ``drpipe verify`` allows a tolerance where it differs from the
reference's.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from drpipe.environment import cpu_info

AUTO = "auto"
# Threads per job by whether the CPU has bf16 matrix instructions; and for a job that runs by
# itself (the reader's warm start and training: nothing else is ready beside them, and at one
# thread the warm start, ~17 minutes at mini in fp32, would leave a core idle that long).
WITH_FAST_BF16, WITHOUT, ALONE = 2, 1, 2
# drpipe.precision.cpu_has_fast_bf16's test, not called here: that module imports torch, about
# a second of every Snakemake start (its move would change every job's code hash).
FAST_BF16_FLAGS = frozenset({"amx_bf16", "avx512_bf16"})


def job_threads(setting: int | str, flags: Iterable[str] | None = None, alone: bool = False) -> int:
    """The threads of a job for the config value ``setting`` on a CPU with ``flags`` (default:
    this machine's, from /proc/cpuinfo, or none under an emulated CPU kind); ``alone``: of a
    job that runs by itself."""
    if setting != AUTO:
        return int(setting)
    if alone:
        return ALONE
    if flags is None and os.environ.get("CPUID_MASK"):
        # benchmarks/emulate_cpu.py masks CPUID, not /proc/cpuinfo, and each of its kinds
        # (AVX2, AVX-512, AVX-512 VNNI) hides bf16 and AMX: the kernels that run are fp32's
        flags = ()
    have = set(cpu_info()["flags"] if flags is None else flags)
    return WITH_FAST_BF16 if have & FAST_BF16_FLAGS else WITHOUT
