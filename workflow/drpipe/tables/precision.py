"""The precision a row's numbers were made in: its training and its encoding, read from the
reports of those steps (not from config: ``auto`` settings follow the machine's CPU).

The table rule passes, per cell (``run|train_set|dataset``), where those reports are
(``training`` and ``queries``: report files; ``corpus``: the folder of the shard reports, each
shard its own job and possibly its own machine) and the report files themselves.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from drpipe.errors import InputError
from drpipe.io import read_json

ROLES = ("training", "corpus", "queries")


def cell_key(run: str, train_set: str | None, dataset: str) -> str:
    return f"{run}|{train_set or 'none'}|{dataset}"


def report_precision(report: dict[str, Any]) -> str:
    """The precision a training or encoding report records (reports written before the
    precision setting say ``bf16`` true/false; question reports of then say nothing). int8
    with 7-bit weights (``drpipe.precision``) is named apart: its numbers differ from 8-bit's."""
    precision = report.get("precision")
    if precision:
        if precision == "int8" and "7-bit weights" in str(report.get("precision_backend", "")):
            return "int8 (7-bit weights)"
        return str(precision)
    if "bf16" in report:
        return "bf16" if report["bf16"] else "fp32"
    return "unrecorded"


def read_precision(
    sources: dict[str, dict[str, Any]], report_files: Iterable[str | Path]
) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Per cell key, per role, the reports behind it (read from ``report_files``).

    ``sources[key]``: ``{"training": [files], "corpus": folder, "queries": [files]}`` (a
    role may be absent: BM25 has none, the initial encoder no training). A named file missing
    from ``report_files``, or a corpus folder with no shard report among them, is an error.
    """
    loaded = {str(p): read_json(p) for p in report_files}
    out: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for key, roles in sources.items():
        cell: dict[str, list[dict[str, Any]]] = {}
        for role in ROLES:
            where = roles.get(role)
            if not where:
                continue
            if role == "corpus":
                prefix = str(where).rstrip("/") + "/"
                files = sorted(p for p in loaded if p.startswith(prefix))
            else:
                files = [str(p) for p in where]
            missing = [f for f in files if f not in loaded]
            if missing or not files:
                raise InputError(missing[0] if missing else where, key,
                                 f"the {role} report of this Table 2 cell is not among "
                                 "--reports")  # fmt: skip
            cell[role] = [{**loaded[f], "_file": f} for f in files]
        out[key] = cell
    return out


def _values(reports: list[dict[str, Any]]) -> str:
    found = sorted({report_precision(r) for r in reports})
    return "/".join(found)


def row_precision(cells: list[dict[str, list[dict[str, Any]]]]) -> str:
    """``training bf16, encoding bf16`` for the cells of one row (a value that differs
    between its cells or shards reads ``bf16/fp32``); empty for a row with no dense part."""
    merged: dict[str, list[dict[str, Any]]] = {}
    for cell in cells:
        for role, reports in cell.items():
            merged.setdefault(role, []).extend(reports)
    parts = []
    if "training" in merged:
        parts.append(f"training {_values(merged['training'])}")
    corpus, queries = merged.get("corpus"), merged.get("queries")
    if corpus and queries and _values(corpus) == _values(queries):
        parts.append(f"encoding {_values(corpus)}")
    else:
        if corpus:
            parts.append(f"corpus encoding {_values(corpus)}")
        if queries:
            parts.append(f"question encoding {_values(queries)}")
    return ", ".join(parts)


def precision_note(cells: Iterable[dict[str, list[dict[str, Any]]]]) -> str:
    """The note beside rows with a precision: what each path is and how it was chosen here."""
    training, encoding = set(), set()
    for cell in cells:
        for role, reports in cell.items():
            for r in reports:
                setting = r.get("precision_setting") or r.get("cfg", {}).get("bf16")
                if role == "training":
                    training.add(f"{report_precision(r)} (encoder.bf16: {setting})")
                else:
                    why = r.get("precision_reason")
                    encoding.add(f"{report_precision(r)} (encode.precision: {setting}"
                                 + (f"; {why})" if why else ")"))  # fmt: skip
    lines = [
        "The Precision part of each row's notes names the precision its training and its "
        "corpus and question encoding ran in, as their reports record it. fp32 is the "
        "papers'; bf16 is autocast (fp32 weights); int8 is dynamic quantization of the "
        "encoder's Linear layers. An `auto` setting follows the machine's CPU (bf16 where it "
        "has AMX or AVX512-BF16), so the same config can give numbers that differ in the first "
        "or second decimal on another machine (at mini, DPR top-1 51.08 in bf16 against 50.95 "
        "in fp32); `make audit AGAINST=...` attributes such differences."
    ]
    if training:
        lines.append(f"Training here: {'; '.join(sorted(training))}.")
    if encoding:
        lines.append(f"Encoding here: {'; '.join(sorted(encoding))}.")
    return " ".join(lines)
