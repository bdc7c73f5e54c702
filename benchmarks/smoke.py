"""What every benchmark shares for its smoke mode (``--smoke``): the same code path at the
smallest size, in seconds, so that ``tests/test_benchmarks.py`` notices when a benchmark stops
running. Smoke figures measure nothing; only full runs (the default) are reported.

A benchmark declares ``RESULT_LINES``, regular expressions of the result lines it prints
(the test checks them), and takes ``--smoke`` and ``--out`` through ``add_args`` and
``parse_args``.

Standard library only at import time: ``bench_corpus`` measures its children's peak memory
and must itself stay small.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def add_args(parser: argparse.ArgumentParser, out: Path) -> None:
    """``--smoke`` and ``--out``: by default ``out`` (under ``results/benchmarks/``), and in
    smoke mode its ``smoke/`` neighbour, so that smoke figures never replace real ones."""
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the same code path at the smallest size and a tiny random BERT (seconds; the "
        "figures mean nothing): checks that the benchmark runs",
    )
    parser.add_argument(
        "--out", type=Path, help=f"result JSON (default {out}; with --smoke {smoke_out(out)})"
    )
    parser.set_defaults(full_out=out)


def smoke_out(out: Path) -> Path:
    return out.parent / "smoke" / out.name


def parse_args(
    parser: argparse.ArgumentParser, argv: list[str] | None = None
) -> argparse.Namespace:
    """``parser.parse_args`` with ``out`` filled in (see ``add_args``)."""
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = smoke_out(args.full_out) if args.smoke else args.full_out
    return args


def tiny_bert(directory: Path, texts: Iterable[str]) -> str:
    """A random 2-layer BERT (hidden 32) whose vocabulary holds every word of ``texts``, saved
    to ``directory``: the tests' model (``tests/tiny_models.py``), so smoke runs load no
    pretrained weights and meet no unknown word."""
    tests = str(REPO / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    from tiny_models import save_tiny_bert

    return save_tiny_bert(directory, texts)
