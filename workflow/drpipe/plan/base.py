"""The plan's base: the resolved config, the runs it names, code hashes and the paths every step
shares (logs, benchmarks, metrics)."""

from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path

from drpipe.codehash import Snapshot, code_hash
from drpipe.config import (
    method_config,
    method_variant,
    runtime_options,
    split_run_name,
)
from drpipe.config_rules import eval_ks, multi_train_set
from drpipe.methods import method_module, method_names
from drpipe.tables.scale import scale_cfg


def cfg_json(obj: object) -> str:
    """A config slice as the JSON string a rule passes to `drpipe ... --cfg`."""
    return json.dumps(obj, sort_keys=True)


class PlanBase:
    """The resolved config ``C`` and what every part of the plan shares. A plan is the
    composition of this base, the shared steps and each registered paper's part
    (``drpipe.plan.build_plan``); it reads the config and the data mirror, and the results
    folder ``workdir`` only to find where a fetched source was recorded."""

    METHODS = method_names()
    cfg_json = staticmethod(cfg_json)

    def __init__(self, config: dict, *, mirror: str = "", workdir: str | Path = ".") -> None:
        self.C = config
        self.MIRROR = mirror
        self.workdir = Path(workdir)
        self._CODE_HASHES: dict[tuple[str, ...], str] = {}
        # The package as this plan first reads it: one read of each file for all its hashes.
        self._PACKAGE = Snapshot()
        self.check()

    def runtime_opts(self, *section: str) -> str:
        """Command-line options of a config section's settings that change no result (the
        schema's ``x-runtime`` keys): passed outside the hashed ``--cfg``."""
        return self.options(runtime_options(self.C, *section))

    def result_slice(self, *section: str) -> dict:
        """A config section without its settings that change no result (a rule's ``--cfg``)."""
        node = self.C
        for key in section:
            node = node[key]
        runtime = runtime_options(self.C, *section)
        return {k: v for k, v in node.items() if k not in runtime}

    def run_config(self, run: str, train_set: str | None = None) -> dict:
        """A run's training cfg (drpipe.config.method_config): the method's defaults, its config
        block, the variant's overrides and the train set's epochs."""
        return method_config(self.C, run, train_set)

    def run_variant(self, run: str) -> dict:
        """The ``methods.<m>.variants.<v>`` entry of a run ``<m>.<v>``."""
        return method_variant(self.C, run)

    def check(self) -> None:
        """Raise the config errors that the plan finds (every part adds its own checks)."""

    def hooks(self, name: str) -> list:
        """The bound methods ``name`` that the plan's parts define (papers by year, then the
        shared parts): how one paper adds rows or reports to another's table."""
        return [getattr(cls, name).__get__(self) for cls in type(self).__mro__ if name in vars(cls)]

    def env_file(self, gpu: bool = False) -> str:
        """The conda environment file of a rule, relative to the workflow's root: the CUDA one
        for rules that use a GPU where the config's resources ask for GPUs."""
        name = "gpu" if gpu and self.C.get("resources", {}).get("gpus") else "cpu"
        return f"envs/{name}.yaml"

    @cached_property
    def SCALE(self):
        return self.C["scale"]

    # Beside each paper value at the paper scale: ours - paper is "ok" within this many points.
    @cached_property
    def SCALE_CFG(self):
        """What a table's --cfg says of the scale (its name, whether ours - paper is printed,
        its note): drpipe.tables.scale.scale_cfg."""
        return scale_cfg(self.C)

    @cached_property
    def TOLERANCE(self):
        return self.C["tables"].get("paper_tolerance", 1.0)

    @cached_property
    def DOCS(self):
        return self.C["corpus"]["documents"]

    # A run: a registered method or one of its variants ("dpr", "dpr.t3_gold_7"), or either
    # trained again under another seed (config ``seeds``: "dpr@s14", "dpr.t3_gold_7@s14").
    @cached_property
    def RUN(self):
        return "(?:{})(?:\\.[A-Za-z0-9_]+)?(?:@s[0-9]+)?".format("|".join(self.METHODS))

    # The initial encoders: "init" (encoder.init) and a zero-shot entry's "init.<name>".
    @cached_property
    def INIT_RUNS(self):
        names = [e["name"] for e in self.C.get("zero_shot") or []]
        return "init(?:\\.(?:{}))?".format("|".join(names)) if names else "init"

    # Runs with an encoder: an initial (not fine-tuned) encoder or a trained run.
    @cached_property
    def DENSE(self):
        return f"{self.INIT_RUNS}|{self.RUN}"

    def precision_cfg(self, section):
        """A forward pass's precision keys from a config section (encode, reader): int8's weight
        width only where it is asked for, so that it reruns no fp32, bf16 or auto pass (`auto`
        never picks int8 for these: drpipe.precision.AUTO_PATHS)."""
        out = {"precision": section["precision"]}
        if str(section["precision"]).lower() == "int8":
            out["int8_weight_bits"] = section["int8_weight_bits"]
        return out

    def code(self, *modules):
        """Hash of the code a job runs: the import closure of its command's modules (computed
        once per module set: a paper-scale DAG asks for it thousands of times)."""
        if modules not in self._CODE_HASHES:
            self._CODE_HASHES[modules] = code_hash(modules, snapshot=self._PACKAGE)
        return self._CODE_HASHES[modules]

    def run_method(self, run):
        """The method of a run ("init" is the initial encoder, used the way DPR uses one)."""
        return "dpr" if run == "init" or run.startswith("init.") else split_run_name(run)[0]

    def method_code(self, run, *modules):
        """Code hash of a command plus the one method module the run uses (its own code only)."""
        return self.code(*modules, method_module(self.run_method(run)))

    def options(self, values):
        """Command-line options from a dict: {"batch_size": 64} -> "--batch-size 64"."""
        return " ".join(f"--{k.replace('_', '-')} {int(v)}" for k, v in sorted(values.items()))

    def gpus(self, n=1):
        """GPUs a job asks for: none unless the config's resources ask for GPUs."""
        return n if self.C.get("resources", {}).get("gpus") else 0

    def log_path(self, rule, name):
        return f"results/logs/{rule}/{name}.log"

    def bench_path(self, rule, name):
        return f"results/benchmarks/rules/{rule}/{name}.tsv"

    @cached_property
    def EVAL_KS(self):
        """The k every run is evaluated at (drpipe.config_rules.eval_ks): Table 2's columns,
        its MRR@k and the papers' own top-k columns."""
        return eval_ks(self.C)

    def metrics_file(self, run, train_set, dataset, split):
        return f"results/metrics/{run}/{train_set}/{dataset}-{split}.json"

    def settings(self, dataset, multi):
        """The (training, train set) pairs a dataset's rows are trained in: Single (its own
        train set, tables.single) and Multi (``multi``), each where configured."""
        pairs = (("Single", self.C["tables"]["single"].get(dataset)), ("Multi", multi))
        return [(training, ts) for training, ts in pairs if ts]

    def grid(self, dataset, methods, *, label, hybrid_label, multi):
        """Table rows (run, train set, dataset, training, label) of ``methods`` on ``dataset``
        in each training setting, each followed by its BM25 hybrid where hybrids are enabled
        and ``hybrid_label(method)`` names one (None: the method has none). ``multi(method)``
        is the method's Multi train set; ``label(method)`` its row label."""
        rows = []
        for method in methods:
            for training, ts in self.settings(dataset, multi(method)):
                rows.append((method, ts, dataset, training, label(method)))
                hybrid = self.C["hybrid"]["enabled"] and hybrid_label(method)
                if hybrid:
                    rows.append((f"{method}+bm25", ts, dataset, training, hybrid))
        return rows

    def multi_train_set(self, method):
        """The train set of a method's Multi rows: the Multi set of the paper that lists the method
        (`tables.<paper>.multi`: DCSR trains on NQ + TriviaQA + SQuAD), else `tables.multi` (DPR's
        NQ + TriviaQA + WQ + TREC); None: no Multi rows."""
        return multi_train_set(self.C, method)
