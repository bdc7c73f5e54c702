"""``drpipe`` command line: one subcommand per workflow step; Snakemake rules call these."""

from __future__ import annotations

import argparse
import importlib
import sys

from drpipe import __version__
from drpipe.cliutil import merge_threads
from drpipe.errors import InputError
from drpipe.io import setup_logging
from drpipe.papers import papers

# Each module defines ``register(subparsers)`` adding its subcommands, each with
# ``set_defaults(func=...)``. Imports of heavy libraries (torch, faiss) stay inside handlers.
# Each paper's commands come from the registry (drpipe.papers), after these.
MODULES = [
    "drpipe.download",
    "drpipe.standins",
    "drpipe.corpus.cli",
    "drpipe.qa.cli",
    "drpipe.qa.mine_cli",
    "drpipe.bm25",
    "drpipe.training",
    "drpipe.released",
    "drpipe.encode",
    "drpipe.index",
    "drpipe.retrieve",
    "drpipe.hybrid",
    "drpipe.evaluate",
    "drpipe.runfiles",
    "drpipe.beir",
    "drpipe.transfer",
    "drpipe.reader",
    "drpipe.subsets",
    "drpipe.papers.table2",
    "drpipe.papers.table4",
    "drpipe.aopt",
    "drpipe.provenance",
    "drpipe.summary",
    "drpipe.claims",
    "drpipe.claims.agreement",
    "drpipe.audit",
    "drpipe.estimate",
    "drpipe.cluster_check",
    "drpipe.config_show",
    "drpipe.verify",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="drpipe", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in MODULES + [p.commands for p in papers() if p.commands]:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    merge_threads(args)
    setup_logging(args.verbose)
    try:
        result = args.func(args)
    except InputError as exc:
        print(f"drpipe {args.command}: bad input: {exc}", file=sys.stderr)
        return 2
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
