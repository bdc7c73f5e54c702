"""Errors that tell a user which file and which record is wrong."""

from __future__ import annotations

from pathlib import Path


class InputError(ValueError):
    """Bad input data: names the file, the record (line, row, page, ...) and the problem."""

    def __init__(self, path: str | Path, record: str | int | None, problem: str):
        self.path = str(path)
        self.record = record
        self.problem = problem
        where = f"{self.path}" if record is None else f"{self.path}, {record}"
        super().__init__(f"{where}: {problem}")


class ConfigError(ValueError):
    """A config the workflow cannot run: names the key and what to set instead."""
