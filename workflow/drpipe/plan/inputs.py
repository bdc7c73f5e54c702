"""Where inputs land: sources fetched from the mirror or their URL, question sets, and the
rehearsal's stand-in sources and models."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path, PurePosixPath

from drpipe.config import (
    ConfigError,
    method_config,
    split_run_name,
)
from drpipe.config_rules import qa_format_of
from drpipe.plan.base import PlanBase


class InputsPlan(PlanBase):
    def source_file(self, name):
        """Where input `name` is put by the fetch rule (file name from the mirror or the URL)."""
        if name not in self.C["sources"]:
            raise ConfigError(
                f"config: unknown source '{name}' (known: {sorted(self.C['sources'])})"
            )
        src = self.C["sources"][name]
        # A fetched, recorded file keeps its name wherever DATA_MIRROR points now.
        names = [Path(src["mirror"]).name] if src.get("mirror") else []
        if src.get("url"):
            names.append(src["url"].rsplit("/", 1)[-1])
        for base in names:
            if (self.workdir / f"results/data/records/{name}/{base}.json").is_file():
                return f"results/data/{name}/{base}"
        in_mirror = (
            self.MIRROR and src.get("mirror") and (Path(self.MIRROR) / src["mirror"]).is_file()
        )
        if in_mirror or not src.get("url"):
            base = Path(src["mirror"]).name
        else:
            base = src["url"].rsplit("/", 1)[-1]
        return f"results/data/{name}/{base}"

    def source_record(self, name):
        path = Path(self.source_file(name))
        return f"results/data/records/{name}/{path.name}.json"

    def qa_split(self, dataset, split):
        try:
            entry = self.C["qa"][dataset][split]
        except KeyError:
            entry = None
        if entry is None:
            raise ConfigError(f"config: qa.{dataset}.{split} is not configured")
        return entry

    def qa_format(self, dataset, split):
        entry = self.qa_split(dataset, split)
        if entry["format"] != "auto":
            return entry["format"]
        name = self.source_file(entry["source"])
        fmt = qa_format_of(name)
        if fmt is None:
            raise ConfigError(
                f"config: cannot tell the format of {name}; set qa.{dataset}.{split}.format"
            )
        return fmt

    def used_sources(self):
        names = [d["source"] for d in self.DOCS] if not self.C["corpus"]["passages_tsv"] else []
        if self.C["corpus"]["passages_tsv"]:
            names.append(self.C["corpus"]["passages_tsv"])
        for splits in self.C["qa"].values():
            names += [s["source"] for s in splits.values() if s]
        names += [v for v in self.C["train_examples"].values() if v != "mine"]
        names += list(self.C["dev_examples"].values())
        return sorted(set(names))

    @cached_property
    def STANDIN_SOURCES(self):
        return (self.C.get("standins") or {}).get("sources") or {}

    @cached_property
    def STANDIN_MODELS(self):
        return (self.C.get("standins") or {}).get("models") or {}

    def model_slug(self, model):
        """A hub id as one path component (as Hugging Face's cache names it)."""
        return "--".join(PurePosixPath(model).parts)

    def model_id(self, slug):
        return str(PurePosixPath(*slug.split("--")))

    def model_path(self, model):
        """Where a model the config names by hub id is read from: its stand-in directory when it
        has one (the rehearsal), else the id itself (transformers resolves it)."""
        if model in self.STANDIN_MODELS:
            return f"results/data/models/{self.model_slug(model)}"
        return model

    def model_inputs(self, *models):
        """The stand-in directories among ``models`` (inputs of the jobs that load them)."""
        return [self.model_path(m) for m in models if m in self.STANDIN_MODELS]

    def standin_inputs(self, spec):
        """A stand-in's inputs: name -> files (sources, or "model:<hub id>" stand-in models)."""
        out = {}
        for name, refs in spec["inputs"].items():
            out[name] = [
                (
                    self.model_path(r.removeprefix("model:"))
                    if r.startswith("model:")
                    else self.source_file(r)
                )
                for r in refs
            ]
        return out

    def standin_args(self, input):
        """``NAME=PATH`` arguments of `drpipe standin --inputs`."""
        out = []
        # Snakemake's input is a named list: iterating it gives the paths, .keys() the names.
        for k in input.keys():  # noqa: SIM118
            paths = [input[k]] if isinstance(input[k], str) else list(input[k])
            out += [f"{k}={p}" for p in paths]
        return " ".join(out)

    def init_inputs(self, run):
        """The stand-in of the encoder a run starts from, if it has one. A run whose variant is
        not configured (the hard-negative round's "<method>.hard_<miner>", another rule's) starts
        from its method's encoder."""
        try:
            cfg = method_config(self.C, run)
        except ConfigError:
            cfg = method_config(self.C, split_run_name(run)[0])
        return self.model_inputs(cfg["init"])

    def with_model_paths(self, cfg):
        """A training/encoder cfg whose ``init`` is read from its stand-in when it has one."""
        if cfg.get("init") in self.STANDIN_MODELS:
            return {**cfg, "init": self.model_path(cfg["init"])}
        return cfg
