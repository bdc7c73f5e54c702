# AOpt (Future Internet 2023): no encoder is trained; a trained run's stored vectors change
# round by round: vectors -> index -> retrieval -> pseudo-labels -> new vectors. Each round's
# vectors, index, run and metrics are files named aopt-{protocol}-{arm}-r{round}, so a larger
# round count adds rounds and reruns none. Paths and inputs: the helpers below.

# AOpt's runs are named aopt-{protocol}-{arm}-r{round}; round 0 is the base run itself (for
# AOpt-hybrid: the last round of AOpt-query). Its vectors, indexes, runs and metrics sit in
# the same folders as every other run's.

AOPT = C["aopt"]
AOPT_PROTOCOLS = {"oracle": "uses the test answers (oracle)", "leakfree": "leak-free"}
AOPT_LABELS = {
    "query": "DPR + AOpt(query)",
    "passage": "DPR + AOpt(passage)",
    "hybrid": "DPR + AOpt(hybrid)",
}


def aopt_train_set(dataset):
    """The base run's train set for a dataset: its Single train set (AOpt starts from it)."""
    ts = C["tables"]["single"].get(dataset)
    if ts is None:
        raise ValueError(
            f"config: aopt.datasets has {dataset}, but tables.single does not"
        )
    return ts


def aopt_dataset(train_set):
    """The AOpt dataset whose base is trained on ``train_set`` (one per train set)."""
    found = [d for d in AOPT["datasets"] if aopt_train_set(d) == train_set]
    if len(found) != 1:
        raise ValueError(
            f"config: aopt.datasets must have exactly one dataset trained on {train_set} "
            f"(tables.single), found {found}"
        )
    return found[0]


def aopt_run(protocol, arm, rnd):
    return f"aopt-{protocol}-{arm}-r{rnd}"


def aopt_final(arm):
    """Rounds behind an arm's table row (linear weights: one update)."""
    return 1 if arm == "linear" else AOPT["rounds"][arm]


def aopt_label_split(protocol):
    """Whose answers label the passages: the evaluated split's (oracle) or training's."""
    return C["tables"]["split"] if protocol == "oracle" else AOPT["label_split"]


def aopt_linear_label(lin=None):
    lin = lin or AOPT["linear"]
    return f"Weighted-based (beta={lin['beta']:g}, gamma={lin['gamma']:g})"


def aopt_label(arm):
    return aopt_linear_label() if arm == "linear" else AOPT_LABELS[arm]


def aopt_vectors_run(protocol, arm, rnd):
    """The run whose passage vectors (and index) an arm uses at a round."""
    rnd = int(rnd)
    if arm == "query" or rnd == 0:
        return AOPT["base"]
    return aopt_run(protocol, arm, rnd)


def aopt_shards(protocol, arm, rnd, train_set):
    return shard_files(aopt_vectors_run(protocol, arm, rnd), train_set)


def aopt_index(protocol, arm, rnd, train_set):
    run = aopt_vectors_run(protocol, arm, rnd)
    return f"results/index/{run}/{train_set}/{index_type(AOPT['base'])}.faiss"


def aopt_qvecs(protocol, arm, rnd, train_set, dataset, split):
    """Question vectors an arm uses at a round (hybrid: AOpt-query's last round)."""
    rnd = int(rnd)
    if arm == "hybrid":
        return aopt_qvecs(
            protocol, "query", AOPT["rounds"]["query"], train_set, dataset, split
        )
    if arm != "query" or rnd == 0:
        return qvec_file(AOPT["base"], train_set, dataset, split)
    return qvec_file(aopt_run(protocol, "query", rnd), train_set, dataset, split)


def aopt_file(kind, protocol, arm, rnd, train_set, dataset, split):
    """Run (``kind="run"``) or metrics (``"metrics"``) of an arm's round; round 0 is the base
    run's (hybrid: AOpt-query's last round)."""
    rnd = int(rnd)
    if rnd == 0 and arm == "hybrid":
        return aopt_file(
            kind, protocol, "query", AOPT["rounds"]["query"], train_set, dataset, split
        )
    run = AOPT["base"] if rnd == 0 else aopt_run(protocol, arm, rnd)
    if kind == "metrics":
        return metrics_file(run, train_set, dataset, split)
    return f"results/runs/{run}/{train_set}/{dataset}-{split}.parquet"


def aopt_opt_cfg(labels):
    """Config of one optimisation round (no round count: more rounds rerun no old round)."""
    cfg = {k: AOPT[k] for k in ("depth", "lr", "max_epochs", "patience")}
    cfg["labels"] = labels
    if labels == "prf":
        cfg["prf_positives"] = AOPT["prf_positives"]
    return cfg


def aopt_passage_inputs(w):
    """A passage-side round (AOpt-passage, AOpt-hybrid, linear weights): the previous round's
    passage vectors, the labelled questions' vectors, their run over those passages, and their
    answers (oracle: the evaluated split's; leak-free: the training split's)."""
    return aopt_label_inputs(w.protocol, w.arm, int(w.round) - 1, w.train_set)


def aopt_label_inputs(protocol, arm, rnd, train_set):
    dataset = aopt_dataset(train_set)
    split = aopt_label_split(protocol)
    args = (protocol, arm, rnd, train_set)
    return {
        "shards": aopt_shards(*args),
        "queries": aopt_qvecs(*args, dataset, split),
        "run": aopt_file("run", *args, dataset, split),
        "questions": f"results/qa/{dataset}/{split}.parquet",
        "passages": "results/corpus/passages.parquet",
    }


def aopt_query_inputs(w):
    """A query-side round: the previous round's vectors of these questions, their run over the
    base passages; the oracle also reads their answers, the leak-free protocol does not.
    """
    rnd = int(w.round) - 1
    args = (w.protocol, "query", rnd, w.train_set, w.dataset, w.split)
    out = {
        "queries": aopt_qvecs(*args),
        "run": aopt_file("run", *args),
        "shards": shard_files(AOPT["base"], w.train_set),
    }
    if w.protocol == "oracle":
        out["questions"] = f"results/qa/{w.dataset}/{w.split}.parquet"
        out["passages"] = "results/corpus/passages.parquet"
    return out


def aopt_reports(protocol, arm, rnd, train_set, dataset):
    """Optimisation reports of every round behind an arm's round ``rnd``."""
    split = C["tables"]["split"]
    out = []
    if arm == "hybrid":
        out += aopt_reports(
            protocol, "query", AOPT["rounds"]["query"], train_set, dataset
        )
        if protocol == "leakfree":
            q = AOPT["rounds"]["query"]
            label = AOPT["label_split"]
            out += [
                f"results/aopt/reports/{aopt_run(protocol, 'query', r)}/{train_set}/"
                f"{dataset}-{label}.json"
                for r in range(1, q + 1)
            ]
    for r in range(1, int(rnd) + 1):
        run = aopt_run(protocol, arm, r)
        if arm == "query":
            out.append(f"results/aopt/reports/{run}/{train_set}/{dataset}-{split}.json")
        else:
            out.append(f"results/aopt/reports/{run}/{train_set}.json")
    return out


def aopt_table_rows():
    """(protocol, arm, round, train_set, dataset) of AOpt's Table 3 rows."""
    return [
        (p, arm, aopt_final(arm), aopt_train_set(d), d)
        for d in AOPT["datasets"]
        for p in AOPT["protocols"]
        for arm in ("linear", "query", "passage", "hybrid")
    ]


def aopt_table3_inputs():
    split = C["tables"]["split"]
    base = [
        metrics_file(AOPT["base"], aopt_train_set(d), d, split)
        for d in AOPT["datasets"]
    ]
    rows = [aopt_file("metrics", *r, split) for r in aopt_table_rows()]
    return base + rows


def aopt_table3_cfg():
    rows = {
        aopt_run(p, arm, r): {
            "protocol": p,
            "arm": arm,
            "rounds": r,
            "method": aopt_label(arm),
        }
        for p, arm, r, _, _ in aopt_table_rows()
    }
    rows[AOPT["base"]] = {
        "protocol": "base",
        "arm": "base",
        "rounds": 0,
        "method": "DPR",
    }
    return {
        "scale": SCALE,
        "rows": rows,
        "linear": AOPT["linear"],
        "tolerance": TOLERANCE,
    }


def aopt_figure7_series():
    """(protocol, arm, round) of every point of Figure 7, in order."""
    return [
        (p, arm, r)
        for p in AOPT["protocols"]
        for arm in ("passage", "query")
        for r in range(AOPT["figure7"]["rounds"] + 1)
    ]


def aopt_figure7_inputs():
    d = AOPT["figure7"]["dataset"]
    ts, split = aopt_train_set(d), C["tables"]["split"]
    return [
        aopt_file("metrics", p, arm, r, ts, d, split)
        for p, arm, r in aopt_figure7_series()
    ]


def aopt_figure6_inputs():
    d = AOPT["figure6"]["dataset"]
    return [
        f"results/aopt/figure6/{p}/{aopt_train_set(d)}/{d}.csv"
        for p in AOPT["protocols"]
    ]


def aopt_protocol(run):
    """The protocol label of an AOpt run name, None for any other run."""
    parts = run.split("-")
    if len(parts) == 4 and parts[0] == "aopt":
        return AOPT_PROTOCOLS[parts[1]]
    return None


def aopt_table2_runs():
    """AOpt's cells of Table 2: the configured arms, each protocol, on the AOpt datasets."""
    rows = []
    for d in AOPT["datasets"]:
        if d not in C["tables"]["datasets"]:
            continue
        for p in AOPT["protocols"]:
            for arm in AOPT["table2"]:
                run = aopt_run(p, arm, aopt_final(arm))
                rows.append((run, aopt_train_set(d), d, "Single", aopt_label(arm)))
    return rows


def aopt_table2_hook():
    """AOpt's rows of the shared Table 2, and the protocol each one says."""
    rows = aopt_table2_runs()
    return rows, {
        run: {"training": training, "protocol": aopt_protocol(run)}
        for run, _, _, training, _ in rows
    }


def aopt_run_reports(run, train_set, dataset):
    """The step reports behind an AOpt run (its rounds and labels), and the run it starts from."""
    if not aopt_protocol(run):
        return None
    _, protocol, arm, rnd = run.split("-")
    reports = aopt_reports(protocol, arm, rnd[1:], train_set, dataset)
    reports.append(f"results/qa/{dataset}/{aopt_label_split(protocol)}.report.json")
    return reports, AOPT["base"]


TABLE2_HOOKS.append(aopt_table2_hook)
RUN_REPORT_HOOKS.append(aopt_run_reports)


if "leakfree" in AOPT["protocols"] and AOPT["label_split"] == C["tables"]["split"]:
    raise WorkflowError(
        f"config: aopt.label_split = {AOPT['label_split']} is the evaluated split "
        "(tables.split): leak-free labels must come from other questions' answers"
    )
if AOPT["depth"] > C["retrieve"]["top_k"]:
    raise WorkflowError(
        f"config: aopt.depth = {AOPT['depth']} labels deeper than the runs "
        f"(retrieve.top_k = {C['retrieve']['top_k']})"
    )


wildcard_constraints:
    protocol="oracle|leakfree",
    round="[1-9][0-9]*",
