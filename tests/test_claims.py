"""Claims as data and their paired statistics, checked against scipy on hand-made examples."""

from __future__ import annotations

import copy
import json
import re
import unicodedata
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from drpipe import claims as C
from drpipe.config import read_defaults, resolve
from drpipe.errors import InputError
from drpipe.methods import method_names

REPO = Path(__file__).resolve().parents[1]
RAW = read_defaults(REPO)
SCHEMA = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
PAPERS = REPO.parent / "shared" / "papers"


# --------------------------------------------------------------------------- statistics


@pytest.mark.parametrize(("a_only", "b_only"), [(9, 2), (2, 9), (0, 5), (20, 20), (13, 31), (1, 0)])
def test_mcnemar_exact_equals_scipy_binomial_test(a_only, b_only):
    expected = stats.binomtest(a_only, a_only + b_only, 0.5, alternative="two-sided").pvalue
    assert C.mcnemar_exact(a_only, b_only) == pytest.approx(expected, rel=1e-12)


def test_mcnemar_without_discordant_pairs_is_one():
    assert C.mcnemar_exact(0, 0) == 1.0


def _hand_made_hits():
    # 60 questions: a hits 41, b hits 30; 15 only a, 4 only b (a hand-made, clearly paired case).
    a = np.array([1] * 26 + [1] * 15 + [0] * 4 + [0] * 15)
    b = np.array([1] * 26 + [0] * 15 + [1] * 4 + [0] * 15)
    return a, b


def test_bootstrap_interval_matches_scipy_paired_percentile_bootstrap():
    a, b = _hand_made_hits()
    ours = C.paired_bootstrap(a - b, resamples=10000, seed=7)
    ref = stats.bootstrap(
        (a, b),
        lambda x, y, axis: np.mean(x - y, axis=axis),
        paired=True,
        vectorized=True,
        n_resamples=10000,
        method="percentile",
        random_state=np.random.default_rng(11),
    )
    assert ours["mean"] == pytest.approx((41 - 30) / 60)
    # Two Monte Carlo estimates of the same quantiles (different random streams).
    assert ours["ci_low"] == pytest.approx(ref.confidence_interval.low, abs=0.02)
    assert ours["ci_high"] == pytest.approx(ref.confidence_interval.high, abs=0.02)


def test_bootstrap_p_value_matches_index_resampling():
    """The multinomial draw is the index bootstrap in distribution: compare the p-values."""
    a, b = _hand_made_hits()
    d = a - b
    rng = np.random.default_rng(3)
    idx = rng.integers(0, d.size, size=(20000, d.size))
    means = d[idx].mean(axis=1)
    brute = (1 + np.sum(np.abs(means - d.mean()) >= abs(d.mean()) - 1e-12)) / (20000 + 1)
    ours = C.paired_bootstrap(d, resamples=20000, seed=5)["p"]
    assert ours == pytest.approx(brute, abs=0.004)
    # ... and the bootstrap and McNemar agree that this difference is significant.
    assert ours < 0.05 and C.mcnemar_exact(15, 4) < 0.05


def test_bootstrap_is_reproducible_and_null_difference_is_not_significant():
    d = np.array([1, -1] * 50)
    one = C.paired_bootstrap(d, resamples=2000, seed=1)
    assert one == C.paired_bootstrap(d, resamples=2000, seed=1)
    assert one["mean"] == 0.0 and one["p"] == 1.0
    assert C.claim_seed(13, "x") == C.claim_seed(13, "x") != C.claim_seed(13, "y")


def test_holm_matches_hand_computation():
    assert C.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])


@pytest.mark.parametrize(
    ("expect", "diff", "p_holm", "ci", "verdict"),
    [
        ("greater", 0.05, 0.001, None, "holds"),
        ("greater", -0.05, 0.001, None, "reversed"),
        ("greater", 0.05, 0.2, None, "not significant"),
        ("less", -0.05, 0.001, None, "holds"),
        ("less", 0.05, 0.001, None, "reversed"),
        # against a margin of 1 point: holds on the test's own p, reversed when the whole
        # interval lies beyond the margin, otherwise not shown (absence of evidence)
        ("not_greater", 0.2, 0.001, (-0.2, 0.6), "holds"),
        ("not_greater", 0.2, 0.4, (-0.9, 1.3), "not shown"),
        ("not_greater", 2.0, 0.9, (1.2, 2.8), "reversed"),
        ("equivalent", -2.0, 0.9, (-2.8, -1.2), "reversed"),
        ("equivalent", 0.1, 0.3, (-1.5, 1.5), "not shown"),
    ],
)
def test_verdicts(expect, diff, p_holm, ci, verdict):
    margin = None if ci is None else 1.0
    assert C.verdict(expect, diff, p_holm, 0.05, ci, margin) == verdict


def _row(cid, p, family="leak-free", expect="greater", diff=1.0, margin=None):
    return {"id": cid, "family": family, "expect": expect, "p_test": p, "diff": diff,
            "ci_low": diff - 0.5, "ci_high": diff + 0.5, "margin": margin}  # fmt: skip


def test_verdicts_are_decided_on_holm_within_each_family():
    # Unadjusted, 0.02 is below alpha; among four leak-free claims Holm makes it 0.06.
    rows = [_row("a", 0.02), _row("b", 0.3), _row("c", 0.5), _row("d", 0.001)]
    oracle = [_row("o1", 0.02, "oracle"), _row("o2", 0.02, "oracle")]
    C.decide(rows + oracle, 0.05)
    by = {r["id"]: r for r in rows + oracle}
    assert by["a"]["p_holm"] == pytest.approx(0.06) and by["a"]["verdict"] == "not significant"
    assert by["d"]["verdict"] == "holds"
    # The oracle claims are their own family: Holm over their two (0.02 -> 0.04), not over six.
    assert by["o2"]["p_holm"] == pytest.approx(0.04) and by["o2"]["verdict"] == "holds"
    assert C.holm([0.02, 0.3, 0.5, 0.001, 0.02, 0.02])[4] == pytest.approx(0.1)
    frame = pd.DataFrame(rows + oracle)
    assert C.tallies(frame) == {"leak-free": {"not significant": 3, "holds": 1},
                                "oracle": {"holds": 2}}  # fmt: skip


def test_margin_tests_equivalence_and_non_inferiority():
    """TOST and the one-sided test against the margin, on the same bootstrap resamples."""
    margin = 0.01  # one point, in the units of the per-question differences
    # Tight: 4,000 questions, a and b differ on 40 each way -> mean 0, interval about +-0.3.
    tight = np.array([1] * 40 + [-1] * 40 + [0] * 3920)
    # Wide: 200 questions, 20 each way -> mean 0, interval about +-4 points.
    wide = np.array([1] * 20 + [-1] * 20 + [0] * 160)
    out = {}
    for name, values in (("tight", tight), ("wide", wide)):
        boot = C.paired_bootstrap(values, resamples=2000, seed=3, margin=margin)
        assert boot["mean"] == 0.0 and boot["p"] == 1.0  # no difference either way
        for expect in ("equivalent", "not_greater"):
            p = C.decisive_p(expect, boot)
            ci = (100 * boot["ci_low"], 100 * boot["ci_high"])
            out[name, expect] = C.verdict(expect, 0.0, p, 0.05, ci, 1.0)
    assert out["tight", "equivalent"] == out["tight", "not_greater"] == "holds"
    assert out["wide", "equivalent"] == out["wide", "not_greater"] == "not shown"
    # The one-sided p is the share of resampled means at or above the margin.
    boot = C.paired_bootstrap(wide, resamples=2000, seed=3, margin=margin)
    assert boot["p_below"] > 0.05 and C.decisive_p("equivalent", boot) >= boot["p_below"]
    with pytest.raises(ValueError, match="margin"):
        C.paired_bootstrap(wide, margin=0.0)


# --------------------------------------------------------------------------- claims as data


def test_declared_claims_cover_the_issue_list():
    defaults, claims = C.load_claims()
    assert defaults["resamples"] == 10000 and isinstance(defaults["seed"], int)
    papers = {c["paper"] for c in claims}
    assert papers == {"dpr", "dcsr", "xmoco", "aopt"}
    ids = {c["id"] for c in claims}
    for needed in ("bm25_beats_dpr", "hybrid_beats_dpr", "hybrid_beats_bm25", "in_batch",
                   "one_bm25_negative", "second_bm25", "dcsr_beats_dpr", "in_passage",
                   "xmoco_beats_dpr", "larger_queue", "tied_encoders", "top1_gain_largest_oracle",
                   "top1_gain_largest_leak_free", "hybrid_beats_query_only",
                   "hybrid_beats_passage_only", "bm25_em_beats_dpr", "hybrid_em_at_least_dpr", "xmoco_em_at_least_dpr",
                   "t4_em_beats_dpr_leak_free", "t4_em_beats_dpr_oracle"):  # fmt: skip
        assert any(needed in i for i in ids), needed


def test_each_paired_comparison_appears_once_and_nothing_is_picked_on_test():
    """Issue 43: the claim that picked its pair by test top-20 (BM25+DPR against DPR, the
    pair of dpr_t4_hybrid_em_at_least_dpr_on_squad with the sign flipped) is gone; no two
    claims test the same pair on the same metric, whichever is a; no system is chosen by
    its accuracy; oracle claims are their own family; margin claims state a margin."""
    defaults, claims = C.load_claims()
    assert not any("higher_retrieval" in c["id"] for c in claims)
    seen = {}
    for c in claims:
        sides = sorted(json.dumps(c[s], sort_keys=True) for s in ("a", "b"))
        key = (json.dumps(c.get("scope"), sort_keys=True), c["metric"], c.get("contrast"),
               *sides)  # fmt: skip
        assert key not in seen, (c["id"], seen.get(key))
        seen[key] = c["id"]
        assert "among" not in c["a"] and "among" not in c["b"]
        assert (C.family_of(c) == "oracle") == ("oracle" in c["id"]), c["id"]
        assert (c["expect"] in ("not_greater", "equivalent")) == ("margin" in c), c["id"]
    bad = copy.deepcopy(next(c for c in claims if c["id"].endswith("_oracle")))
    del bad["family"]
    with pytest.raises(InputError, match="oracle"):
        C.validate_claims({"defaults": defaults, "claims": [bad]})
    bad = copy.deepcopy(next(c for c in claims if c["expect"] == "not_greater"))
    del bad["margin"]
    with pytest.raises(InputError, match="margin"):
        C.validate_claims({"defaults": defaults, "claims": [bad]})
    bad["margin"] = 1.0
    bad["a"] = {"among": [{"run": "bm25"}, {"method": "dpr"}], "by": "top20", "pick": "max"}
    with pytest.raises(InputError, match="'run' or 'method'"):
        C.validate_claims({"defaults": defaults, "claims": [bad]})


def _norm(text: str) -> str:
    # NFKC turns the PDF ligatures (the "fi" of "find") back into letters.
    return re.sub(r"[^a-z0-9]", "", unicodedata.normalize("NFKC", text).lower())


@pytest.mark.skipif(not PAPERS.is_dir(), reason=f"paper texts not found at {PAPERS}")
def test_claim_sentences_are_quoted_from_the_papers():
    files = {
        "dcsr": "dcsr-wu-2022.md",
        "xmoco": "xmoco-yang-2021.txt",
        "aopt": "aopt-prf-2023.txt",
        "dpr": "dpr-karpukhin-2020.txt",
    }
    texts = {p: _norm((PAPERS / f).read_text(encoding="utf-8")) for p, f in files.items()}
    for claim in C.load_claims()[1]:
        sentence = _norm(claim["sentence"])
        if claim["paper"] == "dpr":
            # Two-column text: the sentence is interleaved with the other column, so its words
            # must appear in order (each after the previous one).
            pos = 0
            for word in claim["sentence"].split():
                pos = texts["dpr"].find(_norm(word), pos)
                assert pos >= 0, (claim["id"], word)
        else:
            assert sentence in texts[claim["paper"]], claim["id"]


def test_bad_claims_name_the_claim_and_key():
    defaults, claims = C.load_claims()
    doc = {"defaults": defaults, "claims": claims}
    bad = copy.deepcopy(doc)
    bad["claims"][0]["expect"] = "bigger"
    with pytest.raises(InputError, match="dpr_t2_bm25_beats_dpr_on_squad.*expect"):
        C.validate_claims(bad)
    bad = copy.deepcopy(doc)
    bad["claims"][1]["a"] = {"methd": "dpr"}
    with pytest.raises(InputError, match=r"\.a"):
        C.validate_claims(bad)
    bad = copy.deepcopy(doc)
    bad["claims"][2]["id"] = bad["claims"][1]["id"]
    with pytest.raises(InputError, match="duplicate"):
        C.validate_claims(bad)


# --------------------------------------------------------------------------- resolution


def test_claims_resolve_against_the_config_and_the_method_registry():
    cfg = resolve(RAW, SCHEMA)
    resolved = {e["id"]: e for e in C.resolve_claims(cfg)}
    e = resolved["dpr_t2_bm25_beats_dpr_on_squad"]
    assert e["a"]["run"] == "bm25" and e["a"]["train_set"] == "none"
    assert e["b"]["run"] == "dpr" and e["b"]["train_set"] == "squad"
    assert e["scope"] == {"dataset": "squad", "split": "test", "train_set": "squad"}
    assert resolved["dpr_t2_hybrid_beats_bm25_on_squad"]["a"]["run"] == "dpr+bm25"
    t3 = resolved["dpr_t3_in_batch_helps"]
    assert (t3["a"]["run"], t3["b"]["run"]) == ("dpr.t3_gold_7_ib", "dpr.t3_gold_7")
    registered = set(method_names())
    for entry in resolved.values():
        # Every claim is either fully resolved or says why not; never silently dropped.
        assert bool(entry["a"] and entry["b"]) != bool(entry["reason"]), entry
    for cid in ("dcsr_t2_dcsr_beats_dpr_on_squad", "xmoco_t2_xmoco_beats_dpr_on_squad"):
        method = cid.split("_")[0]
        if method not in registered:
            assert f"method '{method}' is not registered" in resolved[cid]["reason"]
        else:
            assert resolved[cid]["a"]["run"] == method
    inputs = C.claim_inputs(resolved.values())
    assert "results/metrics/bm25/none/squad-test.per_question.parquet" in inputs
    assert "results/metrics/dpr.t3_gold_7/squad/squad-test.per_question.parquet" in inputs


def test_hybrid_disabled_and_missing_variant_are_reasons():
    cfg = resolve(RAW, SCHEMA)
    cfg["hybrid"]["enabled"] = False
    del cfg["methods"]["dpr"]["variants"]["t3_gold_7"]
    resolved = {e["id"]: e for e in C.resolve_claims(cfg)}
    assert "hybrid is disabled" in resolved["dpr_t2_hybrid_beats_dpr_on_squad"]["reason"]
    assert "paper_row 'Gold #N=7'" in resolved["dpr_t3_in_batch_helps"]["reason"]


def test_pick_by_key_chooses_extremes_among_single_key_variants():
    cfg = {
        "tables": {"split": "test", "single": {"squad": "squad"}},
        "methods": {
            "dpr": {
                "batch_size": 16,
                "variants": {
                    "big": {"overrides": {"batch_size": 64}},
                    "small": {"overrides": {"batch_size": 4}},
                    "mixed": {"overrides": {"batch_size": 999, "lr": 1.0}},
                },
            }
        },
    }
    scope = {"dataset": "squad", "split": "test", "train_set": "squad"}
    big, _ = C.resolve_system({"method": "dpr", "key": "batch_size", "pick": "max"}, cfg, scope)
    small, _ = C.resolve_system({"method": "dpr", "key": "batch_size", "pick": "min"}, cfg, scope)
    assert big["run"] == "dpr.big" and small["run"] == "dpr.small"
    none, why = C.resolve_system({"method": "dpr", "key": "queue", "pick": "max"}, cfg, scope)
    assert none is None and "queue" in why


# --------------------------------------------------------------------------- claims table


def _write_ranks(results: Path, run: str, train_set: str, ranks: list[float | None]) -> None:
    path = results / "metrics" / run / train_set / "squad-test.per_question.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame({"qid": [f"q{i}" for i in range(len(ranks))], "first_hit_rank": ranks})
    frame["first_hit_rank"] = frame["first_hit_rank"].astype("Int32")
    frame.to_parquet(path)


def test_claims_table_from_per_question_files(tmp_path):
    results = tmp_path / "results"
    n = 200
    rng = np.random.default_rng(0)
    bm25 = [int(r) if r <= 100 else None for r in rng.integers(1, 60, n)]  # many hits at 20
    dpr = [int(r) if r <= 100 else None for r in rng.integers(1, 300, n)]  # fewer hits
    hybrid = [min(x or 999, y or 999) for x, y in zip(bm25, dpr, strict=True)]
    hybrid = [h if h != 999 else None for h in hybrid]
    _write_ranks(results, "bm25", "none", bm25)
    _write_ranks(results, "dpr", "squad", dpr)
    _write_ranks(results, "dpr+bm25", "squad", hybrid)
    record = {"code": {"commit": "c0ffee", "dirty": True}, "scale": "mini", "config": {"x": [1]}}
    (results / "provenance.json").write_text(json.dumps(record))
    cfg = resolve(RAW, SCHEMA)
    frame = C.evaluate_claims(C.resolve_claims(cfg), results)
    # Every row carries the run it came from (issue 43): its provenance record's commit,
    # scale and config hash.
    assert set(C.PROVENANCE) <= set(frame.columns)
    assert set(frame["run_commit"]) == {"c0ffee+dirty"} and set(frame["run_scale"]) == {"mini"}
    assert set(frame["run_config_hash"]) == {C.config_hash({"x": [1]})}
    assert re.fullmatch(r"[0-9a-f]{16}", C.config_hash({"x": [1]}))
    rows = frame.set_index("id")
    bm = rows.loc["dpr_t2_bm25_beats_dpr_on_squad"]
    hits_a = sum(1 for r in bm25 if r is not None and r <= 20)
    hits_b = sum(1 for r in dpr if r is not None and r <= 20)
    assert bm["value_a"] == pytest.approx(100 * hits_a / n, abs=0.01)
    assert bm["value_b"] == pytest.approx(100 * hits_b / n, abs=0.01)
    assert bm["diff"] == pytest.approx(100 * (hits_a - hits_b) / n, abs=0.01)
    assert bm["verdict"] == "holds" and bm["p_bootstrap"] < 0.05 and bm["p_mcnemar"] < 0.05
    assert bm["ci_low"] <= bm["diff"] <= bm["ci_high"]
    # The hybrid here is the better of the two on every question: never below either.
    hb = rows.loc["dpr_t2_hybrid_beats_dpr_on_squad"]
    assert hb["verdict"] == "holds" and hb["b_only"] == 0
    # Runs that are not in the results: not tested, with the file named.
    t3 = rows.loc["dpr_t3_in_batch_helps"]
    assert t3["verdict"] == "not tested" and "dpr.t3_gold_7_ib" in t3["reason"]
    assert set(frame["verdict"]) <= set(C.VERDICTS)
    tested = frame[frame["verdict"] != "not tested"]
    assert (tested["p_holm"] >= tested["p_test"]).all()
    # The same inputs give the same table, to the byte.
    again = C.evaluate_claims(C.resolve_claims(cfg), results)
    C.write_claims(frame, tmp_path / "a.csv")
    C.write_claims(again, tmp_path / "b.csv")
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()


def test_reversed_claim(tmp_path):
    results = tmp_path / "results"
    _write_ranks(results, "bm25", "none", [None] * 80 + [1] * 20)
    _write_ranks(results, "dpr", "squad", [1] * 70 + [None] * 30)
    frame = C.evaluate_claims(C.resolve_claims(resolve(RAW, SCHEMA)), results).set_index("id")
    row = frame.loc["dpr_t2_bm25_beats_dpr_on_squad"]
    assert row["verdict"] == "reversed" and row["diff"] == pytest.approx(-50.0)
    assert row["run_commit"] == row["run_config_hash"] == "unrecorded"  # no provenance record


# --------------------------------------------------------------------------- end-to-end (EM)


def _write_em(results: Path, run: str, train_set: str, em: list[bool]) -> None:
    path = results / "answers" / run / train_set / "squad-test.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    qids = [f"q{i}" for i in range(len(em))]
    pd.DataFrame({"qid": qids, "prediction": ["x"] * len(em), "em": em}).to_parquet(path)


def test_em_claims_pair_exact_match_per_question(tmp_path):
    results = tmp_path / "results"
    n = 200
    rng = np.random.default_rng(1)
    bm25 = rng.random(n) < 0.5
    dpr = rng.random(n) < 0.3
    _write_em(results, "bm25", "none", list(bm25))
    _write_em(results, "dpr", "squad", list(dpr))
    _write_em(results, "dpr+bm25", "squad", list(bm25 | dpr))
    _write_em(results, "xmoco", "squad", list(dpr))
    _write_em(results, "aopt-leakfree-hybrid-r1", "squad", list(dpr))
    cfg = resolve(RAW, SCHEMA)
    inputs = C.claim_inputs(C.resolve_claims(cfg))
    assert "results/answers/dpr/squad/squad-test.parquet" in inputs
    rows = C.evaluate_claims(C.resolve_claims(cfg), results).set_index("id")
    bm = rows.loc["dpr_t4_bm25_em_beats_dpr_on_squad"]
    assert bm["value_a"] == pytest.approx(100 * bm25.mean(), abs=0.01)
    assert bm["value_b"] == pytest.approx(100 * dpr.mean(), abs=0.01)
    assert bm["a_only"] == int((bm25 & ~dpr).sum()) and bm["verdict"] == "holds"
    # "At least" against a 1-point margin: DPR is far below BM25+DPR (holds); xMoCo equals DPR
    # on every question, but 200 questions cannot exclude a 1-point gap: not shown.
    hyb = rows.loc["dpr_t4_hybrid_em_at_least_dpr_on_squad"]
    assert (hyb["verdict"], hyb["margin"], hyb["test"]) == (
        "holds", 1.0, "non-inferiority (one-sided, margin)")  # fmt: skip
    same = rows.loc["xmoco_t4_xmoco_em_at_least_dpr_on_squad"]
    assert same["diff"] == 0.0 and same["p_bootstrap"] == 1.0
    assert same["verdict"] == "holds" and same["p_test"] < 0.01  # no discordant question at all
    # AOpt's protocols apart: the oracle run is not in the results, so it is not tested.
    assert rows.loc["aopt_t4_em_beats_dpr_leak_free", "verdict"] == "not significant"
    oracle = rows.loc["aopt_t4_em_beats_dpr_oracle"]
    assert oracle["verdict"] == "not tested" and "aopt-oracle-hybrid-r1" in oracle["reason"]
    assert oracle["family"] == "oracle" and bm["family"] == "leak-free"
    # Three questions apart each way in 200 for xMoCo: the same EM, an interval of +-2 points.
    flip = [*np.flatnonzero(dpr)[:3], *np.flatnonzero(~dpr)[:3]]
    _write_em(results, "xmoco", "squad", [not x if i in flip else x for i, x in enumerate(dpr)])
    wide = C.evaluate_claims(C.resolve_claims(cfg), results).set_index("id")
    assert wide.loc["xmoco_t4_xmoco_em_at_least_dpr_on_squad", "verdict"] == "not shown"


def test_em_claims_need_the_reader_on_their_dataset():
    cfg = resolve(RAW, SCHEMA)
    cfg["reader"]["datasets"] = ["nq"]
    resolved = {e["id"]: e for e in C.resolve_claims(cfg)}
    for cid in ("dpr_t4_bm25_em_beats_dpr_on_squad", "dpr_t4_hybrid_em_at_least_dpr_on_squad"):
        assert "reader.datasets" in resolved[cid]["reason"], cid
    defaults, claims = C.load_claims()
    bad = copy.deepcopy(next(c for c in claims if c["id"] == "dpr_t4_bm25_em_beats_dpr_on_squad"))
    bad["contrast"] = "top100"
    with pytest.raises(InputError, match="contrast"):
        C.validate_claims({"defaults": defaults, "claims": [bad]})


def test_claims_of_a_run_still_going_resolve_against_its_config(tmp_path, capsys):
    """`drpipe claims --config scale=squad` (`make claims`): a folder with no provenance record
    yet (a run stopped or still going) is tested against the config the run is made with;
    the claims whose runs exist get verdicts, the others are not tested, their files named."""
    from drpipe.cli import main

    results = tmp_path / "results"
    _write_ranks(results, "dpr.t3_gold_7_ib", "squad", [1] * 150 + [None] * 50)
    _write_ranks(results, "dpr.t3_gold_7", "squad", [1] * 100 + [None] * 100)
    out = tmp_path / "claims.csv"
    args = ["claims", "--results", str(results), "--out", str(out)]
    assert main(args) == 2  # without --config: the recorded config, which is not there yet
    assert "no provenance record" in capsys.readouterr().err
    assert main([*args, "--config", "scale=squad", "--configfile", str(REPO / "config.yaml")]) == 0
    rows = pd.read_csv(out).set_index("id")
    assert rows.loc["dpr_t3_in_batch_helps", "verdict"] == "holds"
    assert rows.loc["dpr_t3_in_batch_helps", "diff"] == pytest.approx(25.0)
    queue = rows.loc["xmoco_f2_larger_queue_helps"]
    assert queue["verdict"] == "not tested" and "xmoco.f2_q4096" in queue["reason"]
    # The scale decides the runs a claim compares (squad's queues and AOpt's rounds).
    mini = C.config_from(REPO / "config.yaml", [])
    squad = C.config_from(REPO / "config.yaml", ["scale=squad"])
    run = lambda cfg: {c["id"]: c for c in C.resolve_claims(cfg)}[  # noqa: E731
        "aopt_t3_hybrid_beats_query_only_leak_free"
    ]["a"]["run"]
    assert (mini["scale"], squad["scale"]) == ("mini", "squad")
    assert (run(mini), run(squad)) == ("aopt-leakfree-hybrid-r1", "aopt-leakfree-hybrid-r2")
    with pytest.raises(SystemExit, match="NAME=VALUE"):
        C.config_from(REPO / "config.yaml", ["scale"])
    out_rows = pd.read_csv(out).set_index("id")
    assert set(out_rows["run_scale"]) == {"squad"}
    assert out_rows["run_commit"].str.endswith("(run not finished)").all()


# --------------------------------------------------------------------------- stored tables


def _stored(path: Path, rows: list[dict]) -> Path:
    pd.DataFrame.from_records(rows, columns=C.COLUMNS).to_csv(path, index=False)
    return path


def test_restate_reruns_the_bootstrap_from_the_stored_counts(tmp_path):
    """A stored table (an earlier run, its results gone) is restated under the current rules:
    its counts fix the per-question differences, so the bootstrap is rerun exactly and checked
    against the stored figures; a contrast row keeps its stored p; an undeclared id is left
    out. With --results, the rows that run tests win and the stored rows fill the rest."""
    from drpipe.cli import main

    defaults, claims = C.load_claims()
    by_id = {c["id"]: c for c in claims}
    values = np.array([1] * 30 + [-1] * 10 + [0] * 460)
    boot = C.paired_bootstrap(
        values, 10000, C.claim_seed(int(defaults["seed"]), "dpr_t3_in_batch_helps")
    )
    row = {"id": "dpr_t3_in_batch_helps", "paper": "dpr", "n_questions": 500, "a_only": 30,
           "b_only": 10, "diff": round(100 * boot["mean"], 2), "ci_low": round(100 * boot["ci_low"], 2),
           "ci_high": round(100 * boot["ci_high"], 2), "p_bootstrap": boot["p"],
           "expect": "greater", "verdict": "holds"}  # fmt: skip
    contrast = {"id": "aopt_t3_top1_gain_largest_oracle", "paper": "aopt", "n_questions": 500,
                "diff": 40.0, "ci_low": 38.0, "ci_high": 42.0, "p_bootstrap": 0.03}  # fmt: skip
    gone = {"id": "dpr_t4_higher_retrieval_gives_higher_em_on_squad", "p_bootstrap": 0.01}
    path = _stored(tmp_path / "claims-old.csv", [row, contrast, gone])
    identity = C.parse_identity("abc123,squad")
    rows, dropped = C.restate(path, identity, claims, defaults)
    assert dropped == ["dpr_t4_higher_retrieval_gives_higher_em_on_squad"]
    got = {r["id"]: r for r in rows}
    assert got["dpr_t3_in_batch_helps"]["p_test"] == boot["p"]
    assert got["aopt_t3_top1_gain_largest_oracle"]["p_test"] == 0.03
    assert got["aopt_t3_top1_gain_largest_oracle"]["family"] == "oracle"
    assert got["dpr_t3_in_batch_helps"]["run_config_hash"] == "unrecorded"
    assert "restated from the counts" in got["dpr_t3_in_batch_helps"]["reason"]
    assert by_id["dpr_t3_in_batch_helps"]["expect"] == "greater"
    # A stored figure its counts do not give is an error naming the row.
    _stored(tmp_path / "bad.csv", [{**row, "p_bootstrap": 0.5}])
    with pytest.raises(InputError, match="dpr_t3_in_batch_helps.*p_bootstrap"):
        C.restate(tmp_path / "bad.csv", identity, claims, defaults)
    # The command: only the stored table, then a run's results filled from it.
    out = tmp_path / "restated.csv"
    args = ["claims", "--out", str(out), "--from-table", str(path), "--table-run", "abc123,squad"]
    assert main(args) == 0
    table = pd.read_csv(out).set_index("id")
    assert list(table.index) == ["dpr_t3_in_batch_helps", "aopt_t3_top1_gain_largest_oracle"]
    assert (
        table.loc["aopt_t3_top1_gain_largest_oracle", "verdict"] == "holds"
    )  # alone in its family
    results = tmp_path / "results"
    _write_ranks(results, "bm25", "none", [1] * 60 + [None] * 40)
    _write_ranks(results, "dpr", "squad", [1] * 40 + [None] * 60)
    record = {"code": {"commit": "def456"}, "scale": "mini", "config": resolve(RAW, SCHEMA)}
    (results / "provenance.json").write_text(json.dumps(record, default=str))
    assert main([*args, "--results", str(results)]) == 0
    table = pd.read_csv(out).set_index("id")
    assert len(table) == len(claims)
    assert table.loc["dpr_t2_bm25_beats_dpr_on_squad", "run_commit"] == "def456"
    assert table.loc["dpr_t3_in_batch_helps", "run_commit"] == "abc123"
    assert table.loc["dpr_t3_one_bm25_negative_helps", "verdict"] == "not tested"


@pytest.mark.parametrize("name", ["claims-mini.csv", "claims-squad.csv"])
def test_committed_claims_tables_follow_the_rules(name):
    """docs/claims-*.csv: every declared claim once, the run each row came from, and Holm and
    the verdicts as the current rules give them from the rows' own p-values."""
    defaults, claims = C.load_claims()
    table = pd.read_csv(REPO / "docs" / name, dtype={"run_config_hash": str})
    assert list(table["id"]) == [c["id"] for c in claims]
    for col in C.PROVENANCE:
        assert table[col].notna().all() and (table[col].astype(str) != "").all(), col
    assert set(table["family"]) == set(C.FAMILIES) - {C.OWN}  # no own claims in the papers' run
    rows = table.to_dict("records")
    expected = [dict(r) for r in rows]
    for r in expected:
        r.pop("p_holm")
        if pd.isna(r["p_test"]):
            r["p_test"] = None
    C.decide(expected, float(defaults["alpha"]))
    for got, want in zip(rows, expected, strict=True):
        if want["p_test"] is None:
            assert got["verdict"] == "not tested", got["id"]
            continue
        assert got["p_holm"] == pytest.approx(want["p_holm"], rel=1e-5), got["id"]
        assert got["verdict"] == want["verdict"], got["id"]


# --------------------------------------------------------------------------- own claims

OWN = {"id": "own_mine_beats_dpr", "sentence": "My retriever beats DPR at top-20.",
       "scope": {"dataset": "squad"}, "a": {"run": "ext.mine"}, "b": {"method": "dpr"},
       "metric": "top20", "expect": "greater"}  # fmt: skip


def test_own_claims_about_an_imported_run_are_tested_in_their_own_family(tmp_path):
    """A claim of the config's own_claims about an imported run (ext.<name>, train set none):
    tested with the same statistics, Holm-adjusted and tallied apart from the papers'."""
    results = tmp_path / "results"
    n = 200
    rng = np.random.default_rng(1)
    dpr = [int(r) if r <= 100 else None for r in rng.integers(1, 300, n)]
    mine = [1 if i % 2 else r for i, r in enumerate(dpr)]  # DPR's ranks, half of them at 1
    _write_ranks(results, "dpr", "squad", dpr)
    _write_ranks(results, "ext.mine", "none", mine)
    (results / "provenance.json").write_text(json.dumps({"scale": "mini", "config": {}}))
    cfg = {**resolve(RAW, SCHEMA), "own_claims": [OWN]}
    resolved = {r["id"]: r for r in C.resolve_claims(cfg)}
    assert resolved[OWN["id"]]["a"] == {"run": "ext.mine", "train_set": "none",
                                        "label": "ext.mine"}  # fmt: skip
    defaults, claims = C.load_claims(cfg)
    frame = C.evaluate_claims(C.resolve_claims(cfg, claims), results, claims, defaults)
    row = frame.set_index("id").loc[OWN["id"]]
    assert (row["paper"], row["family"], row["verdict"]) == ("own", "own", "holds")
    assert row["b_only"] == 0 and row["a_only"] > 0
    # Its Holm adjustment counts only its own family (one claim: p_holm is its own p).
    assert row["p_holm"] == pytest.approx(row["p_test"])
    assert "own" in C.tallies(frame) and C.tallies(frame)["own"] == {"holds": 1}
    # The papers' claims and tallies are as without it.
    papers = C.evaluate_claims(C.resolve_claims(resolve(RAW, SCHEMA)), results)
    assert "own" not in C.tallies(papers)


@pytest.mark.parametrize(
    ("claim", "message"),
    [
        ({**OWN, "paper": "dpr"}, "paper and family of your own claims are 'own'"),
        ({**OWN, "family": "oracle"}, "paper and family of your own claims are 'own'"),
        ({k: v for k, v in OWN.items() if k != "sentence"}, "missing 'sentence'"),
        ({**OWN, "id": "dpr_t2_bm25_beats_dpr_on_squad"}, "duplicate id"),
        ({**OWN, "metric": "top"}, "is not top<k>"),
    ],
)
def test_bad_own_claims_name_the_config_key(claim, message):
    with pytest.raises(InputError, match="own_claims") as err:
        C.load_claims({"own_claims": [claim]})
    assert message in str(err.value)
