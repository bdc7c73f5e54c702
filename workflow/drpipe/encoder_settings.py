"""How an encoder turns text into a vector, as settings (no torch): pooling, normalisation,
the query and passage prefixes and how a passage's title joins its text; ``pooling: auto``
read from a sentence-transformers model's own files; and the config checks of these settings
(``problems``: a method that cannot apply one is refused at config load).

Settings (``encoder:`` or a method's block; a ``zero_shot`` entry; stored in a model
directory's ``drpipe_encoder.json``, which a model directory saved before them lacks: it loads
with the defaults, today's behaviour):

- ``pooling``: ``cls`` | ``mean`` | ``max`` | ``auto`` (the model's sentence-transformers
  ``modules.json`` and ``1_Pooling/config.json``; stored as the mode it resolved to)
- ``normalize``: unit-length vectors (null: as the model's sentence-transformers modules say
  with ``pooling: auto`` -- a ``Normalize`` module -- else false)
- ``query_prefix`` / ``passage_prefix``: text put before every question / passage (e5:
  ``"query: "`` / ``"passage: "``; bge: its query instruction)
- ``title``: ``pair`` (DPR: the pair ``[CLS] title [SEP] text [SEP]``) | ``concat`` (one text,
  ``title + title_sep + text``, as sentence-transformers models are usually fed) | ``none``
  (the text alone)
- ``title_sep``: the string between title and text with ``title: concat`` (default ``". "``)
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

PACKAGED_PREFIX = "packaged:"
POOLINGS = ("cls", "mean", "max")  # what a model directory stores; config also takes "auto"
TITLES = ("pair", "concat", "none")
# The text settings and their defaults (today's behaviour: DPR's pair, no prefixes).
TEXT_DEFAULTS: dict[str, Any] = {
    "query_prefix": "",
    "passage_prefix": "",
    "title": "pair",
    "title_sep": ". ",
}
# Every setting this module adds to a model directory's meta, with the value a model directory
# saved before them means.
META_DEFAULTS: dict[str, Any] = {"normalize": False, **TEXT_DEFAULTS}
# The keys an encoder's config block may set beyond init/pooling/tied/max lengths.
OPTION_KEYS = ("normalize", *TEXT_DEFAULTS)

# sentence-transformers' Pooling config -> our pooling (other modes have no equivalent here).
_ST_MODES = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_sqrt_len_tokens": None,
    "pooling_mode_weightedmean_tokens": None,
    "pooling_mode_lasttoken": None,
}
_ST_TYPE = "sentence_transformers.models."


def resolve_init(name: str) -> str:
    """``"packaged:PKG"`` -> ``<site-packages>/PKG/model``; anything else (HF id, path) as given."""
    if not name.startswith(PACKAGED_PREFIX):
        return name
    pkg = name[len(PACKAGED_PREFIX) :]
    spec = importlib.util.find_spec(pkg)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"encoder init {name!r}: Python package {pkg!r} is not installed")
    model_dir = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (model_dir / "config.json").is_file():
        raise FileNotFoundError(
            f"encoder init {name!r}: no model/config.json in {model_dir.parent}"
        )
    return str(model_dir)


def _read_model_file(path: str, name: str) -> dict | list | None:
    """A JSON file of a model directory or hub id (None when it has none)."""
    local = Path(path)
    if local.is_dir():
        f = local / name
        return json.loads(f.read_text()) if f.is_file() else None
    from transformers.utils import cached_file  # lazy: a hub id (cached or online)

    found = cached_file(path, name, _raise_exceptions_for_missing_entries=False)
    return json.loads(Path(found).read_text()) if found else None


# Training files of a sentence-transformers model (its data_config.json) that hold the QA
# datasets this workflow evaluates or trains on, or questions written from Wikipedia.
QA_PRETRAINING = {
    "squad_pairs": "SQuAD train",
    "NQ-train_pairs": "NQ train",
    "TriviaQA_pairs": "TriviaQA",
    "PAQ_pairs": "PAQ (questions generated from Wikipedia)",
}


def qa_pretraining(init: str) -> list[str]:
    """What a local model was trained on that overlaps the papers' QA data, from its
    ``data_config.json`` ("SQuAD train (87,599 pairs)", ...); [] for a model without one or a
    hub id (the plan reads no network). [] is no evidence of a clean model: a fine-tune of
    all-MiniLM-L6-v2 usually drops data_config.json (docs/encoders.md)."""
    try:
        path = resolve_init(init)
    except FileNotFoundError:
        return []
    if not Path(path).is_dir():
        return []
    data = _read_model_file(path, "data_config.json")
    out = []
    for entry in data if isinstance(data, list) else []:
        stem = str(entry.get("name", "")).removesuffix(".jsonl.gz")
        if stem in QA_PRETRAINING:
            out.append(f"{QA_PRETRAINING[stem]} ({int(entry.get('lines', 0)):,} pairs)")
    return out


def st_settings(path: str) -> dict[str, Any]:
    """``{"pooling", "normalize"}`` as the sentence-transformers model at ``path`` (a directory
    or hub id) configures them: the Pooling module's mode and whether a Normalize module follows.
    ValueError naming the file when it has none or a module drpipe cannot reproduce (a Dense
    projection, weighted-mean or last-token pooling)."""
    modules = _read_model_file(path, "modules.json")
    if not modules:
        raise ValueError(
            f"pooling 'auto' reads a sentence-transformers model's modules.json; {path} has "
            "none: set pooling to cls, mean or max"
        )
    pooling, normalize = None, False
    for module in modules:
        kind = str(module.get("type", "")).removeprefix(_ST_TYPE)
        if kind == "Transformer":
            continue
        if kind == "Normalize":
            normalize = True
        elif kind == "Pooling":
            cfg = _read_model_file(path, f"{module['path']}/config.json".lstrip("/")) or {}
            modes = [k for k, v in cfg.items() if k in _ST_MODES and v]
            if len(modes) != 1 or _ST_MODES[modes[0]] is None:
                raise ValueError(
                    f"{path}: sentence-transformers pooling {modes or cfg} has no drpipe "
                    f"equivalent (one of {sorted(k for k, v in _ST_MODES.items() if v)})"
                )
            pooling = _ST_MODES[modes[0]]
        else:
            raise ValueError(
                f"{path}: sentence-transformers module {module.get('type')!r} (modules.json) "
                "is not reproduced by drpipe (Transformer, Pooling and Normalize are)"
            )
    if pooling is None:
        raise ValueError(f"{path}: modules.json names no Pooling module")
    return {"pooling": pooling, "normalize": normalize}


def resolve_pooling(path: str, pooling: str, normalize: bool | None) -> tuple[str, bool]:
    """(pooling, normalize) to build with: ``auto`` from the model's sentence-transformers
    files; ``normalize`` None follows them with ``auto`` and is false otherwise."""
    if pooling == "auto":
        st = st_settings(path)
        return st["pooling"], st["normalize"] if normalize is None else bool(normalize)
    if pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {(*POOLINGS, 'auto')}, not {pooling!r}")
    return pooling, bool(normalize)


def describe(settings: dict[str, Any]) -> str:
    """A settings dict in words (Table 2's notes): pooling, normalisation, prefixes, title."""
    pooling = settings.get("pooling", "cls")
    norm = settings.get("normalize")
    if pooling == "auto":
        how = "pooling and normalisation as its sentence-transformers config says"
        how += "" if norm is None else f" (normalize forced {'on' if norm else 'off'})"
    else:
        how = f"{pooling} pooling, " + ("normalised" if norm else "not normalised")
        how += " (its sentence-transformers config)" if settings.get("from_st") else ""
    parts = [how]
    for key, what in (("query_prefix", "query prefix"), ("passage_prefix", "passage prefix")):
        if settings.get(key):
            parts.append(f"{what} {settings[key]!r}")
    title = settings.get("title", "pair")
    if title == "pair":
        parts.append("title and text as a pair ([CLS] title [SEP] text [SEP])")
    elif title == "concat":
        sep = settings.get("title_sep", TEXT_DEFAULTS["title_sep"])
        parts.append(f"passages as one text title + {sep!r} + text")
    else:
        parts.append("text without title")
    return ", ".join(parts)


def _sentence_problems(cfg: dict[str, Any]) -> list[str]:
    """The settings of a run's cfg that a sentence-vector method (DCSR) cannot apply."""
    bad = []
    if cfg.get("passage_prefix"):
        bad.append(f"passage_prefix {cfg['passage_prefix']!r} (use '')")
    if cfg.get("title", "pair") != "pair":
        bad.append(f"title {cfg['title']!r} (use pair)")
    if cfg.get("normalize"):
        bad.append("normalize true (use false)")
    elif cfg.get("pooling") == "auto" and cfg.get("normalize") is None:
        bad.append("pooling auto with normalize null (a Normalize module would apply: set false)")
    return bad


def problems(config: dict) -> list[str]:
    """Config problems of the encoder settings: a method that reads sentence vectors at its
    markers (DCSR) cannot take passage prefixes, a concatenated or dropped title or normalised
    vectors; zero-shot entries need distinct names."""
    from drpipe.config import method_config  # lazy: config imports config_rules
    from drpipe.methods import method_class, method_names

    out: list[str] = []
    for name in method_names():
        if method_class(name).corpus_units != "sentences":
            continue
        variants = (config["methods"].get(name) or {}).get("variants") or {}
        base_bad: list[str] = []
        for run in (name, *(f"{name}.{v}" for v in variants)):
            bad = _sentence_problems(method_config(config, run))
            if run == name:
                base_bad = bad
            elif bad == base_bad:
                continue  # said once, of the method
            if bad:
                where = f"methods.{name}" + (
                    f".variants.{run.split('.', 1)[1]}" if run != name else ""
                )
                out.append(
                    f"key {where} (or the encoder block it inherits): {run} reads its sentence "
                    f"vectors at markers in the (title, text) pair, so it cannot take "
                    f"{'; '.join(bad)}; set that in methods.{name} to override the encoder block"
                )
    names = [e["name"] for e in config.get("zero_shot") or []]
    for dup in sorted({n for n in names if names.count(n) > 1}):
        out.append(f"key zero_shot: two entries are named {dup!r}; give each a distinct name")
    return out
