"""The audit record of one results folder: its tables' cells traced to their metrics files and
back to the fetched inputs, the steps on the way, checksums, runtime, environment, and
optionally staleness and the comparison with another folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from drpipe.audit.cells import table_cells, table_jobs
from drpipe.audit.checksums import checksum_mismatches, input_records
from drpipe.audit.compare import compare_runs, counts
from drpipe.audit.filediff import TOLERANCE
from drpipe.audit.lineage import Lineage
from drpipe.audit.staleness import staleness
from drpipe.audit.steps import run_environment, step_summary
from drpipe.audit.timings import runtime_by_rule
from drpipe.environment import environment


def audit(
    results: Path,
    against: Path | None = None,
    staleness_args: list[str] | None = None,
    tol: dict | None = None,
    label: str | None = None,
) -> dict[str, Any]:
    """The audit record of one results folder (``staleness_args`` None: no dry run)."""
    lineage = Lineage(results.parent)
    if not lineage.jobs and not lineage.vanished:
        raise SystemExit(
            f"error: no Snakemake metadata under {results.parent / '.snakemake' / 'metadata'}: "
            "audit a results folder inside the working directory Snakemake ran in"
        )
    if not any(Path(o).parts[0] == results.name for o in lineage.records):
        raise SystemExit(
            f"error: {results}: no Snakemake record names a file in this folder (records of "
            f"existing files: {len(lineage.records)}, of files gone: {len(lineage.vanished)}); "
            "a moved or renamed results folder keeps its records under its old name: audit the "
            "folder Snakemake wrote, and compare another one with --against"
        )
    tables = {}
    cells = []
    for job, table in table_jobs(lineage):
        tables[table] = {"rule": job.rule, "step": job.id}
        cells += table_cells(lineage, job, table)
    metric_files = sorted({c["metrics"] for c in cells if c["metrics"]})
    chains = {m: [j.id for j in reversed(lineage.upstream([m]))] for m in metric_files}
    for table, info in tables.items():
        info["lineage"] = [j.id for j in reversed(lineage.upstream([table]))]
    used = {s for chain in chains.values() for s in chain}
    used |= {s for info in tables.values() for s in info["lineage"]}
    steps = {jid: step_summary(lineage, lineage.jobs[jid]) for jid in sorted(used)}
    inputs = input_records(lineage)
    record: dict[str, Any] = {
        "results": label or str(results),
        "generated": "drpipe audit",
        "tables": tables,
        "cells": cells,
        "lineage": chains,
        "steps": steps,
        "inputs": inputs,
        "checksum_mismatches": checksum_mismatches(lineage, inputs),
        "runtime_by_rule": runtime_by_rule(lineage),
        "environment": {
            "recorded": run_environment(results),
            "per_step": sorted(j for j, s in steps.items() if s["environment"]),
            "audit_machine": environment(("cpu", "torch", "faiss", "blas")),
        },
        "tolerance": tol or TOLERANCE,
        "records_without_file": lineage.vanished,
    }
    claims = results / "claims.csv"
    if claims.is_file():
        frame = pd.read_csv(claims)
        record["claims"] = {
            "file": str(claims),
            "verdicts": counts(frame["verdict"].astype(str)),
        }
    if staleness_args is not None:
        record["staleness"] = staleness(lineage, staleness_args)
    if against is not None:
        record["against"] = compare_runs(results, against, tol)
    return record
