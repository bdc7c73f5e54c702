# BM25 with Lucene (Anserini through pyserini's jar): index title + text, batch search.


rule bm25_index:
    input:
        "results/corpus/passages.parquet",
    output:
        directory("results/bm25/index"),
    log:
        "results/logs/bm25_index/bm25_index.log",
    benchmark:
        "results/benchmarks/rules/bm25_index/bm25_index.tsv"
    conda:
        "../../envs/java.yaml"
    threads: C["threads"]
    params:
        cfg=cfg_json({"java": C["bm25"]["java"], "fields": C["bm25"]["fields"]}),
        code=code("drpipe.bm25"),
    shell:
        "drpipe bm25 index --passages {input:q} --out {output:q} --cfg {params.cfg:q}"
        " --threads {threads:q} 2> {log:q}"


# BM25 as a retriever: the runs its table rows evaluate (bm25.hits deep), with a TREC export.
rule bm25_search:
    input:
        index="results/bm25/index",
        questions="results/qa/{dataset}/{split}.parquet",
    output:
        run="results/runs/bm25/none/{dataset}-{split}.parquet",
        trec="results/runs/bm25/none/{dataset}-{split}.trec",
        report="results/runs/bm25/none/{dataset}-{split}.report.json",
    log:
        "results/logs/bm25_search/{dataset}-{split}.log",
    benchmark:
        "results/benchmarks/rules/bm25_search/{dataset}-{split}.tsv"
    conda:
        "../../envs/java.yaml"
    threads: C["threads"]
    params:
        cfg=cfg_json(bm25_search_cfg(C["bm25"]["hits"])),
        # A list, so that `:q` quotes the path (and an empty list writes nothing).
        trec=lambda w, output: (
            ["--trec", output.trec] if "trec" in output.keys() else []
        ),
        code=code("drpipe.bm25"),
    shell:
        "drpipe bm25 search --index {input.index:q} --questions {input.questions:q}"
        " --out {output.run:q} {params.trec:q} --report {output.report:q}"
        " --cfg {params.cfg:q} --threads {threads:q} 2> {log:q}"


# The training questions' candidates for negative mining: mining.depth deep and nothing else,
# so an evaluation setting (bm25.hits, the hybrid) never reruns mining and training.
use rule bm25_search as bm25_mining_search with:
    input:
        index="results/bm25/index",
        questions="results/qa/{dataset}/train.parquet",
    output:
        run=bm25_mining_run("{dataset}"),
        report=bm25_mining_run("{dataset}").replace(".parquet", ".report.json"),
    log:
        "results/logs/bm25_mining_search/{dataset}.log",
    benchmark:
        "results/benchmarks/rules/bm25_mining_search/{dataset}.tsv"
    params:
        cfg=cfg_json(bm25_search_cfg(C["mining"]["depth"])),


# The hybrid's BM25 candidates (hybrid.depth deep): of the evaluated questions, and of the
# training questions its weight is tuned on.
use rule bm25_search as bm25_hybrid_search with:
    output:
        run=bm25_hybrid_run("{dataset}", "{split}"),
        report=bm25_hybrid_run("{dataset}", "{split}").replace(
            ".parquet", ".report.json"
        ),
    log:
        "results/logs/bm25_hybrid_search/{dataset}-{split}.log",
    benchmark:
        "results/benchmarks/rules/bm25_hybrid_search/{dataset}-{split}.tsv"
    params:
        cfg=cfg_json(bm25_search_cfg(C["hybrid"]["depth"])),
