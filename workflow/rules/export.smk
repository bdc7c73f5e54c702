# Every run in the field's formats, beside its Parquet: a TREC run file (the default target
# makes one per Table 2 row; BM25's own rule writes its TREC file), and DPR's and pyserini's
# retrieval JSON (`snakemake --cores all results/runs/exports.txt`, or any one file as a target).


rule export_trec:
    input:
        run="results/runs/{run}/{train_set}/{dataset}-{split}.parquet",
    output:
        "results/runs/{run}/{train_set}/{dataset}-{split}.trec",
    log:
        "results/logs/export_trec/{run}/{train_set}/{dataset}-{split}.log",
    benchmark:
        "results/benchmarks/rules/export_trec/{run}/{train_set}/{dataset}-{split}.tsv"
    wildcard_constraints:
        run="(?!bm25/)[^/]+",
    conda:
        env()
    params:
        cfg=lambda w: cfg_json({"tag": run_tag(w.run, w.train_set)}),
        code=code("drpipe.runfiles"),
    shell:
        "drpipe runs trec --run {input.run:q} --out {output:q} --cfg {params.cfg:q} 2> {log:q}"


rule export_json:
    input:
        run="results/runs/{run}/{train_set}/{dataset}-{split}.parquet",
        questions="results/qa/{dataset}/{split}.parquet",
        passages="results/corpus/passages.parquet",
    output:
        dpr="results/runs/{run}/{train_set}/{dataset}-{split}.dpr.json",
        pyserini="results/runs/{run}/{train_set}/{dataset}-{split}.pyserini.json",
    log:
        "results/logs/export_json/{run}/{train_set}/{dataset}-{split}.log",
    benchmark:
        "results/benchmarks/rules/export_json/{run}/{train_set}/{dataset}-{split}.tsv"
    conda:
        env()
    params:
        cfg=cfg_json({}),
        code=code("drpipe.runfiles"),
    shell:
        "drpipe runs export --run {input.run:q} --questions {input.questions:q}"
        " --passages {input.passages:q} --dpr-json {output.dpr:q}"
        " --pyserini-json {output.pyserini:q} --cfg {params.cfg:q} 2> {log:q}"


# Every Table 2 row's run in every format, listed one file a line in a manifest:
# `snakemake --cores all results/runs/exports.txt`.
rule exports:
    input:
        export_files(("trec", "dpr.json", "pyserini.json")),
    output:
        "results/runs/exports.txt",
    log:
        "results/logs/export/exports.log",
    benchmark:
        "results/benchmarks/rules/export/exports.tsv"
    conda:
        env()
    shell:
        "printf '%s\\n' {input:q} > {output:q} 2> {log:q}"


# A run made elsewhere (config external_runs) as our run Parquet: its ids mapped onto our
# passages, every problem an error naming the file, the line and the id (docs/runs.md).
rule import_run:
    input:
        file=lambda w: external_file(f"ext.{w.name}"),
        questions="results/qa/{dataset}/{split}.parquet",
        passages="results/corpus/passages.parquet",
    output:
        run="results/runs/ext.{name}/none/{dataset}-{split}.parquet",
        report="results/runs/ext.{name}/none/{dataset}-{split}.report.json",
    log:
        "results/logs/import_run/ext.{name}/{dataset}-{split}.log",
    benchmark:
        "results/benchmarks/rules/import_run/ext.{name}/{dataset}-{split}.tsv"
    wildcard_constraints:
        name=EXTERNAL_RUN.removeprefix("ext[.]"),
    conda:
        env()
    params:
        cfg=lambda w: cfg_json(external_cfg(f"ext.{w.name}")),
        code=code("drpipe.runfiles"),
    shell:
        "drpipe runs import --in {input.file:q} --questions {input.questions:q}"
        " --passages {input.passages:q} --out {output.run:q} --report {output.report:q}"
        " --cfg {params.cfg:q} 2> {log:q}"
