"""Cross-key rules of the resolved config: what a JSON schema cannot say (a name one key gives
must be configured under another). ``drpipe.config.check_consistency`` runs them at load, before
Snakemake builds the DAG; each problem names the key and its fix. A registered paper adds its
own rules in ``papers/<paper>/checks.py`` (``check_config(config) -> list[str]``)."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

# How `qa.<d>.<split>.format: auto` is told from the source's file name (the first suffix that
# ends the name wins; the plan reads the same table).
QA_FORMAT_SUFFIXES = (
    (".qa.csv", "dpr-qa-csv"),
    (".csv", "dpr-qa-csv"),
    (".jsonl", "dpr-jsonl"),
    (".qa.csv.gz", "dpr-qa-csv"),
    (".tsv", "curatedtrec-tsv"),
)


def qa_format_of(file_name: str) -> str | None:
    """The question format of a file name under `format: auto` (None: cannot tell)."""
    for suffix, fmt in QA_FORMAT_SUFFIXES:
        if file_name.endswith(suffix):
            return fmt
    return None


def table_ks() -> tuple[int, ...]:
    """The k of every top-k column the papers' own tables print."""
    from drpipe.tables.metrics import KS  # lazy: pandas

    return tuple(KS)


def eval_ks(config: dict) -> list[int]:
    """Every k a run is evaluated at: Table 2's columns (``evaluate.ks``), its MRR@k and the
    papers' own columns (their tables and claims read those whatever Table 2 shows)."""
    ev = config["evaluate"]
    mrr = [ev["mrr_k"]] if ev.get("mrr_k") else []
    return sorted({*ev["ks"], *mrr, *table_ks()})


def source_refs(config: dict) -> Iterator[tuple[str, str]]:
    """(key, source name) of every key that names a source."""
    corpus = config.get("corpus") or {}
    if corpus.get("passages_tsv"):
        yield "corpus.passages_tsv", corpus["passages_tsv"]
    else:
        for i, doc in enumerate(corpus.get("documents") or []):
            yield f"corpus.documents[{i}].source", doc["source"]
    for dataset, splits in (config.get("qa") or {}).items():
        for split, entry in (splits or {}).items():
            if entry:
                yield f"qa.{dataset}.{split}.source", entry["source"]
    for dataset, how in (config.get("train_examples") or {}).items():
        if how != "mine":
            yield f"train_examples.{dataset}", how
    for dataset, name in (config.get("dev_examples") or {}).items():
        yield f"dev_examples.{dataset}", name
    for ts, entry in (config.get("released") or {}).items():
        if entry.get("source"):
            yield f"released.{ts}.source", entry["source"]
    warm = (config.get("reader") or {}).get("warm_start")
    if warm:
        yield "reader.warm_start.source", warm["source"]
    standins = config.get("standins") or {}
    for group in ("sources", "models"):
        for name, spec in (standins.get(group) or {}).items():
            for role, refs in (spec.get("inputs") or {}).items():
                for ref in refs:
                    if not ref.startswith("model:"):
                        yield f"standins.{group}.{name}.inputs.{role}", ref


def _walk(node: Any, path: str) -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield f"{path}.{key}", value
            yield from _walk(value, f"{path}.{key}")


def train_set_refs(config: dict) -> Iterator[tuple[str, str]]:
    """(key, train set) of every key that names a train set: ``tables.single.<d>``, and under
    ``tables`` every ``train_set``, ``train_sets`` and ``multi``; ``reader.train_run``."""
    tables = config.get("tables") or {}
    for dataset, ts in (tables.get("single") or {}).items():
        if ts is not None:
            yield f"tables.single.{dataset}", ts
    for key, value in _walk(tables, "tables"):
        last = key.rsplit(".", 1)[1]
        if last in ("train_set", "multi") and isinstance(value, str):
            yield key, value
        elif last == "train_sets" and isinstance(value, list):
            for i, ts in enumerate(value):
                yield f"{key}[{i}]", ts
    run = (config.get("reader") or {}).get("train_run") or {}
    if run.get("train_set") not in (None, "none"):
        yield "reader.train_run.train_set", run["train_set"]


def multi_train_set(config: dict, method: str) -> str | None:
    """The train set of a method's Multi rows (``tables.<paper>.multi``, else ``tables.multi``)."""
    from drpipe.papers import paper_of_run

    key = paper_of_run(method)
    own = (config["tables"].get(key) or {}).get("multi") if key else None
    return own or config["tables"].get("multi")


def table_train_sets(config: dict, hybrid_only: bool = False) -> list[str]:
    """Train sets with Table 2 rows (Single: ``tables.single`` of its datasets; Multi: each
    method's Multi set); ``hybrid_only``: those of methods with a BM25 hybrid row."""
    from drpipe.methods import method_class

    tables = config["tables"]
    out: list[str] = []
    for method in tables.get("methods") or []:
        if hybrid_only and not method_class(method).hybrid:
            continue
        out += [tables["single"].get(d) for d in tables["datasets"]]
        out.append(multi_train_set(config, method))
    return [ts for ts in dict.fromkeys(out) if ts in config["train_sets"]]


def _split_configured(config: dict, dataset: str, split: str) -> bool:
    return bool((config["qa"].get(dataset) or {}).get(split))


def problems(config: dict) -> list[str]:
    """Every cross-key problem of ``config`` (one line each: the key, what is wrong, the fix)."""
    out: list[str] = []
    ks = eval_ks(config)
    for key, depth in (("retrieve.top_k", config["retrieve"]["top_k"]),
                       ("bm25.hits", config["bm25"]["hits"])):  # fmt: skip
        if max(ks) > depth:
            out.append(
                f"key evaluate.ks: runs are evaluated at top-{ks} (evaluate.ks, evaluate.mrr_k "
                f"and the papers' top-{'/'.join(map(str, table_ks()))}); top-{max(ks)} is "
                f"deeper than {key} = {depth} (a run that deep does not exist)"
            )
    sources = config.get("sources") or {}
    for key, name in source_refs(config):
        if name not in sources:
            out.append(
                f"key {key}: '{name}' is not a configured source; add sources.{name} "
                "(config/sources.yaml) or name one of the sources there"
            )
    for name in (config.get("standins") or {}).get("sources") or {}:
        if name not in sources:
            out.append(f"key standins.sources.{name}: '{name}' is not a configured source")
    for dataset, splits in config["qa"].items():
        modes = {e.get("match", "string") for e in (splits or {}).values() if e}
        if len(modes) > 1:
            out.append(
                f"key qa.{dataset}: its splits match answers differently ({sorted(modes)}); "
                "give every split the same `match`"
            )
        for split, entry in (splits or {}).items():
            if not entry or entry.get("format", "auto") != "auto":
                continue
            src = sources.get(entry["source"]) or {}
            names = [str(src[k]).rsplit("/", 1)[-1] for k in ("mirror", "url") if src.get(k)]
            for file_name in names:
                if qa_format_of(file_name) is None:
                    out.append(
                        f"key qa.{dataset}.{split}.format: 'auto' cannot tell the format of "
                        f"{file_name} (source {entry['source']}); set the format"
                    )
    train_sets = config["train_sets"]
    for key, ts in train_set_refs(config):
        if ts not in train_sets:
            out.append(
                f"key {key}: '{ts}' is not a train set; add train_sets.{ts} (its datasets) "
                f"or name one of {sorted(train_sets)}"
            )
    tables = config["tables"]
    for dataset in tables["datasets"]:
        if not _split_configured(config, dataset, tables["split"]):
            out.append(
                f"key tables.datasets: '{dataset}' has no qa.{dataset}.{tables['split']} "
                f"(tables.split); configure that split or drop the dataset"
            )
    for ts in table_train_sets(config):
        for dataset in train_sets[ts]:
            how = config["train_examples"].get(dataset, "mine")
            if how == "mine" and not _split_configured(config, dataset, "train"):
                out.append(
                    f"key train_sets.{ts}: dataset '{dataset}' has no training examples: "
                    f"configure qa.{dataset}.train (mined) or train_examples.{dataset} (a "
                    "released file)"
                )
    hybrid = config["hybrid"]
    if hybrid.get("enabled", True) and hybrid.get("lambda") == "tune":
        fix = "set hybrid.lambda to a number (DPR: 1.1, chosen on its dev set)"
        for ts in table_train_sets(config, hybrid_only=True):
            datasets = train_sets[ts]
            if all(config["dev_examples"].get(d) for d in datasets):
                out.append(
                    f"key hybrid.lambda: hybrid.lambda 'tune' tunes on the training questions "
                    f"a model held out for validation, but train set '{ts}' validates on "
                    f"dev_examples files and holds none out; {fix}"
                )
                continue
            released = [d for d in datasets if config["train_examples"].get(d, "mine") != "mine"]
            if released:
                out.append(
                    f"key hybrid.lambda: hybrid.lambda 'tune' tunes on the held-out questions of "
                    f"train set '{ts}', but train_examples.{released[0]} is a released file "
                    f"whose questions are no question table (qa.{released[0]}.train); {fix}"
                )
    reader = config.get("reader") or {}
    for dataset, source in (reader.get("multi_finetune") or {}).items():
        if source == dataset:
            out.append(
                f"key reader.multi_finetune.{dataset}: names the dataset itself; name the "
                "dataset whose reader it fine-tunes (DPR: nq) or drop the entry"
            )
    warm = reader.get("warm_start")
    if warm and not reader.get("released"):
        for doc in (config.get("corpus") or {}).get("documents") or []:
            if doc.get("source") == warm["source"] and doc.get("sample_articles") is None:
                out.append(
                    f"key reader.warm_start: reads articles of '{warm['source']}' outside the "
                    f"corpus, but corpus.documents '{doc['name']}' takes all of them; set "
                    "reader.warm_start: null (or sample that source's articles)"
                )
    from drpipe.encoder_settings import problems as encoder_problems
    from drpipe.papers import papers

    out += encoder_problems(config)
    for p in papers():
        if p.file("checks.py"):
            out += importlib.import_module(f"{p.module}.checks").check_config(config)
    return out
