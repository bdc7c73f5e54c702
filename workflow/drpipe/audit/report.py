"""Snakemake's HTML report of a results folder: its targets and the table and figure pages."""

from __future__ import annotations

import subprocess
from pathlib import Path

from drpipe.audit.cells import table_jobs
from drpipe.audit.lineage import Lineage
from drpipe.audit.staleness import snakemake_command


def report_targets(results: Path) -> list[str]:
    """Targets for ``snakemake --report``: the recorded targets plus the audit's own pages."""
    lineage = Lineage(results.parent)
    targets = [t for t in lineage.leaves() if (lineage.workdir / t).exists()]
    for extra in (
        sorted((results / "report").rglob("*.html")) if (results / "report").is_dir() else []
    ):
        targets.append(str(extra.relative_to(results.parent)))
    for name in ("claims.csv", "audit/audit.html"):
        if (results / name).is_file():
            targets.append(str(Path(results.name) / name))
    return sorted(set(targets))


def build_report(results: Path, html_out: Path, extra: list[str]) -> None:
    flags = ["--nolock", "--cores", "1", "--report", str(html_out.resolve())]
    cmd = snakemake_command(results.parent, extra, report_targets(results), flags)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"error: snakemake --report failed:\n{proc.stderr[-4000:]}")


def report_pages(results: Path) -> list[tuple[Path, Path, Path | None]]:
    """(csv, page, png) for every table or figure of a results folder (recorded jobs that write
    a CSV from metrics): figures (a PNG beside the CSV) get a page under report/figures/."""
    lineage = Lineage(results.parent)
    pages = []
    for job, table in table_jobs(lineage):
        csv_path = results.parent / table
        if not csv_path.is_file():
            continue
        rel = csv_path.relative_to(results).with_suffix("")
        png = csv_path.with_suffix(".png")
        if str(png.relative_to(results.parent)) in job.outputs and png.is_file():
            pages.append((csv_path, results / "report" / "figures" / f"{rel}.html", png))
        else:
            pages.append((csv_path, results / "report" / f"{rel}.html", None))
    return pages
