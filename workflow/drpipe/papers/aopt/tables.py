"""AOpt's Table 3 and Figures 6 and 7, our numbers beside the paper's.

Both protocols are reported and never mixed: ``oracle`` rows reproduce the paper's protocol,
whose labels come from the evaluated (test) questions' own answers, so they are an upper
bound and say "uses the test answers (oracle)"; ``leak-free`` rows read no test answer. The
paper's numbers (``paper_numbers/aopt.csv``) are oracle numbers and sit beside our oracle rows
and the DPR baseline only.

Inputs are metrics JSON files of ``drpipe evaluate`` and the grid CSVs of ``drpipe aopt
linear-grid``; nothing here invents a row.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from drpipe.cliutil import need
from drpipe.errors import InputError
from drpipe.papers.aopt import LINEAR_LABEL, TABLE3
from drpipe.papers.numbers import citation, load_paper_numbers, paper_value
from drpipe.tables.cli import add_figure_command, add_table_command, command_group
from drpipe.tables.compare import comparable, scale_of
from drpipe.tables.metrics import KS, read_metrics
from drpipe.tables.output import md_table, new_figure, save_figure, write_csv, write_text
from drpipe.tables.protocols import LEAKFREE, ORACLE, PROTOCOL_ORDER, STANDARD
from drpipe.tables.rows import REPRODUCED

log = logging.getLogger(__name__)

PROTOCOLS = {"base": STANDARD, "leakfree": LEAKFREE, "oracle": ORACLE}
ORACLE_NOTE = (
    "Oracle rows use the test answers (oracle): their pseudo-labels come from the answers of "
    "the very questions they are evaluated on (the paper's protocol, AOpt section 3.1.1: "
    "'experiments on the test sets'). They are an upper bound, not a retriever's accuracy, "
    "and are not comparable with rows that never saw a test answer."
)
LEAKFREE_NOTE = (
    "Leak-free rows read no test answer: passage vectors are optimised with the labels of "
    "training questions (their answers), question vectors by pseudo-relevance feedback (the "
    "top-m retrieved passages as relevant, no answers)."
)
ROUNDS_NOTE = (
    "A round is one epoch of the paper (AOpt 2.3.3, 3.1.4): one gradient step per vector on the "
    "pseudo-labels of its current top-k, then the index is rebuilt, retrieval rerun and the "
    "labels rebuilt. The oracle rows rise with the rounds (Figure 7): enough steps toward the "
    "test answers put every question whose top-k holds an answer at rank 1, so their size "
    "depends on the rounds and the learning rate relative to the vectors' scale."
)
PAPER_DATASETS = ("nq", "triviaqa")


# --------------------------------------------------------------------------- Table 3


def _paper_baseline(numbers: pd.DataFrame, dataset: str, k: int) -> float | None:
    """The paper's DPR at top-k: its replication DPR* for top-1/5 (the only DPR row with them;
    the prose's '+11.4% top-1' is against it) and DPR(single) for top-20/100."""
    if k in (1, 5):
        return paper_value(numbers, table="3", setting="unspecified", method="DPR*",
                           dataset=dataset, metric=f"top{k}")  # fmt: skip
    return paper_value(
        numbers, table="3", setting="Single", method="DPR", dataset=dataset, metric=f"top{k}"
    )


def table3(metrics: list[dict], scale: str, rows: dict[str, dict], **_: Any) -> pd.DataFrame:
    """One row per (protocol, method, dataset): top-k, gain over our DPR, the paper's value and
    gain on the same dataset (or NQ, the paper's main one, when ours is not the paper's)."""
    numbers = load_paper_numbers("aopt")
    base = {}
    for m in metrics:
        spec = rows.get(m["method"])
        if spec is None:
            raise SystemExit(f"error: --cfg rows has no entry for run {m['method']!r}")
        if spec["protocol"] == "base":
            base[(m["dataset"], m["split"])] = m
    records = []
    seen = set()
    for m in metrics:
        spec = rows[m["method"]]
        key = (spec["protocol"], spec["method"], m["dataset"], m["split"])
        if key in seen:
            raise ValueError(f"two metrics for AOpt Table 3 row {key}")
        seen.add(key)
        ref = base.get((m["dataset"], m["split"]))
        if ref is None:
            raise InputError(
                m["method"], None, f"no base run metrics for {m['dataset']}/{m['split']}"
            )
        paper_ds = m["dataset"] if m["dataset"] in PAPER_DATASETS else "nq"
        with_paper = spec["protocol"] in ("base", "oracle")
        rec: dict[str, Any] = {
            "scale": scale,
            "protocol": PROTOCOLS[spec["protocol"]],
            "method": spec["method"],
            "run": m["method"],
            "rounds": int(spec.get("rounds", 0)),
            "dataset": m["dataset"],
            "split": m["split"],
            "n_questions": m["n_questions"],
            "paper_dataset": paper_ds if with_paper else "",
        }
        found = False
        for k in KS:
            ours = float(m["top_k"][str(k)])
            rec[f"top{k}"] = round(ours, 2)
            rec[f"gain_top{k}"] = round(ours - float(ref["top_k"][str(k)]), 2)
            theirs = gain = None
            if with_paper:
                if spec["protocol"] == "base":
                    theirs = _paper_baseline(numbers, paper_ds, k)
                else:
                    theirs = paper_value(numbers, table="3", setting="unspecified",
                                         method=spec["method"], dataset=paper_ds,
                                         metric=f"top{k}")  # fmt: skip
                    b = _paper_baseline(numbers, paper_ds, k)
                    gain = None if theirs is None or b is None else round(theirs - b, 2)
            found |= theirs is not None
            rec[f"top{k}_paper"] = theirs
            rec[f"gain_top{k}_paper"] = gain
            same = theirs is not None and paper_ds == m["dataset"]
            rec[f"top{k}_diff"] = round(ours - theirs, 2) if same else None
        rec["source"] = REPRODUCED + (f" | paper: {TABLE3} ({paper_ds} test)" if found else "")
        records.append(rec)
    order = {p: i for i, p in enumerate(PROTOCOL_ORDER)}
    arm_order = {"base": 0, "linear": 1, "query": 2, "passage": 3, "hybrid": 4}
    records.sort(
        key=lambda r: (
            r["dataset"],
            order[r["protocol"]],
            arm_order.get(rows[r["run"]].get("arm", ""), 9),
        )
    )
    columns = ["scale", "protocol", "method", "run", "rounds", "dataset", "split",
               "n_questions", "paper_dataset"]  # fmt: skip
    for k in KS:
        columns += [f"top{k}", f"gain_top{k}", f"top{k}_paper", f"gain_top{k}_paper",
                    f"top{k}_diff"]  # fmt: skip
    columns.append("source")
    frame = pd.DataFrame.from_records(records, columns=columns)
    frame["n_questions"] = frame["n_questions"].astype("Int64")
    for k in KS:
        for name in (f"top{k}", f"gain_top{k}", f"top{k}_paper", f"gain_top{k}_paper",
                     f"top{k}_diff"):  # fmt: skip
            frame[name] = frame[name].astype(float)
    return frame


def table3_markdown(frame: pd.DataFrame, scale: str) -> str:
    headers = ["Protocol", "Method", "Rounds", "Ours on (split, n)"]
    for k in KS:
        headers += [f"Top-{k}", f"gain {k}", f"paper {k}", f"paper gain {k}"]
    blocks = []
    for protocol in PROTOCOL_ORDER:
        part = frame[frame["protocol"] == protocol]
        if part.empty:
            continue
        rows = []
        for _, r in part.iterrows():
            row = [r["protocol"], r["method"], r["rounds"],
                   f"{r['dataset']} ({r['split']}, n={r['n_questions']})"]  # fmt: skip
            for k in KS:
                row += [r[f"top{k}"], r[f"gain_top{k}"], r[f"top{k}_paper"],
                        r[f"gain_top{k}_paper"]]  # fmt: skip
            rows.append(row)
        blocks.append(md_table(headers, rows))
    head = [
        f"# AOpt Table 3: top-k retrieval accuracy (%), scale `{scale}`",
        "",
        'Reproduced values are computed by this pipeline; "gain" is ours minus our DPR '
        "(the run AOpt starts from) on the same questions. Paper values are "
        f"{TABLE3} (test sets), beside the DPR row and the oracle rows only, on the "
        "paper's dataset named in `paper_dataset` of the CSV (NQ where ours is not one of "
        "the paper's); the paper's gain is against its DPR* replication for top-1/5 and its "
        "DPR(single) row for top-20/100. Rounds: rounds of vector updates behind the row "
        "(AOpt-hybrid: passage rounds after AOpt-query's rounds, which start it).",
        "",
        ROUNDS_NOTE,
        "",
        LEAKFREE_NOTE,
        "",
        ORACLE_NOTE,
        "",
        f"Source: {citation('aopt')}.",
        "",
        "",
    ]
    return "\n".join(head) + "\n\n".join(blocks) + "\n"


# --------------------------------------------------------------------------- Figure 6


def read_grid(path: str | Path, ks: Sequence[int] = KS) -> pd.DataFrame:
    frame = pd.read_csv(path)
    need_cols = ["beta", "gamma", "n_questions", *(f"top{k}" for k in ks)]
    missing = [c for c in need_cols if c not in frame.columns]
    if missing:
        raise InputError(path, "header", f"missing columns {missing}")
    if frame.empty or frame[["beta", "gamma"]].duplicated().any():
        raise InputError(path, None, "empty grid or a repeated (beta, gamma)")
    return frame


def figure6_table(grids: Sequence[pd.DataFrame], protocols: Sequence[str]) -> pd.DataFrame:
    if len(grids) != len(protocols):
        raise ValueError(f"{len(grids)} grids but {len(protocols)} protocols")
    parts = [g.assign(protocol=PROTOCOLS[p]) for g, p in zip(grids, protocols, strict=True)]
    out = pd.concat(parts, ignore_index=True)
    cols = ["protocol", "beta", "gamma", "n_questions", *(f"top{k}" for k in KS)]
    return out[cols]


def grid_optimum(frame: pd.DataFrame, k: int) -> pd.Series:
    """The (beta, gamma) of the highest top-k (ties: smallest beta, then gamma nearest 0)."""
    order = frame.assign(_g=-frame["gamma"]).sort_values(
        [f"top{k}", "beta", "_g"], ascending=[False, True, True]
    )
    return order.iloc[0]


def paper_optimum(numbers: pd.DataFrame) -> tuple[float, float] | None:
    """The (beta, gamma) of the paper's weighted-based row (numbers.csv), if it has one: Figure
    6's own cells exist only as an image, so this point is all of the paper that can stand
    beside our heat maps."""
    methods = numbers.loc[numbers["paper"] == "aopt", "method"]
    found = {(float(m[1]), float(m[2])) for m in map(LINEAR_LABEL.fullmatch, methods) if m}
    if len(found) > 1:
        raise ValueError(f"AOpt's numbers name several weighted-based optima: {sorted(found)}")
    return found.pop() if found else None


def plot_figure6(
    table: pd.DataFrame, out_png: str | Path, title: str,
    paper: tuple[float, float] | None = None,
) -> None:  # fmt: skip
    """AOpt Figure 6: heat maps of top-k over beta (x) and gamma (y), one row per protocol;
    our optimum a red star, the paper's (``paper``, chosen on NQ) a white circle where the
    grid holds it."""
    protocols = list(dict.fromkeys(table["protocol"]))
    fig, axes = new_figure(
        len(protocols), len(KS), figsize=(3.2 * len(KS), 3.0 * len(protocols)), dpi=110,
        squeeze=False,
    )  # fmt: skip
    for i, protocol in enumerate(protocols):
        part = table[table["protocol"] == protocol]
        betas = sorted(part["beta"].unique())
        gammas = sorted(part["gamma"].unique(), reverse=True)
        for j, k in enumerate(KS):
            ax = axes[i][j]
            grid = part.pivot(index="gamma", columns="beta", values=f"top{k}")
            grid = grid.reindex(index=gammas, columns=betas)
            values = grid.to_numpy(dtype=float)
            lo, hi = float(values.min()), float(values.max())
            if hi - lo < 0.5:  # a flat grid: a readable colour scale around its value
                lo, hi = lo - 0.5, hi + 0.5
            im = ax.imshow(values, cmap="viridis", aspect="auto", origin="upper",
                           vmin=lo, vmax=hi)  # fmt: skip
            ax.set_xticks(range(len(betas)), [f"{b:g}" for b in betas], fontsize=6)
            ax.set_yticks(range(len(gammas)), [f"{g:g}" for g in gammas], fontsize=6)
            best = grid_optimum(part, k)
            ax.plot(betas.index(best["beta"]), gammas.index(best["gamma"]), "r*", ms=8)
            ours = f"best {best[f'top{k}']:.1f} at β={best['beta']:g}, γ={best['gamma']:g}"
            theirs = ""
            if paper is not None:
                theirs = f"\npaper (NQ): β={paper[0]:g}, γ={paper[1]:g}"
                if paper[0] in betas and paper[1] in gammas:
                    ax.plot(betas.index(paper[0]), gammas.index(paper[1]), "o", ms=7,
                            mfc="none", mec="white", mew=1.5)  # fmt: skip
                else:
                    theirs += " (not in this grid)"
            ax.set_title(f"{protocol}\nTop-{k}: {ours}{theirs}", fontsize=7)
            ax.set_xlabel("β (relevant)", fontsize=7)
            ax.set_ylabel("γ (irrelevant)", fontsize=7)
            fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04).ax.tick_params(labelsize=6)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    save_figure(fig, out_png)


# --------------------------------------------------------------------------- Figure 7


def figure7_table(metrics: list[dict], series: Sequence[Sequence[Any]]) -> pd.DataFrame:
    """Long table (protocol, arm, round, k, accuracy, n_questions) from per-round metrics."""
    if len(metrics) != len(series):
        raise ValueError(f"{len(metrics)} metrics files but {len(series)} series entries")
    rows = []
    for m, (protocol, arm, rnd) in zip(metrics, series, strict=True):
        for k in KS:
            rows.append({"protocol": PROTOCOLS[protocol], "arm": arm, "round": int(rnd),
                         "k": k, "accuracy": float(m["top_k"][str(k)]),
                         "n_questions": m["n_questions"], "run": m["method"]})  # fmt: skip
    return pd.DataFrame(rows)


def plot_figure7(table: pd.DataFrame, out_png: str | Path, title: str) -> None:
    """AOpt Figure 7: top-k after each round, (a) passage-centric, (b) query-centric."""
    protocols = list(dict.fromkeys(table["protocol"]))
    arms = [("passage", "(a) passage-centric"), ("query", "(b) query-centric")]
    fig, axes = new_figure(
        len(protocols), 2, figsize=(9, 3.2 * len(protocols)), dpi=110, squeeze=False
    )
    for i, protocol in enumerate(protocols):
        for j, (arm, name) in enumerate(arms):
            ax = axes[i][j]
            part = table[(table["protocol"] == protocol) & (table["arm"] == arm)]
            for k in KS:
                curve = part[part["k"] == k].sort_values("round")
                ax.plot(curve["round"], curve["accuracy"], marker="o", label=f"Top-{k}")
            ax.set_title(f"{name}; {protocol}", fontsize=8)
            ax.set_xticks(sorted(part["round"].unique()))
            ax.set_xlabel("round (0 = DPR)")
            ax.set_ylabel("top-k accuracy (%)")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    save_figure(fig, out_png)


# --------------------------------------------------------------------------- CLI


def _where(cfg: dict[str, Any]) -> str:
    return f"{cfg.get('dataset', '')}/{cfg.get('split', '')}".strip("/")


def _cmd_table3(args: argparse.Namespace) -> int:
    scale = scale_of(args.cfg)
    frame = table3(read_metrics(args.metrics), scale, need(args.cfg, "rows"))
    groups = ["protocol", "dataset", "split"]
    frame = comparable(frame, scale, groups=groups, tolerance=args.cfg.get("tolerance"))
    write_csv(frame, args.out)
    if args.md:
        write_text(table3_markdown(frame, scale), args.md)
    log.info("AOpt table3: %d rows -> %s", len(frame), args.out)
    return 0


def _cmd_figure6(args: argparse.Namespace) -> int:
    cfg = args.cfg
    scale = need(cfg, "scale")
    protocols = need(cfg, "protocols")
    table = figure6_table([read_grid(p) for p in args.grids], protocols)
    title = (f"AOpt Figure 6 reproduced: equation 9 over β, γ (scale {scale}, {_where(cfg)}); "
             "star: our best, circle: the paper's")  # fmt: skip
    plot_figure6(table, args.out, title, paper=paper_optimum(load_paper_numbers("aopt")))
    if args.csv:
        write_csv(table.assign(scale=scale, source=REPRODUCED), args.csv)
    return 0


def _cmd_figure7(args: argparse.Namespace) -> int:
    cfg = args.cfg
    scale = need(cfg, "scale")
    table = figure7_table(read_metrics(args.metrics), need(cfg, "series"))
    title = f"AOpt Figure 7 reproduced: top-k per round (scale {scale}, {_where(cfg)})"
    plot_figure7(table, args.out, title)
    if args.csv:
        write_csv(table.assign(scale=scale, source=REPRODUCED), args.csv)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    group = command_group(sub, "tables-aopt", "AOpt's Table 3 and Figures 6 and 7")
    add_table_command(
        group, "table3", _cmd_table3, "AOpt Table 3: both protocols, paper values beside"
    )
    add_figure_command(
        group, "figure6", _cmd_figure6, "AOpt Figure 6: heat maps of the (beta, gamma) grid",
        inputs="--grids", inputs_help="grid CSVs, one per protocol",
    )  # fmt: skip
    add_figure_command(
        group, "figure7", _cmd_figure7, "AOpt Figure 7: top-k after each round",
        inputs_help="metrics JSON, one per point",
    )  # fmt: skip
