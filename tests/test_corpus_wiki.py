"""Wikipedia dump -> documents on the real enwiki samples, and bad dumps."""

from __future__ import annotations

import bz2
import re
from collections import Counter

import pyarrow.parquet as pq
import pytest
from cli_util import run_corpus

from drpipe.corpus.wiki import (
    Page,
    drop_reason,
    iter_documents,
    iter_pages,
    ordered_map_chunks,
)
from drpipe.errors import InputError

WIKI_SAMPLE = "wikipedia/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
TABLE_SAMPLE = "wikipedia/enwiki-table-markup.xml.bz2"
MARKUP = re.compile(
    r"\{\||\|\}|\{\{|\}\}|<ref|</ref|^\s*\|-|^\s*\|\s*\w+\s*=|infobox|\[\[|\]\]|<\w+[^>]*>",
    re.IGNORECASE | re.MULTILINE,
)


@pytest.fixture(scope="module")
def enwiki_docs(data_mirror, tmp_path_factory):
    out = tmp_path_factory.mktemp("wiki") / "docs.parquet"
    report_path = out.with_suffix(".json")
    report = run_corpus(
        "wiki", "--dump", str(data_mirror / WIKI_SAMPLE), "--out", str(out),
        "--report", str(report_path), cfg={"processes": 2},
    )  # fmt: skip
    return out, report


def test_enwiki_sample_counts(enwiki_docs, data_mirror):
    out, report = enwiki_docs
    # README: 206 pages = 106 articles + 100 redirects. One redirect lives in the Wikipedia:
    # namespace, so it is counted there; the 106 non-redirects split into kept, disambiguation
    # (5 by title, 3 by template: Alien, Ada, Aa River) and list pages.
    assert report["pages"] == 206
    assert report["dropped"] == {
        "namespace": 1,
        "redirect": 99,
        "disambiguation": 8,
        "list": 2,
        "empty": 0,
    }
    assert report["kept"] == 96
    assert report["kept"] + sum(report["dropped"].values()) == report["pages"]
    docs = pq.read_table(out).to_pylist()
    assert len(docs) == 96
    titles = [d["title"] for d in docs]
    assert titles[:3] == ["Anarchism", "Autism", "Albedo"]
    assert not [t for t in titles if "disambiguation" in t or t.startswith("List of")]
    assert {
        "Alien",
        "Ada",
        "Aa River",
        "Wikipedia:Adding Wikipedia articles to Nupedia",
    }.isdisjoint(titles)
    # doc_id is the page id; text starts with the title line, as DrQA's documents do.
    anarchism = docs[0]
    assert anarchism["doc_id"] == 12
    assert anarchism["text"].startswith("Anarchism\n\nAnarchism is a political philosophy")
    # Infobox, tables, refs and templates are gone from every document.
    leftovers = {d["title"]: MARKUP.findall(d["text"]) for d in docs}
    assert {t: m for t, m in leftovers.items() if m} == {}


def test_processes_do_not_change_output(enwiki_docs, data_mirror, tmp_path):
    out, _ = enwiki_docs
    single = tmp_path / "docs1.parquet"
    run_corpus(
        "wiki", "--dump", str(data_mirror / WIKI_SAMPLE), "--out", str(single),
        cfg={"processes": 1, "chunk_size": 7},
    )  # fmt: skip
    assert pq.read_table(single).equals(pq.read_table(out))


def test_table_markup_sample_is_clean(data_mirror, tmp_path):
    out = tmp_path / "docs.parquet"
    report = run_corpus(
        "wiki", "--dump", str(data_mirror / TABLE_SAMPLE), "--out", str(out),
        "--report", str(tmp_path / "r.json"),
    )  # fmt: skip
    assert report["pages"] == 5
    assert report["dropped"]["list"] == 1  # List of Prison Break characters
    docs = {d["title"]: d["text"] for d in pq.read_table(out).to_pylist()}
    assert set(docs) == {
        "Constructive vote of no confidence",
        "Academy Award for Best Production Design",
        "Economy of Estonia",
        "Brahui language",
    }
    for title, text in docs.items():
        assert not MARKUP.findall(text), title
        for line in text.split("\n"):
            assert not line.lstrip().startswith(("|", "!", "{", "}")), (title, line)
    # Prose survives: a sentence from the article body, and table cells do not.
    assert "Estonia's economy was based on agriculture" in docs["Economy of Estonia"]
    raw = bz2.decompress((data_mirror / TABLE_SAMPLE).read_bytes()).decode()
    assert "{| class=" in raw and "|-" in raw  # the sample really has tables


def _dump_xml(pages: list[tuple[str, int, str]]) -> bytes:
    body = "".join(
        f"<page><title>{t}</title><ns>{ns}</ns><id>{i + 1}</id><revision><id>9</id>"
        f'<text xml:space="preserve">{text}</text></revision></page>'
        for i, (t, ns, text) in enumerate(pages)
    )
    head = '<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10">'
    return f"{head}{body}</mediawiki>".encode()


def test_empty_article_is_skipped_and_counted(tmp_path):
    dump = tmp_path / "d.xml.bz2"
    dump.write_bytes(
        bz2.compress(
            _dump_xml(
                [
                    ("Kept", 0, "'''Kept''' is a page with a real paragraph of text."),
                    ("Only markup", 0, "{{Infobox thing|a=1}}\n{| class=x\n|-\n| cell\n|}\n"),
                    ("Talk:Kept", 1, "talk"),
                    ("Gone", 0, "#REDIRECT [[Kept]]"),
                ]
            )
        )
    )
    out = tmp_path / "docs.parquet"
    report = run_corpus(
        "wiki", "--dump", str(dump), "--out", str(out), "--report", str(tmp_path / "r.json")
    )
    assert report["kept"] == 1
    assert report["dropped"] == {
        "namespace": 1, "redirect": 1, "disambiguation": 0, "list": 0, "empty": 1,
    }  # fmt: skip
    assert pq.read_table(out).to_pylist() == [
        {
            "doc_id": 1,
            "title": "Kept",
            "text": "Kept\n\nKept is a page with a real paragraph of text.",
        }
    ]


def test_drop_reasons():
    def page(title, text="Plain text.", ns=0, redirect=False):
        return Page(1, 1, ns, title, redirect, text)

    assert drop_reason(page("Paris")) is None
    assert drop_reason(page("Mercury (disambiguation)")) == "disambiguation"
    assert drop_reason(page("Mercury", "x\n{{Disambiguation|geo}}")) == "disambiguation"
    assert drop_reason(page("Mercury", "x\n{{hndis|Mercury}}")) == "disambiguation"
    assert drop_reason(page("List of lakes")) == "list"
    assert drop_reason(page("Lists of lakes")) == "list"
    assert drop_reason(page("Outline of physics")) == "list"
    assert drop_reason(page("Listeria")) is None
    assert drop_reason(page("Paris", redirect=True)) == "redirect"
    assert drop_reason(page("Paris", "#redirect [[France]]")) == "redirect"
    assert drop_reason(page("Category:Lakes", ns=14)) == "namespace"


def test_truncated_bz2_raises_and_writes_nothing(data_mirror, tmp_path):
    data = (data_mirror / WIKI_SAMPLE).read_bytes()
    cut = tmp_path / "truncated.xml.bz2"
    cut.write_bytes(data[: len(data) // 2])
    out = tmp_path / "out" / "docs.parquet"
    with pytest.raises(InputError) as err:
        run_corpus("wiki", "--dump", str(cut), "--out", str(out), cfg={"processes": 2})
    msg = str(err.value)
    assert str(cut) in msg and "truncated or corrupt" in msg
    assert re.search(r"after page \d+ '.+'", msg), msg
    assert list(out.parent.iterdir()) == []  # no output, no temporary left behind


def test_corrupt_bz2_block(data_mirror, tmp_path):
    data = bytearray((data_mirror / TABLE_SAMPLE).read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = b"\x00" * 64
    bad = tmp_path / "corrupt.xml.bz2"
    bad.write_bytes(bytes(data))
    with pytest.raises(InputError, match="corrupt.xml.bz2"):
        list(iter_pages(bad))


def test_malformed_xml_names_page(data_mirror, tmp_path):
    xml = bz2.decompress((data_mirror / TABLE_SAMPLE).read_bytes()).decode()
    # Break the third page: its <title> is never closed.
    third = "<title>Academy Award for Best Production Design</title>"
    assert third in xml
    bad = tmp_path / "bad.xml.bz2"
    bad.write_bytes(bz2.compress(xml.replace(third, third[: -len("</title>")]).encode()))
    with pytest.raises(InputError) as err:
        list(iter_pages(bad))
    msg = str(err.value)
    assert "bad.xml.bz2" in msg and "malformed XML" in msg
    assert "after page 2 'List of Prison Break characters'" in msg


def test_ordered_map_chunks_keeps_order():
    chunks = [list(range(i, i + 3)) for i in range(0, 60, 3)]
    got = list(ordered_map_chunks(_square_all, iter(chunks), processes=2, max_pending=3))
    assert got == [_square_all(c) for c in chunks]


def _square_all(xs: list[int]) -> list[int]:
    return [x * x for x in xs]


def test_iter_documents_counts_every_page(data_mirror):
    counts: Counter = Counter()
    docs = list(iter_documents(iter_pages(data_mirror / TABLE_SAMPLE), counts, processes=1))
    assert len(docs) == counts["kept"] == 4
    assert counts["pages"] == 5 and counts["list"] == 1
