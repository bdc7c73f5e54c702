"""DCSR as a method: <sent> markers, sentence vectors, training batches, loss, checkpoints.

Real text throughout: DPR's psgs_w100 sample and SQuAD dev paragraphs (as passages, split by
DCSR's rule). Training-loop tests use a tiny randomly initialised BERT with a vocabulary of
those words (seconds); vector tests use the packaged all-MiniLM-L6-v2.
"""

from __future__ import annotations

import csv
import gzip
import itertools
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from ranks import assert_close_to_scale, fork_ranks, join_gloo, leave_gloo
from tiny_models import save_tiny_bert, truncated_minilm

from drpipe.corpus.passages import PASSAGE_SCHEMA
from drpipe.corpus.sentences import dcsr_sentence_starts, split_passages, tile
from drpipe.encoders import BiEncoder
from drpipe.io import write_jsonl
from drpipe.methods import get_method
from drpipe.methods.base import SENT_SLOTS, CollateContext, CorpusBlock, DistContext, EncodeSettings
from drpipe.methods.dcsr_parts import scoring
from drpipe.methods.dcsr_parts.markers import (
    marked_pieces,
    marked_text,
    sentence_states,
    tokenize_marked,
)
from drpipe.qa.matching import has_answer
from drpipe.training.build import build_model
from drpipe.training.loop import train_model
from drpipe.training.validation import validate

# all-MiniLM-L6-v2's first layer (its tokenizer and pretrained weights): these tests check
# DCSR's code, not its accuracy.
MINILM = str(truncated_minilm(1))
# Made-up passages for the corner cases: every sentence holds the answer ("Zorbanite"), and a
# BM25 negative for it.
ALL_ANSWER = (
    "Zorbanite was found in the northern hills of the old county. "
    "Miners carried Zorbanite down the valley on wooden carts every spring. "
    "Traders sold Zorbanite in the market towns along the river."
)
OTHER = (
    "The river bends twice before it reaches the sea near the harbour town. "
    "Fishermen there mend their nets in the long summer evenings by the quay."
)


def _spans(text: str) -> list[tuple[int, int]]:
    return tile(len(text), dcsr_sentence_starts(text))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, data_mirror) -> dict:
    """Passages = the paragraphs of three SQuAD dev articles (+ two made-up ones)."""
    out = tmp_path_factory.mktemp("dcsr_corpus")
    with gzip.open(data_mirror / "squad" / "squad-dev-v1.1.reconstructed.json.gz", "rt") as fh:
        data = json.load(fh)["data"][:3]
    rows, paras = [], []
    for a, art in enumerate(data):
        for p in art["paragraphs"]:
            pid = 100 + len(rows)
            rows.append({"pid": pid, "title": art["title"], "text": p["context"], "source": "s",
                         "doc_id": a})  # fmt: skip
            paras.append((a, pid, p))
    for pid, text in ((900, ALL_ANSWER), (901, OTHER)):
        rows.append({"pid": pid, "title": "Made up", "text": text, "source": "t", "doc_id": 9})
    pq.write_table(pa.Table.from_pylist(rows, schema=PASSAGE_SCHEMA), out / "p.parquet")
    report = split_passages(out / "p.parquet", out / "s.parquet", splitter="dcsr")
    (out / "s.report.json").write_text(json.dumps(report))
    return {"dir": out, "rows": {r["pid"]: r for r in rows}, "paras": paras,
            "paths": {"passages": out / "p.parquet", "sentences": out / "s.parquet",
                      "sentences_report": out / "s.report.json"}}  # fmt: skip


def _ctx(row: dict) -> dict:
    return {"passage_id": row["pid"], "title": row["title"], "text": row["text"]}


@pytest.fixture(scope="module")
def examples(corpus) -> list[dict]:
    rows, out = corpus["rows"], []
    for a, pid, p in corpus["paras"]:
        qa = p["qas"][0]
        answers = [x["text"] for x in qa["answers"]]
        hard = [_ctx(rows[q]) for b, q, _ in corpus["paras"]
                if b == a and q != pid and not has_answer(answers, rows[q]["text"])][:4]  # fmt: skip
        rand = [_ctx(rows[q]) for b, q, _ in corpus["paras"] if b != a][:3]
        out.append({"qid": qa["id"], "question": qa["question"], "answers": answers,
                    "positive_ctxs": [_ctx(rows[pid])], "hard_negative_ctxs": hard,
                    "negative_ctxs": rand})  # fmt: skip
        if len(out) == 30:
            break
    return out


def _straddling(corpus) -> dict:
    """An example whose answer runs across a sentence boundary of its positive passage."""
    for _, pid, p in corpus["paras"]:
        text = p["context"]
        spans = _spans(text)
        if len(spans) > 2:
            s0, s1 = text[spans[0][0] : spans[0][1]], text[spans[1][0] : spans[1][1]]
            answer = f"{s0.split()[-1]} {s1.split()[0]}"
            return {"qid": "straddle", "question": "What crosses the boundary?",
                    "answers": [answer], "positive_ctxs": [_ctx(corpus["rows"][pid])],
                    "hard_negative_ctxs": [_ctx(corpus["rows"][901])], "negative_ctxs": []}  # fmt: skip
    raise AssertionError("no passage with three sentences")


def _all_answer() -> dict:
    return {"qid": "all", "question": "Which mineral came from the hills?",
            "answers": ["Zorbanite"],
            "positive_ctxs": [{"passage_id": 900, "title": "Made up", "text": ALL_ANSWER}],
            "hard_negative_ctxs": [{"passage_id": 901, "title": "Made up", "text": OTHER}],
            "negative_ctxs": []}  # fmt: skip


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory, corpus, examples) -> str:
    texts = [r["title"] + " " + r["text"] for r in corpus["rows"].values()]
    texts += [ex["question"] for ex in examples] + ["What crosses the boundary?"]
    return save_tiny_bert(tmp_path_factory.mktemp("tiny_bert"), texts, max_positions=512)


def tiny_cfg(init: str, **over) -> dict:
    cfg = {"init": init, "pooling": "cls", "tied": False, "dropout": 0.1, "max_query_len": 32,
           "max_passage_len": 256, "lr": 1e-3, "warmup_steps": 2, "epochs": 2, "batch_size": 4,
           "val_fraction": 0.2, "checkpoint_every": 2, "bf16": "off", "threads": 1,
           "log_every": 1}  # fmt: skip
    return {**cfg, **over}


@pytest.fixture(scope="module")
def minilm() -> BiEncoder:
    model = BiEncoder.from_init(MINILM, pooling="mean", max_passage_len=512, add_tokens=["<sent>"])
    model.method = {"name": "dcsr", "cfg": {"sentences_per_passage": 4.0}}
    return model.eval()


@pytest.fixture(scope="module")
def dpr_passages(data_mirror) -> list[dict]:
    with open(data_mirror / "dpr" / "psgs_w100.sample.tsv", newline="") as fh:
        return [{"pid": int(r["id"]), "title": r["title"], "text": r["text"]}
                for r in csv.DictReader(fh, delimiter="\t")]  # fmt: skip


# ----------------------------------------------------------------------------- markers


def test_sent_positions_are_the_sentence_offsets(minilm, dpr_passages):
    """Every passage of the real sample: marker j sits where sentence j starts (text segment,
    never among the title's tokens), and the token after it is the sentence's first word."""
    tok = minilm.tokenizer
    sent_id = tok.convert_tokens_to_ids("<sent>")
    titles = [p["title"] for p in dpr_passages]
    texts = [p["text"] for p in dpr_passages]
    spans = [_spans(t) for t in texts]
    mb = tokenize_marked(tok, titles, texts, spans, 512)
    enc = tok(titles, [marked_text(t, sp) for t, sp in zip(texts, spans, strict=True)],
              truncation="longest_first", max_length=512, return_offsets_mapping=True)  # fmt: skip
    checked = 0
    for i, (text, sp) in enumerate(zip(texts, spans, strict=True)):
        ids, offsets, seq = enc["input_ids"][i], enc["offset_mapping"][i], enc.sequence_ids(i)
        assert mb.positions[i] == [j for j, t in enumerate(ids) if t == sent_id]
        assert len(mb.positions[i]) == len(sp) and not mb.text_cut[i]
        assert all(seq[j] == 1 for j in mb.positions[i])  # markers are never title tokens
        pieces = marked_pieces(text, sp)
        at = 0  # where piece j starts in the marked text
        for j, (s, e) in enumerate(sp):
            pos = mb.positions[i][j]
            assert offsets[pos] == (at, at + len("<sent>"))
            lead = len(text[s:e]) - len(text[s:e].lstrip())
            if text[s:e].strip():
                # marked offset of the next token - its piece start - "<sent> " = its text offset
                assert offsets[pos + 1][0] - at - len("<sent> ") + s == s + lead
                checked += 1
            at += len(pieces[j])
    assert checked > 3 * len(dpr_passages)


def test_cut_sentences_are_reported(minilm, dpr_passages):
    """At 128 tokens some sentences lose their marker: they get no vector and are counted."""
    method = get_method("dcsr")
    rows = dpr_passages[:60]
    spans = [_spans(p["text"]) for p in rows]
    block = CorpusBlock(np.array([p["pid"] for p in rows], dtype=np.int64),
                        [p["title"] for p in rows], [p["text"] for p in rows], spans)  # fmt: skip
    model = BiEncoder.from_init(MINILM, pooling="mean", max_passage_len=128, add_tokens=["<sent>"])
    settings = EncodeSettings(batch_size=16, bf16=False, device=torch.device("cpu"))
    units, vecs = method.encode_corpus(model, block, settings)
    report = method.encode_report()
    n_sent = sum(len(s) for s in spans)
    assert vecs.shape == (len(units), 384) and np.isfinite(vecs).all()
    assert report["sentences"] == n_sent and report["sentences_cut"] == n_sent - len(units) > 0
    assert report["passages_with_cut_sentences"] > 0
    # Units: pid * SENT_SLOTS + sentence number, the first sentences of each passage, in order.
    pids, sents = units // SENT_SLOTS, units % SENT_SLOTS
    for pid, sp in zip(block.pids, spans, strict=True):
        got = sents[pids == pid].tolist()
        assert got == list(range(len(got))) and 1 <= len(got) <= len(sp)


def test_saved_checkpoint_gives_the_same_sentence_vectors(tmp_path, dpr_passages):
    from transformers import AutoModel, AutoTokenizer

    model = BiEncoder.from_init(MINILM, pooling="mean", max_passage_len=256, add_tokens=["<sent>"])
    with torch.no_grad():  # a marker embedding of its own, as training leaves it
        emb = model.passage.model.get_input_embeddings().weight
        emb[-1] = torch.linspace(-0.05, 0.05, emb.shape[1])
    model.method = {"name": "dcsr", "cfg": {"sentences_per_passage": 4.0}}
    rows = dpr_passages[:12]
    spans = [_spans(p["text"]) for p in rows]
    block = CorpusBlock(np.array([p["pid"] for p in rows], dtype=np.int64),
                        [p["title"] for p in rows], [p["text"] for p in rows], spans)  # fmt: skip
    settings = EncodeSettings(batch_size=5, bf16=False, device=torch.device("cpu"))
    units, vecs = get_method("dcsr").encode_corpus(model, block, settings)
    _, span_vecs = get_method("dcsr", {"sentence_pooling": "span"}).encode_corpus(
        model, block, settings
    )
    model.save(tmp_path / "m")

    tok = AutoTokenizer.from_pretrained(tmp_path / "m" / "passage")
    enc_model = AutoModel.from_pretrained(tmp_path / "m" / "passage").eval()
    sent_id = tok.convert_tokens_to_ids("<sent>")
    assert tok.convert_ids_to_tokens(sent_id) == "<sent>"
    expect, expect_span = [], []
    for p, sp in zip(rows, spans, strict=True):
        marked = "".join("<sent> " + p["text"][s:e] for s, e in sp)
        batch = tok(p["title"], marked, truncation="longest_first", max_length=256,
                    return_tensors="pt")  # fmt: skip
        batch["token_type_ids"] = torch.zeros_like(batch["token_type_ids"])
        with torch.no_grad():
            states = enc_model(**batch).last_hidden_state[0]
        marks = (batch["input_ids"][0] == sent_id).nonzero().ravel().tolist()
        expect.append(states[marks].numpy())
        # span: from each marker to the token before the next marker (or the final [SEP])
        bounds = [*marks, len(batch["input_ids"][0]) - 1]
        expect_span += [
            states[a:b].mean(0).numpy() for a, b in zip(bounds[:-1], bounds[1:], strict=True)
        ]
    np.testing.assert_allclose(vecs, np.concatenate(expect), atol=2e-5)
    np.testing.assert_allclose(span_vecs, np.stack(expect_span), atol=2e-5)
    reloaded = BiEncoder.load(tmp_path / "m")
    assert reloaded.method["name"] == "dcsr"
    _, again = get_method("dcsr").encode_corpus(reloaded, block, settings)
    np.testing.assert_allclose(again, vecs, atol=2e-5)


# ----------------------------------------------------------------------------- training


def _prepared(corpus, examples, **cfg):
    method = get_method("dcsr", cfg)
    method.prepare(corpus["paths"], examples)
    return method


def test_prepare_counts_drops_and_measures_k(corpus, examples):
    method = _prepared(corpus, [*examples, _straddling(corpus), _all_answer()])
    c = method.counts
    assert c["examples"] == len(examples) + 2
    assert c["dropped_no_answer_sentence"] == 1  # the straddling answer
    assert c["dropped_positive_not_in_corpus"] == 0
    n_sent = pq.read_metadata(corpus["paths"]["sentences"]).num_rows
    n_psg = pq.read_metadata(corpus["paths"]["passages"]).num_rows
    assert method.cfg["sentences_per_passage"] == pytest.approx(n_sent / n_psg, abs=1e-4)
    # A passage text that differs from the corpus's is not trusted with its spans: it is cut
    # from its own text, or (unmatched_passages: drop) its example is dropped.
    bad = {**examples[0], "positive_ctxs": [{**examples[0]["positive_ctxs"][0], "text": "x y"}]}
    assert _prepared(corpus, [bad]).counts["positives_cut_from_own_text"] == 1
    dropped = _prepared(corpus, [bad], unmatched_passages="drop")
    assert dropped.counts["dropped_positive_not_in_corpus"] == 1
    assert list(dropped.dropped_examples()) == [0]


def _slot_sentence(batch, method, slot: int, texts: dict) -> tuple[int, str]:
    unit = int(batch.slot_unit[slot])
    pid, sent = unit // SENT_SLOTS, unit % SENT_SLOTS
    s, e = method.passages[pid][1][sent]
    return pid, texts[pid][s:e]


def test_collate_samples_the_paper_negatives(corpus, examples, tiny_bert):
    model = build_model(tiny_cfg(tiny_bert), ["<sent>"])
    extra = [_straddling(corpus), _all_answer()]
    pool = [*examples[:6], *extra]
    method = _prepared(corpus, pool)
    texts = {pid: r["text"] for pid, r in corpus["rows"].items()}
    ctx = CollateContext(model=model, seed=5, epoch=0, sample=True, pool=pool)
    items = list(enumerate(pool))
    batch = method.collate(items, ctx)
    assert batch.n_questions == 7  # the straddling answer is dropped
    assert batch.slot_unit.shape[0] == 3 * batch.n_questions  # positive, in-passage, BM25
    kept = [ex for ex in pool if ex["qid"] != "straddle"]
    fallbacks = 0
    for q, ex in enumerate(kept):
        pos = int(batch.positive[q])
        pid, sentence = _slot_sentence(batch, method, pos, texts)
        assert pid == ex["positive_ctxs"][0]["passage_id"]
        assert has_answer(ex["answers"], sentence)
        in_pid, in_sent = _slot_sentence(batch, method, pos + 1, texts)
        bm_pid, _ = _slot_sentence(batch, method, pos + 2, texts)
        hard = {c["passage_id"] for c in ex["hard_negative_ctxs"]}
        assert bm_pid in hard
        spans = method.passages[pid][1]
        free = [
            j for j, (a, b) in enumerate(spans) if not has_answer(ex["answers"], texts[pid][a:b])
        ]
        if not free:
            # Every sentence has the answer (the made-up passage, and some real ones): the
            # in-passage negative is another sentence of the BM25 passage.
            assert in_pid == bm_pid and in_pid in hard
            fallbacks += 1
        else:
            assert in_pid == pid and not has_answer(ex["answers"], in_sent)
    assert ex["qid"] == "all" and fallbacks >= 1
    assert method.counts["train_in_passage_fallbacks"] == fallbacks
    # Deterministic per (seed, epoch, index); another epoch draws anew.
    again = method.collate(items, ctx)
    assert torch.equal(again.slot_unit, batch.slot_unit)
    later = method.collate(items, CollateContext(model=model, seed=5, epoch=1, sample=True,
                                                 pool=pool))  # fmt: skip
    assert not torch.equal(later.slot_unit, batch.slot_unit)
    # Table 4's other schemes: one or two BM25 sentences, no in-passage negative.
    two = _prepared(corpus, pool, bm25_negatives=2, in_passage_negatives=0)
    b2 = two.collate(items, ctx)
    ends = [*b2.positive.tolist()[1:], int(b2.slot_unit.shape[0])]
    short = 0
    for start, end in zip(b2.positive.tolist(), ends, strict=True):
        negs = [_slot_sentence(b2, two, j, texts)[0] for j in range(start + 1, end)]
        assert len(set(negs)) == len(negs)  # from two different BM25 passages
        short += 2 - len(negs)
    assert short == b2.short_negatives and b2.slot_unit.shape[0] > 2 * b2.n_questions


def test_loss_uses_all_sampled_sentences_and_score_normalization(
    corpus, examples, tiny_bert, monkeypatch
):
    model = build_model(tiny_cfg(tiny_bert), ["<sent>"])
    method = _prepared(corpus, examples)
    calls = []
    real = scoring.score_normalization

    def spy(*args, **kwargs):
        calls.append(args[0].shape)
        return real(*args, **kwargs)

    monkeypatch.setattr(scoring, "score_normalization", spy)
    ctx = CollateContext(model=model, seed=1, epoch=0, sample=True, pool=examples)
    batch = method.collate(list(enumerate(examples[:8])), ctx)
    loss, stats = method.loss(model, batch, DistContext(), train=True)
    assert torch.isfinite(loss) and stats["n_questions"] == 8 and stats["n_sentences"] == 24
    loss.backward()
    sent_row = model.passage.model.get_input_embeddings().weight.grad[-1]
    assert sent_row.abs().sum() > 0  # the marker embedding learns
    # Validation ranks passages with the retrieval function (one call per batch).
    calls.clear()
    val = validate(method, model, examples[:8], tiny_cfg(tiny_bert, val_batch_size=8, seed=3), DistContext(),
                   torch.device("cpu"), False)  # fmt: skip
    assert calls and val["avg_rank"] >= 1 and 0 <= val["accuracy"] <= 1


def test_validation_counts_the_positive_sentence_first(corpus, examples, tiny_bert):
    """Appendix A's measure (and the released code's "correct prediction ratio"): the positive
    sentence ranked first among the batch's sentences; the passage measure is reported beside
    it. Computed here from the model's own vectors, independently of ``loss``."""
    model = build_model(tiny_cfg(tiny_bert), ["<sent>"]).eval()
    method = _prepared(corpus, examples)
    val = examples[:12]
    ctx = CollateContext(model=model, seed=3, epoch=0, sample=False, pool=val)
    batch = method.collate(list(enumerate(val)), ctx)
    with torch.no_grad():
        q = model.query(batch.queries)
        s = sentence_states(model.passage, batch.passages.inputs, batch.slot_row,
                            batch.slot_pos, batch.slot_end, method.cfg["sentence_pooling"])  # fmt: skip
    scores = (q @ s.T).double().numpy()
    positive = batch.positive.numpy()
    sentence_first = scores.argmax(1) == positive
    passage_ranks = scoring.positive_passage_ranks(scores, batch.slot_unit.numpy(), positive)
    cfg = tiny_cfg(tiny_bert, val_batch_size=12, seed=3)
    out = validate(method, model, val, cfg, DistContext(), torch.device("cpu"), False)
    assert out["n_questions"] == len(positive) == 12
    assert out["accuracy"] == pytest.approx(sentence_first.mean())
    assert out["passage_accuracy"] == pytest.approx((passage_ranks == 1).mean())
    assert out["passage_avg_rank"] == pytest.approx(passage_ranks.mean())
    # The two measures differ on this batch (its in-passage negatives share their passage with
    # the positive), so the test tells them apart.
    assert sentence_first.mean() != (passage_ranks == 1).mean()


def test_retrieval_uses_score_normalization(monkeypatch):
    from drpipe.retrieve import search_passages

    method = get_method("dcsr", {"sentences_per_passage": 2.5})
    seen = {}

    class Index:
        n = 1000

        def search(self, q, depth):
            seen["depth"] = depth
            units = np.arange(depth)[None, :].repeat(len(q), 0)  # pid 0, sentences 0..
            return -np.arange(depth, dtype=np.float32)[None, :].repeat(len(q), 0), units

    calls = []
    real = scoring.score_normalization
    monkeypatch.setattr(scoring, "score_normalization",
                        lambda *a, **k: calls.append(1) or real(*a, **k))  # fmt: skip
    scores, pids = search_passages(method, Index(), np.zeros((3, 4), np.float32), 10)
    assert seen["depth"] == 25 and calls == [1] and pids.shape == (3, 10)


def test_training_resumes_identically_and_reports_drops(tmp_path, corpus, examples, tiny_bert):
    train = tmp_path / "train.jsonl.gz"
    write_jsonl(train, [*examples, _straddling(corpus)])
    cfg = tiny_cfg(tiny_bert)
    full = train_model("dcsr", [train], tmp_path / "full", cfg, corpus=corpus["paths"])
    out = tmp_path / "killed"
    assert train_model("dcsr", [train], out, cfg, corpus=corpus["paths"], stop_after=5) == {
        "stopped_at_step": 5
    }
    resumed = train_model("dcsr", [train], out, cfg, corpus=corpus["paths"])
    assert resumed["resumed_from_step"] == 4 and resumed["dcsr"] == full["dcsr"]
    a, b = BiEncoder.load(tmp_path / "full"), BiEncoder.load(out)
    sa, sb = a.state_dict(), b.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert full["val_curve"] == resumed["val_curve"]
    # Checkpoints are selected on the sentence measure (then the loss); the passage one is
    # reported beside it.
    curve = full["val_curve"]
    assert all({"accuracy", "passage_accuracy", "passage_avg_rank"} <= set(e) for e in curve)
    best = min(curve, key=lambda e: (e["avg_rank"], e["loss"]))
    assert full["best_epoch"] == best["epoch"]
    assert full["dcsr"]["dropped_no_answer_sentence"] == 1
    k = a.method["cfg"]["sentences_per_passage"]
    assert a.method["name"] == "dcsr" and 2 < k < 10
    assert (
        json.loads((Path(tmp_path / "full") / "drpipe_encoder.json").read_text())["method"]["cfg"][
            "sentences_per_passage"
        ]
        == k
    )


def test_a_batch_whose_questions_all_drop_gives_a_zero_loss(corpus, tiny_bert):
    model = build_model(tiny_cfg(tiny_bert), ["<sent>"])
    straddle = _straddling(corpus)
    method = _prepared(corpus, [straddle])
    ctx = CollateContext(model=model, seed=1, epoch=0, sample=True, pool=[straddle])
    batch = method.collate([(0, straddle)], ctx)
    assert batch.n_questions == 0
    loss, stats = method.loss(model, batch, DistContext(), train=True)
    loss.backward()  # zero gradients reach the encoders, so ranks stay in step
    assert float(loss.detach()) == 0.0 and stats["n_questions"] == 0.0
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(float(g.abs().sum()) == 0.0 for g in grads)


def test_sentence_specific_hard_negatives_use_the_mined_sentence(corpus, examples, tiny_bert):
    # Table 5's DCSR-hard: a hard negative mined by a trained DCSR names the sentence that
    # checkpoint retrieved; that sentence is the negative, not a random one of its passage.
    model = build_model(tiny_cfg(tiny_bert), ["<sent>"])
    pool = examples[:6]
    mined, wanted = [], {}
    for ex in pool:
        first = ex["hard_negative_ctxs"][0]
        # The second sentence (within the maximum length of the tiny model's passages).
        pick = min(1, len(_spans(corpus["rows"][first["passage_id"]]["text"])) - 1)
        wanted[ex["qid"]] = (first["passage_id"], pick)
        mined.append({**ex, "hard_negative_ctxs": [{**first, "sentence": pick}]})
    items = list(enumerate(mined))
    ctx = CollateContext(model=model, seed=5, epoch=0, sample=True, pool=mined)
    method = _prepared(corpus, mined, in_passage_negatives=0)
    batch = method.collate(items, ctx)
    for q, ex in enumerate(mined):
        unit = int(batch.slot_unit[int(batch.positive[q]) + 1])
        assert (unit // SENT_SLOTS, unit % SENT_SLOTS) == wanted[ex["qid"]]
    assert method.counts["train_mined_negative_sentences"] == len(mined)
    # Across epochs the mined sentence stays (a random draw would move).
    later = method.collate(items, CollateContext(model=model, seed=5, epoch=3, sample=True,
                                                 pool=mined))  # fmt: skip
    assert torch.equal(later.slot_unit[1::2], batch.slot_unit[1::2])
    # mined_sentences: false reads them as BM25 passages: a random sentence each.
    plain = _prepared(corpus, mined, in_passage_negatives=0, mined_sentences=False)
    draws = {
        int(
            plain.collate(
                items, CollateContext(model=model, seed=5, epoch=e, sample=True, pool=mined)
            ).slot_unit[1]
        )  # fmt: skip
        for e in range(6)
    }
    assert len(draws) > 1 and plain.counts["train_mined_negative_sentences"] == 0
    # A mined sentence beyond the maximum length is counted, and a random one stands in.
    far = [{**mined[0], "hard_negative_ctxs": [{**mined[0]["hard_negative_ctxs"][0],
                                                "sentence": 999}]}]  # fmt: skip
    cut = _prepared(corpus, far, in_passage_negatives=0)
    cut.collate([(0, far[0])], ctx)
    assert cut.counts["train_mined_sentence_cut"] == 1


def test_retrieval_keeps_each_passages_best_sentence():
    from drpipe.retrieve import best_units, search_passages_units

    # Question 0 retrieves p3/s1, p5/s0, p3/s0, p7/s2; question 1 only p5/s4 then padding.
    units = np.array(
        [[3 * SENT_SLOTS + 1, 5 * SENT_SLOTS, 3 * SENT_SLOTS, 7 * SENT_SLOTS + 2],
         [5 * SENT_SLOTS + 4, -1, -1, -1]]
    )  # fmt: skip
    pids = np.array([[5, 3, 7], [5, -1, -1]])
    assert best_units(units, pids, "sentences").tolist() == [
        [5 * SENT_SLOTS, 3 * SENT_SLOTS + 1, 7 * SENT_SLOTS + 2],
        [5 * SENT_SLOTS + 4, -1, -1],
    ]
    method = get_method("dcsr", {"sentences_per_passage": 1.0})

    class Index:
        n = 4

        def search(self, q, depth):
            scores = np.array([[4.0, 3.0, 2.0, 1.0], [1.0, -np.inf, -np.inf, -np.inf]])
            return scores[:, :depth], units[:, :depth]

    _, got_pids, got_units = search_passages_units(method, Index(), np.zeros((2, 3)), 4)
    by_pid = {int(p): int(u) for p, u in zip(got_pids[0], got_units[0], strict=True) if p >= 0}
    assert by_pid == {3: 3 * SENT_SLOTS + 1, 5: 5 * SENT_SLOTS, 7: 7 * SENT_SLOTS + 2}
    dpr = get_method("dpr")
    assert search_passages_units(dpr, Index(), np.zeros((2, 3)), 2)[2] is None


# ----------------------------------------------------------------------------- ranks


def _one_step(init: str, paths: dict, pool: list[dict], part: list[int], ctx: DistContext):
    """Loss and summed gradients of one global batch ``pool`` (dropout off), this rank
    collating the examples ``part`` of it."""
    from drpipe.training.distributed import sum_gradients

    cfg = tiny_cfg(init, dropout=0.0)
    torch.manual_seed(0)
    model = build_model(cfg, ["<sent>"])
    method = get_method("dcsr", cfg)
    method.prepare(paths, pool)
    cctx = CollateContext(model=model, seed=1, epoch=0, sample=True, pool=pool)
    batch = method.collate([(i, pool[i]) for i in part], cctx)
    loss, stats = method.loss(model, batch, ctx, train=True)
    loss.backward()
    params = [p for p in model.parameters() if p.requires_grad]
    sum_gradients(params, ctx)
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return float(loss.detach()), stats, grads


# Each rank's part of the global batch (pool[3] is the example whose answer straddles two
# sentences, dropped): rank 1 left with no question, which must still join every gather and
# gradient sum; and both ranks with questions, rank 1's positives offset by rank 0's sentences.
SPLITS = {"empty": ([0, 1, 2], [3]), "offset": ([0, 3], [1, 2])}


def _ddp_dcsr_worker(rank: int, port: int, init: str, paths: dict, pool: list, out: str) -> None:
    join_gloo(rank, port)
    for split, parts in SPLITS.items():
        loss, stats, grads = _one_step(
            init, paths, pool, parts[rank], DistContext(rank=rank, world_size=2)
        )
        torch.save({"loss": loss, "stats": stats, "grads": grads}, Path(out) / f"{split}{rank}.pt")
    leave_gloo()


@pytest.mark.both_cores
def test_two_gloo_ranks_one_without_questions_match_one_process(
    tmp_path, corpus, examples, tiny_bert
):
    """DCSR under torchrun: sentence vectors gathered over ranks (each rank's slot keeps its
    gradient), a rank whose questions all dropped joins with zero gradients, and the summed
    gradients and the loss equal one process's on the whole global batch."""
    pool = [*examples[:3], _straddling(corpus)]
    paths = corpus["paths"]
    fork_ranks(_ddp_dcsr_worker, tiny_bert, paths, pool, str(tmp_path))
    torch.set_num_threads(1)
    loss, stats, grads = _one_step(tiny_bert, paths, pool, [0, 1, 2, 3], DistContext())
    assert stats["n_questions"] == 3  # the straddling one dropped here too
    top = max(float(g.abs().max()) for g in grads.values())
    for split, rank in itertools.product(SPLITS, (0, 1)):
        got = torch.load(tmp_path / f"{split}{rank}.pt")
        assert got["loss"] == pytest.approx(loss, rel=1e-5), split
        assert got["stats"]["n_questions"] == 3 and got["stats"]["correct"] == stats["correct"]
        assert got["grads"].keys() == grads.keys()
        for k, g in grads.items():
            assert_close_to_scale(got["grads"][k], g, 1e-5, f"{split}: {k}", scale=top)
