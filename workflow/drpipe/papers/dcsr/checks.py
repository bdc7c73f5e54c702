"""DCSR's cross-key config rules (run at load by drpipe.config.check_consistency)."""

from __future__ import annotations


def check_config(config: dict) -> list[str]:
    """Each dataset a DCSR table evaluates needs its Single train set (``tables.single``)."""
    tables = config["tables"]
    dcsr = tables.get("dcsr") or {}
    single = tables.get("single") or {}
    named = []
    for table in ("table3", "table4", "table5", "table7"):
        for i, d in enumerate((dcsr.get(table) or {}).get("datasets") or []):
            named.append((f"tables.dcsr.{table}.datasets[{i}]", d))
    if dcsr.get("table8"):
        named.append(("tables.dcsr.table8.dataset", dcsr["table8"]["dataset"]))
    table6 = dcsr.get("table6")
    if table6:
        named.append(("tables.dcsr.table6.target", table6["target"]))
        named += [(f"tables.dcsr.table6.transfers.{k}", d) for k, d in table6["transfers"].items()]
    return [
        f"key {key}: dataset '{d}' has no train set in tables.single; add tables.single.{d}"
        for key, d in named
        if single.get(d) is None
    ]
