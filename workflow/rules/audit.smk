# Claims with paired tests, the audit of the results folder, and the pages Snakemake's report
# shows (`snakemake --report results/report.html`; `make audit` builds all of it).
from drpipe.claims import claim_inputs, resolve_claims

# The papers' claims and the config's own_claims resolved against this config: runs to compare,
# or the reason a claim cannot be tested (a method not registered, a variant not configured).
CLAIMS = resolve_claims(C)


report: "../report/workflow.rst"


rule claims:
    input:
        claim_inputs(CLAIMS),
        # The run's commit, scale and config hash go into every row.
        provenance="results/provenance.json",
    output:
        report(
            "results/claims.csv",
            caption="../report/claims.rst",
            category="Claims",
            subcategory="CSV",
        ),
    log:
        "results/logs/claims/claims.log",
    benchmark:
        "results/benchmarks/rules/claims/claims.tsv"
    conda:
        env()
    params:
        cfg=cfg_json({"resolved": CLAIMS, "own_claims": C.get("own_claims") or []}),
        code=code("drpipe.claims"),
    shell:
        "drpipe claims --results results --out {output:q} --cfg {params.cfg:q} 2> {log:q}"


rule claims_html:
    input:
        "results/claims.csv",
    output:
        report(
            "results/report/claims.html",
            caption="../report/claims.rst",
            category="Claims",
            subcategory="Page",
        ),
    log:
        "results/logs/report/claims.log",
    benchmark:
        "results/benchmarks/rules/report/claims.tsv"
    conda:
        env()
    params:
        code=code("drpipe.audit"),
    shell:
        "drpipe table-html --csv {input:q} --out {output:q} --title Claims 2> {log:q}"


rule table_html:
    input:
        "results/{table}.csv",
    output:
        report(
            "results/report/{table}.html",
            caption="../report/table.rst",
            category="Tables",
            subcategory="Pages",
        ),
    log:
        "results/logs/report/{table}.log",
    benchmark:
        "results/benchmarks/rules/report/{table}.tsv"
    wildcard_constraints:
        table="(?!claims$)(?!figures/)[A-Za-z0-9_]+(?:/[A-Za-z0-9_]+)?",
    conda:
        env()
    params:
        code=code("drpipe.audit"),
    shell:
        "drpipe table-html --csv {input:q} --out {output:q} 2> {log:q}"


rule figure_html:
    input:
        csv="results/{figure}.csv",
        png="results/{figure}.png",
    output:
        report(
            "results/report/figures/{figure}.html",
            caption="../report/figure.rst",
            category="Figures",
            subcategory="Pages with data",
        ),
    log:
        "results/logs/report/figures/{figure}.log",
    benchmark:
        "results/benchmarks/rules/report/figures/{figure}.tsv"
    wildcard_constraints:
        figure="[A-Za-z0-9_-]+(?:/[A-Za-z0-9_-]+)?",
    conda:
        env()
    params:
        code=code("drpipe.audit"),
    shell:
        "drpipe table-html --csv {input.csv:q} --png {input.png:q} --out {output:q} 2> {log:q}"


# The audit as of the end of the run (lineage, checksums, environment, runtime per rule). What
# has gone stale since is what `make audit` adds: it runs `drpipe audit` outside the workflow,
# so that a changed config or code is reported instead of rebuilt.
rule audit:
    input:
        tables="results/table2.csv",
        provenance="results/provenance.json",
        claims="results/claims.csv",
    output:
        json="results/audit/audit.json",
        md="results/audit/audit.md",
        html=report(
            "results/audit/audit.html",
            caption="../report/audit.rst",
            category="Audit",
        ),
    log:
        "results/logs/audit/audit.log",
    benchmark:
        "results/benchmarks/rules/audit/audit.tsv"
    conda:
        env()
    params:
        code=code("drpipe.audit"),
    shell:
        "drpipe audit results --out results/audit --no-staleness 2> {log:q}"
