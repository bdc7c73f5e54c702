"""DCSR's plan: its tables' cells (what each reads, what it is compared with), the hard-
negative round and Figure 4."""

from __future__ import annotations

from functools import cached_property

from drpipe.errors import ConfigError


class DcsrPlan:
    def targets(self):
        # Table 6 needs TriviaQA and NQ training data: built where configured (the paper scale).
        tables = [t for t in self.CELLS if t != "6" or self.dcsr_tcfg("table6")]
        return [f"results/dcsr/table{t}.csv" for t in tables] + ["results/dcsr/figure4.png"]

    TABLE5_ROWS = (
        # (row, run, paper row, the row its difference is taken against)
        ("DPR (raw-data)", "dpr", "DPR (raw-data)", None),
        ("DCSR (raw-data)", "dcsr", None, "DPR (raw-data)"),
        ("DPR (DPR-hard)", "dpr.hard_dpr", "DPR (DPR-hard)", "DPR (raw-data)"),
        ("DCSR (DPR-hard)", "dcsr.hard_dpr", "DCSR (DPR-hard)", "DPR (DPR-hard)"),
        ("DCSR (DCSR-hard)", "dcsr.hard_dcsr", "DCSR (DCSR-hard)", "DCSR (DPR-hard)"),
    )

    TABLE8_PAPER_ONLY = [
        # The paper's SQuAD dev block (DPR's dev split of SQuAD train, which we do not hold).
        {
            "group": "SQuAD-dev",
            "row": row,
            "setting": "SQuAD-dev",
            "dataset": "squad",
            "split": "dev",
        }
        for row in ("DPR", "DCSR")
    ]

    NOTES = {
        "4": "The paper's Table 4 is on a 1.05M-passage Wikipedia subset; ours on the corpus named "
        "in the subset column (empty = the whole corpus of this scale).",
        "5": "DPR-hard / DCSR-hard: hard negatives mined by our own trained DPR / DCSR checkpoint "
        "(retrieval over the training questions, top passages without an answer; DCSR's "
        "retrieval ranks passages by Score Normalization over their sentences), then a second "
        "training round. A DCSR-mined negative is sentence-specific: the sentence of that "
        "passage the DCSR checkpoint retrieved first (a DPR-mined one: a random sentence of it). "
        "The paper's DPR-hard is DPR's released adversarial file.",
        "6": "Transfer rows: Δ = transfer - in-domain (the paper prints the drop, in-domain - "
        "transfer, shown negated).",
        "7": "Corpus subsets keep every gold passage of the evaluated questions, then the first "
        "passages of the corpus up to the size (the paper took the first N passages).",
        "8": "Only the SQuAD-test block is ours (SQuAD v1.1 dev questions); the paper's SQuAD-dev "
        "block (DPR's dev split of SQuAD train) is listed with no value of ours.",
    }

    def dcsr_tcfg(self, name):
        """tables.dcsr.<name> of the config."""
        return self.C["tables"]["dcsr"][name]

    def dcsr_single(self, dataset):
        """The Single-setting train set of a dataset (tables.single)."""
        ts = self.C["tables"]["single"].get(dataset)
        if ts is None:
            raise ConfigError(f"config: tables.single has no train set for dataset '{dataset}'")
        return ts

    def paper_split_of(self, dataset, split):
        """The paper's split for ours (its tables are on test sets; SQuAD v1.1 dev is DPR's and
        DCSR's SQuAD test)."""
        return "test" if split == "test" or (dataset, split) == ("squad", "dev") else split

    def dcsr_cell(
        self,
        group,
        row,
        run,
        train_set,
        dataset,
        split,
        *,
        setting,
        paper_method=None,
        paper_dataset=None,
        subset=None,
        delta_of=None,
        paper_delta="delta",
        paper_suffix="",
    ):
        """One table cell: the metrics file it reads and what it is compared with."""
        cell = {
            "group": group,
            "row": row,
            "run": run,
            "train_set": train_set,
            "dataset": dataset,
            "split": split,
            "subset": subset,
            "paper": None,
            "file": self.subset_metrics_file(subset, run, train_set, dataset, split),
        }
        if paper_method is not None:
            cell["paper"] = {
                "setting": setting,
                "method": paper_method,
                "dataset": paper_dataset or dataset,
                "split": self.paper_split_of(dataset, split) if not paper_dataset else "test",
            }
        if delta_of:
            cell.update({"delta_of": delta_of, "paper_delta": paper_delta})
        cell["paper_suffix"] = paper_suffix
        return cell

    def paper_dataset_for(self, dataset, paper_datasets, fallback):
        """Ours when the paper's table has it, else the configured stand-in."""
        return dataset if dataset in paper_datasets else fallback

    def dcsr_table2_cells(self):
        """Single: DPR and DCSR on each dataset's own train set. Multi: each on its paper's Multi
        model, as the paper's Table 2 (DCSR's on NQ + TriviaQA + SQuAD, section 4.2; its DPR Multi
        row is DPR's, on NQ + TriviaQA + WQ + TREC)."""
        cells = []
        split = self.C["tables"]["split"]
        for d in self.dcsr_tcfg("table2")["datasets"]:
            for training in ("Single", "Multi"):
                for method, label in (("dpr", "DPR"), ("dcsr", "DCSR")):
                    ts = (
                        self.C["tables"]["single"].get(d)
                        if training == "Single"
                        else self.multi_train_set(method)
                    )
                    if ts is None:
                        continue
                    cells.append(
                        self.dcsr_cell(
                            training, label, method, ts, d, split,
                            setting=training, paper_method=label,
                            delta_of="DPR" if method == "dcsr" else None,
                        )
                    )  # fmt: skip
        return cells

    def dcsr_table2_note(self):
        """Where the Multi rows of DCSR's Table 2 train on different sets, say so."""
        sets = {label: self.multi_train_set(m) for m, label in (("dpr", "DPR"), ("dcsr", "DCSR"))}
        if None in sets.values() or len(set(sets.values())) == 1:
            return ""
        named = "; ".join(
            f"{label}: {ts} = {' + '.join(self.C['train_sets'][ts])}" for label, ts in sets.items()
        )
        return (
            f"Multi rows train on each paper's own Multi set ({named}): DCSR's Multi model on "
            "NQ + TriviaQA + SQuAD as its section 4.2, and the DPR Multi row is DPR's Multi model "
            "(without SQuAD), whose numbers the paper copies from DPR; the Multi Δ is therefore "
            "between models trained on different data, as in the paper."
        )

    def dcsr_table3_cells(self):
        t = self.dcsr_tcfg("table3")
        cells = []
        for d in t["datasets"]:
            ts = self.dcsr_single(d)
            pd_ = self.paper_dataset_for(d, ("nq", "triviaqa"), t["paper_dataset"])
            for run, row, other in (
                ("dpr", "DPR + adv-train", None),
                ("dcsr", "DCSR + adv-train", "DPR + adv-train"),
            ):
                cells.append(
                    self.dcsr_cell(
                        "Adversarial Training", row, f"{run}.hard_{run}", ts, d, t["split"],
                        setting="Adversarial Training", paper_method=row, paper_dataset=pd_,
                        delta_of=other,
                    )
                )  # fmt: skip
        return cells

    def dcsr_table4_cells(self):
        t = self.dcsr_tcfg("table4")
        cells = []
        for d in t["datasets"]:
            ts = self.dcsr_single(d)
            pd_ = self.paper_dataset_for(d, ("nq", "triviaqa", "squad"), t["paper_dataset"])
            for run, row in t["rows"].items():
                cells.append(
                    self.dcsr_cell(
                        "Single", row, run, ts, d, t["split"], subset=t.get("subset"),
                        setting="Single, 1.05M subset", paper_method=row, paper_dataset=pd_,
                        delta_of="DPR" if row != "DPR" else None,
                    )
                )  # fmt: skip
        return cells

    def dcsr_table5_cells(self):
        t = self.dcsr_tcfg("table5")
        cells = []
        for d in t["datasets"]:
            ts = self.dcsr_single(d)
            pd_ = self.paper_dataset_for(d, ("nq", "triviaqa"), t["paper_dataset"])
            for row, run, paper_row, other in self.TABLE5_ROWS:
                cells.append(
                    self.dcsr_cell(
                        "Single", row, run, ts, d, t["split"], subset=t.get("subset"),
                        setting="Single, 1.05M subset", paper_method=paper_row, paper_dataset=pd_,
                        delta_of=other,
                    )
                )  # fmt: skip
        return cells

    def dcsr_table6_cells(self):
        t = self.dcsr_tcfg("table6")
        if t is None:
            raise ConfigError(
                "config: tables.dcsr.table6 is null at this scale (it needs TriviaQA and NQ "
                "training data: scale=paper)"
            )
        cells = []
        target, split = t["target"], t["split"]
        for setting, source in t["transfers"].items():
            for run, label in (("dpr", "DPR"), ("dcsr", "DCSR")):
                home = f"{label} in-domain"
                cells.append(
                    self.dcsr_cell(
                        setting, home, run, self.dcsr_single(target), target, split,
                        subset=t.get("subset"), setting=setting, paper_method=label,
                        paper_suffix="_in_domain",
                    )
                )  # fmt: skip
                cells.append(
                    self.dcsr_cell(
                        setting, label, run, self.dcsr_single(source), target, split,
                        subset=t.get("subset"), setting=setting, paper_method=label,
                        delta_of=home, paper_delta="drop",
                    )
                )  # fmt: skip
        return cells

    def dcsr_table7_cells(self):
        t = self.dcsr_tcfg("table7")
        cells = []
        for d in t["datasets"]:
            ts = self.dcsr_single(d)
            pd_ = self.paper_dataset_for(d, ("nq", "triviaqa"), t["paper_dataset"])
            for label, subset in t["subsets"].items():
                for run, row in (("dpr", "DPR"), ("dcsr", "DCSR")):
                    cells.append(
                        self.dcsr_cell(
                            label, row, run, ts, d, t["split"], subset=subset,
                            setting=label, paper_method=row, paper_dataset=pd_,
                            delta_of="DPR" if run == "dcsr" else None,
                        )
                    )  # fmt: skip
        return cells

    def dcsr_table8_cells(self):
        t = self.dcsr_tcfg("table8")
        ts = self.dcsr_single(t["dataset"])
        return [
            self.dcsr_cell(
                "SQuAD-test", row, run, ts, t["dataset"], t["split"],
                setting="SQuAD-test", paper_method=row, paper_dataset="squad",
                delta_of="DPR" if run == "dcsr" else None,
            )
            for run, row in (("dpr", "DPR"), ("dcsr", "DCSR"))
        ]  # fmt: skip

    @cached_property
    def CELLS(self):
        return {
            "2": self.dcsr_table2_cells,
            "3": self.dcsr_table3_cells,
            "4": self.dcsr_table4_cells,
            "5": self.dcsr_table5_cells,
            "6": self.dcsr_table6_cells,
            "7": self.dcsr_table7_cells,
            "8": self.dcsr_table8_cells,
        }

    def dcsr_cells(self, table):
        return self.CELLS[table]()

    def dcsr_table_cfg(self, table):
        cells = [{k: v for k, v in c.items() if k != "file"} for c in self.dcsr_cells(table)]
        note = self.dcsr_table2_note() if table == "2" else self.NOTES.get(table, "")
        cfg = {**self.SCALE_CFG, "table": table, "cells": cells, "note": note}
        cfg["tolerance"] = self.TOLERANCE
        if table == "8":
            cfg["paper_only"] = self.TABLE8_PAPER_ONLY
        return cfg

    def released_examples(self, dataset):
        """DPR's released training file of a dataset (an error when its examples are mined)."""
        how = self.C["train_examples"].get(dataset, "mine")
        if how == "mine":
            raise ConfigError(f"dataset '{dataset}': training examples are mined, not released")
        return self.source_file(how)

    def miner_split(self, dataset):
        """The training questions a miner retrieves for: the configured train split, or (paper
        scale, where DPR's released files are the training data) the questions of that file.
        """
        if (self.C["qa"].get(dataset) or {}).get("train"):
            return "train"
        self.released_examples(dataset)
        return "train.released"

    def dcsr_vectors_inputs(self):
        """The main DCSR run of the first Table 2 dataset: its model and a retrieval report."""
        d, split = self.C["tables"]["datasets"][0], self.C["tables"]["split"]
        ts = self.dcsr_single(d)
        return {
            "passages": "results/corpus/passages.parquet",
            "sentences": "results/corpus/sentences.report.json",
            "model": f"results/models/dcsr/{ts}",
            "retrieve": f"results/runs/dcsr/{ts}/{d}-{split}.report.json",
        }

    def figure4_runs(self):
        f = self.dcsr_tcfg("figure4")
        return [(label, run, ts) for ts in f["train_sets"] for label, run in f["runs"].items()]


PLAN = (DcsrPlan,)
