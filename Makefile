# Two commands do all the setup on a fresh machine:
#   make run    install into .venv, then run the workflow on the default (mini) scale
#   make test   install into .venv, then run the tests
# Without internet, point the data mirror at a local copy: DATA_MIRROR=../shared/data make run

VENV ?= .venv
PYTHON ?= python3
CORES ?= all
TARGET ?= all
SNAKEMAKE_ARGS ?=
# Config values for the run in Snakemake's --config syntax, e.g. CONFIG='encode="{precision: int8}"'
# (Snakemake keeps only the last --config it is given, so they join the scale's here).
CONFIG ?=
# The scale, for every target that runs or reads a run (run, audit, claims, estimate): SCALE=squad
SCALE ?=
SCALE_CONFIG = $(strip $(if $(SCALE),scale=$(SCALE)) $(CONFIG))
DONE = echo; echo "Done: results/table2.md (and .csv). Compare it with the reference: make verify"
# CPU build of torch; a bare `torch` would pull a multi-GB CUDA build (see envs/gpu.yaml).
TORCH ?= torch==2.13.0
DATA_MIRROR ?=
PYTEST_ARGS ?=

BIN := $(VENV)/bin
STAMP := $(VENV)/.drpipe-installed
# Local runs fork every `drpipe` job from one process that has torch, transformers and drpipe
# imported (drpipe.forkserver; a model job's imports took ~4-5 s of CPU each). FORK=0 runs each
# job as a process of its own, whose benchmark file then holds its own memory and CPU.
FORK ?= 1
DRY_RUN = $(filter -n --dry-run --dryrun,$(SNAKEMAKE_ARGS))
FORKED = $(if $(and $(filter 1,$(FORK)),$(if $(DRY_RUN),,1)),$(BIN)/python -m drpipe.forkserver run --)

export TOKENIZERS_PARALLELISM := false
# Absolute, so that a relative mirror (../shared/data) still resolves under `--directory`.
override DATA_MIRROR := $(if $(DATA_MIRROR),$(abspath $(DATA_MIRROR)))
export DATA_MIRROR
# Hugging Face offline (no hub look-up: models are local or packaged) with a data mirror (no
# internet; CI sets one) or OFFLINE=1; else a hub id such as encoder.init: bert-base-uncased
# downloads (docs/encoders.md). OFFLINE=0 keeps the hub reachable beside a mirror.
OFFLINE ?= $(if $(DATA_MIRROR),1,0)
ifeq ($(OFFLINE),1)
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
endif
export PATH := $(abspath $(BIN)):$(PATH)
# Where it is set (as on these machines), PYTHONDONTWRITEBYTECODE would make every process
# compile every module it imports anew, the venv's included; lifted, each is compiled once.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: help install lock run test lint format bench clean squad audit claims rehearse estimate verify cluster-check seeds

help:
	@echo "make run       install, run the default (mini) scale -> results/table2.md"
	@echo "make test      install, run the tests"
	@echo "make verify    compare a finished run's tables with docs/reference/"
	@echo "make audit     lineage of every cell, what would rerun, the claims, the HTML report"
	@echo "make claims    the papers' claims on what a run has made so far"
	@echo "make seeds     Table 2's trained rows and the claims over seeds (config seeds)"
	@echo "make estimate  what TARGET would cost, from a finished run's timings (FROM=run/)"
	@echo "make cluster-check  whether SLURM accepts every job's request (SCALE=paper)"
	@echo "make rehearse  the paper scale's every rule on stand-ins, on one CPU (PROFILE=slurm)"
	@echo "make bench     the benchmarks (BENCH_ARGS=--smoke: seconds each)"
	@echo "make lint | format | install | lock | clean   (lock: requirements/lock-cpu.txt)"
	@echo "Variables: SCALE=squad TARGET=results/... CONFIG='key=value ...' CORES=N"
	@echo "           SNAKEMAKE_ARGS=-n DATA_MIRROR=../shared/data PYTEST_ARGS=..."
	@echo "           OFFLINE=1 (no Hugging Face hub; the default with DATA_MIRROR)"
	@echo "           FORK=0 (each job a process of its own; default: forked, drpipe.forkserver)"

install: $(STAMP)

# Only what a run imports is byte-compiled (pip --no-compile; uv does not by default): the
# install ends by importing it in two processes (WARM), which writes those modules' .pyc, and a
# module imported later has its .pyc written by the first process that imports it
# (PYTHONDONTWRITEBYTECODE is lifted for make's commands, above). Compiling all ~24,000 files
# ahead took ~50 s of the install; a run imports about a fifth of them.
# torch comes through pip, which reads the machine's pip configuration (where its CPU build
# lies); the rest through uv, which resolves the same versions in a third of pip's time
# (21-26 s against ~65 s here; the whole install 70-77 s against 123 s, quiet), or through pip
# where uv cannot be installed or fails.
# With the lock (LOCK, made by `make lock`) the rest are its exact versions, then drpipe itself
# with --no-deps; without it (LOCK=), the newest that pyproject.toml allows, as resolved then.
# The extras `make install` installs: run (bm25, mini, workflow) and test; `make run` uses none
# of test's packages (tests/test_install.py), but run and test share the one venv.
EXTRA_NAMES = bm25 mini workflow test
comma := ,
empty :=
space := $(empty) $(empty)
EXTRAS = .[$(subst $(space),$(comma),$(EXTRA_NAMES))]
LOCK ?= $(wildcard requirements/lock-cpu.txt)
UV_INSTALL = $(BIN)/uv pip install --quiet --python $(BIN)/python
PIP_INSTALL = $(BIN)/pip install --quiet --no-compile
REST = $(if $(LOCK),-r $(LOCK),-e "$(EXTRAS)")
SELF = $(if $(LOCK),&& $$install --no-deps -e .)
# The imports that WARM compiles, torch's and the rest in two processes (one would import a
# module the other is compiling); one that fails to import is left to the run that needs it.
WARM_TORCH = torch transformers.models.bert.modeling_bert drpipe.cli:build_parser
WARM_REST = snakemake.cli:get_argument_parser pandas pyarrow.parquet faiss matplotlib.pyplot \
	scipy.stats onnxruntime spacy ir_measures
export define WARM
import importlib, sys
for name in sys.argv[1:]:
    module, _, call = name.partition(":")
    try:
        loaded = importlib.import_module(module)
        if call:
            getattr(loaded, call)()
    except Exception as exc:
        print(f"install: {name} not compiled ahead: {exc}", file=sys.stderr)
endef
$(STAMP): pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet uv || echo "uv not installed: pip installs everything"
	$(BIN)/pip install --quiet --no-compile "$(TORCH)"
	{ [ -x $(BIN)/uv ] && install="$(UV_INSTALL)" && $$install $(REST) $(SELF); } \
		|| { install="$(PIP_INSTALL)" && $$install $(REST) $(SELF); }
	$(BIN)/python -c "$$WARM" $(WARM_TORCH) & $(BIN)/python -c "$$WARM" $(WARM_REST); wait
	touch $@

# Regenerates requirements/lock-cpu.txt from pyproject.toml: every package `make install` puts
# beside torch, for Python 3.11 on Linux x86_64. torch itself is left out (the Makefile installs
# $(TORCH), the CPU build) and so is what only PyPI's CUDA build of it needs
# (requirements/torch-cuda.txt); its other dependencies are pinned. Versions already in the lock
# are kept where pyproject.toml still allows them; LOCK_ARGS=--upgrade takes the newest.
LOCK_FILE = requirements/lock-cpu.txt
LOCK_ARGS ?=
lock:
	@command -v uv > /dev/null || { echo "make lock needs uv: make install, or pip install uv" >&2; exit 1; }
	echo "$(TORCH)" | uv pip compile --quiet pyproject.toml - $(addprefix --extra ,$(EXTRA_NAMES)) \
		--python-version 3.11 --python-platform x86_64-manylinux_2_28 --no-emit-package torch \
		--excludes requirements/torch-cuda.txt --custom-compile-command "make lock" \
		-o $(LOCK_FILE) $(LOCK_ARGS)

# The targets come before SNAKEMAKE_ARGS: an option that takes several values
# (--forcerun RULE..., --until, -q) would otherwise read them as its own.
run: install
	$(FORKED) $(BIN)/snakemake --profile profiles/default --cores $(CORES) $(TARGET) $(SNAKEMAKE_ARGS) \
		$(if $(SCALE_CONFIG),--config $(SCALE_CONFIG))
	@$(if $(DRY_RUN)$(filter-out all,$(TARGET)),true,$(DONE))

# Training variance (config `seeds`): every trained Table 2 row and claim run trained again under
# each extra seed, results/table2-seeds.md and results/claims-seeds.md (docs/claims.md).
SEEDS_TARGETS = results/table2-seeds.csv results/claims-seeds.csv
seeds: install
	$(FORKED) $(BIN)/snakemake --profile profiles/default --cores $(CORES) $(SEEDS_TARGETS) $(SNAKEMAKE_ARGS) \
		$(if $(SCALE_CONFIG),--config $(SCALE_CONFIG))

squad: install
	$(FORKED) $(BIN)/snakemake --profile profiles/default --cores $(CORES) $(TARGET) $(SNAKEMAKE_ARGS) \
		--config scale=squad $(CONFIG)

# The paper scale rehearsed on CPU before GPU-days are spent (config/scales/rehearsal.yaml): every
# paper-scale rule and table on stand-in inputs of the papers' formats made from DATA_MIRROR
# and a tiny encoder, in $(REHEARSAL_DIR)/; ends with the one-page results/run_summary.md.
# PROFILE=slurm submits every job through profiles/slurm instead: to the cluster SLURM_CONF (or
# /etc/slurm) names, else to a single-node SLURM started on this machine for the run and
# stopped after it (tests/slurm/local-cluster; root; its node advertises 8 GPUs), which checks
# every rule's resource request against a real scheduler. Trainings get 1 GPU there (a
# CPU box cannot run 8 torchrun ranks), SLURM_JOBS jobs at once. On the local cluster the
# jobs are seconds long and share this machine's cores: their status is checked every 2 s
# (the plugin's 40 s before the first check and 10 s between would be most of the run) and
# each runs on one thread, while SLURM still checks the CPUs the profile asks for.
REHEARSAL_DIR ?= rehearsal
PROFILE ?= default
SLURM_JOBS ?= 4
ifeq ($(PROFILE),slurm)
LOCAL_SLURM = $(if $(shell sinfo -h 2>/dev/null),,tests/slurm/local-cluster run --)
LOCAL_SLURM_ARGS = --slurm-init-seconds-before-status-checks 1 --seconds-between-status-checks 2 \
	--max-threads 1
REHEARSE_PROFILE = $(REHEARSAL_DIR)/slurm-profile --jobs $(SLURM_JOBS) --sdm env-modules \
	$(if $(LOCAL_SLURM),$(LOCAL_SLURM_ARGS))
else
REHEARSE_PROFILE = profiles/$(PROFILE) --cores $(CORES)
endif
rehearse: install
ifeq ($(PROFILE),slurm)
	rm -rf $(REHEARSAL_DIR)/slurm-profile && mkdir -p $(REHEARSAL_DIR)
	cd tests && $(abspath $(BIN))/python slurm_run.py profile $(abspath $(REHEARSAL_DIR))/slurm-profile
endif
	$(if $(filter slurm,$(PROFILE)),$(LOCAL_SLURM),$(FORKED)) $(BIN)/snakemake --profile $(REHEARSE_PROFILE) --directory $(REHEARSAL_DIR) \
		results/run_summary.md $(SNAKEMAKE_ARGS) --config scale=rehearsal $(CONFIG)
	$(if $(filter -n --dry-run --dryrun,$(SNAKEMAKE_ARGS)),,cat $(REHEARSAL_DIR)/results/run_summary.md)

# Whether the cluster can run every job's request of TARGET (sbatch --test-only, nothing submitted)
cluster-check: install
	$(BIN)/drpipe cluster-check $(or $(TARGET),results/table2.csv) --snakemake-args \
		"--profile profiles/slurm $(SNAKEMAKE_ARGS)$(if $(SCALE), --config scale=$(SCALE))"

# Audit a finished run without rebuilding anything: lineage of every table cell, what the
# current config and code would rerun (pass the run's SNAKEMAKE_ARGS, e.g. --config
# scale=squad), the papers' claims with paired tests, and Snakemake's HTML report.
#   make audit [SNAKEMAKE_ARGS=...] [AGAINST=../other/results]
AGAINST ?=
audit: install
	$(BIN)/drpipe audit results --out results/audit --claims results/claims.csv \
		--report results/report.html $(if $(AGAINST),--against $(AGAINST)) \
		--snakemake-args "$(SNAKEMAKE_ARGS)$(if $(SCALE), --config scale=$(SCALE))"

# Did this run reproduce the committed reference (docs/reference/<scale>/<precision path>)?
# Cell by cell: identical on the reference's CPU kind, within its tolerance on another.
#   make verify [RESULTS=other/results]   (a new reference: drpipe verify --write-reference)
RESULTS ?= results
verify: install
	$(BIN)/drpipe verify --results $(RESULTS) --reference docs/reference

# The papers' claims on what a run has made so far (a run still going has no provenance record
# for `make audit`): make claims CONFIG=scale=squad -> results/claims-so-far.csv
claims: install
	$(BIN)/drpipe claims --results results --out results/claims-so-far.csv --config $(SCALE_CONFIG)

# What a target would cost before it is started: its snakemake -n plan timed from the rule
# benchmarks of a run already made (FROM, default the current folder), e.g.
# make estimate TARGET=results/dpr/table3.csv FROM=../squad-run SNAKEMAKE_ARGS="--config scale=squad"
estimate: install
	$(BIN)/drpipe estimate $(TARGET) --reference $(or $(FROM),.) --cores $(CORES) \
		--snakemake-args "$(SNAKEMAKE_ARGS)$(if $(SCALE), --config scale=$(SCALE))"

# glibc's malloc keeps what a process frees for reuse instead of unmapping it: otherwise each
# training step's optimizer temporaries (the size of MiniLM's 47 MB embedding matrix, above
# malloc's 32 MB mmap ceiling) are page-faulted and zeroed afresh. It changes no computed
# value; the tests' CPU falls (docs/testing.md).
MALLOC_REUSE = glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736

# The Debian packages some tests need (SLURM for tests/test_slurm.py, Chromium for the
# report's test) are installed by the session itself where it runs as root with apt-get, in the
# background beside the first tests (tests/system_packages.py); elsewhere those tests skip and
# say why.
test: install
	GLIBC_TUNABLES=$(MALLOC_REUSE) $(BIN)/pytest $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check workflow tests benchmarks
	$(BIN)/ruff format --check workflow tests benchmarks
	$(BIN)/snakefmt --check Snakefile workflow/rules workflow/drpipe/papers/*/*.smk
	$(BIN)/snakemake --lint --cores 1 -n

format: install
	$(BIN)/ruff format workflow tests benchmarks
	$(BIN)/ruff check --fix workflow tests benchmarks
	$(BIN)/snakefmt Snakefile workflow/rules workflow/drpipe/papers/*/*.smk

# make bench BENCH_ARGS=--smoke: every benchmark at its smallest size, seconds each (figures
# meaningless, written to results/benchmarks/smoke/); tests/test_benchmarks.py runs the same.
# Every benchmark runs even if one fails (the failures are named at the end); bench_cuda.py
# measures the CUDA paths and is skipped where torch sees no GPU (its --smoke runs on CPU).
BENCH_ARGS ?=
NO_CUDA = ! $(BIN)/python -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'
bench: install
	@failed=; for b in benchmarks/bench_*.py; do \
		if [ $$b = benchmarks/bench_cuda.py ] && [ -z "$(filter --smoke,$(BENCH_ARGS))" ] \
			&& $(NO_CUDA); then echo "skipped $$b: torch sees no CUDA GPU"; continue; fi; \
		echo "$(BIN)/python $$b $(BENCH_ARGS)"; \
		$(BIN)/python $$b $(BENCH_ARGS) || failed="$$failed $$b"; \
	done; \
	if [ -n "$$failed" ]; then echo "make bench: failed:$$failed" >&2; exit 1; fi

# Deletes every result (hours of training at squad): only with CONFIRM=yes.
clean:
	@if [ "$(CONFIRM)" != yes ]; then \
		echo "make clean deletes results/, .snakemake/ and $(REHEARSAL_DIR)/: run make clean CONFIRM=yes" >&2; \
		exit 1; fi
	rm -rf results .snakemake $(REHEARSAL_DIR)
