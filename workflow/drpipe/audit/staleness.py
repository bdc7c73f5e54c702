"""Staleness: what ``snakemake -n`` would rerun now to bring the recorded targets up to date,
and why (config keys that changed, code hashes, updated inputs), per rule."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from drpipe.audit.lineage import Lineage
from drpipe.audit.metadata import HEX16, config_diff, literal, shell_cfg

# The repository (this file is workflow/drpipe/audit/staleness.py): its Snakefile and profile.
REPO = Path(__file__).resolve().parents[3]


def _split_top(text: str) -> list[str]:
    """Split a comma-joined list of Python reprs at the top level."""
    parts, depth, quote, cur, i = [], 0, None, [], 0
    while i < len(text):
        ch = text[i]
        if quote:
            cur.append(ch)
            if ch == "\\" and i + 1 < len(text):
                cur.append(text[i + 1])
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
            cur.append(ch)
        elif ch in "[{(":
            depth += 1
            cur.append(ch)
        elif ch in "]})":
            depth -= 1
            cur.append(ch)
        elif ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
        i += 1
    if "".join(cur).strip():
        parts.append("".join(cur).strip())
    return parts


def explain_params_change(text: str) -> dict[str, Any]:
    """Config keys and code hashes behind Snakemake's 'Params have changed' reason."""
    m = re.search(r"before: (.*?) now: (.*)$", text)
    if not m:
        return {"config": [], "code": None, "other": [text]}
    sides = []
    for part in m.groups():
        values = (
            []
            if part.strip().startswith("<nothing")
            else [literal(t) for t in _split_top(part.strip())]
        )
        sides.append(values)
    before, now = sides
    cfg_old = [json.loads(v) for v in before if isinstance(v, str) and v.startswith("{")]
    cfg_new = [json.loads(v) for v in now if isinstance(v, str) and v.startswith("{")]
    code_old = [v for v in before if isinstance(v, str) and HEX16.match(v)]
    code_new = [v for v in now if isinstance(v, str) and HEX16.match(v)]
    config = []
    if cfg_old or cfg_new:
        config = config_diff(cfg_old[0] if cfg_old else {}, cfg_new[0] if cfg_new else {})
    other = [
        repr(v)
        for v in before + now
        if not (isinstance(v, str) and (v.startswith("{") or HEX16.match(v)))
    ]
    code = {"before": code_old, "now": code_new} if code_old or code_new else None
    return {"config": config, "code": code, "other": other}


REASON_KIND = [
    ("Missing output files", "missing output"),
    ("Params have changed", "params changed"),
    ("Code has changed", "rule code changed"),
    ("Set of input files has changed", "input set changed"),
    ("Updated input files", "input newer than output"),
    ("Input files updated by another job", "upstream reruns"),
    ("Software environment", "software environment changed"),
    ("Job is incomplete", "incomplete"),
    ("Forced execution", "forced"),
]


def parse_dry_run(text: str, commands: bool = False) -> list[dict[str, Any]]:
    """Jobs of a ``snakemake -n -p`` output: rule, output, reasons (classified), the shell
    command's cfg, benchmark file and threads; with ``commands``, also the inputs, logs and
    the shell command itself (None for a job that prints none), to run the jobs elsewhere."""
    jobs = []
    blocks = re.split(r"^(?=(?:local)?rule \w+:$)", text, flags=re.M)
    for block in blocks:
        head = re.match(r"(?:local)?rule (\w+):$", block, flags=re.M)
        if not head or block.startswith("rule all:") or block.startswith("localrule all:"):
            continue
        fields = dict(re.findall(r"^    (\w+): (.*)$", block, flags=re.M))
        shell = re.search(r"^Shell command: (.*)$", block, flags=re.M)
        reasons = []
        for clause in re.split(r";\s+(?=[A-Z])", fields.get("reason", "")):
            kind = next((k for prefix, k in REASON_KIND if clause.startswith(prefix)), "other")
            item: dict[str, Any] = {"kind": kind, "text": clause}
            if kind == "params changed":
                item.update(explain_params_change(clause))
            reasons.append(item)
        jobs.append(
            {
                "rule": head.group(1),
                "output": [o.strip() for o in fields.get("output", "").split(",") if o.strip()],
                "reasons": reasons,
                "cfg": shell_cfg(shell.group(1)) if shell else None,
                "benchmark": fields.get("benchmark", "").strip() or None,
                "threads": int(fields.get("threads", "1")),
            }
        )
        if commands:
            jobs[-1] |= {
                k: [p.strip() for p in fields.get(k, "").split(",") if p.strip()]
                for k in ("input", "log")
            } | {"shell": shell.group(1).strip() if shell else None}
    return jobs


def snakemake_command(
    workdir: Path, extra: list[str], targets: Iterable[str] = (), flags: Iterable[str] = ()
) -> list[str]:
    """``snakemake`` on this repository's workflow (or the ``-s``/``--snakefile`` in ``extra``)
    in ``workdir``, with the default profile unless ``extra`` names one. Targets and flags come
    first: a user's ``--configfile A B`` takes every word after it."""
    exe = Path(sys.executable).with_name("snakemake")
    cmd = [str(exe) if exe.exists() else "snakemake", *targets, *flags]
    if not {"-s", "--snakefile"} & set(extra):
        cmd += ["-s", str(REPO / "Snakefile")]
    cmd += ["--directory", str(workdir)]
    if "--profile" not in extra and (REPO / "profiles" / "default").is_dir():
        cmd += ["--profile", str(REPO / "profiles" / "default")]
    return cmd + extra


def dry_run(workdir: Path, targets: list[str], extra: list[str], cores: int = 1) -> tuple[int, str]:
    flags = ["-n", "--nolock", "-p", "--cores", str(cores)]
    cmd = snakemake_command(workdir, extra, targets, flags)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def staleness(lineage: Lineage, extra: list[str]) -> dict[str, Any]:
    """What ``snakemake -n`` would rerun to bring the recorded targets up to date, and why."""
    targets = [
        t
        for t in lineage.leaves()
        if not t.startswith(("results/audit/", "results/report/"))
        and (lineage.workdir / t).exists()
    ]
    started = time.perf_counter()
    code, text = dry_run(lineage.workdir, targets, extra)
    unbuildable = []
    if code != 0:  # a target the current workflow cannot make: try them one by one
        jobs_text = []
        for target in targets:
            c, t = dry_run(lineage.workdir, [target], extra)
            if c != 0:
                err = [ln for ln in t.splitlines() if "Error" in ln or "rror:" in ln]
                unbuildable.append({"target": target, "error": (err or t.splitlines()[-1:])[0]})
            else:
                jobs_text.append(t)
        text = "\n".join(jobs_text)
    jobs = parse_dry_run(text)
    by_rule: dict[str, dict[str, Any]] = {}
    for job in jobs:
        entry = by_rule.setdefault(
            job["rule"], {"jobs": 0, "reasons": defaultdict(int), "config": set(), "code": False}
        )
        entry["jobs"] += 1
        for r in job["reasons"]:
            entry["reasons"][r["kind"]] += 1
            entry["config"].update(r.get("config") or [])
            entry["code"] |= bool(r.get("code"))
    summary = {
        rule: {
            "jobs": e["jobs"],
            "reasons": dict(sorted(e["reasons"].items())),
            "config_changes": sorted(e["config"]),
            "code_changed": e["code"],
        }
        for rule, e in sorted(by_rule.items())
    }
    return {
        "command": shlex.join(snakemake_command(lineage.workdir, extra, ["<targets>"], ["-n"])),
        "targets": targets,
        "seconds": round(time.perf_counter() - started, 1),
        "stale_jobs": jobs,
        "by_rule": summary,
        "unbuildable_targets": unbuildable,
    }
