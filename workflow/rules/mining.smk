# DPR training examples: gold/BM25 positives, BM25 hard negatives, random negatives.


rule mine:
    input:
        questions="results/qa/{dataset}/train.parquet",
        run=bm25_mining_run("{dataset}"),
        passages="results/corpus/passages.parquet",
    output:
        examples="results/train/{dataset}.jsonl.gz",
        report="results/train/{dataset}.report.json",
    log:
        "results/logs/mine/{dataset}.log",
    benchmark:
        "results/benchmarks/rules/mine/{dataset}.tsv"
    conda:
        "../../envs/cpu.yaml"
    params:
        cfg=cfg_json({**C["mining"], "seed": C["seed"]}),
        code=code("drpipe.qa.mine_cli"),
    shell:
        "drpipe mine --questions {input.questions:q} --run {input.run:q}"
        " --passages {input.passages:q} --out {output.examples:q} --report {output.report:q}"
        " --cfg {params.cfg:q} 2> {log:q}"
