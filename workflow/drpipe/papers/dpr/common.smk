# DPR (Karpukhin et al. 2020): Table 3 (training schemes) and Figure 1 (top-k against k by
# training-set size). Its Table 2 is the shared results/table2.csv (workflow/rules/tables.smk).


def variant_inputs(which, per_question=False):
    """Metrics (or per-question ranks) of DPR's Table 3 or Figure 1 variants."""
    t = C["tables"][which]
    suffix = ".per_question.parquet" if per_question else ".json"
    runs = [
        (f"dpr.{v}", t["train_set"]) for v in t["variants"]
    ]  # DPR's Table 3, Figure 1
    if which == "figure1":
        runs = [("bm25", "none"), *runs, ("dpr", t["train_set"])]
    return [
        metrics_file(r, ts, t["dataset"], t["split"]).removesuffix(".json") + suffix
        for r, ts in runs
    ]
