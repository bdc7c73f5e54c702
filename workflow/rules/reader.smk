# End-to-end QA (DPR section 6.1): a reader over every Table 2 retriever row's top-k passages.
# Local scales: one reader shared by all rows (reader.train_run's results trained it);
# reader.per_retriever: one per (retriever, train set); reader.released: a released reader.
# reader.batch_size_by_dataset and reader.multi_finetune: DPR's batch 4 for WQ and TREC, whose
# Multi reader is the NQ reader (same retriever) fine-tuned on them.
# Scores per (question, passage) are computed once per reader over the union of the rows'
# top passages (results/reader_scores/), and every row reads its predictions from them. k is
# chosen on held-out questions: per row (reader.k_per_row), or on the shared reader's own
# training run and used by every row (local scales: one held-out retrieval run, not one per
# row). reader.sample: a seeded sample of the evaluated (and k_split) questions, in the notes.


rule reader_train:
    input:
        run="results/runs/{rrun}/{rts}/{dataset}-train.parquet",
        questions="results/qa/{dataset}/train.parquet",
        passages="results/corpus/passages.parquet",
        gold=lambda w: (
            [train_examples_file(w.dataset)]
            if C["train_examples"].get(w.dataset, "mine") == "mine"
            else []
        ),
        start=lambda w: reader_start(w.rrun, w.rts, w.dataset),
        # The rehearsal's stand-in of reader.init (a tiny BERT of bert-base-uncased's layout).
        models=model_inputs(RC["init"]),
    output:
        reader=directory("results/readers/{rrun}/{rts}/{dataset}"),
        report="results/readers/{rrun}/{rts}/{dataset}.report.json",
    log:
        "results/logs/reader_train/{rrun}/{rts}/{dataset}.log",
    benchmark:
        "results/benchmarks/rules/reader_train/{rrun}/{rts}/{dataset}.tsv"
    wildcard_constraints:
        rrun=ANY_RUN,
    conda:
        env(gpu=True)
    threads: THREADS_ALONE
    resources:
        # DPR: eight GPUs; no more ranks than questions in a batch (4 for WQ and TREC).
        gpu=lambda w: gpus(min(8, reader_batch_size(w.dataset))),
    params:
        gold=lambda w, input: f"--gold {input.gold[0]}" if input.gold else "",
        # From the wildcards, not `input`: Snakemake leaves a param that reads `input` out of
        # its params comparison, so a changed reader setting would retrain nothing.
        cfg=lambda w: cfg_json(
            reader_train_cfg(
                w.rrun, w.rts, w.dataset, reader_start(w.rrun, w.rts, w.dataset)
            )
        ),
        opts=runtime(lambda w: options({"checkpoint_every": RC["checkpoint_every"]})),
        code=code("drpipe.reader"),
    shell:
        "drpipe reader train --run {input.run:q} --questions {input.questions:q}"
        " --passages {input.passages:q} {params.gold} --out {output.reader:q}"
        " --report {output.report:q} --cfg {params.cfg:q} {params.opts}"
        " --threads {threads} --nproc {resources.gpu} 2> {log:q}"


rule reader_score:
    input:
        reader=lambda w: reader_dir(w.rrun, w.rts, w.dataset),
        questions="results/qa/{dataset}/{split}.parquet",
        passages="results/corpus/passages.parquet",
        runs=lambda w: [
            f"results/runs/{r}/{ts}/{w.dataset}-{w.split}.parquet"
            for r, ts in scored_rows(w.rrun, w.rts, w.dataset, w.split)
        ],
    output:
        scores="results/reader_scores/{rrun}/{rts}/{dataset}-{split}.parquet",
        report="results/reader_scores/{rrun}/{rts}/{dataset}-{split}.report.json",
    log:
        "results/logs/reader_score/{rrun}/{rts}/{dataset}-{split}.log",
    benchmark:
        "results/benchmarks/rules/reader_score/{rrun}/{rts}/{dataset}-{split}.tsv"
    wildcard_constraints:
        rrun=ANY_RUN,
    conda:
        env(gpu=True)
    threads: C["threads"]
    resources:
        gpu=lambda w: gpus(1),
    params:
        reader=lambda w, input: input.reader[0] if input.reader else RC["released"],
        cfg=lambda w: cfg_json(
            {
                "depth": max(RC["ks"]),
                **precision_cfg(RC),
                **reader_sample(w.split),
            }
        ),
        opts=runtime(lambda w: options({"eval_batch_size": RC["eval_batch_size"]})),
        code=code("drpipe.reader"),
    shell:
        "drpipe reader score --reader {params.reader:q} --questions {input.questions:q}"
        " --passages {input.passages:q} --runs {input.runs:q} --out {output.scores:q}"
        " --report {output.report:q} --cfg {params.cfg:q} {params.opts}"
        " --threads {threads} 2> {log:q}"


rule reader_choose_k:
    input:
        scores=lambda w: reader_scores(w.run, w.train_set, w.dataset, reader_k_split()),
        run=lambda w: f"results/runs/{w.run}/{w.train_set}/{w.dataset}-{reader_k_split()}.parquet",
        questions=lambda w: f"results/qa/{w.dataset}/{reader_k_split()}.parquet",
    output:
        "results/answers/{run}/{train_set}/{dataset}.k.json",
    log:
        "results/logs/reader_choose_k/{run}/{train_set}/{dataset}.log",
    benchmark:
        "results/benchmarks/rules/reader_choose_k/{run}/{train_set}/{dataset}.tsv"
    wildcard_constraints:
        run=ANY_RUN,
    conda:
        env()
    params:
        # The split names let choose-k refuse test questions itself (reader_k_split: the plan).
        cfg=cfg_json(
            {
                "ks": RC["ks"],
                "split": reader_k_split(),
                "evaluated_split": C["tables"]["split"],
                **reader_sample(reader_k_split()),
            }
        ),
        code=code("drpipe.reader"),
    shell:
        "drpipe reader choose-k --scores {input.scores:q} --run {input.run:q}"
        " --questions {input.questions:q} --out {output:q} --cfg {params.cfg:q} 2> {log:q}"


rule read:
    input:
        scores=lambda w: reader_scores(w.run, w.train_set, w.dataset, w.split),
        run="results/runs/{run}/{train_set}/{dataset}-{split}.parquet",
        questions="results/qa/{dataset}/{split}.parquet",
        k=lambda w: reader_k_file(w.run, w.train_set, w.dataset),
    output:
        answers="results/answers/{run}/{train_set}/{dataset}-{split}.parquet",
        metrics="results/answers/{run}/{train_set}/{dataset}-{split}.json",
    log:
        "results/logs/read/{run}/{train_set}/{dataset}-{split}.log",
    benchmark:
        "results/benchmarks/rules/read/{run}/{train_set}/{dataset}-{split}.tsv"
    wildcard_constraints:
        run=ANY_RUN,
    conda:
        env()
    params:
        cfg=lambda w: cfg_json(
            {
                "method": w.run,
                "train_set": w.train_set,
                "dataset": w.dataset,
                "split": w.split,
                "reader": "/".join(reader_of(w.run, w.train_set)),
                **reader_sample(w.split),
            }
        ),
        code=code("drpipe.reader"),
    shell:
        "drpipe reader predict --scores {input.scores:q} --run {input.run:q}"
        " --questions {input.questions:q} --k-from {input.k:q} --out {output.answers:q}"
        " --metrics {output.metrics:q} --cfg {params.cfg:q} 2> {log:q}"


# A local-scale warm start (reader.warm_start; issue 19, DPR trains from BERT on far more
# questions): reading comprehension over SQuAD train articles outside the corpus, then the
# reader trains on the retriever's results from it (reader_start). Said in Table 4's notes.
rule reader_warm_start_data:
    input:
        squad=lambda w: source_file(RC["warm_start"]["source"]),
        corpus="results/corpus/passages.parquet",
    output:
        questions="results/reader_warm_start/questions.parquet",
        passages="results/reader_warm_start/passages.parquet",
        run="results/reader_warm_start/run.parquet",
        gold="results/reader_warm_start/gold.jsonl.gz",
        report="results/reader_warm_start/data.report.json",
    log:
        "results/logs/reader_warm_start_data/reader_warm_start_data.log",
    benchmark:
        "results/benchmarks/rules/reader_warm_start_data/reader_warm_start_data.tsv"
    conda:
        env()
    params:
        cfg=lambda w: cfg_json(warm_start_data_cfg()),
        code=code("drpipe.reader"),
    shell:
        "drpipe reader warm-start --squad {input.squad:q} --corpus {input.corpus:q}"
        " --questions {output.questions:q} --passages {output.passages:q}"
        " --run {output.run:q} --gold {output.gold:q} --report {output.report:q}"
        " --cfg {params.cfg:q} 2> {log:q}"


rule reader_warm_start:
    input:
        run="results/reader_warm_start/run.parquet",
        questions="results/reader_warm_start/questions.parquet",
        passages="results/reader_warm_start/passages.parquet",
        gold="results/reader_warm_start/gold.jsonl.gz",
        models=model_inputs(RC["init"]),
    output:
        reader=directory(WARM_START_READER),
        report=f"{WARM_START_READER}.report.json",
    log:
        "results/logs/reader_warm_start/reader_warm_start.log",
    benchmark:
        "results/benchmarks/rules/reader_warm_start/reader_warm_start.tsv"
    conda:
        env(gpu=True)
    threads: THREADS_ALONE
    resources:
        gpu=lambda w: gpus(1),
    params:
        cfg=lambda w: cfg_json(warm_start_train_cfg()),
        opts=runtime(lambda w: options({"checkpoint_every": RC["checkpoint_every"]})),
        code=code("drpipe.reader"),
    shell:
        "drpipe reader train --run {input.run:q} --questions {input.questions:q}"
        " --passages {input.passages:q} --gold {input.gold:q} --out {output.reader:q}"
        " --report {output.report:q} --cfg {params.cfg:q} {params.opts}"
        " --threads {threads} --nproc {resources.gpu} 2> {log:q}"


# Table 4's k view (issue 43; reader.k_view): per row, EM at several k beside the chosen k and
# the selection head's accuracy (is the selected passage answer-bearing?) against retrieval
# order, on reader.k_view.sample of Table 4's questions, for the rows of reader.k_view.runs
# (test) and the run that chose their k (held-out). Nothing is chosen here. Where Table 4's
# scores reach the view's depth (paper scale: k up to 100) they are read as they are; else
# the view's deeper scores reuse every pair Table 4 scored (--cache).
rule reader_k_view_score:
    input:
        reader=lambda w: reader_dir(w.rrun, w.rts, w.dataset),
        questions="results/qa/{dataset}/{split}.parquet",
        passages="results/corpus/passages.parquet",
        runs=lambda w: [
            f"results/runs/{r}/{ts}/{w.dataset}-{w.split}.parquet"
            for r, ts in k_view_scored_rows(w.rrun, w.rts, w.dataset, w.split)
        ],
        cache="results/reader_scores/{rrun}/{rts}/{dataset}-{split}.parquet",
    output:
        scores=f"{K_VIEW}/{{rrun}}/{{rts}}/{{dataset}}-{{split}}.scores.parquet",
        report=f"{K_VIEW}/{{rrun}}/{{rts}}/{{dataset}}-{{split}}.scores.report.json",
    log:
        "results/logs/reader_k_view_score/{rrun}/{rts}/{dataset}-{split}.log",
    benchmark:
        "results/benchmarks/rules/reader_k_view_score/{rrun}/{rts}/{dataset}-{split}.tsv"
    wildcard_constraints:
        rrun=ANY_RUN,
        rts="[A-Za-z0-9_]+",
    conda:
        env(gpu=True)
    threads: C["threads"]
    resources:
        gpu=lambda w: gpus(1),
    params:
        reader=lambda w, input: input.reader[0] if input.reader else RC["released"],
        cfg=lambda w: cfg_json(
            {"depth": k_view_depth(), **precision_cfg(RC), **k_view_sample(w.split)}
        ),
        opts=runtime(lambda w: options({"eval_batch_size": RC["eval_batch_size"]})),
        code=code("drpipe.reader"),
    shell:
        "drpipe reader score --reader {params.reader:q} --questions {input.questions:q}"
        " --passages {input.passages:q} --runs {input.runs:q} --cache {input.cache:q}"
        " --out {output.scores:q} --report {output.report:q} --cfg {params.cfg:q}"
        " {params.opts} --threads {threads} 2> {log:q}"


rule reader_k_view:
    input:
        scores=lambda w: k_view_scores(w.run, w.train_set, w.dataset, w.split),
        run="results/runs/{run}/{train_set}/{dataset}-{split}.parquet",
        questions="results/qa/{dataset}/{split}.parquet",
        passages="results/corpus/passages.parquet",
        k=lambda w: reader_k_file(w.run, w.train_set, w.dataset),
    output:
        f"{K_VIEW}/{{run}}/{{train_set}}/{{dataset}}-{{split}}.json",
    log:
        "results/logs/reader_k_view/{run}/{train_set}/{dataset}-{split}.log",
    benchmark:
        "results/benchmarks/rules/reader_k_view/{run}/{train_set}/{dataset}-{split}.tsv"
    wildcard_constraints:
        run=ANY_RUN,
    conda:
        env()
    params:
        cfg=lambda w: cfg_json(
            {
                "ks": RC["k_view"]["ks"],
                "method": w.run,
                "train_set": w.train_set,
                "dataset": w.dataset,
                "split": w.split,
                "reader": "/".join(reader_of(w.run, w.train_set)),
                **k_view_sample(w.split),
            }
        ),
        code=code("drpipe.reader"),
    shell:
        "drpipe reader k-view --scores {input.scores:q} --run {input.run:q}"
        " --questions {input.questions:q} --passages {input.passages:q}"
        " --k-from {input.k:q} --out {output:q} --cfg {params.cfg:q} 2> {log:q}"


# Table 4's k view as a table beside results/table4.csv (not part of `all`:
# `make run TARGET=results/table4-k.csv`).
rule table4_k:
    input:
        table4_k_inputs(),
    output:
        csv=report(
            "results/table4-k.csv",
            caption="../report/table_csv.rst",
            category="Tables",
            subcategory="CSV",
        ),
        md="results/table4-k.md",
    log:
        "results/logs/tables/table4-k.log",
    benchmark:
        "results/benchmarks/rules/tables/table4-k.tsv"
    conda:
        env()
    params:
        cfg=cfg_json(
            {
                **SCALE_CFG,
                "row_map": table4_row_map(),
                "train_sets": C["train_sets"],
                "setup": table4_k_setup() if RC.get("k_view") else {},
            }
        ),
        code=table4_code(),
    shell:
        "drpipe tables table4-k --views {input:q} --out {output.csv:q} --md {output.md:q}"
        " --cfg {params.cfg:q} 2> {log:q}"
