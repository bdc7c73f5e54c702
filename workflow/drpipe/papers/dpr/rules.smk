# DPR's rules: Table 3 and Figure 1 (their paths and inputs: plan.py beside this file).


rule table3:
    input:
        variant_inputs("table3"),
    output:
        csv=report(
            "results/dpr/table3.csv",
            caption="../../../report/table_csv.rst",
            category="Tables",
            subcategory="CSV",
        ),
        md="results/dpr/table3.md",
    log:
        "results/logs/tables/table3.log",
    benchmark:
        "results/benchmarks/rules/tables/table3.tsv"
    conda:
        env()
    params:
        cfg=cfg_json(table3_cfg()),
        code=code("drpipe.papers.dpr.tables"),
    shell:
        "drpipe tables table3 --metrics {input:q} --out {output.csv:q} --md {output.md:q}"
        " --cfg {params.cfg:q} 2> {log:q}"


rule figure1:
    input:
        variant_inputs("figure1", per_question=True),
    output:
        png=report(
            "results/dpr/figure1.png",
            caption="../../../report/figure.rst",
            category="Figures",
            subcategory="Images",
        ),
        csv="results/dpr/figure1.csv",
    log:
        "results/logs/tables/figure1.log",
    benchmark:
        "results/benchmarks/rules/tables/figure1.tsv"
    conda:
        env()
    params:
        labels=figure1_labels(),
        cfg=cfg_json(figure1_cfg()),
        code=code("drpipe.papers.dpr.tables"),
    shell:
        "drpipe tables figure1 --per-question {input:q} --labels {params.labels:q}"
        " --out {output.png:q} --csv {output.csv:q} --cfg {params.cfg:q} 2> {log:q}"
