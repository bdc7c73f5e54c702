# The shared Table 2 beside the papers' numbers, and the provenance record of the results
# folder. Each paper's own tables are in its folder (workflow/drpipe/papers/<paper>/rules.smk).


rule table2:
    input:
        table2_inputs(),
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
                "scale": SCALE,
                "tolerance": TOLERANCE,
                "row_map": table2_row_map(),
                "train_sets": C["train_sets"],
                "setup": table2_setup(),
            }
        ),
        code=table2_code(),
    shell:
        "drpipe tables table2 --metrics {input:q} --out {output.csv:q} --md {output.md:q}"
        " --cfg {params.cfg:q} 2> {log:q}"


# The shared Table 4: exact match of the reader over every Table 2 retriever row's passages
# (the reader's rules: reader.smk). Not part of `all`: `make run TARGET=results/table4.csv`.
rule table4:
    input:
        table4_inputs(),
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
                "scale": SCALE,
                "tolerance": TOLERANCE,
                "row_map": table4_row_map(),
                "train_sets": C["train_sets"],
                "setup": table4_setup(),
            }
        ),
        code=table4_code(),
    shell:
        "drpipe tables table4 --metrics {input:q} --out {output.csv:q} --md {output.md:q}"
        " --cfg {params.cfg:q} 2> {log:q}"


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
