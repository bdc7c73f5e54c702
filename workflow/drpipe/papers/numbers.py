"""The numbers the papers printed, transcribed as data (one number per row, long format).

Each paper's folder holds ``numbers.csv``: every number of the tables this project reproduces,
with the table, row and column it came from (``page_ref`` quotes the caption start, ``note``
carries footnotes and markers), and ``citation.csv``: its full citation. Values are percent,
exactly as printed. Cells printed as "-" (no value) have no row.

Which files a rule reads here is part of its code hash through the paper's own module (each
paper's ``__init__.py`` declares its files as ``PACKAGE_DATA``), so that adding a paper
reruns nothing that does not read it.
"""

from __future__ import annotations

import io

import pandas as pd

from drpipe.errors import InputError
from drpipe.papers import ROOT, paper, paper_names

COLUMNS = [
    "paper",
    "table",
    "setting",
    "method",
    "dataset",
    "split",
    "metric",
    "value",
    "page_ref",
    "note",
]
KEY = ["paper", "table", "setting", "method", "dataset", "split", "metric"]
# The pipeline's five, and EntityQuestions, which AOpt's Table 1 prints (no run of ours).
DATASETS = {"nq", "triviaqa", "wq", "trec", "squad", "entityquestions"}
PAPER_COLUMNS = ["paper", "citation", "venue", "year", "source_file"]


def _read_csv(key: str, name: str) -> tuple[str, pd.DataFrame]:
    path = ROOT / key / name
    if not path.is_file():
        raise InputError(f"drpipe/papers/{key}/{name}", None, "missing: every paper has one")
    text = path.read_text(encoding="utf-8")
    # Everything as text first: "table" is "2", not 2, and values are checked explicitly below.
    frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    return f"drpipe/papers/{key}/{name}", frame


def load_papers() -> pd.DataFrame:
    """One row per paper: key, full citation, venue, year and the source text file."""
    frames = []
    for key in paper_names():
        where, frame = _read_csv(key, "citation.csv")
        if list(frame.columns) != PAPER_COLUMNS:
            raise InputError(where, "header", f"columns {list(frame.columns)} != {PAPER_COLUMNS}")
        if list(frame["paper"]) != [key]:
            raise InputError(where, None, f"expected one row, for paper '{key}'")
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def _validate(where: str, frame: pd.DataFrame, paper: str) -> pd.DataFrame:
    if list(frame.columns) != COLUMNS:
        raise InputError(where, "header", f"columns {list(frame.columns)} != {COLUMNS}")
    for i, row in enumerate(frame.itertuples(index=False), start=2):
        record = f"line {i}"
        if row.paper != paper:
            raise InputError(where, record, f"paper '{row.paper}' in the file of '{paper}'")
        if row.dataset not in DATASETS:
            raise InputError(where, record, f"unknown dataset '{row.dataset}'")
        for col in KEY + ["page_ref"]:
            if not getattr(row, col).strip():
                raise InputError(where, record, f"empty '{col}'")
        try:
            float(row.value)
        except ValueError:
            raise InputError(where, record, f"value '{row.value}' is not a number") from None
    dup = frame.duplicated(KEY, keep=False)
    if dup.any():
        first = int(dup.to_numpy().nonzero()[0][0]) + 2
        raise InputError(where, f"line {first}", "duplicate (paper, table, ..., metric) key")
    out = frame.copy()
    out["value"] = out["value"].astype(float)
    return out


def load_paper_numbers(key: str | None = None) -> pd.DataFrame:
    """Transcribed numbers of one registered paper (``dpr``, ``dcsr``, ...) or of all of them.

    Validated: expected columns, known datasets, numeric values, no duplicate keys.
    """
    names = paper_names() if key is None else [key]
    for name in names:
        try:
            paper(name)
        except KeyError as exc:
            raise ValueError(exc.args[0]) from None
    frames = []
    for name in names:
        _read_csv(name, "citation.csv")  # every paper with numbers is cited
        where, frame = _read_csv(name, "numbers.csv")
        frames.append(_validate(where, frame, name))
    return pd.concat(frames, ignore_index=True)


def paper_value(
    numbers: pd.DataFrame,
    *,
    table: str,
    setting: str,
    method: str,
    dataset: str,
    metric: str,
    split: str | None = None,
) -> float | None:
    """The one printed value at a (table, setting, method, dataset, metric) cell, or None."""
    sel = (
        (numbers["table"] == table)
        & (numbers["setting"] == setting)
        & (numbers["method"] == method)
        & (numbers["dataset"] == dataset)
        & (numbers["metric"] == metric)
    )
    if split is not None:
        sel &= numbers["split"] == split
    hits = numbers.loc[sel, "value"]
    if len(hits) > 1:
        raise ValueError(f"several paper values for {table}/{setting}/{method}/{dataset}/{metric}")
    return None if hits.empty else float(hits.iloc[0])


def citation(key: str) -> str:
    """The full citation of a registered paper (its ``citation.csv``)."""
    return str(load_papers().set_index("paper").loc[key, "citation"])
