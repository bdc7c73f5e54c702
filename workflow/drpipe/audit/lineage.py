"""The recorded DAG of a working directory: who wrote each file, and the walk upstream from
any file (metrics -> run -> model and its training report -> training examples -> BM25 run and
index -> passages -> fetched inputs)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from drpipe.audit.metadata import Job, read_metadata


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
