"""The `drpipe` command line: a version, `python -m drpipe`, a description for every command,
`drpipe --help` in sections, and every command a rule or the Makefile calls still accepted."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from drpipe import __version__
from drpipe.cli import SECTIONS, WORKFLOW, build_parser

REPO = Path(__file__).resolve().parents[1]
# Where `drpipe ...` is called from: every rule's shell line, and the Makefile's targets.
CALLERS = [
    *sorted((REPO / "workflow/rules").glob("*.smk")),
    *sorted((REPO / "workflow/drpipe/papers").glob("*/*.smk")),
    REPO / "Snakefile",
    REPO / "Makefile",
]
WORD = re.compile(r"[a-z][a-z0-9-]*")


def _subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    return next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)


def _walk(parser: argparse.ArgumentParser, prefix: str = "drpipe"):
    """(command, parser, help or None when the name is an unlisted alias), depth first."""
    sub = _subcommands(parser)
    if sub is None:
        return
    helps = {c.dest: c.help for c in sub._choices_actions}
    for name, child in sub.choices.items():
        yield f"{prefix} {name}", child, helps.get(name)
        yield from _walk(child, f"{prefix} {name}")


def test_python_dash_m_prints_the_version():
    out = subprocess.run([sys.executable, "-m", "drpipe", "--version"], capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    assert out.strip() == f"drpipe {__version__}"


def test_every_command_says_what_it_does():
    missing = [c for c, _, h in _walk(build_parser()) if h is not None and not h.strip()]
    assert not missing, missing


def test_every_unlisted_name_is_another_word_for_a_listed_command():
    commands = list(_walk(build_parser()))
    listed = {id(parser) for _, parser, h in commands if h is not None}
    orphans = [c for c, parser, h in commands if h is None and id(parser) not in listed]
    assert not orphans, orphans


def test_help_lists_the_commands_in_sections_with_the_workflow_steps_last():
    text = build_parser().format_help()
    titles = [*SECTIONS, WORKFLOW]
    at = [text.index(f"\n{t}:\n") for t in titles]
    assert at == sorted(at), "sections out of order"
    sections = dict(zip(titles, re.split("|".join(f"\n{re.escape(t)}:\n" for t in titles),
                                         text)[1:], strict=True))  # fmt: skip
    listed = {t: re.findall(r"^  ([a-z][a-z0-9-]*) ", body, re.M) for t, body in sections.items()}
    for title, names in SECTIONS.items():
        assert listed[title] == names, title
    top = {c.split()[1]: h for c, _, h in _walk(build_parser()) if c.count(" ") == 1}
    shown = [n for names in listed.values() for n in names]
    assert sorted(shown) == sorted(n for n, h in top.items() if h is not None)  # each once
    # the workflow's steps include the rules' internals; the older table names are not shown
    assert {"train", "encode", "provenance", "run-summary", "table-html"} <= set(listed[WORKFLOW])
    assert not [n for n in shown if n.startswith("tables-")]
    assert "drpipe tables PAPER TABLE" in " ".join(text.split())


# The documented form `drpipe tables PAPER TABLE` and the older spellings rules call.
SAME_COMMAND = [
    ("tables xmoco table2", "tables-xmoco table2"),
    ("tables xmoco figure2", "tables-xmoco figure2"),
    ("tables dcsr compare", "tables-dcsr compare"),
    ("tables dcsr figure4", "tables-dcsr figure4"),
    ("tables aopt table3", "tables-aopt table3"),
    ("tables aopt figure7", "tables-aopt figure7"),
    ("tables dpr table3", "tables table3"),
    ("tables dpr figure1", "tables figure1"),
]
INPUTS = {
    "figure1": ["--per-question", "r.parquet", "--labels", "a"],
    "figure4": ["--reports", "r.json", "--labels", "a", "--csv", "c.csv"],
}


@pytest.mark.parametrize(("new", "old"), SAME_COMMAND)
def test_a_paper_table_has_one_shape_and_the_old_name_still_parses(new, old):
    parser = build_parser()
    tail = ["--out", "x", "--cfg", "{}", *INPUTS.get(new.split()[-1], ["--metrics", "m.json"])]
    a = parser.parse_args([*new.split(), *tail])
    b = parser.parse_args([*old.split(), *tail])
    assert a.func is b.func
    assert vars(a) | {"command": None} == vars(b) | {"command": None}


def _called_commands() -> list[tuple[str, list[str]]]:
    """(file, the words after `drpipe`) for each call in a rule's shell line or the Makefile."""
    calls = []
    for path in CALLERS:
        for match in re.finditer(r"""(?:["']|/)drpipe ([^"'\n]*)""", path.read_text()):
            words = []
            for word in match.group(1).split():
                if not WORD.fullmatch(word):
                    # an option, or a {placeholder} Snakemake fills in (any subcommand)
                    words += ["{}"] if word.startswith("{") else []
                    break
                words.append(word)
            calls.append((path.relative_to(REPO).as_posix(), words))
    return calls


def test_every_command_a_rule_or_the_makefile_calls_is_accepted():
    calls = _called_commands()
    assert len(calls) > 50 and {f for f, _ in calls} >= {"Makefile", "workflow/rules/train.smk"}
    unknown = []
    root = build_parser()  # one for every call: walking its subparsers changes nothing
    for where, words in calls:
        parser, said = root, ["drpipe"]
        for word in words:
            sub = _subcommands(parser)
            if sub is None or word == "{}":
                break  # the rest are the command's own arguments, or filled in by the rule
            if word not in sub.choices:
                unknown.append(f"{where}: {' '.join([*said, word])}")
                break
            parser, said = sub.choices[word], [*said, word]
        else:
            if _subcommands(parser) is not None:
                unknown.append(f"{where}: {' '.join(said)} needs a subcommand")
    assert not unknown, unknown


def test_help_imports_no_torch():
    """`drpipe --help` stays fast: the heavy libraries load in the handlers."""
    script = (
        "import sys, contextlib, io\n"
        "from drpipe.cli import main\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['--help'])\n"
        "print(sorted(m for m in ('torch', 'faiss', 'transformers', 'matplotlib') "
        "if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    assert out.strip() == "[]"
