"""The audit record as Markdown and HTML, and any table CSV as a standalone HTML page."""

from __future__ import annotations

import base64
import html
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from drpipe.io import atomic_path, write_json


def _short(obj: Any, limit: int = 160) -> str:
    text = obj if isinstance(obj, str) else json.dumps(obj, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _fmt(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, float):
        return f"{v:.2f}"
    return str(v)


def _md_table(headers: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for row in rows:
        out.append("| " + " | ".join(_fmt(v).replace("|", "\\|") for v in row) + " |")
    return out


def summary_lines(record: dict[str, Any]) -> list[str]:
    """The headline facts of an audit, one per line."""
    lines = []
    linked = sum(1 for c in record["cells"] if c["metrics"])
    lines.append(
        f"{len(record['cells'])} metric cells in {len(record['tables'])} tables; "
        f"{linked} traced to one metrics file, {len(record['cells']) - linked} ambiguous or untraced."
    )
    lines.append(
        f"{len(record['inputs'])} fetched inputs; "
        f"{len(record['checksum_mismatches'])} differ from their recorded checksums."
    )
    if record.get("records_without_file"):
        lines.append(
            f"{len(record['records_without_file'])} Snakemake records name files that no longer "
            "exist (deleted or moved since): set aside, listed in audit.json."
        )
    st = record.get("staleness")
    if st is not None:
        n = len(st["stale_jobs"])
        rules = ", ".join(f"{r} ({e['jobs']})" for r, e in st["by_rule"].items()) or "none"
        lines.append(f"Stale: {n} jobs would rerun under the current config and code: {rules}.")
    else:
        lines.append("Staleness not checked (run `drpipe audit` outside the workflow).")
    if "claims" in record:
        verdicts = ", ".join(f"{k}: {v}" for k, v in record["claims"]["verdicts"].items())
        lines.append(f"Claims: {verdicts}.")
    ag = record.get("against")
    if ag is not None:
        counts = ", ".join(f"{k}: {v}" for k, v in ag["file_status_counts"].items())
        lines.append(f"Against {ag['b']}: files {counts}.")
    return lines


def render_markdown(record: dict[str, Any]) -> str:
    out = [f"# Audit of `{record['results']}`", ""]
    out += [f"- {line}" for line in summary_lines(record)] + [""]

    out += ["## Table cells", ""]
    for table, info in record["tables"].items():
        out += [f"### `{table}` (rule `{info['rule']}`)", ""]
        rows = [
            [
                c["label"],
                c["column"],
                c["value"],
                c["metrics"] or "ambiguous: " + ", ".join(c["candidates"]),
            ]
            for c in record["cells"]
            if c["table"] == table
        ]
        out += _md_table(["Row", "Column", "Value", "Metrics file"], rows) + [""]

    out += ["## Lineage per metrics file", "",
            "Each chain runs from the metrics file back to the fetched inputs; steps are listed "
            "once below.", ""]  # fmt: skip
    for metrics, chain in record["lineage"].items():
        rules = " ← ".join(f"{record['steps'][s]['rule']}" for s in chain)
        out += [f"- `{metrics}`: {rules}"]
    out += [""]

    out += ["## Steps", ""]
    rows = []
    for jid, s in record["steps"].items():
        rows.append([s["rule"], f"`{jid}`", s["code"] or "", _short(s["cfg"]) if s["cfg"] else "",
                     s["seconds"], s["max_rss_mb"], ", ".join(s["reports"]) or ""])  # fmt: skip
    out += _md_table(
        ["Rule", "Output", "Code hash", "Config slice", "Wall (s)", "Peak RSS (MB)", "Reports"],
        rows,
    ) + [""]

    out += ["## Inputs", ""]
    out += _md_table(
        ["Name", "File", "sha256", "Bytes", "Origin"],
        [[r["name"], r["file"], r["sha256"], r["bytes"], r["origin"]] for r in record["inputs"]],
    ) + [""]
    if record["checksum_mismatches"]:
        out += ["### Checksum mismatches", ""]
        out += _md_table(
            ["File", "Problem", "Recorded", "Now", "Recorded by"],
            [[m["file"], m["problem"], m["recorded"], m["now"], m["by"]]
             for m in record["checksum_mismatches"]],
        ) + [""]  # fmt: skip

    st = record.get("staleness")
    if st is not None:
        out += ["## Staleness", "", f"Dry run: `{st['command']}` ({st['seconds']} s).", ""]
        if st["by_rule"]:
            out += _md_table(
                ["Rule", "Jobs", "Reasons", "Config changes", "Code changed"],
                [[r, e["jobs"], ", ".join(f"{k} ({v})" for k, v in e["reasons"].items()),
                  "; ".join(e["config_changes"]), "yes" if e["code_changed"] else ""]
                 for r, e in st["by_rule"].items()],
            ) + [""]  # fmt: skip
        else:
            out += ["Nothing would rerun: every recorded target matches the current config, code "
                    "and inputs.", ""]  # fmt: skip
        for u in st["unbuildable_targets"]:
            out += [f"- `{u['target']}` cannot be made by the current workflow: {u['error']}"]

    out += ["## Runtime per rule", ""]
    out += _md_table(
        ["Rule", "Jobs", "Wall (s, sum)", "Peak RSS (MB, max)"],
        [
            [r, e["jobs"], e["seconds"], e["max_rss_mb"]]
            for r, e in record["runtime_by_rule"].items()
        ],
    ) + [""]

    env = record["environment"]
    out += ["## Environment", ""]
    rec = env.get("recorded") or {}
    if rec:
        out += [
            f"- Packages: {_short(rec.get('packages'), 600)}",
            f"- CPU: {_short(rec.get('cpu') or rec.get('hardware'), 300)}",
            f"- torch: {_short(rec.get('torch'), 300)}",
            f"- FAISS: {_short(rec.get('faiss'), 200)}; BLAS: {_short(rec.get('blas'), 200)}; "
            f"Java: {_short(rec.get('java'), 200)}",
        ]
    else:
        out += ["- Not recorded by the run (no provenance.json with an environment block)."]
    machine = env.get("audit_machine") or {}
    out += [
        f"- Steps that recorded their own environment: {len(env['per_step'])} "
        f"({', '.join(env['per_step'][:8]) or 'none'})",
        f"- This audit ran on: {_short(machine.get('cpu'), 300)}",
        "",
    ]

    ag = record.get("against")
    if ag is not None:
        out += render_against(ag)
    return "\n".join(out) + "\n"


def render_against(ag: dict[str, Any]) -> list[str]:
    tol = ag["tolerance"]
    out = [f"## Against `{ag['b']}`", "",
           f"Tolerance for float values whose bytes differ: |a-b| <= {tol['atol']} + "
           f"{tol['rtol']}·|b|. 'equivalent': equal once timings, host names and the "
           "environment block of reports are set aside.", ""]  # fmt: skip
    out += _md_table(["Status", "Files"], [[k, v] for k, v in ag["file_status_counts"].items()])
    out += [""]
    for table, info in ag["tables"].items():
        counts = ", ".join(f"{k}: {v}" for k, v in info["status_counts"].items())
        out += [f"- `{table}`: {info['cells']} cells ({counts})"]
        if info.get("environment_causes"):
            out += [
                f"  - environment differences behind it: {'; '.join(info['environment_causes'])}"
            ]
    out += [""]
    attributed = [
        [table, c["row"], c["column"], c["a"], c["b"], "; ".join(c["environment_causes"])]
        for table, info in ag["tables"].items()
        for c in info["differences"]
        if c.get("environment_causes")
    ]
    if attributed:
        out += ["Differing cells and the environment differences recorded behind them "
                "(the precision its steps ran in, the CPU):", ""]  # fmt: skip
        out += _md_table(["Table", "Row", "Column", "a", "b", "Environment differences"],
                         attributed[:40])  # fmt: skip
        out += [""]
    notable = [f for f in ag["files"] if f["status"] not in ("identical",)]
    if notable:
        out += _md_table(
            ["File", "Status", "Detail", "Lineage diverges at", "Outputs first differ at"],
            [[f["path"], f["status"], f["detail"],
              _where(ag["divergence"].get(f["path"], {}).get("lineage_diverges_at")),
              _where(ag["divergence"].get(f["path"], {}).get("outputs_first_differ_at"))]
             for f in notable],
        )  # fmt: skip
        out += [""]
    return out


def _where(info: dict | None) -> str:
    if not info:
        return ""
    if "kind" in info:
        return f"{info['rule']} `{info['step']}`: {info['kind']} ({_short(info['detail'], 120)})"
    same = (
        " (same config, code, inputs, environment)"
        if info.get("same_config_code_inputs_environment")
        else ""
    )
    return f"{info['rule']} `{info['step']}`: {info['status']}{same}"


HTML_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:0.8em 0;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f2f2f2} td.num{text-align:right;font-variant-numeric:tabular-nums}
td.paper{color:#555} td.diff{color:#777;font-style:italic}
td.holds{background:#e6f4e6} td.reversed{background:#fbe3e3} td.nottested{color:#888}
"""


def html_page(title: str, body: list[str]) -> str:
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{HTML_STYLE}</style></head><body>\n"
        f"<h1>{html.escape(title)}</h1>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def html_table(frame: pd.DataFrame) -> str:
    """A table as HTML; value/paper/diff columns styled so each cell's paper number and
    difference read beside it."""
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    rows = []
    for _, row in frame.iterrows():
        cells = []
        for col, v in row.items():
            text = _fmt(v)
            cls = []
            if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
                cls.append("num")
            if str(col).endswith("_paper"):
                cls.append("paper")
            elif str(col).endswith(("_diff", "_rank", "_within_tol")):
                cls.append("diff")  # what the paper's value is compared by at this scale
            if col == "verdict":
                cls.append(str(v).replace(" ", ""))
            attr = f" class='{' '.join(cls)}'" if cls else ""
            cells.append(f"<td{attr}>{html.escape(text)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>" + "".join(rows) + "</tbody></table>"


def render_csv_html(
    csv_path: Path, out: Path, title: str | None = None, png: Path | None = None
) -> None:
    """One table CSV (a reproduced table, the claims, a figure's plotted points) as a
    standalone HTML page, with its Markdown header note when a ``.md`` sibling exists and, for
    a figure, the image itself above its data."""
    frame = pd.read_csv(csv_path)
    body = []
    md = csv_path.with_suffix(".md")
    if md.is_file():
        notes = [ln for ln in md.read_text().splitlines() if ln and not ln.startswith(("|", "#"))]
        body += [f"<p>{html.escape(n)}</p>" for n in notes]
    if png is not None:
        data = base64.b64encode(png.read_bytes()).decode()
        body.append(
            f"<p><img alt='{html.escape(png.name)}' src='data:image/png;base64,{data}'></p>"
        )
    body.append(f"<p>{len(frame)} rows, from <code>{html.escape(str(csv_path))}</code>.</p>")
    body.append(html_table(frame))
    with atomic_path(out) as tmp:
        tmp.write_text(html_page(title or csv_path.stem, body), encoding="utf-8")


def render_html(record: dict[str, Any]) -> str:
    body = ["<ul>" + "".join(f"<li>{html.escape(x)}</li>" for x in summary_lines(record)) + "</ul>"]
    st = record.get("staleness")
    if st is not None:
        body.append("<h2>Staleness</h2>")
        frame = pd.DataFrame(
            [{"rule": r, "jobs": e["jobs"],
              "reasons": ", ".join(f"{k} ({v})" for k, v in e["reasons"].items()),
              "config changes": "; ".join(e["config_changes"]),
              "code changed": "yes" if e["code_changed"] else ""}
             for r, e in st["by_rule"].items()],
            columns=["rule", "jobs", "reasons", "config changes", "code changed"],
        )  # fmt: skip
        body.append(html_table(frame) if len(frame) else "<p>Nothing would rerun.</p>")
    body.append("<h2>Table cells and their metrics files</h2>")
    body.append(html_table(pd.DataFrame(
        [{"table": c["table"], "row": c["label"], "column": c["column"], "value": c["value"],
          "metrics file": c["metrics"] or "ambiguous"} for c in record["cells"]],
        columns=["table", "row", "column", "value", "metrics file"],
    )))  # fmt: skip
    body.append("<h2>Steps</h2>")
    body.append(html_table(pd.DataFrame(
        [{"rule": s["rule"], "output": jid, "code": s["code"], "config": _short(s["cfg"] or "", 200),
          "wall s": s["seconds"], "peak RSS MB": s["max_rss_mb"]}
         for jid, s in record["steps"].items()],
        columns=["rule", "output", "code", "config", "wall s", "peak RSS MB"],
    )))  # fmt: skip
    body.append("<h2>Inputs</h2>")
    body.append(html_table(pd.DataFrame(record["inputs"])))
    body.append("<h2>Runtime per rule</h2>")
    body.append(html_table(pd.DataFrame(
        [{"rule": r, **e} for r, e in record["runtime_by_rule"].items()]
    )))  # fmt: skip
    ag = record.get("against")
    if ag is not None:
        body.append(f"<h2>Against {html.escape(ag['b'])}</h2>")
        body.append(html_table(pd.DataFrame(
            [{"file": f["path"], "status": f["status"], "detail": f["detail"],
              "lineage diverges at": _where(ag["divergence"].get(f["path"], {}).get("lineage_diverges_at")),
              "outputs first differ at": _where(ag["divergence"].get(f["path"], {}).get("outputs_first_differ_at"))}
             for f in ag["files"]],
        )))  # fmt: skip
    return html_page(f"Audit of {record['results']}", body)


def write_audit(record: dict[str, Any], out: Path) -> None:
    write_json(out / "audit.json", record)
    with atomic_path(out / "audit.md") as tmp:
        tmp.write_text(render_markdown(record), encoding="utf-8")
    with atomic_path(out / "audit.html") as tmp:
        tmp.write_text(render_html(record), encoding="utf-8")
