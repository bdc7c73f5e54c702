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
        cfg=lambda w: cfg_json(
            {
                "k1": C["bm25"]["k1"],
                "b": C["bm25"]["b"],
                "hits": bm25_depth(w.split),
                "java": C["bm25"]["java"],
                "fields": C["bm25"]["fields"],
                **(
                    {"field_weights": C["bm25"]["field_weights"]}
                    if C["bm25"]["fields"] == "title_text"
                    else {}
                ),
            }
        ),
        code=code("drpipe.bm25"),
    shell:
        "drpipe bm25 search --index {input.index:q} --questions {input.questions:q}"
        " --out {output.run:q} --trec {output.trec:q} --report {output.report:q}"
        " --cfg {params.cfg:q} --threads {threads:q} 2> {log:q}"
