"""Writing tables and figures: CSV, Markdown and PNG, each atomically (temporary name, rename),
with the same bytes for the same content."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from drpipe.io import atomic_path


def fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return ""
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def md_table(headers: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def write_csv(frame: pd.DataFrame, path: str | Path) -> None:
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False, float_format="%.2f")


def write_text(text: str, path: str | Path) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def save_figure(fig: Any, path: str | Path) -> None:
    """Save a matplotlib figure as PNG and close it. No timestamp or software metadata: the same
    plot gives the same bytes."""
    import matplotlib.pyplot as plt  # lazy: matplotlib costs ~0.5 s at CLI start-up

    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", metadata={"Software": None})
    plt.close(fig)


def new_figure(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
    """``plt.subplots(...)`` on the non-interactive Agg backend (no display needed)."""
    import matplotlib  # lazy: matplotlib costs ~0.5 s at CLI start-up

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(*args, **kwargs)
