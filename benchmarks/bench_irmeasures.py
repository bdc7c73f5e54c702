"""ir_measures' Success@k against drpipe's own success@k (``accuracy_at_k`` on first-hit
ranks) on the same run, in one process: success@k written as qrels (the passages that hold
an answer are the relevant ones) so both compute the same number; checks they agree and
reports the time ratio.

The run is synthetic and seeded (``--questions`` questions x 100 ranked passages, each with a
seeded set of answer-holding passages), so the benchmark needs no data.

Run: ``python benchmarks/bench_irmeasures.py [--questions 20000] [--out results/benchmarks/irmeasures.json]``
``--smoke``: 200 questions (seconds; the figures mean nothing).
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import smoke  # noqa: E402

REPO = smoke.REPO
KS = (1, 5, 20, 100)
RESULT_LINES = (
    r"agree: (True|False)",
    r"drpipe success@k: [0-9.]+ s",
    r"ir_measures Success@k: [0-9.]+ s",
    r"ratio ir_measures/drpipe: [0-9.]+",
)


def synthetic(n: int, depth: int, seed: int):
    rng = random.Random(seed)
    run, answers = {}, {}
    for q in range(n):
        qid = f"q{q}"
        pids = rng.sample(range(100_000), depth)
        run[qid] = {str(p): float(depth - r) for r, p in enumerate(pids)}
        holds = {str(p) for p in pids if rng.random() < 0.03}
        if rng.random() < 0.5:
            holds.add(str(rng.randrange(100_000, 200_000)))  # an answer outside the run
        answers[qid] = holds
    return run, answers


def ours(run, answers):
    from drpipe.evaluate import accuracy_at_k

    first = {}
    for qid, ranked in run.items():
        hit = None
        for rank, pid in enumerate(sorted(ranked, key=ranked.get, reverse=True), 1):
            if pid in answers[qid]:
                hit = rank
                break
        first[qid] = hit
    return {k: v / 100 for k, v in accuracy_at_k(first, KS).items()}


def theirs(run, answers):
    from drpipe import irmetrics

    qrels = {q: {p: 1 for p in a} or {"__none__": 0} for q, a in answers.items()}
    agg, _ = irmetrics.evaluate(qrels, run, [f"Success@{k}" for k in KS])
    return {str(k): agg[f"Success@{k}"] for k in KS}


def cpu_flags() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return ""
    for line in lines:
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            keep = ("avx2", "avx512f", "avx512_vnni", "amx_tile", "fma", "sse4_2")
            return " ".join(f for f in keep if f in flags)
    return ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    smoke.add_args(parser, REPO / "results" / "benchmarks" / "irmeasures.json")
    args = smoke.parse_args(parser)
    n = 200 if args.smoke else args.questions
    run, answers = synthetic(n, 100, 13)
    import ir_measures  # noqa: F401  (imports outside the timings)

    import drpipe.evaluate  # noqa: F401
    import drpipe.irmetrics  # noqa: F401

    a = b = None
    t_ours, t_theirs = [], []
    for _ in range(1 if args.smoke else args.repeats):
        t = time.perf_counter()
        a = ours(run, answers)
        t_ours.append(time.perf_counter() - t)
        t = time.perf_counter()
        b = theirs(run, answers)
        t_theirs.append(time.perf_counter() - t)
    agree = all(abs(a[str(k)] - b[str(k)]) < 1e-9 for k in KS)
    best_ours, best_theirs = min(t_ours), min(t_theirs)
    result = {
        "questions": n,
        "depth": 100,
        "ks": list(KS),
        "drpipe": a,
        "ir_measures": b,
        "agree": agree,
        "drpipe_seconds": best_ours,
        "ir_measures_seconds": best_theirs,
        "ratio": best_theirs / best_ours,
        "cpu": platform.processor() or platform.machine(),
        "cpu_flags": cpu_flags(),
        "smoke": args.smoke,
    }
    print(f"questions: {n} x 100; success@k {a}")
    print(f"agree: {agree}")
    print(f"drpipe success@k: {best_ours:.3f} s")
    print(f"ir_measures Success@k: {best_theirs:.3f} s")
    print(f"ratio ir_measures/drpipe: {result['ratio']:.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
