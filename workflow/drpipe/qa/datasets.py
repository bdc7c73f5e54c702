"""Loaders that turn each QA dataset's own file layout into one question table.

Over 500 lines: one small reader per dataset layout, all feeding the same record checks.

Every loader returns a list of question dicts with the fields of ``QUESTION_SCHEMA``:
``qid, question, answers, match, gold_title, gold_context``. qids come from the dataset when
it has them, otherwise ``"{dataset}-{split}-{index}"`` (0-based record index). The question
text is kept exactly as the file has it, tabs and line breaks (U+0085, U+2028, CR, ...)
included. A malformed record raises ``InputError`` naming the file and the line or record.

``load_questions`` applies the dataset-independent steps (empty answers, title restriction,
seeded sampling) and returns a report that counts every dropped question by reason.
"""

from __future__ import annotations

import ast
import json
import logging
import random
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from drpipe.errors import InputError
from drpipe.io import (
    input_head,
    iter_input_lines,
    iter_input_rows,
    load_input_json,
    write_parquet,
)
from drpipe.qa.matching import (
    MATCH_MODES,
    REGEX_MODES,
    compile_answer_regex,
    match_tokens,
    regex_compiles,
    unescape_non_ascii,
)

log = logging.getLogger(__name__)

QUESTION_SCHEMA = pa.schema(
    [
        ("qid", pa.string()),
        ("question", pa.string()),
        ("answers", pa.list_(pa.string())),
        ("match", pa.string()),
        ("gold_title", pa.string()),
        ("gold_context", pa.string()),
    ]
)

# Datasets whose answers are regular expressions (CuratedTREC) unless --cfg says otherwise.
REGEX_DATASETS = frozenset({"curatedtrec", "curated", "trec", "curated_trec", "curated-trec"})

Question = dict[str, Any]

# How many dropped qids (or bad regex answers) the load report names per reason.
N_EXAMPLES = 5


def default_match(dataset: str) -> str:
    return "regex" if dataset.lower() in REGEX_DATASETS else "string"


def _question(
    path: str | Path,
    where: str,
    qid: str,
    question: Any,
    answers: Any,
    match: str,
    gold_title: str | None = None,
    gold_context: str | None = None,
) -> Question:
    """Validate one record's fields and build the question dict."""
    # The text is kept exactly, tabs and line breaks included (DPR's TriviaQA test file has
    # U+0085 inside questions); a file format that cannot hold them escapes them where it is
    # written (the BM25 topics file: drpipe.bm25.write_topics).
    if not isinstance(question, str) or not question.strip():
        raise InputError(path, where, f"question must be a non-empty string, got {question!r}")
    if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
        raise InputError(path, where, f"answers must be a list of strings, got {answers!r}")
    # A regex answer that does not compile is kept: it matches nothing, as in DPR, and
    # load_questions counts it in the report.
    return {
        "qid": str(qid),
        "question": question,
        "answers": answers,
        "match": match,
        "gold_title": gold_title,
        "gold_context": gold_context,
    }


def _lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """Non-blank lines (line end removed) of a text input, strict UTF-8 (``iter_input_lines``)."""
    for lineno, line in iter_input_lines(path):
        line = line.rstrip("\r\n")
        if line.strip():
            yield lineno, line


def _json_lines(path: str | Path) -> Iterator[tuple[int, Any]]:
    for lineno, line in _lines(path):
        try:
            yield lineno, json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(path, f"line {lineno}", f"invalid JSON: {exc.msg}") from None


_load_json = load_input_json


def read_squad(
    path: str | Path, dataset: str = "squad", split: str = "dev", match: str | None = None
) -> list[Question]:
    """SQuAD v1.1 JSON (.json or .json.gz): qid = SQuAD id, gold = article title + paragraph."""
    match = match or "string"
    data = _load_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise InputError(path, None, "not SQuAD JSON: expected an object with a 'data' list")
    out: list[Question] = []
    for ai, article in enumerate(data["data"]):
        try:
            title = article["title"].replace("_", " ")
            paragraphs = article["paragraphs"]
            for pi, para in enumerate(paragraphs):
                context = para["context"]
                for qi, qa in enumerate(para["qas"]):
                    where = f"article {ai} paragraph {pi} question {qi} (id {qa.get('id')!r})"
                    answers = list(dict.fromkeys(a["text"] for a in qa["answers"]))
                    out.append(
                        _question(
                            path, where, qa["id"], qa["question"], answers, match, title, context
                        )
                    )
        except (KeyError, TypeError, AttributeError) as exc:
            raise InputError(path, f"article {ai}", f"malformed SQuAD record: {exc!r}") from None
    return out


def _answer_field(path, where, rec: dict) -> Any:
    for key in ("answer", "answers"):
        if key in rec:
            return rec[key]
    raise InputError(path, where, "record has no 'answer' field")


def read_qa_jsonl(
    path: str | Path, dataset: str, split: str, match: str | None = None
) -> list[Question]:
    """``{"question", "answer": [...]}`` per line: NQ-open and DPR/Pyserini's ``*.qa.jsonl``."""
    match = match or default_match(dataset)
    out: list[Question] = []
    for index, (lineno, rec) in enumerate(_json_lines(path)):
        where = f"line {lineno}"
        if not isinstance(rec, dict) or "question" not in rec:
            raise InputError(path, where, "expected a JSON object with a 'question' field")
        qid = rec.get("qid", rec.get("id", f"{dataset}-{split}-{index}"))
        out.append(
            _question(path, where, qid, rec["question"], _answer_field(path, where, rec), match)
        )
    return out


read_nq_open = read_qa_jsonl
read_dpr_jsonl = read_qa_jsonl


def read_dpr_qa_csv(
    path: str | Path, dataset: str, split: str, match: str | None = None
) -> list[Question]:
    """DPR's ``*.qa.csv`` (NQ, TriviaQA, WebQ, TREC): ``question<TAB>python-list-of-answers``.

    Read with the csv module like DPR, so CSV-quoted fields (answers containing quotes, a
    question holding a tab) parse. Lines end at ``\\n`` only, so a question keeps a CR,
    U+0085 or U+2028 inside it (DPR's ``open()`` would also end a line at a lone CR; files
    without one read the same either way).
    """
    match = match or default_match(dataset)
    out: list[Question] = []
    index = 0
    # iter_input_rows rejects a row spanning lines: a question opening a double quote and
    # never closing it would otherwise swallow the questions after it.
    for lineno, row in iter_input_rows(path, delimiter="\t", cr_in_fields=True):
        where = f"line {lineno}"
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if len(row) != 2:
            hint = (
                " (a double quote opened a field that swallowed a tab: unbalanced quotes?)"
                if any("\t" in f for f in row)
                else ""
            )
            raise InputError(path, where, f"expected 2 tab-separated fields, got {len(row)}{hint}")
        try:
            answers = ast.literal_eval(row[1])
        except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
            raise InputError(
                path, where, f"answer list is not a Python literal: {row[1][:80]!r} ({exc})"
            ) from None
        out.append(_question(path, where, f"{dataset}-{split}-{index}", row[0], answers, match))
        index += 1
    return out


def read_curatedtrec_tsv(
    path: str | Path, dataset: str = "curatedtrec", split: str = "test", match: str | None = None
) -> list[Question]:
    """CuratedTREC's original ``large2180-*.tsv``: ``id, type, question, answer-regex``.

    The regex field itself may contain a tab (one escaped ``\\<TAB>`` in the real train file),
    so fields after the third are joined back with tabs.
    """
    match = match or "regex"
    out: list[Question] = []
    for lineno, line in _lines(path):
        fields = line.split("\t")
        if len(fields) < 4:
            raise InputError(
                path, f"line {lineno}", f"expected 4 tab-separated fields, got {len(fields)}"
            )
        qid, _qtype, question = fields[:3]
        answer = "\t".join(fields[3:])
        if not qid.strip():
            raise InputError(path, f"line {lineno}", "empty question id")
        out.append(_question(path, f"line {lineno}", qid.strip(), question, [answer], match))
    return out


def parse_target_value(value: str) -> list[str]:
    """Answers of a WebQuestions ``targetValue``: ``(list (description "X") (description Y))``."""
    s = value.strip()
    if not (s.startswith("(list") and s.endswith(")")):
        raise ValueError("targetValue is not '(list ...)'")
    i, end = len("(list"), len(s) - 1
    out: list[str] = []
    while True:
        while i < end and s[i].isspace():
            i += 1
        if i >= end:
            return out
        head = "(description "
        if not s.startswith(head, i):
            raise ValueError(f"expected '(description' at offset {i}")
        i += len(head)
        while i < end and s[i] == " ":
            i += 1
        if i < end and s[i] == '"':
            i += 1
            buf = []
            while i < end and s[i] != '"':
                if s[i] == "\\" and i + 1 < end:
                    i += 1
                buf.append(s[i])
                i += 1
            if i >= end:
                raise ValueError("unterminated quoted description")
            i += 1
            item = "".join(buf)
        else:
            j = s.find(")", i)
            if j < 0 or j > end:
                raise ValueError("unterminated description")
            item, i = s[i:j].strip(), j
        while i < end and s[i] == " ":
            i += 1
        if i >= end or s[i] != ")":
            raise ValueError(f"expected ')' at offset {i}")
        i += 1
        out.append(item)


def read_webquestions(
    path: str | Path, dataset: str = "webquestions", split: str = "test", match: str | None = None
) -> list[Question]:
    """The original WebQuestions JSON: a list of ``{"url", "targetValue", "utterance"}``."""
    match = match or default_match(dataset)
    data = _load_json(path)
    if not isinstance(data, list):
        raise InputError(path, None, "not WebQuestions JSON: expected a list of records")
    out: list[Question] = []
    for index, rec in enumerate(data):
        where = f"record {index}"
        if not isinstance(rec, dict) or "utterance" not in rec or "targetValue" not in rec:
            raise InputError(path, where, "expected an object with 'utterance' and 'targetValue'")
        try:
            answers = parse_target_value(rec["targetValue"])
        except (ValueError, AttributeError) as exc:
            raise InputError(
                path, where, f"bad targetValue {rec['targetValue']!r}: {exc}"
            ) from None
        qid = rec.get("qid", rec.get("id", f"{dataset}-{split}-{index}"))
        out.append(_question(path, where, qid, rec["utterance"], answers, match))
    return out


def read_dpr_biencoder(
    path: str | Path, dataset: str, split: str, match: str | None = None
) -> list[Question]:
    """DPR biencoder records (a JSON list, or JSON lines, optionally gzipped).

    gold_title/gold_context come from ``positive_ctxs[0]`` when there is one.
    """
    match = match or default_match(dataset)
    if input_head(path).lstrip().startswith(b"["):
        data = _load_json(path)
        if not isinstance(data, list):
            raise InputError(path, None, "expected a JSON list of records")
        records = ((f"record {i}", rec) for i, rec in enumerate(data))
    else:
        records = ((f"line {n}", rec) for n, rec in _json_lines(path))
    out: list[Question] = []
    for index, (where, rec) in enumerate(records):
        if not isinstance(rec, dict) or "question" not in rec or "answers" not in rec:
            raise InputError(path, where, "expected an object with 'question' and 'answers'")
        positives = rec.get("positive_ctxs") or []
        gold_title = gold_context = None
        if positives:
            pos = positives[0]
            if not isinstance(pos, dict) or "text" not in pos:
                raise InputError(path, where, "positive_ctxs[0] lacks 'text'")
            gold_title, gold_context = pos.get("title"), pos["text"]
        qid = rec.get("qid", rec.get("id", f"{dataset}-{split}-{index}"))
        out.append(
            _question(
                path, where, qid, rec["question"], rec["answers"], match, gold_title, gold_context
            )
        )
    return out


LOADERS: dict[str, Callable[..., list[Question]]] = {
    "squad": read_squad,
    "nq-open": read_nq_open,
    "dpr-qa-csv": read_dpr_qa_csv,
    "dpr-jsonl": read_dpr_jsonl,
    "curatedtrec-tsv": read_curatedtrec_tsv,
    "webquestions": read_webquestions,
    "dpr-biencoder": read_dpr_biencoder,
}


def load_questions(
    fmt: str,
    path: str | Path,
    dataset: str,
    split: str,
    *,
    match: str | None = None,
    sample: int | None = None,
    seed: int = 13,
    restrict_titles: Collection[str] | None = None,
    allow_empty: bool = False,
    exclude_qids: Collection[str] | None = None,
) -> tuple[list[Question], dict[str, Any]]:
    """Load, clean, restrict and sample one dataset split; return (questions, report).

    Cleaning: answers without tokens (blank) are removed (in DPR they match every passage);
    a question left without answers is dropped. ``restrict_titles`` keeps only questions whose
    gold_title is in it. ``exclude_qids`` drops the questions of another split (a held-out
    split drawn from the training articles must not share a question with the training
    split). ``sample`` keeps a seeded random subset, in file order. The report
    counts dropped questions by reason and names the first ``N_EXAMPLES`` qids of each.

    A file without records, or a split left without questions, raises ``InputError`` unless
    ``allow_empty``. Regex answers that do not compile are kept (they match nothing, as in
    DPR) and counted in the report, as are the answers ``regex_repaired`` would change.
    """
    if fmt not in LOADERS:
        raise ValueError(f"unknown question format {fmt!r}; expected one of {sorted(LOADERS)}")
    if match is not None and match not in MATCH_MODES:
        raise ValueError(f"unknown match mode {match!r}; expected one of {MATCH_MODES}")
    questions = LOADERS[fmt](path, dataset, split, match)
    n_records = len(questions)
    if n_records == 0 and not allow_empty:
        raise InputError(
            path,
            None,
            "no question records in the file (set allow_empty: true for this split in the"
            " config if an empty split is intended)",
        )

    seen: dict[str, int] = {}
    for i, q in enumerate(questions):
        if q["qid"] in seen:
            raise InputError(path, f"question {i}", f"duplicate qid {q['qid']!r}")
        seen[q["qid"]] = i

    dropped: Counter[str] = Counter()
    dropped_examples: dict[str, list[str]] = {}

    def drop(reason: str, qids: list[str]) -> None:
        dropped[reason] += len(qids)
        examples = dropped_examples.setdefault(reason, [])
        examples.extend(qids[: N_EXAMPLES - len(examples)])

    removed_answers = 0
    kept: list[Question] = []
    for q in questions:
        # In string mode an answer without tokens (blank, or only control characters) would
        # match every passage; in regex mode a blank pattern would too.
        if q["match"] == "string":
            answers = [a for a in q["answers"] if match_tokens(a)]
        else:
            answers = [a for a in q["answers"] if a.strip()]
        removed_answers += len(q["answers"]) - len(answers)
        q["answers"] = answers
        if not answers:
            drop("no_answers", [q["qid"]])
            continue
        kept.append(q)

    if restrict_titles is not None:
        titles = set(restrict_titles)
        restricted = []
        for q in kept:
            if q["gold_title"] is None:
                drop("no_gold_title", [q["qid"]])
            elif q["gold_title"] not in titles:
                drop("gold_title_not_in_corpus", [q["qid"]])
            else:
                restricted.append(q)
        kept = restricted

    if exclude_qids is not None:
        excluded = set(exclude_qids)
        drop("in_excluded_split", [q["qid"] for q in kept if q["qid"] in excluded])
        kept = [q for q in kept if q["qid"] not in excluded]

    if sample is not None:
        if sample < 0:
            raise ValueError(f"sample must be >= 0, got {sample}")
        if sample < len(kept):
            chosen = sorted(random.Random(seed).sample(range(len(kept)), sample))
            chosen_set = set(chosen)
            drop("not_sampled", [q["qid"] for i, q in enumerate(kept) if i not in chosen_set])
            kept = [kept[i] for i in chosen]

    if not kept and not allow_empty:
        raise InputError(
            path,
            None,
            f"all {n_records} question records were dropped ({dict(sorted(dropped.items()))},"
            f" e.g. {dropped_examples}); set allow_empty: true for this split in the config"
            " if an empty split is intended",
        )

    # Regex answers: those that do not compile (they match nothing, as in DPR), and those the
    # regex_repaired reading would change (backslash before a non-ASCII letter).
    not_compiling: list[dict[str, str]] = []
    unmatchable: list[str] = []
    unescaped = 0
    for q in kept:
        if q["match"] not in REGEX_MODES:
            continue
        bad = [a for a in q["answers"] if not regex_compiles(a, q["match"])]
        for a in bad:
            try:
                compile_answer_regex(a, q["match"] == "regex_repaired")
            except ValueError as exc:
                log.warning("qid %s: %s; it matches nothing (as in DPR)", q["qid"], exc)
                not_compiling.append({"qid": q["qid"], "answer": a, "error": str(exc)})
        if len(bad) == len(q["answers"]):
            unmatchable.append(q["qid"])
        unescaped += sum(unescape_non_ascii(a) != a for a in q["answers"])

    report = {
        "format": fmt,
        "input": str(path),
        "dataset": dataset,
        "split": split,
        "match": sorted({q["match"] for q in questions}),
        "n_records": n_records,
        "n_questions": len(kept),
        "dropped": dict(sorted(dropped.items())),
        "dropped_examples": dict(sorted(dropped_examples.items())),
        "empty_answer_strings_removed": removed_answers,
        "regex_answers_not_compiling": len(not_compiling),
        "regex_answers_not_compiling_examples": not_compiling[:N_EXAMPLES],
        "regex_questions_without_compiling_answer": len(unmatchable),
        "regex_questions_without_compiling_answer_examples": unmatchable[:N_EXAMPLES],
        "regex_answers_with_escaped_non_ascii": unescaped,
        "allow_empty": allow_empty,
        "sample": sample,
        "seed": seed,
        "restricted_to_titles": None if restrict_titles is None else len(set(restrict_titles)),
    }
    log.info(
        "%s %s/%s: %d records -> %d questions; dropped %s; %d empty answer strings removed",
        path,
        dataset,
        split,
        n_records,
        len(kept),
        report["dropped"] or "none",
        removed_answers,
    )
    return kept, report


def questions_table(questions: list[Question]) -> pa.Table:
    cols = {name: [q[name] for q in questions] for name in QUESTION_SCHEMA.names}
    return pa.Table.from_pydict(cols, schema=QUESTION_SCHEMA)


def write_questions(path: str | Path, questions: list[Question]) -> None:
    write_parquet(path, questions_table(questions))


REQUIRED_QUESTION_COLUMNS = ("qid", "question", "answers", "match")  # gold columns optional


def read_questions(path: str | Path) -> list[Question]:
    """The one reader of a questions Parquet (``QUESTION_SCHEMA``): question dicts in file order.

    ``gold_title``/``gold_context`` may be absent (then None); null answer strings are dropped.
    A missing column, a null or duplicate qid, a null question, a bad match mode or null
    answers raise ``InputError`` naming the file and the row.
    """
    table = pq.read_table(path)
    missing = [n for n in REQUIRED_QUESTION_COLUMNS if n not in table.column_names]
    if missing:
        raise InputError(path, None, f"questions table lacks columns {missing}")
    gold = [n for n in QUESTION_SCHEMA.names if n not in REQUIRED_QUESTION_COLUMNS]
    rows = table.select([n for n in QUESTION_SCHEMA.names if n in table.column_names]).to_pylist()
    seen: set[str] = set()
    for i, q in enumerate(rows):
        qid = q["qid"]
        if qid is None:
            raise InputError(path, f"row {i}", "qid is null")
        if qid in seen:
            raise InputError(path, f"row {i}", f"duplicate qid {qid!r}")
        seen.add(qid)
        where = f"row {i} (qid {qid!r})"
        if q["question"] is None:
            raise InputError(path, where, "question is null")
        if q["match"] not in MATCH_MODES:
            raise InputError(path, where, f"bad match mode {q['match']!r}")
        if q["answers"] is None:
            raise InputError(path, where, "answers is null")
        if None in q["answers"]:
            q["answers"] = [a for a in q["answers"] if a is not None]
        for name in gold:
            q.setdefault(name, None)
    return rows
