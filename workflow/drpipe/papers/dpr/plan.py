"""DPR's plan: the shared Table 2 (its rows, their reports and notes), the BM25 hybrid's
weight and its tuning, the released checkpoints, and Table 3 / Figure 1's variants."""

from __future__ import annotations

from functools import cached_property

from drpipe.errors import ConfigError
from drpipe.methods import method_class
from drpipe.papers import paper, paper_of_run
from drpipe.papers.dpr.reader_plan import ReaderPlan
from drpipe.training.settings import DEFAULTS as TRAIN_DEFAULTS


class DprPlan:
    def targets(self):
        return ["results/dpr/table3.csv", "results/dpr/figure1.png"]

    def table3_cfg(self):
        """What DPR's Table 3 reads: each variant's overrides and the paper row it reproduces."""
        variants = {}
        for v in self.C["tables"]["table3"]["variants"]:
            entry = self.run_variant(f"dpr.{v}")
            variants[f"dpr.{v}"] = {**entry["overrides"], "paper_method": entry.get("paper_row")}
        return {**self.SCALE_CFG, "tolerance": self.TOLERANCE, "variants": variants}

    def figure1_labels(self):
        """Figure 1's curves: BM25, each training-set size, all of it."""
        sizes = [
            self.run_variant(f"dpr.{v}")["overrides"].get("max_examples")
            for v in self.C["tables"]["figure1"]["variants"]
        ]
        return ["BM25", *(f"# Train: {n}" for n in sizes), "# Train: all"]

    def figure1_cfg(self):
        f1 = self.C["tables"]["figure1"]
        return {
            **self.SCALE_CFG,
            "dataset": f1["dataset"],
            "split": f1["split"],
            "max_k": max(self.C["evaluate"]["ks"]),
        }

    RELEASED_RUN = "dpr.released"

    RELEASED_SUFFIX = " (released checkpoint)"

    def hybrid_tuning_datasets(self, run, train_set):
        """Datasets whose training questions the model of (run, train_set) held out for
        validation: those the weight is tuned on, whatever dataset the hybrid evaluates (the
        weight belongs to the model; an evaluation-only dataset has no training questions).
        """
        if run == "init":
            raise ConfigError("config: hybrid.lambda 'tune' needs a trained run, not init")
        # That the train set holds questions out (no dev_examples files, no released training
        # files) is a config rule, checked at load (drpipe.config_rules).
        return self.C["train_sets"][train_set]

    def hybrid_tuning_inputs(self, w):
        """Inputs of the weight's tuning: the model's training report (naming the questions it
        held out of training), and, for each dataset of its train set, the training questions,
        their vectors and their BM25 candidates; and the passages. Never a test question."""
        if self.C["hybrid"]["lambda"] != "tune":
            return {}
        datasets = self.hybrid_tuning_datasets(w.run, w.train_set)
        return {
            "tune_queries": [self.qvec_file(w.run, w.train_set, d, "train") for d in datasets],
            "tune_bm25_run": [self.bm25_hybrid_run(d, "train") for d in datasets],
            "tune_questions": [f"results/qa/{d}/train.parquet" for d in datasets],
            "tune_report": f"results/models/{w.run}/{w.train_set}.report.json",
            "passages": "results/corpus/passages.parquet",
        }

    def hybrid_cfg(self, run):
        keys = ("lambda", "depth") + (("grid",) if self.C["hybrid"]["lambda"] == "tune" else ())
        cfg = {**self.search_cfg(run), **{k: self.C["hybrid"][k] for k in keys}}
        if self.C["hybrid"]["lambda"] == "tune":
            cfg["ks"] = self.C["evaluate"]["ks"]
        return cfg

    # Runs that training makes (every run but the released checkpoints).
    @cached_property
    def TRAINED(self):
        return "(?!{}/){}".format(self.RELEASED_RUN.replace(".", "[.]"), self.RUN)

    def released_inputs(self, w):
        """What loading a released checkpoint reads: its .cp file (a source) and the stand-in
        directories of the models it names (the rehearsal)."""
        entry = self.C["released"][w.train_set]
        if entry["layout"] == "dpr_cp":
            return {
                "checkpoint": self.source_file(entry["source"]),
                "models": self.model_inputs(entry["base"]),
            }
        return {"models": self.model_inputs(entry["question_encoder"], entry["ctx_encoder"])}

    def released_cfg(self, train_set):
        entry = dict(self.C["released"][train_set])
        for key in ("question_encoder", "ctx_encoder"):
            if key in entry:
                entry[key] = self.model_path(entry[key])
        if "base" in entry:
            entry["base_path"] = self.model_path(entry["base"])
        entry.pop("source", None)  # its bytes are the input file
        lens = {k: self.C["encoder"][k] for k in ("max_query_len", "max_passage_len")}
        return {**entry, **lens}

    def table2_runs(self):
        """(run, train_set, dataset, training label, row label) of every Table 2 cell we compute."""
        t = self.C["tables"]
        rows = []
        for dataset in t["datasets"]:
            rows.append(("bm25", "none", dataset, "None", "BM25"))
            rows.append(("init", "none", dataset, "None", "DPR init (no fine-tuning)"))
            rows += self.grid(
                dataset,
                t["methods"],
                label=lambda m: method_class(m).label,
                hybrid_label=lambda m: method_class(m).hybrid and f"BM25+{method_class(m).label}",
                multi=self.multi_train_set,
            )
            rows += self.released_rows(dataset)
        for hook in self.hooks("table2_hook"):
            rows += hook()[0]
        return rows

    @cached_property
    def RELEASED_LABEL(self):
        return f"DPR{self.RELEASED_SUFFIX}"

    def released_rows(self, dataset):
        """Table 2 rows of DPR's released checkpoints on ``dataset``: where our DPR of the same
        train set has a row (Single: tables.single; Multi: DPR's Multi set), and its BM25 hybrid
        when the weight is fixed (tuning needs the held-out questions of a training run)."""
        fixed = self.C["hybrid"]["lambda"] != "tune"
        rows = self.grid(
            dataset,
            [self.RELEASED_RUN],
            label=lambda _: self.RELEASED_LABEL,
            hybrid_label=lambda _: fixed and f"BM25+{self.RELEASED_LABEL}",
            multi=lambda _: self.multi_train_set("dpr"),
        )
        return [r for r in rows if r[1] in self.C["released"]]

    def table2_inputs(self):
        split = self.C["tables"]["split"]
        return [self.metrics_file(r, ts, d, split) for r, ts, d, _, _ in self.table2_runs()]

    def table2_curves(self):
        """(per-question files, cfg) of Table 2's top-k curves: one curve per cell, in the
        table's row order, each with its dataset, label and kind of line."""
        split = self.C["tables"]["split"]
        row_map = self.table2_row_map()
        files, rows = [], []
        for run, ts, dataset, training, label in self.table2_runs():
            protocol = row_map[run].get("protocol", "standard")
            kind = "bm25" if run == "bm25" else "hybrid" if run.endswith("+bm25") else "dense"
            if "oracle" in str(protocol):
                kind, protocol = "oracle", "oracle: saw the test answers"
            name = label + (f" [{protocol}]" if protocol != "standard" else "")
            name += " (Multi)" if training == "Multi" else ""
            files.append(
                self.metrics_file(run, ts, dataset, split).removesuffix(".json")
                + ".per_question.parquet"
            )
            rows.append({"dataset": dataset, "label": name, "kind": kind})
        cfg = {"scale": self.SCALE, "rows": rows, "max_k": max(self.EVAL_KS)}
        return files, cfg

    def run_tag(self, run, train_set):
        """A TREC run tag naming the Table 2 row (the format allows no whitespace)."""
        return f"drpipe:{run}:{train_set}"

    def export_files(self, formats=("trec",)):
        """Every Table 2 row's run in each format ("trec", "dpr.json", "pyserini.json"),
        beside its Parquet."""
        split = self.C["tables"]["split"]
        return [
            f"results/runs/{run}/{ts}/{dataset}-{split}.{fmt}"
            for run, ts, dataset, _, _ in self.table2_runs()
            for fmt in formats
        ]

    def table2_row_map(self):
        """Our run names -> the paper's row labels and the paper whose numbers sit beside them
        (None: no paper lists the run's method); Single/Multi follow from the train set."""
        extras = {}
        for hook in self.hooks("table2_hook"):
            extras.update(hook()[1])
        rows = {}
        for run, _, _, training, label in self.table2_runs():
            rows[run] = {
                "method": label,
                **({"training": training} if training == "None" else {}),
                "paper": paper_of_run(run),
                **extras.get(run, {}),
            }
            if run.startswith(self.RELEASED_RUN):
                # Beside the numbers the paper printed for the model it released.
                rows[run]["paper_method"] = label.removesuffix(self.RELEASED_SUFFIX)
        return rows

    def precision_sources(self, run, train_set, dataset, split):
        """Where the reports are that say in which precision a cell was made (see
        drpipe.tables.precision): its training (none for BM25 and the initial encoder), the
        folder of its corpus shard reports, its question encoding; a hybrid or AOpt run's are those
        of the dense run it starts from."""
        if run == "bm25":
            return {}
        for hook in self.hooks("run_report_hook"):
            found = hook(run, train_set, dataset)
            if found:
                run = found[1]
        run = run.split("+")[0]
        out = {
            "corpus": f"results/embeddings/{run}/{train_set}",
            "queries": [
                self.qvec_file(run, train_set, dataset, split).removesuffix(".npy") + ".report.json"
            ],
        }
        if not run.startswith("init"):
            out["training"] = [f"results/models/{run}/{train_set}.report.json"]
        return out

    def table2_precision(self):
        """Per Table 2 cell, where its precision reports are (drpipe.tables.precision)."""
        split = self.C["tables"]["split"]
        return {
            f"{run}|{ts}|{d}": self.precision_sources(run, ts, d, split)
            for run, ts, d, _, _ in self.table2_runs()
            if run != "bm25" and not run.startswith("ext.")  # no pass of ours made them
        }

    def table2_reports(self, precision=None):
        """The report files behind table2_precision (inputs of the Table 2 rule), or behind
        another table's cells (`precision`: a subset of table2_precision)."""
        files = set()
        for roles in (self.table2_precision() if precision is None else precision).values():
            files.update(roles.get("training", []), roles["queries"])
            shards = range(self.C["encode"]["shards"])
            files.update(f"{roles['corpus']}/shard-{i}.report.json" for i in shards)
        return sorted(files)

    def table2_code(self):
        """Code hash of Table 2: its module and the papers whose numbers sit beside its rows."""
        keys = {v["paper"] for v in self.table2_row_map().values() if v["paper"]}
        return self.code("drpipe.papers.table2", *(paper(k).module for k in sorted(keys)))

    def train_setting(self, method, key):
        """A method's training setting as `drpipe train` reads it: its config block (over the
        encoder's), else the default every method shares (a new block may name only a few keys).
        """
        return self.run_config(method).get(key, TRAIN_DEFAULTS.get(key))

    def table2_setup(self):
        """What Table 2's notes say about this run's setup (see drpipe.tables.notes.setup_notes)."""
        methods = self.C["tables"]["methods"]
        train_sets = {ts for _, ts, _, _, _ in self.table2_runs() if ts != "none"}
        fractions = [self.train_setting(m, "val_fraction") for m in methods] or [0.0]
        return {
            "encoder": self.C["encoder"]["init"],
            "encoder_settings": self.encoder_settings_text(),
            "encoder_pretraining": self.encoder_pretraining(),
            **({"zero_shot": self.zero_shot_setup()} if self.ZERO_SHOT else {}),
            **({"external": self.external_setup()} if self.EXTERNAL else {}),
            "bm25_fields": self.C["bm25"]["fields"],
            "field_weights": self.C["bm25"]["field_weights"],
            "hybrid_lambda": self.C["hybrid"]["lambda"],
            "hybrid_grid": self.C["hybrid"]["grid"],
            "training": {
                m: {k: self.train_setting(m, k) for k in ("epochs", "batch_size")} for m in methods
            },
            # Each paper's own Multi set (the notes say so when they differ).
            "multi_sets": {
                ts: self.C["train_sets"][ts]
                for _, ts, _, training, _ in self.table2_runs()
                if training == "Multi"
            },
            # DPR's released checkpoints behind the "(released checkpoint)" rows (if any).
            **({"released": self.C["released"]} if self.C["released"] else {}),
            # A train set with dev files selects on them (val_set_files); else the held-out fraction.
            "validation": {
                ts: "dev" if self.val_set_files(ts) else max(fractions) for ts in sorted(train_sets)
            },
        }

    def variant_inputs(self, which, per_question=False):
        """Metrics (or per-question ranks) of DPR's Table 3 or Figure 1 variants."""
        t = self.C["tables"][which]
        suffix = ".per_question.parquet" if per_question else ".json"
        runs = [(f"dpr.{v}", t["train_set"]) for v in t["variants"]]  # DPR's Table 3, Figure 1
        if which == "figure1":
            runs = [("bm25", "none"), *runs, ("dpr", t["train_set"])]
        return [
            self.metrics_file(r, ts, t["dataset"], t["split"]).removesuffix(".json") + suffix
            for r, ts in runs
        ]


PLAN = (DprPlan, ReaderPlan)
