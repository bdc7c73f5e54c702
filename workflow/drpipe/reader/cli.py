"""``drpipe reader ...``: train a reader, score (question, passage) pairs, choose k, predict.

    drpipe reader warm-start --squad TRAIN.json --corpus P --questions Q --passages P2 --run R
                          --gold G --report J --cfg '{"articles": N, "questions": M, "seed": S}'
    drpipe reader train   --run R --questions Q --passages P [--gold G] --out DIR --report J --cfg '{...}'
    drpipe reader score   --reader DIR --questions Q --passages P --runs R1 [R2 ...] --out S
                          [--cache OLD_S] --cfg '{"depth": K}'
    drpipe reader choose-k --scores S --run R --questions Q --out K.json --cfg '{"ks": [...]}'
    drpipe reader predict --scores S --run R --questions Q --out A.parquet --metrics M.json
                          (--k-from K.json | --cfg '{"k": K}')
    drpipe reader k-view  --scores S --run R --questions Q --passages P --k-from K.json
                          --out J.json --cfg '{"ks": [1, 5, 20, 50]}'

``score`` reads the union of the runs' top ``depth`` pairs once (the cache of pairs every
retriever shares); ``--cache``: an earlier scores file of the same reader, whose pairs are
reused. No torch is imported until a handler runs (``drpipe.cli`` imports this for every
command).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

import pyarrow as pa

from drpipe.cliutil import add_cfg, add_runtime, need
from drpipe.environment import environment
from drpipe.errors import InputError
from drpipe.io import write_json, write_parquet

log = logging.getLogger(__name__)

ANSWER_SCHEMA = pa.schema(
    [
        ("qid", pa.string()),
        ("prediction", pa.string()),
        ("pid", pa.int64()),
        ("rank", pa.int32()),
        ("select", pa.float64()),
        ("em", pa.bool_()),
    ]
)


def _train(args: argparse.Namespace) -> int:
    if args.nproc > 1 and "WORLD_SIZE" not in os.environ:
        from drpipe.training.cli import relaunch

        return relaunch("reader train", args.nproc, sys.argv[1:])
    from drpipe.reader.train import train_reader

    report = train_reader(
        args.run, args.questions, args.passages, args.out, args.cfg,
        gold_path=args.gold, stop_after=args.stop_after,
    )  # fmt: skip
    if args.report and int(os.environ.get("RANK", "0")) == 0 and "stopped_at_step" not in report:
        write_json(args.report, {**report, "environment": environment(("cpu", "torch"))})
    return 0


def _load_run_union(run_paths, qids, depth):
    from drpipe.runs import read_run

    runs = []
    for path in run_paths:
        hits = read_run(path, depth, qids=qids)
        runs.append({qid: [int(p) for p in pids] for qid, (pids, _) in hits.items()})
    pairs, seen = [], set()
    for run in runs:
        for qid, pids in run.items():
            for pid in pids:
                if (qid, pid) not in seen:
                    seen.add((qid, pid))
                    pairs.append((qid, pid))
    return runs, pairs


def _score(args: argparse.Namespace) -> int:
    import torch

    from drpipe.corpus.passages import load_passages
    from drpipe.encoders import select_device
    from drpipe.precision import resolve_precision
    from drpipe.qa.datasets import read_questions
    from drpipe.reader.model import load_reader
    from drpipe.reader.score import (
        read_scores,
        reader_identity,
        score_pairs,
        scores_precision,
        write_scores,
    )

    cfg = args.cfg
    t0 = time.perf_counter()
    if cfg.get("threads"):
        torch.set_num_threads(int(cfg["threads"]))
    device = select_device()
    # Before anything is read: a precision this device cannot run (int8 on a GPU) stops here.
    bits = cfg.get("int8_weight_bits", "auto")
    try:
        resolved = resolve_precision(cfg.get("precision", "auto"), device, int8_bits=bits)
    except ValueError as exc:
        key = "int8_weight_bits" if str(exc).startswith("int8_weight_bits") else "precision"
        raise SystemExit(f"error: drpipe reader score: cfg.{key}: {exc}") from None
    from drpipe.reader.settings import sample_questions

    everyone = read_questions(args.questions)
    questions = sample_questions(everyone, cfg)
    qmap = {q["qid"]: q for q in questions}
    # Runs are checked against the whole file; only the sampled questions' pairs are scored.
    _, pairs = _load_run_union(args.runs, [q["qid"] for q in everyone], int(need(cfg, "depth")))
    pairs = [p for p in pairs if p[0] in qmap]
    reader = load_reader(args.reader)
    identity = reader_identity(args.reader, reader.limits)
    cached: dict = {}
    cached_precision = None
    if args.cache and Path(args.cache).is_file():
        old, old_id = read_scores(args.cache)
        if old_id == identity:
            cached, cached_precision = old, scores_precision(args.cache)
        else:
            log.warning("%s: scores of another reader; not reused", args.cache)
    todo = [p for p in pairs if p not in cached]
    try:
        passages = load_passages(args.passages, {pid for _, pid in todo})
    except KeyError as exc:
        raise InputError(args.runs[0], None, f"runs refer to unknown passages: {exc}") from None
    # int8 is a quantized copy for the CPU; other paths run the reader on the device.
    reader = reader.int8(resolved.int8_bits) if resolved.path == "int8" else reader.to(device)
    t_score = time.perf_counter()
    rows = score_pairs(
        reader, todo, qmap, passages, batch_size=int(cfg.get("eval_batch_size") or 32),
        device=device, bf16=resolved.path == "bf16",
    )  # fmt: skip
    score_seconds = time.perf_counter() - t_score
    new = {(r["qid"], r["pid"]): r for r in rows}
    precision = resolved.label
    if cached_precision and len(todo) < len(pairs) and cached_precision != precision:
        precision = "mixed"
    write_scores(args.out, [new.get(p) or cached[p] for p in pairs], identity, precision)
    if args.report:
        write_json(
            args.report,
            {
                "pairs": len(pairs),
                "computed": len(todo),
                "reused_from_cache": len(pairs) - len(todo),
                "runs": [str(r) for r in args.runs],
                "depth": int(cfg["depth"]),
                "questions": len(questions),
                "sample": cfg.get("sample"),
                **resolved.report(),
                "device": str(device),
                "eval_batch_size": int(cfg.get("eval_batch_size") or 32),
                "pairs_per_second": len(todo) / max(time.perf_counter() - t0, 1e-9),
                "seconds": time.perf_counter() - t0,
                # score_pairs alone (tokenising, forward passes, decoding): no file reading
                # or model loading, which the two above include.
                "score_seconds": score_seconds,
                "score_pairs_per_second": len(todo) / max(score_seconds, 1e-9),
                "environment": environment(("cpu", "torch")),
            },
        )
    log.info("scored %d pairs (%d reused)", len(pairs), len(pairs) - len(todo))
    return 0


def _read_inputs(args: argparse.Namespace, depth: int):
    from drpipe.qa.datasets import read_questions
    from drpipe.reader.score import read_scores
    from drpipe.reader.settings import sample_questions
    from drpipe.runs import read_run

    everyone = read_questions(args.questions)
    questions = sample_questions(everyone, args.cfg)
    hits = read_run(args.run, depth, qids=[q["qid"] for q in everyone])
    chosen = {q["qid"] for q in questions}
    run = {qid: [int(p) for p in pids] for qid, (pids, _) in hits.items() if qid in chosen}
    scores, _ = read_scores(args.scores)
    return questions, run, scores


def _predict_checked(run, scores, questions, k, where):
    from drpipe.reader.score import predict

    try:
        return predict(run, scores, questions, k)
    except KeyError as exc:
        raise InputError(where, None, f"{exc.args[0]} (score the run to depth >= {k})") from None


def _choose_k(args: argparse.Namespace) -> int:
    from drpipe.reader.score import exact_match_percent

    split, evaluated = args.cfg.get("split"), args.cfg.get("evaluated_split")
    # k is a setting: never chosen on the questions a table reports (DPR: on dev).
    if split is not None and split in ("test", evaluated):
        raise SystemExit(
            f"error: drpipe reader choose-k: cfg.split {split!r} is the evaluated (or a test) "
            f"split (evaluated: {evaluated!r}); choose k on held-out or dev questions"
        )
    ks = sorted({int(k) for k in need(args.cfg, "ks")})
    questions, run, scores = _read_inputs(args, max(ks))
    em = {}
    for k in ks:
        em[k] = exact_match_percent(_predict_checked(run, scores, questions, k, args.scores))
    best = max(ks, key=lambda k: (em[k], -k))  # the smaller k on a tie
    write_json(args.out, {"k": best, "em_by_k": {str(k): v for k, v in em.items()},
                          "n_questions": len(questions), "questions": str(args.questions)})  # fmt: skip
    log.info("k = %d (held-out EM by k: %s)", best, em)
    return 0


def _predict(args: argparse.Namespace) -> int:
    from drpipe.reader.score import exact_match_percent, scores_precision

    if args.k_from:
        k = int(json.loads(Path(args.k_from).read_text())["k"])
    else:
        k = int(need(args.cfg, "k"))
    questions, run, scores = _read_inputs(args, k)
    rows = _predict_checked(run, scores, questions, k, args.scores)
    write_parquet(args.out, pa.Table.from_pylist(rows, schema=ANSWER_SCHEMA))
    n_missing = sum(1 for q in questions if q["qid"] not in run)
    metrics = {
        **{
            key: args.cfg[key]
            for key in ("method", "train_set", "dataset", "split", "reader")
            if key in args.cfg
        },
        "k": k,
        "reader_precision": scores_precision(args.scores),
        "em": exact_match_percent(rows),
        "n_questions": len(rows),
        "n_missing_from_run": n_missing,
        "sample": args.cfg.get("sample"),
    }
    write_json(args.metrics, metrics)
    log.info("%s: EM %.2f at k=%d over %d questions", args.run, metrics["em"], k, len(rows))
    return 0


def _k_view(args: argparse.Namespace) -> int:
    from drpipe.corpus.passages import load_passages
    from drpipe.qa.matching import AnswerMatcher
    from drpipe.reader.kview import k_view
    from drpipe.reader.score import scores_precision

    chosen = int(json.loads(Path(args.k_from).read_text())["k"])
    ks = sorted({chosen, *(int(k) for k in need(args.cfg, "ks"))})
    questions, run, scores = _read_inputs(args, ks[-1])
    try:
        passages = load_passages(args.passages, {p for pids in run.values() for p in pids})
    except KeyError as exc:
        raise InputError(args.run, None, f"run refers to unknown passages: {exc}") from None
    matcher = AnswerMatcher({pid: text for pid, (_, text) in passages.items()})
    try:
        view = k_view(run, scores, questions, matcher, ks)
    except KeyError as exc:
        msg = f"{exc.args[0]} (score the run to depth >= {ks[-1]})"
        raise InputError(args.scores, None, msg) from None
    keys = ("method", "train_set", "dataset", "split", "reader", "sample", "subsample")
    write_json(
        args.out,
        {
            **{key: args.cfg[key] for key in keys if key in args.cfg},
            "chosen_k": chosen,
            "k_from": str(args.k_from),
            "reader_precision": scores_precision(args.scores),
            **view,
        },
    )
    log.info("%s: EM by k %s", args.run, {r["k"]: r["em"] for r in view["by_k"]})
    return 0


def _warm_start(args: argparse.Namespace) -> int:
    from drpipe.reader.warmstart import build_warm_start, write_warm_start

    ws = build_warm_start(args.squad, args.corpus, args.cfg)
    write_warm_start(ws, {k: getattr(args, k) for k in ("questions", "passages", "run", "gold",
                                                        "report")})  # fmt: skip
    log.info("warm start: %s", ws.counts)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    top = sub.add_parser("reader", help="end-to-end QA: the reader (DPR section 6.1)")
    rs = top.add_subparsers(dest="reader_command", required=True)

    p = rs.add_parser("train", help="train a reader on a retriever's results")
    p.add_argument("--run", required=True, help="the retriever's run on the training questions")
    p.add_argument("--questions", required=True, help="training questions Parquet")
    p.add_argument("--passages", required=True, help="passages Parquet")
    p.add_argument("--gold", help="biencoder JSON lines naming each question's gold passage")
    p.add_argument("--out", required=True, type=Path, help="reader directory to write")
    p.add_argument("--report", type=Path)
    p.add_argument("--stop-after", type=int, help=argparse.SUPPRESS)
    p.add_argument("--nproc", type=int, default=1, help="processes (GPUs); >1 uses torchrun")
    add_cfg(p)
    add_runtime(p, "checkpoint_every", "log_every", "eval_batch_size")
    p.set_defaults(func=_train)

    p = rs.add_parser("warm-start", help="reading-comprehension data from SQuAD train articles "
                      "outside the corpus, in the shapes `reader train` reads")  # fmt: skip
    p.add_argument("--squad", required=True, help="SQuAD v1.1 train JSON")
    p.add_argument(
        "--corpus", required=True, help="the scale's passages (their articles are left out)"
    )
    for name in ("questions", "passages", "run", "gold", "report"):
        p.add_argument("--" + name, required=True, type=Path)
    add_cfg(p)
    p.set_defaults(func=_warm_start)

    p = rs.add_parser("score", help="reader scores of the runs' top (question, passage) pairs")
    p.add_argument("--reader", required=True, help="reader directory")
    p.add_argument("--questions", required=True)
    p.add_argument("--passages", required=True)
    p.add_argument("--runs", nargs="+", required=True, help="run Parquet files (pairs are pooled)")
    p.add_argument("--out", required=True, help="scores Parquet to write")
    p.add_argument("--cache", help="an earlier scores Parquet whose pairs are reused")
    p.add_argument("--report", help="JSON: pairs computed and reused, speed")
    add_cfg(p)
    add_runtime(p, "eval_batch_size")
    p.set_defaults(func=_score)

    p = rs.add_parser("choose-k", help="the number of passages to read, on held-out questions")
    for name in ("scores", "run", "questions", "out"):
        p.add_argument("--" + name, required=True)
    add_cfg(p)
    p.set_defaults(func=_choose_k)

    p = rs.add_parser("predict", help="per-question predictions and exact match")
    for name in ("scores", "run", "questions", "out", "metrics"):
        p.add_argument("--" + name, required=True)
    p.add_argument("--k-from", help="JSON with the chosen k (drpipe reader choose-k)")
    add_cfg(p)
    p.set_defaults(func=_predict)

    p = rs.add_parser("k-view", help="EM at several k and the selection head's accuracy "
                      "(drpipe.reader.kview), beside the chosen k")  # fmt: skip
    for name in ("scores", "run", "questions", "passages", "out"):
        p.add_argument("--" + name, required=True)
    p.add_argument("--k-from", required=True, help="JSON with the row's chosen k")
    add_cfg(p)
    p.set_defaults(func=_k_view)
