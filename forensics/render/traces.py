"""`forensics trace-stats` output: the breakdown table, top kernels and late arrivals.

Owns turning a traces.stats.TraceStats into text (a table per question), JSON (everything) or
CSV (the per-rank / per-step breakdown). Must not compute anything about the traces.
"""
from __future__ import annotations

import json
import sys

import polars as pl
from rich.console import Console
from rich.text import Text

from ..traces.stats import TraceStats
from .events import write_rows
from .layout import Col, print_fitted

MAX_STEP_ROWS = 64

BREAKDOWN = [  # key, head, format, drop order (None: key column)
    ("rank", "rank", "{}", None), ("step", "step", "{}", None), ("kernels", "kernels", "{:,}", 5),
    ("span_us", "span ms", "ms", None), ("compute_pct", "compute %", "pct", None),
    ("non_compute_pct", "non-compute %", "pct", None), ("idle_pct", "idle %", "pct", None),
    ("host_wait_us", "host wait ms", "ms", 2), ("kernel_wait_us", "kernel wait ms", "ms", 3),
    ("other_wait_us", "other wait ms", "ms", 1), ("comm_us", "comm ms", "ms", 4),
    ("overlap_pct", "comm/compute overlap %", "pct", None),
]


def _fmt(v: object, how: str) -> str:
    if v is None:
        return "all" if how == "{}" else "-"
    if how == "ms":
        return f"{float(v) / 1000:,.3f}"  # type: ignore[arg-type]
    if how == "pct":
        return f"{float(v):.2f}"  # type: ignore[arg-type]
    return how.format(v)


def render_trace_stats(s: TraceStats, fmt: str, console: Console) -> None:
    if fmt == "json":
        sys.stdout.write(json.dumps(s.to_dict(), indent=1, default=str) + "\n")
        return
    if fmt == "csv":
        write_rows(s.breakdown, "csv")
        return
    say = lambda t: console.print(t, markup=False, highlight=False)  # noqa: E731
    say(f"{len(s.traces)} trace(s), {sum(t.gpu_activities for t in s.traces):,} GPU activities; "
        "step 'all' = the whole trace as HTA counts it (with 2+ profiler steps, the last is left out)")
    shown = s.breakdown
    per_step = shown.filter(pl.col("step").is_not_null())
    many = per_step.height > MAX_STEP_ROWS
    if many:   # thousands of profiled steps: the whole-trace rows here, every step in csv/json
        shown = shown.filter(pl.col("step").is_null())
    # an optional column that is zero (or empty) on every row says nothing: left out, and said so,
    # before a column with numbers gives way to the width
    zero = [h for k, h, _, d in BREAKDOWN if d is not None and k in shown.columns and shown.height
            and not shown[k].fill_null(0).cast(pl.Float64).abs().sum()]
    spec = [(k, h, f, d) for k, h, f, d in BREAKDOWN if h not in zero]
    cols = [Col(h, "right", key=d is None, drop=d or 0) for _, h, _, d in spec]
    rows = [[Text(_fmt(r[k], f)) for k, _, f, _ in spec] for r in shown.iter_rows(named=True)]
    print_fitted(console, cols, rows, title="GPU time per rank" + ("" if many else " and profiler step"),
                 hint="--format csv has every column")
    if zero:
        say(f"0 on every row, not shown: {', '.join(zero)}")
    if any(h.endswith("wait ms") for _, h, _, _ in spec):
        say("the wait columns are summed over a rank's CUDA streams (each gap before an activity on its own stream), "
            "so together they can exceed the span")
    if many:
        say(f"{per_step.height:,} per-step rows are not shown: --format csv or json has them")
    if s.top_kernels.height:
        top = (s.top_kernels.group_by("name", "category").agg(pl.col("count").sum(), pl.col("time_us").sum())
               .sort("time_us", descending=True).head(10))
        print_fitted(console, [Col("kernel", wrap=30, cap=90, one_line=True), Col("category"), Col("count", "right"),
                               Col("ms", "right", key=True)],
                     [[Text(r["name"]), Text(r["category"]), Text(f"{r['count']:,}"), Text(f"{r['time_us'] / 1000:,.3f}")]
                      for r in top.iter_rows(named=True)], title="top kernels by GPU time, summed over ranks")
    if s.late.height:
        print_fitted(console, [Col("rank", "right", key=True), Col("last at", "right", key=True),
                               Col("median late ms", "right"), Col("others waited ms", "right")],
                     [[Text(str(r["rank"])), Text(f"{r['times_last']} of {r['matched']}"),
                       Text(f"{r['median_late_us'] / 1000:,.3f}"), Text(f"{r['others_wait_us'] / 1000:,.3f}")]
                      for r in s.late.iter_rows(named=True)],
                     title="who starts communication kernels last (k-th kernel of each collective, all ranks)")
    if s.straggler:
        g = s.straggler
        ev = g["evidence"][0] if g["evidence"] else None
        where = f" (e.g. {ev['file']}:{ev['line']})" if ev else ""
        say(f"rank {g['rank']} arrives last at {g['times_last']} of {g['matched']} communication kernels, a median "
            f"{g['median_late_us'] / 1000:.3f} ms after the median rank{where}")
    for n in s.notes:
        say(f"note: {n}")
