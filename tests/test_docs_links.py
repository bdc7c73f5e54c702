"""Every relative link in the repository's Markdown leads somewhere: the file exists, and a
``#fragment`` names a heading of the file it points into (GitHub's anchors)."""

from __future__ import annotations

import re
from pathlib import Path

from workflow_util import REPO

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
INLINE = re.compile(r"\]\(([^)\s]+)\)")
REFERENCE = re.compile(r"^\[[^\]]+\]:\s*(\S+)", re.M)


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of a Markdown text's headings; a repeated one gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#+ (.+)$", FENCE.sub("", text), re.M):
        a = anchor(heading)
        n = seen.get(a, 0)
        seen[a] = n + 1
        out.add(a if n == 0 else f"{a}-{n}")
    return out


def broken_links(path: Path) -> list[str]:
    """The relative links of ``path`` whose file or heading does not exist."""
    text = FENCE.sub("", path.read_text())
    bad = []
    for link in INLINE.findall(text) + REFERENCE.findall(text):
        if re.match(r"[a-z]+:", link):  # https:, mailto:
            continue
        target, _, fragment = link.partition("#")
        file = (path.parent / target).resolve() if target else path
        if not file.exists():
            bad.append(f"{link}: no such file")
        elif fragment and file.suffix == ".md" and fragment not in anchors(file.read_text()):
            bad.append(f"{link}: no heading with that anchor in {file.name}")
    return bad


def test_the_anchor_of_a_heading_with_code_and_punctuation():
    heading = "What the claims' variants cost at `squad`, before starting them"
    assert anchor(heading) == "what-the-claims-variants-cost-at-squad-before-starting-them"
    assert anchors("# A\n```\n# not a heading\n```\n## A\n") == {"a", "a-1"}


def test_a_missing_file_or_heading_is_found(tmp_path):
    (tmp_path / "other.md").write_text("# Present\n")
    doc = tmp_path / "doc.md"
    doc.write_text(
        "# Top\n[ok](other.md#present) [self](#top) [gone](missing.md) [x](other.md#absent)\n"
        "[web](https://example.org/#x)\n```\n[in a fence](nowhere.md)\n```\n[ref]: #nowhere\n"
    )
    assert broken_links(doc) == [
        "missing.md: no such file",
        "other.md#absent: no heading with that anchor in other.md",
        "#nowhere: no heading with that anchor in doc.md",
    ]


def test_every_relative_link_in_the_repositorys_markdown_resolves():
    files = [REPO / "README.md"]
    files += [
        f for d in ("docs", "workflow", "benchmarks", "profiles") for f in (REPO / d).rglob("*.md")
    ]
    assert len(files) >= 4, files
    bad = {str(f.relative_to(REPO)): b for f in files if (b := broken_links(f))}
    assert not bad, bad


def test_citation_file_cites_every_registered_paper():
    """CITATION.cff lists the paper of every folder in drpipe.papers, by its title."""
    import csv

    import yaml

    from drpipe.papers import papers

    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    titles = " ".join(ref["title"] for ref in cff["references"])
    for p in papers():
        row = next(csv.DictReader((Path(p.folder) / "citation.csv").open()))
        title = row["citation"].split(". ")[1] if row["paper"] != "aopt" else "Optimizing Dense"
        assert title.split(" (")[0] in titles, (p.key, title)
    assert (REPO / "LICENSE").read_text().lstrip().startswith("Apache License")
