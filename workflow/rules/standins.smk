# Stand-in inputs (the rehearsal scale): a file of a paper input's format made from real files
# (`drpipe standin`), put where the fetch rule would put that input, with a record beside it;
# and stand-in models for the hub ids the config names. Nothing downstream knows the
# difference: the paper's rules read them as they read the real inputs.


rule standin:
    input:
        unpack(lambda w: standin_inputs(STANDIN_SOURCES[w.source])),
    output:
        data="results/data/{source}/{filename}",
        record="results/data/records/{source}/{filename}.json",
    log:
        "results/logs/standin/{source}/{filename}.log",
    benchmark:
        "results/benchmarks/rules/standin/{source}/{filename}.tsv"
    wildcard_constraints:
        source="|".join(STANDIN_SOURCES) or "(?!)",
        filename="[^/]+",
    conda:
        env()
    params:
        kind=lambda w: STANDIN_SOURCES[w.source]["kind"],
        inputs=lambda w, input: standin_args(input),
        cfg=lambda w: cfg_json(STANDIN_SOURCES[w.source].get("cfg") or {}),
        code=code("drpipe.standins"),
    shell:
        "drpipe standin --kind {params.kind} --inputs {params.inputs} --out {output.data:q}"
        " --record {output.record:q} --cfg {params.cfg:q} 2> {log:q}"


rule standin_model:
    input:
        unpack(lambda w: standin_inputs(STANDIN_MODELS[model_id(w.model)])),
    output:
        data=directory("results/data/models/{model}"),
        record="results/data/records/models/{model}.json",
    log:
        "results/logs/standin_model/{model}.log",
    benchmark:
        "results/benchmarks/rules/standin_model/{model}.tsv"
    wildcard_constraints:
        model="|".join(model_slug(m).replace(".", "[.]") for m in STANDIN_MODELS)
        or "(?!)",
    conda:
        env()
    params:
        kind=lambda w: STANDIN_MODELS[model_id(w.model)]["kind"],
        inputs=lambda w, input: standin_args(input),
        cfg=lambda w: cfg_json(STANDIN_MODELS[model_id(w.model)].get("cfg") or {}),
        code=code("drpipe.standins"),
    shell:
        "drpipe standin --kind {params.kind} --inputs {params.inputs} --out {output.data:q}"
        " --record {output.record:q} --cfg {params.cfg:q} 2> {log:q}"
