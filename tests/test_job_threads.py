"""Config ``threads``: a number, or ``auto`` (one per job without fast bf16, two with it),
resolved to a number before any rule reads it (drpipe.job_threads, workflow/rules/common.smk;
every dry run of the default config has its rules declare that number: Snakemake refuses any
other `threads:`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from drpipe.config import ConfigError, load_workflow_config
from drpipe.environment import cpu_info
from drpipe.job_threads import FAST_BF16_FLAGS, job_threads
from drpipe.runtime import runtime_paths

REPO = Path(__file__).resolve().parents[1]


def test_auto_is_one_thread_without_fast_bf16_and_two_with_it():
    assert job_threads("auto", ["avx2", "avx512f", "avx512_vnni"]) == 1
    assert job_threads("auto", ["avx2"]) == job_threads("auto", []) == 1
    assert job_threads("auto", ["avx512f", "avx512_bf16"]) == 2
    assert job_threads("auto", ["amx_tile", "amx_bf16"]) == 2
    assert job_threads(3, ["amx_bf16"]) == job_threads("3") == 3
    # A job that runs by itself (the reader's warm start and training) keeps both cores.
    assert job_threads("auto", ["avx2"], alone=True) == 2
    assert job_threads(3, ["avx2"], alone=True) == 3
    # this machine's own flags; an emulated kind (benchmarks/emulate_cpu.py, which cpu_info
    # records) has no bf16 whatever /proc/cpuinfo says
    info = cpu_info()
    fast = bool(FAST_BF16_FLAGS & set(info["flags"])) and "emulated_kind" not in info
    assert job_threads("auto") == (2 if fast else 1)


def test_auto_under_an_emulated_cpu_kind_is_one_thread(monkeypatch):
    # benchmarks/emulate_cpu.py masks CPUID, not /proc/cpuinfo: its kinds have no bf16 or AMX
    monkeypatch.setenv("CPUID_MASK", "avx512_vnni")
    assert job_threads("auto") == 1
    assert job_threads("auto", ["amx_bf16"]) == 2  # flags given are taken as they are
    assert job_threads("auto", alone=True) == 2


def test_the_default_is_auto_and_the_schema_takes_a_number_or_auto_only():
    assert load_workflow_config(REPO)["threads"] == "auto"
    assert load_workflow_config(REPO, {"threads": 3})["threads"] == 3
    assert ("threads",) in runtime_paths()  # reruns nothing (x-runtime)
    # each error names the key and the form it breaks (a number from 1, or the word auto)
    for bad, says in (("two", "'two' does not match '^auto$'"), (0, "0 is less than the minimum of 1"),
                      ("Auto", "'Auto' does not match '^auto$'"),
                      (1.5, "1.5 is not of type 'integer', 'string'")):  # fmt: skip
        with pytest.raises(ConfigError) as err:
            load_workflow_config(REPO, {"threads": bad})
        assert f"key threads: {says}" in str(err.value)
