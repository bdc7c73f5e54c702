"""A Python process with Snakemake's and torch's modules already imported that forks one child
per `snakemake` command of the tests (workflow_util.snakemake starts it, one per pytest
process).

Parsing the Snakefile imports the method registry, hence torch: about 2 s of CPU before each
dry run does anything, and the tests run some fifty of them. A forked child skips those imports
and is otherwise a fresh `snakemake` process: its own arguments, environment, working directory
and output files; drpipe itself is imported by the child, from the tree on the zygote's path.

Protocol, one JSON request per line on stdin: {"argv", "env", "cwd", "stdout", "stderr"}; the
zygote answers the child's pid on one line, then its exit status and CPU seconds on the next.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from drpipe_zygote import become  # from tests/, still first on the path (stdlib only)

# What the `snakemake` console script has first on its path: its own folder, not tests/.
sys.path[0] = str(Path(sys.executable).parent)

import snakemake.cli  # noqa: E402
import torch  # noqa: E402, F401  (imported by the method registry when a Snakefile is parsed)


def _snakemake(request: dict) -> None:
    """`snakemake ARGV`, its output to the request's files."""
    for fd, path, mode in ((0, os.devnull, os.O_RDONLY),
                           (1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                           (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):  # fmt: skip
        os.dup2(os.open(path, mode, 0o644), fd)
    sys.argv = list(request["argv"])
    snakemake.cli.main(sys.argv[1:])


def main() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            become(request, lambda: _snakemake(request))  # noqa: B023 - runs now
        print(pid, flush=True)
        _, status, usage = os.wait4(pid, 0)
        cpu = usage.ru_utime + usage.ru_stime  # the child's and its waited children's
        print(os.waitstatus_to_exitcode(status), f"{cpu:.3f}", flush=True)


if __name__ == "__main__":
    main()
