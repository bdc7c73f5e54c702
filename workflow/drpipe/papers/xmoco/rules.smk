# xMoCo's rules: its Table 2, Table 3 and Figure 2 (their paths and inputs: plan.py beside this file).


rule xmoco_table2:
    input:
        xmoco_table2_inputs(),
    output:
        csv="results/xmoco/table2.csv",
        md="results/xmoco/table2.md",
    log:
        "results/logs/tables/xmoco_table2.log",
    benchmark:
        "results/benchmarks/rules/tables/xmoco_table2.tsv"
    conda:
        env()
    params:
        cfg=cfg_json(
            {
                **SCALE_CFG,
                "tolerance": TOLERANCE,
                "row_map": xmoco_table2_row_map(),
                "train_sets": C["train_sets"],
            }
        ),
        code=code("drpipe.papers.xmoco.tables"),
    shell:
        "drpipe tables-xmoco table2 --metrics {input:q} --out {output.csv:q}"
        " --md {output.md:q} --cfg {params.cfg:q} 2> {log:q}"


rule xmoco_table3:
    input:
        xmoco_inputs("table3"),
    output:
        csv="results/xmoco/table3.csv",
        md="results/xmoco/table3.md",
    log:
        "results/logs/tables/xmoco_table3.log",
    benchmark:
        "results/benchmarks/rules/tables/xmoco_table3.tsv"
    conda:
        env()
    params:
        cfg=cfg_json(
            {
                **SCALE_CFG,
                "tolerance": TOLERANCE,
                "variants": xmoco_table3_variants(),
            }
        ),
        code=code("drpipe.papers.xmoco.tables"),
    shell:
        "drpipe tables-xmoco table3 --metrics {input:q} --out {output.csv:q}"
        " --md {output.md:q} --cfg {params.cfg:q} 2> {log:q}"


rule xmoco_figure2:
    input:
        xmoco_inputs("figure2"),
    output:
        png="results/xmoco/figure2.png",
        csv="results/xmoco/figure2.csv",
    log:
        "results/logs/tables/xmoco_figure2.log",
    benchmark:
        "results/benchmarks/rules/tables/xmoco_figure2.tsv"
    conda:
        env()
    params:
        cfg=cfg_json({"scale": SCALE, "variants": xmoco_figure2_variants()}),
        code=code("drpipe.papers.xmoco.tables"),
    shell:
        "drpipe tables-xmoco figure2 --metrics {input:q} --out {output.png:q}"
        " --csv {output.csv:q} --cfg {params.cfg:q} 2> {log:q}"
