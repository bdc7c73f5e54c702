# The transfer table (config transfer; docs/adding-a-collection.md): Table 2's models, BM25
# and the initial encoders scored with ir_measures on collections in BEIR's layout, with the
# usual commands on each collection's corpus (results/transfer/<collection>/). Not in the
# default target: `snakemake --cores all results/transfer.csv`. Planning: drpipe.plan.transfer.


# A collection made from SQuAD v1.1 dev: articles the corpus does not sample.
rule transfer_build:
    input:
        squad=lambda w: transfer_build_source(w.collection),
    output:
        corpus="results/transfer/{collection}/beir/corpus.jsonl",
        queries="results/transfer/{collection}/beir/queries.jsonl",
        qrels="results/transfer/{collection}/beir/qrels/test.tsv",
        notes="results/transfer/{collection}/beir/notes.json",
    log:
        "results/logs/transfer_build/{collection}.log",
    benchmark:
        "results/benchmarks/rules/transfer_build/{collection}.tsv"
    wildcard_constraints:
        collection=TRANSFER_BUILT,
    conda:
        env()
    params:
        out=lambda w: transfer_folder(w.collection),
        args=lambda w: options(transfer_build_args(w.collection)),
        code=code("drpipe.beir"),
    shell:
        "drpipe collection build-squad-dev --squad {input.squad:q} --out {params.out:q}"
        " {params.args} > /dev/null 2> {log:q}"


# The BEIR files checked and converted once: passages (our pids), qrels on them, the queries
# as a questions Parquet; every problem an error naming the file, the line and the id.
rule transfer_convert:
    input:
        unpack(lambda w: transfer_beir_files(w.collection)),
    output:
        passages="results/transfer/{collection}/collection/passages.parquet",
        docmap="results/transfer/{collection}/collection/docmap.parquet",
        queries="results/transfer/{collection}/collection/queries.jsonl",
        questions="results/transfer/{collection}/collection/questions.parquet",
        qrels="results/transfer/{collection}/collection/qrels.tsv",
        report="results/transfer/{collection}/collection/report.json",
    log:
        "results/logs/transfer_convert/{collection}.log",
    benchmark:
        "results/benchmarks/rules/transfer_convert/{collection}.tsv"
    wildcard_constraints:
        collection=TRANSFER_COLLECTION,
    conda:
        env()
    params:
        folder=lambda w: transfer_folder(w.collection),
        out=lambda w: transfer_converted_dir(w.collection),
        split=lambda w: transfer_split(w.collection),
        code=code("drpipe.beir"),
    shell:
        "drpipe collection convert --folder {params.folder:q} --out {params.out:q}"
        " --split {params.split:q} > /dev/null 2> {log:q}"


use rule sentences as transfer_sentences with:
    input:
        "results/transfer/{collection}/collection/passages.parquet",
    output:
        sentences="results/transfer/{collection}/collection/sentences.parquet",
        report="results/transfer/{collection}/collection/sentences.report.json",
    log:
        "results/logs/transfer_sentences/{collection}.log",
    benchmark:
        "results/benchmarks/rules/transfer_sentences/{collection}.tsv"
    wildcard_constraints:
        collection=TRANSFER_COLLECTION,


# A collection's corpus, encoded from its text (the main corpus's token shards are not its).
use rule encode as transfer_encode with:
    input:
        unpack(lambda w: {"model": f"results/models/{w.run}/{w.train_set}"}),
        unpack(lambda w: transfer_corpus_inputs(w.collection, w.run)),
    output:
        vectors="results/transfer/{collection}/embeddings/{run}/{train_set}/shard-{shard}.npy",
        ids="results/transfer/{collection}/embeddings/{run}/{train_set}/shard-{shard}.ids.npy",
        report="results/transfer/{collection}/embeddings/{run}/{train_set}/shard-{shard}.report.json",
    log:
        "results/logs/transfer_encode/{collection}/{run}/{train_set}/shard-{shard}.log",
    benchmark:
        "results/benchmarks/rules/transfer_encode/{collection}/{run}/{train_set}/shard-{shard}.tsv"
    wildcard_constraints:
        collection=TRANSFER_COLLECTION,
        run=DENSE,
    params:
        source=lambda w, input: text_source(input),


# An exact (flat) index, whatever index.type is: the numbers are the encoders'.
use rule build_index as transfer_index with:
    input:
        lambda w: transfer_shard_files(w.collection, w.run, w.train_set),
    output:
        index="results/transfer/{collection}/index/{run}/{train_set}/{itype}.faiss",
        ids="results/transfer/{collection}/index/{run}/{train_set}/{itype}.faiss.ids.npy",
        meta="results/transfer/{collection}/index/{run}/{train_set}/{itype}.faiss.json",
    log:
        "results/logs/transfer_index/{collection}/{run}/{train_set}/{itype}.log",
    benchmark:
        "results/benchmarks/rules/transfer_index/{collection}/{run}/{train_set}/{itype}.tsv"
    wildcard_constraints:
        collection=TRANSFER_COLLECTION,
        run=DENSE,
        itype="flat",


rule transfer_encode_queries:
    input:
        model="results/models/{run}/{train_set}",
        questions="results/transfer/{collection}/collection/questions.parquet",
    output:
        vectors="results/transfer/{collection}/qvecs/{run}/{train_set}.npy",
        ids="results/transfer/{collection}/qvecs/{run}/{train_set}.ids.npy",
        report="results/transfer/{collection}/qvecs/{run}/{train_set}.report.json",
    log:
        "results/logs/transfer_encode_queries/{collection}/{run}/{train_set}.log",
    benchmark:
        "results/benchmarks/rules/transfer_encode_queries/{collection}/{run}/{train_set}.tsv"
    wildcard_constraints:
        collection=TRANSFER_COLLECTION,
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


use rule retrieve as transfer_retrieve with:
    input:
        model="results/models/{run}/{train_set}",
        queries="results/transfer/{collection}/qvecs/{run}/{train_set}.npy",
        index="results/transfer/{collection}/index/{run}/{train_set}/flat.faiss",
    output:
        run="results/transfer/{collection}/runs/{run}/{train_set}.parquet",
        report="results/transfer/{collection}/runs/{run}/{train_set}.report.json",
    log:
        "results/logs/transfer_retrieve/{collection}/{run}/{train_set}.log",
    benchmark:
        "results/benchmarks/rules/transfer_retrieve/{collection}/{run}/{train_set}.tsv"
    wildcard_constraints:
        collection=TRANSFER_COLLECTION,
        run=DENSE,
    resources:
        gpu=lambda w: gpus(1),
    params:
        cfg=lambda w: cfg_json(transfer_search_cfg(w.run)),


use rule bm25_index as transfer_bm25_index with:
    input:
        "results/transfer/{collection}/collection/passages.parquet",
    output:
        directory("results/transfer/{collection}/bm25/index"),
    log:
        "results/logs/transfer_bm25_index/{collection}.log",
    benchmark:
        "results/benchmarks/rules/transfer_bm25_index/{collection}.tsv"
    wildcard_constraints:
        collection=TRANSFER_COLLECTION,


use rule bm25_search as transfer_bm25_search with:
    input:
        index="results/transfer/{collection}/bm25/index",
        questions="results/transfer/{collection}/collection/questions.parquet",
    output:
        run="results/transfer/{collection}/runs/bm25/none.parquet",
        report="results/transfer/{collection}/runs/bm25/none.report.json",
    log:
        "results/logs/transfer_bm25_search/{collection}.log",
    benchmark:
        "results/benchmarks/rules/transfer_bm25_search/{collection}.tsv"
    wildcard_constraints:
        collection=TRANSFER_COLLECTION,
    params:
        cfg=cfg_json(transfer_bm25_cfg()),


# A run scored on the collection's qrels with ir_measures (per-query values kept).
rule transfer_score:
    input:
        run="results/transfer/{collection}/runs/{run}/{train_set}.parquet",
        qrels="results/transfer/{collection}/collection/qrels.tsv",
    output:
        "results/transfer/{collection}/scores/{run}/{train_set}.json",
    log:
        "results/logs/transfer_score/{collection}/{run}/{train_set}.log",
    benchmark:
        "results/benchmarks/rules/transfer_score/{collection}/{run}/{train_set}.tsv"
    wildcard_constraints:
        collection=TRANSFER_COLLECTION,
        run=f"bm25|{DENSE}",
    conda:
        env()
    params:
        measures=TRANSFER["measures"],
        code=code("drpipe.beir"),
    shell:
        "drpipe collection score --run {input.run:q} --qrels {input.qrels:q}"
        " --measures {params.measures:q} --out {output:q} 2> {log:q}"


rule transfer_table:
    input:
        unpack(lambda w: transfer_table_inputs()),
    output:
        csv="results/transfer.csv",
        md="results/transfer.md",
    log:
        "results/logs/tables/transfer.log",
    benchmark:
        "results/benchmarks/rules/tables/transfer.tsv"
    conda:
        env()
    params:
        cfg=cfg_json(transfer_table_cfg()),
        code=code("drpipe.transfer"),
    shell:
        "drpipe transfer table --scores {input.scores:q} --reports {input.reports:q}"
        " --notes {input.notes:q} --cfg {params.cfg:q} --out {output.csv:q}"
        " --md {output.md:q} 2> {log:q}"
