"""When the run stopped: a time given, the first fatal ERROR (one its rank did not survive), or
the last event.

It must not print, and must never take an ERROR without a time for the stop.
"""
from __future__ import annotations

import datetime as dt

import polars as pl

from ..errors import NO_INPUT, ForensicsError
from ..store import Run
from .inputs import TS, Events, _utc, bounds, lazy


# The first ERRORs are checked one at a time (cheap: one rank's tail each); the rest in bulk.
FIRST_ERRORS_CHECKED = 8

def stop_time(events: Events, at: dt.datetime | None = None) -> tuple[dt.datetime, str]:
    """When the run stopped, and how that was decided.

    `at` wins. Otherwise the first fatal ERROR: an ERROR after which its rank did not go on to log
    two different steps (an ERROR the rank survived, e.g. a retried data load, is not the stop;
    an ERROR without a rank is fatal unless some rank went on that way). Without any fatal
    ERROR: the last event.
    """
    if at is not None:
        return _utc(at), "given (--at)"
    lf = lazy(events)
    if isinstance(events, Run):
        from ..summaries import errors as stored_errors

        errors = stored_errors(events).sort(TS, "rank", "source_file", "line", nulls_last=True)   # the store's summary
    else:
        errors = (
            lf.filter(pl.col("level") == "ERROR")
            .select(TS, "rank", "event", "source_file", "line")
            .sort(TS, "rank", "source_file", "line", nulls_last=True)
            .collect()
        )
    # An ERROR without a time (a console line, a note beside the dumps) cannot be placed in time:
    # it is named, never taken for the stop.
    untimed = errors.filter(pl.col(TS).is_null())
    errors = errors.filter(pl.col(TS).is_not_null())
    if untimed.height:
        where = untimed.row(0, named=True)
        untimed_note = (f"; {untimed.height} ERROR(s) without a time not placed, first "
                        f"{where['event']} at {where['source_file']}:{where['line']}")
    else:
        untimed_note = ""
    stop, how = _first_fatal(lf, events, errors)
    if untimed_note:
        how = how.replace("(no ERROR logged)", "(no ERROR with a time logged)")
    return stop, how + untimed_note


def _stepped(events: Events) -> pl.LazyFrame:
    """(rank, step, timestamp) of the events with a rank and a step. For a Run, one row per
    (rank, step) from its summary, at the step's last event: a step has events after a time
    exactly when its last one is after it, which is all `_first_fatal` asks."""
    if isinstance(events, Run):
        from ..summaries import scan_step_groups

        # a scan: the checks below filter on rank and time, and read only what can match
        return (scan_step_groups(events).filter(pl.col("rank").is_not_null() & pl.col("step").is_not_null())
                .select("rank", "step", pl.col("t_end").alias(TS)))
    return lazy(events).filter(pl.col("step").is_not_null() & pl.col("rank").is_not_null()).select("rank", "step", TS)


def _first_fatal(lf: pl.LazyFrame, events: Events, errors: pl.DataFrame) -> tuple[dt.datetime, str]:
    """`stop_time` without `at`: the first fatal ERROR among `errors` (all with a time), else
    the last event."""
    if errors.height:
        # Survived = the erroring rank logged at least two different steps after the error (it
        # crossed a step boundary). Only events after the first ERROR are read.
        err_ranks = errors["rank"].drop_nulls().unique().to_list()
        base = _stepped(events)
        # Usually the first ERROR is the fatal one: check the first few one by one, each reading
        # only its rank's events after it (pushdown on rank and time), before the bulk check.
        for i, row in enumerate(errors.head(FIRST_ERRORS_CHECKED).iter_rows(named=True)):
            after = base.filter(pl.col(TS) > pl.lit(row[TS]))
            if row["rank"] is not None:
                n = after.filter(pl.col("rank") == row["rank"]).select(pl.col("step").n_unique()).collect().item()
            else:
                n = after.group_by("rank").agg(pl.col("step").n_unique()).select(pl.col("step").max()).collect().item()
            if not n or n < 2:
                who = f"rank {row['rank']}" if row["rank"] is not None else "no rank"
                note = f"; {i} earlier ERROR(s) were followed by progress" if i else ""
                return row[TS], f"first fatal ERROR: {row['event']} on {who} at {row['source_file']}:{row['line']}{note}"
        post = base.filter(pl.col(TS) > pl.lit(errors[TS].min()))
        if errors["rank"].null_count() == 0:
            post = post.filter(pl.col("rank").is_in(err_ranks))

        def steps_after(keys: list[str]) -> pl.LazyFrame:
            """For each error, how many distinct steps (of its rank, or of any rank) have
            events after it: as-of join against the steps ordered by their last event."""
            last = (
                post.group_by(*keys, "step").agg(pl.col(TS).max().alias("last_ts")).sort("last_ts")
                .with_columns(pl.int_range(1, pl.len() + 1).over(keys or pl.lit(0)).alias("n_le"),
                              pl.len().over(keys or pl.lit(0)).alias("n_all"))
            )
            totals = last.group_by(*keys).agg(pl.col("n_all").first()) if keys else last.select(pl.col("n_all").first())
            errs = errors.lazy().with_row_index("i").filter(
                pl.col("rank").is_not_null() if keys else pl.col("rank").is_null()).sort(TS)
            joined = errs.join_asof(last.select(*keys, "last_ts", "n_le"), left_on=TS, right_on="last_ts",
                                    by=keys or None, strategy="backward", check_sortedness=False)
            joined = joined.join(totals, on=keys, how="left") if keys else joined.join(totals, how="cross")
            return joined.select("i", TS, "rank", "event", "source_file", "line",
                                 (pl.col("n_all").fill_null(0) - pl.col("n_le").fill_null(0)).alias("steps_after"))

        per_rank = pl.concat(pl.collect_all([steps_after(["rank"]), steps_after([])]), how="vertical_relaxed")
        fatal = per_rank.filter(pl.col("steps_after") < 2).sort("i")
        if fatal.height:
            row = fatal.row(0, named=True)
            who = f"rank {row['rank']}" if row["rank"] is not None else "no rank"
            note = f"; {row['i']} earlier ERROR(s) were followed by progress" if row["i"] else ""
            return row[TS], f"first fatal ERROR: {row['event']} on {who} at {row['source_file']}:{row['line']}{note}"
        _, end = bounds(events)
        assert end is not None
        return end, f"last event of the run (all {errors.height} ERROR(s) were followed by progress)"
    _, end = bounds(events)
    if end is None:
        if not lf.select(pl.len()).collect().item():
            raise ForensicsError("the run has no events", help="check the store with: forensics ingest --json", code=NO_INPUT)
        raise ForensicsError("no event of the run carries a time", reason="the stop and a window before it need times",
                             help="list the events in file order with: forensics events STORE", code=NO_INPUT)
    return end, "last event of the run (no ERROR logged)"
