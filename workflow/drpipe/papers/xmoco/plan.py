"""xMoCo's plan: its Table 2 rows and labels, and the runs of its Table 3 and Figure 2."""

from __future__ import annotations

from drpipe.methods import method_class


class XmocoPlan:
    def targets(self):
        return [f"results/xmoco/{name}" for name in ("table2.csv", "table3.csv", "figure2.png")]

    XMOCO_HYBRID_LABELS = {"dpr": "DPR+BM25", "xmoco": "xMoCo+BM25"}

    def xmoco_table2_runs(self):
        """(run, train_set, dataset, training, label) of xMoCo's Table 2: BM25, DPR, xMoCo and
        their BM25 hybrids, with the paper's row labels (it writes "xMoCo+BM25")."""
        t = self.C["tables"]
        rows = []
        for dataset in t["datasets"]:
            rows.append(("bm25", "none", dataset, "None", "BM25"))
            rows += self.grid(
                dataset,
                ("dpr", "xmoco"),
                label=lambda m: method_class(m).label,
                hybrid_label=self.XMOCO_HYBRID_LABELS.get,
                multi=lambda _: t["multi"],
            )
        return rows

    def xmoco_table2_inputs(self):
        split = self.C["tables"]["split"]
        return [self.metrics_file(r, ts, d, split) for r, ts, d, _, _ in self.xmoco_table2_runs()]

    def xmoco_table2_row_map(self):
        return {
            run: {"method": label, **({"training": tr} if tr == "None" else {})}
            for run, _, _, tr, label in self.xmoco_table2_runs()
        }

    def xmoco_runs(self, which):
        """Runs of xMoCo's Table 3 or Figure 2: the main run plus the configured variants."""
        t = self.C["tables"]["xmoco"][which]
        return ["xmoco"] + [f"xmoco.{v}" for v in t["variants"]]

    def xmoco_inputs(self, which):
        t = self.C["tables"]["xmoco"][which]
        return [
            self.metrics_file(r, t["train_set"], t["dataset"], t["split"])
            for r in self.xmoco_runs(which)
        ]

    def xmoco_table3_variants(self):
        """Run -> whether its encoders are tied and the Table 3 row it reproduces."""
        ts = self.C["tables"]["xmoco"]["table3"]["train_set"]
        out = {}
        for run in self.xmoco_runs("table3"):
            row = (
                self.run_variant(run).get("paper_row")
                if "." in run
                else method_class("xmoco").label
            )
            out[run] = {"tied": bool(self.run_config(run, ts)["tied"]), "paper_row": row}
        return out

    def xmoco_figure2_variants(self):
        """Run -> its queue size, batch size and hard negatives (the x axis, and which queue size
        is in-batch negatives)."""
        ts = self.C["tables"]["xmoco"]["figure2"]["train_set"]
        out = {}
        for run in self.xmoco_runs("figure2"):
            cfg = self.run_config(run, ts)
            out[run] = {k: cfg[k] for k in ("queue_size", "batch_size", "hard_negatives")}
        return out


PLAN = (XmocoPlan,)
