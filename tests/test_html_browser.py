"""The HTML report in a real headless browser (Debian's chromium): it runs its scripts without an
error, nothing is blocked or injected, and it renders to a screenshot.

How a JS error is detected: the page's first script counts `error` events and CSP violations
into attributes of <html>, its last script sets data-ready="ok" once it ran through; the DOM as
the browser holds it after load (--dump-dom) shows all three. A negative control proves the
detection works: a page with an injected, unhashed script must show a CSP violation.

Skipped when chromium is not installed (CI installs it: .ci/system-deps).
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from synthetic_run import XSS_SCRIPT, ingest_scenario, make_store, sample_scenarios  # noqa: E402

from forensics.passes import diagnose  # noqa: E402
from forensics.report.html import render_html  # noqa: E402
from forensics.store import open_store  # noqa: E402

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium; CI does it in .ci/system-deps)")

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def chromium(page: Path, tmp: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp / 'profile'}", *args, page.as_uri()],
                          capture_output=True, text=True, timeout=120)


def html_attrs(dom: str) -> dict[str, str]:
    m = re.search(r"<html([^>]*)>", dom)
    assert m, dom[:300]
    return dict(re.findall(r'([\w-]+)="([^"]*)"', m.group(1)))


def scenario_store(tmp: Path) -> tuple[Path, str]:
    """The sample_logs thermal scenario when it is there, else the synthetic run."""
    for d in sample_scenarios():
        if d.name == "thermal_throttling":
            return ingest_scenario(d, tmp / "sample.forensics"), f"sample_logs/{d.name}"
    return make_store(tmp), "synthetic"


def write_page(store: Path, out: Path) -> Path:
    run = open_store(store)
    out.write_text(render_html(diagnose(run), run), encoding="utf-8")
    return out


def test_report_runs_its_scripts_without_errors_and_renders(tmp_path: Path) -> None:
    store, _ = scenario_store(tmp_path)
    page = write_page(store, tmp_path / "report.html")
    r = chromium(page, tmp_path, "--dump-dom")
    attrs = html_attrs(r.stdout)
    assert attrs.get("data-ready") == "ok", (attrs, r.stderr[-2000:])
    assert "data-js-errors" not in attrs and "data-csp-violations" not in attrs, attrs
    shot = tmp_path / "report.png"
    r = chromium(page, tmp_path, f"--screenshot={shot}", "--window-size=1400,2400")
    assert shot.is_file(), r.stderr[-2000:]
    # a blank page compresses to a few KB; the report's charts and text do not
    assert shot.stat().st_size > 50_000


def test_hostile_log_lines_stay_text_in_the_browser(tmp_path: Path) -> None:
    page = write_page(make_store(tmp_path), tmp_path / "hostile.html")
    assert XSS_SCRIPT.replace("<", "&lt;").replace(">", "&gt;") in page.read_text()
    dom = chromium(page, tmp_path, "--dump-dom").stdout
    attrs = html_attrs(dom)
    assert attrs.get("data-ready") == "ok" and "data-js-errors" not in attrs and "data-csp-violations" not in attrs, attrs
    assert "<img" not in dom and len(re.findall(r"<script\b", dom)) == 2


def test_the_detection_sees_an_injected_script(tmp_path: Path) -> None:
    # negative control: were a log line ever emitted unescaped, the CSP blocks it and the page says so
    page = write_page(make_store(tmp_path, hostile=False), tmp_path / "bad.html")
    text = page.read_text().replace("<main>", "<main><script>document.title='pwned'</script>"
                                              "<img src=x onerror=\"document.title='pwned'\">", 1)
    page.write_text(text)
    dom = chromium(page, tmp_path, "--dump-dom").stdout
    attrs = html_attrs(dom)
    assert int(attrs.get("data-csp-violations", "0")) >= 1
    assert "<title>pwned" not in dom
