"""JUnit XML for CI servers (Jenkins, GitLab, GitHub test reporters): one document, one suite.

Owns `JUnitCase`, `render_junit(suite, cases)` and the mapping of a diagnosis (`diagnose_cases`)
and of a lint result (`lint_cases`) to test cases: one case per rule file, per finding kind of
the passes, per lint check; a case fails when one of its findings trips the `--fail-on` policy.
Must not judge anything (the policy object decides what trips) nor read the store.

The shape is the one CI servers read (Jenkins xUnit plugin's junit-10.xsd, which GitLab and the
GitHub test-report actions accept too): <testsuites> holding one <testsuite name tests failures
errors time>, each <testcase name classname time> holding at most one <failure message type>
whose text is the details. XML 1.0 cannot carry most control characters (not even escaped), so
they are dropped; everything else is escaped by ElementTree.
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from .model import KINDS, Evidence, Finding, Report
from .text import _where

if TYPE_CHECKING:
    from ..config import Config, FailOn
    from ..lint import LintResult

# Characters XML 1.0 allows (production [2] Char); the rest cannot appear even as &#x..;
_NOT_XML = re.compile("[^\x09\x0a\x0d\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
EVIDENCE_PER_FINDING = 6


@dataclass
class JUnitCase:
    name: str
    classname: str
    failure: str | None = None      # the failure's one-line message; None = the case passed
    details: str = ""               # the failure's text (evidence, file:line)
    seconds: float = 0.0


def xml_text(s: str) -> str:
    """`s` without the characters XML 1.0 forbids."""
    return _NOT_XML.sub("", s)


def _seconds(x: float) -> str:
    # junit-10.xsd's SUREFIRE_TIME: digits, optional fraction, no exponent
    return f"{max(0.0, float(x)):.3f}"


def render_junit(suite: str, cases: list[JUnitCase]) -> str:
    """One <testsuites><testsuite> document with `cases`, as text (UTF-8, with declaration)."""
    failures = sum(c.failure is not None for c in cases)
    total = sum(c.seconds for c in cases)
    counts = {"tests": str(len(cases)), "failures": str(failures), "errors": "0"}
    root = ET.Element("testsuites", {"name": xml_text(suite), **counts, "time": _seconds(total)})
    ts = ET.SubElement(root, "testsuite", {"name": xml_text(suite), **counts, "skipped": "0", "time": _seconds(total)})
    for c in cases:
        tc = ET.SubElement(ts, "testcase", {"name": xml_text(c.name), "classname": xml_text(c.classname),
                                            "time": _seconds(c.seconds)})
        if c.failure is not None:
            f = ET.SubElement(tc, "failure", {"message": xml_text(c.failure), "type": xml_text(c.classname)})
            f.text = xml_text(c.details)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _evidence_line(e: Evidence) -> str:
    return "  " + "  ".join([_where(e)] + ([f"rank {e.rank}"] if e.rank is not None else []) + ([e.text] if e.text else []))


def finding_details(f: Finding) -> str:
    """A finding as the text of a JUnit failure: severity, title, ranks, next step, file:line lines."""
    ranks = ", ".join(str(r) for r in f.ranks) if f.ranks else "-"
    out = [f"{f.severity} {f.layer}/{f.kind} (rule {f.rule}): {f.title}", f"ranks: {ranks}"]
    nxt = getattr(f, "next", None)
    if nxt:
        out.append(f"next: {nxt}")
    out += [_evidence_line(e) for e in f.lines[:EVIDENCE_PER_FINDING]]
    return "\n".join(out)


def _case(name: str, classname: str, failing: list[Finding]) -> JUnitCase:
    if not failing:
        return JUnitCase(name, classname)
    head = failing[0]
    ranks = f" [ranks {', '.join(map(str, head.ranks))}]" if head.ranks else ""
    more = f" (+{len(failing) - 1} more)" if len(failing) > 1 else ""
    return JUnitCase(name, classname, failure=f"{head.severity}: {head.title}{ranks}{more}",
                     details="\n\n".join(finding_details(f) for f in failing))


def diagnose_cases(report: Report, rule_ids: list[tuple[str, str]], trips: Callable[[Finding], bool]) -> list[JUnitCase]:
    """One case per rule file (`rule_ids`: (id, layer)) and one per kind the passes report; a case
    fails with the findings of it that `trips` (the --fail-on policy) selects, worst first."""
    from .model import SEVERITIES

    failing = sorted((f for f in report.findings if trips(f)), key=lambda f: -SEVERITIES.index(f.severity))
    cases = [_case(rid, f"forensics.rules.{layer}", [f for f in failing if f.rule == rid])
             for rid, layer in rule_ids]
    known = {rid for rid, _ in rule_ids}
    from_passes = [f for f in failing if f.rule not in known]
    kinds = list(KINDS) + sorted({f.kind for f in from_passes} - set(KINDS))
    cases += [_case(k, "forensics.passes", [f for f in from_passes if f.kind == k]) for k in kinds]
    return cases


def lint_cases(result: "LintResult", trips: Callable[[str, str], bool]) -> list[JUnitCase]:
    """One case per lint check; `trips(check_id, status)` says whether its status fails the run."""
    cases = []
    for c in result.checks:
        if not trips(c.id, c.status):
            cases.append(JUnitCase(c.id, "forensics.lint"))
            continue
        lines = [f"{c.status.upper()} {c.id}: {c.question}", c.summary, *(_evidence_line(e) for e in c.examples)]
        cases.append(JUnitCase(c.id, "forensics.lint", failure=f"{c.status.upper()}: {c.summary}", details="\n".join(lines)))
    return cases


def diagnosis_junit(report: Report, policy: "FailOn | None" = None, *, rule_dirs: list[Path] | None = None,
                    config: "Config | None" = None, redact: bool = True) -> str:
    """`forensics diagnose --format junit`: a case per rule file the diagnosis ran (`rule_dirs`,
    less the config's disabled ones) and per kind; failures are what `policy` trips (without one:
    WARN and above, log hygiene left out, as `--fail-on WARN`)."""
    from ..config import parse_fail_on
    from ..rules import load_rules
    from .redact import redact_report

    rules = load_rules(rule_dirs, overrides=config.overrides if config else None,
                       override_source=config.source if config else None)
    off = set(config.disabled) if config else set()
    ids = [(r.id, r.layer) for r in rules if r.id not in off]
    trips = (policy or parse_fail_on("WARN")).trips
    return render_junit("forensics diagnose", diagnose_cases(redact_report(report) if redact else report, ids, trips))


def lint_junit(result: "LintResult", policy: "FailOn | None" = None) -> str:
    """`forensics lint --format junit`: failures are the checks `policy` trips (default: warn and fail)."""
    from ..config import parse_fail_on

    return render_junit("forensics lint", lint_cases(result, (policy or parse_fail_on("WARN", command="lint")).trips_check))
