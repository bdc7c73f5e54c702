# Inputs: copied from the mirror (DATA_MIRROR) or downloaded, checksum-verified, recorded.


rule fetch:
    output:
        data="results/data/{source}/{filename}",
        record="results/data/records/{source}/{filename}.json",
    log:
        "results/logs/fetch/{source}/{filename}.log",
    benchmark:
        "results/benchmarks/rules/fetch/{source}/{filename}.tsv"
    wildcard_constraints:
        source="|".join(C["sources"]),
        filename="[^/]+",
    conda:
        "../../envs/cpu.yaml"
    params:
        cfg=lambda w: cfg_json(C["sources"][w.source]),
        mirror=MIRROR,
        code=code("download.py"),
    shell:
        "drpipe fetch --name {wildcards.source} --mirror {params.mirror:q} --out {output.data:q}"
        " --record {output.record:q} --cfg {params.cfg:q} 2> {log:q}"
