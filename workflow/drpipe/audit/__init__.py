"""Audit a results folder: where every table cell came from, what is stale, how two runs differ.

Everything is read from what the run left behind, nothing is re-run:

- **Snakemake's metadata** (``.snakemake/metadata/`` next to ``results/``: one JSON record per
  output file, named by the base64 of its path) gives each job's rule, inputs, shell command
  (with the ``--cfg`` config slice), params (with the ``code=`` hash of the job's import closure)
  and the checksums of its small inputs. Walking inputs to the jobs that wrote them gives the
  lineage of any file: metrics -> run -> model and its training report -> training examples ->
  BM25 run and index -> passages -> fetched inputs with their sha256.
- **Benchmark files** (``results/benchmarks/rules/<rule>/<name>.tsv``, named like the job's log
  ``results/logs/<rule>/<name>.log``) give wall time and peak memory per job.
- **Staleness** is what ``snakemake -n`` would rerun now, and why (config keys that changed,
  code hashes, updated inputs), per rule; fetched inputs and small recorded inputs are hashed
  again and compared with their recorded checksums.
- **Against another folder**: every table cell and every file is identical, equivalent (equal
  once recorded timings and host names are set aside), equal within a stated tolerance, or
  different; for a difference, the first step where the two lineages diverge (config, code,
  inputs, environment) and the first step whose outputs differ.

``drpipe audit RESULTS [--against OTHER]`` writes ``audit.json``, ``audit.md`` and
``audit.html``; with ``--claims`` it also tests the claims (``drpipe.claims``), with
``--tables-html`` it renders each table for the report, with ``--report`` it builds Snakemake's
HTML report.

Modules, by job: ``metadata`` (Snakemake's records as jobs), ``lineage`` (the recorded DAG),
``timings`` (benchmark files), ``steps`` (what one step shows), ``checksums`` (fetched inputs),
``cells`` (each table cell's metrics file), ``staleness`` (the dry run), ``filediff`` (two
versions of one file or table), ``compare`` (two results folders), ``record`` (the audit record),
``render`` (Markdown and HTML), ``report`` (Snakemake's report), ``cli`` (the commands).
"""

from drpipe.audit.cli import register

__all__ = ["register"]
