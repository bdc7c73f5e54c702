"""BM25 search speed: ``drpipe bm25 search`` end to end vs. Anserini's command line alone.

Corpus: SQuAD-open, the 490 SQuAD v1.1 articles (train + dev) as 100-word passages
(24,816 passages), built with ``drpipe.corpus``; questions: the 10,570 SQuAD dev questions
(``drpipe.qa.datasets.read_squad``). Both sides search the same Lucene index with the same
Java, jar, BM25 parameters (k1 0.9, b 0.4), hits 100 and threads, in this same process:

- ``anserini``: ``java -cp <jar> io.anserini.search.SearchCollection`` on a ready topics file,
  writing its TREC file (nothing else);
- ``drpipe``: ``drpipe.bm25.search``: reading the questions Parquet, writing the topics file,
  the same Java run, parsing the TREC output, mapping qids back, writing the run Parquet.

The figure is the time ratio drpipe / anserini (best of ``--repeats`` alternating runs).
The script also prints top-1/5/20/100 accuracy of the run (ENVIRONMENT.md: about two thirds
top-1 and above 90 % top-20 for BM25 over these 24,816 passages).

Run: ``python benchmarks/bench_bm25.py [--data DIR] [--out results/benchmarks/bm25.json]``
``--smoke``: one article of each split, 20 questions, one repeat.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import smoke

from drpipe import bm25
from drpipe.anserini import anserini_jar, java_executable
from drpipe.corpus.chunk import chunk_documents
from drpipe.corpus.passages import num_passages
from drpipe.corpus.sources import squad_documents
from drpipe.evaluate import top_k_accuracy
from drpipe.io import setup_logging, write_json, write_parquet
from drpipe.qa.datasets import read_questions, read_squad, write_questions

REPO = Path(__file__).resolve().parents[1]
RESULT_LINES = (
    r"passages \d+, questions \d+; index built in [\d.]+ s",
    r"drpipe bm25 search: [\d.]+ s \(\d+ q/s\); Anserini CLI alone: [\d.]+ s \(\d+ q/s\); "
    r"ratio [\d.]+",
    r"top-k accuracy \(%\): \{",
)
# Articles per split and dev questions (None: all), and repeats.
SMOKE_SIZES = {"articles": 1, "questions": 20}
SMOKE_REPEATS = 1


def build_corpus(
    data: Path, tmp: Path, articles: int | None = None, questions: int | None = None
) -> tuple[Path, Path]:
    docs_paths = []
    for split in ("train", "dev"):
        docs, _ = squad_documents(data / f"squad/squad-{split}-v1.1.reconstructed.json.gz")
        path = tmp / f"docs-{split}.parquet"
        write_parquet(path, pa.Table.from_pylist(docs[:articles]))
        docs_paths.append(path)
    passages = tmp / "passages.parquet"
    chunk_documents(docs_paths, ["squad_train", "squad_dev"], passages, words=100)
    out = tmp / "dev.parquet"
    dev = read_squad(data / "squad/squad-dev-v1.1.reconstructed.json.gz")
    write_questions(out, dev[:questions])
    return passages, out


def time_anserini(index: Path, topics: Path, out: Path, cfg: dict) -> float:
    cmd = [
        java_executable(cfg.get("java")),
        "-cp", str(anserini_jar()),
        "io.anserini.search.SearchCollection",
        "-index", str(index), "-topics", str(topics), "-topicReader", "TsvInt",
        "-output", str(out), "-bm25", "-bm25.k1", str(cfg["k1"]), "-bm25.b", str(cfg["b"]),
        "-hits", str(cfg["hits"]), "-threads", str(cfg["threads"]),
    ]  # fmt: skip
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--data",
        type=Path,
        default=Path(os.environ.get("DATA_MIRROR", REPO.parent / "shared/data")),
    )
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    smoke.add_args(ap, REPO / "results/benchmarks/bm25.json")
    args = smoke.parse_args(ap, argv)
    sizes = {}
    if args.smoke:
        sizes, args.repeats = SMOKE_SIZES, SMOKE_REPEATS
    setup_logging(False)
    cfg = {"k1": 0.9, "b": 0.4, "hits": 100, "threads": args.threads, "java": None}

    with tempfile.TemporaryDirectory(prefix="bench-bm25-") as tmpdir:
        tmp = Path(tmpdir)
        t0 = time.perf_counter()
        passages, questions = build_corpus(args.data, tmp, **sizes)
        corpus_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        meta = bm25.build_index(passages, tmp / "index", {"threads": args.threads})
        index_s = time.perf_counter() - t0

        texts = [q["question"] for q in read_questions(questions)]
        topics = tmp / "topics.tsv"
        bm25.write_topics(texts, topics)
        ours, theirs = [], []
        for _ in range(args.repeats):
            theirs.append(time_anserini(tmp / "index", topics, tmp / "anserini.trec", cfg))
            t0 = time.perf_counter()
            report = bm25.search(tmp / "index", questions, tmp / "run.parquet", cfg)
            ours.append(time.perf_counter() - t0)
        summary, _ = top_k_accuracy(tmp / "run.parquet", questions, passages)
        n_psg = num_passages(passages)

    n_q = len(texts)
    result = {
        "benchmark": "bm25_search",
        "corpus": "SQuAD-open: 490 SQuAD v1.1 articles, 100-word passages",
        "smoke": args.smoke,
        "passages": n_psg,
        "questions": n_q,
        "config": cfg,
        "corpus_build_seconds": round(corpus_s, 3),
        "index_seconds": round(index_s, 3),
        "index": meta,
        "seconds": {"drpipe": ours, "anserini_cli": theirs},
        "questions_per_second": {
            "drpipe": n_q / min(ours),
            "anserini_cli": n_q / min(theirs),
        },
        "ratio_time_drpipe_over_anserini": min(ours) / min(theirs),
        "no_hits": report["no_hits"],
        "top_k_accuracy": summary["top_k"],
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "python": sys.version.split()[0],
    }
    write_json(args.out, result)
    print(f"passages {n_psg}, questions {n_q}; index built in {index_s:.1f} s")
    print(
        f"drpipe bm25 search: {min(ours):.2f} s ({n_q / min(ours):.0f} q/s); "
        f"Anserini CLI alone: {min(theirs):.2f} s ({n_q / min(theirs):.0f} q/s); "
        f"ratio {min(ours) / min(theirs):.3f}"
    )
    print("top-k accuracy (%):", {k: round(v, 2) for k, v in summary["top_k"].items()})
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
