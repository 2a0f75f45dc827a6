"""Rendering of the ingest summary and of stored rejects."""
from __future__ import annotations

import csv
import json
import sys
from typing import TYPE_CHECKING

import polars as pl
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .. import host_names
from ..report.fmt import ranks_text
from ..store import Run

if TYPE_CHECKING:     # the ingest package (numpy, pyarrow.compute, the scanners) only when ingesting
    from ..ingest import IngestSummary


def _human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def _ranks_text(ranks: list[int]) -> str:
    return ranks_text(ranks, dash="-")


def render_files(s: IngestSummary, console: Console) -> None:
    """What was recognised in each file: format, lines, events, rejects, where ranks came from."""
    t = Table(title="files", title_justify="left")
    for c, j in (("file", "left"), ("format", "left"), ("lines", "right"), ("events", "right"),
                 ("rejected", "right"), ("rank from", "left"), ("ranks", "left")):
        t.add_column(c, justify=j, overflow="fold")  # type: ignore[arg-type]
    import os

    base = os.path.commonpath([f["path"] for f in s.per_file]) if len(s.per_file) > 1 else ""
    if base and not os.path.isdir(base):
        base = os.path.dirname(base)
    if base:
        t.title = f"files under {base}"
    for f in s.per_file:
        t.add_row(os.path.relpath(f["path"], base) if base else f["path"], f["format"], f"{f['lines_read']:,}", f"{f['events']:,}", f"{f['rejected']:,}",
                  f["rank_from"], _ranks_text(f["ranks"]))
    console.print(t)


def render_schemas(s: IngestSummary, console: Console) -> None:
    """The field roles chosen for JSON-lines files not in the seed's schema, one line per family
    of files (to stderr: a diagnostic, not the summary); `*` marks a role the config set."""
    import os

    for desc, paths in s.schemas.items():
        name = os.path.basename(paths[0]) + (f" and {len(paths) - 1} more" if len(paths) > 1 else "")
        console.print(Text(f"schema of {len(paths)} file(s) ({name}): {desc}"), soft_wrap=True)


def render_summary(s: IngestSummary, console: Console, verbose: bool = False) -> None:
    if verbose:
        render_files(s, console)
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold")
    t.add_column()
    t.add_row("store", s.store)
    t.add_row("files", f"{s.files}  (new {s.new_files}, appended {s.appended_files}, unchanged {s.unchanged_files}"
              + (f", duplicates skipped {len(s.duplicate_files)}" if s.duplicate_files else "") + ")")
    if s.formats:
        t.add_row("formats", ", ".join(f"{k} {v}" for k, v in sorted(s.formats.items())))
    t.add_row("ranks", f"{len(s.ranks)}  ({_ranks_text(s.ranks)})")
    # the names as written; the count of machines: a loopback name beside a named host is that host
    t.add_row("hosts", f"{len(host_names.distinct(s.hosts))}"
              + (f"  ({', '.join(s.hosts[:8])}{' ...' if len(s.hosts) > 8 else ''})" if s.hosts else ""))
    t.add_row("lines read", f"{s.lines_read:,}")
    t.add_row("events kept", f"{s.events:,}")
    t.add_row("lines rejected", f"{s.rejected:,}" + ("" if s.lines_read == s.events + s.rejected else "  (ACCOUNTING MISMATCH)"))
    for reason, n in s.rejected_by_reason.items():
        t.add_row("", f"  {n:,}  {reason}")
    t.add_row("time span", f"{s.start or '?'}  ->  {s.end or '?'}")
    t.add_row("read", f"{_human_bytes(s.bytes_read)} in {s.seconds:.2f} s ({s.mb_per_s:.1f} MB/s)")
    console.print(t)
    no_rank = [f for f in s.per_file if f["rank_from"] == "none" and f["events"]]
    from_path = [f for f in s.per_file if f["rank_from"] == "path"]
    if from_path:
        console.print(f"note: rank taken from the file path for {len(from_path)} file(s), e.g. {from_path[0]['path']}")
    if no_rank:
        console.print(f"note: {len(no_rank)} file(s) carry no rank in records or path, e.g. {no_rank[0]['path']}"
                      " (their events have rank = null)")
    for pr in s.problems:
        console.print(f"warning: {pr['path']}: {pr['problem']}")
    if s.repaired_files:
        console.print(f"note: {s.repaired_files} file(s) read again: their parts of the store were damaged")
    for w in s.warnings:
        console.print(f"warning: {w}")
    for d in s.duplicate_files[:5]:
        console.print(f"note: skipped {d['path']}: same content as {d['duplicate_of']}")
    for sk in s.skipped:
        console.print(f"warning: skipped {sk['path']} (--skip-unreadable): {sk['reason']}")
    if s.rejected:
        console.print(f"see the rejected lines with: forensics rejects {s.store}")


def render_rejects(run: Run, *, reason: str | None, file: str | None, limit: int, fmt: str, console: Console,
                   redact: bool = True) -> None:
    q = run.rejects()
    if reason:
        q = q.filter(pl.col("reason").str.contains(reason, literal=True))
    if file:
        q = q.filter(pl.col("source_file").str.contains(file, literal=True))
    q = q.sort("source_file", "line")
    if limit:
        q = q.head(limit)
    df = q.collect().with_columns(
        pl.col("raw").map_elements(lambda b: b.decode("utf-8", "backslashreplace"), return_dtype=pl.String).alias("text")
    ).drop("raw")
    if redact:   # the raw bytes are log text: the one policy of report/redact.py
        from ..report.redact import redact_frame

        df = redact_frame(df)
    if fmt == "jsonl":
        for row in df.iter_rows(named=True):
            sys.stdout.write(json.dumps(row) + "\n")
        return
    if fmt == "json":
        sys.stdout.write(json.dumps(df.to_dicts()) + "\n")
        return
    if fmt == "csv":
        w = csv.writer(sys.stdout)
        w.writerow(df.columns)
        w.writerows(df.iter_rows())
        return
    if fmt != "table":   # the CLI refuses other formats; a library caller gets a plain error
        raise ValueError(f"unknown format {fmt!r}")
    total = run.totals.get("rejected", 0)
    if not total:
        console.print("no rejected lines: every line read became an event", markup=False, highlight=False)
        return
    import os

    from .layout import Col, print_fitted

    files = df["source_file"].unique().to_list()
    base = os.path.commonpath(files) if len(files) > 1 else os.path.dirname(files[0]) if files else ""
    base = base if os.path.isdir(base) else os.path.dirname(base)
    where = f" (files under {base})" if base else ""
    console.print(f"{df.height} of {total} rejected lines{where}", markup=False, highlight=False)
    cols = [Col("file:line", key=True, path=True), Col("reason", wrap=16, cap=50, drop=1),
            Col("bytes", "right", drop=2), Col("raw (start)", wrap=20, cap=60, drop=1)]
    rows = [[f"{os.path.relpath(r['source_file'], base) if base else r['source_file']}:{r['line']}", r["reason"],
             str(r["raw_len"]), Text(r["text"][:RAW_CHARS].rstrip("\n"))] for r in df.iter_rows(named=True)]
    print_fitted(console, cols, rows, hint="--format jsonl has every field")


RAW_CHARS = 120   # of a rejected line's text in the table; --format jsonl has its first 4 KiB
