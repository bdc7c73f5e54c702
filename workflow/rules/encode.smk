# Corpus vectors: one job per shard, so a failed shard reruns alone. The run's method says
# which units get vectors (passages; DCSR: sentences, so it also reads the sentences).


rule encode:
    input:
        unpack(lambda w: {"model": f"results/models/{w.run}/{w.train_set}"}),
        unpack(lambda w: corpus_inputs(w.run)),
    output:
        vectors="results/embeddings/{run}/{train_set}/shard-{shard}.npy",
        ids="results/embeddings/{run}/{train_set}/shard-{shard}.ids.npy",
        report="results/embeddings/{run}/{train_set}/shard-{shard}.report.json",
    log:
        "results/logs/encode/{run}/{train_set}/shard-{shard}.log",
    benchmark:
        "results/benchmarks/rules/encode/{run}/{train_set}/shard-{shard}.tsv"
    wildcard_constraints:
        run=DENSE,
    conda:
        env(gpu=True)
    threads: C["threads"]
    resources:
        gpu=lambda w: gpus(1),
    params:
        num_shards=C["encode"]["shards"],
        sentences=lambda w, input: (
            f"--sentences {input.sentences}" if "sentences" in input.keys() else ""
        ),
        cfg=cfg_json({"dtype": C["encode"]["dtype"], **precision_cfg(C["encode"])}),
        opts=runtime(lambda w: runtime_opts("encode")),
        code=lambda w: method_code(w.run, "drpipe.encode"),
    shell:
        "drpipe encode --model {input.model:q} --passages {input.passages:q}"
        " {params.sentences} --shard {wildcards.shard:q} --num-shards {params.num_shards}"
        " --out {output.vectors:q} --report {output.report:q} --cfg {params.cfg:q}"
        " {params.opts} --threads {threads} 2> {log:q}"


rule encode_queries:
    input:
        model="results/models/{run}/{train_set}",
        questions="results/qa/{dataset}/{split}.parquet",
    output:
        vectors="results/qvecs/{run}/{train_set}/{dataset}-{split}.npy",
        ids="results/qvecs/{run}/{train_set}/{dataset}-{split}.ids.npy",
        report="results/qvecs/{run}/{train_set}/{dataset}-{split}.report.json",
    log:
        "results/logs/encode_queries/{run}/{train_set}/{dataset}-{split}.log",
    benchmark:
        "results/benchmarks/rules/encode_queries/{run}/{train_set}/{dataset}-{split}.tsv"
    wildcard_constraints:
        run=DENSE,
    conda:
        env(gpu=True)
    threads: C["threads"]
    resources:
        gpu=lambda w: gpus(1),
    params:
        cfg=cfg_json(precision_cfg(C["encode"])),
        opts=runtime(lambda w: runtime_opts("retrieve")),
        code=lambda w: method_code(w.run, "drpipe.encode"),
    shell:
        "drpipe encode-queries --model {input.model:q} --questions {input.questions:q}"
        " --out {output.vectors:q} --report {output.report:q} --cfg {params.cfg:q}"
        " {params.opts} --threads {threads} 2> {log:q}"
