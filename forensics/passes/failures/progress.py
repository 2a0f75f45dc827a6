"""How far each rank got: its last training-progress event (a step-carrying, non-ERROR line)
and its highest collective sequence number, on the common clock.
"""
from __future__ import annotations

import bisect
import datetime as dt
from typing import Any

import polars as pl

from ..context import Context


def _progress_rows() -> pl.Expr:
    """The events that show training progress: a step-carrying, non-ERROR line of a rank."""
    return pl.col("rank").is_not_null() & pl.col("step").is_not_null() & (pl.col("level") != "ERROR")


def _progress_maxima(ctx: Context) -> pl.LazyFrame:
    """Per (rank, host): its highest step and seq among its progress events. Without their
    times: `_progress_last` reads those from the end of the run only."""
    return (
        ctx.events.select("rank", "host", "level", "step", "seq")
        .filter(_progress_rows())
        .group_by("rank", "host")
        .agg(pl.col("step").max(), pl.col("seq").max())
    )


def _progress_last(ctx: Context, since: dt.datetime | None) -> pl.LazyFrame:
    """Per (rank, host) with a progress event at or after `since` (None: any): the time of its
    last one and the line to cite, its first in store order at that time. The bound lets the
    scan skip the row groups (a rank's earlier hours) whose statistics end before it."""
    ts = pl.col("timestamp")
    at_last = ts == ts.max()
    return (
        ctx.events.select("rank", "host", "timestamp", "level", "step", "source_file", "line")
        .filter(_progress_rows() & (ts >= since if since is not None else pl.lit(True)))
        .group_by("rank", "host", maintain_order=True)
        .agg(ts.max(), pl.col("source_file").filter(at_last).first(), pl.col("line").filter(at_last).first())
    )


def _progress_since(ctx: Context) -> dt.datetime | None:
    """Where the last progress events of the ranks likely are: the earliest start of a rank's
    last step in the step table, widened by the largest clock offset (it is on the common clock,
    the events on their host's). A guess: `_progress` checks it and reads everything when wrong."""
    s = ctx.steps
    if s.is_empty():
        return None
    last = s.filter(pl.col("step") == pl.col("step").max().over("rank"))
    off = pl.duration(microseconds=(pl.col("clock_offset_ms").abs().max() * 1000).ceil().cast(pl.Int64))
    return last.select(pl.col("t_start").min() - off).item()


def _progress(ctx: Context, maxima: pl.DataFrame, last: pl.DataFrame) -> pl.DataFrame:
    """Per rank: last training-progress event (a step-carrying, non-ERROR line) and its seq.

    Reduced per (rank, host) on the logged time first (`_progress_maxima`, `_progress_last`: one
    host's events share one clock offset, so its latest event is the same on either clock),
    then per rank on the common clock: the offsets are applied to a row per (rank, host), not
    to every event. `last` holds the times of the (rank, host)s that logged progress after a
    bound (`_progress_since`); when one is missing (it stopped before), they are read again
    from every event."""
    if last.height < maxima.height:
        last = _progress_last(ctx, None).collect()
    per_host = maxima.join(last, on=["rank", "host"], how="left", nulls_equal=True)
    at = pl.col("ts_aligned").arg_max()
    return (
        ctx.aligned(per_host.lazy())
        .group_by("rank")
        .agg(
            pl.col("ts_aligned").max().alias("last_ts"),
            pl.col("step").max().alias("last_step"),
            pl.col("seq").max().alias("max_seq"),
            pl.col("source_file").get(at).alias("file"),
            pl.col("line").get(at),
        )
        .sort("rank")
        .collect()
    )


# A silent rank is named by when it last logged; within this margin of the next rank's last line
# (or half a step: ranks log a step's end at slightly different times) the order is thin evidence.
SILENT_MARGIN_S = 1.0


def _trained_after(r: dict[str, Any], progress: dict[int, dict[str, Any]]) -> bool:
    """The rank went on training after this line (a caught and logged exception, a retried sample)."""
    if r["rank"] is None or int(r["rank"]) not in progress or r["timestamp"] is None:
        return False
    last = progress[int(r["rank"])]["last_ts"]
    return last is not None and last > r["timestamp"]


def _restarted_after(ctx: Context, rows: list[dict[str, Any]]) -> set[int]:
    """The ids of `rows` (lines of ranks that trained after them) after which their rank's
    training started over: its first step after the line is at or below its last step before it.
    A process that survived an exception goes on from the step it was at; a new process (torch
    elastic restarts every worker after a failure: failures/restart.py) resumes from a checkpoint
    or from step 0 — the process that wrote the line had ended. One read of those ranks' progress."""
    rows = [r for r in rows if r["rank"] is not None and (r.get("logged_ts") or r["timestamp"]) is not None]
    if not rows:
        return set()
    prog = (
        ctx.events.select("rank", "timestamp", "level", "step")
        .filter(_progress_rows() & pl.col("timestamp").is_not_null()
                & pl.col("rank").is_in(sorted({int(r["rank"]) for r in rows})))
        .select("rank", "timestamp", "step").sort("rank", "timestamp").collect()
    )
    by_rank = {int(k[0]): (g.get_column("timestamp").to_list(), g.get_column("step").to_list())
               for k, g in prog.group_by("rank")}
    out: set[int] = set()
    for r in rows:
        ts, steps = by_rank.get(int(r["rank"]), ([], []))
        i = bisect.bisect_right(ts, r.get("logged_ts") or r["timestamp"])
        if 0 < i < len(ts) and steps[i] <= steps[i - 1]:
            out.add(id(r))
    return out


def _others_went_on(ctx: Context, r: dict[str, Any], progress: dict[int, dict[str, Any]]) -> bool:
    """Another rank logged progress clearly after this line (by SILENT_MARGIN_S, or two steps)."""
    if r["timestamp"] is None:
        return False
    margin = dt.timedelta(seconds=max(SILENT_MARGIN_S, 2 * (ctx.median_step_ms or 0.0) / 1000))
    return any(p["last_ts"] is not None and p["last_ts"] > r["timestamp"] + margin
               for k, p in progress.items() if k != r.get("logged_rank", r["rank"]))
