"""Stand-in inputs (``drpipe standin``): a file of one of the paper's input formats, made from
real data in the mirror, for the rehearsal scale (config/scales/rehearsal.yaml).

The rehearsal runs the paper scale's DAG unchanged on inputs that fit a 2-core machine. Each
stand-in has the format of the input it replaces, so the paper's readers, rules and checks meet
what they will meet at paper scale; its content is real text and real questions, small:

- ``wiki_dump``: a MediaWiki XML dump (``.xml.bz2``): the pages of a real dump, after pages
  made from the passage pool (psgs_w100 passages grouped by title, SQuAD paragraphs by
  article), so the corpus holds the text the biencoder stand-ins name, under our own passage
  ids, as the dump-built corpus holds DPR's passages at paper scale.
- ``psgs_w100``: DPR's passage TSV (``id, text, title``), gzip by the output's suffix.
- ``biencoder``: DPR's biencoder JSON list (``dataset, question, answers, positive_ctxs,
  negative_ctxs, hard_negative_ctxs``; contexts ``title, text, score, title_score,
  passage_id``) from real questions: positives are pool passages holding an answer, hard
  negatives the pool passages sharing most words with the question without one, negatives
  seeded random others. Optionally real DPR records first, and records without a positive
  (as DPR's files have; training discards and counts them).
- ``qa_csv``: DPR's question file (``question<TAB>python list of answers``), gzip by suffix.
- ``tiny_bert``: a random BERT-shaped encoder (``BertModel`` + WordPiece vocabulary of the
  inputs' most frequent words) standing in for ``bert-base-uncased``.
- ``dpr_hf``: a Hugging Face ``DPRQuestionEncoder`` or ``DPRContextEncoder`` directory on the
  tiny BERT's config and vocabulary (a released checkpoint's layout).
- ``dpr_cp``: DPR's original checkpoint file (``CheckpointState`` as a dict: ``model_dict``
  with ``question_model.*`` and ``ctx_model.*`` weights, ``encoder_params`` naming
  ``pretrained_model_cfg``).

Every stand-in is seeded and deterministic; its record says what it was made from.
"""

from __future__ import annotations

import argparse
import bz2
import hashlib
import html
import json
import logging
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from drpipe.cliutil import add_cfg, need
from drpipe.corpus.sources import iter_dpr_tsv, write_dpr_tsv
from drpipe.download import file_digest
from drpipe.errors import InputError
from drpipe.io import atomic_path, open_binary, open_text, write_json
from drpipe.qa.datasets import load_questions
from drpipe.qa.matching import has_answer, match_tokens
from drpipe.qa.mining import write_dpr_json

log = logging.getLogger(__name__)

KINDS = ("wiki_dump", "psgs_w100", "biencoder", "qa_csv", "tiny_bert", "dpr_hf", "dpr_cp")
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# Pool passages made from SQuAD paragraphs get ids above every psgs_w100 id (21,015,324).
SQUAD_PID_BASE = 30_000_000
_WORD = re.compile(r"\w+|[^\w\s]")


# ----------------------------------------------------------------------------- the passage pool


def squad_passages(path: str | Path, articles: int) -> list[tuple[int, str, str]]:
    """``(id, text, title)`` of each paragraph of the first ``articles`` SQuAD articles."""
    with open_text(path) as fh:
        data = json.load(fh)["data"][:articles]
    out, pid = [], SQUAD_PID_BASE
    for art in data:
        title = art["title"].replace("_", " ")
        for para in art["paragraphs"]:
            pid += 1
            out.append((pid, " ".join(para["context"].split()), title))
    return out


def passage_pool(inputs: dict[str, list[Path]], cfg: dict[str, Any]) -> list[tuple[int, str, str]]:
    """The pool: psgs_w100 passages (``passages`` inputs) then SQuAD paragraphs (``squad``)."""
    pool = [row for p in inputs.get("passages", []) for row in iter_dpr_tsv(p)]
    for p in inputs.get("squad", []):
        pool += squad_passages(p, int(cfg.get("squad_articles", 0)))
    if not pool:
        raise ValueError("a passage pool needs 'passages' (psgs_w100 TSV) or 'squad' inputs")
    return pool


class Pool:
    """Passages with an inverted index of their answer-matching tokens (a cheap prefilter of
    ``has_answer``) and their word sets (the hard negatives' overlap)."""

    def __init__(self, rows: list[tuple[int, str, str]]):
        self.rows = rows
        self.words = [set(match_tokens(f"{title} {text}")) for _, text, title in rows]
        self.index: dict[str, set[int]] = {}
        for i, words in enumerate(self.words):
            for w in words:
                self.index.setdefault(w, set()).add(i)

    def with_answer(self, answers: list[str], match: str) -> list[int]:
        if match == "string":
            cand: set[int] = set()
            for a in answers:
                toks = match_tokens(a)
                if toks:
                    cand |= set.intersection(*(self.index.get(t, set()) for t in toks))
        else:
            cand = set(range(len(self.rows)))
        return [i for i in sorted(cand) if has_answer(answers, self.rows[i][1], match)]

    def ctx(self, i: int, score: float, title_score: int) -> dict[str, Any]:
        pid, text, title = self.rows[i]
        return {"title": title, "text": text, "score": score, "title_score": title_score,
                "passage_id": str(pid)}  # fmt: skip


def biencoder_records(
    questions: list[dict], pool: Pool, cfg: dict[str, Any], dataset: str
) -> tuple[list[dict], dict[str, int]]:
    """DPR records for ``questions`` in order: ``n`` with a positive, then ``no_positive``
    without one (DPR's files hold some; training discards and counts them)."""
    n, n_none = int(need(cfg, "n")), int(cfg.get("no_positive", 0))
    n_hard, n_neg = int(cfg.get("hard_negatives", 8)), int(cfg.get("negatives", 8))
    rng = np.random.default_rng(int(cfg.get("seed", 13)))
    out, without, scanned = [], [], 0
    for q in questions:
        if len(out) >= n and len(without) >= n_none:
            break
        scanned += 1
        pos = pool.with_answer(q["answers"], q["match"])
        if not pos and len(without) >= n_none or pos and len(out) >= n:
            continue
        qwords = set(match_tokens(q["question"]))
        pos_set = set(pos)
        others = [i for i in range(len(pool.rows)) if i not in pos_set]
        overlap = sorted(others, key=lambda i: (-len(qwords & pool.words[i]), i))
        hard = overlap[:n_hard]
        rest = [i for i in others if i not in set(hard)]
        neg = sorted(rng.choice(len(rest), size=min(n_neg, len(rest)), replace=False).tolist())
        rec = {
            "dataset": dataset,
            "question": q["question"],
            "answers": q["answers"],
            "positive_ctxs": [pool.ctx(i, 1000, 1) for i in pos[:3]],
            "negative_ctxs": [pool.ctx(rest[j], 0, 0) for j in neg],
            "hard_negative_ctxs": [
                pool.ctx(i, float(len(qwords & pool.words[i])), 0) for i in hard
            ],
        }
        (out if pos else without).append(rec)
    if len(out) < n:
        raise ValueError(
            f"only {len(out)} of {scanned} questions have an answer in the pool of "
            f"{len(pool.rows)} passages (wanted {n}): widen the pool or the questions"
        )
    return out + without, {"with_positive": len(out), "without_positive": len(without),
                           "questions_scanned": scanned}  # fmt: skip


def questions_of(inputs: dict[str, list[Path]], cfg: dict[str, Any]) -> list[dict]:
    """The real questions a stand-in is made from: ``questions`` input in ``format``, from
    ``offset`` on (file order)."""
    (path,) = inputs["questions"]
    fmt = need(cfg, "format")
    match = cfg.get("match")
    qs, _ = load_questions(fmt, path, cfg.get("dataset", "standin"), "source", match=match)
    return qs[int(cfg.get("offset", 0)) :]


# ----------------------------------------------------------------------------- file kinds


def make_biencoder(inputs: dict[str, list[Path]], out: Path, cfg: dict[str, Any]) -> dict:
    pool = Pool(passage_pool(inputs, cfg))
    real = [r for p in inputs.get("records", []) for r in json.loads(open_text(p).read())]
    records, counts = biencoder_records(
        questions_of(inputs, cfg), pool, cfg, need(cfg, "dataset_name")
    )
    n = write_dpr_json(out, [*real, *records])
    return {"records": n, "real_records": len(real), "pool_passages": len(pool.rows), **counts}


def make_qa_csv(inputs: dict[str, list[Path]], out: Path, cfg: dict[str, Any]) -> dict:
    qs = questions_of(inputs, cfg)[: int(need(cfg, "n"))]
    with atomic_path(out) as tmp:
        target = tmp.with_name(tmp.name + out.suffix) if out.suffix == ".gz" else tmp
        with open_text(target, "wt") as fh:
            for q in qs:
                # DPR's layout: the question, a tab, the answers as a Python list literal.
                text = " ".join(q["question"].split())
                fh.write(f"{text}\t{q['answers']!r}\n")
        if target != tmp:
            target.replace(tmp)
    return {"questions": len(qs)}


def make_psgs_w100(inputs: dict[str, list[Path]], out: Path, cfg: dict[str, Any]) -> dict:
    return {"passages": write_dpr_tsv(out, passage_pool(inputs, cfg))}


def _pages(dump: Path) -> Iterator[bytes]:
    """The ``<page>...</page>`` elements of a MediaWiki XML dump, as bytes."""
    buf: list[bytes] = []
    with open_binary(dump) as fh:
        for line in fh:
            if b"<page>" in line:
                buf = []
            if buf is not None:
                buf.append(line)
            if b"</page>" in line:
                yield b"".join(buf)
                buf = []


def _page_xml(page_id: int, title: str, text: str) -> bytes:
    esc = html.escape
    return (
        f"  <page>\n    <title>{esc(title)}</title>\n    <ns>0</ns>\n    <id>{page_id}</id>\n"
        f"    <revision>\n      <id>{page_id}</id>\n      <model>wikitext</model>\n"
        f'      <format>text/x-wiki</format>\n      <text xml:space="preserve">{esc(text)}'
        "</text>\n    </revision>\n  </page>\n"
    ).encode()


def make_wiki_dump(inputs: dict[str, list[Path]], out: Path, cfg: dict[str, Any]) -> dict:
    """Pool pages (one per title, its passages in pool order as paragraphs), then the first
    ``dump_pages`` articles of the real dump (redirects and other namespaces kept as they are,
    not counted)."""
    (dump,) = inputs["dump"]
    head = b""
    with open_binary(dump) as fh:
        for line in fh:
            if b"<page>" in line:
                break
            head += line
    by_title: dict[str, list[str]] = {}
    for _, text, title in passage_pool(inputs, cfg):
        by_title.setdefault(title, []).append(text)
    want = cfg.get("dump_pages")
    n_real = 0
    with atomic_path(out) as tmp, bz2.open(tmp, "wb") as fh:
        fh.write(head)
        for i, (title, texts) in enumerate(by_title.items()):
            fh.write(_page_xml(90_000_000 + i, title, "\n\n".join(texts)))
        for page in _pages(dump):
            article = b"<ns>0</ns>" in page and b"<redirect" not in page
            if want is not None and article and n_real >= int(want):
                break
            n_real += article
            fh.write(page)
        fh.write(b"</mediawiki>\n")
    return {"pool_pages": len(by_title), "dump_articles": n_real}


def _words(paths: Iterable[Path]) -> Counter[str]:
    counts: Counter[str] = Counter()
    for p in paths:
        with open_text(p, errors="replace") as fh:
            for line in fh:
                counts.update(_WORD.findall(line.lower()))
    return counts


def make_tiny_bert(inputs: dict[str, list[Path]], out: Path, cfg: dict[str, Any]) -> dict:
    """A random BERT of bert-base's vocabulary size and positions, tiny hidden sizes."""
    import torch  # lazy: the CLI imports this module for every command
    from transformers import BertConfig, BertModel, BertTokenizerFast

    size = int(cfg.get("vocab_size", 30522))
    counts = _words(inputs.get("texts", []))
    words = [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    vocab = SPECIAL_TOKENS + sorted(words[: size - len(SPECIAL_TOKENS)])
    with atomic_path(out, directory=True) as tmp:
        (tmp / "vocab.txt").write_text("\n".join(vocab) + "\n")
        tok = BertTokenizerFast(vocab_file=str(tmp / "vocab.txt"), do_lower_case=True)
        config = BertConfig(
            vocab_size=len(vocab),
            hidden_size=int(cfg.get("hidden_size", 32)),
            num_hidden_layers=int(cfg.get("layers", 2)),
            num_attention_heads=int(cfg.get("heads", 2)),
            intermediate_size=int(cfg.get("intermediate_size", 64)),
            max_position_embeddings=int(cfg.get("max_positions", 512)),
        )
        torch.manual_seed(int(cfg.get("seed", 13)))
        BertModel(config).save_pretrained(tmp)
        tok.save_pretrained(tmp)
    return {"vocab_size": len(vocab), "words_seen": len(counts), **config_summary(config)}


def config_summary(config: Any) -> dict[str, int]:
    keys = ("hidden_size", "num_hidden_layers", "num_attention_heads", "max_position_embeddings")
    return {k: int(getattr(config, k)) for k in keys}


def _base_bert(inputs: dict[str, list[Path]]):
    from transformers import BertConfig

    (base,) = inputs["base"]
    return base, BertConfig.from_pretrained(base)


def make_dpr_hf(inputs: dict[str, list[Path]], out: Path, cfg: dict[str, Any]) -> dict:
    """A DPR question or context encoder (``encoder``: question | ctx) in the layout of
    ``facebook/dpr-*-base`` on the hub: DPR config and weights, and its tokenizer."""
    import torch
    from transformers import (
        DPRConfig,
        DPRContextEncoder,
        DPRContextEncoderTokenizerFast,
        DPRQuestionEncoder,
        DPRQuestionEncoderTokenizerFast,
    )

    base, bert = _base_bert(inputs)
    side = need(cfg, "encoder")
    model_cls, tok_cls = {
        "question": (DPRQuestionEncoder, DPRQuestionEncoderTokenizerFast),
        "ctx": (DPRContextEncoder, DPRContextEncoderTokenizerFast),
    }[side]
    config = DPRConfig(**{k: v for k, v in bert.to_dict().items() if k in DPRConfig().to_dict()})
    config.projection_dim = 0
    torch.manual_seed(int(cfg.get("seed", 13)))
    with atomic_path(out, directory=True) as tmp:
        model_cls(config).save_pretrained(tmp)
        tok_cls(vocab_file=str(Path(base) / "vocab.txt"), do_lower_case=True).save_pretrained(tmp)
    return {"encoder": side, **config_summary(config)}


def make_dpr_cp(inputs: dict[str, list[Path]], out: Path, cfg: dict[str, Any]) -> dict:
    """DPR's checkpoint file: ``torch.save`` of ``CheckpointState._asdict()`` whose
    ``model_dict`` is DPR's BiEncoder (``question_model.`` / ``ctx_model.`` BERTs, pooler
    included, as DPR's HFBertEncoder has it) and ``encoder_params`` its encoder settings."""
    import torch
    from transformers import BertModel

    _, bert = _base_bert(inputs)
    torch.manual_seed(int(cfg.get("seed", 13)))
    state: dict[str, Any] = {}
    for prefix in ("question_model.", "ctx_model."):
        for k, v in BertModel(bert).state_dict().items():
            state[prefix + k] = v
    cp = {
        "model_dict": state,
        "optimizer_dict": {},
        "scheduler_dict": {},
        "offset": 0,
        "epoch": int(cfg.get("epoch", 39)),
        "encoder_params": {
            "do_lower_case": True,
            "pretrained_model_cfg": need(cfg, "pretrained_model_cfg"),
            "encoder_model_type": "hf_bert",
            "pretrained_file": None,
            "projection_dim": 0,
            "sequence_length": int(cfg.get("sequence_length", 256)),
        },
    }
    with atomic_path(out) as tmp:
        torch.save(cp, tmp)
    return {"tensors": len(state), **config_summary(bert)}


MAKERS = {
    "wiki_dump": make_wiki_dump,
    "psgs_w100": make_psgs_w100,
    "biencoder": make_biencoder,
    "qa_csv": make_qa_csv,
    "tiny_bert": make_tiny_bert,
    "dpr_hf": make_dpr_hf,
    "dpr_cp": make_dpr_cp,
}


def _digest(path: Path) -> str:
    """sha256 of a file, or of a directory's files (names and bytes, in name order)."""
    if path.is_file():
        return file_digest(path)
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(path)).encode() + b"\0" + file_digest(f).encode())
    return h.hexdigest()


def make_standin(
    kind: str, inputs: dict[str, list[Path]], out: Path, cfg: dict[str, Any]
) -> dict[str, Any]:
    """Write stand-in ``kind`` at ``out``; return its provenance record."""
    if kind not in MAKERS:
        raise ValueError(f"unknown stand-in kind {kind!r}; expected one of {KINDS}")
    for name, paths in inputs.items():
        for p in paths:
            if not p.exists():
                raise InputError(p, f"input {name}", "does not exist")
    counts = MAKERS[kind](inputs, out, cfg)
    return {
        "origin": "stand-in",
        "kind": kind,
        "file": str(out),
        "sha256": _digest(out),
        "bytes": sum(f.stat().st_size for f in out.rglob("*"))
        if out.is_dir()
        else out.stat().st_size,
        "made_from": {
            name: [{"file": str(p), "sha256": _digest(p)} for p in paths]
            for name, paths in sorted(inputs.items())
        },
        "cfg": cfg,
        "counts": counts,
        "note": "a stand-in of the paper input's format, made from real data for the "
        "rehearsal scale (drpipe standin); its numbers mean nothing",
    }


def _name_paths(text: str) -> tuple[str, Path]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=PATH, not {text!r}")
    return name, Path(path)


def _cmd_standin(args: argparse.Namespace) -> None:
    inputs: dict[str, list[Path]] = {}
    for name, path in args.inputs or []:
        inputs.setdefault(name, []).append(path)
    record = make_standin(args.kind, inputs, Path(args.out), args.cfg)
    write_json(args.record, record)
    log.info("stand-in %s: %s (%s)", args.kind, args.out, json.dumps(record["counts"]))


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "standin", help="make a stand-in input of a paper input's format from real data"
    )
    p.add_argument("--kind", required=True, choices=KINDS)
    p.add_argument(
        "--inputs", nargs="*", type=_name_paths, metavar="NAME=PATH",
        help="real files it is made from (a name may repeat)",
    )  # fmt: skip
    p.add_argument("--out", required=True, help="file (or model directory) to write")
    p.add_argument("--record", required=True, help="JSON provenance record to write")
    add_cfg(p)
    p.set_defaults(func=_cmd_standin)
