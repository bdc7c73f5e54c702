# Training: one shared loop; the run's method (and variant) decides batches and loss.


rule train:
    input:
        unpack(lambda w: train_corpus(w.run)),
        train=lambda w: train_set_files(w.train_set),
        val=lambda w: val_set_files(w.train_set),
        init=lambda w: init_inputs(w.run),
    output:
        model=directory("results/models/{run}/{train_set}"),
        report="results/models/{run}/{train_set}.report.json",
    log:
        "results/logs/train/{run}/{train_set}.log",
    benchmark:
        "results/benchmarks/rules/train/{run}/{train_set}.tsv"
    wildcard_constraints:
        run=TRAINED,
    # Trainings first among ready jobs: each heads the longest chain of its method (encoding,
    # retrieval, AOpt's rounds from DPR), whose jobs then fill the other cores; started late,
    # a local run's last training ran alone with a core idle for ~2 minutes.
    priority: 1
    conda:
        env(gpu=True)
    threads: C["threads"]
    resources:
        gpu=lambda w: gpus(8),
    params:
        method=lambda w: run_method(w.run),
        val=lambda w, input: ("--val " + " ".join(input.val)) if input.val else "",
        corpus=train_corpus_args,
        cfg=train_cfg,
        opts=runtime(train_run_options),
        code=lambda w: method_code(w.run, "drpipe.training"),
    shell:
        "drpipe train --method {params.method:q} --train {input.train:q} {params.val} {params.corpus}"
        " --out {output.model:q} --report {output.report:q} --cfg {params.cfg:q}"
        " {params.opts} --threads {threads} --nproc {resources.gpu} 2> {log:q}"


# The initial encoders, not fine-tuned: "init" (encoder.init) and each zero-shot entry's
# "init.<name>" (config zero_shot, with its own pooling, prefixes and title).


rule init_model:
    input:
        lambda w: init_model_inputs(w.run),
    output:
        directory("results/models/{run}/none"),
    log:
        "results/logs/init_model/{run}.log",
    benchmark:
        "results/benchmarks/rules/init_model/{run}.tsv"
    wildcard_constraints:
        run=INIT_RUNS,
    conda:
        env()
    params:
        cfg=lambda w: cfg_json(init_cfg(w.run)),
        code=code("drpipe.training"),
    shell:
        "drpipe init-model --out {output:q} --cfg {params.cfg:q} 2> {log:q}"


# DPR's released checkpoints (config `released`), evaluated without training: run
# "dpr.released" of the train set the checkpoint was trained on (the train rule makes every
# other run). Encoding, retrieval and evaluation are the generic rules'.


rule released_model:
    input:
        unpack(released_inputs),
    output:
        model=directory("results/models/dpr.released/{train_set}"),
        report="results/models/dpr.released/{train_set}.report.json",
    log:
        "results/logs/released_model/{train_set}.log",
    benchmark:
        "results/benchmarks/rules/released_model/{train_set}.tsv"
    wildcard_constraints:
        train_set="|".join(C["released"]) or "(?!)",
    conda:
        env()
    params:
        checkpoint=lambda w, input: (
            f"--checkpoint {input.checkpoint}" if "checkpoint" in input.keys() else ""
        ),
        cfg=lambda w: cfg_json(released_cfg(w.train_set)),
        code=code("drpipe.released"),
    shell:
        "drpipe released-model --out {output.model:q} {params.checkpoint}"
        " --report {output.report:q} --cfg {params.cfg:q} 2> {log:q}"
