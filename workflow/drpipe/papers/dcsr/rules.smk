# DCSR's rules: its tables, Figure 4, DCSR's k and the hard-negative round (their paths and
# cells: plan.py beside this file).


# The second training round (Tables 3 and 5): run "<method>.hard_<miner>" of a train set is
# <method> trained on negatives mined by <miner>'s checkpoint of that train set. Its output
# path also fits the generic train rule (as an unconfigured variant), so this order decides.
ruleorder: train_hard > train


wildcard_constraints:
    miner="|".join(METHODS),


# --- the second training round: hard negatives mined with a trained checkpoint


use rule mine as mine_hard with:
    input:
        questions=lambda w: f"results/qa/{w.dataset}/{miner_split(w.dataset)}.parquet",
        run=lambda w: (
            f"results/runs/{w.miner}/{w.train_set}/{w.dataset}-{miner_split(w.dataset)}.parquet"
        ),
        passages="results/corpus/passages.parquet",
    output:
        examples="results/train/{dataset}.hard_{miner}_{train_set}.jsonl.gz",
        report="results/train/{dataset}.hard_{miner}_{train_set}.report.json",
    log:
        "results/logs/mine_hard/{dataset}-{miner}-{train_set}.log",
    benchmark:
        "results/benchmarks/rules/mine_hard/{dataset}-{miner}-{train_set}.tsv"
    # A derived rule resolves its environment from this folder: name it from here.
    conda:
        env()


use rule train as train_hard with:
    input:
        unpack(lambda w: train_corpus(w.run)),
        train=lambda w: [
            f"results/train/{d}.hard_{w.miner}_{w.train_set}.jsonl.gz"
            for d in C["train_sets"][w.train_set]
        ],
        val=lambda w: val_set_files(w.train_set),
        init=lambda w: init_inputs(w.run),
    output:
        model=directory("results/models/{run}.hard_{miner}/{train_set}"),
        report="results/models/{run}.hard_{miner}/{train_set}.report.json",
    log:
        "results/logs/train/{run}.hard_{miner}/{train_set}.log",
    benchmark:
        "results/benchmarks/rules/train/{run}.hard_{miner}/{train_set}.tsv"
    wildcard_constraints:
        run="|".join(METHODS),
    # A derived rule resolves its environment from this folder: name it from here.
    conda:
        env(gpu=True)


# Paper scale: the miner's retrieval over the questions of DPR's released training file (a
# ".released" split, which the generic question, encoding and retrieval rules never match).
rule released_train_questions:
    input:
        src=lambda w: released_examples(w.dataset),
    output:
        questions="results/qa/{dataset}/train.released.parquet",
        report="results/qa/{dataset}/train.released.report.json",
    log:
        "results/logs/released_train_questions/{dataset}.log",
    benchmark:
        "results/benchmarks/rules/released_train_questions/{dataset}.tsv"
    conda:
        env()
    params:
        cfg=cfg_json(
            {
                "sample": None,
                "match": "string",
                "allow_empty": False,
                "seed": C["seed"],
            }
        ),
        code=code("drpipe.qa.cli"),
    shell:
        "drpipe qa load --format dpr-biencoder --input {input.src:q}"
        " --dataset {wildcards.dataset:q} --split train --out {output.questions:q}"
        " --report {output.report:q} --cfg {params.cfg:q} 2> {log:q}"


use rule encode_queries as encode_released_queries with:
    input:
        model="results/models/{run}/{train_set}",
        questions="results/qa/{dataset}/train.released.parquet",
    output:
        vectors="results/qvecs/{run}/{train_set}/{dataset}-train.released.npy",
        ids="results/qvecs/{run}/{train_set}/{dataset}-train.released.ids.npy",
        report="results/qvecs/{run}/{train_set}/{dataset}-train.released.report.json",
    log:
        "results/logs/encode_queries/{run}/{train_set}/{dataset}-train.released.log",
    benchmark:
        "results/benchmarks/rules/encode_queries/{run}/{train_set}/{dataset}-train.released.tsv"
    # A derived rule resolves its environment from this folder: name it from here.
    conda:
        env(gpu=True)


use rule retrieve as retrieve_released with:
    input:
        model="results/models/{run}/{train_set}",
        queries="results/qvecs/{run}/{train_set}/{dataset}-train.released.npy",
        index=index_file,
    output:
        run="results/runs/{run}/{train_set}/{dataset}-train.released.parquet",
        report="results/runs/{run}/{train_set}/{dataset}-train.released.report.json",
    log:
        "results/logs/retrieve/{run}/{train_set}/{dataset}-train.released.log",
    benchmark:
        "results/benchmarks/rules/retrieve/{run}/{train_set}/{dataset}-train.released.tsv"
    # A derived rule resolves its environment from this folder: name it from here.
    conda:
        env(gpu=True)


# --- tables


rule dcsr_table:
    input:
        lambda w: [c["file"] for c in dcsr_cells(w.table)],
    output:
        csv="results/dcsr/table{table}.csv",
        md="results/dcsr/table{table}.md",
    log:
        "results/logs/tables/dcsr_table{table}.log",
    benchmark:
        "results/benchmarks/rules/tables/dcsr_table{table}.tsv"
    wildcard_constraints:
        table="[2-8]",
    conda:
        env()
    params:
        cfg=lambda w: cfg_json(dcsr_table_cfg(w.table)),
        code=code("drpipe.papers.dcsr.tables"),
    shell:
        "drpipe tables-dcsr compare --metrics {input:q} --out {output.csv:q} --md {output.md:q}"
        " --cfg {params.cfg:q} 2> {log:q}"


rule dcsr_figure4:
    input:
        [f"results/models/{run}/{ts}.report.json" for _, run, ts in figure4_runs()],
    output:
        png="results/dcsr/figure4.png",
        csv="results/dcsr/figure4.csv",
    log:
        "results/logs/tables/dcsr_figure4.log",
    benchmark:
        "results/benchmarks/rules/tables/dcsr_figure4.tsv"
    conda:
        env()
    params:
        labels=[f"{label} ({ts})" for label, _, ts in figure4_runs()],
        cfg=cfg_json(
            {"scale": SCALE, "dataset": "+".join(dcsr_tcfg("figure4")["train_sets"])}
        ),
        code=code("drpipe.papers.dcsr.tables"),
    shell:
        "drpipe tables-dcsr figure4 --reports {input:q} --labels {params.labels:q}"
        " --out {output.png:q} --csv {output.csv:q} --cfg {params.cfg:q} 2> {log:q}"


rule dcsr_vectors:
    input:
        unpack(lambda w: dcsr_vectors_inputs()),
    output:
        "results/dcsr/vectors_per_passage.csv",
    log:
        "results/logs/tables/dcsr_vectors.log",
    benchmark:
        "results/benchmarks/rules/tables/dcsr_vectors.tsv"
    conda:
        env()
    params:
        cfg=cfg_json({"scale": SCALE}),
        code=code("drpipe.papers.dcsr.tables"),
    shell:
        "drpipe tables-dcsr vectors --passages {input.passages:q}"
        " --sentences-report {input.sentences:q} --retrieve-report {input.retrieve:q}"
        " --model {input.model:q} --out {output:q} --cfg {params.cfg:q} 2> {log:q}"
