"""The tiny real runs that the end-to-end tests read, each built once per test session (the
session fixtures in conftest.py call these).

- ``build_dpr_run``: BM25, the initial encoder, DPR and its BM25 hybrid (Table 2) and DPR
  Figure 1. Built again, in another directory and without Figure 1 (``RERUN_TARGETS``), for
  the byte-for-byte comparison of two runs.
- ``extend_run``: a copy of the first DPR run taken on to the superset the other end-to-end
  tests read: every method of config.yaml's tables.methods, AOpt's second rounds and its
  Table 3 and Figures 6 and 7, the DPR Table 3 schemes, and Table 4 (a tiny reader over every
  Table 2 row). Only the new jobs run: the copy
  keeps Snakemake's metadata and the files' mtimes.

Each Snakemake job pays its own start-up (imports, model loads), so sharing the DPR jobs and
running them once is most of the saving; a test that changes files works on a copy.

The builder also runs each benchmark's smoke (bench_smoke.py) after the tiny runs, as a run
named ``smoke-<benchmark>``: by then the tests leave it a core of its own.

``build(root, name)`` builds a run by name (and the runs it starts from), once: the session
fixtures call it, and so does a background process (``python tests/tiny_run.py ROOT NAME...``,
started by conftest.py when the collected tests need tiny runs) that builds them on both cores
while the unit tests run; a fixture that asks for a run being built waits for it.
"""

from __future__ import annotations

import fcntl
import os
import re
import shlex
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path

import bench_smoke
import yaml
from slurm_run import build_paper_plan, build_slurm_run
from tiny_models import truncated_minilm
from workflow_util import REPO, RUNS_ZYGOTE, copy_run, snakemake, touched_run

from drpipe.config import read_defaults

RAW = read_defaults(REPO)
# The tiny runs' encoder (and reader): pretrained, the first of the packaged model's six layers
# (the runs test plumbing; a second layer cost the DPR run 15% more CPU).
TINY_INIT = str(truncated_minilm(1))

# The tiny slice of the real data: 3 SQuAD dev and 2 SQuAD train articles and 5 enwiki pages.
TINY = {
    "corpus": {
        "documents": [
            {"name": "squad_dev", "kind": "squad", "source": "squad_dev", "sample_articles": 3},
            {"name": "squad_train", "kind": "squad", "source": "squad_train", "sample_articles": 2},
            {
                "name": "enwiki",
                "kind": "wiki_dump",
                "source": "enwiki_tables",
                "sample_articles": None,
            },
        ],
    },
    "qa": {
        "squad": {
            "train": {
                "format": "squad",
                "source": "squad_train",
                "sample": 32,
                "restrict_to_corpus": True,
            },
            "test": {
                "format": "squad",
                "source": "squad_dev",
                "sample": 120,
                "restrict_to_corpus": True,
            },
        }
    },
    "mining": {"hard_negatives": 4, "random_negatives": 4},
    # Short passages and few training questions: the tiny runs test plumbing, not accuracy,
    # and training and encoding are most of their CPU time.
    # all-MiniLM-L6-v2's first layer (tiny_models.truncated_minilm), reader included.
    "encoder": {"init": TINY_INIT, "max_passage_len": 96, "max_query_len": 32},
    "methods": {"dpr": {"epochs": 1, "batch_size": 8, "checkpoint_every": 2}},
    "encode": {"shards": 2, "batch_size": 32},
    "hybrid": {"depth": 50},
    # Two Table 3 schemes (1-of-N with gold negatives; in-batch + one BM25 negative) and one
    # Figure 1 training-set size keep the ablation targets real but small.
    "tables": {
        "table3": {
            "dataset": "squad",
            "split": "test",
            "train_set": "squad",
            "variants": ["t3_gold_7", "t3_gbm25_1_31"],
        },
        "figure1": {
            "dataset": "squad",
            "split": "test",
            "train_set": "squad",
            "variants": ["f1_n100"],
        },
    },
}

# The DPR run (built twice): DPR the only learned method, no AOpt rows in Table 2.
DPR_OVERLAY = {**TINY, "tables": {**TINY["tables"], "methods": ["dpr"]}}
if "table2" in (RAW.get("aopt") or {}):
    DPR_OVERLAY["aopt"] = {"table2": []}
DPR_TARGETS = ("all", "results/dpr/figure1.png")
# The second DPR run, for the comparison: Table 2's jobs (Figure 1's are only in the first).
RERUN_TARGETS = ("all",)

# AOpt's rounds behind the table rows and Figure 7 (two rounds each; config.yaml's mini has one).
AOPT_ROUNDS = {
    "rounds": {"query": 2, "passage": 2, "hybrid": 2},
    "figure7": {"dataset": "squad", "rounds": 2},
}
# A tiny reader for Table 4: 4 passages per question, 128 tokens, one epoch, k among 1 and 2,
# a sample of 40 evaluated (and held-out) questions, a warm start on 32 questions.
READER = {
    "init": TINY_INIT, "passages": 4, "max_len": 128, "epochs": 1, "batch_size": 8, "val_k": 2,
    "eval_batch_size": 16, "ks": [1, 2], "sample": 40,
    "warm_start": {"source": "squad_train", "articles": 2, "questions": 32, "passages": 2,
                   "epochs": 1},
}  # fmt: skip
# The shared run: TINY with every method of config.yaml, AOpt's two rounds and the reader.
OVERLAY = {**TINY, "aopt": AOPT_ROUNDS, "reader": READER}
TARGETS = (
    "all",
    "results/dpr/table3.csv",
    "results/dpr/figure1.png",
    "results/aopt/table3.csv",
    "results/aopt/figure6.png",
    "results/aopt/figure7.png",
    "results/table4.csv",
)
# Jobs of the DPR run that the extension must reuse, not rerun.
REUSED_RULES = {"fetch", "documents", "qa_load", "passages", "sentences", "bm25_index",
                "bm25_search", "bm25_mining_search", "bm25_hybrid_search", "mine", "init_model",
                "train", "encode", "encode_queries", "build_index", "retrieve", "hybrid",
                "evaluate"}  # fmt: skip

DRPIPE = Path(sys.executable).with_name("drpipe")
# A build takes minutes on a quiet 2-core machine and several times that on a shared one; the
# bound only stops a hung run.
BUILD_TIMEOUT = 7200
_JOB = re.compile(r"^(?:local)?rule (\w+):\n(?:(?:    .*)\n)*?    output: (.*)$", re.M)


def once(root: Path, name: str, build: Callable[[Path], Path]) -> Path:
    """``build(root / name)``, run by the first process that asks for it (the session's
    background builder or a fixture): the others wait for it and reuse it, or see its
    failure."""
    work, done, failed = root / name, root / f"{name}.done", root / f"{name}.failed"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if failed.exists():
            raise AssertionError(f"building {name} failed:\n{failed.read_text()}")
        if not done.exists():
            try:
                build(work)
            except BaseException:
                failed.write_text(traceback.format_exc()[-8000:])
                raise
            done.touch()
    return work


# The builder's runs (and the smokes) share one job zygote (RUNS_ZYGOTE: its preload is ~8 s of
# CPU), but the second DPR run has its own: the two runs compared byte for byte run under
# different hash seeds.
def build_dpr_run(
    work: Path, targets: tuple[str, ...] = DPR_TARGETS, jobs: str = RUNS_ZYGOTE
) -> Path:
    """The DPR run in ``work`` (created); its jobs forked by the zygote named ``jobs``."""
    work.mkdir()
    snakemake(work, *targets, overlay=DPR_OVERLAY, timeout=BUILD_TIMEOUT, fork_jobs=jobs)
    return work


def extend_run(dpr_run: Path, work: Path) -> Path:
    """A copy of ``dpr_run`` at ``work`` built on to TARGETS with OVERLAY; fails if a job of
    the DPR run reran (the copy would then no longer share its DPR with the audited pair)."""
    copy_run(dpr_run, work)
    proc = snakemake(work, *TARGETS, overlay=OVERLAY, timeout=BUILD_TIMEOUT, fork_jobs=RUNS_ZYGOTE)
    ran = [
        (rule, out.split(",")[0].strip()) for rule, out in _JOB.findall(proc.stdout + proc.stderr)
    ]
    rerun = [(r, o) for r, o in ran if r in REUSED_RULES and (dpr_run / o).exists()]
    assert not rerun, f"the extension reran jobs of the DPR run: {rerun}"
    return work


def overlay_args(work: Path, overlay: dict) -> str:
    """``--configfile`` arguments naming config.yaml and ``overlay`` (written into ``work``)."""
    path = work / "audit-overlay.yaml"
    path.write_text(yaml.safe_dump(overlay))
    return shlex.join(["--configfile", str(REPO / "config.yaml"), str(path)])


def audit_run(run: Path, against: Path, work: Path) -> Path:
    """A copy of ``run`` at ``work`` audited against ``against`` with `drpipe audit` as
    `make audit` does (claims, tables, report)."""
    a = copy_run(run, work)
    cmd = [str(DRPIPE), "audit", str(a / "results"), "--out", str(a / "results/audit"),
           "--against", str(against / "results"), "--claims", str(a / "results/claims.csv"),
           "--report", str(a / "results/report.html"),
           "--snakemake-args", overlay_args(a, DPR_OVERLAY)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=a, timeout=BUILD_TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-6000:]
    return a


# The transfer chain (results/transfer.csv) on a copy of the DPR run whose results are hard
# links (its models are read; a job's output is written anew, never in place): BM25 and DPR on
# one held-out SQuAD dev article, one encoding shard, every path of the chain but DCSR's
# sentences. Only mtime triggers reruns: the run's models as they are. test_transfer.py reads
# it and what Snakemake said (TRANSFER_LOG).
TRANSFER_HELDOUT = {"name": "heldout", "build": "squad_dev", "articles": 1, "queries": 20}
TRANSFER_OVERLAY = {
    **DPR_OVERLAY,
    "encode": {**DPR_OVERLAY["encode"], "shards": 1},
    "transfer": {"collections": [TRANSFER_HELDOUT], "runs": ["bm25", "dpr"]},
}
TRANSFER_LOG = "snakemake-transfer.log"


def build_transfer_run(dpr_run: Path, work: Path) -> Path:
    copy_run(dpr_run, work, link_results=True)
    proc = snakemake(work, "results/transfer.csv", "--rerun-triggers", "mtime",
                     overlay=TRANSFER_OVERLAY, timeout=BUILD_TIMEOUT, fork_jobs=RUNS_ZYGOTE)  # fmt: skip
    (work / TRANSFER_LOG).write_text(proc.stdout + proc.stderr)
    return work


def build_touched_run(work: Path) -> Path:
    """The shared run's DAG (OVERLAY, TARGETS) in ``work`` (created), every job marked done
    without running it (workflow_util.touched_run): what a config change reruns, in seconds."""
    work.mkdir()
    return touched_run(work, *TARGETS, overlay=OVERLAY)


# The reduced rehearsal (issue 18): the paper scale's structure on stand-ins, one Single train
# set (NQ) and the Multi set of each paper (DPR's, which xMoCo shares, and DCSR's), DPR's
# released checkpoints in both layouts, and DPR's NQ reader (Table 4). Built last: it fills
# the core that the tests reading the finished runs (dry runs, one process) leave idle.
REDUCED_REHEARSAL = {
    "scale": "rehearsal",
    "tables": {"datasets": ["nq"], "methods": ["dpr", "dcsr"]},
    "hybrid": {"enabled": False},
}
REDUCED_REHEARSAL_TARGETS = tuple(
    f"results/metrics/{r}/{ts}/nq-test.json"
    for r, ts in (("dpr", "nq"), ("dpr", "multi"), ("dcsr", "dcsr_multi"),
                  ("dpr.released", "nq"), ("dpr.released", "multi"))
)  # fmt: skip
# DPR's NQ reader at the paper's settings (its own retriever's train-split results, m = 24,
# 350 tokens, k chosen on dev), read on test: Table 4's paper-scale rules executed once.
REDUCED_REHEARSAL_READ = "results/answers/dpr/nq/nq-test.json"


def build_reduced_rehearsal(work: Path) -> Path:
    work.mkdir()
    snakemake(work, *REDUCED_REHEARSAL_TARGETS, REDUCED_REHEARSAL_READ, overlay=REDUCED_REHEARSAL,
              timeout=BUILD_TIMEOUT, fork_jobs=RUNS_ZYGOTE)  # fmt: skip
    return work


def build(root: Path, name: str, core: int = -1) -> Path:
    """The run ``name`` under ``root``, built once (with the runs it starts from); a smoke on
    the core ``core`` indexes (bench_smoke.run_smoke)."""
    if name == "tiny-dpr":
        return once(root, name, build_dpr_run)
    if name == "tiny-dpr-again":
        return once(root, name, lambda work: build_dpr_run(work, RERUN_TARGETS, "again"))
    if name == "tiny-all":
        dpr = build(root, "tiny-dpr")
        return once(root, name, lambda work: extend_run(dpr, work))
    if name == "tiny-audited":
        a, b = build(root, "tiny-dpr"), build(root, "tiny-dpr-again")
        return once(root, name, lambda work: audit_run(a, b, work))
    if name == "tiny-touched":
        return once(root, name, build_touched_run)
    if name == "tiny-transfer":
        dpr = build(root, "tiny-dpr")
        return once(root, name, lambda work: build_transfer_run(dpr, work))
    if name == "rehearsal-reduced":
        return once(root, name, build_reduced_rehearsal)
    if name == "slurm":
        dpr = build(root, "tiny-dpr")
        return once(root, name, lambda work: build_slurm_run(dpr, work, DPR_OVERLAY))
    if name == "slurm-paper-plan":
        return once(root, name, build_paper_plan)
    if name in SMOKES:
        return once(root, name, lambda work: bench_smoke.run_smoke(SMOKES[name], work, core))
    raise ValueError(f"no tiny run named {name!r}")


# The runs each session fixture needs.
NEEDS = {
    "tiny_touched_run": ("tiny-touched",),
    "tiny_dpr_run": ("tiny-dpr",),
    "tiny_run": ("tiny-dpr", "tiny-all"),
    "tiny_dpr_rerun": ("tiny-dpr-again",),
    "tiny_audited": ("tiny-dpr-again", "tiny-audited"),
    "tiny_transfer_run": ("tiny-dpr", "tiny-transfer"),
    "reduced_rehearsal": ("rehearsal-reduced",),
    "real_slurm_run": ("tiny-dpr", "slurm"),
    "slurm_paper_plan": ("slurm-paper-plan",),
}
# The benchmarks' smoke runs (bench_smoke.py), one per benchmark; test_benchmarks.py asks
# for them through its ``bench_smoke`` fixture, parametrised by benchmark.
SMOKES = {bench_smoke.run_name(b): b for b in bench_smoke.BENCHMARKS}
# The order the background builder makes them (the touched DAG takes seconds), and in which
# the tests that read them run: each test as soon as the last run it needs is there. The
# smokes come last, two at a time: by then the tests mostly wait on them. The real-SLURM run,
# built beside the others from the DPR run on, ends about when the paper plan does: its tests
# come after that plan's, so that the session does not wait for it with tests left to run.
ORDER = ("tiny-touched", "tiny-dpr", "tiny-all", "tiny-dpr-again", "tiny-audited",
         "tiny-transfer", "rehearsal-reduced", "slurm-paper-plan", "slurm", *SMOKES)  # fmt: skip
# Runs that mostly wait (the executor plugin's status checks), and the run each copies: the builder
# starts one in a thread of its own as soon as that run is built, and goes on beside it. (It
# never builds a run itself: workflow_util's Snakemake zygote serves one thread at a time.)
BESIDE = {"slurm": "tiny-dpr"}
# Smokes built at once by the builder, each on a core of its own.
SMOKE_LANES = 2


def runs_needed(item) -> set[str]:
    """The runs a collected test ``item`` reads: its fixtures' (NEEDS), and its benchmark's
    smoke run where it asks for one."""
    fixtures = getattr(item, "fixturenames", ())
    names = {r for f in NEEDS if f in fixtures for r in NEEDS[f]}
    params = getattr(getattr(item, "callspec", None), "params", {})
    if "bench_smoke" in params:
        names.add(bench_smoke.run_name(params["bench_smoke"]))
    return names


def main(argv: list[str]) -> int:
    """Build the named runs under ``argv[0]`` in order (those in BESIDE in threads of their
    own); a failed one is recorded (its fixture reports it) and the others are still built."""
    root, failed = Path(argv[0]), []

    def attempt(name: str) -> None:
        try:
            build(root, name)
        except Exception:
            traceback.print_exc()
            failed.append(name)

    beside = []
    for name in argv[1:]:
        if name in BESIDE or name in SMOKES:
            continue
        attempt(name)
        for other, after in BESIDE.items():
            if after == name and other in argv[1:]:
                beside.append(threading.Thread(target=attempt, args=(other,)))
                beside[-1].start()
    # The smokes last, two at a time (one per core): by then the tests mostly wait on them (a
    # quiet session measured 72 s of waiting for 82 s of smokes one after another).
    smokes = [n for n in argv[1:] if n in SMOKES]
    lanes = min(SMOKE_LANES, len(os.sched_getaffinity(0)))

    def lane(core: int) -> None:
        while True:
            with lock:
                if not smokes:
                    return
                name = smokes.pop(0)
            try:
                build(root, name, core)
            except Exception:
                traceback.print_exc()
                failed.append(name)

    lock = threading.Lock()
    beside += [threading.Thread(target=lane, args=(core,)) for core in range(lanes)]
    for thread in beside[-lanes:]:
        thread.start()
    for thread in beside:
        thread.join()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
