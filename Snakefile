# drpipe: Wikipedia dump -> passages -> BM25 / dense retrievers -> the papers' tables.
# Usage: snakemake --cores all results/table2.csv   (scale from config.yaml; or `make run`)
#        snakemake --profile profiles/slurm --config scale=paper results/table2.csv


configfile: workflow.source_path("config.yaml")


include: "workflow/rules/common.smk"


wildcard_constraints:
    dataset="[A-Za-z0-9_]+",
    split="[A-Za-z0-9_]+",
    train_set="[A-Za-z0-9_]+",
    shard="[0-9]+",


include: "workflow/rules/download.smk"
include: "workflow/rules/standins.smk"
include: "workflow/rules/corpus.smk"
include: "workflow/rules/qa.smk"
include: "workflow/rules/bm25.smk"
include: "workflow/rules/mining.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/encode.smk"
include: "workflow/rules/index.smk"
include: "workflow/rules/retrieve.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/export.smk"
include: "workflow/rules/subsets.smk"
include: "workflow/rules/transfer.smk"


# Each registered paper's rules (workflow/drpipe/papers/<paper>/rules.smk; their planning is
# the paper's plan.py), before the shared Table 2: papers add their rows to it.
for _paper in papers():
    if _paper.file("rules.smk"):

        include: _paper.file("rules.smk")


include: "workflow/rules/reader.smk"
include: "workflow/rules/tables.smk"
include: "workflow/rules/audit.smk"
include: "workflow/rules/seeds.smk"


# On a cluster, a restarted Snakemake does not know the jobs its killed predecessor left in the
# queue: it stops rather than submit them again beside themselves (drpipe.cluster_check).
onstart:
    if getattr(workflow.executor_plugin, "name", None) == "slurm":
        refuse_if_earlier_jobs(Path.cwd())


rule all:
    default_target: True
    input:
        "results/table2.csv",
        "results/table2.md",
        "results/table2-topk.png",
        export_files(),
        "results/provenance.json",
        "results/corpus/sentences.parquet",
