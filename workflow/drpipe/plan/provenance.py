"""What the provenance record and the run summary read: the step reports and sources behind
Table 2, and the config they describe."""

from __future__ import annotations

from drpipe.config import (
    method_config,
    result_config,
)
from drpipe.papers import papers
from drpipe.plan.base import PlanBase


class ProvenancePlan(PlanBase):
    def result_config(self):
        """The config without the settings that change no result (the provenance record's)."""
        return result_config(self.C)

    def step_reports(self):
        """Report JSONs of the steps behind Table 2 (inputs of the provenance record)."""
        split = self.C["tables"]["split"]
        reports = ["results/corpus/passages.report.json"]
        if not self.C["corpus"]["passages_tsv"]:
            reports += [f"results/corpus/docs/{d['name']}.report.json" for d in self.DOCS]
        for run, ts, dataset, _, _ in self.table2_runs():
            reports.append(f"results/qa/{dataset}/{split}.report.json")
            if run.startswith("ext."):  # its import's report: the file and its counts
                reports.append(f"results/runs/{run}/{ts}/{dataset}-{split}.report.json")
                continue
            if run == "bm25" or run.startswith("init"):
                continue
            for hook in self.hooks("run_report_hook"):
                found = hook(run, ts, dataset)
                if found:
                    more, run = found  # and the reports of the run it starts from
                    reports += more
            if "+" not in run:
                reports.append(f"results/models/{run}/{ts}.report.json")
                for d in self.C["train_sets"][ts]:
                    if self.C["train_examples"].get(d, "mine") == "mine":
                        reports.append(f"results/train/{d}.report.json")
        return sorted(set(reports))

    def used_source_records(self):
        names = {d["source"] for d in self.DOCS} if not self.C["corpus"]["passages_tsv"] else set()
        if self.C["corpus"]["passages_tsv"]:
            names.add(self.C["corpus"]["passages_tsv"])
        split = self.C["tables"]["split"]
        for dataset in self.C["tables"]["datasets"]:
            names.add(self.qa_split(dataset, split)["source"])
        for ts in {ts for _, ts, _, _, _ in self.table2_runs() if ts != "none"}:
            for d in self.C["train_sets"][ts]:
                how = self.C["train_examples"].get(d, "mine")
                names.add(self.qa_split(d, "train")["source"] if how == "mine" else how)
        return [self.source_record(n) for n in sorted(names)]

    def summary_cfg(self):
        """What the run summary says from config: each paper's Multi set, epochs per train set
        (per method), the configured depths and index types."""
        multi = {}
        for p in papers():
            for m in p.methods:
                ts = self.multi_train_set(m) if m in self.METHODS else None
                if ts:
                    multi[p.key] = (ts, self.C["train_sets"][ts])
        epochs = {
            m: {ts: method_config(self.C, m, ts)["epochs"] for ts in sorted(self.C["train_sets"])}
            for m in self.C["tables"]["methods"]
        }
        depths = {
            "bm25.hits": self.C["bm25"]["hits"],
            "mining.depth": self.C["mining"]["depth"],
            "hybrid.depth": self.C["hybrid"]["depth"],
            "hybrid.lambda": self.C["hybrid"]["lambda"],
            "retrieve.top_k": self.C["retrieve"]["top_k"],
            "index.type": self.C["index"]["type"],
        }
        return {"scale": self.SCALE, "multi_sets": multi, "epochs": epochs, "depths": depths}
