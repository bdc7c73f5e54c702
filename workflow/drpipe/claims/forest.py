"""A forest plot of the papers' claims: per claim, each run's difference (a - b, points) with
its 95% paired-bootstrap interval, runs side by side (e.g. mini and squad), the zero line and a
margin claim's margin drawn, oracle claims (they saw the test answers) marked."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from drpipe.tables.output import new_figure, save_figure

# Marker colour by verdict: what the rules decided, read at a glance.
VERDICT_COLOURS = {
    "holds": "tab:green",
    "reversed": "tab:red",
    "not significant": "tab:gray",
    "not shown": "tab:orange",
}


def plot_forest(tables: dict[str, pd.DataFrame], out_png: str | Path) -> int:
    """Draw every claim tested in any table (indexed by claim id); returns the claims drawn."""
    ids = [i for i in dict.fromkeys(i for t in tables.values() for i in t.index)
           if any(i in t.index and pd.notna(t.loc[i, "diff"]) for t in tables.values())]  # fmt: skip
    n_runs = len(tables)
    fig, ax = new_figure(figsize=(9.0, 0.42 * len(ids) * n_runs + 1.6), dpi=110)
    markers = "osD^v<>"
    y_ticks, y_labels = [], []
    for i, cid in enumerate(ids):
        base = -(i * (n_runs + 1))
        for j, (label, table) in enumerate(tables.items()):
            if cid not in table.index or pd.isna(table.loc[cid, "diff"]):
                continue
            rec = table.loc[cid]
            y = base - j
            colour = VERDICT_COLOURS.get(str(rec["verdict"]), "black")
            low, high = float(rec["ci_low"]), float(rec["ci_high"])
            ax.plot([low, high], [y, y], color=colour, linewidth=1.6)
            ax.plot([float(rec["diff"])], [y], marker=markers[j % len(markers)], color=colour,
                    linestyle="none", label=label if i == 0 else None)  # fmt: skip
            margin = rec.get("margin")
            if margin is not None and pd.notna(margin):
                ax.plot([float(margin)], [y], marker="|", color="black", markersize=10)
        family = next((str(t.loc[cid, "family"]) for t in tables.values()
                       if cid in t.index and "family" in t.columns), "")  # fmt: skip
        y_ticks.append(base - (n_runs - 1) / 2)
        y_labels.append(f"{cid} (oracle)" if family == "oracle" else str(cid))
    ax.axvline(0.0, color="black", linewidth=0.8)
    ax.set_yticks(y_ticks)
    ax.set_yticklabels(y_labels, fontsize=7)
    ax.set_xscale("symlog", linthresh=2.0)
    ax.set_xlabel("difference a - b (points; symlog scale), 95% paired-bootstrap interval")
    runs = ", ".join(f"{m} {label}" for m, label in zip(markers, tables, strict=False))
    ax.set_title(f"The papers' claims (markers: {runs}; colour: verdict; | : margin)", fontsize=8)
    ax.grid(True, axis="x", alpha=0.3)
    handles = [ax.plot([], [], color=c, linewidth=3)[0] for c in VERDICT_COLOURS.values()]
    legend = ax.legend(handles, list(VERDICT_COLOURS), fontsize=7, loc="lower right")
    ax.add_artist(legend)
    fig.tight_layout()
    save_figure(fig, out_png)
    return len(ids)
