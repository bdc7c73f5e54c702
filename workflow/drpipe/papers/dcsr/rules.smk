# DCSR's rules: its tables, Figure 4, DCSR's k and the hard-negative round (helpers in
# common.smk beside this file).


# The second training round (Tables 3 and 5): run "<method>.hard_<miner>" of a train set is
# <method> trained on negatives mined by <miner>'s checkpoint of that train set. Its output
# path also fits the generic train rule (as an unconfigured variant), so this order decides.
ruleorder: train_hard > train


wildcard_constraints:
    miner="|".join(METHODS),


# --- the second training round: hard negatives mined with a trained checkpoint


use rule mine as mine_hard with:
    input:
        questions=lambda w: f"results/qa/{w.dataset}/{miner_split(w.dataset)}.parquet",
        run=lambda w: (
            f"results/runs/{w.miner}/{w.train_set}/{w.dataset}-{miner_split(w.dataset)}.parquet"
        ),
        passages="results/corpus/passages.parquet",
    output:
        examples="results/train/{dataset}.hard_{miner}_{train_set}.jsonl.gz",
        report="results/train/{dataset}.hard_{miner}_{train_set}.report.json",
    log:
        "results/logs/mine_hard/{dataset}-{miner}-{train_set}.log",
    benchmark:
        "results/benchmarks/rules/mine_hard/{dataset}-{miner}-{train_set}.tsv"


use rule train as train_hard with:
    input:
        unpack(lambda w: train_corpus(w.run)),
        train=lambda w: [
            f"results/train/{d}.hard_{w.miner}_{w.train_set}.jsonl.gz"
            for d in C["train_sets"][w.train_set]
        ],
        val=lambda w: val_set_files(w.train_set),
    output:
        model=directory("results/models/{run}.hard_{miner}/{train_set}"),
        report="results/models/{run}.hard_{miner}/{train_set}.report.json",
    log:
        "results/logs/train/{run}.hard_{miner}/{train_set}.log",
    benchmark:
        "results/benchmarks/rules/train/{run}.hard_{miner}/{train_set}.tsv"
    wildcard_constraints:
        run="|".join(METHODS),
