"""``drpipe`` command line: the commands a person runs, and one per workflow step (rules call
these). ``drpipe --help`` lists them by ``SECTIONS``; a command no section names is a workflow
step. Another word for a command (``hide_alias``: the older ``tables-xmoco``) is accepted and
not listed.
"""

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
    "drpipe.seeds",
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


# The sections of `drpipe --help`, in order; the commands no section names come last, under
# WORKFLOW, in the order they were registered.
SECTIONS = {
    "Inspect and check a run": ["verify", "audit", "claims", "claims-agreement"],
    "Plan a run": ["config", "estimate", "cluster-check"],
    "Evaluate and compare runs": ["evaluate", "runs", "collection", "transfer", "seeds"],
    "Tables and figures beside the papers": ["tables"],
}
WORKFLOW = "Workflow steps (called by the rules)"
DESCRIPTION = (
    "Reproduce the dense retrieval results of {papers}, and check them. "
    "`make run` runs the workflow; these are the commands behind it."
)
EPILOG = "`drpipe COMMAND --help` gives a command's options."


def _sections(parser: argparse.ArgumentParser, sub: argparse._SubParsersAction) -> None:
    """List the subcommands in titled groups (each ``name  help``) in place of one list."""
    listed = {action.dest: action for action in sub._choices_actions}
    unknown = sorted({n for names in SECTIONS.values() for n in names} - listed.keys())
    if unknown:
        raise ValueError(f"drpipe.cli.SECTIONS names no such command: {unknown}")
    parser._positionals._group_actions.remove(sub)  # still parsed, and still in the usage
    options = parser._optionals
    parser._action_groups.remove(options)
    for title, names in [*SECTIONS.items(), (WORKFLOW, list(listed))]:
        group = parser.add_argument_group(title)
        group._group_actions.extend(listed.pop(n) for n in names if n in listed)
    parser._action_groups.append(options)


def build_parser() -> argparse.ArgumentParser:
    *rest, last = [p.label for p in papers()]
    labels = f"{', '.join(rest)} and {last}" if rest else last
    parser = argparse.ArgumentParser(
        prog="drpipe", description=DESCRIPTION.format(papers=labels), epilog=EPILOG
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at debug level")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="<command>")
    for name in MODULES + [p.commands for p in papers() if p.commands]:
        importlib.import_module(name).register(sub)
    _sections(parser, sub)
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
