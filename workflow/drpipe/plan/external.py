"""Runs made elsewhere (config ``external_runs``) as Table 2 rows: entry ``<name>`` is the run
``ext.<name>`` (train set ``none``), imported from its file into our run Parquet by the
``import_run`` rule (``drpipe runs import``: ids mapped onto our passages, every problem an
error naming the file, line and id), then evaluated and tabled as our own rows are."""

from __future__ import annotations

from functools import cached_property

from drpipe.plan.base import PlanBase

EXTERNAL_PREFIX = "ext."


class ExternalRunsPlan(PlanBase):
    @cached_property
    def EXTERNAL(self):
        """Run name (``ext.<name>``) -> its ``external_runs`` entry, in config order."""
        runs = self.C.get("external_runs") or {}
        return {f"{EXTERNAL_PREFIX}{name}": entry for name, entry in runs.items()}

    @cached_property
    def EXTERNAL_RUN(self):
        """The regex of the configured external runs (matches nothing without any)."""
        names = "|".join(n.removeprefix(EXTERNAL_PREFIX) for n in self.EXTERNAL)
        return f"ext[.](?:{names})" if names else "ext[.](?!)"

    def external_split(self, run):
        return self.EXTERNAL[run].get("split") or self.C["tables"]["split"]

    def external_file(self, run):
        return self.EXTERNAL[run]["file"]

    def external_cfg(self, run):
        """`drpipe runs import --cfg` of an external run (the depth Table 2 reads)."""
        entry = self.EXTERNAL[run]
        return {"format": entry.get("format", "auto"), "id_prefix": entry.get("id_prefix", ""),
                "depth": max(self.EVAL_KS)}  # fmt: skip

    def external_setup(self):
        """What Table 2's ``external`` note says of each entry (drpipe.tables.notes)."""
        return [{"label": e["label"], "file": e["file"], "note": e.get("note", "")}
                for e in self.EXTERNAL.values()]  # fmt: skip

    def table2_hook(self):
        """A Table 2 row per external run on its dataset (when the table has that dataset and
        split), training "None", no paper value."""
        t = self.C["tables"]
        rows = [
            (run, "none", e["dataset"], "None", e["label"])
            for run, e in self.EXTERNAL.items()
            if e["dataset"] in t["datasets"] and self.external_split(run) == t["split"]
        ]
        return rows, {run: {"paper": None} for run, *_ in rows}

    def check(self):
        """An entry whose dataset or split Table 2 does not show would have no row."""
        from drpipe.errors import ConfigError

        super().check()
        t = self.C["tables"]
        for run, e in self.EXTERNAL.items():
            name = run.removeprefix(EXTERNAL_PREFIX)
            if e["dataset"] not in t["datasets"]:
                raise ConfigError(f"key external_runs.{name}.dataset: {e['dataset']!r} is not "
                                  f"a Table 2 dataset (tables.datasets: {t['datasets']})")  # fmt: skip
            if self.external_split(run) != t["split"]:
                raise ConfigError(f"key external_runs.{name}.split: Table 2 shows the "
                                  f"{t['split']!r} split")  # fmt: skip
