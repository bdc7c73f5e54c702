"""Hashes of the code a job really runs: the package's own import graph from a command's modules.

A rule's code hash covers the modules its command runs and every ``drpipe`` module they import
(at any depth, function-level imports included), the ``__init__.py`` of each package on the
way (Python runs them), and the package data those modules declare they read in a module-level
``PACKAGE_DATA = ("papers/dpr/numbers.csv", ...)`` (globs relative to the package root). Modules
imported by name at run time (the method registry) are not in the static graph: a rule that
runs a method names that method's module as one of its entry points.

The graph is read from the source with ``ast``; nothing is imported.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterable
from functools import cache
from pathlib import Path

PACKAGE = "drpipe"
ROOT = Path(__file__).resolve().parent
# Every command runs through these (argument parsing, errors, I/O helpers).
COMMON = ("drpipe.cli", "drpipe.cliutil", "drpipe.errors", "drpipe.io")


def module_file(module: str, root: Path = ROOT) -> Path | None:
    """Source file of a ``drpipe`` module or package, or None if it is not one."""
    parts = module.split(".")
    if parts[0] != PACKAGE:
        return None
    base = root.joinpath(*parts[1:])
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    return None


def _parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _resolve_from(node: ast.ImportFrom, module: str, is_pkg: bool) -> str | None:
    if node.level == 0:
        return node.module
    base = module.split(".") if is_pkg else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


@cache
def _scan(path: Path, module: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(imported drpipe modules, PACKAGE_DATA globs) of one source file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_pkg = path.name == "__init__.py"
    found: list[str] = []
    data: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve_from(node, module, is_pkg)
            if not base:
                continue
            found.append(base)
            # `from drpipe.qa import matching` imports a module; `from x import func` does not.
            found += [f"{base}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "PACKAGE_DATA" for t in node.targets
        ):
            data += list(ast.literal_eval(node.value))
    return tuple(m for m in found if m.split(".")[0] == PACKAGE), tuple(data)


def closure(entries: Iterable[str], root: Path = ROOT) -> list[Path]:
    """Source and data files of ``entries`` (dotted module names) and all they import."""
    todo = list(dict.fromkeys([*COMMON, *entries]))
    seen: set[str] = set()
    files: set[Path] = set()
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        path = module_file(module, root)
        if path is None:
            if module in entries:
                raise ValueError(f"code hash: {module} is not a module of {root}")
            continue  # `from drpipe.x import function`: not a module
        files.add(path)
        imports, data = _scan(path, module)
        todo += [*_parents(module), *imports]
        for pattern in data:
            matched = sorted(root.glob(pattern))
            if not matched:
                raise ValueError(f"code hash: {path} declares PACKAGE_DATA {pattern!r}: no file")
            files.update(matched)
    return sorted(files)


# The dispatcher lists every subcommand module: a new subcommand (a paper's tables) must not
# rerun every job, so that list is left out of the dispatcher's bytes.
DISPATCH = ("cli.py", "MODULES")


def _hashed_bytes(f: Path, root: Path) -> bytes:
    data = f.read_bytes()
    if str(f.relative_to(root)) != DISPATCH[0]:
        return data
    lines = data.decode().splitlines(keepends=True)
    for node in ast.parse(data).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == DISPATCH[1] for t in node.targets
        ):
            del lines[node.lineno - 1 : node.end_lineno]
            break
    return "".join(lines).encode()


def code_hash(entries: Iterable[str], root: Path = ROOT) -> str:
    """sha256 (16 hex digits) over the closure of ``entries``: relative paths and bytes (the
    dispatcher's list of subcommand modules excepted)."""
    h = hashlib.sha256()
    for f in closure(entries, root):
        h.update(str(f.relative_to(root)).encode())
        h.update(b"\0")
        h.update(_hashed_bytes(f, root))
    return h.hexdigest()[:16]


def tree_hash(root: Path = ROOT) -> str:
    """sha256 (16 hex digits) of every source and data file of the package (provenance)."""
    h = hashlib.sha256()
    for f in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".csv", ".json")):
        if "__pycache__" in f.parts:
            continue
        h.update(str(f.relative_to(root)).encode())
        h.update(b"\0")
        h.update(f.read_bytes())
    return h.hexdigest()[:16]
