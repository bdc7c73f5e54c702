"""Registry of retrieval methods, built from the module names of this package.

A method is one module ``drpipe/methods/<name>.py`` whose ``METHOD`` is a
``drpipe.methods.base.Method`` subclass with ``name == <name>``. Nothing else registers it: the
workflow's wildcards, table rows and config schema are derived from this registry, and adding a
module changes no file that another method's jobs hash.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from pathlib import Path
from typing import Any

from drpipe.methods.base import Method

NOT_METHODS = {"base"}  # modules of this package that are not methods


def method_names() -> list[str]:
    """Names of the registered methods, sorted."""
    here = [str(Path(__file__).parent)]
    return sorted(
        m.name
        for m in pkgutil.iter_modules(here)
        if not m.ispkg and m.name not in NOT_METHODS and not m.name.startswith("_")
    )


def method_module(name: str) -> str:
    """Dotted module name of method ``name`` (for code hashes)."""
    _check(name)
    return f"drpipe.methods.{name}"


def _check(name: str) -> None:
    if name not in method_names():
        raise ValueError(f"unknown method {name!r}; known: {', '.join(method_names())}")


@cache
def method_class(name: str) -> type[Method]:
    _check(name)
    module = importlib.import_module(method_module(name))
    cls = getattr(module, "METHOD", None)
    if not (isinstance(cls, type) and issubclass(cls, Method)):
        raise TypeError(f"drpipe/methods/{name}.py must set METHOD to a Method subclass")
    if cls.name != name or not cls.label or cls.corpus_units not in ("passages", "sentences"):
        raise TypeError(
            f"{cls.__name__}: name must be {name!r}, label set, corpus_units passages|sentences"
        )
    return cls


def get_method(name: str, cfg: dict[str, Any] | None = None) -> Method:
    """The method called ``name``, configured with ``cfg`` (it reads its own keys)."""
    return method_class(name)(cfg or {})


__all__ = ["Method", "get_method", "method_class", "method_module", "method_names"]
