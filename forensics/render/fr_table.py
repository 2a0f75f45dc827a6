"""Rendering the Flight Recorder table (forensics.fr_table) as text, JSON or CSV.

Owns: the columns and wording of `forensics fr-table` and the plain-text block `diagnose` shows.
Must not: read dumps or judge lines (fr_table does).

Text: one row per (process group, collective number) described by its agreeing ranks, then one
row per differing signature of the odd ranks ("odd"); under it, where the job stopped first and
which dumps are absent, empty or corrupt. CSV: one row per (line, rank), a missing rank included
with state `missing` (or `no dump` / `unrecorded` / `waiting`), so a spreadsheet can filter by rank.
"""
from __future__ import annotations

import csv
import json
import os
import sys
from typing import Any, TextIO

from rich.console import Console

from ..fr_table import Cell, FrTable, Line, dumps_summary, fmt_sizes, ranks_text
from .layout import Col, print_fitted

COLUMNS = [
    Col("pg", key=True),
    Col("desc", drop=4, wrap=12, cap=40),
    Col("seq", "right", key=True),
    Col("op", key=True),
    Col("size", drop=2, wrap=12, cap=30),
    Col("dtype", drop=3),
    Col("state", drop=5),
    Col("ranks", key=True, wrap=8, cap=40),
    Col("missing", key=True, wrap=8, cap=40),
    Col("problem", drop=1),
    Col("file:entry", drop=6, path=True),
]
CSV_FIELDS = ["pg", "desc", "seq", "p2p", "rank", "host", "op", "input_sizes", "output_sizes", "input_dtypes",
              "output_dtypes", "state", "problem", "odd", "file", "entry"]


def cite(c: Cell) -> str:
    p = c.file
    try:
        rel = os.path.relpath(p)
        p = rel if not rel.startswith("..") else p
    except ValueError:
        pass
    return f"{p}:{c.entry}"


def _short_op(op: str) -> str:
    return op.replace("nccl:", "").replace("gloo:", "")


def _sig(c: Cell) -> tuple[Any, ...]:
    return (c.op, fmt_sizes(c.input_sizes), tuple(sorted(set(c.input_dtypes))), c.state)


def _dtype(c: Cell) -> str:
    return "/".join(sorted(set(c.input_dtypes))) or "/".join(sorted(set(c.output_dtypes)))


def _rows(lines: list[Line]) -> tuple[list[list[Any]], list[str]]:
    rows: list[list[Any]] = []
    styles: list[str] = []
    for ln in lines:
        lead = ln.lead()
        if lead is None:
            continue
        agree = [c for c in ln.cells if c.rank not in ln.odd] or ln.cells
        size = fmt_sizes(lead.input_sizes)
        if len({fmt_sizes(c.input_sizes) for c in agree}) > 1:
            size += " (varies)"
        gone = ranks_text(ln.missing)     # ranks without a usable dump are named once, under the table
        rows.append([ln.pg, ln.desc or "", str(ln.seq) + (" p2p" if ln.p2p else ""), _short_op(lead.op), size,
                     _dtype(lead), lead.state or "", ranks_text(c.rank for c in agree), gone,
                     ln.problem or "", cite(lead)])
        styles.append("bold" if ln.problem else "")
        odd = [c for c in ln.cells if c.rank in ln.odd]
        by_sig: dict[tuple[Any, ...], list[Cell]] = {}
        for c in odd:
            by_sig.setdefault(_sig(c), []).append(c)
        for cs in list(by_sig.values())[:5]:
            c = cs[0]
            rows.append(["", "", "", _short_op(c.op), fmt_sizes(c.input_sizes), _dtype(c), c.state or "",
                         ranks_text(x.rank for x in cs), "", "odd", cite(c)])
            styles.append("red")
    return rows, styles


def notes(table: FrTable) -> list[str]:
    """The sentences under the table: where the job stopped first, and the dumps that are not
    usable (and the ranks that have none)."""
    out = []
    head = table.first_stalled()
    if head is not None:
        lead = head.lead()
        what = f"{_short_op(lead.op)} " if lead else ""
        out.append(f"first mismatch (earliest created): pg {head.pg}" + (f" ({head.desc})" if head.desc else "")
                   + f" {what}#{head.seq}: {head.detail}" + (f" [{cite(lead)}]" if lead else ""))
    ok = [d for d in table.dumps if d.status == "ok"]
    hosts = {d.host for d in table.dumps if d.host}
    out.append(f"dumps: {len(table.dumps)} file(s), {len(ok)} with entries"
               + (f", from {len(hosts)} host(s)" if hosts else "")
               + (f"; {len(table.groups)} process group(s), {len(table.lines)} line(s)" if table.lines else ""))
    out.extend(dumps_summary(table))
    return out


def render_text(table: FrTable, lines: list[Line], console: Console, *, all_lines: bool = False) -> None:
    if lines:
        rows, styles = _rows(lines)
        print_fitted(console, COLUMNS, rows, row_styles=styles, hint="--format json shows every field")
    elif table.first:      # problems, but not in the group asked for
        console.print("no mismatch in the lines selected" + ("" if all_lines else " (--all lists them)"),
                      markup=False, highlight=False)
    elif table.lines:
        console.print(f"no mismatch: {len(table.lines)} line(s) in {len(table.groups)} process group(s) agree, "
                      "every member present" + ("" if all_lines else " (--all lists them)"), markup=False, highlight=False)
    for n in notes(table):
        console.print(n, markup=False, highlight=False)


def report_block(report: Any) -> str | None:
    """The Flight Recorder table a diagnosis carries (stuck_collective puts it in its finding's
    evidence), for the text / Markdown / HTML reports; None when the run had no dumps."""
    for f in report.findings:
        fr = f.evidence.get("flight_recorder") if isinstance(f.evidence, dict) else None
        if isinstance(fr, dict) and fr.get("table"):
            return str(fr["table"])
    return None


def report_rows(report: Any) -> dict[str, Any] | None:
    """The Flight Recorder table's rows a diagnosis carries (`table_rows`), for the HTML report."""
    for f in report.findings:
        fr = f.evidence.get("flight_recorder") if isinstance(f.evidence, dict) else None
        if isinstance(fr, dict) and isinstance(fr.get("rows"), dict):
            return fr["rows"]
    return None


def table_rows(table: FrTable, limit: int = 12) -> dict[str, Any]:
    """The rows `text_block` prints (the problem lines, at most `limit`), every column, and the
    notes: the same table for a page that has no column limit."""
    lines = [ln for ln in table.lines if ln.problem]
    rows, styles = _rows(lines[:limit])
    extra = [f"... {len(lines) - limit} more line(s): forensics fr-table"] if len(lines) > limit else []
    if not lines and table.lines:
        extra = [f"no mismatch: {len(table.lines)} line(s) in {len(table.groups)} process group(s) agree, every member present"]
    return {"columns": [c.head for c in COLUMNS], "rows": [[str(v) for v in r] for r in rows], "styles": styles,
            "notes": extra + notes(table)}


def text_block(table: FrTable, width: int = 80, limit: int = 12) -> str:
    """The table as plain text (for `diagnose`): the problem lines, at most `limit`, and the notes."""
    console = Console(width=width, record=True, file=open(os.devnull, "w"), color_system=None)
    lines = [ln for ln in table.lines if ln.problem]
    render_text(table, lines[:limit], console)
    if len(lines) > limit:
        console.print(f"... {len(lines) - limit} more line(s): forensics fr-table", markup=False, highlight=False)
    return console.export_text().rstrip("\n")


def render_json(table: FrTable, lines: list[Line], out: TextIO | None = None) -> None:
    out = out or sys.stdout     # looked up when called: a caller may have replaced stdout
    out.write(json.dumps(table.to_json(lines), indent=1, default=str))
    out.write("\n")


def csv_rows(table: FrTable, lines: list[Line]) -> list[dict[str, Any]]:
    host = {d.rank: d.host for d in table.dumps if d.rank is not None}
    rows = []
    for ln in lines:
        base = {"pg": ln.pg, "desc": ln.desc or "", "seq": ln.seq, "p2p": ln.p2p, "problem": ln.problem or ""}
        for c in ln.cells:
            rows.append({**base, "rank": c.rank, "host": host.get(c.rank) or "", "op": c.op,
                         "input_sizes": fmt_sizes(c.input_sizes), "output_sizes": fmt_sizes(c.output_sizes),
                         "input_dtypes": "/".join(c.input_dtypes), "output_dtypes": "/".join(c.output_dtypes),
                         "state": c.state or "", "odd": c.rank in ln.odd, "file": c.file, "entry": c.entry})
        for state, ranks in (("missing", ln.missing), ("no dump", ln.no_dump), ("unrecorded", ln.unrecorded),
                             ("waiting", ln.waiting)):
            for r in ranks:
                rows.append({**base, "rank": r, "host": host.get(r) or "", "op": "", "input_sizes": "",
                             "output_sizes": "", "input_dtypes": "", "output_dtypes": "", "state": state,
                             "odd": r in ln.odd, "file": "", "entry": ""})
    return rows


def render_csv(table: FrTable, lines: list[Line], out: TextIO | None = None) -> None:
    w = csv.DictWriter(out or sys.stdout, fieldnames=CSV_FIELDS, lineterminator="\n")
    w.writeheader()
    w.writerows(csv_rows(table, lines))


def render(table: FrTable, lines: list[Line], fmt: str, console: Console, *, all_lines: bool = False) -> None:
    if fmt == "json":
        render_json(table, lines)
    elif fmt == "csv":
        render_csv(table, lines)
    else:
        render_text(table, lines, console, all_lines=all_lines)


__all__ = ["render", "render_text", "render_json", "render_csv", "text_block", "report_block", "report_rows", "table_rows", "notes", "csv_rows", "COLUMNS"]
