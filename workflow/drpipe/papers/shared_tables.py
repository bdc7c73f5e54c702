"""The tables that every paper adds rows to (Table 2: retrieval accuracy; Table 4: exact
match), built the same way: one row per (protocol, training, method), columns per dataset and
measure, each paper value beside ours from the paper that lists the row's method.

A ``Layout`` says what one such table measures (its columns, how a metrics record gives our
value, which of a paper's tables sits beside it); ``shared_table`` builds the frame and
``shared_markdown`` renders it. Each row's paper value comes from the paper that lists the
row's method (``drpipe.papers``); a method that no paper lists gets its rows with no paper
value and a note saying so. Nothing here invents a row: a table has rows only for the metrics
it is given.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from drpipe.cliutil import need
from drpipe.papers import ORACLE, STANDARD, Table2Source, paper, papers, row_order
from drpipe.papers.numbers import citation, load_paper_numbers
from drpipe.tables.compare import (
    comparable,
    comparison_cell,
    comparison_headers,
    comparison_note,
    diff,
    ordering,
    r2,
    scale_of,
)
from drpipe.tables.notes import NOTE_ORDER, note_keys, row_kinds
from drpipe.tables.output import md_table, write_csv, write_text
from drpipe.tables.precision import cell_key, precision_note, read_precision, row_precision
from drpipe.tables.protocols import PROTOCOL_ORDER
from drpipe.tables.rows import (
    DEFAULT_SPLIT_EQUIV,
    REPRODUCED,
    TRAINING_ORDER,
    dataset_key,
    lookup,
    paper_row,
    paper_split,
)

log = logging.getLogger(__name__)

# The paper whose layout the shared tables follow; its citation heads the Markdown.
LAYOUT_PAPER = "dpr"


@dataclass(frozen=True)
class Layout:
    """What one shared table measures and which printed table sits beside it."""

    table: str  # "2" / "4": the papers' table number (``Paper.sources(table)``)
    title: str  # the Markdown heading, before the scale
    columns: tuple[str, ...]  # measures per dataset: "top20" (also the numbers.csv metric)
    headers: tuple[str, ...]  # how the Markdown names them: "Top-20"
    value: Callable[[dict, str], float]  # a metrics record and a column -> ours (percent)
    printed: str  # what the paper prints, said in the header ("Top-20 and Top-100 only")
    # Fields of a metrics record kept per dataset beside split and n (Table 4: the k read).
    per_dataset: tuple[str, ...] = ()
    # Extra note keys every row of this table carries (Table 4: the reader's setup).
    row_notes: tuple[str, ...] = ()
    intro: tuple[str, ...] = field(default=())  # paragraphs after the header sentence


def _order_index(label: str, order: tuple[str, ...]) -> int:
    """Position of a row label among the papers' row orders ("X" also orders "X (...)")."""
    for i, name in enumerate(order):
        if label == name or label.startswith(name + " ("):
            return i
    return len(order)


def _source(key: str | None, protocol: str, table: str) -> Table2Source | None:
    """The paper table beside rows of ``protocol`` whose method paper ``key`` lists."""
    if key is None:
        return None
    return next((s for s in paper(key).sources(table) if s.protocol == protocol), None)


def _row_order(rec: dict, order: tuple[str, ...]) -> tuple:
    training, method, protocol = rec["training"], rec["method"], rec["protocol"]
    return (
        PROTOCOL_ORDER.index(protocol) if protocol in PROTOCOL_ORDER else len(PROTOCOL_ORDER),
        TRAINING_ORDER.index(training) if training in TRAINING_ORDER else len(TRAINING_ORDER),
        _order_index(method, order),
        method,
    )


def _paper_cell(
    numbers: pd.DataFrame, training: str | None, label: str, dataset: str, metric: str
) -> float | None:
    """A paper's value for a row; "BM25+X" is printed "X+BM25" in some papers (xMoCo).
    ``training`` None: the paper's table has no setting to match (AOpt's Tables 3 and 4)."""
    labels = [label]
    if label.startswith("BM25+"):
        labels.append(label.removeprefix("BM25+") + "+BM25")
    setting = {} if training is None else {"setting": training}
    for name in labels:
        value = lookup(numbers, **setting, method=name, dataset=dataset, metric=metric)
        if value is not None:
            return value
    return None


def shared_table(
    layout: Layout, metrics: list[dict], scale: str, row_map: dict[str, Any], **cfg: Any
) -> pd.DataFrame:
    """One row per (protocol, training, method), columns per dataset x ``layout.columns``.

    ``row_map``: our method name -> ``{"method": paper's label, "training": "None" | "Single"
    | "Multi"}``; without ``training`` it is Single when the train set has one dataset and Multi
    when it has several (``train_sets`` in cfg may name sets: ``{"multi": ["nq", ...]}``).
    ``split_equiv`` (default: squad dev = the paper's squad test) says which of our splits are
    the paper's test sets; only those get a paper value. ``precision``: per cell
    (``drpipe.tables.precision.cell_key``) the reports of its training and encoding, as
    ``read_precision`` returns them; each row then gets a ``precision`` column (and the note).

    A ``row_map`` entry names the ``paper`` whose numbers sit beside it (a registered paper;
    absent or null: none, and the row says so in its notes) and may carry a ``protocol``
    (AOpt: "leak-free", or "uses the test answers (oracle)"); rows without one are "standard".
    A paper value is looked up in the table the paper declares for the row's protocol
    (``Paper.sources``). Oracle rows sort after every other row and are never merged with a
    row of another protocol. ``row_notes``: note keys every row carries besides its own.
    An entry's ``paper_method`` makes the row stand beside another label's paper numbers (a
    released checkpoint beside the numbers its paper printed for it).
    """
    named = cfg.get("train_sets", {})
    equiv = cfg.get("split_equiv", DEFAULT_SPLIT_EQUIV)
    precision = cfg.get("precision")
    order = row_order()
    tables: dict[tuple[str, str], pd.DataFrame] = {}

    def numbers_of(key: str, table: str) -> pd.DataFrame:
        if (key, table) not in tables:
            frame = load_paper_numbers(key)
            tables[key, table] = frame[frame["table"] == table]
        return tables[key, table]

    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    seen: dict[tuple[str, str, str, str], dict] = {}
    for m in metrics:
        training, label = paper_row(m, row_map, named)
        protocol = str(row_map[m["method"]].get("protocol", STANDARD))
        d = m["dataset"]
        cell = (protocol, training, label, d)
        if cell in seen:
            other = seen[cell]
            raise ValueError(
                f"two metrics for Table {layout.table} row ({training}, {label}) on "
                f"{m['dataset']}: {other['method']}/{other['train_set']}/{other['split']} and "
                f"{m['method']}/{m['train_set']}/{m['split']}"
            )
        seen[cell] = m
        row = rows.setdefault(
            (protocol, training, label),
            {"_train_sets": [], "_paper": False, "_cite": None, "_kinds": set(),
             "_precision": []},
        )  # fmt: skip
        if precision is not None:
            row["_precision"].append(precision.get(cell_key(m["method"], m["train_set"], d), {}))
        key = row_map[m["method"]].get("paper")
        row["_kinds"] |= row_kinds(m["method"], m["train_set"]) | (
            {"paper"} if key is None else set()
        )
        if m["train_set"] and m["train_set"] not in row["_train_sets"]:
            row["_train_sets"].append(m["train_set"])
        split = paper_split(d, m["split"], equiv)
        source = _source(key, protocol, layout.table) if split == "test" else None
        row[f"split_{d}"] = m["split"]
        row[f"n_questions_{d}"] = m["n_questions"]
        for name in layout.per_dataset:
            row[f"{name}_{d}"] = m.get(name)
        for col in layout.columns:
            ours = float(layout.value(m, col))
            theirs = None
            if source is not None:
                numbers = numbers_of(key, source.table)
                setting = training if source.by_setting else None
                paper_label = row_map[m["method"]].get("paper_method", label)
                theirs = _paper_cell(numbers, setting, paper_label, d, col)
                if theirs is not None:
                    row["_cite"] = source.cite
            row[f"{d}_{col}"] = r2(ours)
            row[f"{d}_{col}_paper"] = theirs
            row[f"{d}_{col}_diff"] = diff(ours, theirs)
            row["_paper"] |= theirs is not None

    datasets = sorted({m["dataset"] for m in metrics}, key=dataset_key)
    columns = ["scale", "training", "method", "protocol", "train_set", "source"]
    for d in datasets:
        columns += [f"split_{d}", f"n_questions_{d}", *(f"{n}_{d}" for n in layout.per_dataset)]
        for col in layout.columns:
            columns += [f"{d}_{col}", f"{d}_{col}_paper", f"{d}_{col}_diff"]

    setup = cfg.get("setup")
    if setup is not None:
        columns.append("notes")
    if precision is not None:
        columns.append("precision")
    # Multi rows of several train sets (each paper's own Multi set) say so.
    multi_sets = {
        ts for (_, training, _), row in rows.items() if training == "Multi"
        for ts in row["_train_sets"]
    }  # fmt: skip
    records = []
    for (protocol, training, label), row in rows.items():
        cite = row.pop("_cite")
        kinds = row.pop("_kinds") | set(layout.row_notes) | set(cfg.get("row_notes", ()))
        if training == "Multi" and len(multi_sets) > 1:
            kinds.add("multi")
        cells = row.pop("_precision")
        if precision is not None:
            row["precision"] = row_precision(cells)
            kinds |= {"precision"} if row["precision"] else set()
        if setup is not None:
            row["notes"] = "; ".join(note_keys(kinds, scale))
        source = REPRODUCED + (f" | paper: {cite}" if row.pop("_paper") else "")
        if protocol == ORACLE:
            source += " | uses the test answers (oracle): an upper bound, not comparable"
        train_set = "+".join(row.pop("_train_sets"))
        records.append(
            {"scale": scale, "training": training, "method": label, "protocol": protocol}
            | {"train_set": train_set, "source": source}
            | row
        )
    records.sort(key=lambda rec: _row_order(rec, order))
    frame = pd.DataFrame.from_records(records, columns=columns)
    for d in datasets:
        frame[f"n_questions_{d}"] = frame[f"n_questions_{d}"].astype("Int64")
        for col in layout.columns:
            for suffix in ("", "_paper", "_diff"):
                frame[f"{d}_{col}{suffix}"] = frame[f"{d}_{col}{suffix}"].astype(float)
    return frame.reset_index(drop=True)


def shared_markdown(
    layout: Layout, frame: pd.DataFrame, scale: str, notes: dict[str, str] | None = None
) -> str:
    """The frame of ``shared_table`` as Markdown: one line per (row, dataset), the orderings
    below it, the notes, and the oracle rows in a block of their own."""
    layout_cite = next(
        (s.cite for s in paper(LAYOUT_PAPER).sources(layout.table) if s.protocol == STANDARD),
        f"Table {layout.table}",
    )
    explained = papers()  # their paragraphs on protocol blocks, when such rows are there
    datasets = sorted(
        {c[len("split_") :] for c in frame.columns if c.startswith("split_")}, key=dataset_key
    )
    cols = list(zip(layout.columns, layout.headers, strict=True))
    with_paper = [
        c for c, _ in cols if any(frame[f"{d}_{c}_paper"].notna().any() for d in datasets)
    ]
    protocols = (
        frame["protocol"] if "protocol" in frame.columns else pd.Series(STANDARD, frame.index)
    )
    # A Protocol column only when AOpt rows are there (the usual table is unchanged).
    show_protocol = bool((protocols != STANDARD).any())
    headers = ["Training", "Method", *(["Protocol"] if show_protocol else [])]
    headers += ["Train set", "Dataset (split, n)"]
    headers += [name.replace("_", " ").capitalize() for name in layout.per_dataset]
    show_notes = notes is not None and "notes" in frame.columns
    first = datasets[0] if datasets else ""
    for c, h in cols:
        headers += (
            [f"{h} ours", f"{h} paper"] + comparison_headers(frame, f"{first}_{c}", h)
            if c in with_paper
            else [f"{h} ours"]
        )
    if show_notes:
        headers.append("Notes")
    rows, oracle_rows = [], []
    for i, r in frame.iterrows():
        for d in datasets:
            if pd.isna(r[f"{d}_{layout.columns[0]}"]):
                continue
            row = [r["training"], r["method"], *([protocols[i]] if show_protocol else [])]
            row.append(r["train_set"])
            row.append(f"{d} ({r[f'split_{d}']}, n={r[f'n_questions_{d}']})")
            row += [r[f"{name}_{d}"] for name in layout.per_dataset]
            for c, _ in cols:
                row.append(r[f"{d}_{c}"])
                if c in with_paper:
                    row += [r[f"{d}_{c}_paper"], *comparison_cell(r, f"{d}_{c}")]
            if show_notes:
                row.append(_notes_cell(r))
            (oracle_rows if protocols[i] == ORACLE else rows).append(row)
    evaluated = ", ".join(
        sorted(
            {
                f"{d}/{r[f'split_{d}']}"
                for _, r in frame.iterrows()
                for d in datasets
                if pd.notna(r[f"split_{d}"])
            }
        )
    )
    head = [
        f"# {layout.title}, scale `{scale}`",
        "",
        f"Evaluated on (dataset/split): {evaluated or 'nothing'}.",
        "",
        f'Reproduced values ("ours") are computed by this pipeline. Paper values are '
        f"{layout_cite} (test sets; DPR's SQuAD test set is SQuAD v1.1 dev) and are given only "
        f"where the paper printed that number ({layout.printed}). " + comparison_note(scale, frame),
        *_other_papers(frame, layout.table),
        *[line for text in layout.intro for line in ("", text)],
        "",
        f"Source: {citation(LAYOUT_PAPER)}.",
        "",
        "",
    ]
    text = "\n".join(head) + md_table(headers, rows) + "\n"
    orders = [
        f"- {d} {h}: {line}\n"
        for d in datasets
        for c, h in cols
        if c in with_paper and (line := ordering(frame[protocols == STANDARD], f"{d}_{c}"))
    ]
    if orders:
        text += (
            "\n## Ordering of the methods the papers also report (rows without a test answer)"
            "\n\n" + "".join(orders)
        )
    if show_protocol:
        text += "".join(
            "\n" + p.text(layout.table)["protocols"]
            for p in explained
            if "protocols" in p.text(layout.table)
        )
    if show_notes:
        used = [k for k in NOTE_ORDER if any(k in str(n).split("; ") for n in frame["notes"])]
        text += "\n## Notes: where this setup differs from the papers'\n\n" + "".join(
            f"- **{k}**: {notes[k]}\n" for k in used if k in notes
        )
    if oracle_rows:
        text += (
            "\n## Oracle rows: they use the test answers (oracle)\n\n"
            + "".join(
                p.text(layout.table)[ORACLE] for p in explained if ORACLE in p.text(layout.table)
            )
            + md_table(headers, oracle_rows)
            + "\n"
        )
    return text


def _notes_cell(row: pd.Series) -> str:
    """The row's note keys, its precision spelled out beside the key."""
    keys = str(row["notes"]).split("; ") if pd.notna(row["notes"]) else []
    text = row.get("precision")
    return "; ".join(f"precision: {text}" if k == "precision" and text else k for k in keys)


def _other_papers(frame: pd.DataFrame, table: str) -> list[str]:
    """A line naming the rows whose paper value comes from their own method's paper."""
    cites = [
        s.cite
        for p in papers()
        if p.key != LAYOUT_PAPER
        for s in p.sources(table)
        if s.protocol == STANDARD
    ]
    own = {
        m: cite
        for m, src in zip(frame["method"], frame["source"], strict=True)
        for cite in cites
        if cite in str(src)
    }
    if not own:
        return []
    named = "; ".join(f"{m}: {c}" for m, c in own.items())
    return ["", f"Except these rows, whose paper values come from their own paper: {named}."]


def table_command(
    args: argparse.Namespace,
    name: str,
    build: Callable[..., pd.DataFrame],
    records: list[dict],
    markdown: Callable[[pd.DataFrame, str, dict[str, str] | None], str],
    notes_of: Callable[[dict, str], dict[str, str]],
) -> int:
    """What ``drpipe tables <name>`` does: the frame from ``records`` and ``--cfg`` (``scale``,
    ``row_map``; ``train_sets``, ``split_equiv``, ``setup``, ``tolerance``, ``precision`` with
    the files of ``--reports``), the paper comparison the scale allows, the CSV, and the
    Markdown with the notes of ``setup``."""
    cfg = dict(args.cfg)
    scale = scale_of(cfg)
    row_map = need(cfg, "row_map")
    extra = {k: cfg[k] for k in ("train_sets", "split_equiv", "setup") if k in cfg}
    if "precision" in cfg:
        extra["precision"] = read_precision(cfg["precision"], args.reports)
    frame = build(records, scale, row_map, **extra)
    frame = comparable(frame, scale, groups=["protocol"], tolerance=cfg.get("tolerance"))
    write_csv(frame, args.out)
    if args.md:
        notes = notes_of(cfg["setup"], scale) if "setup" in cfg else None
        if notes is not None and "precision" in extra:
            notes["precision"] = precision_note(extra["precision"].values())
        write_text(markdown(frame, scale, notes), args.md)
    log.info("%s: %d rows from %d metrics files -> %s", name, len(frame), len(records), args.out)
    return 0


def add_reports_argument(p: argparse.ArgumentParser) -> None:
    """``--reports``: the training and encoding reports that ``--cfg``'s ``precision`` names."""
    p.add_argument("--reports", nargs="*", default=[],
                   help="training and encoding reports (cfg.precision says whose)")  # fmt: skip
