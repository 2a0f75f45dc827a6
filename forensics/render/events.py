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
from .layout import COMFORTABLE, Col, fit, print_fitted
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
                           if isinstance(t, pl.List) and not t.inner.is_nested())
        p = p.with_columns(_json_text(p[c]) for c, t in p.schema.items() if t.is_nested() or t == pl.Binary)
        stream.write(p.with_columns(csv_float(c) for c, t in p.schema.items() if t.is_float()).write_csv())
    elif fmt == "json":
        stream.write(p.write_json() + "\n")
    else:  # the CLI validates formats; a library caller gets a plain error
        raise ValueError(f"unknown format {fmt!r}")


def _json_text(s: pl.Series) -> pl.Series:
    """A nested column (a struct, a list of lists or structs) as JSON text per value, or bytes as
    text (invalid UTF-8 replaced): what a CSV cell can hold."""
    import json

    if s.dtype == pl.Binary:
        return pl.Series(s.name, [None if v is None else v.decode("utf-8", "replace") for v in s.to_list()], pl.String)
    return pl.Series(s.name, [None if v is None else json.dumps(v, default=str) for v in s.to_list()], pl.String)


# CSV is read by people and spreadsheets: a float is rounded to 12 significant digits, which
# removes the noise of binary arithmetic (5.985499999999999 -> 5.9855) and keeps what was
# measured; epoch seconds (>= 1e6) keep 6 decimals (microseconds). jsonl/json keep every bit.
CSV_SIGNIFICANT = 12
CSV_LARGE = 1e6


def csv_float(name: str) -> pl.Expr:
    c = pl.col(name)
    return pl.when(c.abs() >= CSV_LARGE).then(c.round(6)).otherwise(c.round_sig_figs(CSV_SIGNIFICANT)).alias(name)


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
HOST_CHARS = 16          # a host name longer than this is cut (with …) in tables


def clip(s: str, n: int) -> str:
    return s if len(s) <= n else s[:n - 1] + "…"


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


def print_events_table(console: Console, df: pl.DataFrame, title: str | None = None, hint: str = "") -> None:
    """Events as a table fitted to the console: time, rank, host, level, event, message, the
    metrics they carry, file:line. Time, rank, level, event and file:line are always shown whole;
    the message wraps; host and the metrics give way on a narrow terminal (a note names them)."""
    metrics = present_columns(df, [c for c in EVENT_SCHEMA if c not in TABLE_HIDDEN])
    day = one_day(df["timestamp"]) if df.height else None
    show_host = "host" in df.columns and df["host"].null_count() < df.height
    rows: list[list[Any]] = []
    for r in df.iter_rows(named=True):
        level = str(r["level"]) if r.get("level") is not None else ""
        row: list[Any] = [clock_cell(r["timestamp"], day), cell(r["rank"])]
        if show_host:
            row.append(clip(cell(r["host"]), HOST_CHARS))
        row += [Text(level, style=LEVEL_STYLE.get(level, "")), cell(r["event"]), Text(cell(r["message"]))]
        row.append(Text(f"{short_path(r.get('source_file'))}:{r.get('line')}" if r.get("source_file") else ""))
        rows.append(row)
    cols = [Col(f"{day} (UTC)" if day else "time (UTC)", key=True), Col("rank", "right", key=True)]
    if show_host:
        cols.append(Col("host", drop=9))
    cols += [Col("level", key=True), Col("event", key=True), Col("message", wrap=COMFORTABLE, cap=80, drop=1, below=True)]
    file_col = Col("file:line", key=True, path=True)

    def with_metrics(names: list[str], combined: bool) -> tuple[list[Col], list[list[Any]]]:
        if combined:
            texts = df.select(metrics_text(names)).to_series().to_list() if df.height else []
            mcols = [Col("metrics", wrap=16, cap=60, drop=2)]
            mvals = [[Text(t or "")] for t in texts]
        else:
            mcols = [Col(m, "right", drop=3 + k) for k, m in enumerate(names)]
            mvals = [[Text(cell(v)) for v in vs] for vs in df.select(names).iter_rows()] if names else [[] for _ in rows]
        return ([*cols, *mcols, file_col],
                [[*r[:-1], *m, r[-1]] for r, m in zip(rows, mvals)])

    # up to METRIC_COLUMNS_MAX metrics get a column each when they fit; else one wrapped "k=v" column
    combined = len(metrics) > METRIC_COLUMNS_MAX
    all_cols, all_rows = with_metrics(metrics, combined)
    if metrics and not combined and fit(all_cols, all_rows, console.width)[2]:
        all_cols, all_rows = with_metrics(metrics, True)
    print_fitted(console, all_cols, all_rows, title=title, hint=hint)


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
    print_events_table(console, df, hint="--format jsonl has every column")
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
