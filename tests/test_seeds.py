"""Training variance (config ``seeds``): replica run names, their training cfg, the plan of the
seeds table and of the claims over seeds, and both tables computed from real files."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from test_plan import plan_of
from tiny_run import OVERLAY
from workflow_util import REPO, planned_jobs

from drpipe.claims import load_claims, paired_outcomes, resolve_claims
from drpipe.claims.stats import paired_bootstrap
from drpipe.config import (
    ConfigError,
    load_workflow_config,
    method_config,
    run_seed,
    seeded,
    split_run_name,
    unseeded,
)
from drpipe.errors import InputError
from drpipe.seeds import (
    NOT_EVERY_SEED,
    claim_seeds_inputs,
    claims_over_seeds,
    seeded_entry,
    seeds_table,
    why_not_seeded,
)


def test_a_replica_is_its_run_under_another_seed_and_nothing_else():
    assert seeded("dpr.t3_gold_7", 14) == "dpr.t3_gold_7@s14"
    assert seeded("dpr+bm25", 15) == "dpr@s15+bm25"
    assert seeded("dpr@s14", 15) == "dpr@s15"
    assert split_run_name("dpr.t3_gold_7@s14") == ("dpr", "t3_gold_7")
    assert (run_seed("xmoco@s15"), run_seed("xmoco"), unseeded("dcsr@s3")) == (15, None, "dcsr")
    config = load_workflow_config(REPO, {"scale": "mini"})
    for run in ("dpr", "dpr.t3_gold_7", "xmoco", "dcsr"):
        base, replica = method_config(config, run, "squad"), method_config(config, seeded(run, 14))
        assert base["seed"] == config["seed"] and replica["seed"] == 14
        assert {k: v for k, v in replica.items() if k != "seed"} == {
            k: v for k, v in method_config(config, run).items() if k != "seed"
        }


def test_the_plan_repeats_every_trained_table2_row_under_each_seed():
    plan = plan_of("mini")
    assert plan.SEEDS == [13, 14, 15]
    rows = plan.seeds_rows()
    runs = [r["run"] for r in rows]
    # Table 2's trained rows (and their hybrids); BM25 and the initial encoder are not trained.
    assert {"dpr", "dpr+bm25", "dcsr", "xmoco"} <= set(runs)
    assert not {"bm25", "init"} & set(runs)
    inputs = plan.seeds_table_inputs()
    assert len(inputs) == 3 * len(rows)
    assert "results/metrics/dpr/squad/squad-test.json" in inputs
    assert "results/metrics/dpr@s14+bm25/squad/squad-test.json" in inputs
    assert "results/metrics/xmoco@s15/squad/squad-test.json" in inputs


def test_released_checkpoints_are_not_repeated():
    plan = plan_of("rehearsal")
    runs = {r["run"] for r in plan.seeds_rows()}
    assert runs and not any(r.startswith("dpr.released") for r in runs)
    assert all("released" not in f for f in plan.seeds_table_inputs())


def test_the_configs_own_seed_among_the_extra_ones_is_refused_at_planning():
    with pytest.raises(ConfigError, match=r"seeds\.extra: 13 is the config's own seed"):
        plan_of("mini", seeds={"extra": [13, 14]})


def test_claims_over_seeds_take_the_trained_retrieval_claims_only():
    config = load_workflow_config(REPO, {"scale": "mini"})
    plan = plan_of("mini")
    claims = load_claims(config)[1]
    by_id = {e["id"]: e for e in resolve_claims(config, claims)}
    trained = plan.SEED_TRAINED
    why = {c["id"]: why_not_seeded(c, by_id[c["id"]], trained) for c in claims}
    assert why["dpr_t3_in_batch_helps"] == ""
    assert why["xmoco_f2_larger_queue_helps"] == ""
    assert why["dpr_t2_bm25_beats_dpr_on_squad"] == ""  # BM25 against a trained DPR
    em = [i for i, c in zip(why, claims, strict=True) if c["metric"] == "em"]
    assert em and all("reader" in why[i] for i in em)
    aopt = [i for i in why if i.startswith("aopt_")]
    assert aopt and all(why[i] for i in aopt)
    assert "not repeated per seed" in why["aopt_t3_hybrid_beats_query_only_oracle"]
    entry = seeded_entry(by_id["dpr_t2_bm25_beats_dpr_on_squad"], 14, trained)
    assert (entry["a"]["run"], entry["b"]["run"]) == ("bm25", "dpr@s14")
    files = plan.seeds_claims_inputs()
    assert "results/metrics/dpr.t3_gold_7_ib@s15/squad/squad-test.per_question.parquet" in files
    assert not any("answers" in f or "aopt" in f for f in files)


HEADLINE = [
    "dpr_t2_hybrid_beats_dpr_on_squad",
    "xmoco_t2_xmoco_beats_dpr_on_squad",
    "dcsr_t2_dcsr_beats_dpr_on_squad",
]


def test_the_squad_scale_tests_its_three_headline_claims_over_seeds():
    """seeds.claims: squad trains again only DPR, xMoCo and DCSR (and reads BM25+DPR), for the
    three headline claims; a claim that is not there or cannot be seeded fails at planning."""
    plan = plan_of("squad")
    assert sorted(plan.SEED_CLAIM_IDS) == sorted(HEADLINE)
    files = plan.seeds_claims_inputs()
    runs = {f.split("/")[2] for f in files}
    seeded = ("", "@s14", "@s15")
    hybrids = {f"dpr{s}+bm25" for s in seeded}
    assert runs == {f"{r}{s}" for r in ("dpr", "xmoco", "dcsr") for s in seeded} | hybrids
    # Every trained Table 2 row there is one of the headline claims' runs or their hybrids.
    trained = {r["run"].split("+")[0] for r in plan.seeds_rows()}
    assert trained == {"dpr", "xmoco", "dcsr"}
    assert plan.seeds_claims_cfg()["only"] == plan.SEED_CLAIM_IDS
    assert plan_of("mini").SEED_CLAIM_IDS is None
    with pytest.raises(ConfigError, match=r"seeds\.claims: no claim 'dpr_t2_typo'"):
        plan_of("squad", seeds={"extra": [14], "claims": ["dpr_t2_typo"]})
    with pytest.raises(ConfigError, match=r"cannot be tested over seeds: about the reader"):
        plan_of("squad", seeds={"extra": [14], "claims": ["dpr_t4_bm25_em_beats_dpr_on_squad"]})


def _metrics(path, top, n=200):
    path.write_text(json.dumps({"n_questions": n, "top_k": {str(k): v for k, v in top.items()}}))
    return path


def test_the_seeds_table_gives_each_rows_seeds_mean_spread_and_range(tmp_path):
    rows = [{"run": "dpr", "train_set": "squad", "dataset": "squad", "split": "test",
             "label": "DPR"}]  # fmt: skip
    files = [
        _metrics(tmp_path / f"{s}.json", {1: v, 20: v + 30}) for s, v in ((13, 50.0), (14, 52.0),
                                                                          (15, 57.0))
    ]  # fmt: skip
    frame = seeds_table(files, rows, [13, 14, 15], [1, 20])
    r = frame.iloc[0]
    assert (r["top1_s13"], r["top1_s14"], r["top1_s15"]) == (50.0, 52.0, 57.0)
    assert r["top1_mean"] == pytest.approx(53.0)
    assert r["top1_sd"] == pytest.approx(round(float(np.std([50, 52, 57], ddof=1)), 2))
    assert (r["top20_min"], r["top20_max"]) == (80.0, 87.0)
    with pytest.raises(InputError, match="top-k"):
        seeds_table(files, rows, [13, 14, 15], [1, 100])
    _metrics(files[2], {1: 57.0, 20: 87.0}, n=199)
    with pytest.raises(InputError, match="199"):
        seeds_table(files, rows, [13, 14, 15], [1, 20])


def _ranks(path, ranks):
    path.parent.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame({"qid": [f"q{i}" for i in range(len(ranks))],
                          "first_hit_rank": pd.array(ranks, dtype="Int64")})  # fmt: skip
    frame.to_parquet(path)


def _claim(cid, expect="greater"):
    return {"id": cid, "paper": "own", "family": "own", "source": "test", "sentence": cid,
            "a": {"method": "xmoco"}, "b": {"method": "dpr"}, "metric": "top1",
            "expect": expect}  # fmt: skip


def test_claims_over_seeds_average_each_questions_difference_over_the_seeds(tmp_path):
    """A claim that holds under every seed holds over seeds; one whose difference points the
    other way under one seed holds on average only; the test is the paired bootstrap of the
    per-question differences averaged over seeds."""
    rng = np.random.default_rng(0)
    n = 400
    results = tmp_path / "results"
    seeds = [13, 14, 15]
    base = rng.integers(1, 3, size=n)  # rank 1 or 2: a hit at top-1 half the time
    for seed in seeds:
        for run, ranks in (("dpr", base), ("xmoco", np.where(rng.random(n) < 0.3, 1, base)),
                           ("dcsr", np.where(rng.random(n) < 0.05, 1, base))):  # fmt: skip
            if seed == 15 and run == "dcsr":  # under one seed, DCSR loses to DPR
                ranks = np.where(rng.random(n) < 0.2, 2, base)
            name = run if seed == 13 else f"{run}@s{seed}"
            _ranks(results / "metrics" / name / "squad" / "squad-test.per_question.parquet",
                   ranks)  # fmt: skip
    scope = {"dataset": "squad", "split": "test", "train_set": "squad"}

    def entry(cid, a):
        return {"id": cid, "scope": scope, "note": "", "reason": "",
                "a": {"run": a, "train_set": "squad", "label": a},
                "b": {"run": "dpr", "train_set": "squad", "label": "dpr"}}  # fmt: skip

    claims = [_claim("xmoco_wins"), _claim("dcsr_wins")]
    resolved = [entry("xmoco_wins", "xmoco"), entry("dcsr_wins", "dcsr")]
    defaults = {"alpha": 0.05, "resamples": 2000, "seed": 7}
    frame = claims_over_seeds(claims, resolved, seeds, 13, "(?:dpr|xmoco|dcsr)(?:@s[0-9]+)?",
                              results, defaults).set_index("id")  # fmt: skip
    x, d = frame.loc["xmoco_wins"], frame.loc["dcsr_wins"]
    assert x["verdict"] == "holds" and x["same_direction"] == 3
    assert [x[f"verdict_s{s}"] for s in seeds] == ["holds"] * 3
    assert d["same_direction"] == 2 and d["diff_s15"] < 0
    assert d["verdict"] in (NOT_EVERY_SEED, "not significant")
    # The averaged test is the claims table's bootstrap of the seed-averaged differences.
    values = []
    for s in seeds:
        e = entry("xmoco_wins", "xmoco")
        if s != 13:
            e = seeded_entry(e, s, "(?:dpr|xmoco|dcsr)(?:@s[0-9]+)?")
        values.append(paired_outcomes(claims[0], e, results)["values"].to_numpy())
    mean = np.mean(values, axis=0)
    assert x["diff"] == pytest.approx(round(100 * mean.mean(), 2))
    assert x["diff_sd"] == pytest.approx(
        round(float(np.std([x[f"diff_s{s}"] for s in seeds], ddof=1)), 2)
    )
    boot = paired_bootstrap(mean, 2000, 0)
    assert x["ci_low"] == pytest.approx(100 * boot["ci_low"], abs=1.0)


def test_a_claim_outside_seeds_claims_is_listed_with_why_and_not_read(tmp_path):
    results = tmp_path / "results"
    for run in ("dpr", "xmoco", "dpr@s14", "xmoco@s14"):
        _ranks(results / "metrics" / run / "squad" / "squad-test.per_question.parquet", [1, 2, 1])
    scope = {"dataset": "squad", "split": "test", "train_set": "squad"}
    resolved = [{"id": c, "scope": scope, "note": "", "reason": "",
                 "a": {"run": "xmoco", "train_set": "squad", "label": "xmoco"},
                 "b": {"run": "dpr", "train_set": "squad", "label": "dpr"}}
                for c in ("tested", "left")]  # fmt: skip
    claims, trained = [_claim("tested"), _claim("left")], "(?:dpr|xmoco)(?:@s[0-9]+)?"
    frame = claims_over_seeds(claims, resolved, [13, 14], 13, trained, results,
                              {"alpha": 0.05, "resamples": 200, "seed": 1},
                              only=["tested"]).set_index("id")  # fmt: skip
    assert frame.loc["tested", "verdict"] == "not significant"  # the same ranks: no difference
    assert frame.loc["left", "verdict"] == "not tested"
    assert "not in seeds.claims" in frame.loc["left", "reason"]
    assert pd.isna(frame.loc["left", "p_holm"])
    inputs = claim_seeds_inputs(resolved, claims, [13, 14], 13, trained, only=["left"])
    assert len(inputs) == 4 and all("xmoco" in f or "dpr" in f for f in inputs)
    assert claim_seeds_inputs(resolved, claims, [13, 14], 13, trained, only=[]) == []


def test_a_missing_replica_says_which_seed_and_file(tmp_path):
    results = tmp_path / "results"
    _ranks(results / "metrics" / "dpr" / "squad" / "squad-test.per_question.parquet", [1, 2])
    _ranks(results / "metrics" / "xmoco" / "squad" / "squad-test.per_question.parquet", [1, 1])
    scope = {"dataset": "squad", "split": "test", "train_set": "squad"}
    resolved = [{"id": "c", "scope": scope, "note": "", "reason": "",
                 "a": {"run": "xmoco", "train_set": "squad", "label": "xmoco"},
                 "b": {"run": "dpr", "train_set": "squad", "label": "dpr"}}]  # fmt: skip
    frame = claims_over_seeds([_claim("c")], resolved, [13, 14], 13, "(?:dpr|xmoco)(?:@s[0-9]+)?",
                              results, {"alpha": 0.05, "resamples": 200, "seed": 1})  # fmt: skip
    row = frame.iloc[0]
    assert row["verdict"] == "not tested"
    assert row["reason"].startswith("seed 14: not in the results") and "xmoco@s14" in row["reason"]


def test_make_seeds_plans_only_the_replicas_in_a_finished_run(tiny_touched_run):
    """In the tiny run's finished DAG, the seeds' targets plan each trained row's replicas (and
    the claims' variants) under the extra seed, and rerun none of the run's own jobs."""
    overlay = {**OVERLAY, "seeds": {"extra": [21]}}
    jobs = planned_jobs(
        tiny_touched_run, "results/table2-seeds.csv", "results/claims-seeds.csv", overlay=overlay
    )
    trains = {out for rule, out in jobs if rule == "train"}
    assert "results/models/dpr@s21/squad" in trains
    # Nothing the run made is remade: every job writes a replica's files, a seed-13 run the
    # run's targets did not need (a claim's variant), or one of the two tables.
    remade = sorted(o for r, o in jobs if (tiny_touched_run / o).exists())
    assert not remade, remade
    assert {o for o in trains if "@s21/" not in o} <= {
        o.replace("@s21/", "/") for o in trains if "@s21/" in o
    }
    assert {r for r, _ in jobs} >= {"train", "encode", "retrieve", "hybrid", "evaluate",
                                    "seeds_table", "seeds_claims"}  # fmt: skip
