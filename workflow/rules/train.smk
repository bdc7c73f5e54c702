# Training: one shared loop; the method (and variant) decides batches and loss.


rule train:
    input:
        lambda w: train_set_files(w.train_set),
    output:
        model=directory("results/models/{method}/{train_set}"),
        report="results/models/{method}/{train_set}.report.json",
    log:
        "results/logs/train/{method}/{train_set}.log",
    benchmark:
        "results/benchmarks/rules/train/{method}/{train_set}.tsv"
    wildcard_constraints:
        method="dpr(\\.[A-Za-z0-9_]+)?",
    conda:
        "../../envs/cpu.yaml"
    threads: C["threads"]
    resources:
        gpu=lambda w: 1 if SCALE == "paper" else 0,
    params:
        base=lambda w: w.method.split(".")[0],
        cfg=lambda w: cfg_json(method_config(C, w.method)),
        code=code("encoders.py", "methods", "training.py"),
    shell:
        "drpipe train --method {params.base} --train {input:q} --out {output.model:q}"
        " --report {output.report:q} --cfg {params.cfg:q} --threads {threads}"
        " --nproc {resources.gpu} 2> {log:q}"


rule init_model:
    output:
        directory("results/models/init/none"),
    log:
        "results/logs/init_model/init.log",
    benchmark:
        "results/benchmarks/rules/init_model/init.tsv"
    conda:
        "../../envs/cpu.yaml"
    params:
        cfg=cfg_json(C["encoder"]),
        code=code("encoders.py", "training.py"),
    shell:
        "drpipe init-model --out {output:q} --cfg {params.cfg:q} 2> {log:q}"
