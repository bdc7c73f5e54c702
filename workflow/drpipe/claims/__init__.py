"""The papers' claims, tested with paired statistics over the same questions.

Claims are data (each paper's ``papers/<paper>/claims.yaml``; the format and shared defaults
in ``claims.yaml``): each names the paper, the sentence it comes from, two systems, a metric
(top-k retrieval accuracy, or ``em``: the reader's exact match, DPR's Table 4), the expected
direction and its family. ``resolve_claims`` turns the systems into runs of a config (a run,
train set, dataset and split, i.e. one per-question file of ``drpipe evaluate`` or ``drpipe
reader predict``), or into the reason a claim cannot be tested. ``evaluate_claims`` reads the
per-question outcomes of both systems (first-hit ranks; exact match), pairs them by question
and computes

- the difference of top-k accuracy or EM (percentage points), a paired bootstrap over questions
  (``resamples`` resamples with a fixed seed per claim: percentile 95% interval, a two-sided
  p-value from the bootstrap distribution centred on the null and, for a claim with a margin,
  the one-sided percentile p-values against it),
- the exact McNemar test on the discordant questions (a hit and b miss, or the reverse),
- the claim's own p (``p_test``: two-sided for a directional claim, non-inferiority or TOST
  against the margin otherwise) and Holm's adjustment of it within the claim's family
  (``leak-free`` and ``oracle`` apart: an oracle run saw the test answers),
- a verdict decided on the Holm-adjusted p (``drpipe.claims.stats``): holds, reversed, not
  significant (directional), not shown (a margin claim whose interval is too wide), or not
  tested (with the reason),
- the run it came from: commit, scale and config hash (``run_commit``, ``run_scale``,
  ``run_config_hash``) from the results folder's provenance record.

``restate`` recomputes the verdicts of a stored claims table (an earlier run whose results
folder is gone) under these rules from the counts it carries. The rules for readers are in
docs/claims.md.

The package: ``stats``, the paired statistics and verdicts; ``systems``, one system spec
resolved against a config; ``agreement``, two runs' verdicts compared claim by claim
(``drpipe claims-agreement``); ``claims.yaml``, the format's shared defaults. This module holds
the claims as data, their resolution, the claims table and the ``claims`` subcommand.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import os
from collections.abc import Iterable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from drpipe.claims.stats import (
    MARGINAL,
    TESTS,
    claim_seed,
    decisive_p,
    holm,
    mcnemar_exact,
    paired_bootstrap,
    verdict,
)
from drpipe.claims.systems import per_question_file, resolve_scope, resolve_system
from drpipe.cliutil import add_cfg
from drpipe.config import YamlSafeLoader
from drpipe.errors import InputError
from drpipe.io import atomic_path, read_json
from drpipe.papers import papers

log = logging.getLogger(__name__)

# Read at run time: part of the code hash of every rule that imports this module.
PACKAGE_DATA = ("claims/claims.yaml", "papers/*/claims.yaml")
EXPECT = ("greater", "less", *MARGINAL)
VERDICTS = ("holds", "reversed", "not significant", "not shown", "not tested")
# Families of the Holm adjustment and of the tallies: an oracle run saw the test answers; "own"
# holds the user's claims (config own_claims), apart from the papers'.
FAMILIES = ("leak-free", "oracle", "own")
OWN = "own"
SYSTEM_KEYS = {"run", "method", "hybrid", "paper_row", "overrides", "key", "pick", "requires"}
UNRECORDED = "unrecorded"
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
    "margin",
    "family",
}
COLUMNS = [
    "id",
    "paper",
    "family",
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
    "test",
    "margin",
    "n_questions",
    "value_a",
    "value_b",
    "diff",
    "ci_low",
    "ci_high",
    "p_bootstrap",
    "p_test",
    "p_mcnemar",
    "a_only",
    "b_only",
    "p_holm",
    "verdict",
    "reason",
    "run_commit",
    "run_scale",
    "run_config_hash",
]
PROVENANCE = ("run_commit", "run_scale", "run_config_hash")


# --------------------------------------------------------------------------- claims as data


def _metric_k(value: Any, where: str) -> int:
    text = str(value)
    if not text.startswith("top") or not text[3:].isdigit() or int(text[3:]) < 1:
        raise InputError(where, None, f"metric '{value}' is not top<k>")
    return int(text[3:])


def _check_system(spec: Any, where: str, at: str) -> None:
    if not isinstance(spec, dict) or not ({"run", "method"} & set(spec)):
        raise InputError(where, at, "a system needs 'run' or 'method'")
    if set(spec) - SYSTEM_KEYS:
        raise InputError(where, at, f"unknown keys {sorted(set(spec) - SYSTEM_KEYS)}")
    if spec.get("pick", "max") not in ("max", "min"):
        raise InputError(where, at, "'pick' is max or min")
    if ("key" in spec) != ("pick" in spec):
        raise InputError(where, at, "'key' and 'pick' (max|min) go together")


def family_of(claim: dict) -> str:
    """The claim's family (``leak-free`` unless it says ``oracle``)."""
    return str(claim.get("family") or FAMILIES[0])


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
        if claim.get("family", FAMILIES[0]) not in FAMILIES:
            raise InputError(where, at, f"family '{claim['family']}' is not one of {FAMILIES}")
        systems = json.dumps([claim["a"], claim["b"]], sort_keys=True)
        if "oracle" in systems and family_of(claim) != "oracle":
            raise InputError(
                where, at, "a system names an oracle run: the claim's family is oracle"
            )
        margin = claim.get("margin")
        if claim["expect"] in MARGINAL:
            if not isinstance(margin, (int, float)) or isinstance(margin, bool) or margin <= 0:
                raise InputError(
                    where, at, f"expect {claim['expect']} needs 'margin' (points, > 0)"
                )
        elif margin is not None:
            raise InputError(where, at, f"'margin' is for {MARGINAL} claims, not {claim['expect']}")
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


def own_claims(config: dict | None, taken: Iterable[str] = ()) -> list[dict]:
    """The user's claims (config ``own_claims``: the papers' format, about any rows, an
    imported run's ``ext.<name>`` among them): paper and family ``own``, their own Holm family
    and tally. Errors name the config key and the claim."""
    own = (config or {}).get("own_claims") or []
    where = "config own_claims"
    if not isinstance(own, list):
        raise InputError(where, None, "expected a list of claims")
    out = []
    for i, claim in enumerate(own):
        if not isinstance(claim, dict):
            raise InputError(where, f"#{i + 1}", "a claim must be a mapping")
        at = f"claim {claim.get('id', f'#{i + 1}')}"
        if claim.get("paper", OWN) != OWN or claim.get("family", OWN) != OWN:
            raise InputError(where, at, "paper and family of your own claims are 'own'")
        if claim.get("id") in set(taken):
            raise InputError(where, at, "duplicate id: a paper's claim has it")
        out.append({"source": "own claim (config own_claims)", **claim, "paper": OWN,
                    "family": OWN})  # fmt: skip
    validate_claims({"claims": out}, where)
    return out


def load_claims(config: dict | None = None) -> tuple[dict, list[dict]]:
    """The shared defaults (``claims.yaml``) and every registered paper's claims, papers in
    registry order (each claim's ``paper`` must be the folder it is declared in), then the
    config's own claims (``own_claims``)."""
    text = resources.files("drpipe.claims").joinpath("claims.yaml").read_text(encoding="utf-8")
    doc = {"defaults": (yaml.load(text, Loader=YamlSafeLoader) or {}).get("defaults"), "claims": []}
    for p in papers():
        path = p.file("claims.yaml")
        if path is None:
            continue
        where = f"drpipe/papers/{p.key}/claims.yaml"
        text = path.read_text(encoding="utf-8")
        claims = (yaml.load(text, Loader=YamlSafeLoader) or {}).get("claims")
        if not isinstance(claims, list):
            raise InputError(where, None, "expected a mapping with a 'claims' list")
        for claim in claims:
            if isinstance(claim, dict) and claim.get("paper") != p.key:
                raise InputError(where, f"claim {claim.get('id')}", f"paper is not '{p.key}'")
        doc["claims"] += claims
    for claim in doc["claims"]:
        if isinstance(claim, dict) and claim.get("family") == OWN:
            raise InputError("drpipe/papers", f"claim {claim.get('id')}", "family 'own' is "
                             "for the config's own_claims")  # fmt: skip
    doc["claims"] += own_claims(config, [c.get("id") for c in doc["claims"] if isinstance(c, dict)])
    return validate_claims(doc)


# --------------------------------------------------------------------------- claims -> runs


def resolve_claims(config: dict, claims: Sequence[dict] | None = None) -> list[dict]:
    """Every claim with its scope and both systems resolved, or the reason it cannot be."""
    if claims is None:
        claims = load_claims(config)[1]
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
    """Per-question files of every claim whose two systems the config defines (rule inputs)."""
    files = []
    for entry in resolved:
        if entry["a"] and entry["b"]:
            metric = entry.get("metric", "")
            for side in ("a", "b"):
                files.append(str(per_question_file(results, entry[side], entry["scope"], metric)))
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


def claim_row(claim: dict, entry: dict) -> dict[str, Any]:
    """A claims-table row's identity columns (its statistics still to come)."""
    scope = entry["scope"]
    return {
        "id": claim["id"],
        "paper": claim["paper"],
        "family": family_of(claim),
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
        "test": TESTS[claim["expect"]],
        "margin": claim.get("margin"),
        "verdict": "not tested",
        "reason": entry["reason"],
    }


def paired_outcomes(
    claim: dict, entry: dict, results: str | Path, target: str = "results/claims.csv"
) -> dict[str, Any]:
    """The per-question outcomes a claim compares: ``hits_a``, ``hits_b`` (bool Series by qid,
    on the questions both runs answered), ``values`` (the per-question differences the test
    reads, a - b, minus the contrast's) and ``notes``; or ``{"reason": ...}`` when it cannot be
    tested (a missing file's names the ``target`` that builds it)."""
    if entry["reason"]:
        return {"reason": entry["reason"]}
    scope, metric = entry["scope"], claim["metric"]
    systems = {side: entry[side] for side in ("a", "b")}
    if systems["a"]["run"] == systems["b"]["run"]:
        return {"reason": f"both systems are {systems['a']['run']}"}
    files = [per_question_file(results, systems[s], scope, metric) for s in ("a", "b")]
    missing = [os.path.relpath(f, Path(results).parent) for f in files if not f.is_file()]
    if missing:
        return {
            "reason": f"not in the results: {', '.join(missing)} (snakemake {target} builds them)"
        }
    read = read_em if metric == EM else read_ranks
    ra, rb = (read(f) for f in files)
    common = ra.index.intersection(rb.index)
    notes = [entry["note"]] if entry["note"] else []
    if len(common) < max(len(ra), len(rb)):
        notes.append(f"{len(common)} questions in both runs ({len(ra)} and {len(rb)} in each)")
    if len(common) == 0:
        return {"reason": "the two runs share no question"}
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
    return {
        "hits_a": pd.Series(ha, index=common),
        "hits_b": pd.Series(hb, index=common),
        "values": pd.Series(values.astype(np.float64), index=common),
        "notes": notes,
    }


def evaluate_claim(claim: dict, entry: dict, results: str | Path, defaults: dict) -> dict[str, Any]:
    """One row of the claims table (statistics, or the reason the claim is not tested); its
    Holm p and verdict are set over the family by ``decide``."""
    row = claim_row(claim, entry)
    found = paired_outcomes(claim, entry, results)
    if "reason" in found:
        row["reason"] = found["reason"]
        return row
    ha, hb = found["hits_a"].to_numpy(), found["hits_b"].to_numpy()
    row.update(_tested(claim, found["values"].to_numpy(), defaults))
    row.update(
        {
            "n_questions": len(ha),
            "value_a": round(100.0 * ha.mean(), 2),
            "value_b": round(100.0 * hb.mean(), 2),
            "reason": "; ".join(found["notes"]),
        }
    )
    if not claim.get("contrast"):
        a_only, b_only = int((ha & ~hb).sum()), int((~ha & hb).sum())
        row.update({"a_only": a_only, "b_only": b_only, "p_mcnemar": mcnemar_exact(a_only, b_only)})
    return row


def _tested(claim: dict, values: np.ndarray, defaults: dict) -> dict[str, Any]:
    """The bootstrap columns of a tested claim, and the unrounded figures ``decide`` reads."""
    margin = claim.get("margin")
    boot = paired_bootstrap(
        values,
        int(defaults["resamples"]),
        claim_seed(int(defaults["seed"]), claim["id"]),
        margin=None if margin is None else float(margin) / 100.0,
    )
    return {
        "diff": round(100.0 * boot["mean"], 2),
        "ci_low": round(100.0 * boot["ci_low"], 2),
        "ci_high": round(100.0 * boot["ci_high"], 2),
        "p_bootstrap": boot["p"],
        "p_test": decisive_p(claim["expect"], boot),
        "_exact": (100.0 * boot["mean"], 100.0 * boot["ci_low"], 100.0 * boot["ci_high"]),
    }


def decide(rows: list[dict], alpha: float) -> None:
    """Holm's adjustment of ``p_test`` within each family of tested rows, and each row's verdict
    from it (in place)."""
    for family in dict.fromkeys(r["family"] for r in rows):
        tested = [r for r in rows if r["family"] == family and _num(r.get("p_test")) is not None]
        for row, adjusted in zip(tested, holm([r["p_test"] for r in tested]), strict=True):
            mean, low, high = row.get("_exact") or (row["diff"], row["ci_low"], row["ci_high"])
            margin = _num(row.get("margin"))
            row["p_holm"] = adjusted
            row["verdict"] = verdict(row["expect"], mean, adjusted, alpha, (low, high), margin)


def _num(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(out) else out


def tallies(frame: pd.DataFrame) -> dict[str, dict[str, int]]:
    """Verdict counts per family: {"leak-free": {"holds": 9, ...}, "oracle": {...}}."""
    return {
        family: {str(k): int(v) for k, v in group["verdict"].value_counts().items()}
        for family, group in frame.groupby("family", sort=False)
    }


def _frame(rows: list[dict], identity: dict[str, str]) -> pd.DataFrame:
    frame = pd.DataFrame.from_records(
        [{**row, **identity} if not row.get("run_commit") else row for row in rows],
        columns=COLUMNS,
    )
    for col in ("n_questions", "a_only", "b_only"):
        frame[col] = frame[col].astype("Int64")
    return frame


def evaluate_claims(
    resolved: Sequence[dict],
    results: str | Path,
    claims: Sequence[dict] | None = None,
    defaults: dict | None = None,
    identity: dict[str, str] | None = None,
) -> pd.DataFrame:
    """The claims table: one row per declared claim, tested or with its reason, each with the
    run it came from (``identity``; by default the results folder's provenance record)."""
    if claims is None or defaults is None:
        defaults, claims = load_claims()
    rows = _evaluate_rows(resolved, results, claims, defaults)
    decide(rows, float(defaults["alpha"]))
    return _frame(rows, run_identity(results) if identity is None else identity)


def _evaluate_rows(
    resolved: Sequence[dict], results: str | Path, claims: Sequence[dict], defaults: dict
) -> list[dict]:
    by_id = {e["id"]: e for e in resolved}
    rows = []
    for claim in claims:
        entry = by_id.get(claim["id"])
        if entry is None:
            entry = {"scope": {}, "a": None, "b": None, "note": "", "reason": "not resolved"}
        rows.append(evaluate_claim(claim, entry, results, defaults))
    return rows


def write_claims(frame: pd.DataFrame, path: str | Path) -> None:
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False, float_format="%.6g")


# --------------------------------------------------------------------------- provenance


def config_hash(config: dict) -> str:
    """sha256 (16 hex digits) of a config as the provenance record holds it (sorted JSON)."""
    text = json.dumps(config, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def run_identity(results: str | Path, config: dict | None = None) -> dict[str, str]:
    """Commit, scale and config hash of the run a results folder holds: from its provenance
    record (``code.commit``, with "+dirty" when the tree had changes; ``scale``; the hash of
    ``config``). Without a record (a run still going, ``config`` given): the working tree's
    commit and the hash of ``config`` as the record will hold it; otherwise "unrecorded"."""
    path = Path(results) / "provenance.json"
    if path.is_file():
        record = read_json(path)
        code = record.get("code") or {}
        commit = code.get("commit") or UNRECORDED
        if code.get("dirty"):
            commit += "+dirty"
        return {
            "run_commit": commit,
            "run_scale": str(record.get("scale") or UNRECORDED),
            "run_config_hash": config_hash(record["config"]) if "config" in record else UNRECORDED,
        }
    if config is None:
        return dict.fromkeys(PROVENANCE, UNRECORDED)
    # lazy: the schema's plug-ins import every paper
    from drpipe.config import result_config
    from drpipe.provenance import git_state

    state = git_state(Path.cwd())
    commit = state["commit"] or UNRECORDED
    return {
        "run_commit": commit + ("+dirty" if state["dirty"] else "") + " (run not finished)",
        "run_scale": str(config.get("scale") or UNRECORDED),
        "run_config_hash": config_hash(result_config(config)),
    }


def recorded_config(results: str | Path) -> dict:
    """The config a results folder was made with (its provenance record)."""
    path = Path(results) / "provenance.json"
    if not path.is_file():
        raise InputError(path, None, "no provenance record: run the workflow's `all` target")
    return read_json(path)["config"]


# --------------------------------------------------------------------------- stored tables


def restate(
    path: str | Path,
    identity: dict[str, str],
    claims: Sequence[dict] | None = None,
    defaults: dict | None = None,
) -> tuple[list[dict], list[str]]:
    """The tested rows of a stored claims table (an earlier run, ``identity`` its commit, scale
    and config hash) with their statistics recomputed under the current rules, and the ids of
    its rows that are no longer declared (left out).

    A row with ``a_only``, ``b_only`` and ``n_questions`` (no ``contrast``) fixes its
    per-question differences (+1 a_only times, -1 b_only times, 0 otherwise), so the paired
    bootstrap is rerun exactly, with the claim's seed; the recomputed difference, interval and
    two-sided p must equal the stored ones, or this raises. A contrast row (a difference of
    gains: the counts are not stored) is directional and keeps its stored two-sided p. Holm
    and verdicts are set by ``decide`` over the table the rows join."""
    if claims is None or defaults is None:
        defaults, claims = load_claims()
    by_id = {c["id"]: c for c in claims}
    stored = pd.read_csv(path)
    rows, dropped = [], []
    for rec in stored.to_dict("records"):
        claim = by_id.get(rec["id"])
        if claim is None:
            dropped.append(str(rec["id"]))
            continue
        if _num(rec.get("p_bootstrap")) is None:
            continue  # not tested in that run
        row = {k: rec.get(k) for k in COLUMNS if k in rec}
        row.update(
            {
                "family": family_of(claim),
                "expect": claim["expect"],
                "test": TESTS[claim["expect"]],
                "margin": claim.get("margin"),
                "contrast": claim.get("contrast") or "",
                **identity,
            }
        )
        note = (
            f"restated from the counts stored in {Path(path).name} (run {identity['run_commit']})"
        )
        if claim.get("contrast") or _num(rec.get("a_only")) is None:
            if claim["expect"] in MARGINAL:
                raise InputError(path, rec["id"], "a margin claim needs its a_only/b_only counts")
            row["p_test"] = float(rec["p_bootstrap"])
            note = f"verdict restated from the stored p of {Path(path).name} (run {identity['run_commit']})"
        else:
            n, a_only, b_only = (int(rec[k]) for k in ("n_questions", "a_only", "b_only"))
            values = np.array([1] * a_only + [-1] * b_only + [0] * (n - a_only - b_only))
            redone = _tested(claim, values, defaults)
            for key in ("diff", "ci_low", "ci_high", "p_bootstrap"):
                if not math.isclose(redone[key], float(rec[key]), rel_tol=1e-5, abs_tol=1e-9):
                    raise InputError(
                        path,
                        rec["id"],
                        f"{key} {rec[key]} is not what its counts give ({redone[key]})",
                    )
            row.update(redone)
        reason = "" if pd.isna(rec.get("reason")) else str(rec.get("reason") or "")
        row["reason"] = "; ".join(x for x in (reason, note) if x)
        rows.append(row)
    return rows, dropped


def parse_identity(text: str) -> dict[str, str]:
    """``COMMIT,SCALE[,CONFIG_HASH]`` (the run a stored table came from) as identity columns."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) not in (2, 3) or not all(parts):
        raise SystemExit(f"error: --table-run is COMMIT,SCALE[,CONFIG_HASH], not {text!r}")
    parts += [UNRECORDED] * (3 - len(parts))
    return dict(zip(PROVENANCE, parts, strict=True))


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
    rows: list[dict] = []
    if args.results is not None or args.from_table is None:
        results = args.results or "results"
        cfg = args.cfg
        config = None
        if "resolved" in cfg:  # from the rule, with the config's own claims
            defaults, claims = load_claims({"own_claims": cfg.get("own_claims")})
            resolved = cfg["resolved"]
        else:
            if args.config is not None:
                config = config_from(args.configfile, args.config)
                against = config
            else:
                against = recorded_config(results)
            defaults, claims = load_claims(against)
            resolved = resolve_claims(against, claims)
        identity = run_identity(results, config)
        rows = [{**r, **identity} for r in _evaluate_rows(resolved, results, claims, defaults)]
    else:
        defaults, claims = load_claims()
    alpha = float(defaults["alpha"])
    if args.from_table is not None:
        if args.table_run is None:
            raise SystemExit("error: --from-table needs --table-run COMMIT,SCALE[,CONFIG_HASH]")
        stored, dropped = restate(args.from_table, parse_identity(args.table_run), claims, defaults)
        if dropped:
            log.info("claims: %s no longer declared: left out", ", ".join(dropped))
        tested = {r["id"] for r in rows if _num(r.get("p_test")) is not None}
        by_id = {r["id"]: r for r in stored}
        if rows:
            rows = [
                r if r["id"] in tested or r["id"] not in by_id else by_id[r["id"]] for r in rows
            ]
        else:
            declared = [c["id"] for c in claims]
            rows = [by_id[i] for i in declared if i in by_id]
    decide(rows, alpha)
    frame = _frame(rows, {})
    write_claims(frame, args.out)
    for family, counts in tallies(frame).items():
        log.info("claims, %s: %s", family, ", ".join(f"{v} {k}" for k, v in counts.items()))
    log.info("claims -> %s", args.out)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("claims", help="test the papers' claims with paired statistics")
    p.add_argument(
        "--results", default=None,
        help="results folder (metrics/ under it; default results, none with --from-table)",
    )  # fmt: skip
    p.add_argument("--out", required=True, help="claims CSV to write")
    add_cfg(p)  # {"resolved": [...]} from the rule; without it, the recorded config is used
    p.add_argument(
        "--config", nargs="*", metavar="NAME=VALUE",
        help="a run still going (no provenance record yet): resolve the claims against "
        "--configfile with these `snakemake --config` values (e.g. scale=squad); the claims "
        "whose runs are not finished are listed as not tested",
    )  # fmt: skip
    p.add_argument("--configfile", default="config.yaml", help="the workflow's config.yaml")
    p.add_argument(
        "--from-table", metavar="CSV",
        help="a stored claims table of an earlier run: its tested rows, restated under the "
        "current rules from the counts they carry, fill the claims --results does not test "
        "(all of them without --results)",
    )  # fmt: skip
    p.add_argument(
        "--table-run", metavar="COMMIT,SCALE[,CONFIG_HASH]",
        help="the run --from-table came from (its provenance columns; hash 'unrecorded' if "
        "not given)",
    )  # fmt: skip
    p.set_defaults(func=_cmd)
