# FAISS indexes over all shards of one encoder's passage vectors.


rule build_index:
    input:
        lambda w: shard_files(w.method, w.train_set),
    output:
        index="results/index/{method}/{train_set}/{itype}.faiss",
        ids="results/index/{method}/{train_set}/{itype}.faiss.ids.npy",
        meta="results/index/{method}/{train_set}/{itype}.faiss.json",
    log:
        "results/logs/build_index/{method}/{train_set}/{itype}.log",
    benchmark:
        "results/benchmarks/rules/build_index/{method}/{train_set}/{itype}.tsv"
    wildcard_constraints:
        method=DENSE,
        itype="flat|hnsw|ivfpq",
    conda:
        "../../envs/cpu.yaml"
    threads: C["threads"]
    params:
        cfg=lambda w: cfg_json({**C["index"], "type": w.itype, "seed": C["seed"]}),
        code=code("index.py"),
    shell:
        "drpipe index --embeddings {input:q} --out {output.index:q} --cfg {params.cfg:q}"
        " --threads {threads} 2> {log:q}"
