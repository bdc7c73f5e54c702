# Inputs: copied from the mirror (DATA_MIRROR) or downloaded, checksum-verified, recorded.
# Only what determines the bytes (URL, checksums, path inside the mirror) is a param: where
# the mirror is (read by `drpipe fetch` from DATA_MIRROR at run time) and a source's `note`
# rerun nothing. Each verified file is also hard-linked under results/data/.verified/, which
# Snakemake never deletes, so a refetch that cannot reach the mirror reuses it.


# On a cluster, downloads run where Snakemake runs: compute nodes often have no network.
localrules:
    fetch,


rule fetch:
    output:
        data="results/data/{source}/{filename}",
        record="results/data/records/{source}/{filename}.json",
    log:
        "results/logs/fetch/{source}/{filename}.log",
    benchmark:
        "results/benchmarks/rules/fetch/{source}/{filename}.tsv"
    wildcard_constraints:
        # A source with a stand-in (the rehearsal) is made by rule standin instead.
        source="|".join(s for s in C["sources"] if s not in STANDIN_SOURCES) or "(?!)",
        filename="[^/]+",
    conda:
        "../../envs/cpu.yaml"
    params:
        cfg=lambda w: cfg_json(
            {k: v for k, v in C["sources"][w.source].items() if k != "note"}
        ),
        keep=lambda w: f"results/data/.verified/{w.source}/{w.filename}",
        code=code("drpipe.download"),
    shell:
        "drpipe fetch --name {wildcards.source:q} --out {output.data:q}"
        " --record {output.record:q} --keep {params.keep:q} --cfg {params.cfg:q} 2> {log:q}"
