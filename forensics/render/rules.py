"""Rendering for `forensics rules list` and `forensics rules check`.

Owns presentation only: a table of loaded rules, and rule errors as `file:key: message` lines
(one per error, so editors and CI annotate them). Must not load or check rules itself.
"""
from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ..rules import Rule, RuleError
from ..rules import display_path
from ..rules.spec import Clause


def _clause_text(c: Clause) -> str:
    from ..rules.compile import describe

    return describe(c)


def render_rule_list(rules: list[Rule], console: Console, *, verbose: bool = False) -> None:
    t = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("id", "level", "layer"):
        t.add_column(col, no_wrap=True)
    t.add_column("title", overflow="fold")
    if verbose:
        t.add_column("kind", no_wrap=True)
        t.add_column("condition", overflow="fold")
        t.add_column("file", overflow="fold")
    for r in rules:
        row = [r.id, r.level, r.layer, r.title]
        if verbose:
            cond = _clause_text(r.clause) + "".join(f"; and {_clause_text(j)}" for j in r.joins)
            row += [r.kind, cond, display_path(r.path)]
        t.add_row(*row)
    console.print(t)
    console.print(f"{len(rules)} rule{'s' if len(rules) != 1 else ''}", style="dim", highlight=False)


def render_rule_errors(errors: list[RuleError], console: Console) -> None:
    for e in errors:
        console.print(str(e), markup=False, highlight=False, emoji=False)
    files = len({e.file for e in errors})
    console.print(f"{len(errors)} error{'s' if len(errors) != 1 else ''} in {files} file{'s' if files != 1 else ''}",
                  markup=False, highlight=False, emoji=False)
