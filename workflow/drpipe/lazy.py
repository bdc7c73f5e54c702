"""Modules imported on first use. The method classes are read when the workflow plans (labels,
defaults, corpus units), long before any of them trains: importing torch there cost every
Snakemake start and every config load about a second. A method module binds ``torch`` to a
``lazy_module`` and the import happens at its first attribute, in the job that trains."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class _LazyModule(ModuleType):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__dict__["_lazy_target"] = None

    def _load(self) -> ModuleType:
        target = self.__dict__["_lazy_target"]
        if target is None:
            target = importlib.import_module(self.__name__)
            self.__dict__["_lazy_target"] = target
        return target

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._load(), attr)

    def __dir__(self) -> list[str]:
        return dir(self._load())


def lazy_module(name: str) -> ModuleType:
    """``name`` (a dotted module name), imported when an attribute of it is first read."""
    return _LazyModule(name)
