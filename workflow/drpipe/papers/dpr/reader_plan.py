"""DPR's end-to-end QA (its Table 4): which reader reads which retriever's passages, where
it starts, how its k is chosen, and the table's cells."""

from __future__ import annotations

from functools import cached_property

from drpipe.errors import ConfigError
from drpipe.papers import paper


class ReaderPlan:
    READER_KEYS = (
        "init", "passages", "depth", "batch_size", "epochs", "lr", "warmup_ratio", "weight_decay",
        "grad_clip", "dropout", "max_len", "max_question_len", "max_answer_len", "val_fraction",
        "val_k", "seed", "bf16",
    )  # fmt: skip

    ANY_RUN = "[A-Za-z0-9_.+-]+"

    WARM_START_READER = "results/readers/warm_start"

    K_VIEW = "results/reader_k_view"

    @cached_property
    def RC(self):
        return self.C["reader"]

    def check(self):
        """k chosen on the reported questions is refused at load, before any job runs."""
        super().check()
        if self.C["reader"]["datasets"]:
            self.reader_k_split()

    def reader_k_split(self):
        """reader.k_split, refused when it is the split the tables report or a test split: k
        is a setting, chosen on held-out or dev questions, never on test ones."""
        split, evaluated = self.RC["k_split"], self.C["tables"]["split"]
        if split in ("test", evaluated):
            raise ConfigError(
                f"config: reader.k_split '{split}' would choose k on the questions Table 4 "
                f"reports (tables.split '{evaluated}') or on a test split; name held-out or "
                "dev questions (mini: heldout; paper: dev)"
            )
        return split

    def table4_rows(self):
        """(run, train_set, dataset) of every Table 4 cell: Table 2's rows on reader.datasets."""
        self.reader_k_split()  # a k chosen on test stops every Table 4 plan
        return [(r, ts, d) for r, ts, d, _, _ in self.table2_runs() if d in self.RC["datasets"]]

    def reader_of(self, run, train_set):
        """The (run, train_set) whose reader reads this row: 'released', the shared one, or its own."""
        if self.RC["released"]:
            return ("released", "none")
        if self.RC["per_retriever"]:
            return (run, train_set)
        return (self.RC["train_run"]["run"], self.RC["train_run"]["train_set"])

    def reader_rows(self, rrun, rts, dataset):
        """The rows one reader reads on `dataset`."""
        return [
            (r, ts)
            for r, ts, d in self.table4_rows()
            if d == dataset and self.reader_of(r, ts) == (rrun, rts)
        ]

    def k_row(self, run, train_set):
        """The row whose held-out questions choose a row's k: its own (reader.k_per_row, and
        always with a reader per retriever), else the run the shared reader trains on."""
        if self.RC["k_per_row"] or self.reader_mode() == "per_retriever":
            return (run, train_set)
        return (self.RC["train_run"]["run"], self.RC["train_run"]["train_set"])

    def scored_rows(self, rrun, rts, dataset, split):
        """The runs a reader scores on a split: every row it reads on the evaluated split; on the
        split k is chosen on, only the rows that choose k."""
        rows = self.reader_rows(rrun, rts, dataset)
        if split == self.reader_k_split():
            return sorted({self.k_row(r, ts) for r, ts in rows})
        return rows

    def reader_k_file(self, run, train_set, dataset):
        kr, kts = self.k_row(run, train_set)
        return f"results/answers/{kr}/{kts}/{dataset}.k.json"

    def reader_sample(self, split):
        """The seeded sample of a split's questions the reader reads (reader.sample): on the
        evaluated split and on the split k is chosen on."""
        if split not in (self.C["tables"]["split"], self.reader_k_split()) or not self.RC["sample"]:
            return {}
        return {"sample": self.RC["sample"], "seed": self.C["seed"]}

    def reader_dir(self, rrun, rts, dataset):
        return [] if rrun == "released" else [f"results/readers/{rrun}/{rts}/{dataset}"]

    def reader_start(self, rrun, rts, dataset):
        """The reader a reader starts from, if any: in the Multi setting, reader.multi_finetune
        names the dataset whose reader (same retriever, same train set) a dataset fine-tunes;
        else the warm-started reader (reader.warm_start, local scales), else none (reader.init).
        """
        source = self.RC["multi_finetune"].get(dataset)
        if source is None or not self.is_multi(rts):
            return [self.WARM_START_READER] if self.RC["warm_start"] else []
        return [f"results/readers/{rrun}/{rts}/{source}"]

    def warm_start_data_cfg(self):
        ws = self.RC["warm_start"]
        return {"articles": ws["articles"], "questions": ws["questions"], "seed": self.C["seed"]}

    def warm_start_train_cfg(self):
        """The reader's training cfg for its warm start: reader.warm_start's epochs and m."""
        cfg = self.with_model_paths({k: self.RC[k] for k in self.READER_KEYS})
        ws = self.RC["warm_start"]
        return {**cfg, "epochs": ws["epochs"], "passages": ws["passages"]}

    def reader_batch_size(self, dataset):
        return self.RC["batch_size_by_dataset"].get(dataset, self.RC["batch_size"])

    def reader_train_cfg(self, rrun, rts, dataset, start):
        """The reader's training cfg for a dataset: its batch size and where it starts."""
        cfg = self.with_model_paths({k: self.RC[k] for k in self.READER_KEYS})
        cfg["batch_size"] = self.reader_batch_size(dataset)
        if start:
            cfg["init"] = start[0]
        return cfg

    def reader_scores(self, run, train_set, dataset, split):
        rrun, rts = self.reader_of(run, train_set)
        return f"results/reader_scores/{rrun}/{rts}/{dataset}-{split}.parquet"

    def table4_inputs(self):
        split = self.C["tables"]["split"]
        return [f"results/answers/{r}/{ts}/{d}-{split}.json" for r, ts, d in self.table4_rows()]

    def table4_precision(self):
        """Table 2's precision sources for the cells Table 4 reads (the retrievers' precision)."""
        cells = {f"{r}|{ts}|{d}" for r, ts, d in self.table4_rows()}
        return {k: v for k, v in self.table2_precision().items() if k in cells}

    def table4_row_map(self):
        """Table 2's row map, for the runs Table 4 reads."""
        runs = {r for r, _, _ in self.table4_rows()}
        return {run: v for run, v in self.table2_row_map().items() if run in runs}

    def table4_code(self):
        """Code hash of Table 4: its module and the papers whose numbers sit beside its rows."""
        keys = {v["paper"] for v in self.table4_row_map().values() if v["paper"]}
        return self.code("drpipe.papers.table4", *(paper(k).module for k in sorted(keys)))

    # Table 4's k view (reader.k_view): EM at several k and the selection head's accuracy.
    def k_view_rows(self):
        """(run, train_set, dataset, split) the view reads: the rows of reader.k_view.runs (all
        when null) on the evaluated split, and the rows whose held-out run chose their k, on
        the split k is chosen on."""
        view = self.RC.get("k_view")
        if not view:
            return []
        runs = view.get("runs")
        rows = [(r, ts, d) for r, ts, d in self.table4_rows() if runs is None or r in runs]
        split = self.C["tables"]["split"]
        out = [(r, ts, d, split) for r, ts, d in rows]
        out += sorted({(*self.k_row(r, ts), d, self.reader_k_split()) for r, ts, d in rows})
        return out

    def k_view_depth(self):
        """Passages scored per question: the view's largest k, and any k the rows choose."""
        return max(*self.RC["k_view"]["ks"], *self.RC["ks"])

    def k_view_sample(self, split):
        """The view's questions: reader.k_view.sample of those the reader reads on the split
        (drpipe.reader.settings.sample_questions: a subset of Table 4's questions)."""
        n = self.RC["k_view"].get("sample")
        return {**self.reader_sample(split), **({"subsample": n, "seed": self.C["seed"]}
                                                if n else {})}  # fmt: skip

    def k_view_scores(self, run, train_set, dataset, split):
        """Table 4's own scores when they reach the view's depth (paper scale: k up to 100),
        else the view's scores file of the row's reader on that split."""
        if self.k_view_depth() <= max(self.RC["ks"]):
            return self.reader_scores(run, train_set, dataset, split)
        rrun, rts = self.reader_of(run, train_set)
        return f"{self.K_VIEW}/{rrun}/{rts}/{dataset}-{split}.scores.parquet"

    def k_view_scored_rows(self, rrun, rts, dataset, split):
        """The view's rows one reader scores on a dataset's split."""
        return [
            (r, ts) for r, ts, d, s in self.k_view_rows()
            if d == dataset and s == split and self.reader_of(r, ts) == (rrun, rts)
        ]  # fmt: skip

    def table4_k_inputs(self):
        return [f"{self.K_VIEW}/{r}/{ts}/{d}-{s}.json" for r, ts, d, s in self.k_view_rows()]

    def table4_k_setup(self):
        """What the k view's notes say: the view's settings and Table 4's k choice."""
        view = self.RC["k_view"]
        return {
            "ks": view["ks"], "runs": view.get("runs"), "sample": view.get("sample"),
            "depth": self.k_view_depth(), "reader_sample": self.RC["sample"],
            "reader_ks": self.RC["ks"], "k_split": self.reader_k_split(),
            "k_per_row": self.RC["k_per_row"], "mode": self.reader_mode(),
            "evaluated_split": self.C["tables"]["split"],
        }  # fmt: skip

    def reader_mode(self):
        if self.RC["released"]:
            return "released"
        return "per_retriever" if self.RC["per_retriever"] else "shared"

    def table4_setup(self):
        """What Table 4's notes say: Table 2's setup and the reader's (drpipe.tables.notes)."""
        keys = ("init", "passages", "depth", "max_len", "epochs", "batch_size", "ks", "k_split",
                "k_per_row", "precision", "released", "sample", "val_k", "warm_start")  # fmt: skip
        reader = {k: self.RC[k] for k in keys}
        reader["mode"] = self.reader_mode()
        reader["train_run"] = "{run}/{train_set}".format(**self.RC["train_run"])
        return {**self.table2_setup(), "reader": reader}
