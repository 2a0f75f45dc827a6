"""JUnit XML (forensics.report.junit): valid against the schema CI servers read, escaped, and one
case per rule / kind / lint check whose failures carry the finding and its file:line."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from forensics.cli import app
from forensics.config import parse_fail_on
from forensics.report.junit import JUnitCase, diagnose_cases, render_junit
from forensics.report.model import KINDS, Evidence, Finding, Report, RunInfo

etree = pytest.importorskip("lxml.etree")

REPO = Path(__file__).resolve().parents[1]
SCHEMA = etree.XMLSchema(etree.parse(str(REPO / "tests" / "data" / "junit.xsd")))
SAMPLES = REPO / "sample_logs"


def validate(text: str) -> ET.Element:
    doc = etree.fromstring(text.encode("utf-8"))
    assert SCHEMA.validate(doc), SCHEMA.error_log
    return ET.fromstring(text.encode("utf-8"))


def test_schema_rejects_what_ci_servers_reject() -> None:
    # the schema is not a rubber stamp: a suite without its counts, or a time with a unit, fails
    ok = render_junit("s", [JUnitCase("a", "c")])
    validate(ok)
    for bad in (ok.replace(' failures="0" errors="0" skipped', ' skipped'), ok.replace('time="0.000"', 'time="0.0s"', 1),
                ok.replace('<testcase name="a"', '<testcase')):
        assert not SCHEMA.validate(etree.fromstring(bad.encode()))


def test_counts_failures_and_escaping() -> None:
    nasty = 'a < b & "c" \'d\' ]]> \x00\x07\x1b[31m \ud7ff \ufffe end'
    cases = [JUnitCase("ok", "x.y", seconds=1.5),
             JUnitCase("bad <one>", "x.z", failure=f"WARN: {nasty}", details=f"line1\n{nasty}\n  f.jsonl:3")]
    root = validate(render_junit("suite & co", cases))
    suite = root.find("testsuite")
    assert suite is not None and suite.get("name") == "suite & co"
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("2", "1", "0")
    assert suite.get("time") == "1.500"
    tcs = suite.findall("testcase")
    assert [t.get("name") for t in tcs] == ["ok", "bad <one>"] and tcs[0].find("failure") is None
    fail = tcs[1].find("failure")
    assert fail is not None and fail.get("type") == "x.z"
    # XML 1.0 forbids NUL, BEL, ESC and U+FFFE even escaped: dropped; everything else kept as written
    clean = 'a < b & "c" \'d\' ]]> [31m \ud7ff  end'
    assert fail.get("message") == f"WARN: {clean}"
    assert fail.text == f"line1\n{clean}\n  f.jsonl:3"


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.text(), st.text(), st.one_of(st.none(), st.text()), st.text(),
                          st.floats(min_value=0, max_value=1e6)), max_size=5), st.text())
def test_any_text_gives_a_valid_document(cases: list[tuple], suite: str) -> None:
    jc = [JUnitCase(n, c, f, d, s) for n, c, f, d, s in cases]
    root = validate(render_junit(suite, jc))
    assert int(root.find("testsuite").get("failures")) == sum(f is not None for _, _, f, _, _ in cases)  # type: ignore[union-attr]


def _report(*findings: Finding) -> Report:
    return Report(RunInfo(4, 1, None, None, 10, 0, False), None, list(findings))


def test_one_case_per_rule_and_kind_failures_are_what_fail_on_trips() -> None:
    ev = [Evidence("/logs/rank_6.jsonl", 74, 6, None, "GPU_STATS temp_c=92")]
    hot = Finding("thermal_throttling", "thermal_throttling", "physical", "WARN", [6], "GPU hot", lines=ev, next="inspect GPU 2")
    lag = Finding("pass.straggler", "straggler", "resource", "ERROR", [6], "rank 6 straggles", lines=ev)
    notes = Finding("pass.hygiene", "log_hygiene", "resource", "WARN", [], "GPU metrics sampled every 0.5 s")
    info = Finding("pass.hot_gpu", "thermal_throttling", "physical", "INFO", [6], "a bit warm")
    rules = [("thermal_throttling", "physical"), ("gpu_underutilized", "resource")]
    cases = diagnose_cases(_report(hot, lag, notes, info), rules, parse_fail_on("WARN").trips)
    names = [c.name for c in cases]
    assert names[:2] == ["thermal_throttling", "gpu_underutilized"] and names[2:] == KINDS
    by = {(c.classname, c.name): c for c in cases}
    rule_case = by[("forensics.rules.physical", "thermal_throttling")]
    assert rule_case.failure == "WARN: GPU hot [ranks 6]"
    assert "/logs/rank_6.jsonl:74  rank 6" in rule_case.details and "next: inspect GPU 2" in rule_case.details
    assert by[("forensics.passes", "straggler")].failure == "ERROR: rank 6 straggles [ranks 6]"
    assert by[("forensics.rules.resource", "gpu_underutilized")].failure is None
    assert by[("forensics.passes", "log_hygiene")].failure is None          # the logs, not the run
    assert by[("forensics.passes", "thermal_throttling")].failure is None   # INFO < WARN
    only_comm = diagnose_cases(_report(hot, lag), rules, parse_fail_on("WARN:communication").trips)
    assert all(c.failure is None for c in only_comm)
    validate(render_junit("d", cases))
    # the library's render() gives the same document shape, with the built-in rules as cases
    from forensics.report import render

    lib = validate(render(_report(hot, lag), "junit"))
    assert lib.find("testsuite").get("failures") == "2"   # type: ignore[union-attr]


def test_diagnose_junit_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "j.xml"
    r = CliRunner().invoke(app, ["diagnose", str(SAMPLES / "thermal_throttling"), "--format", "junit", "-o", str(out)])
    assert r.exit_code == 0, r.output
    root = validate(out.read_text())
    cases = {(c.get("classname"), c.get("name")): c for c in root.iter("testcase")}
    assert ("forensics.rules.physical", "thermal_throttling") in cases and ("forensics.passes", "hang") in cases
    fail = cases[("forensics.passes", "thermal_throttling")].find("failure")
    assert fail is not None and "rank 6" in fail.get("message", "")
    assert "thermal_throttling/logs/node1/rank_6.jsonl:" in (fail.text or "") and "Clocks Event Reasons" in (fail.text or "")
    assert cases[("forensics.passes", "hang")].find("failure") is None


def test_healthy_run_has_no_failures_and_lint_junit_validates() -> None:
    r = CliRunner().invoke(app, ["diagnose", str(SAMPLES / "healthy"), "--format", "junit"])
    assert r.exit_code == 0, r.output
    root = validate(r.stdout)
    assert root.find("testsuite").get("failures") == "0" and int(root.find("testsuite").get("tests")) > len(KINDS)  # type: ignore[union-attr]
    r = CliRunner().invoke(app, ["lint", str(SAMPLES / "healthy"), "--format", "junit"])
    assert r.exit_code == 0, r.output
    root = validate(r.stdout)
    names = [c.get("name") for c in root.iter("testcase")]
    assert "rank_field" in names and "sampling" in names
    # sample_logs/healthy records carry no rank field (lint warns): a failing case at the default WARN
    rank_case = next(c for c in root.iter("testcase") if c.get("name") == "rank_field")
    assert rank_case.find("failure") is not None and "rank" in rank_case.find("failure").get("message", "")  # type: ignore[union-attr]
    r = CliRunner().invoke(app, ["lint", str(SAMPLES / "healthy"), "--format", "junit", "--fail-on", "FAIL"])
    assert validate(r.stdout).find("testsuite").get("failures") == "0"  # type: ignore[union-attr]
