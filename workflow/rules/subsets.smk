# Corpus subsets (DCSR Table 7; any method): the same checkpoints evaluated on part of the
# corpus. Only the corpus, encoding, indexing and retrieval rerun (with the usual commands);
# question vectors are the main ones. A subset name is p<percent> or n<count>, optionally
# -gold-<dataset>-<split> (that split's gold passages always kept): see
# `drpipe subset-corpus --help`. Everything lives under results/subsets/<subset>/.


rule corpus_subset:
    input:
        unpack(lambda w: subset_question_input(w.subset)),
        passages="results/corpus/passages.parquet",
        sentences="results/corpus/sentences.parquet",
    output:
        passages="results/subsets/{subset}/corpus/passages.parquet",
        sentences="results/subsets/{subset}/corpus/sentences.parquet",
        report="results/subsets/{subset}/corpus/report.json",
    log:
        "results/logs/corpus_subset/{subset}.log",
    benchmark:
        "results/benchmarks/rules/corpus_subset/{subset}.tsv"
    wildcard_constraints:
        subset=SUBSET,
    conda:
        env()
    params:
        questions=lambda w, input: (
            f"--questions {input.questions}" if "questions" in input.keys() else ""
        ),
        code=code("drpipe.subsets"),
    shell:
        "drpipe subset-corpus --subset {wildcards.subset:q} --passages {input.passages:q}"
        " --sentences {input.sentences:q} {params.questions}"
        " --out-passages {output.passages:q} --out-sentences {output.sentences:q}"
        " --report {output.report:q} 2> {log:q}"


use rule encode as subset_encode with:
    input:
        unpack(lambda w: {"model": f"results/models/{w.run}/{w.train_set}"}),
        unpack(lambda w: subset_corpus_inputs(w.subset, w.run)),
    output:
        vectors="results/subsets/{subset}/embeddings/{run}/{train_set}/shard-{shard}.npy",
        ids="results/subsets/{subset}/embeddings/{run}/{train_set}/shard-{shard}.ids.npy",
        report="results/subsets/{subset}/embeddings/{run}/{train_set}/shard-{shard}.report.json",
    log:
        "results/logs/subset_encode/{subset}/{run}/{train_set}/shard-{shard}.log",
    benchmark:
        "results/benchmarks/rules/subset_encode/{subset}/{run}/{train_set}/shard-{shard}.tsv"
    wildcard_constraints:
        subset=SUBSET,
        run=DENSE,
    params:
        # The subset's own passages, as text (token ids are kept for the whole corpus only).
        source=lambda w, input: text_source(input),


use rule build_index as subset_index with:
    input:
        lambda w: subset_shard_files(w.subset, w.run, w.train_set),
    output:
        index="results/subsets/{subset}/index/{run}/{train_set}/{itype}.faiss",
        ids="results/subsets/{subset}/index/{run}/{train_set}/{itype}.faiss.ids.npy",
        meta="results/subsets/{subset}/index/{run}/{train_set}/{itype}.faiss.json",
    log:
        "results/logs/subset_index/{subset}/{run}/{train_set}/{itype}.log",
    benchmark:
        "results/benchmarks/rules/subset_index/{subset}/{run}/{train_set}/{itype}.tsv"
    wildcard_constraints:
        subset=SUBSET,
        run=DENSE,
        itype="flat|hnsw|ivfpq",


use rule retrieve as subset_retrieve with:
    input:
        model="results/models/{run}/{train_set}",
        queries=lambda w: qvec_file(w.run, w.train_set, w.dataset, w.split),
        index=lambda w: (
            f"{subset_dir(w.subset)}/index/{w.run}/{w.train_set}/{index_type(w.run)}.faiss"
        ),
    output:
        run="results/subsets/{subset}/runs/{run}/{train_set}/{dataset}-{split}.parquet",
        report="results/subsets/{subset}/runs/{run}/{train_set}/{dataset}-{split}.report.json",
    log:
        "results/logs/subset_retrieve/{subset}/{run}/{train_set}/{dataset}-{split}.log",
    benchmark:
        "results/benchmarks/rules/subset_retrieve/{subset}/{run}/{train_set}/{dataset}-{split}.tsv"
    wildcard_constraints:
        subset=SUBSET,
        run=DENSE,
    resources:
        # A subset's index (at most ~1M passages) fits one GPU, whatever the full one needs.
        gpu=lambda w: gpus(min(1, index_gpus(w.run))),


use rule evaluate as subset_evaluate with:
    input:
        run="results/subsets/{subset}/runs/{run}/{train_set}/{dataset}-{split}.parquet",
        questions="results/qa/{dataset}/{split}.parquet",
        passages="results/subsets/{subset}/corpus/passages.parquet",
    output:
        metrics="results/subsets/{subset}/metrics/{run}/{train_set}/{dataset}-{split}.json",
        per_question="results/subsets/{subset}/metrics/{run}/{train_set}/{dataset}-{split}.per_question.parquet",
    log:
        "results/logs/subset_evaluate/{subset}/{run}/{train_set}/{dataset}-{split}.log",
    benchmark:
        "results/benchmarks/rules/subset_evaluate/{subset}/{run}/{train_set}/{dataset}-{split}.tsv"
    wildcard_constraints:
        subset=SUBSET,
        run=DENSE,
