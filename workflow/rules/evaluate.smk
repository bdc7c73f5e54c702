# Top-k accuracy of any run on any split (DPR's answer matching), per question kept too.


rule evaluate:
    input:
        run="results/runs/{run}/{train_set}/{dataset}-{split}.parquet",
        questions="results/qa/{dataset}/{split}.parquet",
        passages="results/corpus/passages.parquet",
    output:
        metrics="results/metrics/{run}/{train_set}/{dataset}-{split}.json",
        per_question="results/metrics/{run}/{train_set}/{dataset}-{split}.per_question.parquet",
    log:
        "results/logs/evaluate/{run}/{train_set}/{dataset}-{split}.log",
    benchmark:
        "results/benchmarks/rules/evaluate/{run}/{train_set}/{dataset}-{split}.tsv"
    wildcard_constraints:
        run=f"bm25|(?:{DENSE})(?:\\+bm25)?|{EXTERNAL_RUN}",
    conda:
        env()
    params:
        cfg=lambda w: cfg_json(
            {
                "ks": EVAL_KS,
                "method": w.run,
                "train_set": w.train_set,
                "dataset": w.dataset,
                "split": w.split,
            }
        ),
        code=code("drpipe.evaluate"),
    shell:
        "drpipe evaluate --run {input.run:q} --questions {input.questions:q}"
        " --passages {input.passages:q} --out {output.metrics:q}"
        " --per-question {output.per_question:q} --cfg {params.cfg:q} 2> {log:q}"
