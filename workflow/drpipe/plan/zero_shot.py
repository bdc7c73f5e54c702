"""Zero-shot rows: off-the-shelf encoders (config ``zero_shot``) evaluated without fine-tuning,
as the initial encoder's row is. Entry ``<name>`` is the run ``init.<name>``: its model directory
``results/models/init.<name>/none`` is made by the ``init_model`` rule with the entry's encoder
settings (what it leaves out: the ``encoder:`` block's), then encoded, indexed, searched and
evaluated by the generic rules; its Table 2 row comes through ``table2_hook``."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

from drpipe.encoder_settings import (
    OPTION_KEYS,
    describe,
    qa_pretraining,
    resolve_init,
    resolve_pooling,
)
from drpipe.plan.base import PlanBase

ZERO_SHOT_PREFIX = "init."
# What a zero-shot entry says about its row (not an encoder setting).
ENTRY_ONLY = ("name", "label", "note")


class ZeroShotPlan(PlanBase):
    @cached_property
    def ZERO_SHOT(self):
        """Run name (``init.<name>``) -> its ``zero_shot`` entry, in config order."""
        return {f"{ZERO_SHOT_PREFIX}{e['name']}": e for e in self.C.get("zero_shot") or []}

    def init_cfg(self, run):
        """`drpipe init-model --cfg` of an initial-encoder run: ``init`` the ``encoder:`` block;
        ``init.<name>`` the block under its zero-shot entry's settings (one encoder for both
        sides: an off-the-shelf model is one model)."""
        cfg = dict(self.C["encoder"])
        if run != "init":
            entry = self.ZERO_SHOT[run]
            cfg.update({k: v for k, v in entry.items() if k not in ENTRY_ONLY})
            cfg["tied"] = True
        return self.with_model_paths(cfg)

    def init_model_inputs(self, run):
        """The stand-in directory of the run's encoder, if it has one."""
        init = self.C["encoder"]["init"] if run == "init" else self.ZERO_SHOT[run]["init"]
        return self.model_inputs(init)

    def zero_shot_label(self, run):
        entry = self.ZERO_SHOT[run]
        return entry.get("label") or f"{entry['name']} (zero-shot)"

    def encoder_settings_text(self):
        """The ``encoder:`` block's pooling, normalisation, prefixes and title, in words."""
        enc = self.C["encoder"]
        return describe({k: enc.get(k) for k in ("pooling", *OPTION_KEYS) if k in enc})

    def encoder_pretraining(self):
        """The papers' QA data that ``encoder.init`` was trained on before this workflow
        (drpipe.encoder_settings.qa_pretraining), for Table 2's scale note."""
        return qa_pretraining(self.C["encoder"]["init"])

    def auto_pooling(self, init, settings):
        """``pooling: auto`` resolved from a local model's sentence-transformers files (a
        package's or a directory's; a hub id stays ``auto``: the plan reads no network)."""
        if settings.get("pooling") != "auto":
            return {}
        try:
            path = resolve_init(init)
            if not Path(path).is_dir():
                return {}
            pooling, normalize = resolve_pooling(path, "auto", settings.get("normalize"))
        except (OSError, ValueError):
            return {}  # the init_model job says what is wrong
        return {"pooling": pooling, "normalize": normalize, "from_st": True}

    def zero_shot_setup(self):
        """What Table 2's zero_shot note says of each entry (drpipe.tables.notes)."""
        out = []
        for run, entry in self.ZERO_SHOT.items():
            cfg = {**self.C["encoder"], **entry}
            settings = {k: cfg.get(k) for k in ("pooling", *OPTION_KEYS)}
            settings.update(self.auto_pooling(self.init_cfg(run)["init"], settings))
            out.append(
                {
                    "label": self.zero_shot_label(run),
                    "init": entry["init"],
                    "settings": describe(settings),
                    "note": entry.get("note", ""),
                }
            )
        return out

    def table2_hook(self):
        """A Table 2 row per zero-shot entry and dataset (train set "none", training "None"),
        with no paper value (no paper evaluates these encoders)."""
        rows = [
            (run, "none", dataset, "None", self.zero_shot_label(run))
            for dataset in self.C["tables"]["datasets"]
            for run in self.ZERO_SHOT
        ]
        return rows, {run: {"paper": None} for run in self.ZERO_SHOT}
