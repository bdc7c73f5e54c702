# Dense retrieval from stored question vectors (no model is loaded: the model directory is read
# for its method, which turns retrieved units into ranked passages), and the BM25 + dense
# hybrid of DPR section 5.1.


rule retrieve:
    input:
        model="results/models/{run}/{train_set}",
        queries=lambda w: qvec_file(w.run, w.train_set, w.dataset, w.split),
        index=index_file,
    output:
        run="results/runs/{run}/{train_set}/{dataset}-{split}.parquet",
        report="results/runs/{run}/{train_set}/{dataset}-{split}.report.json",
    log:
        "results/logs/retrieve/{run}/{train_set}/{dataset}-{split}.log",
    benchmark:
        "results/benchmarks/rules/retrieve/{run}/{train_set}/{dataset}-{split}.tsv"
    wildcard_constraints:
        run=DENSE,
    conda:
        env(gpu=True)
    threads: C["threads"]
    resources:
        # The search is FAISS's (question vectors are stored): GPUs only for the index types
        # faiss-gpu searches (flat, IVF-PQ), not HNSW.
        gpu=lambda w: gpus(index_gpus(w.run)),
    params:
        cfg=lambda w: cfg_json(search_cfg(w.run)),
        code=lambda w: method_code(w.run, "drpipe.retrieve"),
    shell:
        "drpipe retrieve --model {input.model:q} --queries {input.queries:q}"
        " --index {input.index:q} --out {output.run:q} --report {output.report:q}"
        " --cfg {params.cfg:q} --threads {threads} 2> {log:q}"


rule hybrid:
    input:
        unpack(hybrid_tuning_inputs),
        model="results/models/{run}/{train_set}",
        queries=lambda w: qvec_file(w.run, w.train_set, w.dataset, w.split),
        index=index_file,
        embeddings=lambda w: shard_files(w.run, w.train_set),
        bm25=bm25_hybrid_run("{dataset}", "{split}"),
    output:
        run="results/runs/{run}+bm25/{train_set}/{dataset}-{split}.parquet",
        report="results/runs/{run}+bm25/{train_set}/{dataset}-{split}.report.json",
    log:
        "results/logs/hybrid/{run}/{train_set}/{dataset}-{split}.log",
    benchmark:
        "results/benchmarks/rules/hybrid/{run}/{train_set}/{dataset}-{split}.tsv"
    wildcard_constraints:
        run=DENSE,
    conda:
        env()
    threads: C["threads"]
    params:
        tune=lambda w, input: " ".join(
            f"--{k.replace('_', '-')} {input[k]}" for k in hybrid_tuning_inputs(w)
        ),
        cfg=lambda w: cfg_json(hybrid_cfg(w.run)),
        code=lambda w: method_code(w.run, "drpipe.hybrid"),
    shell:
        "drpipe hybrid --model {input.model:q} --queries {input.queries:q}"
        " --index {input.index:q} --embeddings {input.embeddings:q}"
        " --bm25-run {input.bm25:q} {params.tune} --out {output.run:q} --report {output.report:q}"
        " --cfg {params.cfg:q} --threads {threads} 2> {log:q}"
