"""The terminal report, laid out with rich at a fixed width (golden files stay stable).

Reads top-down: the run in one line; the verdict in one sentence; the chain bottom-up
(physical → resource → communication → training), each claim with its evidence lines
(file:line, rank, time, what the line says); the findings the root cause explains, one line
each; the other findings; the per-rank table, split into several tables rather than squeezed
when it is wider than the page. Must not judge anything: it lays out `outline()`.
"""
from __future__ import annotations

import io
import os
from typing import Any, Callable

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .fmt import cited_clock, cost_text
from .model import Evidence, Finding, Report, basis_phrase
from .outline import outline

EVIDENCE_PER_CLAIM = 3
GAP = 2


def _where(e: Evidence) -> str:
    """file:line, relative to the working directory when the file is below it (shorter, clickable)."""
    path = e.source_file
    if os.path.isabs(path):
        rel = os.path.relpath(path)
        if not rel.startswith(".."):
            path = rel
    return f"{path}:{e.line}"


def _evidence(e: Evidence, where: bool = True) -> Text:
    t = Text("↳ ", style="dim") if where else Text("")
    if where:
        t.append(_where(e), style="cyan")
    if e.rank is not None:
        t.append(f"  rank {e.rank}")
    if e.timestamp:
        t.append(f"  {cited_clock(e.timestamp, e.aligned_timestamp)}", style="dim")
    if e.text:
        t.append(f"  {e.text}")
    return t if where else t[len(t.plain) - len(t.plain.lstrip()):]


class _Block:
    """Rows of a two-column grid whose evidence paths are never cut: a file:line too long for the
    second column is printed on a line of its own, whole (past the width if it must: a path
    broken in two cannot be copied), and the grid goes on below it."""

    def __init__(self, con: Console, make: Callable[[], Table], avail: int) -> None:
        self.con, self.make, self.avail = con, make, avail
        self.t, self.n = make(), 0

    def row(self, *cells: Any) -> None:
        self.t.add_row(*cells)
        self.n += 1

    def evidence(self, e: Evidence) -> None:
        where = _where(e)
        if cell_len(where) + 2 <= self.avail:
            self.row("", _evidence(e))
            return
        self.flush()
        self.con.print(Text.assemble(("↳ ", "dim"), (where, "cyan")), soft_wrap=True)
        rest = _evidence(e, where=False)
        if rest.plain.strip():
            self.row("", rest)

    def prose(self, first: Text | str, text: str, style: str = "") -> None:
        """A sentence in the second column; wrapped at spaces only when one of its words (a path)
        is longer than the column, so that word stays whole."""
        if max((cell_len(w) for w in text.split()), default=0) <= self.avail:
            self.row(first, Text(text, style=style))
            return
        import textwrap

        self.flush()
        indent = self.con.width - self.avail
        head = first if isinstance(first, Text) else Text(first)
        for n, line in enumerate(textwrap.wrap(text, self.avail, break_long_words=False, break_on_hyphens=False)):
            lead = head.copy() if n == 0 else Text("")
            lead.pad_right(max(indent - cell_len(lead.plain), 0))
            self.con.print(Text.assemble(lead, (line, style)), soft_wrap=True)

    def flush(self) -> None:
        if self.n:
            self.con.print(self.t)
        self.t, self.n = self.make(), 0


def _grid(first_width: int) -> Table:
    """Two columns; the second wraps under itself (a hanging indent)."""
    t = Table.grid(padding=(0, GAP))
    t.add_column(no_wrap=True, min_width=first_width)
    t.add_column(overflow="fold")
    return t


def _add_finding(t: "_Block", f: Finding) -> None:
    head = Text()
    head.append(f"{f.layer} · {f.kind} · ", style="dim")
    if phrase := basis_phrase(f.basis, f.basis_weak):
        head.append(f"{phrase} · ", style="dim")
    head.append(f.title)
    if f.cost:
        head.append(f"  ({cost_text(f.cost, short=True)})", style="dim")
    t.row(Text(f.severity, style={"ERROR": "bold red", "WARN": "yellow"}.get(f.severity, "")), head)
    for e in f.lines[:EVIDENCE_PER_CLAIM]:
        t.evidence(e)
    if f.next:
        t.prose("", f"next: {f.next}", style="dim")


def _column_groups(columns: list[str], rows: list[list[str]], width: int, key: int | None) -> list[list[int]]:
    """Columns split into groups that fit the width, the rank column first in each."""
    widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)]
    rest = [i for i in range(len(columns)) if i != key]
    groups: list[list[int]] = []
    cur = [] if key is None else [key]
    used = 0 if key is None else widths[key]
    base = len(cur)
    for i in rest:
        need = widths[i] + (GAP if cur else 0)
        if len(cur) > base and used + need > width:
            groups.append(cur)
            cur = [] if key is None else [key]
            used = 0 if key is None else widths[key]
            need = widths[i] + (GAP if cur else 0)
        cur.append(i)
        used += need
    if len(cur) > base or not groups:
        groups.append(cur)
    return groups


def _per_rank(con: Console, columns: list[str], rows: list[list[str]], faults: list[int], width: int) -> None:
    key = columns.index("rank") if "rank" in columns else None
    rows = [list(r) for r in rows]
    if key is not None and faults:
        marked = {str(r) for r in faults}
        for r in rows:
            if r[key] in marked:
                r[key] += " *"
    for n, group in enumerate(_column_groups(columns, rows, width, key)):
        if n:
            con.print()
        t = Table(box=None, padding=(0, GAP), pad_edge=False, header_style="bold", collapse_padding=True)
        for i in group:
            t.add_column(columns[i], no_wrap=True, overflow="ellipsis")
        for r in rows:
            t.add_row(*(r[i] for i in group))
        con.print(t)
    if key is not None and faults:
        con.print(Text("* at fault (root cause)", style="dim"))


def render_text(report: Report, *, width: int = 100, color: bool = False) -> str:
    o = outline(report)
    buf = io.StringIO()
    con = Console(file=buf, width=width, force_terminal=color, color_system="standard" if color else None,
                  no_color=not color, highlight=False, emoji=False, markup=False, soft_wrap=False)
    head = Text("forensics diagnosis", style="bold")
    if report.run.store:
        head.append(f" of {report.run.store}", style="")
    con.print(head)
    con.print(Text(o.header, style="dim"))
    con.print()
    con.print(Text(o.verdict, style="bold green" if o.healthy else "bold"))
    if o.accounting:
        con.print(Text(o.accounting))
    if o.summary:
        con.print(Text(o.summary))
    rc = report.root_cause
    if rc is not None and (phrase := basis_phrase(rc.basis, rc.basis_weak)):
        con.print(Text(f"Why this rank: {phrase}.", style="dim"))
    if o.chain:
        con.print()
        con.print(Text("Chain, bottom-up", style="bold"))
        def chain_table() -> Table:
            t = Table(box=None, show_header=False, padding=(0, 1), pad_edge=False, expand=False)
            t.add_column(no_wrap=True, min_width=13, style="magenta")
            t.add_column(overflow="fold")
            return t

        b = _Block(con, chain_table, width - 14)
        for c in o.chain:
            b.row(c.layer, Text(c.finding))
            for e in c.lines[:EVIDENCE_PER_CLAIM]:
                b.evidence(e)
        b.flush()
    elif o.root is not None:
        con.print()
        b = _Block(con, lambda: _grid(5), width - 5 - GAP)
        _add_finding(b, o.root)
        b.flush()
    if report.root_cause is not None and report.root_cause.next:
        con.print()
        nxt = _Block(con, lambda: _grid(5), width - 5 - GAP)
        nxt.prose(Text("Next", style="bold"), report.root_cause.next)
        nxt.flush()
    if o.explained:
        con.print()
        con.print(Text("Explained by the root cause", style="bold"))
        b = _Block(con, lambda: _grid(0), width - GAP)
        for x in o.explained:
            line = Text(x.line)
            wh = _where(x.finding.lines[0]) if x.finding.lines else None
            # the citation on the sentence's line when the sentence leaves room for it whole
            if wh and cell_len(x.line) + cell_len(wh) + 4 <= width - GAP:
                line.append(f"  [{wh}]", style="cyan")
                wh = None
            b.row("", line)
            if wh:
                b.flush()
                con.print(Text.assemble(" " * GAP, (f"[{wh}]", "cyan")), soft_wrap=True)
        b.flush()
    if o.others:
        con.print()
        con.print(Text(o.others_title, style="bold"))
        b = _Block(con, lambda: _grid(5), width - 5 - GAP)
        for f in o.others:
            _add_finding(b, f)
        b.flush()
    from ..render.fr_table import report_block

    if fr := report_block(report):     # the Flight Recorder table (forensics fr-table), when dumps were read
        con.print()
        con.print(Text("Flight Recorder (forensics fr-table)", style="bold"))
        con.print(Text(fr))
    rows, left_out = o.printed_rows()
    if rows or left_out:
        con.print()
        con.print(Text("Per rank", style="bold"))
        if rows:
            _per_rank(con, o.columns, rows, o.fault_ranks, width)
        if left_out:
            con.print(Text(o.left_out_note(left_out, report.run.store), style="dim"))
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines()) + "\n"
