"""Registry of retrieval methods; each is a ``drpipe.methods.base.Method``."""

from __future__ import annotations

import importlib
from typing import Any

from drpipe.methods.base import Method

# name -> "module:Class"; modules are imported on demand (they import torch).
REGISTRY = {
    "dpr": "drpipe.methods.dpr:DPR",
}


def get_method(name: str, cfg: dict[str, Any] | None = None) -> Method:
    """The method called ``name``, configured with ``cfg`` (its config slice)."""
    if name not in REGISTRY:
        raise ValueError(f"unknown method {name!r}; known: {', '.join(sorted(REGISTRY))}")
    module, cls = REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), cls)(cfg or {})


__all__ = ["Method", "REGISTRY", "get_method"]
