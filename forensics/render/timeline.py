"""Rendering of the timeline views: `forensics ranks`, `forensics timeline`, `forensics last-10s`.

Owns presentation only: takes the frames and the Snapshot that `forensics.timeline` computed and
prints them as rich tables (people) or JSON/CSV (pipes, CI). It states facts the library found
("rank 5 went silent first, 1800 s before the end"); judging them is the diagnosis' job.
"""
from __future__ import annotations

import json
import sys
from typing import Any

import polars as pl
from rich.console import Console
from rich.text import Text

from ..timeline import Snapshot, iso
from .events import HOST_CHARS, PIPE_FORMATS, cell, clip, clock_cell, one_day, present_columns, print_events_table, short_path, write_rows
from .layout import Col, print_fitted
from .ingest import _ranks_text

# Hosts whose clock estimate is within this of the consensus are not listed one by one: the
# logged timestamps have millisecond resolution, so a few ms is noise.
CLOCK_NOTE_MS = 5.0
# last-10s of more ranks than this: a row per group of ranks in the same state (`_snapshot_groups`)
GROUP_ABOVE = 64
RANKS_CHARS = 40


def _say(console: Console, text: str) -> None:
    console.print(text, markup=False, highlight=False)


def _ms(v: float | None) -> str:
    return "" if v is None else f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}"


def _pct(v: float | None) -> str:
    return "" if v is None else f"{100 * v:.0f}%"


def duration_text(v: float | None) -> str:
    """A duration, short: 0.08s, 12.3s, 30m01s, 2h05m."""
    if v is None:
        return ""
    if abs(v) < 60:
        return f"{v:.2f}s" if abs(v) < 10 else f"{v:.1f}s"
    v = round(v)
    if v < 3600:
        return f"{v // 60}m{v % 60:02d}s"
    return f"{v // 3600}h{v % 3600 // 60:02d}m"


def clock_note(df: pl.DataFrame, clock: str = "clock", offset: str = "offset_ms") -> str | None:
    """'clocks: node3 +249.5 ms, node5 -120.5 ms (others within 5 ms)' or None."""
    if not df.height or offset not in df.columns:
        return None
    rows = df.select(clock, offset).unique().drop_nulls().sort(clock)
    far = rows.filter(pl.col(offset).abs() >= CLOCK_NOTE_MS)
    if not far.height:
        return None
    parts = [f"{c} {o:+.1f} ms" for c, o in far.iter_rows()]
    rest = rows.height - far.height
    tail = f" (others within {CLOCK_NOTE_MS:.0f} ms)" if rest else ""
    return "clock offsets from collective ends: " + ", ".join(parts) + tail


# --- ranks ---------------------------------------------------------------------------------------

# (key, header, format, drop): drop orders what gives way on a narrow terminal (higher first);
# None marks the key columns, always shown whole
RANK_COLUMNS: list[tuple[str, str, Any, int | None]] = [
    ("rank", "rank", cell, None), ("host", "host", cell, 14), ("first_ts", "first", cell, 13),
    ("last_ts", "last event", cell, None), ("last_step", "step", cell, None), ("lag_steps", "behind", cell, 2),
    ("events", "events", cell, 12), ("step_ms", "step ms", _ms, 5), ("data_ms", "data ms", _ms, 8),
    ("comm_ms", "comm ms", _ms, 9), ("comm_share", "comm %", _pct, 7), ("wait_ms", "wait ms", _ms, 6),
    ("gpu_util", "GPU %", _ms, 10), ("temp_max", "max °C", _ms, 11), ("warn", "WARN", cell, 4),
    ("error", "ERROR", cell, 3), ("silent_s", "silent", duration_text, 1), ("clock_offset_ms", "clock ms", _ms, 15),
]
# compute_ms and silent_order are in --format json/csv; the table keeps to what fits a screen
WIDER = "a wider terminal shows them; --format csv has every column"


def render_ranks(df: pl.DataFrame, fmt: str, console: Console, monotonic: pl.DataFrame | None = None) -> None:
    """The `ranks` table; notes: ranks that never logged, who went silent first, clock offsets,
    time going backwards."""
    if fmt in PIPE_FORMATS:
        write_rows(df, fmt)
        return
    day = one_day(pl.concat([df["first_ts"], df["last_ts"]]))
    if day:   # one date for all: show clock times, the date in the header
        df = df.with_columns(pl.col("first_ts", "last_ts").dt.strftime("%H:%M:%S%.3f"))
    cols = [c for c in RANK_COLUMNS if c[0] in present_columns(df, [c[0] for c in RANK_COLUMNS]) or c[0] == "rank"]
    if "clock_offset_ms" in df.columns and not (df["clock_offset_ms"].abs() >= CLOCK_NOTE_MS).any():
        cols = [c for c in cols if c[0] != "clock_offset_ms"]   # all clocks agree: nothing to show
    if day:
        cols = [(k, f"{h} ({day})" if k == "first_ts" else h, fn, d) for k, h, fn, d in cols]
    spec = [Col(head, "left" if key in ("host", "first_ts", "last_ts") else "right", key=d is None, drop=d or 0)
            for key, head, _, d in cols]
    rows = [[Text(fn(r[k])) for k, _, fn, _ in cols] for r in df.iter_rows(named=True)]
    styles = ["red" if r["events"] == 0 else ("bold" if r.get("silent_order") == 1 and df.height > 1 else "")
              for r in df.iter_rows(named=True)]
    print_fitted(console, spec, rows, row_styles=styles, hint=WIDER)
    missing = df.filter(pl.col("events") == 0)["rank"].drop_nulls().to_list()
    if missing:
        _say(console, f"no events at all from rank(s) {_ranks_text(missing)}: a file without lines, or no file "
                      "(ranks are numbered 0..world_size-1)")
    live = df.filter(pl.col("last_ts").is_not_null()).sort("silent_order")
    if live.height > 1 and _went_silent_early(live.row(0, named=True), live.row(1, named=True)):
        first = live.row(0, named=True)
        behind = f", {first['lag_steps']} step(s) behind" if first.get("lag_steps") else ""
        step = f" at step {first['last_step']}" if first.get("last_step") is not None else ""
        _say(console, f"first to go silent: rank {first['rank']}, {duration_text(first['silent_s'])} before the last "
                      f"event of the run{step}{behind}")
    note = clock_note(df.rename({"host": "clock", "clock_offset_ms": "offset_ms"}).select("clock", "offset_ms")
                      .drop_nulls()) if "clock_offset_ms" in df.columns else None
    if note:
        _say(console, note + " (silence is compared on the aligned clock)")
    if monotonic is not None and monotonic.height:
        for r in monotonic.head(5).iter_rows(named=True):
            n, rank = r["backwards"], "" if r["rank"] is None else f" (rank {r['rank']})"
            _say(console, f"time goes backwards {n} time{'s' if n != 1 else ''} in {r['source_file']}{rank}, "
                          f"first at {r['source_file']}:{r['first_line']}, up to {_ms(r['max_back_ms'])} ms")
        if monotonic.height > 5:
            _say(console, f"... and in {monotonic.height - 5} more file(s)")


def _went_silent_early(first: dict, second: dict) -> bool:
    """Whether the first rank to go silent did so before the others: behind in steps, or silent
    for at least 10 ms and at least twice as long as the next one. Ranks that stop together (a
    clean end: 0.00s, 0.02s vs 0.03s) have no "first to go silent" worth a line."""
    if first.get("lag_steps"):
        return True
    a, b = first.get("silent_s") or 0.0, second.get("silent_s") or 0.0
    return a >= 0.01 and a >= 2 * b


# --- timeline ------------------------------------------------------------------------------------

def _job_timeline(job: pl.DataFrame, fmt: str, console: Console, span: tuple[int, int] | None) -> None:
    """The job's step lines: one row per logged step, its time, throughput, loss, lr, the line."""
    from rich.table import Table

    if fmt in PIPE_FORMATS:
        write_rows(job, fmt)
        return
    steps = job["step"]
    head = f"steps {steps.min()}-{steps.max()}"
    if span:
        head += f" (the run logged steps {span[0]}-{span[1]})"
    _say(console, head + ", the job's own step lines: they name no rank (per-rank phases are not in this log)")
    t = Table(box=None, pad_edge=False, show_edge=False)
    cols = [c for c in ("step", "step_time_ms", "samples_per_s", "loss", "lr", "grad_norm")
            if c == "step" or job.get_column(c).drop_nulls().len()]
    for c in cols + ["file:line"]:
        t.add_column({"step_time_ms": "step ms", "samples_per_s": "samples/s", "grad_norm": "grad norm"}.get(c, c),
                     justify="left" if c == "file:line" else "right")
    for r in job.iter_rows(named=True):
        cells = ["-" if r[c] is None else (f"{r[c]:.3g}" if c == "lr" else f"{r[c]:.4g}" if isinstance(r[c], float)
                                             else str(r[c])) for c in cols]
        t.add_row(*cells, f"{short_path(r['source_file'])}:{r['line']}")
    console.print(t)


PER_RANK_MAX = 8   # above this many ranks a step is one summary row


def render_timeline(rows: pl.DataFrame, fmt: str, console: Console, *, offsets: pl.DataFrame | None = None,
                    ranks: list[int] | None = None, span: tuple[int, int] | None = None,
                    per_rank: bool | None = None, job: pl.DataFrame | None = None) -> None:
    """`rows`: the step table joined with arrivals, one row per (step, rank), for all ranks of the
    steps shown (a rank can only be 'last' among all). `ranks` limits the rows shown. `job`: the
    job's own step lines, shown when no rank's step is timed (`Timeline.job`)."""
    if not rows.height and job is not None and job.height:
        _job_timeline(job, fmt, console, span)
        return
    shown = rows.filter(pl.col("rank").is_in(ranks)) if ranks else rows
    if fmt in PIPE_FORMATS:
        write_rows(shown, fmt)
        return
    if not rows.height:
        _say(console, "no steps: no event carries a step number in this range")
        return
    n_ranks = shown["rank"].n_unique()
    steps = rows["step"]
    src = rows["arrival_source"].drop_nulls().mode().to_list()
    head = f"steps {steps.min()}-{steps.max()}"
    if span:
        head += f" (the run logged steps {span[0]}-{span[1]})"
    head += f", {n_ranks} rank(s)"
    if src:
        aligned = offsets is not None and offsets.height > 0
        head += f"; arrival at the collective from {src[0]}" + (" on the aligned clock" if aligned and src[0] != "wait_ms" else "")
    _say(console, head)
    if per_rank if per_rank is not None else n_ranks <= PER_RANK_MAX:
        _per_rank_table(console, shown)
    else:
        _per_step_table(console, rows)
    last = (rows.filter(pl.col("is_last")).group_by("rank").agg(pl.len().alias("n"), pl.col("late_by_ms").median())
            .sort("n", "rank", descending=[True, False]))
    n_steps = rows.filter(pl.col("arrived") >= 2)["step"].n_unique()
    if last.height and n_steps:
        parts = [f"rank {r} in {n} of {n_steps} steps (median {_ms(m)} ms after the median rank)"
                 for r, n, m in last.head(3).iter_rows()]
        _say(console, "arrived last: " + "; ".join(parts) + ("; ..." if last.height > 3 else ""))
    everyone = set(rows["rank"].drop_nulls().to_list())
    no_show = (rows.filter(pl.col("arrival_source").is_not_null()).group_by("step")
               .agg(pl.col("rank").filter(pl.col("arrival_ms").is_not_null())).sort("step"))
    for s, arrived in no_show.tail(3).iter_rows():
        absent = sorted(everyone - set(arrived))
        if absent:
            _say(console, f"step {s}: no arrival at the collective logged by rank(s) {_ranks_text(absent)}")
    incomplete = rows.filter(~pl.col("complete"))
    if incomplete.height:
        by_step = incomplete.group_by("step").agg(pl.col("rank").sort()).sort("step")
        for s, rs in by_step.tail(3).iter_rows():
            _say(console, f"step {s} never finished on rank(s) {_ranks_text(rs)} (no TRAIN_STEP)")
    if offsets is not None:
        note = clock_note(offsets)
        if note:
            _say(console, note)


def _per_rank_table(console: Console, df: pl.DataFrame) -> None:
    heads = [("step", None), ("rank", None), ("host", 8), ("step ms", 1), ("data ms", 4), ("compute ms", 5),
             ("comm ms", 6), ("wait ms", 3), ("arrival +ms", 2), ("order", 7), ("", None)]
    show_host = bool(present_columns(df, ["host"]))
    if not show_host:
        heads = [h for h in heads if h[0] != "host"]
    spec = [Col(h, "left" if h in ("host", "") else "right", key=d is None, drop=d or 0) for h, d in heads]
    rows: list[list[Any]] = []
    styles: list[str] = []
    prev = None
    for r in df.iter_rows(named=True):
        mark = "last" if r["is_last"] else ""
        if not r["complete"]:
            mark = (mark + " unfinished").strip()
        rows.append([cell(r["step"]) if r["step"] != prev else "", cell(r["rank"]),
                     *([cell(r["host"])] if show_host else []),
                     _ms(r["step_time_ms"]) + ("*" if r["step_time_source"] == "derived" else ""),
                     _ms(r["data_load_ms"]), _ms(r["compute_ms"]), _ms(r["comm_ms"]), _ms(r["wait_ms"]),
                     _ms(r["arrival_ms"]), cell(r["order"]), mark])
        styles.append("bold" if r["is_last"] else "")
        prev = r["step"]
    print_fitted(console, spec, rows, row_styles=styles, hint=WIDER)


def _per_step_table(console: Console, df: pl.DataFrame) -> None:
    per = (
        df.group_by("step")
        .agg(
            pl.len().alias("ranks"),
            pl.col("step_time_ms").median(), pl.col("data_load_ms").median(), pl.col("compute_ms").median(),
            pl.col("comm_ms").median(), pl.col("wait_ms").median(),
            pl.col("rank").sort_by("step_time_ms", descending=True, nulls_last=True).first().alias("slowest"),
            pl.col("step_time_ms").max().alias("slowest_ms"),
            pl.col("last_rank").first(), pl.col("late_by_ms").first(), pl.col("spread_ms").first(),
            pl.col("complete").sum().alias("finished"),
        )
        .sort("step")
    )
    heads = [("step", None), ("ranks", 9), ("step ms", 2), ("data ms", 6), ("compute ms", 7), ("comm ms", 8),
             ("wait ms", 5), ("slowest (ms)", 4), ("last to arrive", 1), ("late by ms", 3), ("spread ms", 10),
             ("finished", 2)]
    spec = [Col(h, "right", key=d is None, drop=d or 0) for h, d in heads]
    rows = [[cell(r["step"]), cell(r["ranks"]), _ms(r["step_time_ms"]), _ms(r["data_load_ms"]),
             _ms(r["compute_ms"]), _ms(r["comm_ms"]), _ms(r["wait_ms"]),
             f"{r['slowest']} ({_ms(r['slowest_ms'])})" if r["slowest"] is not None and r["slowest_ms"] is not None else "",
             cell(r["last_rank"]), _ms(r["late_by_ms"]), _ms(r["spread_ms"]), f"{r['finished']}/{r['ranks']}"]
            for r in per.iter_rows(named=True)]
    print_fitted(console, spec, rows, hint=WIDER)


# --- last-10s ------------------------------------------------------------------------------------

EVENTS_SHOWN_MAX = 200   # window events printed in the table view; JSON has them all (bounded per rank)
MESSAGE_CHARS = 40       # one line per rank in the snapshot table; the full text is in the events below


def render_snapshot(s: Snapshot, fmt: str, console: Console) -> None:
    if fmt == "json":
        sys.stdout.write(json.dumps(s.to_dict()) + "\n")
        return
    day = one_day(pl.concat([s.ranks["last_ts"], pl.Series([s.stop], dtype=s.ranks.schema["last_ts"])]))
    _say(console, f"stop: {iso(s.stop)}  ({s.how})")
    _say(console, f"window: {s.window_s:g} s before the stop, from {iso(s.start)}"
                  + (f"; times below are on {day} (UTC)" if day else ""))
    show_host = "host" in present_columns(s.ranks, ["host"])
    # (header, justify, drop): None = a key column, always shown whole
    heads = [("rank", "right", None), *([("host", "left", 5)] if show_host else []), ("step", "right", None),
             ("in window", "right", 3), ("last event", "left", None), ("level", "left", None),
             ("event", "left", None), ("message", "left", 1), ("silent", "right", 2), ("after stop", "right", 4),
             ("file:line", "left", None)]
    # one line per rank when there is room: the message is cut (JSON and the event list below
    # have it whole); on a narrow terminal it wraps
    spec = [Col(h, j, key=d is None, drop=d or 0, wrap=8 if h == "message" else None, path=h == "file:line",
                cap=MESSAGE_CHARS if h == "message" else None, one_line=h == "message", below=h == "message")
            for h, j, d in heads]
    if s.ranks.height > GROUP_ABOVE:
        _snapshot_groups(console, s, spec, show_host, day)
    else:
        _snapshot_rows(console, s, spec, show_host, day)
    if s.quiet:
        _say(console, f"no events in the window: rank(s) {_ranks_text(s.quiet)}")
    if s.missing:
        _say(console, f"never logged at all: rank(s) {_ranks_text(s.missing)}")
    if s.events.height:
        if s.events.height <= EVENTS_SHOWN_MAX:
            print_events_table(console, s.events, title=f"events in the window (up to the newest {s.limit} per rank)",
                               hint="--format json has every field")
        else:
            _say(console, f"{s.events.height} events in the window: narrow with --rank, or see them all with "
                          f"--format json, or: forensics events STORE --since {iso(s.start)} --until {iso(s.stop)}")


def _snapshot_rows(console: Console, s: Snapshot, spec: list[Col], show_host: bool, day: str | None) -> None:
    """A row per rank."""
    rows: list[list[Any]] = []
    styles: list[str] = []
    for r in s.ranks.iter_rows(named=True):
        level = str(r["last_level"]) if r["last_level"] is not None else ""
        msg = cell(r["last_message"])
        rows.append([cell(r["rank"]), *([clip(cell(r["host"]), HOST_CHARS)] if show_host else []), cell(r["step"]),
                     cell(r["in_window"]), clock_cell(r["last_ts"], day),
                     Text(level, style={"ERROR": "bold red", "WARN": "yellow"}.get(level, "")),
                     cell(r["last_event"]), msg,   # plain str: the table makes each a Text (4,096 rows: 2 fewer each)
                     duration_text(r["silent_s"]), cell(r["after_stop"]), _tail(r["last_where"])])
        styles.append("red" if r["last_ts"] is None else ("dim" if r["in_window"] == 0 else ""))
    print_fitted(console, spec, rows, row_styles=styles, hint="--format json has every field")


def _snapshot_groups(console: Console, s: Snapshot, spec: list[Col], show_host: bool, day: str | None) -> None:
    """A row per group of ranks in the same state (last step, level and event), the smallest
    groups first: on 10,240 ranks the hung one is the first row, not one among 10,240. Counts,
    times and silences are ranges over the group; the message and file:line its first rank's."""
    keys = ["step", "last_level", "last_event"]
    g = (s.ranks.group_by(keys, maintain_order=True)
         .agg(pl.col("rank"), pl.col("host").drop_nulls().unique().alias("hosts"),
              *(getattr(pl.col(c), f)().alias(f"{c}_{f}") for c in ("in_window", "last_ts", "silent_s", "after_stop")
                for f in ("min", "max")),
              pl.col("last_message").first(), pl.col("last_where").first(), pl.len().alias("n"))
         .sort("n", pl.col("rank").list.first(), nulls_last=True))

    def span(lo: Any, hi: Any, show=cell) -> str:
        a, b = show(lo), show(hi)
        return a if a == b else f"{a}–{b}"

    rows: list[list[Any]] = []
    styles: list[str] = []
    for r in g.iter_rows(named=True):
        level = str(r["last_level"]) if r["last_level"] is not None else ""
        hosts = r["hosts"]
        rows.append([clip(_ranks_text(r["rank"]), RANKS_CHARS) + (f" ({r['n']:,})" if r["n"] > 1 else ""),
                     *([clip(hosts[0], HOST_CHARS) if len(hosts) == 1 else f"{len(hosts):,} hosts"] if show_host else []),
                     cell(r["step"]), span(r["in_window_min"], r["in_window_max"]),
                     span(r["last_ts_min"], r["last_ts_max"], lambda v: clock_cell(v, day)),
                     Text(level, style={"ERROR": "bold red", "WARN": "yellow"}.get(level, "")),
                     cell(r["last_event"]), cell(r["last_message"]),
                     span(r["silent_s_min"], r["silent_s_max"], duration_text),
                     span(r["after_stop_min"], r["after_stop_max"]), _tail(r["last_where"])])
        styles.append("red" if r["last_ts_max"] is None else ("dim" if r["in_window_max"] == 0 else ""))
    print_fitted(console, [Col("ranks", "left", key=True), *spec[1:]], rows, row_styles=styles,
                 hint="--format json has every field")
    _say(console, f"{s.ranks.height:,} ranks in {g.height:,} group{'s' if g.height != 1 else ''} of the same step, "
                  "level and last event, smallest first (counts, times, silences: ranges over the group; message, "
                  "file:line: its first rank's); one rank: --rank N, every rank: --format json")


def _tail(where: str | None) -> str:
    return short_path(where) if where else ""
