"""One argument style for every table and figure command.

A table command reads ``--metrics`` (``drpipe evaluate`` JSON files) and writes ``--out``
(CSV) and optionally ``--md`` (Markdown); a figure command writes ``--out`` (PNG) and
``--csv`` (the plotted values); both take ``--cfg``, the config slice the rule passes. Papers
group their commands under one word (``drpipe tables-xmoco table3 ...``); ``command_group``
lets several modules add to the same group (DPR's Table 3 sits beside the shared Table 2
under ``drpipe tables``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from drpipe.cliutil import add_cfg

Handler = Callable[[argparse.Namespace], int]


def command_group(
    sub: argparse._SubParsersAction, name: str, help: str
) -> argparse._SubParsersAction:
    """The subcommands of ``drpipe <name>``, created on first use and shared afterwards."""
    groups = sub.__dict__.setdefault("_drpipe_groups", {})
    if name not in groups:
        parser = sub.add_parser(name, help=help)
        groups[name] = parser.add_subparsers(dest="subcommand", required=True)
    return groups[name]


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
