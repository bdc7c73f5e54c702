"""No code runs from data: no unpickling or eval of files, no shell built from unquoted values,
and every user-chosen name in the config is a plain identifier."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml
from workflow_util import REPO

from drpipe.config import ConfigError, deep_merge, read_defaults, resolve

SCHEMA = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
RAW = read_defaults(REPO)

PACKAGE = sorted((REPO / "workflow" / "drpipe").rglob("*.py"))
RULE_FILES = [REPO / "Snakefile", *sorted((REPO / "workflow" / "rules").glob("*.smk"))]

# What loads or runs code hidden in a data file (or a string) instead of reading data.
UNSAFE = {
    "torch.load(weights_only=False)": re.compile(r"weights_only\s*=\s*False"),
    "numpy allow_pickle=True": re.compile(r"allow_pickle\s*=\s*True"),
    "pickle.load": re.compile(r"pickle\.loads?\b"),
    "yaml.load without a safe loader": re.compile(
        r"yaml\.(?:unsafe_load|full_load|load(?:_all)?\((?![^)]*Safe))"
    ),
    "shell=True": re.compile(r"shell\s*=\s*True"),
    "eval/exec": re.compile(r"(?<![\w.])(?:eval|exec)\s*\("),
}


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else path.name


def test_no_code_is_loaded_from_data():
    hits = []
    for path in [*PACKAGE, *RULE_FILES]:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            hits += [f"{_rel(path)}:{n}: {what}" for what, rx in UNSAFE.items() if rx.search(line)]
    assert not hits, "unsafe loading or evaluation:\n" + "\n".join(hits)


def test_unsafe_patterns_are_recognised():
    bad = [
        "torch.load(p, weights_only=False)",
        "np.load(p, allow_pickle=True)",
        "pickle.load(fh)",
        "x = pickle.loads(b)",
        "yaml.load(fh)",
        "yaml.load(fh, Loader=yaml.Loader)",
        "yaml.unsafe_load(fh)",
        "subprocess.run(cmd, shell=True)",
        "eval(text)",
        "exec(code)",
    ]
    good = ["yaml.safe_load(fh)", "yaml.load(fh, Loader=yaml.SafeLoader)", "model.eval()"]
    good += ["ast.literal_eval(s)", "torch.load(p, weights_only=True)"]
    for line in bad:
        assert any(rx.search(line) for rx in UNSAFE.values()), line
    for line in good:
        assert not any(rx.search(line) for rx in UNSAFE.values()), line


def _shell_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of every line of every `shell:` directive in a rule file."""
    out, indent = [], None
    for n, line in enumerate(path.read_text().splitlines(), 1):
        here = len(line) - len(line.lstrip())
        if indent is not None and line.strip() and here <= indent:
            indent = None
        m = re.match(r"(\s*)shell:\s*(.*)$", line)
        if m:
            indent = len(m.group(1))
            if m.group(2):
                out.append((n, m.group(2)))
        elif indent is not None and line.strip():
            out.append((n, line.strip()))
    return out


# A replacement field of a Snakemake shell string (`{{`/`}}` are literal braces).
FIELD = re.compile(r"(?<!\{)\{([A-Za-z_][\w.\[\]'\"]*)(?::([^{}]*))?\}(?!\})")


# Several command-line words built by the plan's options() (drpipe.plan.base) from integers
# only (settings passed outside the hashed cfg): safe unquoted, and quoting would make them one
# word.
MULTIWORD = {"params.opts"}


def _unquoted(path: Path, only_wildcards: bool) -> list[str]:
    bad = []
    for n, text in _shell_lines(path):
        for m in FIELD.finditer(text):
            name, spec = m.group(1), m.group(2) or ""
            if only_wildcards and not name.startswith("wildcards"):
                continue
            if name in MULTIWORD:
                continue
            if not spec.endswith("q"):
                bad.append(f"{_rel(path)}:{n}: {m.group(0)}")
    return bad


def test_shell_field_parser_sees_every_field(tmp_path):
    rules = tmp_path / "x.smk"
    rules.write_text(
        'rule a:\n    shell:\n        "x {wildcards.source} {input:q}"\n'
        '        " {{literal}} {wildcards.b:q} {params.p}"\n\n\nrule b:\n'
        '    shell: "y {wildcards.c}"\n    output:\n        "{wildcards.not_shell}"\n'
    )
    assert _unquoted(rules, only_wildcards=True) == [
        "x.smk:3: {wildcards.source}",
        "x.smk:8: {wildcards.c}",
    ]
    assert _unquoted(rules, only_wildcards=False)[-2:] == [
        "x.smk:4: {params.p}",
        "x.smk:8: {wildcards.c}",
    ]


@pytest.mark.parametrize("path", RULE_FILES, ids=_rel)
def test_wildcards_in_shell_lines_are_quoted(path):
    bad = _unquoted(path, only_wildcards=True)
    assert not bad, "unquoted wildcard in a shell line (use {wildcards.x:q}):\n" + "\n".join(bad)


# Rule files whose shell lines quote every value, not only wildcards (a param holding several
# command-line words, e.g. train.smk's `opts`, must stay unquoted until it becomes a list).
FULLY_QUOTED = [REPO / "workflow" / "rules" / f for f in ("download.smk", "corpus.smk")]
FULLY_QUOTED += [REPO / "workflow" / "rules" / f for f in ("bm25.smk", "mining.smk")]


@pytest.mark.parametrize("path", FULLY_QUOTED, ids=_rel)
def test_every_value_in_shell_lines_is_quoted(path):
    bad = _unquoted(path, only_wildcards=False)
    assert not bad, "unquoted value in a shell line (use {x:q}):\n" + "\n".join(bad)


@pytest.mark.parametrize(
    ("patch", "key"),
    [
        ({"sources": {"x`touch pwned`": {"url": "https://x/y"}}}, "sources"),
        ({"qa": {"sq$(id)": {"test": None}}}, "qa"),
        ({"qa": {"squad": {"te;st": None}}}, "qa.squad"),
        ({"train_examples": {"a b": "mine"}}, "train_examples"),
        ({"train_examples": {"squad": "x`id`"}}, "train_examples.squad"),
        ({"train_sets": {"s'q": ["squad"]}}, "train_sets"),
        ({"train_sets": {"squad": ["squad`id`"]}}, "train_sets.squad.0"),
    ],
)
def test_user_chosen_names_must_be_identifiers(patch, key):
    raw = deep_merge(copy.deepcopy(RAW), patch)
    with pytest.raises(ConfigError, match=rf"key {re.escape(key)}: .* does not match"):
        resolve(raw, SCHEMA)
