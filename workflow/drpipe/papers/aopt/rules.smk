# AOpt's rules: rounds, grid, and its Table 3 and Figures 6 and 7 (paths, inputs and the
# config checks: plan.py beside this file).


wildcard_constraints:
    protocol="oracle|leakfree",
    round="[1-9][0-9]*",


rule aopt_passage_round:
    input:
        unpack(aopt_passage_inputs),
    output:
        shards=expand(
            "results/embeddings/aopt-{{protocol}}-{{arm}}-r{{round}}/{{train_set}}/shard-{i}.npy",
            i=range(C["encode"]["shards"]),
        ),
        ids=expand(
            "results/embeddings/aopt-{{protocol}}-{{arm}}-r{{round}}/{{train_set}}/shard-{i}.ids.npy",
            i=range(C["encode"]["shards"]),
        ),
        report="results/aopt/reports/aopt-{protocol}-{arm}-r{round}/{train_set}.json",
    log:
        "results/logs/aopt_passage_round/aopt-{protocol}-{arm}-r{round}/{train_set}.log",
    benchmark:
        "results/benchmarks/rules/aopt_passage_round/aopt-{protocol}-{arm}-r{round}/{train_set}.tsv"
    wildcard_constraints:
        arm="passage|hybrid",
    conda:
        env()
    threads: C["threads"]
    params:
        cfg=cfg_json(aopt_opt_cfg("answers")),
        code=code("drpipe.aopt"),
    shell:
        "drpipe aopt optimise --side passage --shards {input.shards:q}"
        " --queries {input.queries:q} --run {input.run:q} --questions {input.questions:q}"
        " --passages {input.passages:q} --out {output.shards:q} --report {output.report:q}"
        " --cfg {params.cfg:q} --threads {threads} 2> {log:q}"


rule aopt_linear:
    input:
        unpack(aopt_passage_inputs),
    output:
        shards=expand(
            "results/embeddings/aopt-{{protocol}}-{{arm}}-r{{round}}/{{train_set}}/shard-{i}.npy",
            i=range(C["encode"]["shards"]),
        ),
        ids=expand(
            "results/embeddings/aopt-{{protocol}}-{{arm}}-r{{round}}/{{train_set}}/shard-{i}.ids.npy",
            i=range(C["encode"]["shards"]),
        ),
        report="results/aopt/reports/aopt-{protocol}-{arm}-r{round}/{train_set}.json",
    log:
        "results/logs/aopt_linear/aopt-{protocol}-{arm}-r{round}/{train_set}.log",
    benchmark:
        "results/benchmarks/rules/aopt_linear/aopt-{protocol}-{arm}-r{round}/{train_set}.tsv"
    wildcard_constraints:
        arm="linear",
        round="1",
    conda:
        env()
    params:
        cfg=cfg_json({"labels": "answers", "depth": AOPT["depth"], **AOPT["linear"]}),
        code=code("drpipe.aopt"),
    shell:
        "drpipe aopt linear --shards {input.shards:q} --queries {input.queries:q}"
        " --run {input.run:q} --questions {input.questions:q} --passages {input.passages:q}"
        " --out {output.shards:q} --report {output.report:q} --cfg {params.cfg:q} 2> {log:q}"


rule aopt_query_round:
    input:
        unpack(aopt_query_inputs),
    output:
        vectors="results/qvecs/aopt-{protocol}-query-r{round}/{train_set}/{dataset}-{split}.npy",
        ids="results/qvecs/aopt-{protocol}-query-r{round}/{train_set}/{dataset}-{split}.ids.npy",
        report="results/aopt/reports/aopt-{protocol}-query-r{round}/{train_set}/{dataset}-{split}.json",
    log:
        "results/logs/aopt_query_round/aopt-{protocol}-query-r{round}/{train_set}/{dataset}-{split}.log",
    benchmark:
        "results/benchmarks/rules/aopt_query_round/aopt-{protocol}-query-r{round}/{train_set}/{dataset}-{split}.tsv"
    conda:
        env()
    threads: C["threads"]
    params:
        # The leak-free protocol's query side reads no answers: no questions file is an input.
        answers=lambda w, input: (
            f"--questions {input.questions} --passages {input.passages}"
            if w.protocol == "oracle"
            else ""
        ),
        cfg=lambda w: cfg_json(
            aopt_opt_cfg("answers" if w.protocol == "oracle" else "prf")
        ),
        code=code("drpipe.aopt"),
    shell:
        "drpipe aopt optimise --side query --shards {input.shards:q}"
        " --queries {input.queries:q} --run {input.run:q} {params.answers}"
        " --out {output.vectors:q} --report {output.report:q} --cfg {params.cfg:q}"
        " --threads {threads} 2> {log:q}"


rule aopt_index:
    input:
        lambda w: shard_files(aopt_run(w.protocol, w.arm, w.round), w.train_set),
    output:
        index="results/index/aopt-{protocol}-{arm}-r{round}/{train_set}/{itype}.faiss",
        ids="results/index/aopt-{protocol}-{arm}-r{round}/{train_set}/{itype}.faiss.ids.npy",
        meta="results/index/aopt-{protocol}-{arm}-r{round}/{train_set}/{itype}.faiss.json",
    log:
        "results/logs/aopt_index/aopt-{protocol}-{arm}-r{round}/{train_set}/{itype}.log",
    benchmark:
        "results/benchmarks/rules/aopt_index/aopt-{protocol}-{arm}-r{round}/{train_set}/{itype}.tsv"
    wildcard_constraints:
        arm="passage|hybrid|linear",
        itype="flat|hnsw|ivfpq",
    conda:
        env()
    threads: C["threads"]
    params:
        cfg=lambda w: cfg_json(index_cfg(w.itype)),
        code=code("drpipe.index"),
    shell:
        "drpipe index --embeddings {input:q} --out {output.index:q} --cfg {params.cfg:q}"
        " --threads {threads} 2> {log:q}"


rule aopt_retrieve:
    input:
        model=lambda w: f"results/models/{AOPT['base']}/{w.train_set}",
        queries=lambda w: aopt_qvecs(
            w.protocol, w.arm, w.round, w.train_set, w.dataset, w.split
        ),
        index=lambda w: aopt_index(w.protocol, w.arm, w.round, w.train_set),
    output:
        run="results/runs/aopt-{protocol}-{arm}-r{round}/{train_set}/{dataset}-{split}.parquet",
        report="results/runs/aopt-{protocol}-{arm}-r{round}/{train_set}/{dataset}-{split}.report.json",
    log:
        "results/logs/aopt_retrieve/aopt-{protocol}-{arm}-r{round}/{train_set}/{dataset}-{split}.log",
    benchmark:
        "results/benchmarks/rules/aopt_retrieve/aopt-{protocol}-{arm}-r{round}/{train_set}/{dataset}-{split}.tsv"
    wildcard_constraints:
        arm="query|passage|hybrid|linear",
    conda:
        env()
    threads: C["threads"]
    params:
        cfg=cfg_json(search_cfg(AOPT["base"])),
        code=lambda w: method_code(AOPT["base"], "drpipe.retrieve"),
    shell:
        "drpipe retrieve --model {input.model:q} --queries {input.queries:q}"
        " --index {input.index:q} --out {output.run:q} --report {output.report:q}"
        " --cfg {params.cfg:q} --threads {threads} 2> {log:q}"


rule aopt_evaluate:
    input:
        run="results/runs/aopt-{protocol}-{arm}-r{round}/{train_set}/{dataset}-{split}.parquet",
        questions="results/qa/{dataset}/{split}.parquet",
        passages="results/corpus/passages.parquet",
    output:
        metrics="results/metrics/aopt-{protocol}-{arm}-r{round}/{train_set}/{dataset}-{split}.json",
        per_question="results/metrics/aopt-{protocol}-{arm}-r{round}/{train_set}/{dataset}-{split}.per_question.parquet",
    log:
        "results/logs/aopt_evaluate/aopt-{protocol}-{arm}-r{round}/{train_set}/{dataset}-{split}.log",
    benchmark:
        "results/benchmarks/rules/aopt_evaluate/aopt-{protocol}-{arm}-r{round}/{train_set}/{dataset}-{split}.tsv"
    wildcard_constraints:
        arm="query|passage|hybrid|linear",
    conda:
        env()
    params:
        cfg=lambda w: cfg_json(
            {
                "ks": EVAL_KS,
                "method": aopt_run(w.protocol, w.arm, w.round),
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


# Figure 6: equation 9 over the beta x gamma grid, labels from the base run (one job per
# protocol: the grid is evaluated in memory, not as 100 indexes).
rule aopt_grid:
    input:
        unpack(lambda w: aopt_label_inputs(w.protocol, "linear", 0, w.train_set)),
        eval_queries=lambda w: qvec_file(
            AOPT["base"], w.train_set, w.dataset, C["tables"]["split"]
        ),
        eval_questions=lambda w: f"results/qa/{w.dataset}/{C['tables']['split']}.parquet",
    output:
        csv="results/aopt/figure6/{protocol}/{train_set}/{dataset}.csv",
        report="results/aopt/figure6/{protocol}/{train_set}/{dataset}.report.json",
    log:
        "results/logs/aopt_grid/{protocol}/{train_set}/{dataset}.log",
    benchmark:
        "results/benchmarks/rules/aopt_grid/{protocol}/{train_set}/{dataset}.tsv"
    conda:
        env()
    params:
        cfg=cfg_json(
            {
                "labels": "answers",
                "depth": AOPT["depth"],
                "alpha": AOPT["linear"]["alpha"],
                "betas": AOPT["figure6"]["betas"],
                "gammas": AOPT["figure6"]["gammas"],
                "ks": EVAL_KS,
                "top_k": C["retrieve"]["top_k"],
            }
        ),
        code=code("drpipe.aopt"),
    shell:
        "drpipe aopt linear-grid --shards {input.shards:q} --queries {input.queries:q}"
        " --run {input.run:q} --questions {input.questions:q} --passages {input.passages:q}"
        " --eval-queries {input.eval_queries:q} --eval-questions {input.eval_questions:q}"
        " --out {output.csv:q} --report {output.report:q} --cfg {params.cfg:q} 2> {log:q}"


rule aopt_figure6:
    input:
        aopt_figure6_inputs(),
    output:
        png="results/aopt/figure6.png",
        csv="results/aopt/figure6.csv",
    log:
        "results/logs/tables/aopt_figure6.log",
    benchmark:
        "results/benchmarks/rules/tables/aopt_figure6.tsv"
    conda:
        env()
    params:
        cfg=cfg_json(
            {
                **SCALE_CFG,
                "protocols": AOPT["protocols"],
                "dataset": AOPT["figure6"]["dataset"],
                "split": C["tables"]["split"],
            }
        ),
        code=code("drpipe.papers.aopt.tables"),
    shell:
        "drpipe tables-aopt figure6 --grids {input:q} --out {output.png:q}"
        " --csv {output.csv:q} --cfg {params.cfg:q} 2> {log:q}"


rule aopt_figure7:
    input:
        aopt_figure7_inputs(),
    output:
        png="results/aopt/figure7.png",
        csv="results/aopt/figure7.csv",
    log:
        "results/logs/tables/aopt_figure7.log",
    benchmark:
        "results/benchmarks/rules/tables/aopt_figure7.tsv"
    conda:
        env()
    params:
        cfg=cfg_json(
            {
                "scale": SCALE,
                "series": [list(s) for s in aopt_figure7_series()],
                "dataset": AOPT["figure7"]["dataset"],
                "split": C["tables"]["split"],
            }
        ),
        code=code("drpipe.papers.aopt.tables"),
    shell:
        "drpipe tables-aopt figure7 --metrics {input:q} --out {output.png:q}"
        " --csv {output.csv:q} --cfg {params.cfg:q} 2> {log:q}"


rule aopt_table3:
    input:
        aopt_table3_inputs(),
    output:
        csv="results/aopt/table3.csv",
        md="results/aopt/table3.md",
    log:
        "results/logs/tables/aopt_table3.log",
    benchmark:
        "results/benchmarks/rules/tables/aopt_table3.tsv"
    conda:
        env()
    params:
        cfg=cfg_json(aopt_table3_cfg()),
        code=code("drpipe.papers.aopt.tables"),
    shell:
        "drpipe tables-aopt table3 --metrics {input:q} --out {output.csv:q}"
        " --md {output.md:q} --cfg {params.cfg:q} 2> {log:q}"
