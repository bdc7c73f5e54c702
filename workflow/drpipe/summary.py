"""One page on what a run did (``drpipe run-summary``; ``make rehearse`` ends with it): jobs per
rule (Snakemake's records), training examples kept and dropped per train set and run, each
paper's Multi set, epochs per train set, index types, search depths, and the tables and
figures written. Every figure is read from the run's own files; nothing is assumed."""

from __future__ import annotations

import argparse
import logging
from collections import Counter
from pathlib import Path
from typing import Any

from drpipe.audit.lineage import Lineage
from drpipe.cliutil import add_cfg
from drpipe.io import read_json, write_json
from drpipe.tables.output import write_text

log = logging.getLogger(__name__)


def jobs_per_rule(workdir: Path) -> Counter[str]:
    """Jobs Snakemake recorded per rule (its metadata: one record per output file)."""
    return Counter(job.rule for job in Lineage(workdir).jobs.values())


def training_rows(results: Path) -> list[dict[str, Any]]:
    """Per trained (or released) model: examples read, kept, dropped and why, epochs."""
    rows = []
    for rep in sorted(results.glob("models/*/*.report.json")):
        r = read_json(rep)
        run, train_set = rep.parent.name, rep.name.removesuffix(".report.json")
        if "layout" in r:  # a released checkpoint: no training
            rows.append({"run": run, "train_set": train_set, "released": r["layout"]})
            continue
        dropped = sum(f.get("dropped", 0) for f in (r.get("dropped_by_file") or {}).values())
        causes: Counter[str] = Counter()
        for f in (r.get("dropped_by_file") or {}).values():
            causes.update(f.get("causes") or {})
        rows.append({
            "run": run,
            "train_set": train_set,
            "read": r.get("n_read"),
            "no_positive": r.get("n_discarded_no_positive", 0),
            "not_sampled": r.get("n_not_sampled", 0),
            "method_dropped": dropped,
            "causes": dict(causes),
            "train": r.get("n_train"),
            "val": r.get("n_val"),
            "val_no_positive": r.get("n_val_discarded_no_positive", 0),
            "epochs": r.get("epochs"),
            "steps": r.get("steps"),
            "batch": (r.get("cfg") or {}).get("batch_size"),
        })  # fmt: skip
    return rows


def index_types(results: Path) -> Counter[str]:
    """Index files by type (``index/<run>/<train set>/<type>.faiss`` and subsets' and AOpt's)."""
    return Counter(p.name.removesuffix(".faiss") for p in results.rglob("*.faiss"))


def search_depths(results: Path) -> dict[str, Counter]:
    """Depths the run files were searched at, by kind: BM25 runs (``hits``), dense runs (the
    index's ``search_depth``), hybrids (the dense list's ``dense_depth``) and the BM25 searches
    that hybrids fuse (``bm25/hybrid``, ``hits``). A report without its depth counts as
    ``unknown``, so that a renamed field shows instead of vanishing."""
    out: dict[str, Counter] = {"bm25": Counter(), "dense": Counter(), "hybrid (dense)": Counter(),
                               "hybrid (BM25)": Counter()}  # fmt: skip
    for rep in results.glob("runs/*/*/*.report.json"):
        r = read_json(rep)
        run = rep.parent.parent.name
        if run == "bm25":
            kind, depth = "bm25", r.get("hits")
        elif run.endswith("+bm25"):
            kind, depth = "hybrid (dense)", r.get("dense_depth")
        else:
            kind, depth = "dense", r.get("search_depth", r.get("top_k"))
        out[kind]["unknown" if depth is None else str(depth)] += 1
    for rep in results.glob("bm25/hybrid/*.report.json"):
        depth = read_json(rep).get("hits")
        out["hybrid (BM25)"]["unknown" if depth is None else str(depth)] += 1
    return {k: c for k, c in out.items() if c}


def tables_written(results: Path) -> list[tuple[str, str]]:
    """Tables (CSV rows) and figures written, by path."""
    out = []
    for p in sorted(results.glob("**/table*.csv")) + sorted(results.glob("**/figure*.png")):
        if p.suffix == ".csv":
            rows = max(0, len(p.read_text().splitlines()) - 1)
            out.append((str(p.relative_to(results.parent)), f"{rows} rows"))
        else:
            out.append((str(p.relative_to(results.parent)), f"{p.stat().st_size} bytes"))
    return out


def summary(workdir: Path, cfg: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The page (Markdown) and its figures (JSON)."""
    results = workdir / "results"
    jobs = jobs_per_rule(workdir)
    train = training_rows(results)
    data = {
        "scale": cfg.get("scale"),
        "jobs_per_rule": dict(sorted(jobs.items())),
        "jobs": sum(jobs.values()),
        "training": train,
        "multi_sets": cfg.get("multi_sets", {}),
        "epochs": cfg.get("epochs", {}),
        "index_types": dict(index_types(results)),
        "search_depths": {k: dict(v) for k, v in search_depths(results).items()},
        "configured_depths": cfg.get("depths", {}),
        "tables": tables_written(results),
    }
    lines = [f"# Run summary (scale `{data['scale']}`)", ""]
    lines.append(f"**Jobs recorded: {data['jobs']}** in {len(jobs)} rules: " + ", ".join(
        f"{rule} {n}" for rule, n in sorted(jobs.items())) + ".")  # fmt: skip
    lines += ["", "**Multi sets** (each paper's): " + "; ".join(
        f"{paper}: {ts} = {' + '.join(ds)}" for paper, (ts, ds) in sorted(data["multi_sets"].items())
    ) + "."]  # fmt: skip
    lines += ["", "**Epochs per train set** (method: train set = epochs): " + "; ".join(
        f"{m}: " + ", ".join(f"{ts} = {e}" for ts, e in sorted(by.items()))
        for m, by in sorted(data["epochs"].items())) + "."]  # fmt: skip
    lines += ["", "**Index types** (files): " + ", ".join(
        f"{k} {v}" for k, v in sorted(data["index_types"].items())) + "."]  # fmt: skip
    depths = data["search_depths"]
    lines += ["", "**Search depths** (run files by depth): " + "; ".join(
        f"{kind}: " + ", ".join(f"{d} x{n}" for d, n in sorted(c.items())) for kind, c in depths.items()
    ) + "; configured: " + ", ".join(
        f"{k} {v}" for k, v in sorted(data["configured_depths"].items())) + "."]  # fmt: skip
    lines += ["", "**Training examples** per run and train set (read = records in the files; "
              "no positive = DPR's filter; not sampled = max_examples; method = unusable for "
              "the method, by cause):", "",
              "| run | train set | read | no positive | not sampled | method dropped (causes) "
              "| trained on | validation | epochs | steps | batch |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in train:
        if "released" in r:
            lines.append(f"| {r['run']} | {r['train_set']} | released checkpoint "
                         f"({r['released']}), not trained | | | | | | | | |")  # fmt: skip
            continue
        causes = ", ".join(f"{k} {v}" for k, v in sorted(r["causes"].items()))
        lines.append(
            f"| {r['run']} | {r['train_set']} | {r['read']} | {r['no_positive']} | "
            f"{r['not_sampled']} | {r['method_dropped']}{f' ({causes})' if causes else ''} | "
            f"{r['train']} | {r['val']} (+{r['val_no_positive']} no positive) | {r['epochs']} | "
            f"{r['steps']} | {r['batch']} |"
        )
    lines += ["", f"**Tables and figures written** ({len(data['tables'])}): " + ", ".join(
        f"`{p}` ({what})" for p, what in data["tables"]) + "."]  # fmt: skip
    return "\n".join(lines) + "\n", data


def _cmd_summary(args: argparse.Namespace) -> None:
    text, data = summary(Path(args.workdir), args.cfg)
    if args.json:
        write_json(args.json, data)
    write_text(text, args.out)
    print(text)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run-summary", help="one page on what a run did (make rehearse)")
    p.add_argument("--workdir", default=".", help="the directory holding results/ and .snakemake/")
    p.add_argument("--out", required=True, help="Markdown page to write")
    p.add_argument("--json", help="the same figures as JSON")
    add_cfg(p)
    p.set_defaults(func=_cmd_summary)
