"""Runs out and in: TREC and DPR JSON export, TREC import, and ir_measures, each against
reading the Parquet run alone, in this same process.

The run is bench_evaluate's: real SQuAD v1.1 dev questions over 100-word passages of the SQuAD
paragraphs, 100 passages per question ranked by shared question tokens. Timed, best of
``--repeat``:

- baseline ``read Parquet``: ``drpipe.runs.read_run`` (what evaluation reads);
- ``TREC export``: ``drpipe runs trec`` (``runfiles.write_trec``);
- ``DPR JSON export``: ``runfiles.export_run`` with ``dpr_json`` (answer matching included);
- ``TREC import``: ``runfiles.import_run`` (parse, map ids, rank by score, write Parquet);
- ``ir_measures RR@100`` against ``drpipe evaluate``'s MRR@100 over the same first hits
  (qrels = each question's answer-bearing passages of the run), so the library's cost is known.

Run: ``python benchmarks/bench_runfiles.py [--data DIR] [--out results/benchmarks/runfiles.json]``
``--smoke``: 30 dev questions, one repeat.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

import bench_evaluate
import pyarrow.parquet as pq
import smoke

from drpipe import evaluate, runfiles
from drpipe.io import write_json
from drpipe.qa.matching import AnswerMatcher
from drpipe.runs import RUN_SCHEMA, read_run

REPO = Path(__file__).resolve().parents[1]
RESULT_LINES = (
    r"inputs: \d+ passages, \d+ questions, \d+ run rows",
    r"read Parquet \(baseline\): +[\d.]+ s",
    r"TREC export: +[\d.]+ s +-> [\d.]+x the baseline",
    r"DPR JSON export: +[\d.]+ s +-> [\d.]+x the baseline",
    r"TREC import: +[\d.]+ s +-> [\d.]+x the baseline",
    r"ir_measures RR@100: +[\d.]+ s +-> [\d.]+x drpipe's MRR@100 \([\d.]+ s, .*\), equal: True",
)


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--data", default=os.environ.get("DATA_MIRROR", REPO.parent / "shared" / "data")
    )
    parser.add_argument("--repeat", type=int, default=3)
    smoke.add_args(parser, REPO / "results" / "benchmarks" / "runfiles.json")
    args = smoke.parse_args(parser)
    sizes = {}
    if args.smoke:
        sizes = {"n_dev": bench_evaluate.SMOKE["dev"], "n_train": bench_evaluate.SMOKE["train"]}
        args.repeat = 1

    import ir_measures
    from ir_measures import Qrel, ScoredDoc

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        texts, dev, ranking = bench_evaluate.build_inputs(Path(args.data), tmp, **sizes)
        rows = sum(len(v) for v in ranking.values())
        print(f"inputs: {len(texts)} passages, {len(dev)} questions, {rows} run rows")
        run_pq, qs, ps = tmp / "run.parquet", tmp / "questions.parquet", tmp / "passages.parquet"
        base = best(lambda: read_run(run_pq), args.repeat)
        table = pq.read_table(run_pq, columns=RUN_SCHEMA.names)
        trec = best(lambda: runfiles.write_trec(tmp / "r.trec", table, "bench"), args.repeat)
        dpr = best(lambda: runfiles.export_run(run_pq, qs, ps, dpr_json=tmp / "r.json"),
                   args.repeat)  # fmt: skip
        imp = best(lambda: runfiles.import_run(tmp / "r.trec", qs, ps, tmp / "back.parquet"),
                   args.repeat)  # fmt: skip
        # MRR@100 both ways: ours from the first hits, ir_measures' RR@100 from qrels.
        t0 = time.perf_counter()
        summary, _ = evaluate.top_k_accuracy(run_pq, qs, ps, ks=[100])
        ours_s = time.perf_counter() - t0
        run = read_run(run_pq)
        matcher = AnswerMatcher(texts)
        qrels = []
        for q in dev:
            pids = run.get(q["qid"], ((), ()))[0].tolist()
            hits = [p for p, h in zip(pids, matcher.hits(q["answers"], q["match"], pids),
                                      strict=True) if h]  # fmt: skip
            qrels += [Qrel(q["qid"], str(p), 1) for p in hits] or [Qrel(q["qid"], "none", 0)]
        docs = [ScoredDoc(q, str(p), -float(r)) for q, (ps_, _) in run.items()
                for r, p in enumerate(ps_.tolist())]  # fmt: skip
        t0 = time.perf_counter()
        rr = ir_measures.calc_aggregate([ir_measures.RR @ 100], qrels, docs)[ir_measures.RR @ 100]
        irm_s = time.perf_counter() - t0
        equal = abs(rr - summary["mrr"]["100"]) < 1e-9

    print(f"read Parquet (baseline):    {base:.3f} s")
    for name, secs in (("TREC export", trec), ("DPR JSON export", dpr), ("TREC import", imp)):
        print(f"{name + ':':28s}{secs:.3f} s -> {secs / base:.1f}x the baseline")
    # Ours reads the run and matches answers; ir_measures is given the qrels those give.
    print(f"ir_measures RR@100:         {irm_s:.3f} s -> {irm_s / ours_s:.2f}x drpipe's MRR@100 "
          f"({ours_s:.3f} s, reading and matching included), equal: {equal}")  # fmt: skip
    result = {
        "what": "runs out and in over bench_evaluate's run (SQuAD dev x 100 passages)",
        "smoke": args.smoke,
        "rows": rows,
        "questions": len(dev),
        "seconds": {
            "read_parquet": base,
            "trec_export": trec,
            "dpr_json_export": dpr,
            "trec_import": imp,
            "ir_measures_rr100": irm_s,
            "drpipe_evaluate_mrr100": ours_s,
        },  # fmt: skip
        "ratios_to_read_parquet": {
            "trec_export": trec / base,
            "dpr_json_export": dpr / base,
            "trec_import": imp / base,
        },  # fmt: skip
        "ir_measures_over_drpipe_evaluate": irm_s / ours_s,
        "mrr100_equal": equal,
        "cpu": platform.processor() or platform.machine(),
    }
    write_json(args.out, result)
    return 0 if equal else 1


if __name__ == "__main__":
    raise SystemExit(main())
