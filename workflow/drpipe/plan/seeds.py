"""Training variance (config ``seeds``): which runs are trained again under which seeds, and
the inputs of the seeds table and the claims over seeds (drpipe.seeds; the rules are
workflow/rules/seeds.smk). A replica is a run of its own name, ``<run>@s<seed>``, that the
generic train, encode, search and evaluate rules make; nothing else in its config changes."""

from __future__ import annotations

import re
from functools import cached_property

from drpipe.config import ConfigError, seeded
from drpipe.plan.base import PlanBase
from drpipe.seeds import trained_run

SEEDS_OUTPUTS = {
    "table": "results/table2-seeds.csv",
    "table_md": "results/table2-seeds.md",
    "claims": "results/claims-seeds.csv",
    "claims_md": "results/claims-seeds.md",
}


class SeedsPlan(PlanBase):
    @cached_property
    def SEEDS(self):
        """The seeds every trained run is evaluated under: the config's ``seed`` (the run
        itself), then ``seeds.extra``."""
        return [
            int(self.C["seed"]),
            *(int(s) for s in (self.C.get("seeds") or {}).get("extra", [])),
        ]

    @cached_property
    def SEED_TRAINED(self):
        """The pattern of the runs a seed repeats: trained runs (not DPR's released checkpoints,
        which are not trained here)."""
        released = getattr(self, "RELEASED_RUN", None)
        skip = f"(?!{re.escape(released)}(?:$|@))" if released else ""
        return f"{skip}(?:{self.RUN})"

    @cached_property
    def SEED_CLAIM_IDS(self) -> list[str] | None:
        """The claims tested over seeds (``seeds.claims``); None: every one whose runs are
        trained."""
        only = (self.C.get("seeds") or {}).get("claims")
        return None if only is None else [str(i) for i in only]

    def check(self) -> None:
        super().check()
        extra = (self.C.get("seeds") or {}).get("extra") or []
        if int(self.C["seed"]) in extra:
            raise ConfigError(
                f"key seeds.extra: {self.C['seed']} is the config's own seed (key seed), whose "
                "runs are the tables' own; list only the other seeds"
            )
        if self.SEED_CLAIM_IDS:  # named claims must exist and be testable: else none is
            self._check_seed_claims()

    def _check_seed_claims(self) -> None:
        from drpipe.seeds import why_not_seeded

        claims, resolved = self.SEED_CLAIMS
        by_id = {c["id"]: c for c in claims}
        unknown = [i for i in self.SEED_CLAIM_IDS if i not in by_id]
        if unknown:
            raise ConfigError(
                f"key seeds.claims: no claim {', '.join(map(repr, unknown))} in this "
                f"config's claims (claims.yaml and own_claims): {', '.join(by_id)}"
            )
        entries = {e["id"]: e for e in resolved}
        for cid in self.SEED_CLAIM_IDS:
            why = why_not_seeded(by_id[cid], entries[cid], self.SEED_TRAINED)
            if why:
                raise ConfigError(
                    f"key seeds.claims: {cid!r} cannot be tested over seeds: "
                    + why.replace("{seed}", str(self.SEEDS[0]))
                )

    def seed_run(self, run, seed):
        """``run`` under ``seed``: the run itself under the config's seed, else its replica."""
        return run if int(seed) == self.SEEDS[0] else seeded(run, seed)

    def seeds_rows(self):
        """Table 2's trained rows (dense and hybrid), as ``drpipe seeds table`` reads them."""
        split = self.C["tables"]["split"]
        return [
            {"run": run, "train_set": ts, "dataset": ds, "split": split, "label": label}
            for run, ts, ds, _, label in self.table2_runs()
            if trained_run(run, self.SEED_TRAINED)
        ]

    def seeds_table_inputs(self):
        """The metrics files of each trained row under each seed (rows x seeds)."""
        return [
            self.metrics_file(self.seed_run(r["run"], s), r["train_set"], r["dataset"], r["split"])
            for r in self.seeds_rows()
            for s in self.SEEDS
        ]

    def seeds_table_cfg(self):
        return {"rows": self.seeds_rows(), "seeds": self.SEEDS, "ks": self.C["evaluate"]["ks"]}

    @cached_property
    def SEED_CLAIMS(self):
        """(claims, resolved claims) of this config, as the claims table resolves them."""
        from drpipe.claims import load_claims, resolve_claims  # lazy: imports every paper

        claims = load_claims(self.C)[1]
        return claims, resolve_claims(self.C, claims)

    def seeds_claims_inputs(self):
        """The per-question files the claims over seeds read (every seed's, both systems)."""
        from drpipe.seeds import claim_seeds_inputs

        claims, resolved = self.SEED_CLAIMS
        return claim_seeds_inputs(
            resolved, claims, self.SEEDS, self.SEEDS[0], self.SEED_TRAINED,
            only=self.SEED_CLAIM_IDS,
        )  # fmt: skip

    def seeds_claims_cfg(self):
        return {
            "resolved": self.SEED_CLAIMS[1],
            "own_claims": self.C.get("own_claims") or [],
            "seeds": self.SEEDS,
            "main_seed": self.SEEDS[0],
            "trained": self.SEED_TRAINED,
            "only": self.SEED_CLAIM_IDS,
        }
