"""Corpus stage throughput and peak memory on the real enwiki sample, at 1x and 4x its size.

Run: ``python benchmarks/bench_corpus.py [--with-16x] [--smoke] [--out FILE]`` (env
``DATA_MIRROR`` as for the tests). Writes ``results/benchmarks/corpus.json`` and prints the
4x/1x ratios (and 16x/4x). ``--smoke``: the sample's first 8 pages stand for 1x.
The steps' buffers (pages in flight to the workers, 4 MB document batches, 10k-passage write
batches, 16k-passage spaCy blocks) are not yet full at 1x, so memory can rise from 1x to 4x;
``--with-16x`` shows whether it levels off once they are.

The 4x dump is the real sample's pages written four times under ONE ``<mediawiki>`` root, with
distinct titles and page ids, recompressed with bz2. Concatenating four copies of the .bz2
file would be a valid multi-stream bz2 but not a valid XML document (four root elements), and
identical titles would make the copies indistinguishable; rewriting keeps every page's
wikitext, hence the cleaning work per page, exactly as in the real dump.

Each step runs the real CLI (``drpipe corpus ...``) in a child process; peak memory is that
child's max RSS (including its worker processes) from ``os.wait4``. Linux keeps a process's
max RSS across fork+exec, so this script stays small (stdlib only; the 4x dump is written by a
child) lest its own memory show up as the step's. Throughput is MB of dump (uncompressed XML,
and compressed .bz2) per second per worker process, of wall time both as measured and net of
the CLI's start-up (interpreter and imports: ``drpipe corpus wiki --help``, measured here too).
"""

from __future__ import annotations

import argparse
import bz2
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import smoke

REPO = Path(__file__).resolve().parents[1]
MIRROR = Path(os.environ.get("DATA_MIRROR", REPO.parent / "shared" / "data")).resolve()
DUMP = MIRROR / "wikipedia/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
OUT = REPO / "results" / "benchmarks" / "corpus.json"
PROCESSES = 2
MB = 1e6
SMOKE_PAGES = 8
RESULT_LINES = (
    r"1x: [\d.]+ MB XML \([\d.]+ MB bz2\), \d+ pages, \d+ kept, \d+ passages \| wiki [\d.]+ s",
    r"4x: [\d.]+ MB XML",
    r"CLI start-up: [\d.]+ s, peak \d+ MiB",
    r"ratio 4x/1x: \{",
)


def make_scaled_dump(src: Path, dst: Path, copies: int, max_pages: int | None = None) -> None:
    """Write ``copies`` copies of every page (of the first ``max_pages``) under one root, with
    distinct titles and ids."""
    xml = bz2.decompress(src.read_bytes()).decode("utf-8")
    head_end = xml.index("<page>")
    tail_start = xml.rindex("</page>") + len("</page>")
    if max_pages is not None:
        ends = [m.end() for m in re.finditer("</page>", xml)]
        tail_start = ends[min(max_pages, len(ends)) - 1]
        tail = "\n</mediawiki>\n"
    else:
        tail = xml[tail_start:]
    head, pages = xml[:head_end], xml[head_end:tail_start]
    parts = [head]
    for k in range(copies):
        if k == 0:
            parts.append(pages)
            continue
        copy = re.sub(r"<title>(.*?)</title>", rf"<title>\1 (copy {k})</title>", pages)
        # Page ids (the <id> right after <ns>) become distinct; revision ids may repeat.
        copy = re.sub(
            r"(</ns>\s*<id>)(\d+)(</id>)",
            lambda m, k=k: f"{m.group(1)}{int(m.group(2)) + k * 10**8}{m.group(3)}",
            copy,
        )
        parts.append(copy)
    parts.append(tail)
    dst.write_bytes(bz2.compress("".join(parts).encode("utf-8"), compresslevel=9))


def make_scaled_dump_in_child(
    src: Path, dst: Path, copies: int, max_pages: int | None = None
) -> None:
    extra = [] if max_pages is None else [str(max_pages)]
    subprocess.run(
        [sys.executable, __file__, "--make-dump", str(src), str(dst), str(copies), *extra],
        check=True,
    )


def run_step(argv: list[str]) -> dict:
    """Run ``drpipe corpus <argv>``; wall seconds and the child's peak RSS in MiB."""
    cmd = [sys.executable, "-m", "drpipe.cli", "corpus", *argv]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    stderr = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{stderr[-2000:]}")
    return {"seconds": round(seconds, 3), "peak_rss_mib": round(usage.ru_maxrss / 1024, 1)}


def measure(dump: Path, work: Path, startup: dict) -> dict:
    docs, passages, sents = work / "docs.parquet", work / "passages.parquet", work / "sents.parquet"
    wiki_report = work / "wiki.json"
    wiki = run_step(
        ["wiki", "--dump", str(dump), "--out", str(docs), "--report", str(wiki_report),
         "--cfg", json.dumps({"processes": PROCESSES})]
    )  # fmt: skip
    chunk = run_step(
        ["chunk", "--docs", str(docs), "--sources", "enwiki", "--out", str(passages),
         "--report", str(work / "chunk.json"), "--cfg", '{"words": 100}']
    )  # fmt: skip
    sentences = run_step(
        ["sentences", "--passages", str(passages), "--out", str(sents),
         "--report", str(work / "sent.json"), "--cfg", '{"splitter": "sentencizer"}']
    )  # fmt: skip
    report = json.loads(wiki_report.read_text())
    net = wiki["seconds"] - startup["seconds"]
    n_passages = json.loads((work / "chunk.json").read_text())["passages"]
    xml_mb = report["uncompressed_bytes"] / MB
    bz2_mb = dump.stat().st_size / MB
    return {
        "dump_bz2_mb": round(bz2_mb, 3),
        "dump_xml_mb": round(xml_mb, 3),
        "pages": report["pages"],
        "kept": report["kept"],
        "dropped": report["dropped"],
        "passages": n_passages,
        "wiki": {
            **wiki,
            "processes": PROCESSES,
            "xml_mb_per_s_per_core": round(xml_mb / wiki["seconds"] / PROCESSES, 3),
            "bz2_mb_per_s_per_core": round(bz2_mb / wiki["seconds"] / PROCESSES, 3),
            "net_seconds": round(net, 3),
            # None where the step took no longer than a bare start-up (a smoke's dump of a
            # few pages, on a loaded machine): there is no throughput to net out.
            "net_xml_mb_per_s_per_core": round(xml_mb / net / PROCESSES, 3) if net > 0 else None,
            "pages_per_s": round(report["pages"] / wiki["seconds"], 1),
        },
        "chunk": {**chunk, "passages_per_s": round(n_passages / chunk["seconds"], 1)},
        "sentences": {**sentences, "passages_per_s": round(n_passages / sentences["seconds"], 1)},
    }


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def ratios(big: dict, small: dict) -> dict:
    def r(step: str, key: str) -> float | None:
        if big[step][key] is None or small[step][key] is None:
            return None
        return round(big[step][key] / small[step][key], 3)

    return {
        "dump_xml_mb": round(big["dump_xml_mb"] / small["dump_xml_mb"], 3),
        "wiki_throughput": r("wiki", "xml_mb_per_s_per_core"),
        "wiki_net_throughput": r("wiki", "net_xml_mb_per_s_per_core"),
        "wiki_peak_rss": r("wiki", "peak_rss_mib"),
        "chunk_peak_rss": r("chunk", "peak_rss_mib"),
        "sentences_throughput": r("sentences", "passages_per_s"),
        "sentences_peak_rss": r("sentences", "peak_rss_mib"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--with-16x", action="store_true", help="also 16x the sample")
    smoke.add_args(parser, OUT)
    args = smoke.parse_args(parser)
    scales = [1, 4, 16] if args.with_16x else [1, 4]
    results: dict = {
        "what": "drpipe corpus wiki -> chunk -> sentences on the real enwiki sample, "
        + ", ".join(f"{k}x" for k in scales),
        "dump": str(DUMP),
        "smoke": args.smoke,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_avg_at_start": os.getloadavg(),
        },
    }
    with tempfile.TemporaryDirectory(prefix="bench_corpus_") as tmp:
        tmp = Path(tmp)
        results["startup"] = startup = run_step(["wiki", "--help"])
        base = DUMP
        if args.smoke:
            base = tmp / "enwiki-smoke.xml.bz2"
            make_scaled_dump_in_child(DUMP, base, copies=1, max_pages=SMOKE_PAGES)
            results["dump"] += f" (first {SMOKE_PAGES} pages)"
        for k in scales:
            dump = base
            if k > 1:
                dump = tmp / f"enwiki-{k}x.xml.bz2"
                make_scaled_dump_in_child(base, dump, copies=k)
            work = tmp / f"{k}x"
            work.mkdir()
            results[f"{k}x"] = measure(dump, work, startup)
            if k > 1:
                dump.unlink()
    results["ratio_4x_over_1x"] = ratios(results["4x"], results["1x"])
    if 16 in scales:
        results["ratio_16x_over_4x"] = ratios(results["16x"], results["4x"])
    results["machine"]["load_avg_at_end"] = os.getloadavg()
    out = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = out.with_suffix(".json.tmp")
    tmp_out.write_text(json.dumps(results, indent=2) + "\n")
    tmp_out.replace(out)

    for k in scales:
        r = results[f"{k}x"]
        print(
            f"{k}x: {r['dump_xml_mb']:.1f} MB XML ({r['dump_bz2_mb']:.2f} MB bz2), "
            f"{r['pages']} pages, {r['kept']} kept, {r['passages']} passages | "
            f"wiki {r['wiki']['seconds']:.1f} s, {r['wiki']['xml_mb_per_s_per_core']:.2f} MB/s/core "
            f"(XML; net of start-up {_number(r['wiki']['net_xml_mb_per_s_per_core'])}), "
            f"peak {r['wiki']['peak_rss_mib']:.0f} MiB | "
            f"chunk {r['chunk']['seconds']:.1f} s, peak {r['chunk']['peak_rss_mib']:.0f} MiB | "
            f"sentences {r['sentences']['passages_per_s']:.0f} psg/s, "
            f"peak {r['sentences']['peak_rss_mib']:.0f} MiB"
        )
    st = results["startup"]
    print(f"CLI start-up: {st['seconds']:.2f} s, peak {st['peak_rss_mib']:.0f} MiB")
    print("ratio 4x/1x:", json.dumps(results["ratio_4x_over_1x"]))
    if 16 in scales:
        print("ratio 16x/4x:", json.dumps(results["ratio_16x_over_4x"]))
    print(f"load average start/end: {results['machine']['load_avg_at_start']} / "
          f"{results['machine']['load_avg_at_end']}")  # fmt: skip
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--make-dump"]:
        pages = int(sys.argv[5]) if len(sys.argv) > 5 else None
        make_scaled_dump(Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]), pages)
        sys.exit(0)
    sys.exit(main())
