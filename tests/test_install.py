"""`make install`'s lock (requirements/lock-cpu.txt, made by `make lock`): it pins every package
pyproject.toml names, at a version pyproject.toml allows, and leaves torch to the Makefile.
Also: the workflow's code needs nothing from the `test` extra. Files only: milliseconds."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "requirements" / "lock-cpu.txt"
CUDA = REPO / "requirements" / "torch-cuda.txt"
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
# Where the lock is resolved for (`make lock`): Python 3.11 on Linux x86_64.
TARGET = {"python_version": "3.11", "python_full_version": "3.11.0", "sys_platform": "linux",
          "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix"}  # fmt: skip
# The import names of the `test` extra's packages (a new test dependency is named here).
TEST_IMPORTS = {
    "pytest": ["pytest", "_pytest"],
    "pytest-benchmark": ["pytest_benchmark"],
    "hypothesis": ["hypothesis"],
    "ranx": ["ranx"],
    "pytrec-eval-terrier": ["pytrec_eval"],
    "ruff": ["ruff"],
    "snakefmt": ["snakefmt"],
    "sentence-transformers": ["sentence_transformers"],
}


def _names(path: Path) -> list[str]:
    """The requirement lines of a requirements file, without comments and options."""
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("-")]


def _pins() -> dict[str, str]:
    pins = {}
    for line in _names(LOCK):
        name, sep, version = line.partition("==")
        assert sep and version and ";" not in line, f"not an exact pin: {line}"
        pins[canonicalize_name(name)] = version.strip()
    return pins


def _makefile_extras() -> list[str]:
    match = re.search(r"^EXTRA_NAMES = (.+)$", (REPO / "Makefile").read_text(), re.M)
    assert match, "Makefile: EXTRA_NAMES"
    return match.group(1).split()


def test_the_makefile_installs_extras_that_pyproject_defines():
    extras = _makefile_extras()
    assert set(extras) <= set(PROJECT["optional-dependencies"]), extras
    assert "test" in extras and "workflow" in extras


def test_the_lock_pins_every_dependency_pyproject_names_at_an_allowed_version():
    pins = _pins()
    named = [*PROJECT["dependencies"]]
    for extra in _makefile_extras():
        named += PROJECT["optional-dependencies"][extra]
    problems = []
    for text in named:
        req = Requirement(text)
        if req.marker and not req.marker.evaluate(TARGET):
            continue
        pin = pins.get(canonicalize_name(req.name))
        if pin is None:
            problems.append(f"{req.name}: not in the lock (run make lock)")
        elif not req.specifier.contains(pin, prereleases=True):
            problems.append(f"{req.name}=={pin} is outside {text!r} (run make lock)")
    assert not problems, problems


def test_the_lock_leaves_torch_and_its_cuda_packages_to_the_makefile():
    pins = _pins()
    left_out = {canonicalize_name(n) for n in _names(CUDA)} | {"torch"}
    assert not left_out & pins.keys(), sorted(left_out & pins.keys())
    assert "drpipe" not in pins  # installed after the lock, with --no-deps
    # torch's other dependencies are pinned (its CPU build needs them)
    assert {"sympy", "networkx", "filelock", "jinja2", "fsspec"} <= pins.keys()


def test_the_workflow_imports_nothing_from_the_test_extra():
    """`make run` needs only the run extras (bm25, mini, workflow)."""
    test_extra = {canonicalize_name(Requirement(r).name) for r in
                  PROJECT["optional-dependencies"]["test"]}  # fmt: skip
    assert test_extra == {canonicalize_name(n) for n in TEST_IMPORTS}, "update TEST_IMPORTS"
    forbidden = {m for mods in TEST_IMPORTS.values() for m in mods}
    found = []
    for path in sorted((REPO / "workflow").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                mods = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                mods = [node.module]
            else:
                continue
            found += [f"{path.relative_to(REPO)}: {m}" for m in mods
                      if m.split(".")[0] in forbidden]  # fmt: skip
    assert not found, found
