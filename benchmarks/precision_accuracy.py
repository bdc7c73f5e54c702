"""The accuracy cost of a forward-pass precision path: top-k of one trained retriever encoded in
fp32, bf16 and int8, paired per question against the first (baseline) path.

The workflow keeps one encoding per model, so each path is a rerun of the same results folder
with only ``encode.precision`` changed (training does not depend on it: Snakemake reruns
encoding, indexing, search and evaluation only). After each run, ``snapshot`` copies what the
comparison reads; ``compare`` then checks that every snapshot comes from the same training run
(byte-identical training report) and ran the precision it is labelled with (the encoding and
question reports), and prints, per path, top-k, the paired difference to the baseline with its
95% bootstrap interval and p-value, the exact McNemar p and the questions that changed, and
the encoding speed each run recorded. Procedure (the ``squad`` scale's DPR, as in README)::

    for p in fp32 bf16 int8; do
        make squad TARGET=results/metrics/dpr/squad/squad-test.json \\
            CONFIG="encode='{precision: $p}'"
        python benchmarks/precision_accuracy.py snapshot results dpr/squad squad-test prec/$p
    done
    python benchmarks/precision_accuracy.py compare dpr/squad squad-test \\
        fp32=prec/fp32 bf16=prec/bf16 int8=prec/int8

int8 with 7-bit weights (the width an x86 CPU without VNNI runs) is set on any CPU with
``CONFIG="encode='{precision: int8, int8_weight_bits: 7}'"`` and labelled ``int8-7bit``. That
sets the width, not the kernels: to measure what such a CPU computes, run the rerun under
``benchmarks/emulate_cpu.py KIND --`` (CPUID masked, so ONNX Runtime and torch dispatch that
kind's kernels) and label it ``PATH@KIND`` (e.g. ``int8-7bit@avx2``); where the reports record
an emulated kind (``environment.cpu.emulated_kind``) it must be that one.

The last line reads ``largest |top-20| / |top-100| change vs fp32: A / B (path)``.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import numpy as np

from drpipe.claims import read_ranks
from drpipe.claims.stats import mcnemar_exact, paired_bootstrap
from drpipe.tables.precision import report_precision

REPO = Path(__file__).resolve().parents[1]

KS = (1, 5, 20, 100)
SEED = 20
# Labels for paths whose recorded name (drpipe.tables.precision.report_precision) has spaces.
LABELS = {"int8-7bit": "int8 (7-bit weights)"}


def _files(run: str, questions: str) -> dict[str, str]:
    """Paths (relative to a results folder) that a comparison reads; glob patterns allowed."""
    method, train_set = run.split("/")
    return {
        "per_question": f"metrics/{run}/{questions}.per_question.parquet",
        "metrics": f"metrics/{run}/{questions}.json",
        "training": f"models/{method}/{train_set}.report.json",
        "questions": f"qvecs/{run}/{questions}.report.json",
        "shards": f"embeddings/{run}/shard-*.report.json",
    }


def snapshot(results: Path, run: str, questions: str, dest: Path) -> list[Path]:
    """Copy the files a comparison reads from ``results`` into ``dest`` (same layout)."""
    copied = []
    for name, pattern in _files(run, questions).items():
        found = sorted(results.glob(pattern))
        if not found:
            raise SystemExit(f"error: {results / pattern} not found ({name}); run the target first")
        for src in found:
            out = dest / src.relative_to(results)
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, out)
            copied.append(out)
    return copied


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise SystemExit(f"error: {path}: {err}") from err


def read_snapshot(folder: Path, label: str, run: str, questions: str) -> dict:
    """Ranks per question, the precision paths recorded, training report and encoding speed."""
    files = _files(run, questions)
    shards = sorted(folder.glob(files["shards"]))
    if not shards:
        raise SystemExit(f"error: {folder / files['shards']}: no encoding reports")
    reports = {"questions": _json(folder / files["questions"])}
    reports.update({str(p.relative_to(folder)): _json(p) for p in shards})
    path, _, kind = label.partition("@")
    want = LABELS.get(path, path)
    for where, rep in reports.items():
        ran = report_precision(rep)
        if ran != want:
            raise SystemExit(
                f"error: {folder}: {where} report ran precision {ran!r}, labelled {label!r}"
            )
        emulated = rep.get("environment", {}).get("cpu", {}).get("emulated_kind")
        if emulated is not None and emulated != kind:
            raise SystemExit(
                f"error: {folder}: {where} report ran as an emulated {emulated} CPU, labelled "
                f"{label!r}"
            )
    shard_reps = [reports[k] for k in reports if k != "questions"]
    seconds = sum(float(r["seconds"]) for r in shard_reps)
    encoded = sum(int(r["n_encoded"]) for r in shard_reps)
    return {
        "ranks": read_ranks(folder / files["per_question"]),
        "training": (folder / files["training"]).read_bytes(),
        "passages_per_second": encoded / seconds if seconds else float("nan"),
        "question_seconds": float(reports["questions"].get("seconds", float("nan"))),
        "n_passages": encoded,
    }


def compare(
    snaps: dict[str, dict], run: str, questions: str, resamples: int = 10000
) -> dict[str, object]:
    """Per path: top-k and, against the first path, the paired difference per k."""
    labels = list(snaps)
    base = snaps[labels[0]]
    for label in labels[1:]:
        if snaps[label]["training"] != base["training"]:
            raise SystemExit(
                f"error: {label} and {labels[0]} come from different training runs "
                f"(models/{run.split('/')[0]}/{run.split('/')[1]}.report.json differs)"
            )
        if not snaps[label]["ranks"].index.equals(base["ranks"].index):
            raise SystemExit(f"error: {label} and {labels[0]} rank different questions")
    out: dict[str, object] = {"run": run, "questions": questions, "baseline": labels[0],
                              "n_questions": int(base["ranks"].size), "paths": {}}  # fmt: skip
    for label in labels:
        ranks = snaps[label]["ranks"].to_numpy()
        row: dict[str, object] = {
            "passages_per_second": round(snaps[label]["passages_per_second"], 2),
            "speed_vs_baseline": round(
                snaps[label]["passages_per_second"] / base["passages_per_second"], 3
            ),
        }
        for k in KS:
            hit = np.nan_to_num(ranks, nan=np.inf) <= k
            ref = np.nan_to_num(base["ranks"].to_numpy(), nan=np.inf) <= k
            diff = hit.astype(float) - ref.astype(float)
            cell: dict[str, float] = {"top": round(100 * float(hit.mean()), 2)}
            if label != labels[0]:
                boot = paired_bootstrap(diff, resamples=resamples, seed=SEED + k)
                cell.update(
                    diff=round(100 * boot["mean"], 2),
                    ci_low=round(100 * boot["ci_low"], 2),
                    ci_high=round(100 * boot["ci_high"], 2),
                    p_bootstrap=round(boot["p"], 4),
                    p_mcnemar=round(mcnemar_exact(int((diff > 0).sum()), int((diff < 0).sum())), 4),
                    gained=int((diff > 0).sum()),
                    lost=int((diff < 0).sum()),
                )
            row[f"top{k}"] = cell
        out["paths"][label] = row
    return out


def render(result: dict) -> str:
    lines = [f"{result['run']} {result['questions']}: {result['n_questions']} questions, "
             f"baseline {result['baseline']}"]  # fmt: skip
    worst = None
    for label, row in result["paths"].items():
        tops = " / ".join(f"{row[f'top{k}']['top']:.2f}" for k in KS)
        line = f"{label}: top-{'/'.join(map(str, KS))} {tops}; "
        line += f"{row['passages_per_second']} passages/s ({row['speed_vs_baseline']}x)"
        if label != result["baseline"]:
            for k in (20, 100):
                c = row[f"top{k}"]
                line += (f"; top-{k} {c['diff']:+.2f} [{c['ci_low']:+.2f}, {c['ci_high']:+.2f}]"
                         f" p={c['p_bootstrap']:.3g} McNemar p={c['p_mcnemar']:.3g}"
                         f" (+{c['gained']}/-{c['lost']})")  # fmt: skip
            size = (abs(row["top20"]["diff"]), abs(row["top100"]["diff"]))
            if worst is None or max(size) > max(worst[0]):
                worst = (size, label)
        lines.append(line)
    if worst is not None:
        (a, b), label = worst
        lines.append(
            f"largest |top-20| / |top-100| change vs {result['baseline']}: "
            f"{a:.2f} / {b:.2f} ({label})"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    snap = sub.add_parser("snapshot", help="copy what a comparison reads out of a results folder")
    snap.add_argument("results", type=Path)
    snap.add_argument("run", help="method/train_set, e.g. dpr/squad")
    snap.add_argument("questions", help="dataset-split, e.g. squad-test")
    snap.add_argument("dest", type=Path)
    cmp_ = sub.add_parser("compare", help="paired top-k of each path against the first")
    cmp_.add_argument("run")
    cmp_.add_argument("questions")
    cmp_.add_argument("paths", nargs="+", metavar="PATH=SNAPSHOT",
                      help="precision path and its snapshot folder; the first is the baseline")  # fmt: skip
    cmp_.add_argument("--resamples", type=int, default=10000)
    cmp_.add_argument(
        "--out", type=Path, default=REPO / "results/benchmarks/precision_accuracy.json"
    )
    args = parser.parse_args(argv)
    if args.cmd == "snapshot":
        n = len(snapshot(args.results, args.run, args.questions, args.dest))
        print(f"copied {n} files to {args.dest}")
        return 0
    snaps = {}
    for item in args.paths:
        label, sep, folder = item.partition("=")
        if not sep:
            parser.error(f"{item!r}: expected PATH=SNAPSHOT")
        snaps[label] = read_snapshot(Path(folder), label, args.run, args.questions)
    result = compare(snaps, args.run, args.questions, resamples=args.resamples)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    tmp.replace(args.out)
    print(render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
