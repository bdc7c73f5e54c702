# Tables beside the papers' numbers, and the provenance record of the results folder.


def metrics_file(run, train_set, dataset, split):
    return f"results/metrics/{run}/{train_set}/{dataset}-{split}.json"


def table2_runs():
    """(run, train_set, dataset, training label, row label) of every Table 2 cell we compute."""
    t = C["tables"]
    rows = []
    for dataset in t["datasets"]:
        rows.append(("bm25", "none", dataset, "None", "BM25"))
        rows.append(("init", "none", dataset, "None", "DPR init (no fine-tuning)"))
        for method in t["methods"]:
            settings = [("Single", t["single"].get(dataset))]
            if t["multi"]:
                settings.append(("Multi", t["multi"]))
            for training, train_set in settings:
                if train_set is None:
                    continue
                rows.append((method, train_set, dataset, training, method.upper()))
                if C["hybrid"]["enabled"]:
                    label = f"BM25+{method.upper()}"
                    rows.append((f"{method}+bm25", train_set, dataset, training, label))
    return rows


def table2_inputs():
    split = C["tables"]["split"]
    return [metrics_file(r, ts, d, split) for r, ts, d, _, _ in table2_runs()]


def table2_row_map():
    return {f"{r}|{ts}": [training, label] for r, ts, _, training, label in table2_runs()}


def variant_inputs(which, per_question=False):
    t = C["tables"][which]
    suffix = ".per_question.parquet" if per_question else ".json"
    runs = [(f"dpr.{v}", t["train_set"]) for v in t["variants"]]
    if which == "figure1":
        runs = [("bm25", "none"), *runs, ("dpr", t["train_set"])]
    return [
        metrics_file(r, ts, t["dataset"], t["split"]).removesuffix(".json") + suffix
        for r, ts in runs
    ]


rule table2:
    input:
        table2_inputs(),
    output:
        csv="results/table2.csv",
        md="results/table2.md",
    log:
        "results/logs/tables/table2.log",
    benchmark:
        "results/benchmarks/rules/tables/table2.tsv"
    params:
        cfg=cfg_json({"scale": SCALE, "row_map": table2_row_map()}),
        code=code("tables.py", "paper_numbers"),
    conda:
        "../../envs/cpu.yaml"
    shell:
        "drpipe tables table2 --metrics {input:q} --out {output.csv:q} --md {output.md:q}"
        " --cfg {params.cfg:q} 2> {log:q}"


rule table3:
    input:
        variant_inputs("table3"),
    output:
        csv="results/dpr/table3.csv",
        md="results/dpr/table3.md",
    log:
        "results/logs/tables/table3.log",
    benchmark:
        "results/benchmarks/rules/tables/table3.tsv"
    params:
        cfg=cfg_json(
            {
                "scale": SCALE,
                "variants": {
                    f"dpr.{v}": C["variants"][v]["overrides"]
                    for v in C["tables"]["table3"]["variants"]
                },
            }
        ),
        code=code("tables.py", "paper_numbers"),
    conda:
        "../../envs/cpu.yaml"
    shell:
        "drpipe tables table3 --metrics {input:q} --out {output.csv:q} --md {output.md:q}"
        " --cfg {params.cfg:q} 2> {log:q}"


rule figure1:
    input:
        variant_inputs("figure1", per_question=True),
    output:
        "results/dpr/figure1.png",
    log:
        "results/logs/tables/figure1.log",
    benchmark:
        "results/benchmarks/rules/tables/figure1.tsv"
    params:
        labels=["BM25"]
        + [
            f"# Train: {C['variants'][v]['overrides'].get('max_examples')}"
            for v in C["tables"]["figure1"]["variants"]
        ]
        + ["# Train: all"],
        cfg=cfg_json({"scale": SCALE, **C["tables"]["figure1"]}),
        code=code("tables.py"),
    conda:
        "../../envs/cpu.yaml"
    shell:
        "drpipe tables figure1 --per-question {input:q} --labels {params.labels:q}"
        " --out {output:q} --cfg {params.cfg:q} 2> {log:q}"


def step_reports():
    """Report JSONs of the steps behind Table 2 (inputs of the provenance record)."""
    split = C["tables"]["split"]
    reports = ["results/corpus/passages.report.json"]
    if not C["corpus"]["passages_tsv"]:
        reports += [f"results/corpus/docs/{d['name']}.report.json" for d in DOCS]
    for run, ts, dataset, _, _ in table2_runs():
        reports.append(f"results/qa/{dataset}/{split}.report.json")
        if run == "bm25" or run.startswith("init"):
            continue
        if "+" not in run:
            reports.append(f"results/models/{run}/{ts}.report.json")
            for d in C["train_sets"][ts]:
                if C["train_examples"].get(d, "mine") == "mine":
                    reports.append(f"results/train/{d}.report.json")
    return sorted(set(reports))


def used_source_records():
    names = {d["source"] for d in DOCS} if not C["corpus"]["passages_tsv"] else set()
    if C["corpus"]["passages_tsv"]:
        names.add(C["corpus"]["passages_tsv"])
    split = C["tables"]["split"]
    for dataset in C["tables"]["datasets"]:
        names.add(qa_split(dataset, split)["source"])
    for ts in {ts for _, ts, _, _, _ in table2_runs() if ts != "none"}:
        for d in C["train_sets"][ts]:
            how = C["train_examples"].get(d, "mine")
            names.add(qa_split(d, "train")["source"] if how == "mine" else how)
    return [source_record(n) for n in sorted(names)]


rule provenance:
    input:
        tables=["results/table2.csv", "results/table2.md"],
        records=used_source_records(),
        reports=step_reports(),
    output:
        "results/provenance.json",
    log:
        "results/logs/tables/provenance.log",
    benchmark:
        "results/benchmarks/rules/tables/provenance.tsv"
    params:
        cfg=cfg_json(C),
        repo=workflow.basedir,
        code=code("provenance.py"),
    conda:
        "../../envs/cpu.yaml"
    shell:
        "drpipe provenance --records {input.records:q} --reports {input.reports:q}"
        " --benchmarks results/benchmarks/rules --repo {params.repo:q} --out {output:q}"
        " --cfg {params.cfg:q} 2> {log:q}"
