"""Rendering of event rows and of any result frame: rich tables for people, JSONL/CSV/JSON for pipes.

Owns presentation of `forensics events` and `forensics sql` output, and the machine formats every
query command shares (`write_rows`): one object per row keyed by the column names, timestamps
ISO-8601 with Z, NaN as null. It computes nothing and reads no logs.
"""
from __future__ import annotations

import datetime as dt
import sys
from typing import Any, TextIO

import polars as pl
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..schema import EVENT_SCHEMA
from ..timeline import plain

PIPE_FORMATS = ("jsonl", "csv", "json")
# Shown in the table view only through other columns (file:line) or not at all: the raw JSON is
# what --format jsonl is for.
TABLE_HIDDEN = {"extra", "fields", "format", "rank_source", "event_source", "local_rank", "source_file", "line", "timestamp",
                "rank", "host", "level", "event", "message"}
LEVEL_STYLE = {"ERROR": "bold red", "WARN": "yellow", "DEBUG": "dim"}
TIME_FORMAT = "%Y-%m-%d %H:%M:%S.%f"


def write_rows(df: pl.DataFrame, fmt: str, stream: TextIO | None = None, drop_null_columns: bool = False) -> None:
    """jsonl: one object per line; csv: a header then rows; json: one array of objects."""
    stream = stream or sys.stdout
    p = plain(df, drop_null_columns)
    if fmt == "jsonl":
        if p.height:
            stream.write(p.write_ndjson())
    elif fmt == "csv":
        # nested values (lists) have no CSV form: as JSON text
        p = p.with_columns(pl.col(c).cast(pl.List(pl.String)).list.join(",") for c, t in p.schema.items()
                           if isinstance(t, pl.List))
        stream.write(p.write_csv())
    elif fmt == "json":
        stream.write(p.write_json() + "\n")
    else:  # the CLI validates formats; a library caller gets a plain error
        raise ValueError(f"unknown format {fmt!r}")


def cell(v: Any) -> str:
    """A value as table text: times to the microsecond, floats to 6 significant digits (epoch
    seconds keep their milliseconds), null as empty."""
    if v is None:
        return ""
    if isinstance(v, dt.datetime):
        return v.strftime(TIME_FORMAT)[:-3]
    if isinstance(v, float):
        if v != v:
            return "nan"
        if abs(v) >= 1e6:
            return f"{v:.3f}"
        return f"{v:.6g}"
    return str(v)


def present_columns(df: pl.DataFrame, candidates: list[str]) -> list[str]:
    """The candidate columns that are not null everywhere (metrics an event type never carries
    would be empty columns)."""
    return [c for c in candidates if c in df.columns and df[c].null_count() < df.height]


# Up to this many metric columns get a column each; beyond (a mix of event types), the metrics
# of each event are one "k=v" column: every event type carries different ones.
METRIC_COLUMNS_MAX = 4


def metrics_text(names: list[str]) -> pl.Expr:
    """'data_load_ms=11.8 disk_read_mbps=1164' from the non-null metric columns of each row."""
    return pl.concat_str(
        [pl.when(pl.col(c).is_not_null()).then(pl.lit(f"{c}=") + pl.col(c).cast(pl.String)) for c in names],
        separator=" ", ignore_nulls=True,
    ).alias("metrics")


def one_day(ts: pl.Series) -> str | None:
    """The date when every time in `ts` falls on it (then rows show only the clock time)."""
    days = ts.drop_nulls().dt.date().unique()
    return str(days[0]) if days.len() == 1 else None


def clock_cell(v: dt.datetime | None, day: str | None) -> str:
    if v is None:
        return ""
    return v.strftime("%H:%M:%S.%f")[:-3] if day and str(v.date()) == day else cell(v)


def events_table(df: pl.DataFrame, title: str | None = None) -> Table:
    """Events as a table: time, rank, host, level, event, message, the metrics they carry,
    file:line."""
    metrics = present_columns(df, [c for c in EVENT_SCHEMA if c not in TABLE_HIDDEN])
    day = one_day(df["timestamp"]) if df.height else None
    if len(metrics) > METRIC_COLUMNS_MAX:
        df = df.with_columns(metrics_text(metrics))
        metrics = ["metrics"]
    show_host = "host" in df.columns and df["host"].null_count() < df.height
    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    t.add_column(f"{day} (UTC)" if day else "time (UTC)", no_wrap=True)
    t.add_column("rank", justify="right", no_wrap=True)
    if show_host:
        t.add_column("host", no_wrap=True, overflow="ellipsis", max_width=16)
    t.add_column("level", no_wrap=True)
    t.add_column("event", no_wrap=True)
    # the free text and the metrics take what is left, wrapped; the rest stays on one line
    t.add_column("message", overflow="fold", min_width=16, max_width=80)
    for m in metrics:
        if m == "metrics":
            t.add_column(m, overflow="fold", min_width=16, max_width=60)
        else:
            t.add_column(m, justify="right", no_wrap=True)
    t.add_column("file:line", no_wrap=True, overflow="ellipsis", min_width=12)
    for r in df.iter_rows(named=True):
        level = str(r["level"]) if r.get("level") is not None else ""
        row: list[Any] = [clock_cell(r["timestamp"], day), cell(r["rank"])]
        if show_host:
            row.append(cell(r["host"]))
        row += [Text(level, style=LEVEL_STYLE.get(level, "")), cell(r["event"]), Text(cell(r["message"]))]
        row += [Text(cell(r[m])) for m in metrics]
        row.append(Text(f"{short_path(r.get('source_file'))}:{r.get('line')}" if r.get("source_file") else ""))
        t.add_row(*row)
    return t


def short_path(path: str | None) -> str:
    """The last two path components: enough to tell rank files apart in a table."""
    if not path:
        return ""
    parts = path.rstrip("/").split("/")
    return "/".join(parts[-2:])


def render_events(df: pl.DataFrame, fmt: str, console: Console, *, limit: int = 0) -> None:
    """`df` holds up to limit+1 rows (one more than shown tells that more follow)."""
    more = bool(limit) and df.height > limit
    if more:
        df = df.head(limit)
    if fmt in PIPE_FORMATS:
        write_rows(df, fmt)
        return
    if not df.height:
        console.print("no events match", markup=False, highlight=False)
        return
    console.print(events_table(df))
    if more:
        console.print(f"first {limit} events shown; more follow: --limit 0 for all, or --format jsonl for pipes",
                      markup=False, highlight=False)


def frame_table(df: pl.DataFrame, title: str | None = None) -> Table:
    """Any frame as a table (sql results)."""
    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for c, dtype in df.schema.items():
        t.add_column(c, justify="right" if dtype.is_numeric() else "left", overflow="fold")
    for r in df.iter_rows():
        t.add_row(*(Text(cell(v)) for v in r))
    return t


def render_frame(df: pl.DataFrame, fmt: str, console: Console, *, max_rows: int = 1000) -> None:
    if fmt in PIPE_FORMATS:
        write_rows(df, fmt)
        return
    shown = df.head(max_rows)
    console.print(frame_table(shown))
    note = f"{df.height} row{'s' if df.height != 1 else ''}"
    if df.height > max_rows:
        note += f", first {max_rows} shown (--format csv|jsonl for all)"
    console.print(note, markup=False, highlight=False)
