"""Rendering of the log-hygiene checklist (`forensics lint`): a terminal table or JSON.

Owns presentation only; the checks and their verdicts come from `forensics.lint`. Must not judge
anything or read the store.
"""
from __future__ import annotations

import json
import os

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..lint import STATUSES, LintResult

_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "n/a": "dim"}


def _where(source_file: str, line: int) -> str:
    path = source_file
    if os.path.isabs(path):
        rel = os.path.relpath(path)
        if not rel.startswith(".."):
            path = rel
    return f"{path}:{line}"


def render_lint_json(result: LintResult) -> str:
    return json.dumps(result.to_json(), indent=1, default=str) + "\n"


def render_lint(result: LintResult, console: Console) -> None:
    console.print(Text(f"forensics lint · {result.store} · {result.events:,} events", style="bold"))
    t = Table.grid(padding=(0, 2))
    t.add_column(no_wrap=True)
    t.add_column(no_wrap=True)
    t.add_column(overflow="fold")
    for c in result.checks:
        body = Text(c.summary)
        for e in c.examples:
            body.append("\n↳ ", style="dim")
            body.append(_where(e.source_file, e.line), style="cyan")
            if e.rank is not None:
                body.append(f"  rank {e.rank}")
            if e.text:
                body.append(f"  {e.text}", style="dim")
        t.add_row(Text(c.status.upper(), style=_STYLE.get(c.status, "")), c.id, body)
    console.print(t)
    counts = ", ".join(f"{sum(c.status == s for c in result.checks)} {s}" for s in STATUSES)
    console.print(f"{len(result.checks)} checks: {counts}")
