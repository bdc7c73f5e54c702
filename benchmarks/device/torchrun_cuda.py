"""`drpipe train` and `drpipe reader train` in one process against the same command under
torchrun, on whatever device there is. The torchrun command is the one ``--nproc N`` builds
(``drpipe.training.cli.torchrun_argv``), for one process: a machine with one GPU cannot run
two NCCL ranks (``--nproc 2`` stops there, named). One rank makes no process group
(``WORLD_SIZE=1``), so what this checks on a GPU is the relaunch itself: torchrun's reading of
the command after ``--`` under that machine's torch, its environment, and the CUDA training
it starts. Each pair must give the same training: steps, the losses logged and the weights.

Small real data: DPR-style records from the first SQuAD dev articles (``tests/tiny_models.py``)
and a random 2-layer BERT with their words as its vocabulary; the reader reads the six passages
of ``tests/test_reader.py``.
Run from the repository root: ``python benchmarks/device/torchrun_cuda.py OUT.json`` (env
``DATA_MIRROR``; ``PYTHONPATH=workflow:tests`` where drpipe is not installed).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from drpipe.io import write_jsonl
from drpipe.qa.datasets import write_questions
from drpipe.training.cli import torchrun_argv

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
from test_evaluate import write_passages, write_run  # noqa: E402
from test_reader import PASSAGES, QUESTIONS, RANKING  # noqa: E402
from tiny_models import example_texts, save_tiny_bert, squad_examples  # noqa: E402

DPR = {
    "adam_eps": 1e-08, "batch_size": 8, "bf16": "auto", "dropout": 0.0, "epochs": 2,
    "grad_checkpointing": False, "grad_clip": 2.0, "hard_negatives": 1, "in_batch": True,
    "lr": 1e-4, "max_examples": None, "max_passage_len": 96, "max_query_len": 32,
    "negative_type": "bm25", "pooling": "cls", "seed": 13, "tied": False, "val_fraction": 0.1,
    "warmup_ratio": 0.1, "weight_decay": 0.0,
}  # fmt: skip
READER = {
    "passages": 3, "batch_size": 3, "epochs": 2, "lr": 1e-4, "warmup_steps": 0, "dropout": 0.0,
    "val_fraction": 0.15, "val_k": 2, "seed": 5, "bf16": "auto", "max_len": 96,
    "max_question_len": 24, "max_answer_len": 5,
}  # fmt: skip


def weights(directory: Path) -> dict[str, torch.Tensor]:
    """Every tensor of every safetensors file under a model directory, by relative name."""
    from safetensors.torch import load_file

    out = {}
    for f in sorted(directory.rglob("*.safetensors")):
        for k, v in load_file(f).items():
            out[f"{f.relative_to(directory)}:{k}"] = v.float()
    return out


def compare(argv: list[str], out: Path, curve_keys: tuple[str, ...]) -> dict:
    """Run ``drpipe ARGV`` in one process and under torchrun (one rank); the two reports and
    weights side by side."""
    runs = {}
    for how in ("process", "torchrun"):
        model, report = out / how, out / f"{how}.json"
        args = [*argv, "--out", str(model), "--report", str(report)]
        cmd = (
            [sys.executable, "-m", "drpipe.cli", *args, "--nproc", "0"]
            if how == "process"
            else [sys.executable, "-m", "torch.distributed.run", *torchrun_argv(1, args)]
        )
        t0 = time.perf_counter()
        print(f"{argv[0]} {how}: starting", flush=True)  # progress where a device call's limit cuts
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        print(
            f"{argv[0]} {how}: rc {proc.returncode}, {time.perf_counter() - t0:.1f} s", flush=True
        )
        if proc.returncode != 0:
            return {"how": how, "failed": proc.returncode, "stderr": proc.stderr[-3000:]}
        runs[how] = (json.loads(report.read_text()), weights(model), time.perf_counter() - t0)
    (r0, w0, s0), (r1, w1, s1) = runs["process"], runs["torchrun"]
    curves = {k: [[c.get(k) for c in r["train_curve"]] for r in (r0, r1)] for k in curve_keys}
    diff = max((float((w0[k] - w1[k]).abs().max()) for k in w0), default=None)
    return {
        "device": [r0.get("device"), r1.get("device")],
        "precision": [r0.get("precision"), r1.get("precision")],
        "bf16": [r0.get("bf16"), r1.get("bf16")],
        "world_size": [r0.get("world_size"), r1.get("world_size")],
        "steps": [r0.get("steps"), r1.get("steps")],
        "curves_equal": {k: a == b for k, (a, b) in curves.items()},
        "curves": curves,
        "same_tensors": sorted(w0) == sorted(w1),
        "max_abs_weight_diff": diff,
        "bitwise_equal": diff == 0.0,
        "wall_seconds": [round(s0, 1), round(s1, 1)],
    }


def main(argv: list[str]) -> int:
    result_path = Path(argv[0]) if argv else Path("torchrun_cuda.json")
    mirror = Path(os.environ["DATA_MIRROR"])
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        examples = squad_examples(mirror, 48)
        write_jsonl(tmp / "train.jsonl.gz", examples)
        texts = example_texts(examples) + list(PASSAGES.values())
        texts += [x["question"] for x in QUESTIONS]
        init = save_tiny_bert(tmp / "init", texts)
        for name in ("passages", "questions", "run"):
            (tmp / name).mkdir()
        write_passages(tmp / "passages" / "p.parquet", PASSAGES)
        write_questions(tmp / "questions" / "q.parquet", QUESTIONS)
        write_run(tmp / "run" / "r.parquet", RANKING)
        result = {
            "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "train_dpr": compare(
                [
                    "train",
                    "--method",
                    "dpr",
                    "--train",
                    str(tmp / "train.jsonl.gz"),
                    "--cfg",
                    json.dumps(DPR | {"init": init}),
                    "--checkpoint-every",
                    "0",
                    "--threads",
                    "2",
                ],
                tmp / "dpr",
                ("loss",),
            ),
            "reader_train": compare(
                [
                    "reader",
                    "train",
                    "--run",
                    str(tmp / "run" / "r.parquet"),
                    "--questions",
                    str(tmp / "questions" / "q.parquet"),
                    "--passages",
                    str(tmp / "passages" / "p.parquet"),
                    "--cfg",
                    json.dumps(READER | {"init": init}),
                    "--checkpoint-every",
                    "0",
                    "--threads",
                    "2",
                ],
                tmp / "reader",
                ("loss", "span_nll", "select_nll"),
            ),
        }
    result_path.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
