"""JUnit XML, the test-report format CI servers (Jenkins, GitLab, GitHub) display.

Owns `JUnitCase` and `render_junit(suite, cases)`: one <testsuite> inside <testsuites>, one
<testcase> per case, a <failure> (message + details) on a failed one. Must not decide what
fails (the caller does) nor read a run. All text goes through ElementTree, which escapes it.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass


@dataclass
class JUnitCase:
    name: str
    classname: str
    failure: str | None = None      # the one-line reason; None = passed
    details: str = ""               # the failure's body (evidence file:line ...), or system-out when passed
    seconds: float = 0.0


def render_junit(suite: str, cases: list[JUnitCase]) -> str:
    failures = sum(1 for c in cases if c.failure is not None)
    total = f"{sum(c.seconds for c in cases):.3f}"
    root = ET.Element("testsuites", name=suite, tests=str(len(cases)), failures=str(failures), errors="0", time=total)
    ts = ET.SubElement(root, "testsuite", name=suite, tests=str(len(cases)), failures=str(failures), errors="0",
                       skipped="0", time=total)
    for c in cases:
        tc = ET.SubElement(ts, "testcase", name=c.name, classname=c.classname, time=f"{c.seconds:.3f}")
        if c.failure is not None:
            f = ET.SubElement(tc, "failure", message=c.failure, type="forensics")
            f.text = c.details or c.failure
        elif c.details:
            ET.SubElement(tc, "system-out").text = c.details
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
