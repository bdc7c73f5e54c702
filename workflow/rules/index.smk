# FAISS indexes over all shards of one run's corpus vectors (type per method: config index).


rule build_index:
    input:
        lambda w: shard_files(w.run, w.train_set),
    output:
        index="results/index/{run}/{train_set}/{itype}.faiss",
        ids="results/index/{run}/{train_set}/{itype}.faiss.ids.npy",
        meta="results/index/{run}/{train_set}/{itype}.faiss.json",
    log:
        "results/logs/build_index/{run}/{train_set}/{itype}.log",
    benchmark:
        "results/benchmarks/rules/build_index/{run}/{train_set}/{itype}.tsv"
    wildcard_constraints:
        run=DENSE,
        itype="flat|hnsw|ivfpq",
    conda:
        env(gpu=True)
    threads: C["threads"]
    resources:
        # Only IVF-PQ is built on a GPU (drpipe.index); flat and HNSW (the paper's) on CPU.
        gpu=lambda w: gpus(1) if w.itype == "ivfpq" else 0,
    params:
        cfg=lambda w: cfg_json(index_cfg(w.itype)),
        code=code("drpipe.index"),
    shell:
        "drpipe index --embeddings {input:q} --out {output.index:q} --cfg {params.cfg:q}"
        " --threads {threads} 2> {log:q}"
