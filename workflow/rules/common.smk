# The adapter between Snakemake and the plan (drpipe.plan): the resolved config `C`, the plan
# `P`, and the plan's names as the rules read them (source_file(...), RUN, table2_runs(), ...).
# Planning logic lives in drpipe.plan and workflow/drpipe/papers/<paper>/plan.py, not here.
import os
from pathlib import Path

import drpipe
from drpipe.cluster_check import refuse_if_earlier_jobs
from drpipe.config import ConfigError, load_workflow_config
from drpipe.job_threads import job_threads
from drpipe.papers import papers
from drpipe.plan import build_plan, exports, targets

PKG = Path(workflow.basedir) / "workflow" / "drpipe"
# The code hashes describe PKG; the jobs run the installed drpipe. They must be one.
if Path(drpipe.__file__).resolve().parent != PKG.resolve():
    raise WorkflowError(
        f"the installed drpipe is {Path(drpipe.__file__).parent}, not this checkout's {PKG}: "
        "its code hashes would not describe what runs. Install this checkout "
        "(pip install -e .) or run the workflow of the checkout that is installed."
    )

# defaults < scale overlay < --configfile < --config key=value; every config error (schema,
# cross-key rules, the plan's own) is raised here, before the DAG is built.
try:
    C = load_workflow_config(
        workflow.basedir,
        workflow.config_settings.config,
        workflow.overwrite_configfiles or [],
    )
    # `threads: auto` becomes this machine's number before any rule reads it (job_threads);
    # THREADS_ALONE is for the jobs that run by themselves.
    THREADS_ALONE = job_threads(C["threads"], alone=True)
    C["threads"] = job_threads(C["threads"])
    P = build_plan(C, mirror=os.environ.get("DATA_MIRROR", ""))
except ConfigError as err:
    raise WorkflowError(str(err)) from None

globals().update(exports(P))
# Each paper's tables and figures: what `make rehearse` builds.
PAPER_TARGETS = targets(P)


def runtime(fn):
    """A params function for settings that change no output (batch sizes, checkpoint cadence).
    Snakemake leaves params functions that read `resources` out of its rerun trigger."""
    return lambda wildcards, resources: fn(wildcards)


def env(gpu=False):
    """The rule's conda environment, relative to the .smk file being read."""
    path = Path(workflow.basedir) / P.env_file(gpu)
    return os.path.relpath(path, workflow.current_basedir)
