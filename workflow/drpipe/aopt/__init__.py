"""AOpt (Future Internet 2023): pseudo-relevance feedback on stored vectors, no encoder trained.

The method, the paper's equations and the commands (``drpipe aopt optimise``, ``linear``,
``linear-grid``) are described in ``cli``'s docstring, which is ``drpipe aopt --help``.

Modules, from the bottom up:

- ``settings``: the commands' cfg keys, their defaults, checking a run's cfg
- ``vectors``: passage vector shards and question vectors, read and written
- ``labels``: pseudo-labels of a run's top ``depth`` (answers, equation 8, or PRF)
- ``optimise``: the per-vector contrastive problems, the vectorised optimiser and the plain loop
- ``linear``: the linear update of equation 9 and its (beta, gamma) grid
- ``cli``: the ``aopt`` subcommands

Only ``cli`` is imported here (``drpipe.cli`` imports this package for every command); ``cli``
imports the rest at module level, so the code hash of ``drpipe.aopt`` covers every module.
"""

from drpipe.aopt.cli import register

__all__ = ["register"]
