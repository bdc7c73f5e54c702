"""The `drpipe` command line: a version, `python -m drpipe`, a description for every command."""

from __future__ import annotations

import argparse
import subprocess
import sys

from drpipe import __version__
from drpipe.cli import build_parser


def test_python_dash_m_prints_the_version():
    out = subprocess.run([sys.executable, "-m", "drpipe", "--version"], capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    assert out.strip() == f"drpipe {__version__}"


def test_every_command_says_what_it_does():
    missing = []

    def walk(parser: argparse.ArgumentParser, prefix: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                helps = {c.dest: c.help for c in action._choices_actions}
                for name, sub in action.choices.items():
                    if not (helps.get(name) or "").strip():
                        missing.append(prefix + name)
                    walk(sub, f"{prefix}{name} ")

    walk(build_parser(), "drpipe ")
    assert not missing, missing
