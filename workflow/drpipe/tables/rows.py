"""Rows of a results table: which paper cell a row of ours sits beside.

Dataset and training-setting order, the protocol of a row (standard, leak-free, or an oracle
that saw the test answers), the paper's split for ours, and a lookup in a paper's transcribed
numbers (``drpipe.papers.numbers``).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from drpipe.cliutil import need

REPRODUCED = "reproduced: computed by this pipeline"
# DPR's dataset order; datasets the paper does not have follow in name order.
DATASET_ORDER = ("nq", "triviaqa", "wq", "trec", "squad")
TRAINING_ORDER = ("None", "Single", "Multi")
# DPR's SQuAD "test" set is the SQuAD v1.1 dev set (10,570 questions, DPR Table 1), so our
# squad/dev is compared with the paper's squad/test unless the config says otherwise.
DEFAULT_SPLIT_EQUIV = {"squad": {"dev": "test"}}


def dataset_key(name: str) -> tuple[int, str]:
    """Sort key: DPR's dataset order first, other datasets after in name order."""
    return (DATASET_ORDER.index(name), "") if name in DATASET_ORDER else (len(DATASET_ORDER), name)


def paper_split(dataset: str, split: str, equiv: dict[str, dict[str, str]]) -> str:
    """The paper's split that our ``split`` of ``dataset`` stands for."""
    return equiv.get(dataset, {}).get(split, split)


def lookup(numbers: pd.DataFrame, **cell: str) -> float | None:
    """The first transcribed value matching every ``column=value`` given, or None."""
    sel = pd.Series(True, index=numbers.index)
    for col, value in cell.items():
        sel &= numbers[col] == value
    hits = numbers.loc[sel, "value"]
    return None if hits.empty else float(hits.iloc[0])


def train_datasets(train_set: str | None, named: dict[str, list[str]]) -> list[str]:
    """Datasets a train set combines: a named set from config, else names joined by '+' or ','."""
    if not train_set:
        return []
    if train_set in named:
        return list(named[train_set])
    return [part for part in train_set.replace(",", "+").split("+") if part]


def paper_row(
    metric: dict, row_map: dict[str, Any], named: dict[str, list[str]]
) -> tuple[str, str]:
    """(training, paper method) for one metrics record, from the config's ``row_map``."""
    method = metric["method"]
    if method not in row_map:
        raise SystemExit(
            f"error: --cfg row_map has no entry for method '{method}' "
            f"(train_set {metric['train_set']!r}, dataset {metric['dataset']!r}); "
            f"known: {', '.join(sorted(row_map))}"
        )
    spec = row_map[method]
    label = need(spec, "method", where=f"--cfg row_map.{method}")
    training = spec.get("training")
    if training is None:
        sets = train_datasets(metric["train_set"], named)
        if not sets:
            raise SystemExit(
                f"error: --cfg row_map.{method} gives no 'training' and the metrics of "
                f"{metric['dataset']}/{metric['split']} name no train_set to derive it from"
            )
        training = "Single" if len(sets) == 1 else "Multi"
    return str(training), str(label)
