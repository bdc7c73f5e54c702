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
        cfg=cfg_json(
            {
                "scale": SCALE,
                "tolerance": TOLERANCE,
                "variants": {
                    f"dpr.{v}": {
                        **method_variant(C, f"dpr.{v}")["overrides"],
                        "paper_method": method_variant(C, f"dpr.{v}").get("paper_row"),
                    }
                    for v in C["tables"]["table3"]["variants"]
                },
            }
        ),
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
        labels=["BM25"]
        + [
            f"# Train: {method_variant(C, f'dpr.{v}')['overrides'].get('max_examples')}"
            for v in C["tables"]["figure1"]["variants"]
        ]
        + ["# Train: all"],
        cfg=cfg_json(
            {
                "scale": SCALE,
                "dataset": C["tables"]["figure1"]["dataset"],
                "split": C["tables"]["figure1"]["split"],
                "max_k": max(C["evaluate"]["ks"]),
            }
        ),
        code=code("drpipe.papers.dpr.tables"),
    shell:
        "drpipe tables figure1 --per-question {input:q} --labels {params.labels:q}"
        " --out {output.png:q} --csv {output.csv:q} --cfg {params.cfg:q} 2> {log:q}"
