"""Tokenize once (drpipe.tokens): ids written once per tokenizer and passage format give the
vectors the text path gives, bit for bit (same batches, same padding), for DPR's pair, a
concatenated title with a prefix, and DCSR's marked sentences; the stored ids are checked
against the model; the feed keeps order and raises its thread's errors; the plan keys the ids
by tokenizer and format, so that every run that shares them reads one set of files."""

from __future__ import annotations

import gzip
import json
import threading

import numpy as np
import pyarrow as pa
import pytest
import torch
from tiny_models import truncated_minilm

from drpipe.cli import main as drpipe_main
from drpipe.corpus.passages import PASSAGE_SCHEMA
from drpipe.corpus.sentences import split_passages
from drpipe.encode import encode_shard
from drpipe.encoders import META_FILE, BiEncoder, TextFormat, resolve_init
from drpipe.errors import InputError
from drpipe.io import write_parquet
from drpipe.methods import get_method
from drpipe.methods.base import EncodeSettings
from drpipe.tokens import (
    TokenShard,
    background,
    load_tokenizer,
    pad_ids,
    paths,
    tokenize_shard,
    tokenizer_hash,
)

# all-MiniLM-L6-v2's first layer (the packaged tokenizer): equality of the two paths'
# vectors, bit for bit, needs no more layers, and they cost a third.
MINILM = str(truncated_minilm(1))
N = 26  # passages: 2 shards of 13, blocks of 5 (blocks cross shards' row groups)
ENC = {"batch_size": 4, "block_size": 5, "precision": "fp32", "threads": 1}
MAX_LEN = 96


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, data_mirror):
    """Real SQuAD dev paragraphs (with their article titles) and their DCSR sentences."""
    d = tmp_path_factory.mktemp("tokens_corpus")
    with gzip.open(data_mirror / "squad" / "squad-dev-v1.1.reconstructed.json.gz", "rt") as fh:
        data = json.load(fh)["data"]
    rows = []
    for a, art in enumerate(data):
        for p in art["paragraphs"][:4]:
            rows.append({"pid": 7 + 3 * len(rows), "title": art["title"].replace("_", " "),
                         "text": p["context"], "source": "s", "doc_id": a})  # fmt: skip
        if len(rows) >= N:
            break
    rows = rows[:N]
    rows[3]["text"] = "   "  # an empty text: counted, encoded from its title
    write_parquet(d / "p.parquet", pa.Table.from_pylist(rows, schema=PASSAGE_SCHEMA),
                  row_group_size=6)  # fmt: skip
    split_passages(d / "p.parquet", d / "s.parquet", splitter="dcsr")
    return d


def _model_dir(path, **kw):
    """A model directory of the MiniLM cut to one layer (weights linked, not copied)."""
    bi = BiEncoder.from_init(MINILM, pooling="mean", tied=True, max_passage_len=MAX_LEN, **kw)
    path.mkdir()
    for side in ("query", "passage"):
        (path / side).symlink_to(resolve_init(MINILM), target_is_directory=True)
    (path / META_FILE).write_text(json.dumps(bi.meta()))
    return bi


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("tokens_model") / "m"
    return path, _model_dir(path)


def _token_cfg(bi: BiEncoder) -> dict:
    fmt = bi.text
    return {"max_length": bi.max_passage_len, "passage_prefix": fmt.passage_prefix,
            "title": fmt.title, "title_sep": fmt.title_sep}  # fmt: skip


def _both_paths(model_dir, bi, corpus, out, cfg=ENC, **kw):
    """Vectors and ids of both shards from text and from stored ids."""
    got = {"text": [], "tokens": []}
    for shard in range(2):
        prefix = out / f"tok-{shard}"
        tokenize_shard(MINILM, corpus / "p.parquet", shard, 2, prefix, _token_cfg(bi))
        for how in got:
            vec = out / f"{how}-{shard}.npy"
            src = {"tokens": prefix} if how == "tokens" else {}
            rep = encode_shard(model_dir, corpus / "p.parquet" if how == "text" else None,
                               shard, 2, vec, cfg, model=bi, **src)  # fmt: skip
            assert rep["read"] == how
            got[how].append((np.load(vec), np.load(vec.with_suffix(".ids.npy")), rep))
    return got


def test_ids_give_the_text_paths_vectors_bit_for_bit(corpus, model, tmp_path):
    """DPR's pair: the same vectors (np.array_equal), ids and report counts from stored ids."""
    model_dir, bi = model
    got = _both_paths(model_dir, bi, corpus, tmp_path)
    for (tv, tid, trep), (kv, kid, krep) in zip(got["text"], got["tokens"], strict=True):
        assert tv.shape[1] == 384 and len(tv) == 13
        assert np.array_equal(tv, kv) and np.array_equal(tid, kid)
        assert trep["n_empty_text"] == krep["n_empty_text"]
        assert trep["rows"] == krep["rows"]
    assert got["tokens"][0][2]["n_empty_text"] == 1
    meta = json.loads(paths(tmp_path / "tok-0")["meta"].read_text())
    assert meta["tokenizer"]["hash"] == tokenizer_hash(bi.tokenizer)
    assert meta["id_dtype"] == "uint16" and meta["format"] == "passages"


def test_concat_title_and_prefix_bit_for_bit(corpus, tmp_path):
    """A sentence-transformers style format (prefix, title joined), tokenized through the CLI
    from the model directory, encoded at bf16."""
    text = TextFormat(passage_prefix="passage: ", title="concat", title_sep=" | ")
    model_dir = tmp_path / "m"
    bi = _model_dir(model_dir, text=text)
    pfx = str(tmp_path / "tok-1")
    cfg = json.dumps({**_token_cfg(bi)})
    assert drpipe_main(["tokenize", "--tokenizer", str(model_dir), "--passages",
                        str(corpus / "p.parquet"), "--shard", "1", "--num-shards", "2",
                        "--out", pfx, "--cfg", cfg]) == 0  # fmt: skip
    bf16 = {**ENC, "precision": "bf16"}  # autocast too: the same batches, the same vectors
    encode_shard(model_dir, corpus / "p.parquet", 1, 2, tmp_path / "t.npy", bf16, model=bi)
    encode_shard(model_dir, None, 1, 2, tmp_path / "k.npy", bf16, model=bi, tokens=pfx)
    assert np.array_equal(np.load(tmp_path / "t.npy"), np.load(tmp_path / "k.npy"))
    # The pair's ids are not these: encoding with them stops, naming the difference.
    pair = _model_dir(tmp_path / "pair")
    with pytest.raises(InputError, match="title"):
        encode_shard(tmp_path / "pair", None, 1, 2, tmp_path / "x.npy", ENC, model=pair,
                     tokens=pfx)  # fmt: skip
    assert not (tmp_path / "x.npy").exists()


def test_marked_sentences_bit_for_bit(corpus, tmp_path):
    """DCSR: the marked ids give the same sentence vectors, units and cut counts."""
    bi = BiEncoder.from_init(MINILM, pooling="mean", max_passage_len=64, add_tokens=["<sent>"])
    bi.method = {"name": "dcsr", "cfg": {"sentences_per_passage": 4.0}}
    prefix = tmp_path / "marked"
    tokenize_shard(MINILM, corpus / "p.parquet", 0, 1, prefix,
                   {"format": "marked", "max_length": 64, "add_tokens": ["<sent>"]},
                   sentences=corpus / "s.parquet")  # fmt: skip
    shard = TokenShard.open(prefix)
    shard.check(bi.tokenizer, 64, {"format": "marked"})
    settings = EncodeSettings(batch_size=3, bf16=False, device=torch.device("cpu"))
    from drpipe.encode import _blocks, attach_sentences
    from drpipe.methods.base import CorpusBlock

    for pooling in ("marker", "span"):
        text_m, tok_m = (get_method("dcsr", {"sentence_pooling": pooling}) for _ in range(2))
        blocks = attach_sentences(_blocks(corpus / "p.parquet", 0, N, 7), corpus / "s.parquet")
        text = [text_m.encode_corpus(bi, CorpusBlock(p, t, x, s), settings)
                for p, t, x, s in blocks]  # fmt: skip
        toks = list(tok_m.encode_tokens(bi, shard, settings, 7))
        assert [n for *_, n in toks] == [7, 7, 7, 5]
        for (tu, tv), (ku, kv, _) in zip(text, toks, strict=True):
            assert np.array_equal(tu, ku) and np.array_equal(tv, kv)
        assert text_m.encode_report() == tok_m.encode_report()
        assert tok_m.encode_report()["sentences_cut"] > 0


def test_stored_ids_are_checked_and_read_back(corpus, model, tmp_path):
    model_dir, bi = model
    prefix = tmp_path / "t"
    tokenize_shard(MINILM, corpus / "p.parquet", 0, 2, prefix, _token_cfg(bi))
    shard = TokenShard.open(prefix)
    enc = bi.tokenizer(["a"], ["b"])  # nothing of a call's state enters the hash
    assert enc and tokenizer_hash(bi.tokenizer) == shard.meta["tokenizer"]["hash"]
    # ids as the tokenizer makes them, padding stripped
    rows = np.asarray(shard.rows)
    import pyarrow.parquet as pq

    table = pq.read_table(corpus / "p.parquet").slice(0, 13).to_pylist()
    want = bi.tokenizer([r["title"] for r in table], [r["text"] for r in table],
                        truncation="longest_first", max_length=MAX_LEN)["input_ids"]  # fmt: skip
    for i, ids in enumerate(want):
        assert shard.tokens[shard.starts[i] : rows["end"][i]].tolist() == ids
    assert rows["pid"].tolist() == [r["pid"] for r in table]
    with pytest.raises(InputError, match="max_length"):
        shard.check(bi.tokenizer, MAX_LEN + 1, {"format": "passages", "passage_prefix": "",
                                                "title": "pair"})  # fmt: skip
    other = load_tokenizer(MINILM, ["<sent>"])
    assert tokenizer_hash(other) != tokenizer_hash(bi.tokenizer)
    with pytest.raises(InputError, match="shard 0 of 2, not 1 of 2"):
        encode_shard(model_dir, None, 1, 2, tmp_path / "x.npy", ENC, model=bi, tokens=prefix)
    paths(prefix)["tokens"].write_bytes(paths(prefix)["tokens"].read_bytes()[:-8])
    with pytest.raises(InputError):
        TokenShard.open(prefix)


@pytest.mark.parametrize("side", ["right", "left"])
def test_padding_is_the_tokenizers(model, side):
    _, bi = model
    tok = load_tokenizer(MINILM)
    tok.padding_side = side
    texts = ["a short one", "a rather longer passage of a few more words", "mid length text"]
    enc = tok(texts, padding=True, return_tensors="np")
    flat = [tok(t)["input_ids"] for t in texts]
    tokens = np.concatenate([np.asarray(f, np.uint16) for f in flat])
    lengths = np.array([len(f) for f in flat])
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    order = np.array([2, 0, 1])
    ids, mask = pad_ids(tokens, starts[order], lengths[order], tok.pad_token_id, side)
    assert np.array_equal(ids, enc["input_ids"][order])
    assert np.array_equal(mask, enc["attention_mask"][order])


def test_background_feed_keeps_order_and_raises():
    assert list(background(iter(range(50)), depth=2)) == list(range(50))

    def failing():
        yield 1
        raise ValueError("bad row")

    got = []
    with pytest.raises(ValueError, match="bad row"):
        for x in background(failing()):
            got.append(x)
    assert got == [1]
    # A consumer that stops early stops the thread.
    before = threading.active_count()
    it = background(iter(range(10_000)), depth=2)
    next(it)
    it.close()
    assert threading.active_count() <= before


def test_plan_shares_ids_between_runs_of_one_tokenizer(tmp_path):
    """The default mini plan: every run of one tokenizer and format reads one set of ids (DPR,
    xMoCo, the initial encoder and their variants; DCSR's marked ids apart); a changed maximum
    length or prefix is another key; the released checkpoint reads text."""
    from workflow_util import REPO, mirror_dir

    from drpipe.config import load_workflow_config
    from drpipe.plan import build_plan

    def plan(files=(), **over):
        return build_plan(load_workflow_config(REPO, {"scale": "mini", **over}, list(files)),
                          mirror=str(mirror_dir()))  # fmt: skip

    p = plan()
    keys = {run: spec["key"] for run, spec in p.TOKEN_SPECS.items()}
    assert keys["init"] == keys["dpr"] == keys["xmoco"] == keys["dpr.t3_gold_7"]
    assert keys["dcsr"] != keys["dpr"] and keys["dcsr"].split("/")[1].startswith("marked-")
    assert "dpr.released" not in keys
    assert p.encode_source("dpr", 1) == f"--tokens results/tokens/{keys['dpr']}/shard-1"
    assert p.encode_source("dpr.released", 0).startswith("--passages ")
    tok, fmt = keys["dcsr"].split("/")
    assert "sentences" in p.token_corpus_inputs(tok, fmt)
    longer = plan(encoder={"max_passage_len": 128}).TOKEN_SPECS["dpr"]["key"]
    (tmp_path / "c.yaml").write_text(
        'encoder: {passage_prefix: "p: "}\nmethods: {dcsr: {passage_prefix: ""}}\n'
    )
    prefixed = plan([str(tmp_path / "c.yaml")]).TOKEN_SPECS
    assert longer.split("/")[0] == keys["dpr"].split("/")[0] and longer != keys["dpr"]
    assert prefixed["dpr"]["key"] != keys["dpr"] and prefixed["dcsr"]["key"] == keys["dcsr"]
