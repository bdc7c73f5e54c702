"""``drpipe audit`` and ``drpipe table-html``."""

from __future__ import annotations

import argparse
import logging
import shlex
from collections.abc import Iterator
from pathlib import Path

from drpipe.audit.filediff import TOLERANCE
from drpipe.audit.record import audit
from drpipe.audit.render import render_csv_html, summary_lines, write_audit
from drpipe.audit.report import build_report, report_pages
from drpipe.claims import (
    evaluate_claims,
    load_claims,
    recorded_config,
    resolve_claims,
    write_claims,
)

# Named for the package, as the command's log lines were before the audit became one.
log = logging.getLogger(__package__)


def _iter_args(text: str | None) -> Iterator[str]:
    yield from shlex.split(text or "")


def _cmd_audit(args: argparse.Namespace) -> int:
    results = Path(args.results).resolve()
    if not results.is_dir():
        raise SystemExit(f"error: {results} is not a folder")
    extra = list(_iter_args(args.snakemake_args))
    if args.claims:
        config = recorded_config(results)
        defaults, claims = load_claims(config)
        resolved = resolve_claims(config, claims)
        frame = evaluate_claims(resolved, results, claims, defaults)
        write_claims(frame, args.claims)
        log.info("claims -> %s", args.claims)
    tol = dict(TOLERANCE)
    if args.rtol is not None:
        tol["rtol"] = args.rtol
    if args.atol is not None:
        tol["atol"] = args.atol
    against = Path(args.against).resolve() if args.against else None
    record = audit(results, against, None if args.no_staleness else extra, tol, args.results)
    out = Path(args.out)
    write_audit(record, out)
    for line in summary_lines(record):
        log.info("%s", line)
    if args.tables_html or args.report:
        for csv_path, page, png in report_pages(results):
            render_csv_html(csv_path, page, png=png)
        if (results / "claims.csv").is_file():
            render_csv_html(results / "claims.csv", results / "report" / "claims.html", "Claims")
    if args.report:
        build_report(results, Path(args.report), extra)
        log.info("report -> %s", args.report)
    return 0


def _cmd_html(args: argparse.Namespace) -> int:
    render_csv_html(
        Path(args.csv), Path(args.out), args.title, Path(args.png) if args.png else None
    )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("audit", help="lineage, staleness and run comparison of a results folder")
    p.add_argument("results", help="the results folder (inside the Snakemake working directory)")
    p.add_argument("--out", required=True, help="folder for audit.json, audit.md, audit.html")
    p.add_argument("--against", help="another results folder to compare with, cell by cell")
    p.add_argument("--claims", help="also test the papers' claims and write this CSV")
    p.add_argument("--tables-html", action="store_true", help="render tables to results/report/")
    p.add_argument("--report", help="also build Snakemake's HTML report at this path")
    p.add_argument("--no-staleness", action="store_true", help="skip the snakemake dry run")
    p.add_argument("--snakemake-args", default="",
                   help="arguments of the user's snakemake command (config files, --config)")  # fmt: skip
    p.add_argument("--rtol", type=float, default=None, help=f"default {TOLERANCE['rtol']}")
    p.add_argument("--atol", type=float, default=None, help=f"default {TOLERANCE['atol']}")
    p.set_defaults(func=_cmd_audit)

    p = sub.add_parser("table-html", help="render a table CSV as an HTML page (for the report)")
    p.add_argument("--csv", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--title")
    p.add_argument("--png", help="a figure's image, shown above its data")
    p.set_defaults(func=_cmd_html)
