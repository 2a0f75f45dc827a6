"""The last seconds before the stop (`last-10s`): what every rank was doing in a window before
the run stopped, and the time that places events without one (`t_order`).

Reads only the window and, for ranks quiet in it, their own last event. It must not print.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Iterable

import polars as pl

from ..schema import EVENT_SCHEMA
from ..store import Run
from .inputs import TS, Events, _missing_rows, _ms, check_ranks, known_ranks, lazy, scan
from .records import iso, records
from .stoptime import stop_time


# --- the last seconds before the stop ------------------------------------------------------------

# What the snapshot reads of each event: everything but the verbatim JSON (`extra`, `fields` are
# the largest columns by far, and their known metrics are already typed columns) and the
# ingest bookkeeping. `forensics events --since/--until` shows the raw objects.
SNAPSHOT_COLUMNS = [c for c in EVENT_SCHEMA if c not in ("extra", "fields", "format", "rank_source", "event_source", "local_rank")]
LAST_COLUMNS = [TS, "host", "event", "level", "message", "source_file", "line"]


@dataclass
class Snapshot:
    """What every rank was doing in the window before the stop (`last_window`).

    `ranks`: one row per rank asked for: rank, host, in_window (events in the window), shown
    (how many of them are in `events`), last_ts / last_event / last_level / last_message /
    last_where (file:line) of its last event at or before the stop, silent_s (stop - last_ts),
    step (the last step it logged by the stop), after_stop (events it logged after the stop).
    `events`: the window's events, the latest `limit` per rank, in time order.
    `quiet`: ranks with no events in the window; `missing`: ranks with no events at all;
    `untimed`: ranks none of whose events carry a time (their last event is their last line).
    """

    stop: dt.datetime
    how: str
    window_s: float
    start: dt.datetime
    ranks: pl.DataFrame
    events: pl.DataFrame
    quiet: list[int] = field(default_factory=list)
    missing: list[int] = field(default_factory=list)
    limit: int = 20
    untimed: list[int] = field(default_factory=list)

    def redacted(self) -> "Snapshot":
        """A copy with secrets in its log text masked (report/redact.py: the one policy)."""
        from dataclasses import replace

        from ..report.redact import redact_frame

        return replace(self, ranks=redact_frame(self.ranks), events=redact_frame(self.events))

    def to_dict(self) -> dict[str, Any]:
        return {
            "stop": iso(self.stop), "how": self.how, "window_s": self.window_s, "start": iso(self.start),
            "events_per_rank_limit": self.limit,
            "quiet_ranks": self.quiet, "missing_ranks": self.missing, "untimed_ranks": self.untimed,
            "ranks": records(self.ranks), "events": records(self.events, drop_null_columns=True),
        }


ORDER = "t_order"


def untimed_files(events: Events) -> list[str]:
    """The files that hold events without a time (a Flight Recorder dump's pg_status records,
    console lines without a time stamp). A Run answers from its summary."""
    if isinstance(events, Run):
        from ..summaries import untimed

        return untimed(events)
    return (lazy(events).filter(pl.col(TS).is_null()).select(pl.col("source_file").unique())
            .collect().to_series().drop_nulls().sort().to_list())


def with_order_time(events: Events, files: list[str] | None = None, ranks: Iterable[int] | None = None,
                    since: dt.datetime | None = None) -> pl.LazyFrame:
    """The events with `t_order`, the time that places them: their timestamp, or for an event
    without one the time of the last line before it in its file that has one (a dump's
    pg_status records come after its entries, a traceback after the line that logged the error);
    null when no earlier line of the file has a time. Only `files` (default `untimed_files`) are
    filled; `timestamp` itself is never changed. `ranks`, `since`: a Run reads only the parts
    that can hold those ranks' events placed at or after `since` (`inputs.scan`); the rows are
    not filtered."""
    lf = scan(events, ranks, since)
    files = untimed_files(events) if files is None else files
    if not files:
        return lf.with_columns(pl.col(TS).alias(ORDER))
    in_files = pl.col("source_file").is_in(files)
    return pl.concat([
        lf.filter(~in_files).with_columns(pl.col(TS).alias(ORDER)),
        lf.filter(in_files).with_columns(pl.col(TS).forward_fill().over("source_file", order_by="line").alias(ORDER)),
    ])


def _quiet_back(events: Events, files: list[str], quiet: list[int], need_step: list[int],
                start: dt.datetime, stop: dt.datetime) -> pl.DataFrame | None:
    """What `last_window` otherwise finds by grouping every event of the quiet ranks and of the
    ranks whose window names no step (7.7 M events on a 64-rank store): (rank, t_order, step),
    t_order the quiet ranks' last event time before `start`, step the last step each logged by
    the stop. From the step summary and the events after a bound: a group that ended before
    `start` is an event before it, so a quiet rank's last one is at or after its latest such
    group end; a group holds an event by the stop exactly when it began by then (a quiet rank
    has none in the window: by the stop is before `start`). None (the caller groups every
    event) for events that are not a store's, with events placed by their file (untimed
    files), or when a quiet rank's every group that began before `start` ended after it."""
    if not isinstance(events, Run) or files:
        return None
    from ..summaries import scan_step_groups

    ranks = [*quiet, *need_step]
    began = pl.col("t_start") <= pl.lit(stop)
    per_rank = (
        scan_step_groups(events).filter(pl.col("rank").is_in(ranks))
        .group_by("rank").agg(
            pl.col("t_end").filter(pl.col("t_end") < pl.lit(start)).max().alias("lo"),
            began.any().alias("any_before"),
            pl.col("step").filter(began & pl.col("step").is_not_null()).max().cast(EVENT_SCHEMA["step"]),
        ).collect()
    )
    in_quiet = pl.col("rank").is_in(quiet)
    if per_rank.filter(in_quiet & pl.col("any_before") & pl.col("lo").is_null()).height:
        return None
    lo = per_rank.filter(in_quiet)["lo"].min()
    T = pl.col(ORDER)
    if lo is None:   # no quiet rank logged before the window
        last_t = pl.DataFrame(schema={"rank": EVENT_SCHEMA["rank"], ORDER: EVENT_SCHEMA[TS]})
    else:
        last_t = (
            with_order_time(events, files, ranks=quiet, since=lo)
            .filter(in_quiet & (T >= pl.lit(lo)) & (T < pl.lit(start)))
            .group_by("rank").agg(T.max())
            .collect()
        )
    steps = per_rank.filter(pl.col("any_before")).select("rank", "step")
    return last_t.join(steps, on="rank", how="full", coalesce=True)


def last_window(events: Events, window_s: float = 10.0, at: dt.datetime | None = None,
                ranks: Iterable[int] | None = None, limit: int = 20) -> Snapshot:
    """The snapshot of the seed's question: what was every rank doing in the last `window_s`
    seconds before the stop (`stop_time`)?

    Events without a time are placed by their file's order (`with_order_time`); a rank whose
    events all lack a time gets its last line as its last event (silent_s unknown).

    Reads only what it needs: the window (pushdown on timestamp), and for ranks silent in the
    window their own last event and step (pushdown on rank).
    """
    asked = check_ranks(events, ranks)
    stop, how = stop_time(events, at)
    start = stop - dt.timedelta(seconds=window_s)
    files = untimed_files(events)
    T = pl.col(ORDER)
    # the window and after it: only the parts of the asked ranks that reach the window
    recent = with_order_time(events, files, ranks=asked, since=start)
    scope = recent if asked is None else recent.filter(pl.col("rank").is_in(asked))
    window = scope.filter(T.is_between(pl.lit(start), pl.lit(stop))).select(*SNAPSHOT_COLUMNS, ORDER)
    newest = pl.int_range(pl.len()).over("rank", order_by=[ORDER, "line"], descending=True)
    shown_q = window.filter(newest < max(limit, 1)).sort(ORDER, "rank", "line", nulls_last=True)
    counts_q = window.group_by("rank").agg(
        pl.len().cast(pl.Int64).alias("in_window"),
        pl.col("step").max().alias("w_step"),
    )
    after_q = scope.filter(T > pl.lit(stop)).group_by("rank").agg(pl.len().cast(pl.Int64).alias("after_stop"))
    shown, counts, after = pl.collect_all([shown_q, counts_q, after_q])
    last = shown.sort(ORDER, "line").group_by("rank", maintain_order=True).last().select("rank", *LAST_COLUMNS, ORDER)
    shown = shown.drop(ORDER)
    if limit < 1:
        shown = shown.clear()

    present = set(counts["rank"].drop_nulls().to_list())
    universe = asked if asked is not None else known_ranks(events, present)
    quiet = [r for r in universe if r not in present]
    # A rank's last event: the newest shown one when it logged in the window; otherwise found
    # in two cheap steps (its last time and step from three columns, then that one row).
    step_of = {r: s for r, s in zip(counts["rank"].to_list(), counts["w_step"].to_list()) if r is not None and s is not None}
    need_step = [r for r, s in zip(counts["rank"].to_list(), counts["w_step"].to_list()) if r is not None and s is None]
    untimed: list[int] = []
    if quiet or need_step:
        lf = with_order_time(events, files, ranks=[*quiet, *need_step])   # only these ranks' parts
        back = _quiet_back(events, files, quiet, need_step, start, stop)
        if back is None:
            # quiet ranks logged nothing in [start, stop], so "before start" is "by the stop" for them
            back = (
                lf.filter(pl.col("rank").is_in([*quiet, *need_step]) & (T <= pl.lit(stop)))
                .filter(pl.col("rank").is_in(need_step) | (T < pl.lit(start)))
                .group_by("rank").agg(T.max(), pl.col("step").max())
                .collect()
            )
        step_of.update((r, s) for r, s in zip(back["rank"].to_list(), back["step"].to_list()) if s is not None)
        last_t = back.filter(pl.col("rank").is_in(quiet)).select("rank", ORDER)
        if last_t.height:
            found = (
                lf.filter(T.is_between(pl.lit(last_t[ORDER].min()), pl.lit(last_t[ORDER].max())))
                .filter(pl.col("rank").is_in(quiet))
                .select("rank", *LAST_COLUMNS, ORDER)
                .join(last_t.lazy(), on=["rank", ORDER], how="semi")
                .sort(ORDER, "line").group_by("rank", maintain_order=True).last()
                .collect()
            )
            last = pl.concat([last, found.select(last.columns)], how="vertical_relaxed")
        # a quiet rank none of whose events can be placed in time: its last line is its last event
        placed = set(last_t["rank"].to_list())
        lost = [r for r in quiet if r not in placed]
        if lost:
            tail = (
                lf.filter(pl.col("rank").is_in(lost) & T.is_null())
                .select("rank", *LAST_COLUMNS, ORDER, "step")
                .sort("source_file", "line").group_by("rank", maintain_order=True)
                .agg(pl.all().last(), pl.col("step").max().alias("max_step"))
                .collect()
            )
            step_of.update((r, s) for r, s in zip(tail["rank"].to_list(), tail["max_step"].to_list()) if s is not None)
            untimed = sorted(tail["rank"].to_list())
            last = pl.concat([last, tail.select(last.columns)], how="vertical_relaxed")

    rows = _missing_rows(last.rename({c: f"last_{c}" for c in LAST_COLUMNS}), universe)
    table = (
        rows.join(counts.select("rank", "in_window"), on="rank", how="left", nulls_equal=True)
        .join(after, on="rank", how="left", nulls_equal=True)
        .join(shown.group_by("rank").agg(pl.len().cast(pl.Int64).alias("shown")), on="rank", how="left", nulls_equal=True)
        .with_columns(
            pl.col("in_window", "after_stop", "shown").fill_null(0),
            pl.col("rank").replace_strict(step_of, default=None, return_dtype=pl.Int64).alias("step"),
            # from the time that places the last event (its own, else its file's last before it)
            (_ms(pl.lit(stop, dtype=pl.Datetime("us", "UTC")) - pl.col(ORDER)) / 1000.0).alias("silent_s"),
            pl.concat_str(pl.col("last_source_file"), pl.lit(":"), pl.col("last_line").cast(pl.String)).alias("last_where"),
        )
        .rename({"last_timestamp": "last_ts", "last_host": "host"})
        .select("rank", "host", "in_window", "shown", "last_ts", "last_event", "last_level", "last_message",
                "last_where", "silent_s", "step", "after_stop")
        .sort("rank", nulls_last=True)
    )
    missing = table.filter(pl.col("last_where").is_null() & (pl.col("after_stop") == 0))["rank"].drop_nulls().to_list()
    return Snapshot(stop=stop, how=how, window_s=window_s, start=start, ranks=table, events=shown,
                    quiet=quiet, missing=missing, limit=limit, untimed=untimed)
