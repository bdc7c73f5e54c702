"""`python smoke_one_core.py BENCH ARGS...`: the benchmark script BENCH with ARGS on one core
(bench_smoke.run_smoke says why), its CPU time written to SMOKE_CPU_FILE at exit. Run as a
process of its own or as a fork of the job server (drpipe.forkserver's `python` requests)."""

import atexit
import os
import resource
import runpy
import sys

cores = sorted(os.sched_getaffinity(0))
os.sched_setaffinity(0, [cores[int(os.environ.get("SMOKE_CORE", "-1")) % len(cores)]])
# A fork of the server has torch and FAISS loaded already: their threads follow the affinity,
# as a new process's would.
if "torch" in sys.modules:
    sys.modules["torch"].set_num_threads(len(os.sched_getaffinity(0)))
if "faiss" in sys.modules:
    sys.modules["faiss"].omp_set_num_threads(len(os.sched_getaffinity(0)))


def _cpu() -> None:
    own, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    with open(os.environ["SMOKE_CPU_FILE"], "w") as fh:
        fh.write(str(own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime))


atexit.register(_cpu)
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
runpy.run_path(sys.argv[0], run_name="__main__")
