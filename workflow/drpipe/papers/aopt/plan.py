"""AOpt's plan: rounds of vectors -> index -> retrieval -> pseudo-labels, named
aopt-{protocol}-{arm}-r{round}, and its tables' inputs."""

from __future__ import annotations

from functools import cached_property

from drpipe.errors import ConfigError
from drpipe.papers.aopt import linear_label


class AoptPlan:
    def check(self):
        super().check()
        aopt, top_k = self.AOPT, self.C["retrieve"]["top_k"]
        if "leakfree" in aopt["protocols"] and aopt["label_split"] == self.C["tables"]["split"]:
            raise ConfigError(
                f"config: aopt.label_split = {aopt['label_split']} is the evaluated split "
                "(tables.split): leak-free labels must come from other questions' answers"
            )
        # A round is one epoch (cli's docstring): the paper's epoch bounds bound the rounds.
        # Early stopping across rounds is not implemented: within `patience` rounds it cannot
        # trigger, so more rounds are refused rather than run without it.
        counts = {f"rounds.{arm}": n for arm, n in aopt["rounds"].items()}
        counts["figure7.rounds"] = aopt["figure7"]["rounds"]
        for name, n in counts.items():
            if n > min(aopt["max_epochs"], aopt["patience"]):
                raise ConfigError(
                    f"config: aopt.{name} = {n} exceeds aopt.max_epochs = {aopt['max_epochs']} "
                    f"or aopt.patience = {aopt['patience']}: a round is one epoch, and early "
                    "stopping across rounds (AOpt 3.1.4) is not implemented"
                )
        if aopt["depth"] > top_k:
            raise ConfigError(
                f"config: aopt.depth = {aopt['depth']} labels deeper than the runs "
                f"(retrieve.top_k = {top_k})"
            )

    def targets(self):
        return ["results/aopt/table3.csv", "results/aopt/figure6.png", "results/aopt/figure7.png"]

    AOPT_PROTOCOLS = {"oracle": "uses the test answers (oracle)", "leakfree": "leak-free"}

    AOPT_LABELS = {
        "query": "DPR + AOpt(query)",
        "passage": "DPR + AOpt(passage)",
        "hybrid": "DPR + AOpt(hybrid)",
    }

    @cached_property
    def AOPT(self):
        return self.C["aopt"]

    def aopt_train_set(self, dataset):
        """The base run's train set for a dataset: its Single train set (AOpt starts from it)."""
        ts = self.C["tables"]["single"].get(dataset)
        if ts is None:
            raise ConfigError(f"config: aopt.datasets has {dataset}, but tables.single does not")
        return ts

    def aopt_dataset(self, train_set):
        """The AOpt dataset whose base is trained on ``train_set`` (one per train set)."""
        found = [d for d in self.AOPT["datasets"] if self.aopt_train_set(d) == train_set]
        if len(found) != 1:
            raise ConfigError(
                f"config: aopt.datasets must have exactly one dataset trained on {train_set} "
                f"(tables.single), found {found}"
            )
        return found[0]

    def aopt_run(self, protocol, arm, rnd):
        return f"aopt-{protocol}-{arm}-r{rnd}"

    def aopt_final(self, arm):
        """Rounds behind an arm's table row (linear weights: one update)."""
        return 1 if arm == "linear" else self.AOPT["rounds"][arm]

    def aopt_label_split(self, protocol):
        """Whose answers label the passages: the evaluated split's (oracle) or training's."""
        return self.C["tables"]["split"] if protocol == "oracle" else self.AOPT["label_split"]

    def aopt_linear_label(self, lin=None):
        lin = lin or self.AOPT["linear"]
        return linear_label(lin["beta"], lin["gamma"])

    def aopt_label(self, arm):
        return self.aopt_linear_label() if arm == "linear" else self.AOPT_LABELS[arm]

    def aopt_vectors_run(self, protocol, arm, rnd):
        """The run whose passage vectors (and index) an arm uses at a round."""
        rnd = int(rnd)
        if arm == "query" or rnd == 0:
            return self.AOPT["base"]
        return self.aopt_run(protocol, arm, rnd)

    def aopt_shards(self, protocol, arm, rnd, train_set):
        return self.shard_files(self.aopt_vectors_run(protocol, arm, rnd), train_set)

    def aopt_index(self, protocol, arm, rnd, train_set):
        run = self.aopt_vectors_run(protocol, arm, rnd)
        return f"results/index/{run}/{train_set}/{self.index_type(self.AOPT['base'])}.faiss"

    def aopt_qvecs(self, protocol, arm, rnd, train_set, dataset, split):
        """Question vectors an arm uses at a round (hybrid: AOpt-query's last round)."""
        rnd = int(rnd)
        if arm == "hybrid":
            return self.aopt_qvecs(
                protocol, "query", self.AOPT["rounds"]["query"], train_set, dataset, split
            )
        if arm != "query" or rnd == 0:
            return self.qvec_file(self.AOPT["base"], train_set, dataset, split)
        return self.qvec_file(self.aopt_run(protocol, "query", rnd), train_set, dataset, split)

    def aopt_file(self, kind, protocol, arm, rnd, train_set, dataset, split):
        """Run (``kind="run"``) or metrics (``"metrics"``) of an arm's round; round 0 is the base
        run's (hybrid: AOpt-query's last round)."""
        rnd = int(rnd)
        if rnd == 0 and arm == "hybrid":
            return self.aopt_file(
                kind, protocol, "query", self.AOPT["rounds"]["query"], train_set, dataset, split
            )
        run = self.AOPT["base"] if rnd == 0 else self.aopt_run(protocol, arm, rnd)
        if kind == "metrics":
            return self.metrics_file(run, train_set, dataset, split)
        return f"results/runs/{run}/{train_set}/{dataset}-{split}.parquet"

    def aopt_opt_cfg(self, labels):
        """Config of one optimisation round (no round count: more rounds rerun no old round):
        ``epochs_per_round`` epochs on one set of labels (the paper's reading: 1)."""
        cfg = {k: self.AOPT[k] for k in ("depth", "lr", "patience")}
        cfg["max_epochs"] = self.AOPT["epochs_per_round"]
        cfg["labels"] = labels
        if labels == "prf":
            cfg["prf_positives"] = self.AOPT["prf_positives"]
        return cfg

    def aopt_passage_inputs(self, w):
        """A passage-side round (AOpt-passage, AOpt-hybrid, linear weights): the previous round's
        passage vectors, the labelled questions' vectors, their run over those passages, and their
        answers (oracle: the evaluated split's; leak-free: the training split's)."""
        return self.aopt_label_inputs(w.protocol, w.arm, int(w.round) - 1, w.train_set)

    def aopt_label_inputs(self, protocol, arm, rnd, train_set):
        dataset = self.aopt_dataset(train_set)
        split = self.aopt_label_split(protocol)
        args = (protocol, arm, rnd, train_set)
        return {
            "shards": self.aopt_shards(*args),
            "queries": self.aopt_qvecs(*args, dataset, split),
            "run": self.aopt_file("run", *args, dataset, split),
            "questions": f"results/qa/{dataset}/{split}.parquet",
            "passages": "results/corpus/passages.parquet",
        }

    def aopt_query_inputs(self, w):
        """A query-side round: the previous round's vectors of these questions, their run over the
        base passages; the oracle also reads their answers, the leak-free protocol does not.
        """
        rnd = int(w.round) - 1
        args = (w.protocol, "query", rnd, w.train_set, w.dataset, w.split)
        out = {
            "queries": self.aopt_qvecs(*args),
            "run": self.aopt_file("run", *args),
            "shards": self.shard_files(self.AOPT["base"], w.train_set),
        }
        if w.protocol == "oracle":
            out["questions"] = f"results/qa/{w.dataset}/{w.split}.parquet"
            out["passages"] = "results/corpus/passages.parquet"
        return out

    def aopt_reports(self, protocol, arm, rnd, train_set, dataset):
        """Optimisation reports of every round behind an arm's round ``rnd``."""
        split = self.C["tables"]["split"]
        out = []
        if arm == "hybrid":
            out += self.aopt_reports(
                protocol, "query", self.AOPT["rounds"]["query"], train_set, dataset
            )
            if protocol == "leakfree":
                q = self.AOPT["rounds"]["query"]
                label = self.AOPT["label_split"]
                out += [
                    f"results/aopt/reports/{self.aopt_run(protocol, 'query', r)}/{train_set}/"
                    f"{dataset}-{label}.json"
                    for r in range(1, q + 1)
                ]
        for r in range(1, int(rnd) + 1):
            run = self.aopt_run(protocol, arm, r)
            if arm == "query":
                out.append(f"results/aopt/reports/{run}/{train_set}/{dataset}-{split}.json")
            else:
                out.append(f"results/aopt/reports/{run}/{train_set}.json")
        return out

    def aopt_table_rows(self):
        """(protocol, arm, round, train_set, dataset) of AOpt's Table 3 rows."""
        return [
            (p, arm, self.aopt_final(arm), self.aopt_train_set(d), d)
            for d in self.AOPT["datasets"]
            for p in self.AOPT["protocols"]
            for arm in ("linear", "query", "passage", "hybrid")
        ]

    def aopt_table3_inputs(self):
        split = self.C["tables"]["split"]
        base = [
            self.metrics_file(self.AOPT["base"], self.aopt_train_set(d), d, split)
            for d in self.AOPT["datasets"]
        ]
        rows = [self.aopt_file("metrics", *r, split) for r in self.aopt_table_rows()]
        return base + rows

    def aopt_table3_cfg(self):
        rows = {
            self.aopt_run(p, arm, r): {
                "protocol": p,
                "arm": arm,
                "rounds": r,
                "method": self.aopt_label(arm),
            }
            for p, arm, r, _, _ in self.aopt_table_rows()
        }
        rows[self.AOPT["base"]] = {
            "protocol": "base",
            "arm": "base",
            "rounds": 0,
            "method": "DPR",
        }
        return {
            **self.SCALE_CFG,
            "rows": rows,
            "linear": self.AOPT["linear"],
            "tolerance": self.TOLERANCE,
        }

    def aopt_figure7_series(self):
        """(protocol, arm, round) of every point of Figure 7, in order."""
        return [
            (p, arm, r)
            for p in self.AOPT["protocols"]
            for arm in ("passage", "query")
            for r in range(self.AOPT["figure7"]["rounds"] + 1)
        ]

    def aopt_figure7_inputs(self):
        d = self.AOPT["figure7"]["dataset"]
        ts, split = self.aopt_train_set(d), self.C["tables"]["split"]
        return [
            self.aopt_file("metrics", p, arm, r, ts, d, split)
            for p, arm, r in self.aopt_figure7_series()
        ]

    def aopt_figure6_inputs(self):
        d = self.AOPT["figure6"]["dataset"]
        return [
            f"results/aopt/figure6/{p}/{self.aopt_train_set(d)}/{d}.csv"
            for p in self.AOPT["protocols"]
        ]

    def aopt_protocol(self, run):
        """The protocol label of an AOpt run name, None for any other run."""
        parts = run.split("-")
        if len(parts) == 4 and parts[0] == "aopt":
            return self.AOPT_PROTOCOLS[parts[1]]
        return None

    def aopt_table2_runs(self):
        """AOpt's cells of Table 2: the configured arms, each protocol, on the AOpt datasets."""
        rows = []
        for d in self.AOPT["datasets"]:
            if d not in self.C["tables"]["datasets"]:
                continue
            for p in self.AOPT["protocols"]:
                for arm in self.AOPT["table2"]:
                    run = self.aopt_run(p, arm, self.aopt_final(arm))
                    rows.append((run, self.aopt_train_set(d), d, "Single", self.aopt_label(arm)))
        return rows

    def table2_hook(self):
        """AOpt's rows of the shared Table 2, and the protocol each one says."""
        rows = self.aopt_table2_runs()
        return rows, {
            run: {"training": training, "protocol": self.aopt_protocol(run)}
            for run, _, _, training, _ in rows
        }

    def run_report_hook(self, run, train_set, dataset):
        """The step reports behind an AOpt run (its rounds and labels), and the run it starts from."""
        if not self.aopt_protocol(run):
            return None
        _, protocol, arm, rnd = run.split("-")
        reports = self.aopt_reports(protocol, arm, rnd[1:], train_set, dataset)
        reports.append(f"results/qa/{dataset}/{self.aopt_label_split(protocol)}.report.json")
        return reports, self.AOPT["base"]


PLAN = (AoptPlan,)
