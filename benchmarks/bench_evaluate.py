"""Evaluation speed: top-k accuracy of 10,570 SQuAD dev questions x 100 passages.

The run is real retrieval output in shape: 100-word passages of all SQuAD v1.1 paragraphs
(dev + train), ranked per question by the number of shared question tokens (a cheap lexical
retriever). Compared, in this same process:

- ``drpipe``: ``evaluate.top_k_accuracy`` end to end (read run, load passages, match);
- baseline ``has_answer loop``: ``has_answer`` on every (question, passage) pair without
  caching or early exit, as DPR's ``check_answer`` does, timed on a seeded subsample of
  questions and extrapolated per check;
- baseline ``DPR algorithm``: DPR's token-list sliding window, re-tokenising every passage,
  timed the same way.

Run: ``python benchmarks/bench_evaluate.py [--data DIR] [--out results/benchmarks/evaluate.json]``
``--smoke``: 30 dev questions over the passages of their paragraphs and of the first 500 train
questions' (more than 100), 10 of them timed by the baselines.
"""

from __future__ import annotations

import argparse
import collections
import os
import platform
import random
import sys
import tempfile
import time
import unicodedata
from pathlib import Path

import pyarrow as pa
import regex
import smoke

from drpipe import evaluate
from drpipe.corpus.passages import PASSAGE_SCHEMA
from drpipe.io import write_json, write_parquet
from drpipe.qa.datasets import read_squad, write_questions
from drpipe.qa.matching import has_answer, match_tokens

REPO = Path(__file__).resolve().parents[1]
RUN_SCHEMA = pa.schema(
    [("qid", pa.string()), ("rank", pa.int32()), ("pid", pa.int64()), ("score", pa.float64())]
)
RESULT_LINES = (
    r"inputs: \d+ passages, \d+ questions, \d+ run rows",
    r"top-k: \{",
    r"drpipe evaluate \(end to end\): +[\d.]+ s",
    r"has_answer loop, no cache \(extrap\.\): +[\d.]+ s +-> ratio [\d.]+x",
    r"DPR algorithm \(extrap\.\): +[\d.]+ s +-> ratio [\d.]+x",
)
# Dev and train questions (None: all), and baseline questions. The passages of the dev and
# train questions' paragraphs must outnumber the run's depth (100).
SMOKE = {"dev": 30, "train": 500, "baseline_questions": 10}


def build_inputs(
    data: Path,
    tmp: Path,
    depth: int = 100,
    n_dev: int | None = None,
    n_train: int | None = None,
) -> tuple[dict, list, dict]:
    dev = read_squad(data / "squad/squad-dev-v1.1.reconstructed.json.gz", "squad", "dev")
    train = read_squad(data / "squad/squad-train-v1.1.reconstructed.json.gz", "squad", "train")
    dev, train = dev[:n_dev], train[:n_train]
    texts: dict[int, str] = {}
    titles: dict[int, str] = {}
    contexts = dict.fromkeys((q["gold_context"], q["gold_title"]) for q in dev + train)
    for ctx, title in contexts:
        words = ctx.split()
        for i in range(0, len(words), 100):
            pid = len(texts) + 1
            texts[pid] = " ".join(words[i : i + 100])
            titles[pid] = title
    index: dict[str, list[int]] = collections.defaultdict(list)
    for pid, text in texts.items():
        for tok in set(match_tokens(text)):
            index[tok].append(pid)
    rng = random.Random(13)
    rows = collections.defaultdict(list)
    ranking: dict[str, list[int]] = {}
    for q in dev:
        counts: collections.Counter = collections.Counter()
        for tok in set(match_tokens(q["question"])):
            if len(index[tok]) < 2000:  # skip stop-word-like tokens
                counts.update(index[tok])
        top = [p for p, _ in sorted(counts.items(), key=lambda x: (-x[1], x[0]))[:depth]]
        while len(top) < depth:  # pad rare short lists with random passages
            p = rng.randint(1, len(texts))
            if p not in top:
                top.append(p)
        ranking[q["qid"]] = top
        for rank, pid in enumerate(top, 1):
            rows["qid"].append(q["qid"])
            rows["rank"].append(rank)
            rows["pid"].append(pid)
            rows["score"].append(float(depth - rank))
    pids = sorted(texts)
    write_parquet(
        tmp / "passages.parquet",
        pa.Table.from_pydict(
            {
                "pid": pids,
                "title": [titles[p] for p in pids],
                "text": [texts[p] for p in pids],
                "source": ["squad"] * len(pids),
                "doc_id": [0] * len(pids),
            },
            schema=PASSAGE_SCHEMA,
        ),
    )
    write_questions(tmp / "questions.parquet", dev)
    write_parquet(tmp / "run.parquet", pa.Table.from_pydict(dict(rows), schema=RUN_SCHEMA))
    return texts, dev, ranking


_DPR_TOKEN = regex.compile(r"([\p{L}\p{N}\p{M}]+)|([^\p{Z}\p{C}])")


def dpr_algorithm(answers: list[str], text: str) -> bool:
    """DPR's has_answer as written there: token lists and a sliding-window comparison."""
    words = [m.group().lower() for m in _DPR_TOKEN.finditer(unicodedata.normalize("NFD", text))]
    for answer in answers:
        a = [m.group().lower() for m in _DPR_TOKEN.finditer(unicodedata.normalize("NFD", answer))]
        for i in range(len(words) - len(a) + 1):
            if words[i : i + len(a)] == a:
                return True
    return False


def time_baseline(fn, sample, ranking, texts) -> tuple[float, dict]:
    start = time.perf_counter()
    first: dict[str, int | None] = {}
    for q in sample:
        hits = [fn(q["answers"], texts[p]) for p in ranking[q["qid"]]]  # all 100, as DPR
        first[q["qid"]] = next((r for r, h in enumerate(hits, 1) if h), None)
    return time.perf_counter() - start, first


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--data", default=os.environ.get("DATA_MIRROR", REPO.parent / "shared" / "data")
    )
    parser.add_argument("--baseline-questions", type=int, default=500)
    smoke.add_args(parser, REPO / "results" / "benchmarks" / "evaluate.json")
    args = smoke.parse_args(parser)
    sizes = {}
    if args.smoke:
        sizes = {"n_dev": SMOKE["dev"], "n_train": SMOKE["train"]}
        args.baseline_questions = SMOKE["baseline_questions"]

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        t0 = time.perf_counter()
        texts, dev, ranking = build_inputs(Path(args.data), tmp, **sizes)
        build_s = time.perf_counter() - t0
        n_checks = sum(len(v) for v in ranking.values())
        print(
            f"inputs: {len(texts)} passages, {len(dev)} questions, {n_checks} run rows ({build_s:.1f}s)"
        )

        t0 = time.perf_counter()
        summary, first = evaluate.top_k_accuracy(
            tmp / "run.parquet", tmp / "questions.parquet", tmp / "passages.parquet"
        )
        ours_s = time.perf_counter() - t0

    sample = random.Random(13).sample(dev, args.baseline_questions)
    naive_s, naive_first = time_baseline(
        lambda a, t: has_answer(a, t, "string"), sample, ranking, texts
    )
    dpr_s, dpr_first = time_baseline(dpr_algorithm, sample, ranking, texts)
    assert naive_first == dpr_first == {q["qid"]: first[q["qid"]] for q in sample}

    scale = len(dev) / len(sample)
    naive_full, dpr_full = naive_s * scale, dpr_s * scale
    result = {
        "what": "top-k accuracy, 10,570 SQuAD dev questions x 100 passages (lexical-overlap run)",
        "smoke": args.smoke,
        "n_questions": len(dev),
        "n_passages_in_corpus": len(texts),
        "n_checks": n_checks,
        "top_k": summary["top_k"],
        "drpipe_seconds": ours_s,
        "baseline_has_answer_loop_seconds_extrapolated": naive_full,
        "baseline_dpr_algorithm_seconds_extrapolated": dpr_full,
        "baseline_sample_questions": len(sample),
        "speedup_vs_has_answer_loop": naive_full / ours_s,
        "speedup_vs_dpr_algorithm": dpr_full / ours_s,
        "python": sys.version.split()[0],
        "machine": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average_1min": os.getloadavg()[0],
    }
    print(f"top-k: { {k: round(v, 2) for k, v in summary['top_k'].items()} }")
    print(f"drpipe evaluate (end to end):        {ours_s:8.2f} s")
    print(
        f"has_answer loop, no cache (extrap.): {naive_full:8.2f} s  -> ratio {naive_full / ours_s:.1f}x"
    )
    print(
        f"DPR algorithm (extrap.):             {dpr_full:8.2f} s  -> ratio {dpr_full / ours_s:.1f}x"
    )
    write_json(args.out, result)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
