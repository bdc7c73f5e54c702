"""Did my run reproduce yours? A finished run's tables checked against committed reference tables.

A reference (``docs/reference/<scale>/<path>/``) is a results folder's tables (``table2.csv``,
and ``table4.csv`` where it was made) with ``reference.json`` saying how they were made: the
scale, the precision path its rows recorded, the CPU model and flags, the commit and the
command. The precision path is read from Table 2's ``precision`` column, which names every
reduced-precision pass behind a row ("training bf16, encoding bf16"); a row without one ran in
fp32. fp32 and bf16 runs differ in the second decimal, so each path has its own reference.

A run is compared with the reference of its scale and path, cell by cell over every metric
column (``<dataset>_top<k>``, ``<dataset>_mrr<k>``, ``<dataset>_em``): on the same CPU kind
(model and flags) with the same threads per training the cells must be identical (CPU runs are
deterministic); on another kind, or at another thread count, they may differ by ``tolerance``
points, since the same precision path still sums in another order there (measured: 0.03 to
0.07 points between AMD EPYC with AVX512-BF16 and a CPU with AMX; 0.01 between one and two
threads per job on one CPU). A missing or extra row, and a run whose path or scale has no
reference, fail and say so. A reference table that the run has not made (Table 4 is a target of
its own, after `make run`) is named as not made and not compared; Table 2 must be there.
"""

from __future__ import annotations

import argparse
import logging
import re
import shutil
from pathlib import Path
from typing import Any

import pandas as pd

from drpipe.errors import InputError
from drpipe.io import atomic_path, read_json, write_json

log = logging.getLogger(__name__)

TABLES = ("table2.csv", "table4.csv")
META = "reference.json"
KEY = ("training", "method", "protocol", "train_set")
METRIC = re.compile(r"^[A-Za-z0-9_]+?_(?:top\d+|mrr\d+|em)$")
DEFAULT_TOLERANCE = 0.5  # points, between CPU kinds on one precision path
PRECISIONS = ("bf16", "int8")  # what a precision note can name besides fp32


def precision_path(table2: pd.DataFrame) -> str:
    """The precision path a Table 2 recorded: "fp32", or the reduced precisions its rows name
    ("bf16", "bf16+int8"), from its ``precision`` column."""
    notes = " ".join(str(v) for v in table2.get("precision", pd.Series(dtype=str)).dropna())
    found = [p for p in PRECISIONS if p in notes]
    return "+".join(found) or "fp32"


def run_identity(results: Path) -> dict[str, Any]:
    """Scale, precision path and CPU of a results folder (its provenance record, Table 2)."""
    record_path = results / "provenance.json"
    if not record_path.is_file():
        raise InputError(record_path, None, "no provenance record: is the run finished?")
    record = read_json(record_path)
    hw = record.get("hardware") or {}
    table2 = _read_table(results / "table2.csv")
    return {
        "scale": record.get("scale"),
        "precision_path": precision_path(table2),
        "cpu_model": hw.get("cpu_model"),
        "cpu_flags": sorted(hw.get("cpu_flags") or []),
        "cuda_devices": hw.get("cuda_devices") or [],
        "threads": training_threads(record),
        "commit": (record.get("code") or {}).get("commit"),
    }


def training_threads(record: dict[str, Any]) -> list[int]:
    """The thread counts the run's trainings ran at (their reports, in the provenance record):
    a sum splits by thread count, so a trained row's last digits can follow it."""
    reports = record.get("step_reports") or {}
    return sorted(
        {int(r["threads"]) for k, r in reports.items()
         if "/models/" in k and isinstance(r, dict) and r.get("threads") is not None}
    )  # fmt: skip


def _read_table(path: Path) -> pd.DataFrame:
    if not path.is_file():
        raise InputError(path, None, "missing")
    frame = pd.read_csv(path, keep_default_na=False, na_values=[""])  # "None" is a training
    missing = [c for c in KEY if c not in frame.columns]
    if missing:
        raise InputError(path, "header", f"missing columns {missing}")
    return frame


def _keyed(frame: pd.DataFrame, path: Path) -> pd.DataFrame:
    keys = frame[list(KEY)].fillna("").astype(str)
    index = pd.MultiIndex.from_frame(keys)
    if index.duplicated().any():
        row = " / ".join(index[index.duplicated()][0])
        raise InputError(path, f"row {row}", "two rows with the same training/method/protocol")
    return frame.set_axis(index)


def compare_table(
    ours: pd.DataFrame, ref: pd.DataFrame, tolerance: float, name: str
) -> list[dict[str, Any]]:
    """One record per metric cell of either table: ours, the reference's, the difference and
    the verdict (same | within | differs | missing | extra)."""
    a, b = _keyed(ours, Path(name)), _keyed(ref, Path(f"reference {name}"))
    cols = sorted({c for c in [*a.columns, *b.columns] if METRIC.match(c)})
    out = []
    for key in list(dict.fromkeys([*b.index, *a.index])):
        row = " / ".join(k for k in key if k)
        for col in cols:
            mine = a.at[key, col] if key in a.index and col in a.columns else None
            theirs = b.at[key, col] if key in b.index and col in b.columns else None
            mine = None if mine is None or pd.isna(mine) else float(mine)
            theirs = None if theirs is None or pd.isna(theirs) else float(theirs)
            if mine is None and theirs is None:
                continue
            if theirs is None:
                verdict, delta = "extra", None
            elif mine is None:
                verdict, delta = "missing", None
            else:
                delta = round(mine - theirs, 2)
                verdict = (
                    "same" if delta == 0 else "within" if abs(delta) <= tolerance else "differs"
                )
            out.append({"table": name, "row": row, "column": col, "ours": mine,
                        "reference": theirs, "diff": delta, "verdict": verdict})  # fmt: skip
    return out


def find_reference(root: Path, identity: dict[str, Any]) -> Path:
    where = root / str(identity["scale"]) / identity["precision_path"]
    if not (where / META).is_file():
        have = sorted(str(p.parent.relative_to(root)) for p in root.glob(f"*/*/{META}"))
        raise InputError(
            where,
            None,
            f"no reference for scale {identity['scale']!r} on the {identity['precision_path']} "
            f"path (references: {', '.join(have) or 'none'})",
        )
    return where


def verify(
    results: Path, reference_root: Path, tolerance: float | None = None
) -> tuple[bool, list[dict[str, Any]], dict[str, Any]]:
    """(passed, cells, summary) of a results folder against its reference."""
    identity = run_identity(results)
    where = find_reference(reference_root, identity)
    meta = read_json(where / META)
    same_cpu = (meta.get("cpu_model"), sorted(meta.get("cpu_flags") or [])) == (
        identity["cpu_model"],
        identity["cpu_flags"],
    ) and not identity["cuda_devices"]
    # A reference that does not say its trainings' threads (made before they were recorded
    # here) is taken to match.
    same_threads = "threads" not in meta or meta["threads"] == identity["threads"]
    tol = 0.0 if same_cpu and same_threads else float(meta.get("tolerance", DEFAULT_TOLERANCE))
    if tolerance is not None:
        tol = float(tolerance)
    cells: list[dict[str, Any]] = []
    not_made = []
    for name in TABLES:
        if not (where / name).is_file():
            continue
        if not (results / name).is_file():
            not_made.append(name)
            continue
        cells += compare_table(_read_table(results / name), _read_table(where / name), tol, name)
    bad = [c for c in cells if c["verdict"] not in ("same", "within")]
    summary = {
        "reference": str(where),
        "scale": identity["scale"],
        "precision_path": identity["precision_path"],
        "same_cpu_kind": same_cpu,
        "same_threads": same_threads,
        "tolerance": tol,
        "cells": len(cells),
        "not_made": not_made,
        **{
            v: sum(c["verdict"] == v for c in cells)
            for v in ("same", "within", "differs", "missing", "extra")
        },  # fmt: skip
    }
    return not bad and bool(cells), cells, summary


def write_reference(results: Path, reference_root: Path, command: str) -> Path:
    """Copy a finished run's tables into ``<root>/<scale>/<path>/`` with its reference.json."""
    identity = run_identity(results)
    where = reference_root / str(identity["scale"]) / identity["precision_path"]
    with atomic_path(where, directory=True) as tmp:
        tmp.mkdir(parents=True, exist_ok=True)
        for name in TABLES:
            if (results / name).is_file():
                shutil.copyfile(results / name, tmp / name)
                md = (results / name).with_suffix(".md")
                if md.is_file():
                    shutil.copyfile(md, tmp / md.name)
        write_json(tmp / META, {**identity, "tolerance": DEFAULT_TOLERANCE, "command": command})
    return where


def render(passed: bool, cells: list[dict[str, Any]], summary: dict[str, Any]) -> str:
    kind = "the same CPU kind" if summary["same_cpu_kind"] else "another CPU kind"
    if not summary.get("same_threads", True):
        kind += ", other training threads"
    lines = [
        f"{'PASS' if passed else 'FAIL'}: {summary['cells']} cells against "
        f"{summary['reference']} (scale {summary['scale']}, {summary['precision_path']} path, "
        f"{kind}: tolerance {summary['tolerance']:g} points): {summary['same']} same, "
        f"{summary['within']} within, {summary['differs']} differ, {summary['missing']} "
        f"missing, {summary['extra']} extra"
    ]
    for name in summary.get("not_made", []):
        lines.append(f"{name}: not made by this run (its target: results/{name}); not compared")
    shown = [c for c in cells if c["verdict"] not in ("same",)]
    if shown:
        lines += ["", "| table | row | column | ours | reference | diff | verdict |",
                  "|---|---|---|---|---|---|---|"]  # fmt: skip
        for c in shown:
            vals = ["" if c[k] is None else f"{c[k]:.2f}" for k in ("ours", "reference", "diff")]
            lines.append(
                f"| {c['table']} | {c['row']} | {c['column']} | "
                + " | ".join(vals)
                + f" | {c['verdict']} |"
            )
    return "\n".join(lines) + "\n"


def _cmd_verify(args: argparse.Namespace) -> int:
    results, root = Path(args.results), Path(args.reference)
    if args.write_reference:
        where = write_reference(results, root, args.command_line)
        print(f"reference written: {where}")
        return 0
    passed, cells, summary = verify(results, root, args.tolerance)
    print(render(passed, cells, summary), end="")
    if args.out:
        write_json(args.out, {"passed": passed, **summary, "cells": cells})
    return 0 if passed else 1


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "verify",
        help="compare a finished run's tables with the committed reference results",
        description="Compare results/table2.csv (and table4.csv) cell by cell with the reference "
        "of the run's scale and precision path: identical on the reference's CPU kind, within "
        "a tolerance on another. Example: drpipe verify --results results",
    )
    p.add_argument("--results", default="results", help="the finished run's results folder")
    p.add_argument("--reference", default="docs/reference", help="the references' root folder")
    p.add_argument("--tolerance", type=float, default=None,
                   help="points a cell may differ by (default: 0 on the reference's CPU kind, "
                   "else the reference's own)")  # fmt: skip
    p.add_argument("--out", help="JSON of every compared cell to write")
    p.add_argument("--write-reference", action="store_true",
                   help="make this run the reference of its scale and precision path")  # fmt: skip
    p.add_argument("--command-line", default="make run",
                   help="with --write-reference: the command that made the run")  # fmt: skip
    p.set_defaults(func=_cmd_verify)
