# Dense retrieval (top-k per question) and the BM25 + dense hybrid of DPR section 5.1.


rule retrieve:
    input:
        model="results/models/{method}/{train_set}",
        index=index_file,
        questions="results/qa/{dataset}/{split}.parquet",
    output:
        run="results/runs/{method}/{train_set}/{dataset}-{split}.parquet",
        report="results/runs/{method}/{train_set}/{dataset}-{split}.report.json",
    log:
        "results/logs/retrieve/{method}/{train_set}/{dataset}-{split}.log",
    benchmark:
        "results/benchmarks/rules/retrieve/{method}/{train_set}/{dataset}-{split}.tsv"
    wildcard_constraints:
        method=DENSE,
    conda:
        "../../envs/cpu.yaml"
    threads: C["threads"]
    params:
        cfg=retrieve_cfg(),
        code=code("encoders.py", "index.py", "retrieve.py"),
    shell:
        "drpipe retrieve --model {input.model:q} --index {input.index:q}"
        " --questions {input.questions:q} --out {output.run:q} --report {output.report:q}"
        " --cfg {params.cfg:q} --threads {threads} 2> {log:q}"


rule hybrid:
    input:
        model="results/models/{method}/{train_set}",
        index=index_file,
        embeddings=lambda w: shard_files(w.method, w.train_set),
        bm25="results/runs/bm25/none/{dataset}-{split}.parquet",
        questions="results/qa/{dataset}/{split}.parquet",
    output:
        run="results/runs/{method}+bm25/{train_set}/{dataset}-{split}.parquet",
        report="results/runs/{method}+bm25/{train_set}/{dataset}-{split}.report.json",
    log:
        "results/logs/hybrid/{method}/{train_set}/{dataset}-{split}.log",
    benchmark:
        "results/benchmarks/rules/hybrid/{method}/{train_set}/{dataset}-{split}.tsv"
    wildcard_constraints:
        method=DENSE,
    conda:
        "../../envs/cpu.yaml"
    threads: C["threads"]
    params:
        cfg=retrieve_cfg(lambda_=C["hybrid"]["lambda"], depth=C["hybrid"]["depth"]),
        code=code("encoders.py", "index.py", "retrieve.py"),
    shell:
        "drpipe hybrid --model {input.model:q} --index {input.index:q}"
        " --embeddings {input.embeddings:q} --bm25-run {input.bm25:q}"
        " --questions {input.questions:q} --out {output.run:q} --report {output.report:q}"
        " --cfg {params.cfg:q} --threads {threads} 2> {log:q}"
