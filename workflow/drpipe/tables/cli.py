"""One argument style for every table and figure command.

A table command reads ``--metrics`` (``drpipe evaluate`` JSON files) and writes ``--out``
(CSV) and optionally ``--md`` (Markdown); a figure command writes ``--out`` (PNG) and
``--csv`` (the plotted values); both take ``--cfg``, the config slice the rule passes.

Every table command sits under ``drpipe tables``: the shared tables by name (``drpipe tables
table2``), a paper's under its key (``drpipe tables xmoco table3``). A paper asks for its group
as ``command_group(sub, "tables-<key>", ...)``; the older one-word spelling (``drpipe
tables-xmoco table3``, which rules call) stays accepted and unlisted. ``command_group`` lets
several modules add to the same group (Table 2 and Table 4 both under ``drpipe tables``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from drpipe.cliutil import add_cfg

Handler = Callable[[argparse.Namespace], int]


TABLES = "tables"
TABLES_HELP = "shared tables (table2, table4) and each paper's: drpipe tables PAPER TABLE"
PAPER_PREFIX = TABLES + "-"


def command_group(
    sub: argparse._SubParsersAction, name: str, help: str
) -> argparse._SubParsersAction:
    """The subcommands of ``drpipe <name>``, created on first use and shared afterwards.

    ``tables-<key>`` is a paper's group: made as ``drpipe tables <key>``, with ``tables-<key>``
    kept as an unlisted alias of the same parser (``hide_alias``).
    """
    groups = sub.__dict__.setdefault("_drpipe_groups", {})
    if name not in groups:
        if name.startswith(PAPER_PREFIX):
            tables = command_group(sub, TABLES, TABLES_HELP)
            parser = tables.add_parser(name.removeprefix(PAPER_PREFIX), help=help)
            hide_alias(sub, name, parser)
            metavar = "<table>"
        else:
            parser = sub.add_parser(name, help=TABLES_HELP if name == TABLES else help)
            metavar = "<paper or table>" if name == TABLES else "<command>"
        groups[name] = parser.add_subparsers(dest="subcommand", required=True, metavar=metavar)
    return groups[name]


def hide_alias(sub: argparse._SubParsersAction, name: str, parser: argparse.ArgumentParser) -> None:
    """Accept ``name`` as another word for ``parser``, left out of the help's listing."""
    if name in sub.choices and sub.choices[name] is not parser:
        raise ValueError(f"command {name!r} is already taken")
    sub.choices[name] = parser


def add_table_command(
    group: argparse._SubParsersAction,
    name: str,
    func: Handler,
    help: str,
    *,
    inputs: str = "--metrics",
    inputs_help: str = "metrics JSON files",
) -> argparse.ArgumentParser:
    """``<name> --metrics ... --out CSV [--md MD] --cfg JSON``."""
    p = group.add_parser(name, help=help)
    p.add_argument(inputs, nargs="+", required=True, help=inputs_help)
    p.add_argument("--out", required=True, help="CSV to write")
    p.add_argument("--md", help="Markdown rendering to write")
    add_cfg(p)
    p.set_defaults(func=func)
    return p


def add_figure_command(
    group: argparse._SubParsersAction,
    name: str,
    func: Handler,
    help: str,
    *,
    inputs: str = "--metrics",
    inputs_help: str = "metrics JSON files",
    csv_required: bool = False,
) -> argparse.ArgumentParser:
    """``<name> --metrics ... --out PNG [--csv CSV] --cfg JSON``."""
    p = group.add_parser(name, help=help)
    p.add_argument(inputs, nargs="+", required=True, help=inputs_help)
    p.add_argument("--out", required=True, help="PNG to write")
    p.add_argument("--csv", required=csv_required, help="CSV of the plotted values")
    add_cfg(p)
    p.set_defaults(func=func)
    return p
