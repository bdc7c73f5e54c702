"""One results folder against another: every file and every table cell, and for a difference
the first step where the two lineages diverge (config, code, inputs, environment), the first
step whose outputs differ, and the environment differences behind it that the steps recorded
(the precision a step ran in, the CPU flags that an ``auto`` precision follows); a differing
table cell carries those of the metrics file it was computed from."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from drpipe.audit.cells import table_cells
from drpipe.audit.filediff import SAME, TOLERANCE, compare_file, compare_tables, worst
from drpipe.audit.lineage import Lineage
from drpipe.audit.metadata import config_diff, literal
from drpipe.audit.steps import run_environment, step_summary

# What the audit itself writes, and what is not a result (never compared or audited).
SKIP_DIRS = ("logs", "benchmarks", "audit", "report", "data/.verified")
SKIP_FILES = ("report.html",)


def result_files(results: Path) -> list[str]:
    """Files of a results folder that are results (paths relative to the working directory)."""
    out = []
    for path in sorted(results.rglob("*")):
        if not path.is_file():
            continue
        rel = path.relative_to(results)
        if rel.name.startswith(".") or str(rel) in SKIP_FILES:
            continue
        if any(str(rel).startswith(d + "/") for d in SKIP_DIRS):
            continue
        out.append(str(Path(results.name) / rel))
    return out


def _env_of(step: dict, run_env: dict | None) -> dict | None:
    env = step.get("environment") or run_env
    if not env:
        return None
    drop = {"host", "system"}
    return {k: v for k, v in env.items() if k not in drop}


def _precisions(step: dict) -> list[str]:
    """The precisions a step's reports record (training and encoding reports say one)."""
    out = []
    for report in step["reports"].values():
        if isinstance(report, dict) and ("precision" in report or "bf16" in report):
            out.append(str(report.get("precision") or ("bf16" if report["bf16"] else "fp32")))
    return sorted(set(out))


def _cpu(env: dict | None) -> tuple[str | None, set[str]]:
    cpu = (env or {}).get("cpu") or {}
    return cpu.get("model"), set(cpu.get("flags") or [])


def environment_causes(
    pairs: Iterable[tuple[dict, dict]], env_a: dict | None, env_b: dict | None
) -> list[str]:
    """What differs between two runs' recorded environments along a lineage, in words:
    ``precision differs: bf16 vs fp32 (train x1, encode x2)``, then the CPU (flags, model),
    from the steps' own environment records, else the runs' (``pairs``: step summaries a, b).
    """
    by_values: dict[tuple[str, str], list[str]] = defaultdict(list)
    flags: list[tuple[str | None, set[str], str | None, set[str]]] = []
    for sa, sb in pairs:
        pa, pb = _precisions(sa), _precisions(sb)
        if pa and pb and pa != pb:
            by_values["/".join(pa), "/".join(pb)].append(sa["rule"])
        ma, fa = _cpu(_env_of(sa, env_a))
        mb, fb = _cpu(_env_of(sb, env_b))
        if (ma, fa) != (mb, fb):
            flags.append((ma, fa, mb, fb))
    if not flags:
        ma, fa = _cpu(_env_of({}, env_a))
        mb, fb = _cpu(_env_of({}, env_b))
        if (ma, fa) != (mb, fb):
            flags.append((ma, fa, mb, fb))
    causes = []
    for (a, b), rules in by_values.items():
        steps = ", ".join(f"{r} x{rules.count(r)}" for r in sorted(set(rules)))
        causes.append(f"precision differs: {a} vs {b} ({steps})")
    seen = set()
    for ma, fa, mb, fb in flags:
        parts = []
        if fa != fb:
            only = [f"only in a: {', '.join(sorted(fa - fb))}" if fa - fb else "",
                    f"only in b: {', '.join(sorted(fb - fa))}" if fb - fa else ""]  # fmt: skip
            parts.append("CPU flags differ (" + "; ".join(p for p in only if p) + ")")
        if ma != mb:
            parts.append(f"CPU model differs: {ma} vs {mb}")
        text = "; ".join(parts)
        if text not in seen:
            seen.add(text)
            causes.append(text)
    return causes


def divergence(
    path: str,
    la: Lineage,
    lb: Lineage,
    file_status: dict[str, str],
    env_a: dict | None,
    env_b: dict | None,
) -> dict[str, Any]:
    """Where the lineages of ``path`` in two folders first differ, and where outputs first do."""
    jobs_a = {j.id: j for j in la.upstream([path])}
    jobs_b = {j.id: j for j in lb.upstream([path])}
    lineage_split = None
    output_split = None
    pairs = []
    for job_id, ja in jobs_a.items():
        jb = jobs_b.get(job_id)
        if jb is None:
            lineage_split = lineage_split or {"step": job_id, "rule": ja.rule,
                                              "kind": "inputs", "detail": "not in the other run"}  # fmt: skip
            continue
        sa, sb = step_summary(la, ja), step_summary(lb, jb)
        pairs.append((sa, sb))
        kind, detail = None, ""
        if ja.cfg != jb.cfg or [p for p in ja.params if literal(p) != ja.code] != [
            p for p in jb.params if literal(p) != jb.code
        ]:
            kind, detail = "config", "; ".join(config_diff(ja.cfg, jb.cfg)) or "params differ"
        elif ja.code != jb.code:
            kind, detail = "code", f"code hash {ja.code} vs {jb.code}"
        elif ja.inputs != jb.inputs:
            kind, detail = "inputs", "the step reads different files"
        elif any(
            file_status.get(i, "identical") not in SAME and la.job_of(i) is None for i in ja.inputs
        ):
            kind, detail = "inputs", "an input that no recorded step wrote differs"
        elif ja.rule == "fetch" and any(
            file_status.get(o) not in (*SAME, None) for o in ja.outputs
        ):
            kind, detail = "inputs", "the fetched file differs"
        elif _env_of(sa, env_a) != _env_of(sb, env_b):
            ea, eb = _env_of(sa, env_a) or {}, _env_of(sb, env_b) or {}
            kind = "environment"
            detail = "; ".join(config_diff(ea, eb)[:6])
        if kind and lineage_split is None:
            lineage_split = {"step": job_id, "rule": ja.rule, "kind": kind, "detail": detail}
        outs = [s for o in ja.outputs for s in _statuses_under(o, file_status)]
        if output_split is None and outs and worst(outs) not in SAME:
            output_split = {
                "step": job_id,
                "rule": ja.rule,
                "status": worst(outs),
                "same_config_code_inputs_environment": kind is None,
            }
    return {
        "lineage_diverges_at": lineage_split,
        "outputs_first_differ_at": output_split,
        "environment_causes": environment_causes(pairs, env_a, env_b),
    }


def _attribute(cells: list[dict], table: str, la: Lineage, diverging: dict[str, dict]) -> None:
    """Give each differing cell the environment causes of the metrics file it was computed
    from (``drpipe.audit.cells``), else those of the table file."""
    job = la.job_of(table)
    source = {}
    if job is not None:
        try:
            source = {(c["row"], c["column"]): c["metrics"] for c in table_cells(la, job, table)}
        except (OSError, ValueError, KeyError):
            source = {}  # a table the cell matcher cannot read: the file's causes below
    file_causes = (diverging.get(table) or {}).get("environment_causes", [])
    for cell in cells:
        metrics = source.get((cell.get("index_a"), cell["column"]))
        if metrics and metrics in diverging:
            cell["metrics"] = metrics
            cell["environment_causes"] = diverging[metrics]["environment_causes"]
        else:
            cell["environment_causes"] = file_causes


def _statuses_under(path: str, file_status: dict[str, str]) -> list[str]:
    if path in file_status:
        return [file_status[path]]
    prefix = path.rstrip("/") + "/"
    return [s for p, s in file_status.items() if p.startswith(prefix)]


def compare_runs(results_a: Path, results_b: Path, tol: dict | None = None) -> dict[str, Any]:
    """Two results folders file by file and table cell by table cell, with divergence points."""
    tol = tol or TOLERANCE
    la, lb = Lineage(results_a.parent), Lineage(results_b.parent)
    fa = set(result_files(results_a))
    fb = {str(Path(results_a.name) / Path(p).relative_to(results_b.name))
          for p in result_files(results_b)}  # fmt: skip
    files = []
    status: dict[str, str] = {}
    for rel in sorted(fa | fb):
        other = results_b / Path(rel).relative_to(results_a.name)
        if rel not in fb:
            st, detail = "only_in_a", ""
        elif rel not in fa:
            st, detail = "only_in_b", ""
        else:
            st, detail = compare_file(results_a.parent / rel, other, tol, rel)
        status[rel] = st
        files.append({"path": rel, "status": st, "detail": detail})
    env_a, env_b = run_environment(results_a), run_environment(results_b)
    diverging = {}
    for entry in files:
        if entry["status"] in ("different", "within_tolerance"):
            diverging[entry["path"]] = divergence(entry["path"], la, lb, status, env_a, env_b)
    tables = {}
    for rel in sorted(fa & fb):
        if rel.endswith(".csv") and not rel.startswith(f"{results_a.name}/audit/"):
            cells = compare_tables(results_a.parent / rel, results_b / Path(rel).relative_to(results_a.name), tol)  # fmt: skip
            differences = [c for c in cells if c["status"] != "identical"][:50]
            _attribute(differences, rel, la, diverging)
            tables[rel] = {
                "cells": len(cells),
                "status_counts": counts(c["status"] for c in cells),
                "differences": differences,
                "environment_causes": (diverging.get(rel) or {}).get("environment_causes", []),
            }
    return {
        "a": str(results_a),
        "b": str(results_b),
        "tolerance": tol,
        "file_status_counts": counts(status.values()),
        "files": files,
        "tables": tables,
        "divergence": diverging,
        "environment_equal": _env_of({}, env_a) == _env_of({}, env_b),
    }


def counts(values: Iterable[str]) -> dict[str, int]:
    """How often each value occurs, sorted by value."""
    out: dict[str, int] = defaultdict(int)
    for v in values:
        out[v] += 1
    return dict(sorted(out.items()))
