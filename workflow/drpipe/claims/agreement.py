"""Whether the claims' verdicts agree between runs (``drpipe claims-agreement``): the claims
tables of two or more runs (``make audit``'s ``claims.csv``, e.g. one per scale), paired by
claim id, with each run's verdict and difference and one of

- ``agree``: tested in every run, the same verdict;
- ``differ``: tested in every run, verdicts that differ (the runs' setups say why: README);
- ``not comparable``: tested in some runs only (the others' reason is kept);
- ``not tested``: tested in none.

Claims a table lacks (an older run's file) count as not tested there. The ``family`` column
(leak-free or oracle, issue 43) is carried from the tables that have one."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pandas as pd

from drpipe.errors import InputError
from drpipe.io import atomic_path
from drpipe.tables.output import md_table, write_text

NEEDED = ("id", "verdict", "diff", "ci_low", "ci_high", "p_holm")
NOT_TESTED = "not tested"


def read_claims(path: str | Path) -> pd.DataFrame:
    """A claims table, checked for the columns the comparison reads."""
    try:
        frame = pd.read_csv(path)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        raise InputError(path, None, f"cannot read a claims table: {err}") from None
    missing = [c for c in NEEDED if c not in frame.columns]
    if missing:
        raise InputError(path, None, f"not a claims table: no columns {missing}")
    dup = frame["id"][frame["id"].duplicated()].tolist()
    if dup:
        raise InputError(path, dup[0], "claim id appears more than once")
    return frame.set_index("id")


def agreement(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per claim id of any table: per run ``<label>_verdict``, ``<label>_diff``,
    ``<label>_ci``, ``<label>_p_holm``, and ``agreement``."""
    ids = list(dict.fromkeys(i for t in tables.values() for i in t.index))
    rows = []
    for cid in ids:
        row: dict[str, object] = {"id": cid}
        families = [str(t.loc[cid, "family"]) for t in tables.values()
                    if "family" in t.columns and cid in t.index]  # fmt: skip
        if families:  # leak-free or oracle (tables older than issue 43 have no family)
            row["family"] = families[0]
        verdicts = []
        for label, table in tables.items():
            rec = table.loc[cid] if cid in table.index else None
            verdict = NOT_TESTED if rec is None else str(rec["verdict"])
            row[f"{label}_verdict"] = verdict
            row[f"{label}_diff"] = None if rec is None else _num(rec["diff"])
            low, high = (None, None) if rec is None else (_num(rec["ci_low"]), _num(rec["ci_high"]))
            row[f"{label}_ci"] = None if low is None else f"[{low:+.2f}, {high:+.2f}]"
            row[f"{label}_p_holm"] = None if rec is None else _num(rec["p_holm"])
            verdicts.append(verdict)
        tested = [v for v in verdicts if v != NOT_TESTED]
        if not tested:
            row["agreement"] = NOT_TESTED
        elif len(tested) < len(verdicts):
            row["agreement"] = "not comparable"
        else:
            row["agreement"] = "agree" if len(set(tested)) == 1 else "differ"
        rows.append(row)
    return pd.DataFrame.from_records(rows)


def _num(value: object) -> float | None:
    try:
        out = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return None if math.isnan(out) else out


def _cell(row: pd.Series, label: str) -> str:
    """One run's verdict with its difference, interval and Holm p where it was tested."""
    text = str(row[f"{label}_verdict"])
    diff, holm = row[f"{label}_diff"], row[f"{label}_p_holm"]
    if diff is None or pd.isna(diff):
        return text
    text += f" ({diff:+.2f} {row[f'{label}_ci'] or ''}"
    return text + (f"; Holm p {holm:.2g})" if holm is not None and not pd.isna(holm) else ")")


def _claim(row: pd.Series) -> str:
    """The claim's id, marked when it is in the oracle family (the test answers were seen)."""
    return f"{row['id']} (oracle)" if row.get("family") == "oracle" else str(row["id"])


def render(frame: pd.DataFrame, labels: list[str]) -> str:
    rows = [[_claim(row), *(_cell(row, label) for label in labels), row["agreement"]]
            for _, row in frame.iterrows()]  # fmt: skip
    counts = frame["agreement"].value_counts().to_dict()
    summary = ", ".join(f"{k}: {counts[k]}" for k in ("agree", "differ", "not comparable",
                                                       NOT_TESTED) if k in counts)  # fmt: skip
    return md_table(["claim", *labels, "agreement"], rows) + f"\n\n{summary}\n"


def _cmd(args: argparse.Namespace) -> int:
    if len(args.runs) < 2:
        raise SystemExit("error: give at least two runs' claims tables to compare")
    tables = {}
    for item in args.runs:
        label, sep, path = item.partition("=")
        if not sep or not label or not path:
            raise SystemExit(f"error: {item!r}: expected LABEL=claims.csv")
        if label in tables:
            raise SystemExit(f"error: label {label!r} given twice")
        tables[label] = read_claims(path)
    frame = agreement(tables)
    page = render(frame, list(tables))
    print(page, end="")
    if args.out:
        with atomic_path(args.out) as tmp:
            frame.to_csv(tmp, index=False, float_format="%.6g")
    if args.markdown:
        write_text(page, args.markdown)
    if args.plot:
        from drpipe.claims.forest import plot_forest  # lazy: matplotlib

        plot_forest(tables, args.plot)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("claims-agreement", help="whether two or more runs' claims agree")
    p.add_argument("runs", nargs="+", metavar="LABEL=CLAIMS_CSV",
                   help="each run's claims.csv with a label, e.g. mini=a/claims.csv")  # fmt: skip
    p.add_argument("--out", help="also write the comparison as CSV")
    p.add_argument("--markdown", help="also write the page as Markdown")
    p.add_argument("--plot", help="also draw the claims as a forest plot (PNG), runs side by side")
    p.set_defaults(func=_cmd)
