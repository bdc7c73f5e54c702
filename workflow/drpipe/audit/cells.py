"""Cell provenance: the recorded jobs that write tables, and the metrics file each table cell
was computed from."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import pandas as pd

from drpipe.audit.lineage import Lineage
from drpipe.audit.metadata import Job
from drpipe.io import read_json

METRIC_COL = re.compile(r"^(?:(?P<dataset>[A-Za-z0-9_]+?)_)?(?P<kind>top|mrr)(?P<k>\d+)$")


def _record_value(rec: dict, kind: str, k: str) -> float | None:
    """A metrics record's value of a ``top<k>`` (percent) or ``mrr<k>`` (x100) column."""
    value = (rec.get("top_k" if kind == "top" else "mrr") or {}).get(k)
    if value is None:
        return None
    return float(value) * (100.0 if kind == "mrr" else 1.0)


def _metric_records(lineage: Lineage, job: Job) -> dict[str, dict]:
    out = {}
    for inp in job.inputs:
        if inp.startswith("results/metrics/") and inp.endswith(".json"):
            try:
                out[inp] = read_json(lineage.workdir / inp)
            except (OSError, ValueError):
                continue
    return out


def _tokens(text: str) -> set[str]:
    return {t for t in re.split(r"[^a-z0-9]+", str(text).lower()) if t}


def _row_map_runs(job: Job) -> dict[str, list[str]]:
    """Row label -> runs, from a table job's config slice (``row_map`` {run: {"method": label}}
    as Table 2 passes it), when it has one."""
    row_map = (job.cfg or {}).get("row_map")
    out: dict[str, list[str]] = defaultdict(list)
    if isinstance(row_map, dict):
        for run, spec in row_map.items():
            if isinstance(spec, dict) and spec.get("method"):
                out[str(spec["method"])].append(run)
    return out


def table_cells(lineage: Lineage, job: Job, table: str) -> list[dict[str, Any]]:
    """Each metric cell of a table CSV with the metrics file it was computed from.

    A cell in a column ``[<dataset>_]top<k>`` (or ``mrr<k>``) is matched to the table job's input metrics whose
    top-k equals it (to the table's 2 decimals) and whose dataset, split and train set agree
    with the row. Equal values (a saturated tiny corpus) are told apart by the table's own
    ``row_map`` (row label -> run) when its config has one, else by the row label's words."""
    metrics = _metric_records(lineage, job)
    by_label = _row_map_runs(job)
    frame = pd.read_csv(lineage.workdir / table, dtype=str, keep_default_na=False)
    cells = []
    for i, row in frame.iterrows():
        label_cols = [c for c in ("method", "variant", "label", "run") if c in frame.columns]
        label = " ".join(str(row[c]) for c in label_cols)
        for col in frame.columns:
            m = METRIC_COL.match(col)
            if not m or row[col] == "":
                continue
            value = float(row[col])
            dataset = m.group("dataset") or row.get("dataset") or None
            split = row.get(f"split_{dataset}") or row.get("split") or None
            train = str(row.get("train_set") or "")
            found = []
            for path, rec in metrics.items():
                top = _record_value(rec, m.group("kind"), m.group("k"))
                if top is None or round(top, 2) != round(value, 2):
                    continue
                if dataset and rec.get("dataset") != dataset:
                    continue
                if split and rec.get("split") != split:
                    continue
                rec_train = rec.get("train_set") or "none"
                if train and rec_train not in (train.split("+") if train != "none" else ["none"]):
                    continue
                found.append(path)
            if len(found) > 1:
                runs = set(by_label.get(str(row.get("method", "")), []))
                narrowed = [p for p in found if metrics[p].get("method") in runs]
                if not narrowed:
                    words = _tokens(label)
                    narrowed = [p for p in found if _tokens(metrics[p].get("method")) == words]
                found = narrowed or found
            cells.append(
                {
                    "table": table,
                    "row": int(i),
                    "label": label,
                    "column": col,
                    "value": value,
                    "metrics": found[0] if len(found) == 1 else None,
                    "candidates": found if len(found) != 1 else [],
                }
            )
    return cells


def table_jobs(lineage: Lineage) -> list[tuple[Job, str]]:
    """(job, csv) of every recorded job that writes a CSV from metrics or per-question files."""
    out = []
    for job in lineage.jobs.values():
        if not any(i.startswith("results/metrics/") for i in job.inputs):
            continue
        for o in job.outputs:
            if o.endswith(".csv"):
                out.append((job, o))
    return sorted(out, key=lambda t: t[1])
