"""AOpt's cross-key config rules (run at load by drpipe.config.check_consistency)."""

from __future__ import annotations


def check_config(config: dict) -> list[str]:
    """AOpt starts from each dataset's Single model (``tables.single``), one dataset per model."""
    single = config["tables"].get("single") or {}
    out, by_train_set = [], {}
    for i, d in enumerate(config["aopt"]["datasets"]):
        ts = single.get(d)
        if ts is None:
            out.append(
                f"key aopt.datasets[{i}]: '{d}' has no train set in tables.single (AOpt starts "
                f"from its Single model); add tables.single.{d} or drop the dataset"
            )
        else:
            by_train_set.setdefault(ts, []).append(d)
    for ts, found in by_train_set.items():
        if len(found) > 1:
            out.append(
                f"key aopt.datasets: {found} share the Single train set '{ts}' (tables.single); "
                "AOpt needs exactly one dataset per trained model: keep one of them"
            )
    return out
