"""The self-contained HTML report: structure, escaping of log text, offline, redaction, size, CLI."""
from __future__ import annotations

import base64
import hashlib
import re
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from synthetic_run import SECRET, XSS_IMG, XSS_SCRIPT, ingest_scenario, make_store, sample_scenarios  # noqa: E402

from forensics.cli import app  # noqa: E402
from forensics.passes import diagnose  # noqa: E402
from forensics.report import render  # noqa: E402
from forensics.report.html import CSP, render_html  # noqa: E402
from forensics.report.model import Evidence, Finding, Report, RootCause, RunInfo  # noqa: E402
from forensics.store import open_store  # noqa: E402

FIGURES = ["hm-step", "hm-wait", "data-load", "comm-share", "gpu-temp_c", "gpu-sm_clock_mhz", "gpu-gpu_util", "loss", "snapshot"]


class Doc(HTMLParser):
    """Every start tag with its attributes, the inline scripts and the text (entities decoded)."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self.text: list[str] = []
        self._in_script = False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"
        if tag == "script":
            self.scripts.append("")

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data
        else:
            self.text.append(data)

    def ids(self) -> set[str]:
        return {a["id"] for _, a in self.tags if a.get("id")}

    def all_text(self) -> str:
        return "".join(self.text)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    return make_store(tmp_path_factory.mktemp("html"))


@pytest.fixture(scope="module")
def page(store: Path) -> str:
    run = open_store(store)
    return render_html(diagnose(run), run)


def test_verdict_and_chain_come_first_then_every_plot(page: str) -> None:
    d = Doc(page)
    assert "Root cause: thermal throttling on rank 5" in d.all_text()
    order = [page.index(f'id="{i}"') for i in ("verdict", "chain", "findings", "plots", "ranks", "evidence")]
    assert order == sorted(order)
    missing = [f for f in FIGURES if f not in d.ids()]
    assert not missing
    # every figure drew a chart, none fell back to "nothing to draw" on this complete run
    for fid in FIGURES:
        block = page[page.index(f'id="{fid}"'):]
        block = block[:block.index("</figure>")]
        assert "<svg" in block and "nothing to draw" not in block, fid
    # heatmaps: one PNG each with the ranks as rows; rank 5 (root cause) is marked
    heat = [a for t, a in d.tags if t == "svg" and a.get("class") == "heatmap"]
    assert len(heat) == 2 and all(a["data-rows"] == "0,1,2,3,4,5,6,7" for a in heat)
    assert "▶ 5" in page


def test_heatmap_values_are_the_logged_ones(page: str) -> None:
    d = Doc(page)
    wait = next(a for t, a in d.tags if t == "svg" and a.get("aria-label", "").startswith("Collective wait"))
    rows = wait["data-rows"].split(",")
    c0 = [int(x) for x in wait["data-c0"].split(",")]
    v = wait["data-v"].split(",")
    nc = len(c0)
    late = c0.index(45)
    # after step 30 the straggler (rank 5) waits ~0 while the others wait ~120 ms for it
    r5 = float(v[rows.index("5") * nc + late])
    r0 = float(v[rows.index("0") * nc + late])
    assert r5 < 10 and 100 < r0 < 140


def test_every_finding_links_to_its_evidence_lines_with_the_logged_text(store: Path, page: str) -> None:
    run = open_store(store)
    report = diagnose(run)
    d = Doc(page)
    ids = d.ids()
    hrefs = {a["href"] for t, a in d.tags if t == "a" and a.get("href", "").startswith("#")}
    for i, f in enumerate(report.findings):
        assert f"f{i}" in ids
        if f.lines:
            assert f"#ev{i}" in hrefs and f"ev{i}" in ids
            block = page[page.index(f'id="ev{i}"'):]
            block = block[:block.index("</table>")]
            for e in f.lines:
                assert f"{Path(e.source_file).name}:{e.line}</span>" in block
    # the logged line is looked up in the store: an ALLREDUCE cited by the straggler finding
    assert "ALLREDUCE step=" in d.all_text()


def test_log_text_is_escaped_everywhere(page: str) -> None:
    d = Doc(page)
    # the payloads are shown as text...
    text = d.all_text() + " ".join(v or "" for _, a in d.tags for v in a.values())
    assert XSS_SCRIPT in text
    # ...and never become markup
    assert [t for t, _ in d.tags].count("script") == 2
    assert "img" not in [t for t, _ in d.tags]
    assert not [(t, k) for t, a in d.tags for k in a if k.lower().startswith("on")]
    assert "<script>alert" not in page and "<img" not in page


def test_hostile_report_fields_are_escaped(store: Path) -> None:
    f = Finding(rule=XSS_SCRIPT, kind="straggler", layer="resource", severity="ERROR", ranks=[1],
                title=f"title {XSS_SCRIPT} {XSS_IMG}",
                lines=[Evidence(source_file=f"/x/{XSS_IMG}.jsonl", line=3, rank=1, text=XSS_SCRIPT)])
    rc = RootCause(kind="straggler", layer="resource", ranks=[1], summary=XSS_IMG, finding=0)
    rep = Report(run=RunInfo(ranks=2, hosts=1, start=None, end=None, events=1, rejected_lines=0, crashed=False,
                             store=XSS_IMG), root_cause=rc, findings=[f], per_rank=[{"rank": 1, "host": XSS_SCRIPT}])
    for run in (None, open_store(store)):
        out = render_html(rep, run)
        d = Doc(out)
        assert [t for t, _ in d.tags].count("script") == 2 and "img" not in [t for t, _ in d.tags]
        assert "<script>alert" not in out and "<img" not in out
        assert XSS_SCRIPT in d.all_text()


def test_offline_nothing_external_and_csp_allows_only_its_own_scripts(page: str) -> None:
    d = Doc(page)
    for tag, a in d.tags:
        for k in ("src", "href", "xlink:href", "action", "data"):
            v = a.get(k)
            if v:
                assert v.startswith("#") or v.startswith("data:image/png;base64,"), (tag, k, v[:60])
    assert not re.search(r"url\(\s*['\"]?(https?:)?//", page)
    assert "@import" not in page
    csp = next(a["content"] for t, a in d.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy")
    assert csp == CSP and "default-src 'none'" in csp and "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]
    # the hashes in the policy are those of the page's own scripts, so the browser runs them
    for js in d.scripts:
        h = "sha256-" + base64.b64encode(hashlib.sha256(js.encode()).digest()).decode()
        assert f"'{h}'" in csp


def test_secrets_are_masked_unless_asked(store: Path) -> None:
    run = open_store(store)
    report = diagnose(run)
    assert SECRET not in render_html(report, run)
    assert SECRET in render_html(report, run, redact=False)


def test_size_budget_and_text_only_without_run(store: Path, page: str) -> None:
    assert len(page.encode()) < 300_000
    run = open_store(store)
    text_only = render_html(diagnose(run), None)
    assert 'id="plots"' not in text_only and 'id="evidence"' in text_only
    assert len(text_only) < len(page)


def test_a_healthy_run_says_so(tmp_path: Path) -> None:
    st = make_store(tmp_path, hot=None, hostile=False)
    run = open_store(st)
    out = render_html(diagnose(run), run)
    assert 'class="verdict healthy"' in out and "<h1>Healthy: nothing wrong found in 8 ranks" in out
    assert "▶" not in out  # no rank singled out in any plot


def test_render_dispatch_and_cli(store: Path, tmp_path: Path) -> None:
    run = open_store(store)
    assert render(diagnose(run), "html", run=run).startswith("<!doctype html>")
    out = tmp_path / "report.html"
    r = CliRunner().invoke(app, ["diagnose", str(store), "--format", "html", "-o", str(out)])
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert text.startswith("<!doctype html>") and 'id="snapshot"' in text and SECRET not in text
    r = CliRunner().invoke(app, ["diagnose", str(store), "--format", "html", "--no-redact", "-o", str(out)])
    assert r.exit_code == 0 and SECRET in out.read_text()


@pytest.mark.parametrize("scenario", sample_scenarios(), ids=lambda d: d.name)
def test_every_sample_scenario_renders(scenario: Path, tmp_path: Path) -> None:
    run = open_store(ingest_scenario(scenario, tmp_path / "s.forensics"))
    report = diagnose(run)
    out = render_html(report, run)
    d = Doc(out)
    assert [t for t, _ in d.tags].count("script") == 2
    drawn = set(FIGURES) & d.ids()         # a panel with nothing to draw is left out and named in one note
    assert drawn and (drawn == set(FIGURES) or out.count("Not drawn, nothing in the logs for them: ") == 1)
    assert len(out.encode()) < 300_000
    if report.root_cause is not None:
        # the page shows the verdict, then the summary's sentence after "(... layer): "
        assert d.all_text().count(report.root_cause.summary.split(" layer): ", 1)[-1]) >= 1
