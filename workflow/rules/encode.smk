# Corpus vectors: one job per shard, so a failed shard reruns alone. The run's method says
# which units get vectors (passages; DCSR: sentences, so it also reads the sentences).
# Tokenize once (drpipe.tokens): a shard's token ids are written once per tokenizer, maximum
# length and passage format, and every run whose encoder shares them encodes from them (same
# vectors as from text); a run the plan cannot key (a released checkpoint) reads the text.


rule tokenize:
    input:
        unpack(lambda w: token_corpus_inputs(w.tokenizer, w.format)),
    output:
        ids="results/tokens/{tokenizer}/{format}/shard-{shard}.tokens.npy",
        rows="results/tokens/{tokenizer}/{format}/shard-{shard}.rows.npy",
        meta="results/tokens/{tokenizer}/{format}/shard-{shard}.json",
    log:
        "results/logs/tokenize/{tokenizer}/{format}/shard-{shard}.log",
    benchmark:
        "results/benchmarks/rules/tokenize/{tokenizer}/{format}/shard-{shard}.tsv"
    wildcard_constraints:
        tokenizer="[^/]+",
        format="[^/]+",
        shard="[0-9]+",
    conda:
        env()
    params:
        num_shards=C["encode"]["shards"],
        tokenizer=lambda w: token_spec_of(w.tokenizer, w.format)["tokenizer"],
        sentences=lambda w, input: (
            f"--sentences {input.sentences}" if "sentences" in input.keys() else ""
        ),
        cfg=lambda w: cfg_json(token_spec_of(w.tokenizer, w.format)["cfg"]),
        prefix=lambda w: f"results/tokens/{w.tokenizer}/{w.format}/shard-{w.shard}",
        code=lambda w: token_spec_of(w.tokenizer, w.format)["code"],
    shell:
        "drpipe tokenize --tokenizer {params.tokenizer:q} --passages {input.passages:q}"
        " {params.sentences} --shard {wildcards.shard:q} --num-shards {params.num_shards}"
        " --out {params.prefix:q} --cfg {params.cfg:q} 2> {log:q}"


rule encode:
    input:
        unpack(lambda w: {"model": f"results/models/{w.run}/{w.train_set}"}),
        unpack(lambda w: encode_inputs(w.run, w.shard)),
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
        source=lambda w: encode_source(w.run, w.shard),
        cfg=cfg_json({"dtype": C["encode"]["dtype"], **precision_cfg(C["encode"])}),
        opts=runtime(lambda w: runtime_opts("encode")),
        code=lambda w: method_code(w.run, "drpipe.encode"),
    shell:
        "drpipe encode --model {input.model:q} {params.source}"
        " --shard {wildcards.shard:q} --num-shards {params.num_shards}"
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
