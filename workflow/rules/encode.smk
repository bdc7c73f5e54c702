# Passage vectors: one job per shard, so a failed shard reruns alone.


rule encode:
    input:
        model="results/models/{method}/{train_set}",
        passages="results/corpus/passages.parquet",
    output:
        vectors="results/embeddings/{method}/{train_set}/shard-{shard}.npy",
        ids="results/embeddings/{method}/{train_set}/shard-{shard}.ids.npy",
    log:
        "results/logs/encode/{method}/{train_set}/shard-{shard}.log",
    benchmark:
        "results/benchmarks/rules/encode/{method}/{train_set}/shard-{shard}.tsv"
    wildcard_constraints:
        method=DENSE,
    conda:
        "../../envs/cpu.yaml"
    threads: C["threads"]
    resources:
        gpu=lambda w: 1 if SCALE == "paper" else 0,
    params:
        num_shards=C["encode"]["shards"],
        cfg=cfg_json(
            {
                **C["encode"],
                "max_passage_len": method_config(C, "dpr")["max_passage_len"],
                "bf16": C["encoder"]["bf16"],
            }
        ),
        code=code("encoders.py", "encode.py", "corpus/passages.py"),
    shell:
        "drpipe encode --model {input.model:q} --passages {input.passages:q}"
        " --shard {wildcards.shard} --num-shards {params.num_shards} --out {output.vectors:q}"
        " --cfg {params.cfg:q} --threads {threads} 2> {log:q}"
