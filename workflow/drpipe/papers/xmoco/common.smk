# xMoCo's Table 2 (its own printed numbers beside ours), Table 3 (tied vs separate encoders)
# and Figure 2 (top-20 vs queue size); the xMoCo row of results/table2.csv comes from tables.smk.
# Its helpers: runs and row labels of its tables.

XMOCO_HYBRID_LABELS = {"dpr": "DPR+BM25", "xmoco": "xMoCo+BM25"}


def xmoco_table2_runs():
    """(run, train_set, dataset, training, label) of xMoCo's Table 2: BM25, DPR, xMoCo and
    their BM25 hybrids, with the paper's row labels (it writes "xMoCo+BM25")."""
    t = C["tables"]
    rows = []
    for dataset in t["datasets"]:
        rows.append(("bm25", "none", dataset, "None", "BM25"))
        settings = [("Single", t["single"].get(dataset))]
        if t["multi"]:
            settings.append(("Multi", t["multi"]))
        for method in ("dpr", "xmoco"):
            for training, train_set in settings:
                if train_set is None:
                    continue
                rows.append(
                    (method, train_set, dataset, training, method_class(method).label)
                )
                if C["hybrid"]["enabled"]:
                    label = XMOCO_HYBRID_LABELS[method]
                    rows.append((f"{method}+bm25", train_set, dataset, training, label))
    return rows


def xmoco_table2_inputs():
    split = C["tables"]["split"]
    return [metrics_file(r, ts, d, split) for r, ts, d, _, _ in xmoco_table2_runs()]


def xmoco_table2_row_map():
    return {
        run: {"method": label, **({"training": tr} if tr == "None" else {})}
        for run, _, _, tr, label in xmoco_table2_runs()
    }


def xmoco_runs(which):
    """Runs of xMoCo's Table 3 or Figure 2: the main run plus the configured variants."""
    t = C["tables"]["xmoco"][which]
    return ["xmoco"] + [f"xmoco.{v}" for v in t["variants"]]


def xmoco_inputs(which):
    t = C["tables"]["xmoco"][which]
    return [
        metrics_file(r, t["train_set"], t["dataset"], t["split"])
        for r in xmoco_runs(which)
    ]


def xmoco_table3_variants():
    """Run -> whether its encoders are tied and the Table 3 row it reproduces."""
    ts = C["tables"]["xmoco"]["table3"]["train_set"]
    out = {}
    for run in xmoco_runs("table3"):
        row = (
            method_variant(C, run).get("paper_row")
            if "." in run
            else method_class("xmoco").label
        )
        out[run] = {"tied": bool(method_config(C, run, ts)["tied"]), "paper_row": row}
    return out


def xmoco_figure2_variants():
    """Run -> its queue size, batch size and hard negatives (the x axis, and which queue size
    is in-batch negatives)."""
    ts = C["tables"]["xmoco"]["figure2"]["train_set"]
    out = {}
    for run in xmoco_runs("figure2"):
        cfg = method_config(C, run, ts)
        out[run] = {k: cfg[k] for k in ("queue_size", "batch_size", "hard_negatives")}
    return out
