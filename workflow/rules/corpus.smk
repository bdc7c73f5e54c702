# Corpus: documents (dump cleaning / SQuAD articles) -> 100-word passages -> sentences.


rule documents:
    input:
        lambda w: source_file(doc_entry(w.docset)["source"]),
    output:
        docs="results/corpus/docs/{docset}.parquet",
        report="results/corpus/docs/{docset}.report.json",
    log:
        "results/logs/documents/{docset}.log",
    benchmark:
        "results/benchmarks/rules/documents/{docset}.tsv"
    wildcard_constraints:
        docset="[A-Za-z0-9_]+",
    conda:
        "../../envs/cpu.yaml"
    threads:
        lambda w: (
            C["corpus"]["wiki_processes"]
            if doc_entry(w.docset)["kind"] == "wiki_dump"
            else 1
        )
    params:
        command=lambda w: DOC_COMMAND[doc_entry(w.docset)["kind"]][0],
        flag=lambda w: DOC_COMMAND[doc_entry(w.docset)["kind"]][1],
        cfg=lambda w: cfg_json(doc_cfg(w.docset)),
        code=code("drpipe.corpus.cli"),
    shell:
        "drpipe corpus {params.command:q} {params.flag:q} {input:q} --out {output.docs:q}"
        " --report {output.report:q} --cfg {params.cfg:q} --threads {threads:q} 2> {log:q}"


if C["corpus"]["passages_tsv"]:

    rule passages:
        input:
            source_file(C["corpus"]["passages_tsv"]),
        output:
            passages="results/corpus/passages.parquet",
            report="results/corpus/passages.report.json",
        log:
            "results/logs/passages/passages.log",
        benchmark:
            "results/benchmarks/rules/passages/passages.tsv"
        conda:
            "../../envs/cpu.yaml"
        params:
            cfg=cfg_json({"subset": C["corpus"]["subset"]}),
            code=code("drpipe.corpus.cli"),
        shell:
            "drpipe corpus dpr-tsv --tsv {input:q} --out {output.passages:q}"
            " --report {output.report:q} --cfg {params.cfg:q} 2> {log:q}"

else:

    rule passages:
        input:
            [f"results/corpus/docs/{d['name']}.parquet" for d in DOCS],
        output:
            passages="results/corpus/passages.parquet",
            report="results/corpus/passages.report.json",
        log:
            "results/logs/passages/passages.log",
        benchmark:
            "results/benchmarks/rules/passages/passages.tsv"
        conda:
            "../../envs/cpu.yaml"
        params:
            names=[d["name"] for d in DOCS],
            cfg=cfg_json(
                {"words": C["corpus"]["words"], "subset": C["corpus"]["subset"]}
            ),
            code=code("drpipe.corpus.cli"),
        shell:
            "drpipe corpus chunk --docs {input:q} --sources {params.names:q}"
            " --out {output.passages:q} --report {output.report:q} --cfg {params.cfg:q} 2> {log:q}"


rule sentences:
    input:
        "results/corpus/passages.parquet",
    output:
        sentences="results/corpus/sentences.parquet",
        report="results/corpus/sentences.report.json",
    log:
        "results/logs/sentences/sentences.log",
    benchmark:
        "results/benchmarks/rules/sentences/sentences.tsv"
    conda:
        "../../envs/cpu.yaml"
    params:
        cfg=cfg_json(result_slice("corpus", "sentences")),
        opts=runtime(lambda w: runtime_opts("corpus", "sentences")),
        code=code("drpipe.corpus.cli"),
    shell:
        "drpipe corpus sentences --passages {input:q} --out {output.sentences:q}"
        " --report {output.report:q} --cfg {params.cfg:q} {params.opts} 2> {log:q}"


rule export_tsv:
    input:
        "results/corpus/passages.parquet",
    output:
        "results/corpus/psgs_w100.tsv",
    log:
        "results/logs/export_tsv/export_tsv.log",
    benchmark:
        "results/benchmarks/rules/export_tsv/export_tsv.tsv"
    conda:
        "../../envs/cpu.yaml"
    params:
        code=code("drpipe.corpus.cli"),
    shell:
        "drpipe corpus export-tsv --passages {input:q} --out {output:q} 2> {log:q}"
