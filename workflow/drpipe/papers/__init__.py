"""The papers this workflow reproduces, found by name: one folder each, ``papers/<key>/``.

The registry is the folders: nothing else lists the papers. The workflow includes each
paper's rules, the config schema takes each paper's block, the CLI each paper's commands, and
the claims file each paper's claims (``README.md`` beside this file says what a folder holds).
This module stays light (no pandas, no torch): the Snakefile and the config loader import it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import ModuleType

from drpipe.tables.protocols import LEAKFREE, ORACLE, STANDARD

ROOT = Path(__file__).resolve().parent
# The protocol names are re-exported: a paper's spec says which protocol its numbers sit beside.
__all__ = [
    "LEAKFREE",
    "ORACLE",
    "STANDARD",
    "Paper",
    "Table2Source",
    "paper",
    "paper_names",
    "paper_of_run",
    "papers",
    "row_order",
]


@dataclass(frozen=True)
class Table2Source:
    """Which of a paper's printed tables sits beside our rows of a shared table (2 or 4)."""

    table: str  # the paper's table ("2"; AOpt's oracle numbers are in its Table 3)
    cite: str  # said in the row's source column: "copied from ..., Table 2"
    protocol: str = STANDARD  # the rows (by protocol) these numbers sit beside
    by_setting: bool = True  # match the training setting (None / Single / Multi) too


@dataclass(frozen=True)
class Paper:
    """What a paper tells the shared code about itself (``PAPER`` in its ``__init__.py``)."""

    key: str  # the folder name: "dpr"
    label: str  # how tables name it: "DPR"
    year: int  # papers are listed by year, then key
    # Runs whose rows of the shared Table 2 carry this paper's numbers: methods by name, and
    # "bm25" / "init" for the baselines. A method no paper lists gets rows with no paper value.
    methods: tuple[str, ...] = ()
    table2: tuple[Table2Source, ...] = ()
    # Its row labels in its own table's order (sorts the shared Table 2); "X" also orders a
    # label "X (...)" that carries settings.
    row_order: tuple[str, ...] = ()
    # Markdown paragraphs the shared Table 2 prints when rows of this paper are there, by
    # protocol block (e.g. AOpt's explanation of its leak-free and oracle rows).
    table2_text: dict[str, str] = field(default_factory=dict)
    # Which of its printed tables sit beside our rows of the shared Table 4 (exact match of a
    # reader over each retriever's passages), and its paragraphs there, by protocol block.
    table4: tuple[Table2Source, ...] = ()
    table4_text: dict[str, str] = field(default_factory=dict)

    def sources(self, table: str) -> tuple[Table2Source, ...]:
        """Its printed tables beside the shared table ``table`` ("2" or "4")."""
        return {"2": self.table2, "4": self.table4}[table]

    def text(self, table: str) -> dict[str, str]:
        """Its paragraphs, by protocol block, in the shared table ``table``."""
        return {"2": self.table2_text, "4": self.table4_text}[table]

    @property
    def folder(self) -> Path:
        return ROOT / self.key

    def file(self, name: str) -> Path | None:
        """A file of the paper's folder (``rules.smk``, ``schema.yaml``, ...), None if absent."""
        path = self.folder / name
        return path if path.is_file() else None

    @property
    def module(self) -> str:
        return f"{__name__}.{self.key}"

    @property
    def commands(self) -> str | None:
        """The module whose ``register(subparsers)`` adds the paper's commands, if any."""
        return f"{self.module}.tables" if self.file("tables.py") else None


@cache
def _load(key: str) -> Paper:
    module: ModuleType = importlib.import_module(f"{__name__}.{key}")
    paper = getattr(module, "PAPER", None)
    if not isinstance(paper, Paper) or paper.key != key:
        raise ImportError(f"{module.__file__}: expected PAPER = Paper(key={key!r}, ...)")
    return paper


def paper_names() -> list[str]:
    """Keys of the registered papers (folders with an ``__init__.py``), by year then key."""
    keys = [p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()]
    return sorted(keys, key=lambda k: (_load(k).year, k))


def papers() -> list[Paper]:
    return [_load(k) for k in paper_names()]


def paper(key: str) -> Paper:
    """The registered paper ``key``; an error lists the known ones."""
    if not (ROOT / key / "__init__.py").is_file():
        raise KeyError(f"unknown paper {key!r}; registered: {', '.join(paper_names())}")
    return _load(key)


def paper_of_run(run: str) -> str | None:
    """The paper whose numbers sit beside a run's Table 2 rows (by the run's method), or None
    for a method that no paper lists."""
    method = run.split("+")[0].split(".")[0].split("-")[0]
    for p in papers():
        if method in p.methods:
            return p.key
    return None


def row_order() -> tuple[str, ...]:
    """Row labels in the papers' own orders, papers by year (sorts the shared Table 2)."""
    return tuple(label for p in papers() for label in p.row_order)
