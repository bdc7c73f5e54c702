"""A reader's warm start on reading comprehension over SQuAD *train* paragraphs (local scales).

DPR trains its reader from BERT on tens of thousands of questions; a local scale has a few
hundred, too few for a reader that says anything (exact match near zero). Issue 19 allows a
documented local-scale deviation: first train the reader on SQuAD train paragraphs (never a
dev article), then on the retriever's results as DPR does.

The warm-start data has the shapes ``drpipe reader train`` reads, so the same trainer (loss,
checkpoint selection, resume) trains on it: questions of a seeded sample of SQuAD train
articles that the scale's corpus does not hold (so neither the training questions nor the
held-out ones that choose checkpoints and k are read here), each paragraph one passage, and a
"run" per question whose first passage is the question's own paragraph (its gold passage) and
whose others are the article's other paragraphs, in document order: the positive is the gold
paragraph, negatives come from the same article.
"""

from __future__ import annotations

import gzip
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from drpipe.corpus.passages import PASSAGE_SCHEMA
from drpipe.corpus.sources import read_squad_articles, squad_title
from drpipe.errors import InputError
from drpipe.io import atomic_path, write_json, write_parquet
from drpipe.qa.datasets import Question, write_questions
from drpipe.runs import run_table, write_run

SOURCE = "squad_train_warm_start"


@dataclass
class WarmStart:
    questions: list[Question]
    passages: list[dict[str, Any]]  # PASSAGE_SCHEMA rows
    run: dict[str, list[int]]  # qid -> pids, gold first
    gold: dict[str, int]
    counts: dict[str, int] = field(default_factory=dict)
    titles: list[str] = field(default_factory=list)


def warm_start_set(
    articles: list[dict[str, Any]],
    exclude_titles: set[str],
    n_articles: int,
    max_questions: int | None,
    seed: int,
    path: str | Path = "<squad>",
) -> WarmStart:
    """The warm-start data of ``n_articles`` articles drawn (seeded) from ``articles`` (a SQuAD
    ``data`` list) whose titles are not in ``exclude_titles``; at most ``max_questions``
    questions, drawn (seeded) from theirs. Every article left out is counted by reason."""
    eligible = [i for i, a in enumerate(articles) if squad_title(a["title"]) not in exclude_titles]
    if len(eligible) < n_articles:
        raise InputError(path, None, f"{n_articles} articles asked for the reader's warm start, "
                         f"{len(eligible)} are outside the corpus")  # fmt: skip
    chosen = sorted(random.Random(seed).sample(eligible, n_articles))
    out = WarmStart([], [], {}, {})
    pid = 0
    for ai in chosen:
        article = articles[ai]
        title = squad_title(article["title"])
        out.titles.append(title)
        first = pid
        pids = []
        for para in article["paragraphs"]:
            out.passages.append({"pid": pid, "title": title, "text": para["context"],
                                 "source": SOURCE, "doc_id": ai})  # fmt: skip
            pids.append(pid)
            pid += 1
        for pi, para in enumerate(article["paragraphs"]):
            own = first + pi
            for qa in para.get("qas", []):
                answers = list(dict.fromkeys(a["text"] for a in qa.get("answers", [])))
                if not answers:
                    raise InputError(path, f"article {ai} question {qa.get('id')!r}",
                                     "a SQuAD v1.1 train question without an answer")  # fmt: skip
                out.questions.append({
                    "qid": str(qa["id"]), "question": qa["question"], "answers": answers,
                    "match": "string", "gold_title": title, "gold_context": para["context"],
                })  # fmt: skip
                out.run[str(qa["id"])] = [own, *(p for p in pids if p != own)]
                out.gold[str(qa["id"])] = own
    n_all = len(out.questions)
    if max_questions is not None and n_all > max_questions:
        keep = set(random.Random(seed + 1).sample(range(n_all), max_questions))
        out.questions = [q for i, q in enumerate(out.questions) if i in keep]
        kept = {q["qid"] for q in out.questions}
        out.run = {q: p for q, p in out.run.items() if q in kept}
        out.gold = {q: p for q, p in out.gold.items() if q in kept}
    out.counts = {
        "articles": len(articles),
        "articles_in_corpus": len(articles) - len(eligible),
        "articles_drawn": n_articles,
        "paragraphs": len(out.passages),
        "questions_of_drawn_articles": n_all,
        "questions": len(out.questions),
        "questions_not_drawn": n_all - len(out.questions),
    }
    return out


def write_warm_start(ws: WarmStart, out: dict[str, str | Path]) -> None:
    """``out``: paths of ``questions``, ``passages``, ``run`` (Parquet), ``gold`` (biencoder
    JSON lines naming each question's paragraph, as ``read_gold`` reads) and ``report``."""
    write_questions(out["questions"], ws.questions)
    write_parquet(out["passages"], pa.Table.from_pylist(ws.passages, schema=PASSAGE_SCHEMA))
    qids = [q["qid"] for q in ws.questions]
    pids = [np.asarray(ws.run[q], dtype=np.int64) for q in qids]
    scores = [1.0 / np.arange(1, len(p) + 1, dtype=np.float64) for p in pids]
    write_run(out["run"], run_table(qids, pids, scores))
    with atomic_path(out["gold"]) as tmp, gzip.open(tmp, "wt", encoding="utf-8") as fh:
        for qid in qids:
            fh.write(json.dumps({"qid": qid, "positive_ctxs": [{"passage_id": ws.gold[qid]}]}))
            fh.write("\n")
    write_json(out["report"], {"counts": ws.counts, "articles": ws.titles, "source": SOURCE})


def corpus_titles(path: str | Path) -> set[str]:
    """Titles of a passages Parquet (the articles a warm start must not read)."""
    from drpipe.corpus.passages import iter_passages

    return {t for b in iter_passages(path, columns=["title"]) for t in b.column(0).to_pylist()}


def build_warm_start(squad: str | Path, corpus: str | Path, cfg: dict[str, Any]) -> WarmStart:
    """``cfg``: ``articles``, ``questions`` (cap, or None) and ``seed``."""
    return warm_start_set(
        read_squad_articles(squad), corpus_titles(corpus), int(cfg["articles"]),
        None if cfg.get("questions") is None else int(cfg["questions"]), int(cfg["seed"]), squad,
    )  # fmt: skip
