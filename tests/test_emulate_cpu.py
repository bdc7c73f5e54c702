"""benchmarks/emulate_cpu.py: a command run as on an older x86 CPU sees that CPU's features in
CPUID (torch's kernel dispatch, and ``drpipe.environment.cpu_flags``, hence ``auto``); a real
segmentation fault is still one; and ``cpu_flags`` follows torch's CPUID view."""

from __future__ import annotations

import gzip
import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from drpipe import environment
from drpipe.environment import cpu_info

REPO = Path(__file__).resolve().parents[1]
EMULATE = REPO / "benchmarks" / "emulate_cpu.py"
sys.path.insert(0, str(EMULATE.parent))
import emulate_cpu  # noqa: E402

WHY = emulate_cpu.unavailable()
needs_cpuid_faulting = pytest.mark.skipif(WHY is not None, reason=f"emulate_cpu: {WHY}")

PROBE = """
import json, torch
from drpipe.environment import cpu_flags
from drpipe.precision import resolve_precision, weight_bits
print(json.dumps({"isa": torch.backends.cpu.get_cpu_capability(), "flags": sorted(cpu_flags()),
                  "auto": resolve_precision("auto", "cpu").reason, "bits": weight_bits()}))
"""


def run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    return subprocess.run([sys.executable, str(EMULATE), *args], env=env, capture_output=True,
                          text=True, timeout=300, check=False)  # fmt: skip


@needs_cpuid_faulting
@pytest.mark.parametrize(
    ("kind", "isa", "kept", "gone", "auto_kind", "bits"),
    [
        ("avx2", "AVX2", {"avx2", "fma"},
         {"avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_bf16", "amx_int8"}, "x86", 7),
        ("avx512_vnni", "AVX512", {"avx2", "avx512f", "avx512_vnni"},
         {"avx512_bf16", "avx_vnni", "amx_bf16", "amx_int8", "amx_tile"}, "vnni", 8),
        ("avx512", "AVX512", {"avx2", "avx512f"},
         {"avx512_vnni", "avx512_bf16", "avx_vnni", "amx_bf16"}, "x86", 7),
    ],
)  # fmt: skip
def test_emulated_kind_is_what_torch_and_auto_see(kind, isa, kept, gone, auto_kind, bits,
                                                  tmp_path):  # fmt: skip
    native = set(cpu_info()["flags"])
    if not kept <= native:  # masking only takes features away
        pytest.skip(f"this CPU lacks {sorted(kept - native)}, which kind {kind} keeps")
    proc = run([kind, "--", sys.executable, "-c", PROBE], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert seen["isa"] == isa
    assert kept <= set(seen["flags"]) and not gone & set(seen["flags"])
    assert f"kind {auto_kind}" in seen["auto"]
    assert seen["bits"] == bits
    assert f"emulate_cpu: {kind}" in proc.stderr
    # the library was built in the temporary folder, not in the checkout
    assert list((tmp_path / "drpipe-cpuid-mask").glob("cpuid_mask-*.so"))


@needs_cpuid_faulting
def test_a_real_segfault_is_not_swallowed(tmp_path):
    crash = "import ctypes; ctypes.string_at(0)"
    proc = run(["avx2", "--", sys.executable, "-c", crash], tmp_path)
    assert proc.returncode == 128 + 11  # SIGSEGV, as a shell reports it
    # with the process's own handler (faulthandler): that handler gets the fault, then it dies
    proc = run(["avx2", "--", sys.executable, "-X", "faulthandler", "-c", crash], tmp_path)
    assert proc.returncode == 128 + 11
    assert "Fatal Python error: Segmentation fault" in proc.stderr


@needs_cpuid_faulting
def test_a_process_with_its_own_segv_handler_keeps_the_emulated_kind(tmp_path):
    """pytest enables faulthandler, the JVM installs its own SIGSEGV handler: a CPUID after
    that (torch reads it lazily) must still be answered as the emulated kind, not end the
    process, so that a whole run or test suite can be emulated."""
    probe = (
        "import faulthandler; faulthandler.enable()\n"
        "import torch; x = torch.randn(64, 64); (x @ x).sum().item()\n"
        "print(torch.backends.cpu.get_cpu_capability())"
    )
    proc = run(["avx2", "--", sys.executable, "-c", probe], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["AVX2"]


def test_bad_arguments_say_how(tmp_path):
    for args in (["avx9", "--", "true"], ["avx2", "true"], ["avx2"]):
        proc = run(args, tmp_path)
        assert proc.returncode == 2 and "emulate_cpu.py KIND -- COMMAND" in proc.stderr
    with pytest.raises(ValueError, match="unknown CPU kind 'sse2'"):
        emulate_cpu.environment("sse2")


def test_cpu_flags_follow_torchs_cpuid_view(monkeypatch):
    proc = {"flags": ["avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "asimd"]}
    monkeypatch.setattr(environment, "cpu_info", lambda: proc)
    # CPUID (as torch reads it) lacks bf16 and AMX: they are not this process's flags
    caps = {"avx2": True, "fma3": True, "avx512_f": True, "avx512_bf16": False, "amx_bf16": False}
    monkeypatch.setattr(environment, "torch_capabilities", lambda: caps)
    environment.cpu_flags.cache_clear()
    try:
        assert environment.cpu_flags() == {"avx2", "fma", "avx512f", "asimd"}
        # torch without a view (older builds, other architectures): /proc/cpuinfo's flags
        monkeypatch.setattr(environment, "torch_capabilities", lambda: {})
        environment.cpu_flags.cache_clear()
        assert environment.cpu_flags() == set(proc["flags"])
        # no /proc/cpuinfo: torch's view alone
        monkeypatch.setattr(environment, "cpu_info", lambda: {"flags": []})
        monkeypatch.setattr(environment, "torch_capabilities", lambda: caps)
        environment.cpu_flags.cache_clear()
        assert environment.cpu_flags() == {"avx2", "fma", "avx512f"}
    finally:
        environment.cpu_flags.cache_clear()


@needs_cpuid_faulting
def test_bench_encode_paths_run_as_the_emulated_kind(tmp_path, data_mirror):
    out = tmp_path / "encode.json"
    bench = REPO / "benchmarks" / "bench_encode.py"
    env = {**os.environ, "TMPDIR": str(tmp_path), "DATA_MIRROR": str(data_mirror)}
    proc = subprocess.run(
        [sys.executable, str(EMULATE), "avx2", "--", sys.executable, str(bench), "--smoke",
         "--paths-only", "--out", str(out)],
        env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert any(line.startswith("cpu flags: avx, avx2, fma, sse4_2 (emulated avx2: CPUID masked)")
               for line in lines)  # fmt: skip
    assert lines[-1].startswith("best / fp32: ")
    result = json.loads(out.read_text())
    assert result["machine"]["emulated_cpu_kind"] == "avx2"
    assert "throughput" not in result  # --paths-only
    int8 = result["precision_paths"]["paths"]["int8"]
    assert int8["backend"].endswith("7-bit weights (x86 without VNNI)")


def test_environment_records_an_emulated_kind(monkeypatch):
    from drpipe.provenance import hardware

    monkeypatch.delenv("CPUID_MASK", raising=False)
    assert "emulated_kind" not in cpu_info() and "cpu_emulated_kind" not in hardware()
    monkeypatch.setenv("CPUID_MASK", "avx2")
    assert cpu_info()["emulated_kind"] == "avx2"
    assert hardware()["cpu_emulated_kind"] == "avx2"


# The children encode the passages the test writes (title, text pairs in JSON); the test runs
# the same function itself for this CPU's kind where it is not emulated.
ENCODE = """
import json, sys
import numpy as np, torch
from drpipe.encoders import BiEncoder

def int8_vectors(init, pairs, bits):
    bi = BiEncoder.from_init(init, pooling="mean", tied=True, max_passage_len=128)
    out = {}
    for b in bits:
        model = bi.for_inference("int8", int(b))
        with torch.inference_mode():
            vec = model.passage(model.tokenize_passages([t for t, _ in pairs], [x for _, x in pairs]))
        out[str(b)] = vec.float().numpy()
    return out

if __name__ == "__main__":
    with open(sys.argv[3]) as fh:
        pairs = json.load(fh)
    np.savez(sys.argv[1], **int8_vectors(sys.argv[2], pairs, sys.argv[4:]))
"""


@needs_cpuid_faulting
@pytest.mark.both_cores
def test_int8_vectors_follow_the_kernels_not_only_the_width(tmp_path, data_mirror):
    """AVX-512 VNNI runs the int8 kernels of this CPU's kind (VNNI): the same vectors. A CPU
    without VNNI runs others: with the same 7-bit weights its vectors differ, slightly, so
    ``int8_weight_bits: 7`` here measures the width's cost, not that CPU's."""
    import numpy as np
    from tiny_models import save_tiny_bert

    # One thread each: three processes at once on a 2-core machine. Without CPUID_MASK: a child
    # for this CPU's kind runs as this CPU where the suite itself runs emulated
    # (`emulate_cpu.py avx2 -- make test`), and each emulated one as its own kind.
    env = {**{k: v for k, v in os.environ.items() if k != "CPUID_MASK"}, "TMPDIR": str(tmp_path),
           "DATA_MIRROR": str(data_mirror), "OMP_NUM_THREADS": "1"}  # fmt: skip
    # A tiny random BERT shows the kernels' effect as MiniLM does (measured: 8-bit bitwise
    # equal as AVX-512 VNNI, 7-bit different as AVX2), in a fraction of the time.
    with gzip.open(data_mirror / "squad" / "squad-dev-v1.1.reconstructed.json.gz", "rt") as fh:
        squad = json.load(fh)
    pairs = [(a["title"], p["context"]) for a in squad["data"][:2] for p in a["paragraphs"]][:16]
    pairs_file = tmp_path / "pairs.json"
    pairs_file.write_text(json.dumps(pairs))
    init = save_tiny_bert(tmp_path / "tiny-bert", [t for pair in pairs for t in pair])

    script = tmp_path / "encode_int8.py"
    script.write_text(ENCODE)

    def start(kind: str | None, *bits: int) -> tuple[subprocess.Popen, Path]:
        out = tmp_path / f"{kind}.npz"
        cmd = [sys.executable, str(script), str(out), init, str(pairs_file), *map(str, bits)]
        cmd = [sys.executable, str(EMULATE), kind, "--", *cmd] if kind else cmd
        with out.with_suffix(".err").open("w") as err:  # the child keeps its own copy
            return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err), out

    def result(proc: subprocess.Popen, out: Path) -> dict[str, np.ndarray]:
        code = proc.wait(timeout=300)
        assert code == 0, out.with_suffix(".err").read_text()[-2000:]
        return dict(np.load(out))

    def here(*bits: int) -> dict[str, np.ndarray]:
        """This CPU's kind in this process (its imports are paid): one thread, as a child's."""
        import torch

        int8_vectors = runpy.run_path(str(script), run_name="int8_vectors")["int8_vectors"]
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return int8_vectors(init, pairs, bits)
        finally:
            torch.set_num_threads(threads)

    # One process per kind, all at once (separate processes: each kind is fixed at start-up);
    # this CPU's own in this one unless the suite runs emulated.
    emulated = [start("avx512_vnni", 8), start("avx2", 7)]
    native = result(*start(None, 7, 8)) if "CPUID_MASK" in os.environ else here(7, 8)
    vnni, avx2 = (result(*s) for s in emulated)
    native7, native8 = native["7"], native["8"]
    vnni8, avx2_7 = vnni["8"], avx2["7"]
    cos = (
        (native7 * avx2_7).sum(1) / np.linalg.norm(native7, axis=1) / np.linalg.norm(avx2_7, axis=1)
    )
    flags = set(cpu_info()["flags"])
    # This CPU has AVX-512 VNNI: the emulated kind's integer products are exact as its own, and
    # its fp32 kernels the same AVX-512 ones
    if "avx512_vnni" in flags:
        assert np.array_equal(native8, vnni8)
    if "avx512f" in flags:  # AVX2 is another kind of CPU here: other kernels, other vectors
        assert not np.array_equal(native7, avx2_7)
    assert cos.min() > 0.995
