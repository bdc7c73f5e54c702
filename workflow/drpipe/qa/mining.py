"""Training examples for DPR-style retrievers: positives, BM25 hard negatives, random negatives.

Over 500 lines: one job, mining, with the DPR biencoder records it writes and checks.

As in DPR (Karpukhin et al., 2020, sections 3.2, 4.2 and 5.2):

- positive: for questions that come with a gold context (SQuAD, NQ), the passage of our pool
  that corresponds to it ("match and replace each gold passage with the corresponding passage
  in the candidate pool"): among passages with the gold title, the one whose text aligns
  best with the gold context *and* has an answer inside the aligned region. A question whose
  gold context matches no passage is discarded, as DPR did. Questions without a gold context
  (TREC, WebQuestions, TriviaQA), or every question with ``positives: bm25``, take the
  highest-ranked BM25 passage that contains an answer; none in the top ``depth`` -> discarded.
- hard negatives: the top BM25 passages (within ``depth``) that contain no answer.
- random negatives: a seeded sample of corpus passages that contain no answer.
- gold negatives (other questions' positives) are formed by the batch at training time.

The corpus is streamed twice (answer checks, then the chosen passages' texts); memory grows
with questions x depth, never with the corpus. Output records follow DPR's biencoder JSON.
"""

from __future__ import annotations

import json
import logging
import re
import unicodedata
import zlib
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from drpipe.corpus.passages import iter_passages, num_passages
from drpipe.errors import InputError
from drpipe.io import (
    atomic_path,
    input_head,
    iter_input_lines,
    load_input_json,
    open_text,
    progress,
)
from drpipe.qa.datasets import read_questions
from drpipe.qa.matching import AnswerMatcher, has_answer
from drpipe.runs import read_run, read_run_units
from drpipe.units import unit_sentence

log = logging.getLogger(__name__)

POSITIVE_MODES = ("gold", "bm25")
DISCARD_REASONS = ("no_answers", "gold_not_matched", "no_bm25_hits", "no_answer_in_top_depth")
_UNKNOWN = 255  # answer check not done yet (hits arrays hold 0/1 otherwise)
_EDGE_PUNCT = re.compile(r"^\W+|\W+$")


@dataclass(frozen=True)
class MiningConfig:
    positives: str = "gold"
    depth: int = 100
    hard_negatives: int = 30
    random_negatives: int = 30
    seed: int = 13
    # DPR discards questions whose gold context matches no passage; true keeps them with a
    # BM25 positive instead.
    gold_fallback_bm25: bool = False
    # Words of the gold context that must align with a passage for it to count as the match.
    gold_min_overlap: int = 8
    dataset: str | None = None

    @classmethod
    def from_cfg(cls, cfg: dict[str, Any]) -> MiningConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(cfg) - known)
        if unknown:
            raise ValueError(f"unknown mining config key(s) {unknown}; known: {sorted(known)}")
        conf = cls(**cfg)
        if conf.positives not in POSITIVE_MODES:
            raise ValueError(f"positives must be one of {POSITIVE_MODES}, not {conf.positives!r}")
        for name in ("depth", "hard_negatives", "random_negatives", "gold_min_overlap"):
            if int(getattr(conf, name)) < 0:
                raise ValueError(f"{name} must be >= 0")
        return conf


@dataclass
class _Question:
    qid: str
    question: str
    answers: list[str]
    match: str
    gold_title: str | None
    gold_context: str | None
    ranking: list[tuple[int, float]]  # (pid, score) in rank order, top `depth`
    hits: np.ndarray  # uint8 per ranking entry: 1 answer, 0 none, _UNKNOWN not checked
    gold: tuple[int, int] | None = None  # (overlap, pid) of the best gold match so far


# --------------------------------------------------------------------------- inputs


# --------------------------------------------------------------------------- gold matching


def norm_title(title: str | None) -> str:
    """Titles compare after NFC, "_" -> " ", whitespace collapsed and case folded."""
    return " ".join(unicodedata.normalize("NFC", title or "").replace("_", " ").split()).casefold()


@lru_cache(maxsize=1 << 16)
def _word_keys(text: str) -> tuple[str, ...]:
    """``text.split()`` words, NFC, case folded, edge punctuation stripped (cached)."""
    norm = unicodedata.normalize
    return tuple(_EDGE_PUNCT.sub("", norm("NFC", w).casefold()) for w in text.split())


@lru_cache(maxsize=1 << 14)
def _gold_ngrams(gold_context: str, n: int) -> frozenset[tuple[str, ...]]:
    keys = _word_keys(gold_context)
    return frozenset(keys[i : i + n] for i in range(len(keys) - n + 1))


def align_gold(passage: str, gold_context: str, min_overlap: int = 8) -> tuple[int, str] | None:
    """Align a passage with a gold context: which passage words lie in shared word 3-grams.

    Returns (number of covered passage words, the passage text from the first to the last
    covered word) or None when fewer than ``min(min_overlap, len(gold words))`` are covered.
    Requiring 3-grams keeps stray common words ("of the") from counting as overlap.
    """
    pw = passage.split()
    pk = _word_keys(passage)
    glen = len(_word_keys(gold_context))
    if not pw or not glen:
        return None
    n = min(3, glen)
    grams = _gold_ngrams(gold_context, n)
    covered = bytearray(len(pk))
    for i in range(len(pk) - n + 1):
        if pk[i : i + n] in grams:
            covered[i : i + n] = b"\x01" * n
    overlap = covered.count(1)
    if overlap == 0 or overlap < min(min_overlap, glen):
        return None
    lo, hi = covered.find(1), covered.rfind(1) + 1
    return overlap, " ".join(pw[lo:hi])


# --------------------------------------------------------------------------- mining


def _scan_answers(
    passages: str | Path, questions: list[_Question], use_gold: bool, min_overlap: int
) -> None:
    """Pass 1 over the corpus: answer checks for every run entry, best gold match per question."""
    wanted: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for qi, q in enumerate(questions):
        for r, (pid, _score) in enumerate(q.ranking):
            wanted[pid].append((qi, r))
    by_title: dict[str, list[int]] = defaultdict(list)
    if use_gold:
        for qi, q in enumerate(questions):
            if q.gold_context:
                by_title[norm_title(q.gold_title)].append(qi)
    bar = progress(total=num_passages(passages), desc="mining: answers", unit="psg")
    for batch in iter_passages(passages, ["pid", "title", "text"]):
        pids, titles, texts = (batch.column(i).to_pylist() for i in range(3))
        matcher = AnswerMatcher(dict(zip(pids, texts, strict=True)))
        for pid, title, text in zip(pids, titles, texts, strict=True):
            for qi, r in wanted.get(pid, ()):
                q = questions[qi]
                q.hits[r] = matcher.contains(q.answers, q.match, pid)
            for qi in by_title.get(norm_title(title), ()) if by_title else ():
                q = questions[qi]
                if not matcher.contains(q.answers, q.match, pid):
                    continue
                aligned = align_gold(text, q.gold_context, min_overlap)
                if aligned is None or not has_answer(q.answers, aligned[1], q.match):
                    continue
                # Most aligned words wins; ties go to the smaller pid (deterministic).
                if q.gold is None or (aligned[0], -pid) > (q.gold[0], -q.gold[1]):
                    q.gold = (aligned[0], pid)
        bar.update(len(pids))
    bar.close()
    missing = {
        q.ranking[r][0] for q in questions for r in np.flatnonzero(q.hits == _UNKNOWN).tolist()
    }
    if missing:
        raise InputError(
            passages, None, f"{len(missing)} pids of the run are not in the passage table, "
            f"e.g. {sorted(missing)[:5]}"
        )  # fmt: skip


def _random_rows(qid: str, n: int, k: int, seed: int) -> list[int]:
    """Seeded candidate row indices for a question's random negatives (oversampled)."""
    if k <= 0 or n <= 0:
        return []
    rng = np.random.default_rng([seed, zlib.crc32(qid.encode("utf-8"))])
    rows = rng.integers(0, n, size=2 * k + 16)
    return list(dict.fromkeys(rows.tolist()))  # unique, draw order kept


def mine(
    questions_path: str | Path,
    run_path: str | Path,
    passages_path: str | Path,
    cfg: dict[str, Any] | MiningConfig,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Mine DPR biencoder records (in questions-file order) and a report of what was kept."""
    conf = cfg if isinstance(cfg, MiningConfig) else MiningConfig.from_cfg(cfg)
    rows = read_questions(questions_path)
    run = read_run(run_path, conf.depth, qids=[r["qid"] for r in rows])
    questions = []
    no_hits = (np.empty(0, np.int64), np.empty(0, np.float64))
    for r in rows:
        pids, scores = run.get(r["qid"], no_hits)
        ranking = list(zip(pids.tolist(), scores.tolist(), strict=True))
        questions.append(
            _Question(
                qid=r["qid"],
                question=r["question"],
                answers=r["answers"],
                match=r["match"],
                gold_title=r["gold_title"],
                gold_context=r["gold_context"],
                ranking=ranking,
                hits=np.full(len(ranking), _UNKNOWN, dtype=np.uint8),
            )
        )
    # Questions without answers cannot be checked; keep them out of the corpus scan.
    checkable = [q for q in questions if q.answers]
    use_gold = conf.positives == "gold"
    _scan_answers(passages_path, checkable, use_gold, conf.gold_min_overlap)

    discarded: dict[str, list[str]] = {reason: [] for reason in DISCARD_REASONS}
    selected: dict[str, tuple[tuple[int, str], list[int]]] = {}  # qid -> (positive, hard negs)
    for q in questions:
        if not q.answers:
            discarded["no_answers"].append(q.qid)
            continue
        positive: tuple[int, str] | None = None
        if use_gold and q.gold_context:
            if q.gold is not None:
                positive = (q.gold[1], "gold")
            elif not conf.gold_fallback_bm25:
                discarded["gold_not_matched"].append(q.qid)
                continue
        if positive is None:
            first = np.flatnonzero(q.hits == 1)
            if first.size:
                positive = (q.ranking[int(first[0])][0], "bm25")
            else:
                reason = "no_bm25_hits" if not q.ranking else "no_answer_in_top_depth"
                discarded[reason].append(q.qid)
                continue
        hard = [
            pid
            for (pid, _s), hit in zip(q.ranking, q.hits.tolist(), strict=True)
            if hit == 0 and pid != positive[0]
        ][: conf.hard_negatives]
        selected[q.qid] = (positive, hard)

    # Pass 2: texts of the chosen passages and of the random-negative candidates.
    n = num_passages(passages_path)
    cand_rows = {qid: _random_rows(qid, n, conf.random_negatives, conf.seed) for qid in selected}
    want_rows = {row for rows_ in cand_rows.values() for row in rows_}
    want_pids = {p for (pos, _src), hard in selected.values() for p in (pos, *hard)}
    texts: dict[int, tuple[str, str]] = {}
    row_pid: dict[int, int] = {}
    offset = 0
    for batch in iter_passages(passages_path, ["pid", "title", "text"]):
        pids, titles, txts = (batch.column(i).to_pylist() for i in range(3))
        for i, (pid, title, text) in enumerate(zip(pids, titles, txts, strict=True)):
            row = offset + i
            if row in want_rows:
                row_pid[row] = pid
                texts[pid] = (title, text)
            elif pid in want_pids:
                texts[pid] = (title, text)
        offset += len(pids)
    missing = want_pids - texts.keys()
    if missing:
        raise InputError(passages_path, None, f"gold pids {sorted(missing)[:5]} not found")

    # A run of sentence units (a trained DCSR checkpoint) names the best retrieved sentence of
    # each passage: the hard negative is that sentence (DCSR's "sentence-specific" negatives).
    best_unit = read_run_units(
        run_path, [(qid, p) for qid, (_pos, hard) in selected.items() for p in hard]
    )
    records: list[dict[str, Any]] = []
    n_source = {"gold": 0, "bm25": 0}
    n_hard_units = 0
    n_hard = n_random = short_hard = short_random = 0
    dataset = conf.dataset or _dataset_name(questions_path)
    # One matcher over the loaded texts: a passage drawn for many questions is prepared once.
    neg_matcher = AnswerMatcher({pid: tt[1] for pid, tt in texts.items()}, max_cache=1 << 20)
    for q in questions:
        if q.qid not in selected:
            continue
        (pos, src), hard = selected[q.qid]
        scores = dict(q.ranking)
        exclude = {pos, *hard}
        randoms: list[int] = []
        for row in cand_rows[q.qid]:
            if len(randoms) >= conf.random_negatives:
                break
            pid = row_pid[row]
            if pid in exclude or neg_matcher.contains(q.answers, q.match, pid):
                continue
            exclude.add(pid)
            randoms.append(pid)
        n_source[src] += 1
        n_hard += len(hard)
        n_random += len(randoms)
        short_hard += len(hard) < conf.hard_negatives
        short_random += len(randoms) < conf.random_negatives

        def ctx(pid: int, score: float | None) -> dict[str, Any]:
            title, text = texts[pid]
            return {"passage_id": pid, "title": title, "text": text, "score": score}

        hard_ctxs = [ctx(p, scores[p]) for p in hard]
        for c in hard_ctxs:
            unit = best_unit.get((q.qid, c["passage_id"]), -1) if best_unit else -1
            if unit >= 0:
                c["sentence"] = int(unit_sentence(unit))
                n_hard_units += 1

        records.append(
            {
                "dataset": dataset,
                "qid": q.qid,
                "question": q.question,
                "answers": q.answers,
                "positive_ctxs": [ctx(pos, scores.get(pos))],
                "negative_ctxs": [ctx(p, None) for p in randoms],
                "hard_negative_ctxs": hard_ctxs,
            }
        )
    kept = len(records)
    report = {
        "questions": len(questions),
        "kept": kept,
        "discarded": {k: len(v) for k, v in discarded.items()},
        "discarded_total": sum(len(v) for v in discarded.values()),
        "discarded_examples": {k: v[:10] for k, v in discarded.items() if v},
        "positives": n_source,
        "mean_hard_negatives": n_hard / kept if kept else 0.0,
        "mean_random_negatives": n_random / kept if kept else 0.0,
        "short_of_hard_negatives": short_hard,
        # Hard negatives that carry the miner's best retrieved sentence (sentence-unit runs).
        "hard_negatives_with_sentence": n_hard_units,
        "short_of_random_negatives": short_random,
        "config": asdict(conf),
    }
    log.info(
        "mined %d of %d questions (positives %s); discarded %s",
        kept,
        len(questions),
        n_source,
        report["discarded"],
    )
    return records, report


def gold_passages(
    questions_path: str | Path, passages_path: str | Path, min_overlap: int = 8
) -> tuple[dict[str, int], dict[str, Any]]:
    """The corpus passage of each question's gold context, matched as ``mine`` matches gold
    positives (``_scan_answers``: the gold title's passage that aligns best with the context
    and holds an answer in the aligned words). Questions without a gold context (NQ-open,
    TriviaQA, ...) have none. Returns ``{qid: pid}`` and counts."""
    rows = read_questions(questions_path)
    questions = [
        _Question(
            qid=r["qid"],
            question=r["question"],
            answers=r["answers"],
            match=r["match"],
            gold_title=r["gold_title"],
            gold_context=r["gold_context"],
            ranking=[],
            hits=np.empty(0, dtype=np.uint8),
        )
        for r in rows
        if r["answers"] and r["gold_context"]
    ]
    _scan_answers(passages_path, questions, True, min_overlap)
    found = {q.qid: q.gold[1] for q in questions if q.gold is not None}
    return found, {
        "questions": len(rows),
        "with_gold_context": len(questions),
        "gold_matched": len(found),
        "gold_passages": len(set(found.values())),
    }


def _dataset_name(questions_path: str | Path) -> str:
    """``qa/squad/train.parquet`` -> ``squad-train``."""
    p = Path(questions_path)
    return f"{p.parent.name}-{p.stem}" if p.parent.name else p.stem


# --------------------------------------------------------------------------- DPR JSON I/O


CTX_LISTS = ("positive_ctxs", "negative_ctxs", "hard_negative_ctxs")


def check_record(rec: Any, path: str | Path, where: str) -> None:
    """Raise InputError unless ``rec`` is a well-formed biencoder record.

    A record is an object with a non-empty 'question' string, 'answers' (if present) a list,
    and each ctx list (if present and not null) a list of objects with a 'text' string.
    """
    if not isinstance(rec, dict):
        raise InputError(path, where, "not an object with a 'question' string")
    q = rec.get("question")
    if not isinstance(q, str) or not q.strip():
        raise InputError(path, where, "missing or empty 'question' string")
    if not isinstance(rec.get("answers", []), list):
        raise InputError(path, where, "'answers' is not a list")
    for key in CTX_LISTS:
        ctxs = rec.get(key)
        if ctxs is None:
            continue
        if not isinstance(ctxs, list):
            raise InputError(path, where, f"'{key}' is not a list")
        for j, ctx in enumerate(ctxs):
            if not isinstance(ctx, dict) or not isinstance(ctx.get("text"), str):
                raise InputError(
                    path, f"{where}, {key}[{j}]", "context is not an object with a 'text' string"
                )


def _normalize_ctx(ctx: dict[str, Any], path: str | Path, where: str) -> dict[str, Any]:
    out = dict(ctx)
    pid = ctx.get("passage_id", ctx.get("psg_id"))
    try:
        out["passage_id"] = int(pid)
    except (TypeError, ValueError):
        raise InputError(path, where, f"passage_id {pid!r} is not an integer") from None
    out.pop("psg_id", None)
    out.setdefault("title", "")
    score = ctx.get("score")
    out["score"] = None if score is None else float(score)
    return out


def normalize_record(
    rec: Any, path: str | Path, index: int, where: str | None = None
) -> dict[str, Any]:
    """One checked biencoder record with int passage ids, float scores and all three ctx lists.

    ``index`` is the 0-based record number (the qid of records without one, as in DPR's
    released files); ``where`` names the record in errors (default ``record <index>``).
    """
    where = where or f"record {index}"
    check_record(rec, path, where)
    out = dict(rec)
    out.setdefault("qid", str(index))  # DPR's released files carry no question id
    out.setdefault("answers", [])
    for key in CTX_LISTS:
        out[key] = [
            _normalize_ctx(c, path, f"{where}, {key}[{j}]")
            for j, c in enumerate(rec.get(key) or [])
        ]
    return out


def _json_lines(path: str | Path) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` of the non-blank lines of a JSON-lines input."""
    for lineno, line in iter_input_lines(path):
        if not line.strip():
            continue
        try:
            yield lineno, json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(path, f"line {lineno}", f"invalid JSON: {exc.msg}") from None


def read_biencoder(path: str | Path, *, normalize: bool = True) -> Iterator[dict[str, Any]]:
    """Records of our ``.jsonl(.gz)`` or DPR's released ``.json`` list (gz or plain).

    A JSON list is loaded whole (as DPR's own loader does); JSON lines are streamed. Errors
    name ``record <i>`` (0-based) of a JSON list or ``line <n>`` of JSON lines. Every record
    is checked (``check_record``); ``normalize=False`` yields the checked records as read,
    without ``normalize_record``'s conversions (passage ids then need not be integers).
    """
    if input_head(path).lstrip().startswith(b"["):
        data = load_input_json(path)
        if not isinstance(data, list):
            raise InputError(path, None, "expected a JSON list of records")
        located: Iterator[tuple[int, str, Any]] = (
            (i, f"record {i}", rec) for i, rec in enumerate(data)
        )
    else:
        located = ((i, f"line {n}", rec) for i, (n, rec) in enumerate(_json_lines(path)))
    for i, where, rec in located:
        if normalize:
            yield normalize_record(rec, path, i, where)
        else:
            check_record(rec, path, where)
            yield rec


def write_dpr_json(path: str | Path, records: Iterable[dict[str, Any]]) -> int:
    """DPR's biencoder ``.json`` layout: one JSON list, ``passage_id`` as strings."""
    n = 0
    path = Path(path)
    with atomic_path(path) as tmp:
        target = tmp.with_name(tmp.name + (".gz" if path.suffix == ".gz" else ""))
        with open_text(target, "wt") as fh:
            fh.write("[")
            for rec in records:
                out = dict(rec)
                for key in CTX_LISTS:
                    out[key] = [{**c, "passage_id": str(c["passage_id"])} for c in rec.get(key, [])]
                fh.write(("\n" if n == 0 else ",\n") + json.dumps(out, ensure_ascii=False))
                n += 1
            fh.write("\n]\n")
        target.replace(tmp)
    return n
