"""Call a `drpipe` subcommand in-process (errors propagate as exceptions, unlike `main`)."""

from __future__ import annotations

import json
from pathlib import Path

from drpipe.cli import build_parser
from drpipe.cliutil import merge_threads


def run_cli(*argv: str, cfg: dict | None = None) -> dict | None:
    """Run ``drpipe ARGV --cfg CFG``; return the ``--report`` JSON when one was asked for."""
    args = build_parser().parse_args([*argv, *(["--cfg", json.dumps(cfg)] if cfg else [])])
    merge_threads(args)
    args.func(args)
    if "--report" in argv:
        return json.loads(Path(argv[argv.index("--report") + 1]).read_text())
    return None


def run_corpus(*argv: str, cfg: dict | None = None) -> dict | None:
    return run_cli("corpus", *argv, cfg=cfg)
