"""The diagnosis report: its data model (`model`), how it is built, and one renderer per format.

Owns `render(report, fmt)` for text (rich, fixed width), md (tickets) and json (the contract of
spec/report.md) and the `build_report` entry point, which delegates to `forensics.passes.diagnose`
(imported lazily: rendering a saved report needs no passes). Must not compute findings.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import BAD_ARGUMENT, ForensicsError
from .model import ChainLink, Evidence, Finding, Report, RootCause, RunInfo

if TYPE_CHECKING:
    from ..store import Run

FORMATS = ("text", "md", "json", "html", "junit")

__all__ = ["FORMATS", "render", "build_report", "Report", "Finding", "Evidence", "RootCause", "ChainLink", "RunInfo"]


def render(report: Report, fmt: str, *, width: int = 100, redact: bool = True, color: bool = False,
           run: "Run | None" = None) -> str:
    """The report as text|md|json|html|junit (the built-in rules as its cases). `redact` masks secrets found in log text (keys, tokens, passwords);
    `color` adds ANSI styles to the text format (for a terminal, never for files or golden tests);
    `run` gives the html format the events its plots are drawn from (without it: no plots)."""
    if fmt == "html":
        from .html import render_html

        return render_html(report, run, redact=redact)
    if fmt == "junit":
        from .junit import diagnosis_junit

        return diagnosis_junit(report, redact=redact)
    if fmt == "json":
        from .jsonout import render_json

        return render_json(report, redact=redact)
    if fmt not in FORMATS:
        raise ForensicsError(f"unknown report format {fmt!r}", reason=f"choose one of {', '.join(FORMATS)}", code=BAD_ARGUMENT)
    if redact:
        from .redact import redact_report

        report = redact_report(report)
    if fmt == "md":
        from .markdown import render_markdown

        return render_markdown(report)
    from .text import render_text

    return render_text(report, width=width, color=color)


def build_report(run: "Run | str | os.PathLike[str] | list[str]", rule_dirs: list[Path] | None = None) -> Report:
    """Diagnose a run (a Run, a store path, or raw log paths) into a Report: `forensics.passes.diagnose`."""
    from ..passes import diagnose

    return diagnose(run, rule_dirs=rule_dirs)
