# The shared Table 2 beside the papers' numbers, and the provenance record of the results
# folder. Each paper's own tables are in its folder (workflow/drpipe/papers/<paper>/rules.smk).


rule table2:
    input:
        metrics=table2_inputs(),
        reports=table2_reports(),
    output:
        csv=report(
            "results/table2.csv",
            caption="../report/table_csv.rst",
            category="Tables",
            subcategory="CSV",
        ),
        md="results/table2.md",
    log:
        "results/logs/tables/table2.log",
    benchmark:
        "results/benchmarks/rules/tables/table2.tsv"
    conda:
        env()
    params:
        cfg=cfg_json(
            {
                **SCALE_CFG,
                "tolerance": TOLERANCE,
                "row_map": table2_row_map(),
                "train_sets": C["train_sets"],
                "setup": table2_setup(),
                "precision": table2_precision(),
                "ks": C["evaluate"]["ks"],
                "mrr_k": C["evaluate"]["mrr_k"],
            }
        ),
        code=table2_code(),
    shell:
        "drpipe tables table2 --metrics {input.metrics:q} --reports {input.reports:q}"
        " --out {output.csv:q} --md {output.md:q} --cfg {params.cfg:q} 2> {log:q}"


# Table 2's rows as top-k curves (k = 1..100) from their per-question first-hit ranks.
rule table2_curves:
    input:
        table2_curves()[0],
    output:
        png=report(
            "results/table2-topk.png",
            caption="../report/figure.rst",
            category="Figures",
            subcategory="Images",
        ),
        csv="results/table2-topk.csv",
    log:
        "results/logs/tables/table2_curves.log",
    benchmark:
        "results/benchmarks/rules/tables/table2_curves.tsv"
    conda:
        env()
    params:
        cfg=cfg_json(table2_curves()[1]),
        code=code("drpipe.papers.table2"),
    shell:
        "drpipe tables table2-curves --per-question {input:q} --out {output.png:q}"
        " --csv {output.csv:q} --cfg {params.cfg:q} 2> {log:q}"


# The shared Table 4: exact match of the reader over every Table 2 retriever row's passages
# (the reader's rules: reader.smk). Not part of `all`: `make run TARGET=results/table4.csv`.
rule table4:
    input:
        metrics=table4_inputs(),
        reports=table2_reports(table4_precision()),
    output:
        csv=report(
            "results/table4.csv",
            caption="../report/table_csv.rst",
            category="Tables",
            subcategory="CSV",
        ),
        md="results/table4.md",
    log:
        "results/logs/tables/table4.log",
    benchmark:
        "results/benchmarks/rules/tables/table4.tsv"
    conda:
        env()
    params:
        cfg=cfg_json(
            {
                **SCALE_CFG,
                "tolerance": TOLERANCE,
                "row_map": table4_row_map(),
                "train_sets": C["train_sets"],
                "setup": table4_setup(),
                "precision": table4_precision(),
            }
        ),
        code=table4_code(),
    shell:
        "drpipe tables table4 --metrics {input.metrics:q} --reports {input.reports:q}"
        " --out {output.csv:q} --md {output.md:q} --cfg {params.cfg:q} 2> {log:q}"


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
    conda:
        env()
    params:
        # The record describes how its inputs were made: it reruns when they change, not when
        # a setting that changes no result does (a new method's defaults, an unused index's).
        cfg=runtime(lambda w: cfg_json(result_config())),
        repo=runtime(lambda w: workflow.basedir),  # where to read the commit, not a result
        code=code("drpipe.provenance"),
    shell:
        "drpipe provenance --records {input.records:q} --reports {input.reports:q}"
        " --benchmarks results/benchmarks/rules --repo {params.repo:q} --out {output:q}"
        " --cfg {params.cfg:q} 2> {log:q}"


# One page on what the run did (make rehearse ends with it): jobs per rule, training
# examples kept and dropped, Multi sets, epochs, index types, depths, tables written.
rule run_summary:
    input:
        tables=["results/table2.csv", "results/provenance.json", *PAPER_TARGETS],
    output:
        md="results/run_summary.md",
        json="results/run_summary.json",
    log:
        "results/logs/tables/run_summary.log",
    benchmark:
        "results/benchmarks/rules/tables/run_summary.tsv"
    conda:
        env()
    params:
        cfg=cfg_json(summary_cfg()),
        code=code("drpipe.summary"),
    shell:
        "drpipe run-summary --workdir . --out {output.md:q} --json {output.json:q}"
        " --cfg {params.cfg:q} > {log:q} 2>&1"
