"""Snakemake's HTML report of a run: every table (with the paper's number and the difference
beside each of our cells), every figure, the claims and the audit, checked by parsing the report
and, where Debian's chromium is installed, by opening it in headless Chromium."""

from __future__ import annotations

import base64
import html.parser
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import system_packages

from drpipe.audit.render import render_csv_html

REPO = Path(__file__).resolve().parents[1]
# The browser test's screenshot (git ignores the folder); DRPIPE_TEST_ARTEFACTS moves it.
ARTEFACTS = Path(os.environ.get("DRPIPE_TEST_ARTEFACTS", REPO / "test-artefacts"))


class _Tables(html.parser.HTMLParser):
    """Header and body cells of every <table> of a page."""

    def __init__(self):
        super().__init__()
        self.tables: list[dict] = []
        self._cell: list[str] | None = None
        self._in_head = False

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append({"head": [], "rows": []})
        elif tag == "thead":
            self._in_head = True
        elif tag == "tr" and self.tables and not self._in_head:
            self.tables[-1]["rows"].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "thead":
            self._in_head = False
        elif tag in ("td", "th") and self._cell is not None:
            text = "".join(self._cell).strip()
            if self._in_head:
                self.tables[-1]["head"].append(text)
            else:
                self.tables[-1]["rows"][-1].append(text)
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def parse_tables(text: str) -> list[dict]:
    parser = _Tables()
    parser.feed(text)
    return parser.tables


def test_table_page_puts_paper_value_and_difference_beside_each_cell(tmp_path):
    frame = pd.DataFrame(
        {
            "training": ["None", "Single"],
            "method": ["BM25", "DPR"],
            "squad_top20": [71.25, 60.0],
            "squad_top20_paper": [68.8, 63.2],
            "squad_top20_diff": [2.45, -3.2],
        }
    )
    csv = tmp_path / "table2.csv"
    frame.to_csv(csv, index=False)
    (tmp_path / "table2.md").write_text("# DPR Table 2\n\nPaper values are copied.\n\n| a |\n")
    render_csv_html(csv, tmp_path / "table2.html")
    text = (tmp_path / "table2.html").read_text()
    [table] = parse_tables(text)
    head = table["head"]
    i = head.index("squad_top20")
    assert head[i + 1 : i + 3] == ["squad_top20_paper", "squad_top20_diff"]
    assert table["rows"][1][i : i + 3] == ["60.00", "63.20", "-3.20"]
    assert "Paper values are copied." in text  # the table's header note comes along


def test_report_rules_are_declared():
    # The shared tables' rules, and each paper's own (workflow/drpipe/papers/<paper>/rules.smk).
    papers = sorted((REPO / "workflow/drpipe/papers").glob("*/rules.smk"))
    tables = "".join(p.read_text() for p in [REPO / "workflow/rules/tables.smk", *papers])
    for path in ("results/table2.csv", "results/dpr/table3.csv", "results/dpr/figure1.png"):
        assert re.search(r"report\(\s*\"" + re.escape(path), tables), path
    audit = (REPO / "workflow/rules/audit.smk").read_text()
    for path in ("results/claims.csv", "results/report/{table}.html", "results/audit/audit.html"):
        assert re.search(r"report\(\s*\"" + re.escape(path), audit), path
    assert 'report: "../report/workflow.rst"' in audit
    for caption in re.findall(r'caption="(?:\.\./)+report/([\w.]+)"', tables + audit):
        assert (REPO / "workflow/report" / caption).is_file(), caption


# --------------------------------------------------------------------------- the real report


def _report_results(text: str) -> dict:
    m = re.search(r"var results = (\{.*?\});\s*</script>", text, flags=re.S)
    assert m, "no results in the report"
    return json.loads(m.group(1))


def _payload(uri: str) -> bytes:
    head, _, data = uri.partition("base64,")
    assert head.startswith("data:") and data, uri[:80]
    return base64.b64decode(data)


@pytest.fixture(scope="module")
def report_run(tiny_audited):
    """The audited tiny DPR run (tiny_run.py), whose audit wrote results/report.html."""
    a, _ = tiny_audited
    return a


@pytest.mark.slow
def test_report_has_every_table_figure_claims_and_audit(report_run):
    text = (report_run / "results/report.html").read_text()
    results = _report_results(text)
    by_name = {Path(p).name: (p, r) for p, r in results.items()}
    expected = ["table2.html", "table2.csv", "figure1.png", "figure1.html", "claims.csv",
                "claims.html", "audit.html"]  # fmt: skip
    for name in expected:
        assert name in by_name, (name, sorted(by_name))
    for _name, (path, res) in by_name.items():
        payload = _payload(res["data_uri"])
        assert payload, path
        if path.endswith(".png"):
            assert payload[:8] == b"\x89PNG\r\n\x1a\n" and len(payload) > 5000, path
        if path.endswith(".html"):
            tables = parse_tables(payload.decode())
            assert tables and all(t["rows"] for t in tables), path
            assert all(any(cell for cell in row) for t in tables for row in t["rows"]), path
    # The figure's page shows the image above the points it plots.
    figure = _payload(by_name["figure1.html"][1]["data_uri"]).decode()
    assert "<img" in figure and "data:image/png;base64," in figure
    # Table 2's page: our value, the paper's and the difference side by side.
    page = _payload(by_name["table2.html"][1]["data_uri"]).decode()
    [table] = parse_tables(page)
    assert any(h.endswith("_paper") for h in table["head"])
    # The claims page lists every declared claim with a verdict.
    claims = pd.read_csv(report_run / "results/claims.csv")
    [ctable] = parse_tables(_payload(by_name["claims.html"][1]["data_uri"]).decode())
    assert len(ctable["rows"]) == len(claims)
    verdict = ctable["head"].index("verdict")
    assert {r[verdict] for r in ctable["rows"]} == set(claims["verdict"])
    # Runtime per rule (Snakemake's statistics) and the workflow description are there.
    assert "var runtimes_spec" in text and "four dense-retrieval papers" in text


@pytest.fixture
def chromium() -> str:
    """Debian's Chromium (installed beside the tests where they run as root), or a skip."""
    reason = system_packages.available("chromium")
    if reason:
        pytest.skip(f"no headless browser: {reason}")
    return system_packages.which("chromium")


@pytest.mark.slow
@pytest.mark.system_packages
def test_report_renders_in_headless_chromium(report_run, chromium, tmp_path):
    report = report_run / "results/report.html"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=20000"]  # fmt: skip
    dom = subprocess.run(
        [chromium, *flags, "--dump-dom", report.as_uri()],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert dom.returncode == 0, dom.stderr[-2000:]
    # The React app replaced the loading screen with the report's menu and categories.
    start = dom.stdout.find('id="app"')
    app = dom.stdout[start : dom.stdout.find("<script", start)]  # rendered markup only
    for label in ("Tables", "Figures", "Claims", "Audit"):
        assert f">{label}<" in app, label
    shot = tmp_path / "report.png"
    subprocess.run(
        [chromium, *flags, "--window-size=1400,1000", f"--screenshot={shot}", report.as_uri()],
        capture_output=True, timeout=180, check=True,
    )  # fmt: skip
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    # A blank page compresses to almost nothing; a rendered report does not.
    assert len(data) > 20000, len(data)
    # Kept past the session (pytest removes a passed test's tmp_path) for a person to look at.
    kept = ARTEFACTS / "report.png"
    kept.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shot, kept)
