"""Training variance (config ``seeds``): every trained run of Table 2 and of the claims trained
again under other seeds, and what the rows and the claims look like over those trainings.

A replica of run ``r`` under seed ``s`` is the run ``r@s<s>`` (drpipe.config.seeded): the same
cfg with only its ``seed`` changed, trained, encoded, searched and evaluated by the generic
rules. The run under the config's own ``seed`` is the run itself (no suffix, nothing retrained).

- ``drpipe seeds table`` (results/table2-seeds.csv / .md): each trained Table 2 row's top-k per
  seed, and their mean, standard deviation (n - 1) and range.
- ``drpipe seeds claims`` (results/claims-seeds.csv / .md): each claim whose runs are trained
  tested over the seeds. Its test is the claims table's paired bootstrap on the per-question
  differences **averaged over seeds** (each question's a - b is the mean of its a - b under each
  seed), with Holm's adjustment within its family and the same verdict rules
  (drpipe.claims.stats). Why this test: it keeps the per-question pairing every claim is
  tested with, and averaging over trainings shrinks the training noise a single training
  carries; a test across the seeds' means alone (a t-test on three differences, 2 degrees of
  freedom) has almost no power at three seeds, so the spread across seeds is shown (``diff_sd``
  and each seed's difference and verdict) rather than tested. A claim **holds over seeds**
  when the seed-averaged test says it holds and no single seed's difference points the other
  way (for a directional claim); when some seed's does, it says ``holds on average, not in
  every seed``.

Claims about the reader (EM) and about AOpt's rounds are left out with their reason: the
reader and AOpt's rounds are not repeated per seed (they read the seed-``seed`` retriever).
``seeds.claims`` names the claims to test (the squad scale's three headline claims); the others
are listed with that reason, and only the named claims' runs are trained again.
"""

from __future__ import annotations

import argparse
import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from drpipe.claims import (
    EM,
    _tested,
    claim_row,
    decide,
    load_claims,
    paired_outcomes,
    run_identity,
    tallies,
)
from drpipe.cliutil import add_cfg
from drpipe.config import seeded
from drpipe.errors import InputError
from drpipe.io import read_json
from drpipe.tables.output import md_table, write_csv, write_text

log = logging.getLogger(__name__)

HOLDS = "holds"
NOT_EVERY_SEED = "holds on average, not in every seed"


# ----------------------------------------------------------------------------- which runs
def trained_run(run: str, trained: str) -> bool:
    """Whether ``run`` (a Table 2 or claim run, maybe a hybrid ``<run>+bm25``) is one a seed
    repeats: its dense part matches ``trained`` (the plan's trained-run pattern)."""
    dense = run[: -len("+bm25")] if run.endswith("+bm25") else run
    return re.fullmatch(trained, dense) is not None


def seeded_entry(entry: dict, seed: int, trained: str) -> dict:
    """A resolved claim with each trained system's run replaced by its replica under ``seed``."""
    out = dict(entry)
    for side in ("a", "b"):
        system = entry[side]
        if system and trained_run(system["run"], trained):
            out[side] = {**system, "run": seeded(system["run"], seed)}
    return out


def why_not_seeded(
    claim: dict, entry: dict, trained: str, only: Sequence[str] | None = None
) -> str:
    """Why a claim is not tested over seeds ("" when it is): not resolved, not among ``only``
    (``seeds.claims``), about the reader, a run that is not repeated per seed (AOpt's rounds,
    which read the ``{seed}`` run's vectors), or no trained run compared."""
    if entry.get("reason"):
        return entry["reason"]
    if only is not None and claim["id"] not in only:
        return "not in seeds.claims, the claims this config tests over seeds"
    if claim["metric"] == EM:
        return "about the reader, which is not retrained per seed"
    runs = [entry[side]["run"] for side in ("a", "b")]
    fixed = [
        r
        for r in runs
        if not trained_run(r, trained) and r not in ("bm25", "init")
        and not r.startswith(("init.", "ext."))
    ]  # fmt: skip
    if fixed:
        return f"{' and '.join(fixed)}: not repeated per seed (made from the seed-{{seed}} runs)"
    if not any(trained_run(r, trained) for r in runs):
        return "compares no trained run"
    return ""


def claim_seeds_inputs(
    resolved: Sequence[dict], claims: Sequence[dict], seeds: Sequence[int], main_seed: int,
    trained: str, results: str = "results", only: Sequence[str] | None = None,
) -> list[str]:  # fmt: skip
    """The per-question files ``drpipe seeds claims`` reads (rule inputs); ``only``: the
    claims tested over seeds (``seeds.claims``; None: every one whose runs are trained)."""
    from drpipe.claims.systems import per_question_file

    by_id = {c["id"]: c for c in claims}
    files = set()
    for entry in resolved:
        claim = by_id.get(entry["id"])
        if claim is None or why_not_seeded(claim, entry, trained, only):
            continue
        for seed in seeds:
            e = entry if seed == main_seed else seeded_entry(entry, seed, trained)
            for side in ("a", "b"):
                files.add(str(per_question_file(results, e[side], e["scope"], claim["metric"])))
    return sorted(files)


# ------------------------------------------------------------------------------ the table
def seeds_table(
    metrics: Sequence[str | Path], rows: Sequence[dict], seeds: Sequence[int], ks: Sequence[int]
) -> pd.DataFrame:
    """One row per trained Table 2 row: top-k per seed (``top20_s13``), mean, sd (n - 1), min
    and max. ``metrics`` are ``drpipe evaluate``'s files, rows x seeds in that order."""
    if len(metrics) != len(rows) * len(seeds):
        raise ValueError(f"{len(metrics)} metrics files for {len(rows)} rows x {len(seeds)} seeds")
    out = []
    files = iter(metrics)
    for row in rows:
        record: dict[str, Any] = {
            k: row[k] for k in ("label", "run", "train_set", "dataset", "split")
        }
        values: dict[int, list[float]] = {k: [] for k in ks}
        n_questions = set()
        for seed in seeds:
            path = next(files)
            data = read_json(path)
            top = data.get("top_k") if isinstance(data, dict) else None
            if not isinstance(top, dict) or any(str(k) not in top for k in ks):
                raise InputError(path, "top_k", f"lacks top-k at {list(ks)}")
            n_questions.add(int(data.get("n_questions", 0)))
            for k in ks:
                values[k].append(float(top[str(k)]))
                record[f"top{k}_s{seed}"] = round(float(top[str(k)]), 2)
        if len(n_questions) != 1:
            raise InputError(
                row["run"],
                None,
                f"the seeds' runs were evaluated on {sorted(n_questions)} questions",
            )
        record["n_questions"] = n_questions.pop()
        record["seeds"] = " ".join(str(s) for s in seeds)
        for k in ks:
            v = np.asarray(values[k])
            record[f"top{k}_mean"] = round(float(v.mean()), 2)
            record[f"top{k}_sd"] = round(float(v.std(ddof=1)), 2) if v.size > 1 else float("nan")
            record[f"top{k}_min"] = round(float(v.min()), 2)
            record[f"top{k}_max"] = round(float(v.max()), 2)
        out.append(record)
    head = ["label", "run", "train_set", "dataset", "split", "n_questions", "seeds"]
    stats = [f"top{k}_{s}" for k in ks for s in ("mean", "sd", "min", "max")]
    per_seed = [f"top{k}_s{seed}" for k in ks for seed in seeds]
    return pd.DataFrame.from_records(out, columns=head + stats + per_seed)


def seeds_table_markdown(frame: pd.DataFrame, seeds: Sequence[int], ks: Sequence[int]) -> str:
    headers = ["Retriever", "Train set", "Dataset (split, n)"]
    headers += [f"Top-{k} mean ± sd (min–max)" for k in ks]
    rows = []
    for _, r in frame.iterrows():
        cells = [r["label"], r["train_set"], f"{r['dataset']} ({r['split']}, n={r['n_questions']})"]
        for k in ks:
            cells.append(
                f"{r[f'top{k}_mean']:.2f} ± {r[f'top{k}_sd']:.2f} "
                f"({r[f'top{k}_min']:.2f}–{r[f'top{k}_max']:.2f})"
            )
        rows.append(cells)
    seeds_text = ", ".join(str(s) for s in seeds)
    head = [
        "# Table 2's trained rows over seeds",
        "",
        f"Each row trained under seeds {seeds_text} (the first is the config's `seed`: Table 2's "
        "own row); everything else in the config the same. Values are computed by this pipeline: "
        "top-k retrieval accuracy (%), mean over the seeds, the sample standard deviation (n - 1) "
        "and the range. Per-seed values are in the CSV (`top<k>_s<seed>`).",
        "",
        "",
    ]
    return "\n".join(head) + md_table(headers, rows) + "\n"


# ----------------------------------------------------------------------------- the claims
def _same_direction(expect: str, diffs: Sequence[float]) -> int | None:
    """How many seeds' differences point the way a directional claim expects (None: a claim
    tested against a margin, which has no direction)."""
    if expect == "greater":
        return sum(d > 0 for d in diffs)
    if expect == "less":
        return sum(d < 0 for d in diffs)
    return None


def claims_over_seeds(
    claims: Sequence[dict],
    resolved: Sequence[dict],
    seeds: Sequence[int],
    main_seed: int,
    trained: str,
    results: str | Path,
    defaults: dict,
    only: Sequence[str] | None = None,
) -> pd.DataFrame:
    """The claims-over-seeds table (see the module's docstring for the test and the verdicts);
    a claim not among ``only`` (``seeds.claims``, None: all) is listed, not tested, with why."""
    alpha = float(defaults["alpha"])
    by_id = {e["id"]: e for e in resolved}
    rows: list[dict] = []
    per_seed_rows: dict[int, list[dict]] = {s: [] for s in seeds}
    for claim in claims:
        entry = by_id.get(claim["id"])
        if entry is None:
            continue
        row = claim_row(claim, entry)
        row["seeds"] = " ".join(str(s) for s in seeds)
        why = why_not_seeded(claim, entry, trained, only)
        if why:
            row["reason"] = why.replace("{seed}", str(main_seed))
            rows.append(row)
            continue
        found: dict[int, dict] = {}
        for seed in seeds:
            e = entry if seed == main_seed else seeded_entry(entry, seed, trained)
            got = paired_outcomes(claim, e, results, "results/claims-seeds.csv")
            if "reason" in got:
                row["reason"] = f"seed {seed}: {got['reason']}"
                break
            found[seed] = got
        if len(found) < len(seeds):
            rows.append(row)
            continue
        for seed, got in found.items():
            one = {**row, **_tested(claim, got["values"].to_numpy(), defaults)}
            per_seed_rows[seed].append(one)
            row[f"diff_s{seed}"] = one["diff"]
        common = found[seeds[0]]["values"].index
        for got in found.values():
            common = common.intersection(got["values"].index)
        averaged = np.mean([got["values"].loc[common].to_numpy() for got in found.values()], axis=0)
        row.update(_tested(claim, averaged, defaults))
        diffs = [row[f"diff_s{s}"] for s in seeds]
        row["diff_sd"] = round(float(np.std(diffs, ddof=1)), 2) if len(diffs) > 1 else None
        row["same_direction"] = _same_direction(claim["expect"], diffs)
        row["n_questions"] = len(common)
        notes = found[seeds[0]]["notes"]
        row["reason"] = "; ".join(notes)
        rows.append(row)
    decide(rows, alpha)
    for seed, seed_rows in per_seed_rows.items():
        decide(seed_rows, alpha)
        verdicts = {r["id"]: r["verdict"] for r in seed_rows}
        for row in rows:
            if row["id"] in verdicts:
                row[f"verdict_s{seed}"] = verdicts[row["id"]]
    for row in rows:
        row["verdict_mean"] = row["verdict"]
        against = row.get("same_direction")
        if row["verdict"] == HOLDS and against is not None and against < len(seeds):
            row["verdict"] = NOT_EVERY_SEED
    return _frame(rows, seeds)


def _frame(rows: list[dict], seeds: Sequence[int]) -> pd.DataFrame:
    columns = [
        "id", "paper", "family", "sentence", "system_a", "system_b", "run_a", "run_b",
        "train_set_a", "train_set_b", "dataset", "split", "metric", "contrast", "expect", "test",
        "margin", "seeds", "n_questions", "diff", "ci_low", "ci_high", "p_bootstrap", "p_test",
        "p_holm", "verdict_mean", "diff_sd", "same_direction",
        *(f"diff_s{s}" for s in seeds), *(f"verdict_s{s}" for s in seeds), "verdict", "reason",
    ]  # fmt: skip
    frame = pd.DataFrame.from_records(rows, columns=columns)
    for col in ("n_questions", "same_direction"):
        frame[col] = frame[col].astype("Int64")
    return frame


def claims_markdown(frame: pd.DataFrame, seeds: Sequence[int], identity: dict[str, str]) -> str:
    headers = ["Claim", "a vs b", "Metric", "Diff (mean over seeds)", "95% CI", "Holm p",
               "Per seed", "Verdict"]  # fmt: skip
    rows = []
    for _, r in frame.iterrows():
        tested = pd.notna(r["p_holm"])
        per_seed = ", ".join(
            f"{r[f'diff_s{s}']:+.2f}" for s in seeds if pd.notna(r.get(f"diff_s{s}"))
        )
        rows.append([
            r["id"],
            f"{r['system_a']} vs {r['system_b']}",
            r["metric"],
            f"{r['diff']:+.2f}" if tested else "",
            f"[{r['ci_low']:+.2f}, {r['ci_high']:+.2f}]" if tested else "",
            f"{r['p_holm']:.3g}" if tested else "",
            per_seed,
            r["verdict"] if tested else f"not tested: {r['reason']}",
        ])  # fmt: skip
    counts = tallies(frame[frame["p_holm"].notna()]) if frame["p_holm"].notna().any() else {}
    tally = "; ".join(
        f"{family}: " + ", ".join(f"{v} {k}" for k, v in c.items()) for family, c in counts.items()
    )
    run = ", ".join(f"{k} {v}" for k, v in identity.items() if v)
    head = [
        "# Claims over seeds",
        "",
        f"Seeds {', '.join(str(s) for s in seeds)}; run: {run or 'unknown'}. Each claim's test "
        "is the paired bootstrap of its per-question differences averaged over the seeds, with "
        "Holm's adjustment within its family; it holds over seeds when that test holds and no "
        "seed's own difference points the other way (docs/claims.md). Tally: "
        f"{tally or 'nothing tested'}.",
        "",
        "",
    ]
    return "\n".join(head) + md_table(headers, rows) + "\n"


# ------------------------------------------------------------------------------------ CLI
def _cmd_table(args: argparse.Namespace) -> int:
    cfg = args.cfg
    seeds, ks = [int(s) for s in cfg["seeds"]], [int(k) for k in cfg["ks"]]
    frame = seeds_table(args.metrics, cfg["rows"], seeds, ks)
    write_csv(frame, args.out)
    write_text(seeds_table_markdown(frame, seeds, ks), args.md)
    log.info("seeds table: %d rows x %d seeds -> %s", len(frame), len(seeds), args.out)
    return 0


def _cmd_claims(args: argparse.Namespace) -> int:
    cfg = args.cfg
    defaults, claims = load_claims({"own_claims": cfg.get("own_claims")})
    seeds = [int(s) for s in cfg["seeds"]]
    frame = claims_over_seeds(
        claims, cfg["resolved"], seeds, int(cfg["main_seed"]), cfg["trained"], args.results,
        defaults, cfg.get("only"),
    )  # fmt: skip
    identity = run_identity(args.results)
    for key, value in identity.items():
        frame[key] = value
    write_csv(frame, args.out)
    write_text(claims_markdown(frame, seeds, identity), args.md)
    for family, counts in tallies(frame[frame["p_holm"].notna()]).items():
        log.info(
            "claims over seeds, %s: %s", family, ", ".join(f"{v} {k}" for k, v in counts.items())
        )
    log.info("claims over seeds -> %s", args.out)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    group = sub.add_parser("seeds", help="Table 2's trained rows and the claims over seeds")
    cmds = group.add_subparsers(dest="seeds_command", required=True)
    p = cmds.add_parser("table", help="results/table2-seeds.csv and .md from the seeds' metrics")
    p.add_argument("--metrics", nargs="+", required=True, help="rows x seeds, in the cfg's order")
    add_cfg(p)
    p.add_argument("--out", required=True)
    p.add_argument("--md", required=True)
    p.set_defaults(func=_cmd_table)
    p = cmds.add_parser("claims", help="results/claims-seeds.csv and .md: claims over seeds")
    p.add_argument("--results", default="results", help="the results folder (default: results)")
    add_cfg(p)
    p.add_argument("--out", required=True)
    p.add_argument("--md", required=True)
    p.set_defaults(func=_cmd_claims)
