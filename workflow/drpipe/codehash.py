"""Hashes of the code a job really runs: the package's own import graph from a command's modules.

A rule's code hash covers the modules its command runs and every ``drpipe`` module they import
(at any depth, function-level imports included), the ``__init__.py`` of each package on the
way (Python runs them), and the package data those modules declare they read in a module-level
``PACKAGE_DATA = ("papers/dpr/numbers.csv", ...)`` (globs relative to the package root). Modules
imported by name at run time (the method registry) are not in the static graph: a rule that
runs a method names that method's module as one of its entry points.

The graph is read from the source with ``ast``; nothing is imported. What one file imports is
kept in a cache keyed by the module and the file's bytes (a JSON file in ``DRPIPE_CACHE``, else
the user's cache folder): parsing the package's ~130 files took about a second of every
Snakemake start, dry runs included. The hash itself is always of the files' bytes.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
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


def _scan_cache_file() -> Path:
    """Where the scans are kept: ``DRPIPE_CACHE``, else the user's cache folder."""
    base = os.environ.get("DRPIPE_CACHE") or Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "drpipe"
    )
    return Path(base) / "codehash-imports-v1.json"


# Scans by "<module> <sha1 of the file's bytes>" (the cache file, read once per process), and
# whether this process added any.
_SCANS: dict[str, list[list[str]]] | None = None
_ADDED = False
# Scans kept in the file at most (the oldest go first: each edit of a module adds one).
SCAN_CACHE_MAX = 4000


def _scans() -> dict[str, list[list[str]]]:
    global _SCANS
    if _SCANS is None:
        try:
            loaded = json.loads(_scan_cache_file().read_text())
        except (OSError, ValueError):
            loaded = None
        _SCANS = loaded if isinstance(loaded, dict) else {}
    return _SCANS


def _save_scans() -> None:
    """The scans written back if this process added any (atomically; a cache that cannot be
    written, e.g. a read-only home, only costs the next process the parsing)."""
    global _ADDED
    if not _ADDED:
        return
    scans = _scans()
    kept = dict(list(scans.items())[-SCAN_CACHE_MAX:])
    path = _scan_cache_file()
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(kept))
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
    _ADDED = False


def _scan(source: bytes, path: Path, module: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(imported drpipe modules, PACKAGE_DATA globs) of one source file's bytes, from the cache
    where a file of the same module had these bytes (so a file edited while a process runs is
    scanned again)."""
    global _ADDED
    key = f"{module} {hashlib.sha1(source).hexdigest()}"
    found = _scans().get(key)
    if not _well_formed(found):
        found = [list(part) for part in _parse_imports(source, path, module)]
        _scans()[key] = found
        _ADDED = True
    return tuple(found[0]), tuple(found[1])


def _well_formed(scan: object) -> bool:
    return (
        isinstance(scan, list)
        and len(scan) == 2
        and all(isinstance(part, list) and all(isinstance(x, str) for x in part) for part in scan)
    )


def _parse_imports(
    source: bytes, path: Path, module: str
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    tree = ast.parse(source, filename=str(path))
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
    return sorted(_sources(entries, Snapshot(root)))


# A module as read: (file, bytes, imported drpipe modules, PACKAGE_DATA globs).
Module = tuple[Path, bytes, tuple[str, ...], tuple[str, ...]]


class Snapshot:
    """The package read once, for many hashes taken at one moment (one Snakefile parse asks
    for some forty closures that share most of their files): each module's file, bytes and
    scan, each data glob's matches and data file's bytes, kept for the snapshot's life. A hash
    taken without one reads the files anew (a file edited between two hashes is seen)."""

    def __init__(self, root: Path = ROOT) -> None:
        self.root = root
        self._modules: dict[str, Module | None] = {}
        self._globs: dict[str, list[Path]] = {}
        self._names: dict[Path, bytes] = {}
        self._data: dict[Path, bytes] = {}

    def module(self, module: str) -> Module | None:
        """The module as read, or None: not a module of the package."""
        if module not in self._modules:
            path = module_file(module, self.root)
            if path is None:
                self._modules[module] = None
            else:
                source = path.read_bytes()
                self._modules[module] = (path, source, *_scan(source, path, module))
        return self._modules[module]

    def glob(self, pattern: str) -> list[Path]:
        if pattern not in self._globs:
            self._globs[pattern] = sorted(self.root.glob(pattern))
        return self._globs[pattern]

    def data(self, f: Path) -> bytes:
        """A data file's bytes."""
        if f not in self._data:
            self._data[f] = f.read_bytes()
        return self._data[f]

    def name(self, f: Path) -> bytes:
        """A file's path relative to the package root, as hashed."""
        if f not in self._names:
            self._names[f] = str(f.relative_to(self.root)).encode()
        return self._names[f]


def _sources(entries: Iterable[str], snapshot: Snapshot) -> dict[Path, bytes | None]:
    """The closure's files, each source file with the bytes it was scanned from (data files:
    None), so that hashing does not read them again."""
    todo = list(dict.fromkeys([*COMMON, *entries]))
    seen: set[str] = set()
    files: dict[Path, bytes | None] = {}
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        found = snapshot.module(module)
        if found is None:
            if module in entries:
                raise ValueError(f"code hash: {module} is not a module of {snapshot.root}")
            continue  # `from drpipe.x import function`: not a module
        path, files[path], imports, data = found
        todo += [*_parents(module), *imports]
        for pattern in data:
            matched = snapshot.glob(pattern)
            if not matched:
                raise ValueError(f"code hash: {path} declares PACKAGE_DATA {pattern!r}: no file")
            files.update(dict.fromkeys(matched))
    _save_scans()
    return files


# The dispatcher lists every subcommand module: a new subcommand (a paper's tables) must not
# rerun every job, so that list is left out of the dispatcher's bytes.
DISPATCH = ("cli.py", "MODULES")


def _hashed_bytes(name: bytes, data: bytes) -> bytes:
    if name != DISPATCH[0].encode():
        return data
    return _without_dispatch_list(data)


@cache
def _without_dispatch_list(data: bytes) -> bytes:
    lines = data.decode().splitlines(keepends=True)
    for node in ast.parse(data).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == DISPATCH[1] for t in node.targets
        ):
            del lines[node.lineno - 1 : node.end_lineno]
            break
    return "".join(lines).encode()


def code_hash(entries: Iterable[str], root: Path = ROOT, snapshot: Snapshot | None = None) -> str:
    """sha256 (16 hex digits) over the closure of ``entries``: relative paths and bytes (the
    dispatcher's list of subcommand modules excepted). With a ``snapshot`` (of ``root``), the
    files as it read them; without, as they are now."""
    snapshot = snapshot or Snapshot(root)
    h = hashlib.sha256()
    files = _sources(entries, snapshot)
    for f in sorted(files):
        data = files[f]
        name = snapshot.name(f)
        h.update(name)
        h.update(b"\0")
        h.update(_hashed_bytes(name, snapshot.data(f) if data is None else data))
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
