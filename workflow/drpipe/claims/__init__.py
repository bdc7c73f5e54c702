"""The papers' claims, tested with paired statistics over the same questions.

Claims are data (each paper's ``papers/<paper>/claims.yaml``; the format and shared defaults
in ``claims.yaml``): each names the paper, the sentence it comes from, two systems, a metric
(top-k retrieval accuracy, or ``em``: the reader's exact match, DPR's Table 4) and the expected
direction. ``resolve_claims`` turns the systems into runs of a config (a run, train set,
dataset and split, i.e. one per-question file of ``drpipe evaluate`` or ``drpipe reader
predict``), or into the reason a claim cannot be tested. ``evaluate_claims`` reads the
per-question outcomes of both systems (first-hit ranks; exact match), pairs them by question
and computes

- the difference of top-k accuracy or EM (percentage points), a paired bootstrap over questions
  (``resamples`` resamples with a fixed seed per claim: percentile 95% interval and a two-sided
  p-value from the bootstrap distribution centred on the null),
- the exact McNemar test on the discordant questions (a hit and b miss, or the reverse),
- a verdict: holds, reversed, not significant, or not tested (with the reason).

The package: ``stats``, the paired statistics; ``systems``, one system spec resolved against a
config; ``agreement``, two runs' verdicts compared claim by claim (``drpipe claims-agreement``);
``claims.yaml``, the format's shared defaults. This module holds the claims as data, their
resolution, the claims table and the ``claims`` subcommand.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from collections.abc import Iterable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from drpipe.claims.stats import claim_seed, holm, mcnemar_exact, paired_bootstrap, verdict
from drpipe.claims.systems import metrics_json, per_question_file, resolve_scope, resolve_system
from drpipe.cliutil import add_cfg
from drpipe.errors import InputError
from drpipe.io import atomic_path, read_json
from drpipe.papers import papers

log = logging.getLogger(__name__)

# Read at run time: part of the code hash of every rule that imports this module.
PACKAGE_DATA = ("claims/claims.yaml", "papers/*/claims.yaml")
EXPECT = ("greater", "less", "not_greater")
VERDICTS = ("holds", "reversed", "not significant", "not tested")
SYSTEM_KEYS = {"run", "method", "hybrid", "paper_row", "overrides", "key", "pick", "requires",
               "among", "by"}  # fmt: skip
EM = "em"  # the metric of end-to-end claims: per-question exact match of the reader
CLAIM_KEYS = {
    "id",
    "paper",
    "source",
    "sentence",
    "scope",
    "a",
    "b",
    "metric",
    "contrast",
    "expect",
}
COLUMNS = [
    "id",
    "paper",
    "source",
    "sentence",
    "system_a",
    "system_b",
    "run_a",
    "run_b",
    "train_set_a",
    "train_set_b",
    "dataset",
    "split",
    "metric",
    "contrast",
    "expect",
    "n_questions",
    "value_a",
    "value_b",
    "diff",
    "ci_low",
    "ci_high",
    "p_bootstrap",
    "p_mcnemar",
    "a_only",
    "b_only",
    "p_holm",
    "verdict",
    "reason",
]


# --------------------------------------------------------------------------- claims as data


def _metric_k(value: Any, where: str) -> int:
    text = str(value)
    if not text.startswith("top") or not text[3:].isdigit() or int(text[3:]) < 1:
        raise InputError(where, None, f"metric '{value}' is not top<k>")
    return int(text[3:])


def _check_system(spec: Any, where: str, at: str) -> None:
    if not isinstance(spec, dict) or not ({"run", "method", "among"} & set(spec)):
        raise InputError(where, at, "a system needs 'run', 'method' or 'among'")
    if set(spec) - SYSTEM_KEYS:
        raise InputError(where, at, f"unknown keys {sorted(set(spec) - SYSTEM_KEYS)}")
    if spec.get("pick", "max") not in ("max", "min"):
        raise InputError(where, at, "'pick' is max or min")
    if "among" in spec:
        # Pick, among several systems, the one whose retrieval is best (max) or worst (min).
        if not isinstance(spec["among"], list) or len(spec["among"]) < 2:
            raise InputError(where, at, "'among' lists two or more systems")
        if "pick" not in spec or "by" not in spec:
            raise InputError(where, at, "'among' needs 'by' (top<k>) and 'pick' (max|min)")
        _metric_k(spec["by"], where)
        for i, inner in enumerate(spec["among"]):
            if isinstance(inner, dict) and "among" in inner:
                raise InputError(where, f"{at}.among[{i}]", "'among' does not nest")
            _check_system(inner, where, f"{at}.among[{i}]")
    elif ("key" in spec) != ("pick" in spec):
        raise InputError(where, at, "'key' and 'pick' (max|min) go together")


def validate_claims(doc: Any, where: str = "drpipe/claims/claims.yaml") -> tuple[dict, list[dict]]:
    """(defaults, claims) of a claims document; errors name the claim and the key."""
    if not isinstance(doc, dict) or not isinstance(doc.get("claims"), list):
        raise InputError(where, None, "expected a mapping with a 'claims' list")
    defaults = {"alpha": 0.05, "resamples": 10000, "seed": 0, **(doc.get("defaults") or {})}
    if not 0 < float(defaults["alpha"]) < 1 or int(defaults["resamples"]) < 100:
        raise InputError(where, "defaults", "alpha must lie in (0, 1) and resamples be >= 100")
    seen = set()
    for i, claim in enumerate(doc["claims"]):
        cid = claim.get("id", f"#{i + 1}") if isinstance(claim, dict) else f"#{i + 1}"
        at = f"claim {cid}"
        if not isinstance(claim, dict):
            raise InputError(where, at, "a claim must be a mapping")
        unknown = set(claim) - CLAIM_KEYS
        if unknown:
            raise InputError(where, at, f"unknown keys {sorted(unknown)}")
        for key in ("id", "paper", "source", "sentence", "a", "b", "metric", "expect"):
            if not claim.get(key):
                raise InputError(where, at, f"missing '{key}'")
        if cid in seen:
            raise InputError(where, at, "duplicate id")
        seen.add(cid)
        if claim["expect"] not in EXPECT:
            raise InputError(where, at, f"expect '{claim['expect']}' is not one of {EXPECT}")
        if claim["metric"] != EM:
            _metric_k(claim["metric"], where)
        if claim.get("contrast") is not None:
            if claim["metric"] == EM:
                raise InputError(where, at, "'contrast' is for top-k metrics, not em")
            _metric_k(claim["contrast"], where)
        for side in ("a", "b"):
            _check_system(claim[side], where, f"{at}.{side}")
        scope = claim.get("scope") or {}
        if not scope.get("dataset") and not scope.get("config"):
            raise InputError(where, f"{at}.scope", "needs 'dataset' or 'config'")
    return defaults, doc["claims"]


def load_claims() -> tuple[dict, list[dict]]:
    """The shared defaults (``claims.yaml``) and every registered paper's claims, papers in
    registry order; each claim's ``paper`` must be the folder it is declared in."""
    text = resources.files("drpipe.claims").joinpath("claims.yaml").read_text(encoding="utf-8")
    doc = {"defaults": (yaml.safe_load(text) or {}).get("defaults"), "claims": []}
    for p in papers():
        path = p.file("claims.yaml")
        if path is None:
            continue
        where = f"drpipe/papers/{p.key}/claims.yaml"
        claims = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("claims")
        if not isinstance(claims, list):
            raise InputError(where, None, "expected a mapping with a 'claims' list")
        for claim in claims:
            if isinstance(claim, dict) and claim.get("paper") != p.key:
                raise InputError(where, f"claim {claim.get('id')}", f"paper is not '{p.key}'")
        doc["claims"] += claims
    return validate_claims(doc)


# --------------------------------------------------------------------------- claims -> runs


def resolve_claims(config: dict, claims: Sequence[dict] | None = None) -> list[dict]:
    """Every claim with its scope and both systems resolved, or the reason it cannot be."""
    if claims is None:
        claims = load_claims()[1]
    out = []
    for claim in claims:
        scope, note = resolve_scope(claim.get("scope") or {}, config)
        entry: dict[str, Any] = {
            "id": claim["id"],
            "scope": scope,
            "note": note,
            "reason": "",
            "metric": claim["metric"],
        }
        for side in ("a", "b"):
            system, why = resolve_system(claim[side], config, scope)
            entry[side] = system
            if system is None and not entry["reason"]:
                entry["reason"] = f"system {side}: {why}"
        out.append(entry)
    return out


def claim_inputs(resolved: Iterable[dict], results: str = "results") -> list[str]:
    """Per-question files of every claim whose two systems the config defines (rule inputs);
    a system picked among several by retrieval accuracy needs each one's files and metrics."""
    files = []
    for entry in resolved:
        if entry["a"] and entry["b"]:
            metric = entry.get("metric", "")
            for side in ("a", "b"):
                system = entry[side]
                for one in system.get("among") or [system]:
                    files.append(str(per_question_file(results, one, entry["scope"], metric)))
                    if "among" in system:
                        files.append(str(metrics_json(results, one, entry["scope"])))
    return sorted(set(files))


# --------------------------------------------------------------------------- testing claims


def read_ranks(path: Path) -> pd.Series:
    """First-hit rank per qid (NaN: no hit in the run) from a per-question file."""
    frame = pd.read_parquet(path, columns=["qid", "first_hit_rank"])
    if frame["qid"].duplicated().any():
        raise InputError(path, None, "duplicate qid")
    return frame.set_index("qid")["first_hit_rank"].astype("float64")


def read_em(path: Path) -> pd.Series:
    """Exact match per qid (1.0 or 0.0) from the answers of ``drpipe reader predict``."""
    frame = pd.read_parquet(path, columns=["qid", "em"])
    if frame["qid"].duplicated().any():
        raise InputError(path, None, "duplicate qid")
    if frame["em"].isna().any():
        raise InputError(path, f"qid {frame['qid'][frame['em'].isna()].iloc[0]}", "null em")
    return frame.set_index("qid")["em"].astype("float64")


def _hits(ranks: np.ndarray, k: int) -> np.ndarray:
    return np.nan_to_num(ranks, nan=np.inf) <= k


def _pick(system: dict, scope: dict, results: str | Path) -> tuple[dict | None, str]:
    """The system of ``among`` with the best (``pick: max``) or worst top-k accuracy in the
    results, and a note naming the candidates' accuracies; (None, reason) when one's metrics
    are missing or the candidates tie."""
    by = system["by"]
    k = str(_metric_k(by, "claims"))
    scored = []
    for one in system["among"]:
        path = metrics_json(results, one, scope)
        if not path.is_file():
            return None, f"not in the results: {os.path.relpath(path, Path(results).parent)}"
        scored.append((float(read_json(path)["top_k"][k]), one))
    values = [v for v, _ in scored]
    target = max(values) if system["pick"] == "max" else min(values)
    if values.count(target) > 1:
        return None, f"the candidates tie at {by} = {target:.2f}: no single {system['pick']}"
    value, chosen = next(x for x in scored if x[0] == target)
    listed = ", ".join(f"{o['label']} {v:.2f}" for v, o in scored)
    return {**chosen, "label": f"{chosen['label']} ({system['pick']} {by}: {listed})"}, ""


def evaluate_claim(claim: dict, entry: dict, results: str | Path, defaults: dict) -> dict[str, Any]:
    """One row of the claims table (statistics, or the reason the claim is not tested)."""
    scope = entry["scope"]
    row: dict[str, Any] = {
        "id": claim["id"],
        "paper": claim["paper"],
        "source": claim["source"],
        "sentence": claim["sentence"],
        "system_a": (entry["a"] or {}).get("label", json.dumps(claim["a"], sort_keys=True)),
        "system_b": (entry["b"] or {}).get("label", json.dumps(claim["b"], sort_keys=True)),
        "run_a": (entry["a"] or {}).get("run", ""),
        "run_b": (entry["b"] or {}).get("run", ""),
        "train_set_a": (entry["a"] or {}).get("train_set", ""),
        "train_set_b": (entry["b"] or {}).get("train_set", ""),
        "dataset": scope.get("dataset"),
        "split": scope.get("split"),
        "metric": claim["metric"],
        "contrast": claim.get("contrast") or "",
        "expect": claim["expect"],
        "verdict": "not tested",
        "reason": entry["reason"],
    }
    if entry["reason"]:
        return row
    metric = claim["metric"]
    systems = {}
    for side in ("a", "b"):
        system = entry[side]
        if "among" in system:
            system, why = _pick(system, scope, results)
            if system is None:
                row["reason"] = f"system {side}: {why}"
                return row
            row[f"system_{side}"] = system["label"]
            row[f"run_{side}"] = system["run"]
            row[f"train_set_{side}"] = system["train_set"]
        systems[side] = system
    if systems["a"]["run"] == systems["b"]["run"]:
        row["reason"] = f"both systems are {systems['a']['run']}"
        return row
    files = [per_question_file(results, systems[s], scope, metric) for s in ("a", "b")]
    missing = [os.path.relpath(f, Path(results).parent) for f in files if not f.is_file()]
    if missing:
        row["reason"] = (
            f"not in the results: {', '.join(missing)} (snakemake results/claims.csv builds them)"
        )
        return row
    read = read_em if metric == EM else read_ranks
    ra, rb = (read(f) for f in files)
    common = ra.index.intersection(rb.index)
    notes = [entry["note"]] if entry["note"] else []
    if len(common) < max(len(ra), len(rb)):
        notes.append(f"{len(common)} questions in both runs ({len(ra)} and {len(rb)} in each)")
    if len(common) == 0:
        row["reason"] = "the two runs share no question"
        return row
    a = ra.loc[common].to_numpy()
    b = rb.loc[common].to_numpy()
    if metric == EM:
        ha, hb = a > 0.5, b > 0.5
    else:
        k = _metric_k(metric, "claims")
        ha, hb = _hits(a, k), _hits(b, k)
    values = ha.astype(np.int8) - hb.astype(np.int8)
    if claim.get("contrast"):
        k2 = _metric_k(claim["contrast"], "claims")
        values = values - (_hits(a, k2).astype(np.int8) - _hits(b, k2).astype(np.int8))
        notes.append(f"diff = (a - b) at {claim['metric']} minus (a - b) at {claim['contrast']}")
    boot = paired_bootstrap(
        values, int(defaults["resamples"]), claim_seed(int(defaults["seed"]), claim["id"])
    )
    row.update(
        {
            "n_questions": len(common),
            "value_a": round(100.0 * ha.mean(), 2),
            "value_b": round(100.0 * hb.mean(), 2),
            "diff": round(100.0 * boot["mean"], 2),
            "ci_low": round(100.0 * boot["ci_low"], 2),
            "ci_high": round(100.0 * boot["ci_high"], 2),
            "p_bootstrap": boot["p"],
            "verdict": verdict(claim["expect"], boot["mean"], boot["p"], float(defaults["alpha"])),
            "reason": "; ".join(notes),
        }
    )
    if not claim.get("contrast"):
        a_only, b_only = int((ha & ~hb).sum()), int((~ha & hb).sum())
        row.update({"a_only": a_only, "b_only": b_only, "p_mcnemar": mcnemar_exact(a_only, b_only)})
    return row


def evaluate_claims(
    resolved: Sequence[dict],
    results: str | Path,
    claims: Sequence[dict] | None = None,
    defaults: dict | None = None,
) -> pd.DataFrame:
    """The claims table: one row per declared claim, tested or with its reason."""
    if claims is None or defaults is None:
        defaults, claims = load_claims()
    by_id = {e["id"]: e for e in resolved}
    rows = []
    for claim in claims:
        entry = by_id.get(claim["id"])
        if entry is None:
            entry = {"scope": {}, "a": None, "b": None, "note": "", "reason": "not resolved"}
        rows.append(evaluate_claim(claim, entry, results, defaults))
    frame = pd.DataFrame.from_records(rows, columns=COLUMNS)
    tested = frame["p_bootstrap"].notna()
    if tested.any():
        frame.loc[tested, "p_holm"] = holm(frame.loc[tested, "p_bootstrap"].tolist())
    for col in ("n_questions", "a_only", "b_only"):
        frame[col] = frame[col].astype("Int64")
    return frame


def write_claims(frame: pd.DataFrame, path: str | Path) -> None:
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False, float_format="%.6g")


def recorded_config(results: str | Path) -> dict:
    """The config a results folder was made with (its provenance record)."""
    path = Path(results) / "provenance.json"
    if not path.is_file():
        raise InputError(path, None, "no provenance record: run the workflow's `all` target")
    return read_json(path)["config"]


def config_from(configfile: str | Path, values: Sequence[str]) -> dict:
    """The config a run is being made with: ``configfile`` (the workflow's config.yaml) and
    Snakemake's ``--config`` values (``scale=squad``), resolved as the workflow resolves them.
    For a folder whose run has not finished: it has no provenance record yet."""
    # lazy: the schema's plug-ins import every paper
    from drpipe.config import ConfigError, load, parse_config_values

    try:
        overrides = parse_config_values(list(values))
    except ConfigError as err:
        raise SystemExit(f"error: {err}") from None
    configfile = Path(configfile)
    schema = configfile.parent / "workflow" / "schemas" / "config.schema.yaml"
    return load(configfile, schema, overrides)


def _cmd(args: argparse.Namespace) -> int:
    defaults, claims = load_claims()
    cfg = args.cfg
    if "resolved" in cfg:
        resolved = cfg["resolved"]
    elif args.config is not None:
        resolved = resolve_claims(config_from(args.configfile, args.config), claims)
    else:
        resolved = resolve_claims(recorded_config(args.results), claims)
    frame = evaluate_claims(resolved, args.results, claims, defaults)
    write_claims(frame, args.out)
    counts = frame["verdict"].value_counts().to_dict()
    log.info("claims: %s -> %s", ", ".join(f"{v} {k}" for k, v in counts.items()), args.out)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("claims", help="test the papers' claims with paired statistics")
    p.add_argument("--results", default="results", help="results folder (metrics/ under it)")
    p.add_argument("--out", required=True, help="claims CSV to write")
    add_cfg(p)  # {"resolved": [...]} from the rule; without it, the recorded config is used
    p.add_argument(
        "--config", nargs="*", metavar="NAME=VALUE",
        help="a run still going (no provenance record yet): resolve the claims against "
        "--configfile with these `snakemake --config` values (e.g. scale=squad); the claims "
        "whose runs are not finished are listed as not tested",
    )  # fmt: skip
    p.add_argument("--configfile", default="config.yaml", help="the workflow's config.yaml")
    p.set_defaults(func=_cmd)
