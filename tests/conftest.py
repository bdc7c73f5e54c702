"""Shared fixtures: where the real-data mirror is, and offline settings for Hugging Face."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import anserini_aot
import pytest
import system_packages
import tiny_run as runs
from bench_smoke import run_name as bench_smoke_run_name
from workflow_util import mirror_dir

REPO = Path(__file__).resolve().parents[1]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def data_mirror() -> Path:
    """The read-only directory of real data (``DATA_MIRROR``, default ``../shared/data``)."""
    path = mirror_dir()
    if not path.is_dir():
        pytest.fail(f"data mirror {path} not found: set DATA_MIRROR to the shared data directory")
    return path


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


# ------------------------------------------------------------- the tiny real runs (tiny_run.py)
# Built once per session and shared by every end-to-end module; tests only read them (dry runs
# included), and a test that changes files copies one first. When the collected tests need
# them, a background process starts building them at once, on both cores, while the tests
# that need none run first (mostly on one core); the fixtures wait for it.


@pytest.fixture(scope="session")
def shared_tmp(tmp_path_factory) -> Path:
    """The session's temporary folder, where the tiny runs are built."""
    return tmp_path_factory.getbasetemp()


@pytest.fixture(scope="session")
def tiny_dpr_run(shared_tmp, data_mirror) -> Path:
    """The tiny DPR run (BM25, initial encoder, DPR, its hybrid, Figure 1)."""
    return runs.build(shared_tmp, "tiny-dpr")


@pytest.fixture(scope="session")
def tiny_dpr_rerun(shared_tmp, data_mirror) -> Path:
    """The same DPR run built again, independently, in another directory (Table 2's jobs)."""
    return runs.build(shared_tmp, "tiny-dpr-again")


@pytest.fixture(scope="session")
def tiny_run(shared_tmp, data_mirror) -> Path:
    """The DPR run taken on to every method, AOpt's rounds and figures, DPR Table 3."""
    return runs.build(shared_tmp, "tiny-all")


@pytest.fixture(scope="session")
def tiny_transfer_run(shared_tmp, data_mirror) -> Path:
    """The transfer chain on a copy of the DPR run (tiny_run.TRANSFER_OVERLAY)."""
    return runs.build(shared_tmp, "tiny-transfer")


@pytest.fixture(scope="session")
def tiny_touched_run(shared_tmp, data_mirror) -> Path:
    """The DAG of tiny_run, every job marked done without running it (no data read)."""
    return runs.build(shared_tmp, "tiny-touched")


@pytest.fixture(scope="session")
def tiny_audited(shared_tmp, data_mirror) -> tuple[Path, Path]:
    """(a copy of the DPR run audited against the second one, the second one)."""
    return runs.build(shared_tmp, "tiny-audited"), runs.build(shared_tmp, "tiny-dpr-again")


@pytest.fixture(scope="session")
def real_slurm_run(shared_tmp, data_mirror) -> Path:
    """The tiny DPR run's copy run again through a real local SLURM (slurm_run.py)."""
    return runs.build(shared_tmp, "slurm")


@pytest.fixture(scope="session")
def slurm_paper_plan(shared_tmp, data_mirror) -> Path:
    """The paper scale's whole plan with the SLURM profile, dry run (slurm_run.py)."""
    return runs.build(shared_tmp, "slurm-paper-plan")


@pytest.fixture
def bench_smoke(request, shared_tmp, data_mirror) -> Path:
    """The smoke run of the benchmark ``request.param`` (a path; parametrise indirectly):
    the folder of its record (bench_smoke.py)."""
    return runs.build(shared_tmp, bench_smoke_run_name(request.param))


@pytest.fixture(scope="session")
def reduced_rehearsal(shared_tmp, data_mirror) -> Path:
    """The paper scale's structure on stand-ins: NQ and each paper's Multi set (tiny_run)."""
    return runs.build(shared_tmp, "rehearsal-reduced")


_BUILDER: subprocess.Popen | None = None
_AOT: threading.Thread | None = None
_APT: subprocess.Popen | None = None
# Where the tests that need the touched DAG or the DPR run start, as a fraction of the way
# through the tests that need none (the DPR run takes the builder ~3 of their ~9 minutes).
EARLY_AT = 0.35
# The threads this process had before it went to one beside the builder, and OMP_NUM_THREADS.
_THREADS: tuple[int, str | None] | None = None
# The runs of a builder started before collection (the whole suite's).
_STARTED: list[str] | None = None


@pytest.hookimpl(trylast=True)  # after -k / -m have deselected what will not run
def pytest_collection_modifyitems(config, items):
    """Tests that need no tiny run first; start building the runs the others need."""
    global _BUILDER
    needs = {i.nodeid: runs.runs_needed(i) for i in items}

    def ready(item) -> int:  # builder steps until the last run the item needs is there
        return max((runs.ORDER.index(r) + 1 for r in needs[item.nodeid]), default=0)

    # The tests that need no tiny run first, in collection order; those that need only the
    # touched DAG or the DPR run join them part-way (EARLY_AT of the way through), about when
    # the builder has made that run, so that the real-SLURM DAG runs beside the builder
    # rather than after it; the rest after, in the order the builder makes their runs.
    first = [i for i in items if ready(i) == 0]
    where = {i.nodeid: n / max(1, len(first)) for n, i in enumerate(first)}
    # A module begun before that point ends before it: split, its module-scoped fixtures are
    # set up twice (test_index's encoding of real passages, twice, cost 23 s more).
    begun = {}
    for i in first:
        begun.setdefault(i.path, where[i.nodeid])
    early = runs.ORDER.index("tiny-dpr") + 1

    def order(item) -> float:
        if item.get_closest_marker("both_cores"):
            # Two busy processes or threads: beside the builder's two jobs each got half a core;
            # after its last run (and its smokes) they have both cores.
            return 2.0 + len(runs.ORDER)
        step = ready(item)
        if step == 0:
            pos = where[item.nodeid]
            if begun[item.path] < EARLY_AT <= pos:
                return EARLY_AT - 1e-6 * (1 - pos)  # below EARLY_AT, still in order
            return pos
        return EARLY_AT + step / 1000 if step <= early else 1.0 + step

    items.sort(key=order)  # stable: equal keys keep collection order
    names = [r for r in runs.ORDER if any(r in n for n in needs.values())]
    if _STARTED is not None:  # the whole suite's, started before collection
        missing = set(names) - set(_STARTED)
        assert not missing, f"the builder started early builds none of {sorted(missing)}"
        return
    apt = any(i.get_closest_marker("system_packages") for i in items)
    _start_background(config, names, apt)


def _whole_suite(config) -> bool:
    """Whether this session runs every test, as `make test` does (no path, keyword, marker
    beyond the default, or rerun selection given): its builder can start before collection
    (~15 s of one core's work, the other core idle) with every run."""
    opt = config.option
    return (
        config.args_source == pytest.Config.ArgsSource.TESTPATHS
        and not opt.keyword
        and opt.markexpr == "not extended"
        and not opt.deselect
        and not opt.ignore
        and not getattr(opt, "lf", False)
        and not getattr(opt, "failedfirst", False)
    )


@pytest.hookimpl(trylast=True)  # after pytest's own, which sets up the temporary folder
def pytest_configure(config):
    global _STARTED
    if _whole_suite(config):
        _STARTED = _start_background(config, list(runs.ORDER), apt=True)


def _start_background(config, names: list[str], apt: bool) -> list[str] | None:
    """The Anserini cache, the system packages (``apt``) and the builder of the runs
    ``names``, started; the names the builder builds (None where it was not started)."""
    global _BUILDER, _AOT
    factory = getattr(config, "_tmp_path_factory", None)  # pytest's own, as tmp_path uses
    if factory is None or config.getoption("collectonly"):
        return None
    root = factory.getbasetemp()
    # Anserini's JVMs start from an ahead-of-time cache, named before any test or the builder
    # starts one (anserini_aot.py).
    _AOT = anserini_aot.start()
    # Debian's SLURM and Chromium, where the tests that use them run and they are missing:
    # installed beside the tests (system_packages.py); those tests wait for it.
    if apt:
        global _APT
        _APT = system_packages.start_install(root / "apt-install.log")
    if not names or not mirror_dir().is_dir():
        return None
    # One thread per process from here on, the builder's jobs included (workflow_util passes
    # --max-threads 1): two multi-threaded torch processes on two cores spin against each other
    # (a MiniLM test measured 13 s alone, 76 s beside the builder's two-thread jobs).
    global _THREADS
    torch = sys.modules.get("torch")
    _THREADS = (torch.get_num_threads() if torch else 0, os.environ.get("OMP_NUM_THREADS"))
    os.environ["OMP_NUM_THREADS"] = "1"
    _set_threads(1)
    log = open(root / "tiny-builder.log", "w")  # noqa: SIM115 - the builder's, closed at exit
    _BUILDER = subprocess.Popen(
        [sys.executable, str(Path(runs.__file__)), str(root), *names],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    return names


def _set_threads(n: int) -> None:
    """torch's and FAISS's threads in this process (they share one OpenMP runtime here;
    FAISS's is set as well in case they do not). While the builder runs it is one: code a test
    ran with `threads: 2` or none (training takes every core then) sets them process-wide, and
    the next test, or the next module's fixtures, would spin two threads against the builder's
    jobs (an IVF-PQ fixture took 17-23 s for 0.7 s alone)."""
    torch, faiss = sys.modules.get("torch"), sys.modules.get("faiss")
    if torch is not None and torch.get_num_threads() != n:
        torch.set_num_threads(n)
    if faiss is not None and faiss.omp_get_max_threads() != n:
        faiss.omp_set_num_threads(n)


@pytest.fixture(autouse=True)
def _threads_back_after_the_builder():
    """One thread per test while the builder runs, set again after each test (so before
    the next module's fixtures); the threads this process had once it has finished."""
    global _THREADS
    if _THREADS is None or _BUILDER is None:
        yield
        return
    if _BUILDER.poll() is None:
        _set_threads(1)
    else:
        threads, omp = _THREADS
        _THREADS = None
        if omp is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = omp
        _set_threads(threads or os.cpu_count() or 1)  # imported before the builder, or after
    yield
    if _THREADS is not None and _BUILDER.poll() is None:
        _set_threads(1)


def pytest_sessionfinish(session, exitstatus):
    """Stop the background builder if the session ends before it (an interrupted run)."""
    if _BUILDER is not None and _BUILDER.poll() is None:
        os.killpg(_BUILDER.pid, signal.SIGTERM)
        _BUILDER.wait()
    if _AOT is not None:
        _AOT.join()
