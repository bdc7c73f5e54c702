# Training variance (config `seeds`): Table 2's trained rows and the trained runs the claims
# compare, each trained again under every extra seed (runs <run>@s<seed>, made by the generic
# rules); the plan is drpipe.plan.seeds, the tables drpipe.seeds. Its own target: `make seeds`.


rule seeds_table:
    input:
        seeds_table_inputs(),
    output:
        csv="results/table2-seeds.csv",
        md="results/table2-seeds.md",
    log:
        "results/logs/seeds/table.log",
    benchmark:
        "results/benchmarks/rules/seeds/table.tsv"
    conda:
        env()
    params:
        cfg=cfg_json(seeds_table_cfg()),
        code=code("drpipe.seeds"),
    shell:
        "drpipe seeds table --metrics {input:q} --cfg {params.cfg:q}"
        " --out {output.csv:q} --md {output.md:q} 2> {log:q}"


rule seeds_claims:
    input:
        seeds_claims_inputs(),
        # The run's commit, scale and config hash go into every row.
        provenance="results/provenance.json",
    output:
        csv="results/claims-seeds.csv",
        md="results/claims-seeds.md",
    log:
        "results/logs/seeds/claims.log",
    benchmark:
        "results/benchmarks/rules/seeds/claims.tsv"
    conda:
        env()
    params:
        cfg=cfg_json(seeds_claims_cfg()),
        code=code("drpipe.seeds", "drpipe.claims"),
    shell:
        "drpipe seeds claims --results results --cfg {params.cfg:q}"
        " --out {output.csv:q} --md {output.md:q} 2> {log:q}"
