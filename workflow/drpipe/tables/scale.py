"""What a table knows of its scale: the name it prints and the overlay keys that decide what
it shows (``tables.paper_diff``, ``tables.scale_note``). Light (no pandas): the planner puts
``scale_cfg`` into each table's ``--cfg``; the tables read it back with ``scale_of``."""

from __future__ import annotations

from typing import Any

# What each row says about the scale (config tables.scale_note): a small corpus (no
# reproduction gap), stand-in inputs (the rehearsal: numbers mean nothing), or nothing.
SCALE_NOTES = ("small", "standin", None)


class Scale(str):
    """A scale's name (what the tables print) with what its tables show, from its config:
    ``paper_diff`` (tables.paper_diff: ours - paper and its tolerance, else ranks) and ``note``
    (tables.scale_note). A plain name is a scale of the defaults (ranks, the small-scale note):
    a scale's behaviour comes from its overlay's keys, never from its name."""

    paper_diff: bool
    note: str | None

    def __new__(cls, name: str, paper_diff: bool = False, note: str | None = "small") -> Scale:
        if note not in SCALE_NOTES:
            raise ValueError(f"scale note {note!r} is not one of {SCALE_NOTES}")
        obj = super().__new__(cls, name)
        obj.paper_diff, obj.note = bool(paper_diff), note
        return obj

    def __reduce__(self):  # pickles (and copies) with its keys
        return (Scale, (str(self), self.paper_diff, self.note))


def as_scale(scale: str) -> Scale:
    return scale if isinstance(scale, Scale) else Scale(scale)


def scale_cfg(config: dict) -> dict[str, Any]:
    """What a table's ``--cfg`` carries about the scale, from the resolved config: its name
    and its ``tables.paper_diff`` / ``tables.scale_note`` where they differ from the defaults
    (so a table of a default-like scale keeps its params; ``scale_of`` reads them back)."""
    tables = config["tables"]
    out: dict[str, Any] = {"scale": config["scale"]}
    if tables.get("paper_diff", False):
        out["paper_diff"] = True
    if tables.get("scale_note", "small") != "small":
        out["scale_note"] = tables.get("scale_note")
    return out


def scale_of(cfg: dict) -> Scale:
    """The scale of a table's ``--cfg`` (``scale_cfg``'s keys; absent: the defaults')."""
    from drpipe.cliutil import need

    return Scale(need(cfg, "scale"), cfg.get("paper_diff", False), cfg.get("scale_note", "small"))
