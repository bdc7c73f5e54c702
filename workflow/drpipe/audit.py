"""Audit a results folder: where every table cell came from, what is stale, how two runs differ.

Everything is read from what the run left behind, nothing is re-run:

- **Snakemake's metadata** (``.snakemake/metadata/`` next to ``results/``: one JSON record per
  output file, named by the base64 of its path) gives each job's rule, inputs, shell command
  (with the ``--cfg`` config slice), params (with the ``code=`` hash of the job's import closure)
  and the checksums of its small inputs. Walking inputs to the jobs that wrote them gives the
  lineage of any file: metrics -> run -> model and its training report -> training examples ->
  BM25 run and index -> passages -> fetched inputs with their sha256.
- **Benchmark files** (``results/benchmarks/rules/<rule>/<name>.tsv``, named like the job's log
  ``results/logs/<rule>/<name>.log``) give wall time and peak memory per job.
- **Staleness** is what ``snakemake -n`` would rerun now, and why (config keys that changed,
  code hashes, updated inputs), per rule; fetched inputs and small recorded inputs are hashed
  again and compared with their recorded checksums.
- **Against another folder**: every table cell and every file is identical, equivalent (equal
  once recorded timings and host names are set aside), equal within a stated tolerance, or
  different; for a difference, the first step where the two lineages diverge (config, code,
  inputs, environment) and the first step whose outputs differ.

``drpipe audit RESULTS [--against OTHER]`` writes ``audit.json``, ``audit.md`` and
``audit.html``; with ``--claims`` it also tests the claims (``drpipe.claims``), with
``--tables-html`` it renders each table for the report, with ``--report`` it builds Snakemake's
HTML report.
"""

from __future__ import annotations

import argparse
import ast
import base64
import csv
import gzip
import hashlib
import html
import json
import logging
import math
import re
import shlex
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from drpipe.io import atomic_path, read_json, write_json

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
# Float outputs (vectors, scores) of two CPU runs are compared within this tolerance when
# their bytes differ: |a - b| <= atol + rtol * |b| (numpy.allclose).
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
# Keys of JSON reports that record how a step ran, not what it produced.
VOLATILE_KEYS = {"environment", "hardware", "rule_timings", "total_rule_seconds", "origin"}
# ... and any key with one of these words (build_seconds, questions_per_second_search, ...).
VOLATILE_WORDS = {
    "seconds", "secs", "second", "time", "timestamp", "elapsed", "started", "finished",
    "host", "hostname", "pid", "date", "wall",
}  # fmt: skip
# Bytes that differ from build to build by design, with the reason; such files are compared
# through what is computed from them (a Lucene index through its BM25 runs).
EXPECTED_DIFFERENCES = (
    (
        re.compile(r"(^|/)bm25/index/"),
        "Lucene index: every build writes a random segment id and its time into the segment "
        "files; compared through its BM25 runs instead",
    ),
)
# What the audit itself writes, and what is not a result (never compared or audited).
SKIP_DIRS = ("logs", "benchmarks", "audit", "report", "data/.verified")
SKIP_FILES = ("report.html",)
HEX16 = re.compile(r"^[0-9a-f]{16}$")
METRIC_COL = re.compile(r"^(?:(?P<dataset>[A-Za-z0-9_]+?)_)?top(?P<k>\d+)$")


# =========================================================================== metadata


@dataclass
class Job:
    """One recorded Snakemake job: the records of its outputs merged."""

    rule: str
    outputs: list[str]
    inputs: list[str]
    shellcmd: str
    params: list[str]
    log: list[str]
    starttime: float | None
    endtime: float | None
    input_checksums: dict[str, str] = field(default_factory=dict)
    conda_env: str | None = None

    @property
    def id(self) -> str:
        return self.outputs[0]

    @property
    def cfg(self) -> dict | None:
        return shell_cfg(self.shellcmd)

    @property
    def code(self) -> str | None:
        for p in self.params:
            value = _literal(p)
            if isinstance(value, str) and HEX16.match(value):
                return value
        return None


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def shell_cfg(shellcmd: str | None) -> dict | None:
    """The ``--cfg`` JSON object of a recorded shell command (the step's config slice)."""
    if not shellcmd:
        return None
    try:
        words = shlex.split(shellcmd)
    except ValueError:
        return None
    for i, word in enumerate(words[:-1]):
        if word == "--cfg":
            try:
                value = json.loads(words[i + 1])
            except json.JSONDecodeError:
                return None
            return value if isinstance(value, dict) else None
    return None


def _decode_key(rel: Path) -> str | None:
    parts = [p[1:] if p.startswith("@") else p for p in rel.parts]
    try:
        return base64.urlsafe_b64decode("".join(parts).encode()).decode()
    except (ValueError, UnicodeDecodeError):
        return None


def read_metadata(workdir: str | Path) -> dict[str, dict]:
    """Snakemake's metadata records of a working directory: output path -> record."""
    root = Path(workdir) / ".snakemake" / "metadata"
    records: dict[str, dict] = {}
    if not root.is_dir():
        return records
    for path in root.rglob("*"):
        if not path.is_file():
            continue
        key = _decode_key(path.relative_to(root))
        if key is None:
            continue
        try:
            rec = json.loads(path.read_text())
        except (json.JSONDecodeError, OSError):
            continue
        if rec.get("rule") and not rec.get("incomplete"):
            records[key] = rec
    return records


class Lineage:
    """The recorded DAG of a working directory: jobs, who wrote each file, upstream walks."""

    def __init__(self, workdir: str | Path):
        self.workdir = Path(workdir)
        self.records = read_metadata(self.workdir)
        # Snakemake keeps a file's record after the file is deleted or moved: such a record
        # describes no file to audit, so it is set aside (and counted in the audit).
        self.vanished = sorted(o for o in self.records if not (self.workdir / o).exists())
        for out in self.vanished:
            del self.records[out]
        grouped: dict[tuple, list[str]] = defaultdict(list)
        for out, rec in self.records.items():
            grouped[(rec["rule"], rec.get("job_hash"), rec.get("shellcmd"))].append(out)
        self.jobs: dict[str, Job] = {}
        self.writer: dict[str, str] = {}
        for outputs in grouped.values():
            outputs.sort()
            rec = self.records[outputs[0]]
            job = Job(
                rule=rec["rule"],
                outputs=outputs,
                inputs=sorted(rec.get("input") or []),
                shellcmd=rec.get("shellcmd") or "",
                params=list(rec.get("params") or []),
                log=list(rec.get("log") or []),
                starttime=rec.get("starttime"),
                endtime=max((self.records[o].get("endtime") or 0) for o in outputs) or None,
                input_checksums=dict(rec.get("input_checksums") or {}),
                conda_env=rec.get("conda_env"),
            )
            self.jobs[job.id] = job
            for out in outputs:
                self.writer[out] = job.id

    def job_of(self, path: str) -> Job | None:
        """The job that wrote ``path`` (or the directory output that contains it)."""
        if path in self.writer:
            return self.jobs[self.writer[path]]
        parent = str(Path(path).parent)
        while parent not in ("", ".", "/"):
            if parent in self.writer:
                return self.jobs[self.writer[parent]]
            parent = str(Path(parent).parent)
        return None

    def upstream(self, paths: Iterable[str]) -> list[Job]:
        """Jobs behind ``paths``, inputs first (a topological order, ties by output name)."""
        seen: dict[str, Job] = {}
        order: list[Job] = []

        def visit(job: Job) -> None:
            if job.id in seen:
                return
            seen[job.id] = job
            for inp in job.inputs:
                parent = self.job_of(inp)
                if parent is not None:
                    visit(parent)
            order.append(job)

        for path in sorted(paths):
            job = self.job_of(path)
            if job is not None:
                visit(job)
        return order

    def leaves(self) -> list[str]:
        """Recorded outputs no recorded job reads: the targets a run was asked for."""
        used = {inp for job in self.jobs.values() for inp in job.inputs}
        out = []
        for job in self.jobs.values():
            if any(o in used for o in job.outputs):
                continue
            out.extend(job.outputs)
        return sorted(out)


# =========================================================================== steps


def benchmark_file(job: Job) -> Path | None:
    """A job's benchmark TSV: its log path with results/logs -> results/benchmarks/rules."""
    for logfile in job.log:
        if logfile.startswith("results/logs/") and logfile.endswith(".log"):
            rel = logfile[len("results/logs/") : -len(".log")]
            return Path("results/benchmarks/rules") / f"{rel}.tsv"
    return None


def read_benchmark(path: Path) -> dict[str, float] | None:
    try:
        with open(path) as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
    except OSError:
        return None
    if not rows:
        return None
    row = rows[-1]

    def num(key: str) -> float | None:
        try:
            value = float(row.get(key) or "nan")
        except ValueError:
            return None
        return None if math.isnan(value) else value

    return {"seconds": num("s"), "max_rss_mb": num("max_rss")}


def _report_files(job: Job, work: Path | None = None) -> list[str]:
    """A job's JSON outputs that describe the step (reports, fetch records, index metadata),
    and the ``drpipe_*.json`` metadata inside its directory outputs (a Lucene index, a model);
    metrics files are results, not reports."""
    out = [o for o in job.outputs if o.endswith(".json") and not o.startswith("results/metrics/")]
    if work is not None:
        for o in job.outputs:
            if (work / o).is_dir():
                out += sorted(f"{o}/{m.name}" for m in (work / o).glob("drpipe_*.json"))
    return out


def _compact(report: Any, limit: int = 2000) -> Any:
    """A report with its long values (loss curves, id lists) replaced by their size."""
    if not isinstance(report, dict):
        return report
    out = {}
    for key, value in report.items():
        if key == "environment":
            continue  # kept once per step as "environment"
        text = json.dumps(value, default=str)
        if len(text) > limit:
            size = len(value) if isinstance(value, (list, dict)) else len(text)
            value = f"<{type(value).__name__} of {size} items, not copied>"
        out[key] = value
    return out


def step_summary(lineage: Lineage, job: Job) -> dict[str, Any]:
    """What the audit shows of one step: rule, files, config slice, code hash, time, memory."""
    work = lineage.workdir
    bench = benchmark_file(job)
    timing = read_benchmark(work / bench) if bench else None
    if timing is None and job.starttime and job.endtime:
        timing = {"seconds": round(job.endtime - job.starttime, 3), "max_rss_mb": None}
    reports = {}
    environment = None
    for rel in _report_files(job, work):
        try:
            data = read_json(work / rel)
        except (OSError, ValueError):
            continue
        reports[rel] = _compact(data)
        if isinstance(data, dict) and isinstance(data.get("environment"), dict):
            environment = data["environment"]
    return {
        "rule": job.rule,
        "outputs": job.outputs,
        "inputs": job.inputs,
        "cfg": job.cfg,
        "code": job.code,
        "seconds": (timing or {}).get("seconds"),
        "max_rss_mb": (timing or {}).get("max_rss_mb"),
        "benchmark": str(bench) if bench else None,
        "reports": reports,
        "environment": environment,
        "conda_env": bool(job.conda_env),
    }


def input_records(lineage: Lineage) -> list[dict[str, Any]]:
    """Fetched inputs: each record's file, sha256 and where it came from."""
    out = []
    for job in lineage.jobs.values():
        for rel in job.outputs:
            if "/records/" in rel and rel.endswith(".json"):
                try:
                    rec = read_json(lineage.workdir / rel)
                except (OSError, ValueError):
                    continue
                out.append(
                    {
                        "record": rel,
                        "name": rec.get("name"),
                        "file": rec.get("file"),
                        "sha256": rec.get("sha256"),
                        "bytes": rec.get("bytes"),
                        "origin": (rec.get("origin") or {}).get("kind"),
                        "url": rec.get("canonical_url"),
                    }
                )
    return sorted(out, key=lambda r: r["record"])


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def checksum_mismatches(lineage: Lineage, inputs: list[dict]) -> list[dict[str, Any]]:
    """Inputs whose bytes differ from their recorded checksums (fetch records and the small
    inputs whose sha256 Snakemake recorded with each job)."""
    work = lineage.workdir
    out = []
    for rec in inputs:
        path = work / (rec["file"] or "")
        if not rec["file"] or not path.is_file():
            out.append({"file": rec["file"], "recorded": rec["sha256"], "now": None,
                        "by": rec["record"], "problem": "missing"})  # fmt: skip
            continue
        now = sha256_file(path)
        if now != rec["sha256"]:
            out.append({"file": rec["file"], "recorded": rec["sha256"], "now": now,
                        "by": rec["record"], "problem": "changed"})  # fmt: skip
    seen = set()
    for job in lineage.jobs.values():
        for rel, recorded in sorted(job.input_checksums.items()):
            if (rel, recorded) in seen:
                continue
            seen.add((rel, recorded))
            path = work / rel
            algo, _, digest = str(recorded).partition(":")
            if algo != "sha256" or not digest:
                continue
            now = sha256_file(path) if path.is_file() else None
            if now != digest:
                out.append(
                    {
                        "file": rel,
                        "recorded": digest,
                        "now": now,
                        "by": f"{job.rule} ({job.id})",
                        "problem": "missing" if now is None else "changed",
                    }
                )
    return out


# =========================================================================== table cells


def _metric_records(lineage: Lineage, job: Job) -> dict[str, dict]:
    out = {}
    for inp in job.inputs:
        if inp.startswith("results/metrics/") and inp.endswith(".json"):
            try:
                out[inp] = read_json(lineage.workdir / inp)
            except (OSError, ValueError):
                continue
    return out


def _tokens(text: str) -> set[str]:
    return {t for t in re.split(r"[^a-z0-9]+", str(text).lower()) if t}


def _row_map_runs(job: Job) -> dict[str, list[str]]:
    """Row label -> runs, from a table job's config slice (``row_map`` {run: {"method": label}}
    as Table 2 passes it), when it has one."""
    row_map = (job.cfg or {}).get("row_map")
    out: dict[str, list[str]] = defaultdict(list)
    if isinstance(row_map, dict):
        for run, spec in row_map.items():
            if isinstance(spec, dict) and spec.get("method"):
                out[str(spec["method"])].append(run)
    return out


def table_cells(lineage: Lineage, job: Job, table: str) -> list[dict[str, Any]]:
    """Each metric cell of a table CSV with the metrics file it was computed from.

    A cell in a column ``[<dataset>_]top<k>`` is matched to the table job's input metrics whose
    top-k equals it (to the table's 2 decimals) and whose dataset, split and train set agree
    with the row. Equal values (a saturated tiny corpus) are told apart by the table's own
    ``row_map`` (row label -> run) when its config has one, else by the row label's words."""
    metrics = _metric_records(lineage, job)
    by_label = _row_map_runs(job)
    frame = pd.read_csv(lineage.workdir / table, dtype=str, keep_default_na=False)
    cells = []
    for i, row in frame.iterrows():
        label_cols = [c for c in ("method", "variant", "label", "run") if c in frame.columns]
        label = " ".join(str(row[c]) for c in label_cols)
        for col in frame.columns:
            m = METRIC_COL.match(col)
            if not m or row[col] == "":
                continue
            value = float(row[col])
            dataset = m.group("dataset") or row.get("dataset") or None
            split = row.get(f"split_{dataset}") or row.get("split") or None
            train = str(row.get("train_set") or "")
            found = []
            for path, rec in metrics.items():
                top = (rec.get("top_k") or {}).get(m.group("k"))
                if top is None or round(float(top), 2) != round(value, 2):
                    continue
                if dataset and rec.get("dataset") != dataset:
                    continue
                if split and rec.get("split") != split:
                    continue
                rec_train = rec.get("train_set") or "none"
                if train and rec_train not in (train.split("+") if train != "none" else ["none"]):
                    continue
                found.append(path)
            if len(found) > 1:
                runs = set(by_label.get(str(row.get("method", "")), []))
                narrowed = [p for p in found if metrics[p].get("method") in runs]
                if not narrowed:
                    words = _tokens(label)
                    narrowed = [p for p in found if _tokens(metrics[p].get("method")) == words]
                found = narrowed or found
            cells.append(
                {
                    "table": table,
                    "row": int(i),
                    "label": label,
                    "column": col,
                    "value": value,
                    "metrics": found[0] if len(found) == 1 else None,
                    "candidates": found if len(found) != 1 else [],
                }
            )
    return cells


def table_jobs(lineage: Lineage) -> list[tuple[Job, str]]:
    """(job, csv) of every recorded job that writes a CSV from metrics or per-question files."""
    out = []
    for job in lineage.jobs.values():
        if not any(i.startswith("results/metrics/") for i in job.inputs):
            continue
        for o in job.outputs:
            if o.endswith(".csv"):
                out.append((job, o))
    return sorted(out, key=lambda t: t[1])


# =========================================================================== staleness

_PARAM_TOKEN = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")


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


def _flat(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out or {prefix.rstrip("."): {}}
    return {prefix.rstrip("."): obj}


def config_diff(old: dict | None, new: dict | None) -> list[str]:
    """``key: old -> new`` for every leaf of two config slices that differs."""
    a, b = _flat(old or {}), _flat(new or {})
    out = []
    for key in sorted(set(a) | set(b)):
        if a.get(key, "<absent>") != b.get(key, "<absent>"):
            out.append(
                f"{key}: {json.dumps(a.get(key, '<absent>'))} -> {json.dumps(b.get(key, '<absent>'))}"
            )
    return out


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
            else [_literal(t) for t in _split_top(part.strip())]
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


def parse_dry_run(text: str) -> list[dict[str, Any]]:
    """Jobs of a ``snakemake -n -p`` output: rule, output, reasons (classified), shell command."""
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
            }
        )
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


def dry_run(workdir: Path, targets: list[str], extra: list[str]) -> tuple[int, str]:
    flags = ["-n", "--nolock", "-p", "--cores", "1"]
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


# =========================================================================== comparing two runs


def _volatile(key: str) -> bool:
    return key in VOLATILE_KEYS or bool(VOLATILE_WORDS & set(key.lower().split("_")))


def _strip_volatile(obj: Any, dropped: set[str], path: str = "") -> Any:
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if _volatile(str(k)):
                dropped.add(f"{path}{k}")
                continue
            out[k] = _strip_volatile(v, dropped, f"{path}{k}.")
        return out
    if isinstance(obj, list):
        return [_strip_volatile(v, dropped, path) for v in obj]
    return obj


def _close(a: Any, b: Any, tol: dict) -> tuple[bool, float]:
    """(equal within tolerance, largest absolute difference) of two JSON-like values."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b, 0.0
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if math.isnan(a) and math.isnan(b):
            return True, 0.0
        diff = abs(a - b)
        return diff <= tol["atol"] + tol["rtol"] * abs(b), diff
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return False, math.inf
        results = [_close(a[k], b[k], tol) for k in a]
        return all(r[0] for r in results), max([r[1] for r in results], default=0.0)
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return False, math.inf
        results = [_close(x, y, tol) for x, y in zip(a, b, strict=True)]
        return all(r[0] for r in results), max([r[1] for r in results], default=0.0)
    return a == b, 0.0 if a == b else math.inf


def _frames_close(fa: pd.DataFrame, fb: pd.DataFrame, tol: dict) -> tuple[str, str]:
    if list(fa.columns) != list(fb.columns) or len(fa) != len(fb):
        return "different", f"shape {fa.shape} vs {fb.shape} or columns differ"
    worst = 0.0
    for col in fa.columns:
        a, b = fa[col], fb[col]
        if pd.api.types.is_float_dtype(a) and pd.api.types.is_float_dtype(b):
            x, y = a.to_numpy(dtype=float), b.to_numpy(dtype=float)
            if not np.array_equal(np.isnan(x), np.isnan(y)):
                return "different", f"column {col}: missing values differ"
            ok = np.isclose(x, y, rtol=tol["rtol"], atol=tol["atol"], equal_nan=True)
            if not ok.all():
                i = int(np.flatnonzero(~ok)[0])
                return "different", f"column {col}, row {i}: {x[i]!r} vs {y[i]!r}"
            if len(x):
                worst = max(worst, float(np.nanmax(np.abs(x - y), initial=0.0)))
        elif not a.equals(b):
            i = int(np.flatnonzero((a != b).to_numpy())[0]) if len(a) else 0
            return "different", f"column {col}, row {i}: {a.iloc[i]!r} vs {b.iloc[i]!r}"
    if worst == 0.0:
        return "equivalent", "same values, different bytes"
    return "within_tolerance", f"max |a-b| = {worst:.3g}"


def _arrays_close(a: np.ndarray, b: np.ndarray, tol: dict) -> tuple[str, str]:
    if a.shape != b.shape or a.dtype != b.dtype:
        return "different", f"{a.dtype}{a.shape} vs {b.dtype}{b.shape}"
    if not np.issubdtype(a.dtype, np.floating):
        if np.array_equal(a, b):
            return "equivalent", "same values, different bytes"
        return "different", f"{int((a != b).sum())} of {a.size} values differ"
    if not np.allclose(a, b, rtol=tol["rtol"], atol=tol["atol"], equal_nan=True):
        diff = float(np.nanmax(np.abs(a.astype(np.float64) - b.astype(np.float64))))
        return "different", f"max |a-b| = {diff:.3g}"
    diff = float(np.nanmax(np.abs(a.astype(np.float64) - b.astype(np.float64)), initial=0.0))
    return "within_tolerance", f"max |a-b| = {diff:.3g}"


def _trec(path: Path) -> pd.DataFrame:
    rows = [line.split() for line in path.read_text().splitlines() if line.strip()]
    frame = pd.DataFrame(rows, columns=["qid", "q0", "doc", "rank", "score", "tag"][: len(rows[0])])
    if "score" in frame:
        frame["score"] = frame["score"].astype(float)
    return frame


def compare_file(a: Path, b: Path, tol: dict, rel: str = "") -> tuple[str, str]:
    """(status, detail) of two versions of one result file (``rel``: its path in the results
    folder, for the files whose bytes are expected to differ)."""
    if a.read_bytes() == b.read_bytes():
        return "identical", ""
    for pattern, why in EXPECTED_DIFFERENCES:
        if pattern.search(rel) and not a.name.endswith(".json"):
            return "expected_difference", why
    name = a.name
    try:
        if name.endswith(".json"):
            dropped: set[str] = set()
            ja = _strip_volatile(read_json(a), dropped)
            jb = _strip_volatile(read_json(b), dropped)
            if ja == jb:
                return "equivalent", f"differs only in {', '.join(sorted(dropped)) or 'formatting'}"
            ok, diff = _close(ja, jb, tol)
            return (
                ("within_tolerance", f"max |a-b| = {diff:.3g}")
                if ok
                else ("different", "values differ")
            )
        if name.endswith(".parquet"):
            return _frames_close(pd.read_parquet(a), pd.read_parquet(b), tol)
        if name.endswith(".csv"):
            return _frames_close(pd.read_csv(a), pd.read_csv(b), tol)
        if name.endswith(".npy"):
            return _arrays_close(np.load(a), np.load(b), tol)
        if name.endswith(".safetensors"):
            from safetensors.numpy import load_file

            ta, tb = load_file(str(a)), load_file(str(b))
            if set(ta) != set(tb):
                return "different", "tensor names differ"
            statuses = [_arrays_close(ta[k], tb[k], tol) for k in sorted(ta)]
            bad = [(k, s) for k, s in zip(sorted(ta), statuses, strict=True) if s[0] == "different"]
            if bad:
                return "different", f"tensor {bad[0][0]}: {bad[0][1][1]}"
            return "within_tolerance", "; ".join(sorted({s[1] for s in statuses}))[:200]
        if name.endswith(".trec"):
            return _frames_close(_trec(a), _trec(b), tol)
        if name.endswith(".gz") and gzip.decompress(a.read_bytes()) == gzip.decompress(
            b.read_bytes()
        ):
            return "equivalent", "same content, different compressed bytes"
    except Exception as exc:  # an unreadable file is a difference, with the reason
        return "different", f"could not compare: {type(exc).__name__}: {exc}"
    return "different", "bytes differ"


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


STATUS_ORDER = (
    "identical",
    "equivalent",
    "expected_difference",
    "within_tolerance",
    "different",
    "only_in_a",
    "only_in_b",
)


# Statuses that do not make two runs differ.
SAME = ("identical", "equivalent", "expected_difference")


def worst(statuses: Iterable[str]) -> str:
    return max(statuses, key=STATUS_ORDER.index, default="identical")


def compare_tables(a: Path, b: Path, tol: dict) -> list[dict[str, Any]]:
    """Cell-by-cell comparison of two versions of one table (rows keyed by text columns)."""
    fa, fb = pd.read_csv(a), pd.read_csv(b)
    keys = [c for c in fa.columns if not pd.api.types.is_numeric_dtype(fa[c])]
    keys = [c for c in keys if c in fb.columns]
    # Rows sharing their text columns (a figure's points) are told apart by their order.
    fa, fb = fa.copy(), fb.copy()
    for frame in (fa, fb):
        frame["#"] = frame.groupby(keys, dropna=False).cumcount() if keys else range(len(frame))
    keys.append("#")
    ia, ib = fa.set_index(keys), fb.set_index(keys)
    cells = []
    values = [c for c in fa.columns if c not in keys and not (fa[c].isna().all() and c in fb
              and fb[c].isna().all())]  # fmt: skip
    for idx in ia.index.union(ib.index, sort=False):
        for col in values:
            va = ia[col].get(idx) if idx in ia.index and col in ia.columns else None
            vb = ib[col].get(idx) if idx in ib.index and col in ib.columns else None
            if va is None or vb is None:
                status = "only_in_a" if vb is None else "only_in_b"
            elif isinstance(va, pd.Series) or isinstance(vb, pd.Series):
                status = "different"  # duplicate row keys: not comparable cell by cell
            else:
                both_nan = (
                    isinstance(va, float) and isinstance(vb, float)
                    and math.isnan(va) and math.isnan(vb)
                )  # fmt: skip
                if both_nan or va == vb:
                    status = "identical"
                elif isinstance(va, (int, float)) and isinstance(vb, (int, float)):
                    ok, _ = _close(float(va), float(vb), tol)
                    status = "within_tolerance" if ok else "different"
                else:
                    status = "different"
            cells.append({"row": _key_text(idx), "column": col, "a": _num(va), "b": _num(vb),
                          "status": status})  # fmt: skip
    return cells


def _key_text(idx: Any) -> str:
    """A row's text columns, and its order among rows that share them (when not the first)."""
    if not isinstance(idx, tuple):
        return f"#{idx}"
    *parts, n = idx
    return " | ".join(map(str, parts)) + (f" #{n}" if n else "")


def _num(v: Any) -> Any:
    if v is None or isinstance(v, pd.Series):
        return None
    if isinstance(v, (np.floating, float)):
        return None if math.isnan(float(v)) else float(v)
    if isinstance(v, np.integer):
        return int(v)
    return v


def _env_of(step: dict, run_env: dict | None) -> dict | None:
    env = step.get("environment") or run_env
    if not env:
        return None
    drop = {"host", "system"}
    return {k: v for k, v in env.items() if k not in drop}


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
    for job_id, ja in jobs_a.items():
        jb = jobs_b.get(job_id)
        if jb is None:
            lineage_split = lineage_split or {"step": job_id, "rule": ja.rule,
                                              "kind": "inputs", "detail": "not in the other run"}  # fmt: skip
            continue
        sa, sb = step_summary(la, ja), step_summary(lb, jb)
        kind, detail = None, ""
        if ja.cfg != jb.cfg or [p for p in ja.params if _literal(p) != ja.code] != [
            p for p in jb.params if _literal(p) != jb.code
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
    return {"lineage_diverges_at": lineage_split, "outputs_first_differ_at": output_split}


def _statuses_under(path: str, file_status: dict[str, str]) -> list[str]:
    if path in file_status:
        return [file_status[path]]
    prefix = path.rstrip("/") + "/"
    return [s for p, s in file_status.items() if p.startswith(prefix)]


def _run_env(results: Path) -> dict | None:
    prov = results / "provenance.json"
    if not prov.is_file():
        return None
    data = read_json(prov)
    return data.get("environment") or {
        "packages": data.get("packages"),
        "hardware": {k: v for k, v in (data.get("hardware") or {}).items() if k != "system"},
    }


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
    tables = {}
    for rel in sorted(fa & fb):
        if rel.endswith(".csv") and not rel.startswith(f"{results_a.name}/audit/"):
            cells = compare_tables(results_a.parent / rel, results_b / Path(rel).relative_to(results_a.name), tol)  # fmt: skip
            tables[rel] = {
                "cells": len(cells),
                "status_counts": _counts(c["status"] for c in cells),
                "differences": [c for c in cells if c["status"] != "identical"][:50],
            }
    env_a, env_b = _run_env(results_a), _run_env(results_b)
    diverging = {}
    for entry in files:
        if entry["status"] in ("different", "within_tolerance"):
            diverging[entry["path"]] = divergence(entry["path"], la, lb, status, env_a, env_b)
    return {
        "a": str(results_a),
        "b": str(results_b),
        "tolerance": tol,
        "file_status_counts": _counts(status.values()),
        "files": files,
        "tables": tables,
        "divergence": diverging,
        "environment_equal": _env_of({}, env_a) == _env_of({}, env_b),
    }


def _counts(values: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for v in values:
        out[v] += 1
    return dict(sorted(out.items()))


# =========================================================================== the audit


def audit(
    results: Path,
    against: Path | None = None,
    staleness_args: list[str] | None = None,
    tol: dict | None = None,
    label: str | None = None,
) -> dict[str, Any]:
    """The audit record of one results folder (``staleness_args`` None: no dry run)."""
    from drpipe.provenance import environment

    lineage = Lineage(results.parent)
    if not lineage.jobs and not lineage.vanished:
        raise SystemExit(
            f"error: no Snakemake metadata under {results.parent / '.snakemake' / 'metadata'}: "
            "audit a results folder inside the working directory Snakemake ran in"
        )
    if not any(Path(o).parts[0] == results.name for o in lineage.records):
        raise SystemExit(
            f"error: {results}: no Snakemake record names a file in this folder (records of "
            f"existing files: {len(lineage.records)}, of files gone: {len(lineage.vanished)}); "
            "a moved or renamed results folder keeps its records under its old name: audit the "
            "folder Snakemake wrote, and compare another one with --against"
        )
    tables = {}
    cells = []
    for job, table in table_jobs(lineage):
        tables[table] = {"rule": job.rule, "step": job.id}
        cells += table_cells(lineage, job, table)
    metric_files = sorted({c["metrics"] for c in cells if c["metrics"]})
    chains = {m: [j.id for j in reversed(lineage.upstream([m]))] for m in metric_files}
    for table, info in tables.items():
        info["lineage"] = [j.id for j in reversed(lineage.upstream([table]))]
    used = {s for chain in chains.values() for s in chain}
    used |= {s for info in tables.values() for s in info["lineage"]}
    steps = {jid: step_summary(lineage, lineage.jobs[jid]) for jid in sorted(used)}
    inputs = input_records(lineage)
    record: dict[str, Any] = {
        "results": label or str(results),
        "generated": "drpipe audit",
        "tables": tables,
        "cells": cells,
        "lineage": chains,
        "steps": steps,
        "inputs": inputs,
        "checksum_mismatches": checksum_mismatches(lineage, inputs),
        "runtime_by_rule": runtime_by_rule(lineage),
        "environment": {
            "recorded": _run_env(results),
            "per_step": sorted(j for j, s in steps.items() if s["environment"]),
            "audit_machine": environment(("cpu", "torch", "faiss", "blas")),
        },
        "tolerance": tol or TOLERANCE,
        "records_without_file": lineage.vanished,
    }
    claims = results / "claims.csv"
    if claims.is_file():
        frame = pd.read_csv(claims)
        record["claims"] = {
            "file": str(claims),
            "verdicts": _counts(frame["verdict"].astype(str)),
        }
    if staleness_args is not None:
        record["staleness"] = staleness(lineage, staleness_args)
    if against is not None:
        record["against"] = compare_runs(results, against, tol)
    return record


def runtime_by_rule(lineage: Lineage) -> dict[str, dict[str, Any]]:
    """Jobs, total wall time and peak memory per rule (benchmark files)."""
    out: dict[str, dict[str, Any]] = {}
    for job in lineage.jobs.values():
        bench = benchmark_file(job)
        timing = read_benchmark(lineage.workdir / bench) if bench else None
        entry = out.setdefault(job.rule, {"jobs": 0, "seconds": 0.0, "max_rss_mb": None})
        entry["jobs"] += 1
        if timing and timing["seconds"] is not None:
            entry["seconds"] = round(entry["seconds"] + timing["seconds"], 2)
        if timing and timing["max_rss_mb"] is not None:
            entry["max_rss_mb"] = max(entry["max_rss_mb"] or 0.0, timing["max_rss_mb"])
    return dict(sorted(out.items()))


# =========================================================================== rendering


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


# =========================================================================== report


def report_targets(results: Path) -> list[str]:
    """Targets for ``snakemake --report``: the recorded targets plus the audit's own pages."""
    lineage = Lineage(results.parent)
    targets = [t for t in lineage.leaves() if (lineage.workdir / t).exists()]
    for extra in (
        sorted((results / "report").rglob("*.html")) if (results / "report").is_dir() else []
    ):
        targets.append(str(extra.relative_to(results.parent)))
    for name in ("claims.csv", "audit/audit.html"):
        if (results / name).is_file():
            targets.append(str(Path(results.name) / name))
    return sorted(set(targets))


def build_report(results: Path, html_out: Path, extra: list[str]) -> None:
    flags = ["--nolock", "--cores", "1", "--report", str(html_out.resolve())]
    cmd = snakemake_command(results.parent, extra, report_targets(results), flags)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"error: snakemake --report failed:\n{proc.stderr[-4000:]}")


def report_pages(results: Path) -> list[tuple[Path, Path, Path | None]]:
    """(csv, page, png) for every table or figure of a results folder (recorded jobs that write
    a CSV from metrics): figures (a PNG beside the CSV) get a page under report/figures/."""
    lineage = Lineage(results.parent)
    pages = []
    for job, table in table_jobs(lineage):
        csv_path = results.parent / table
        if not csv_path.is_file():
            continue
        rel = csv_path.relative_to(results).with_suffix("")
        png = csv_path.with_suffix(".png")
        if str(png.relative_to(results.parent)) in job.outputs and png.is_file():
            pages.append((csv_path, results / "report" / "figures" / f"{rel}.html", png))
        else:
            pages.append((csv_path, results / "report" / f"{rel}.html", None))
    return pages


# =========================================================================== CLI


def _iter_args(text: str | None) -> Iterator[str]:
    yield from shlex.split(text or "")


def _cmd_audit(args: argparse.Namespace) -> int:
    results = Path(args.results).resolve()
    if not results.is_dir():
        raise SystemExit(f"error: {results} is not a folder")
    extra = list(_iter_args(args.snakemake_args))
    if args.claims:
        from drpipe import claims as claims_mod

        defaults, claims = claims_mod.load_claims()
        resolved = claims_mod.resolve_claims(claims_mod.recorded_config(results), claims)
        frame = claims_mod.evaluate_claims(resolved, results, claims, defaults)
        claims_mod.write_claims(frame, args.claims)
        log.info("claims -> %s", args.claims)
    tol = dict(TOLERANCE)
    if args.rtol is not None:
        tol["rtol"] = args.rtol
    if args.atol is not None:
        tol["atol"] = args.atol
    against = Path(args.against).resolve() if args.against else None
    record = audit(results, against, None if args.no_staleness else extra, tol, args.results)
    out = Path(args.out)
    write_audit(record, out)
    for line in summary_lines(record):
        log.info("%s", line)
    if args.tables_html or args.report:
        for csv_path, page, png in report_pages(results):
            render_csv_html(csv_path, page, png=png)
        if (results / "claims.csv").is_file():
            render_csv_html(results / "claims.csv", results / "report" / "claims.html", "Claims")
    if args.report:
        build_report(results, Path(args.report), extra)
        log.info("report -> %s", args.report)
    return 0


def _cmd_html(args: argparse.Namespace) -> int:
    render_csv_html(
        Path(args.csv), Path(args.out), args.title, Path(args.png) if args.png else None
    )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("audit", help="lineage, staleness and run comparison of a results folder")
    p.add_argument("results", help="the results folder (inside the Snakemake working directory)")
    p.add_argument("--out", required=True, help="folder for audit.json, audit.md, audit.html")
    p.add_argument("--against", help="another results folder to compare with, cell by cell")
    p.add_argument("--claims", help="also test the papers' claims and write this CSV")
    p.add_argument("--tables-html", action="store_true", help="render tables to results/report/")
    p.add_argument("--report", help="also build Snakemake's HTML report at this path")
    p.add_argument("--no-staleness", action="store_true", help="skip the snakemake dry run")
    p.add_argument("--snakemake-args", default="",
                   help="arguments of the user's snakemake command (config files, --config)")  # fmt: skip
    p.add_argument("--rtol", type=float, default=None, help=f"default {TOLERANCE['rtol']}")
    p.add_argument("--atol", type=float, default=None, help=f"default {TOLERANCE['atol']}")
    p.set_defaults(func=_cmd_audit)

    p = sub.add_parser("table-html", help="render a table CSV as an HTML page (for the report)")
    p.add_argument("--csv", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--title")
    p.add_argument("--png", help="a figure's image, shown above its data")
    p.set_defaults(func=_cmd_html)
