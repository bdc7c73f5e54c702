"""The workflow's plan, importable without Snakemake: config in; runs, table cells, paths,
config slices and resources out. The Snakefile builds one plan (``build_plan``) and its rules
read their inputs, outputs and params from it; tests read the same plan in milliseconds.

A plan is composed of parts: each registered paper's (``papers/<key>/plan.py``, whose ``PLAN``
names its classes: plain mixins, so that the papers' folder imports neither this package nor
the config loader, both of which import the paper registry) and the shared ones here
(``base``, ``inputs``, ``steps``, ``provenance``, ``zero_shot``, ``external``,
``transfer``, ``seeds``). Parts meet through hooks, methods a part defines under an agreed name and
``PlanBase.hooks`` collects: ``table2_hook`` (rows a paper adds to the shared Table 2),
``run_report_hook`` (the reports behind a paper's own runs) and ``targets`` (a paper's tables
and figures).
"""

from __future__ import annotations

import importlib
from functools import cache
from pathlib import Path

from drpipe.papers import papers
from drpipe.plan.base import PlanBase, cfg_json
from drpipe.plan.external import ExternalRunsPlan
from drpipe.plan.inputs import InputsPlan
from drpipe.plan.provenance import ProvenancePlan
from drpipe.plan.seeds import SeedsPlan
from drpipe.plan.steps import StepsPlan
from drpipe.plan.transfer import TransferPlan
from drpipe.plan.zero_shot import ZeroShotPlan

__all__ = ["PlanBase", "build_plan", "cfg_json", "exports", "plan_class", "targets"]


@cache
def plan_class() -> type[PlanBase]:
    """The plan's class: each registered paper's parts (papers by year), then the shared ones."""
    parts: list[type] = []
    for p in papers():
        if p.file("plan.py"):
            parts += importlib.import_module(f"{p.module}.plan").PLAN
    return type(
        "Plan",
        (
            *parts,
            TransferPlan,
            SeedsPlan,
            ExternalRunsPlan,
            ZeroShotPlan,
            ProvenancePlan,
            StepsPlan,
            InputsPlan,
        ),
        {},
    )


def build_plan(config: dict, *, mirror: str = "", workdir: str | Path = ".") -> PlanBase:
    """The plan of a resolved config (``drpipe.config.resolve``); raises ConfigError for a
    config the plan cannot be made of."""
    return plan_class()(config, mirror=mirror, workdir=workdir)


def targets(plan: PlanBase) -> list[str]:
    """Every paper's tables and figures (what `make rehearse` builds)."""
    return [t for hook in plan.hooks("targets") for t in hook()]


# Plan methods that are the parts' plumbing, not names a rule reads.
_INTERNAL = frozenset({"check", "hooks", "targets", "workdir"})


def exports(plan: PlanBase) -> dict[str, object]:
    """The plan's names as the workflow's rules read them: its config ``C``, its constants
    (``RUN``, ``SCALE``, ...) and its bound methods (``source_file``, ``table2_runs``, ...)."""
    names = (n for n in dir(plan) if not n.startswith("_") and n not in _INTERNAL)
    return {name: getattr(plan, name) for name in names}
