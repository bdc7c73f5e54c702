# Questions: one table per dataset and split (qid, question, answers, match mode).


rule qa_load:
    input:
        src=lambda w: source_file(qa_split(w.dataset, w.split)["source"]),
        docs=lambda w: (
            [f"results/corpus/docs/{d['name']}.parquet" for d in DOCS]
            if qa_split(w.dataset, w.split).get("restrict_to_corpus")
            else []
        ),
        exclude=lambda w: (
            [
                f"results/qa/{w.dataset}/{qa_split(w.dataset, w.split)['exclude_split']}.parquet"
            ]
            if qa_split(w.dataset, w.split).get("exclude_split")
            else []
        ),
    output:
        questions="results/qa/{dataset}/{split}.parquet",
        report="results/qa/{dataset}/{split}.report.json",
    log:
        "results/logs/qa_load/{dataset}-{split}.log",
    benchmark:
        "results/benchmarks/rules/qa_load/{dataset}-{split}.tsv"
    conda:
        "../../envs/cpu.yaml"
    params:
        format=lambda w: qa_format(w.dataset, w.split),
        restrict=lambda w, input: (
            ("--restrict-docs " + " ".join(input.docs)) if input.docs else ""
        ),
        exclude=lambda w, input: (
            ("--exclude-questions " + " ".join(input.exclude)) if input.exclude else ""
        ),
        cfg=lambda w: cfg_json(
            {
                "sample": qa_split(w.dataset, w.split).get("sample"),
                "match": qa_split(w.dataset, w.split).get("match", "string"),
                "allow_empty": qa_split(w.dataset, w.split).get("allow_empty", False),
                "seed": C["seed"],
            }
        ),
        code=code("drpipe.qa.cli"),
    shell:
        "drpipe qa load --format {params.format} --input {input.src:q} --dataset {wildcards.dataset:q}"
        " --split {wildcards.split:q} --out {output.questions:q} --report {output.report:q}"
        " {params.restrict} {params.exclude} --cfg {params.cfg:q} 2> {log:q}"
