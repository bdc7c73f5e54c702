"""Two versions of one result file: identical, equivalent (equal once recorded timings and host
names are set aside), an expected difference, equal within a stated tolerance, or different;
and two versions of one table, cell by cell."""

from __future__ import annotations

import gzip
import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from safetensors.numpy import load_file

from drpipe.io import read_json

# Float outputs (vectors, scores) of two CPU runs are compared within this tolerance when
# their bytes differ: |a - b| <= atol + rtol * |b| (numpy.allclose).
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
# Keys of JSON reports that record how a step ran, not what it produced.
VOLATILE_KEYS = {"environment", "hardware", "rule_timings", "total_rule_seconds", "origin"}
# ... and any key with one of these words (build_seconds, questions_per_second_search, ...).
VOLATILE_WORDS = {
    "seconds", "secs", "second", "time", "timestamp", "elapsed", "started", "finished",
    "host", "hostname", "pid", "date", "wall",
}  # fmt: skip
# Bytes that differ from build to build by design, with the reason; such files are compared
# through what is computed from them (a Lucene index through its BM25 runs).
EXPECTED_DIFFERENCES = (
    (
        re.compile(r"(^|/)bm25/index/"),
        "Lucene index: every build writes a random segment id and its time into the segment "
        "files; compared through its BM25 runs instead",
    ),
)
# Statuses of a file or a table cell, best first.
STATUS_ORDER = (
    "identical",
    "equivalent",
    "expected_difference",
    "within_tolerance",
    "different",
    "only_in_a",
    "only_in_b",
)
# Statuses that do not make two runs differ.
SAME = ("identical", "equivalent", "expected_difference")


def worst(statuses: Iterable[str]) -> str:
    return max(statuses, key=STATUS_ORDER.index, default="identical")


def _volatile(key: str) -> bool:
    return key in VOLATILE_KEYS or bool(VOLATILE_WORDS & set(key.lower().split("_")))


def _strip_volatile(obj: Any, dropped: set[str], path: str = "") -> Any:
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if _volatile(str(k)):
                dropped.add(f"{path}{k}")
                continue
            out[k] = _strip_volatile(v, dropped, f"{path}{k}.")
        return out
    if isinstance(obj, list):
        return [_strip_volatile(v, dropped, path) for v in obj]
    return obj


def _close(a: Any, b: Any, tol: dict) -> tuple[bool, float]:
    """(equal within tolerance, largest absolute difference) of two JSON-like values."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b, 0.0
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if math.isnan(a) and math.isnan(b):
            return True, 0.0
        diff = abs(a - b)
        return diff <= tol["atol"] + tol["rtol"] * abs(b), diff
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return False, math.inf
        results = [_close(a[k], b[k], tol) for k in a]
        return all(r[0] for r in results), max([r[1] for r in results], default=0.0)
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return False, math.inf
        results = [_close(x, y, tol) for x, y in zip(a, b, strict=True)]
        return all(r[0] for r in results), max([r[1] for r in results], default=0.0)
    return a == b, 0.0 if a == b else math.inf


def _frames_close(fa: pd.DataFrame, fb: pd.DataFrame, tol: dict) -> tuple[str, str]:
    if list(fa.columns) != list(fb.columns) or len(fa) != len(fb):
        return "different", f"shape {fa.shape} vs {fb.shape} or columns differ"
    worst = 0.0
    for col in fa.columns:
        a, b = fa[col], fb[col]
        if pd.api.types.is_float_dtype(a) and pd.api.types.is_float_dtype(b):
            x, y = a.to_numpy(dtype=float), b.to_numpy(dtype=float)
            if not np.array_equal(np.isnan(x), np.isnan(y)):
                return "different", f"column {col}: missing values differ"
            ok = np.isclose(x, y, rtol=tol["rtol"], atol=tol["atol"], equal_nan=True)
            if not ok.all():
                i = int(np.flatnonzero(~ok)[0])
                return "different", f"column {col}, row {i}: {x[i]!r} vs {y[i]!r}"
            if len(x):
                worst = max(worst, float(np.nanmax(np.abs(x - y), initial=0.0)))
        elif not a.equals(b):
            i = int(np.flatnonzero((a != b).to_numpy())[0]) if len(a) else 0
            return "different", f"column {col}, row {i}: {a.iloc[i]!r} vs {b.iloc[i]!r}"
    if worst == 0.0:
        return "equivalent", "same values, different bytes"
    return "within_tolerance", f"max |a-b| = {worst:.3g}"


def _arrays_close(a: np.ndarray, b: np.ndarray, tol: dict) -> tuple[str, str]:
    if a.shape != b.shape or a.dtype != b.dtype:
        return "different", f"{a.dtype}{a.shape} vs {b.dtype}{b.shape}"
    if not np.issubdtype(a.dtype, np.floating):
        if np.array_equal(a, b):
            return "equivalent", "same values, different bytes"
        return "different", f"{int((a != b).sum())} of {a.size} values differ"
    if not np.allclose(a, b, rtol=tol["rtol"], atol=tol["atol"], equal_nan=True):
        diff = float(np.nanmax(np.abs(a.astype(np.float64) - b.astype(np.float64))))
        return "different", f"max |a-b| = {diff:.3g}"
    diff = float(np.nanmax(np.abs(a.astype(np.float64) - b.astype(np.float64)), initial=0.0))
    return "within_tolerance", f"max |a-b| = {diff:.3g}"


def _trec(path: Path) -> pd.DataFrame:
    rows = [line.split() for line in path.read_text().splitlines() if line.strip()]
    frame = pd.DataFrame(rows, columns=["qid", "q0", "doc", "rank", "score", "tag"][: len(rows[0])])
    if "score" in frame:
        frame["score"] = frame["score"].astype(float)
    return frame


def compare_file(a: Path, b: Path, tol: dict, rel: str = "") -> tuple[str, str]:
    """(status, detail) of two versions of one result file (``rel``: its path in the results
    folder, for the files whose bytes are expected to differ)."""
    if a.read_bytes() == b.read_bytes():
        return "identical", ""
    for pattern, why in EXPECTED_DIFFERENCES:
        if pattern.search(rel) and not a.name.endswith(".json"):
            return "expected_difference", why
    name = a.name
    try:
        if name.endswith(".json"):
            dropped: set[str] = set()
            ja = _strip_volatile(read_json(a), dropped)
            jb = _strip_volatile(read_json(b), dropped)
            if ja == jb:
                return "equivalent", f"differs only in {', '.join(sorted(dropped)) or 'formatting'}"
            ok, diff = _close(ja, jb, tol)
            return (
                ("within_tolerance", f"max |a-b| = {diff:.3g}")
                if ok
                else ("different", "values differ")
            )
        if name.endswith(".parquet"):
            return _frames_close(pd.read_parquet(a), pd.read_parquet(b), tol)
        if name.endswith(".csv"):
            return _frames_close(pd.read_csv(a), pd.read_csv(b), tol)
        if name.endswith(".npy"):
            return _arrays_close(np.load(a), np.load(b), tol)
        if name.endswith(".safetensors"):
            ta, tb = load_file(str(a)), load_file(str(b))
            if set(ta) != set(tb):
                return "different", "tensor names differ"
            statuses = [_arrays_close(ta[k], tb[k], tol) for k in sorted(ta)]
            bad = [(k, s) for k, s in zip(sorted(ta), statuses, strict=True) if s[0] == "different"]
            if bad:
                return "different", f"tensor {bad[0][0]}: {bad[0][1][1]}"
            return "within_tolerance", "; ".join(sorted({s[1] for s in statuses}))[:200]
        if name.endswith(".trec"):
            return _frames_close(_trec(a), _trec(b), tol)
        if name.endswith(".gz") and gzip.decompress(a.read_bytes()) == gzip.decompress(
            b.read_bytes()
        ):
            return "equivalent", "same content, different compressed bytes"
    except Exception as exc:  # an unreadable file is a difference, with the reason
        return "different", f"could not compare: {type(exc).__name__}: {exc}"
    return "different", "bytes differ"


# Text columns that describe a row rather than name it (they may differ between two runs of
# the same row: the precision a machine picked), compared as values, never used as row keys.
DESCRIPTIVE_COLUMNS = ("notes", "precision")


def compare_tables(a: Path, b: Path, tol: dict) -> list[dict[str, Any]]:
    """Cell-by-cell comparison of two versions of one table (rows keyed by text columns; a
    cell's ``index_a`` is its row's position in ``a``, None for a row only in ``b``)."""
    fa, fb = pd.read_csv(a), pd.read_csv(b)
    keys = [c for c in fa.columns
            if not pd.api.types.is_numeric_dtype(fa[c]) and c not in DESCRIPTIVE_COLUMNS]  # fmt: skip
    keys = [c for c in keys if c in fb.columns]
    # Rows sharing their text columns (a figure's points) are told apart by their order.
    fa, fb = fa.copy(), fb.copy()
    for frame in (fa, fb):
        frame["#"] = frame.groupby(keys, dropna=False).cumcount() if keys else range(len(frame))
    keys.append("#")
    fa["#pos"] = range(len(fa))
    ia, ib = fa.set_index(keys), fb.set_index(keys)
    cells = []
    values = [c for c in fa.columns if c not in keys and c != "#pos" and not (fa[c].isna().all()
              and c in fb and fb[c].isna().all())]  # fmt: skip
    for idx in ia.index.union(ib.index, sort=False):
        for col in values:
            va = ia[col].get(idx) if idx in ia.index and col in ia.columns else None
            vb = ib[col].get(idx) if idx in ib.index and col in ib.columns else None
            if va is None or vb is None:
                status = "only_in_a" if vb is None else "only_in_b"
            elif isinstance(va, pd.Series) or isinstance(vb, pd.Series):
                status = "different"  # duplicate row keys: not comparable cell by cell
            else:
                both_nan = (
                    isinstance(va, float) and isinstance(vb, float)
                    and math.isnan(va) and math.isnan(vb)
                )  # fmt: skip
                if both_nan or va == vb:
                    status = "identical"
                elif isinstance(va, (int, float)) and isinstance(vb, (int, float)):
                    ok, _ = _close(float(va), float(vb), tol)
                    status = "within_tolerance" if ok else "different"
                else:
                    status = "different"
            pos = ia["#pos"].get(idx) if idx in ia.index else None
            cells.append({"row": _key_text(idx), "column": col, "a": _num(va), "b": _num(vb),
                          "status": status, "index_a": _num(pos)})  # fmt: skip
    return cells


def _key_text(idx: Any) -> str:
    """A row's text columns, and its order among rows that share them (when not the first)."""
    if not isinstance(idx, tuple):
        return f"#{idx}"
    *parts, n = idx
    return " | ".join(map(str, parts)) + (f" #{n}" if n else "")


def _num(v: Any) -> Any:
    if v is None or isinstance(v, pd.Series):
        return None
    if isinstance(v, (np.floating, float)):
        return None if math.isnan(float(v)) else float(v)
    if isinstance(v, np.integer):
        return int(v)
    return v
