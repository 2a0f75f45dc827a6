"""Who arrives last at each collective, and by how much; and the `timeline` view built on it
(the step table on the common clock with the arrival columns).

A rank arrives at the collective when its local gradients are ready (`grad_ready_ts`), and
`wait_ms` is the part of `comm_ms` spent waiting for the last rank. It must not print or judge
the run (`passes/` does).
"""
from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from ..store import Run
from .clocks import align_steps, step_offsets
from .inputs import Events, _ms, lazy
from .steps import finish_groups, step_table


def arrivals(steps: pl.LazyFrame | pl.DataFrame) -> pl.LazyFrame:
    """Per (step, rank): when the rank arrived at the step's collective, its order, whether it
    was the last, and per step who was last and by how much; per rank how often it was last.

    The arrival is taken, per step, from the first source every rank of the step has:
    `grad_ready` (grad_ready_ts: the seed's gradient_skew signal), `wait_ms` (clock-free: a rank
    that waited w ms less than the longest waiter arrived w ms later than the earliest rank), or
    `comm_end` (collective return minus comm_ms). Timestamps from different hosts are only
    comparable on an aligned clock: pass `align_steps(steps, step_offsets(steps))` (or
    `step_table(with_aligned_time(events, clock_offsets(events)), "ts_aligned")`).

    Columns: step, rank, host, arrival_source, arrival (datetime, null for wait_ms), arrival_ms
    (after the step's first arrival), order (1 = first), is_last (a unique last, later than the
    first), last_rank, late_by_ms (last arrival minus the step's median arrival), spread_ms
    (last - first), arrived (ranks with an arrival), times_last (steps where this rank was last).
    """
    lf = steps.lazy() if isinstance(steps, pl.DataFrame) else steps
    per_step = ["step"]
    n = pl.len().over(per_step)
    ready_at = pl.from_epoch((pl.col("grad_ready_ts") * 1e6).round(0).cast(pl.Int64), time_unit="us").dt.replace_time_zone("UTC")
    comm_at = pl.col("comm_end") - pl.duration(microseconds=(pl.col("comm_ms") * 1000).round(0).cast(pl.Int64))
    full = {
        "grad_ready": pl.col("grad_ready_ts").count().over(per_step) == n,
        "wait_ms": pl.col("wait_ms").count().over(per_step) == n,
        "comm_end": comm_at.count().over(per_step) == n,
    }
    some = {
        "grad_ready": pl.col("grad_ready_ts").count().over(per_step) >= 2,
        "wait_ms": pl.col("wait_ms").count().over(per_step) >= 2,
        "comm_end": comm_at.count().over(per_step) >= 2,
    }
    src = pl.when(full["grad_ready"]).then(pl.lit("grad_ready"))
    for name in ("wait_ms", "comm_end"):
        src = src.when(full[name]).then(pl.lit(name))
    for name in ("grad_ready", "wait_ms", "comm_end"):
        src = src.when(some[name]).then(pl.lit(name))
    arrival = (
        pl.when(pl.col("arrival_source") == "grad_ready").then(ready_at)
        .when(pl.col("arrival_source") == "comm_end").then(comm_at)
    )
    rel = (
        pl.when(pl.col("arrival_source") == "wait_ms")
        .then(pl.col("wait_ms").max().over(per_step) - pl.col("wait_ms"))
        .otherwise(_ms(pl.col("arrival") - pl.col("arrival").min().over(per_step)))
    )
    a = pl.col("arrival_ms")
    is_max = (a == a.max().over(per_step)) & a.is_not_null()
    out = (
        lf.select("step", "rank", "host", "grad_ready_ts", "wait_ms", "comm_end", "comm_ms")
        .with_columns(src.alias("arrival_source"))
        .with_columns(arrival.alias("arrival"))
        .with_columns(rel.alias("arrival_ms"))
        .with_columns(
            a.rank("min").over(per_step).cast(pl.Int32).alias("order"),
            (is_max & (is_max.sum().over(per_step) == 1) & (a.max().over(per_step) > a.min().over(per_step))).alias("is_last"),
            a.count().over(per_step).cast(pl.Int32).alias("arrived"),
            (a.max() - a.median()).over(per_step).alias("late_by_ms"),
            (a.max() - a.min()).over(per_step).alias("spread_ms"),
        )
        .with_columns(
            pl.col("rank").filter(pl.col("is_last")).first().over(per_step).alias("last_rank"),
            pl.col("is_last").sum().over("rank").cast(pl.Int32).alias("times_last"),
        )
        .select("step", "rank", "host", "arrival_source", "arrival", "arrival_ms", "order", "is_last",
                "last_rank", "late_by_ms", "spread_ms", "arrived", "times_last")
        .sort("step", "rank")
    )
    return out


@dataclass
class Timeline:
    """`build_timeline`'s result: `rows` has one row per (step, rank) of every rank (a rank can
    only be last among all of them): the step table on the common clock plus the arrival
    columns; `offsets` the host clock estimates used; `span` the first and last step the run
    logged."""

    rows: pl.DataFrame
    offsets: pl.DataFrame
    span: tuple[int, int] | None
    # the job's own step lines (no rank: Megatron's `iteration N/M | ... elapsed time per
    # iteration (ms)`, printed once for the job by its last rank), when no rank's step is timed
    job: pl.DataFrame | None = None


JOB_COLUMNS = ["step", "step_time_ms", "samples_per_s", "loss", "lr", "grad_norm", "source_file", "line"]


def job_steps(events: Events, steps: tuple[int | None, int | None] | None, last: int) -> tuple[pl.DataFrame, tuple[int, int] | None]:
    """The rank-less TRAIN_STEP lines in `steps` (default: the `last` ones logged), and the
    first and last step they log."""
    lf = (lazy(events).filter((pl.col("event") == "TRAIN_STEP") & pl.col("rank").is_null() & pl.col("step").is_not_null())
          .select(*JOB_COLUMNS[:-2], pl.col("source_file").cast(pl.String), "line"))
    df = lf.collect().unique("step", keep="first").sort("step")
    if df.is_empty():
        return df, None
    span = (int(df["step"].min()), int(df["step"].max()))  # type: ignore[arg-type]
    if steps is None:
        return df.tail(last), span
    a, b = steps
    return df.filter((pl.col("step") >= (a if a is not None else span[0])) & (pl.col("step") <= (b if b is not None else span[1]))), span


def build_timeline(events: Events, steps: tuple[int | None, int | None] | None = None, last: int = 20) -> Timeline:
    """Steps `steps` (inclusive bounds, None = open), default the `last` steps the run reached,
    with phases, arrival order and clock alignment. Reads only those steps (plus the one before,
    to derive a step time when none is logged)."""
    from ..summaries import scan_step_groups

    # a Run: its (rank, step) summary, finished over the steps read: a scan, so that only the
    # step column is read whole and the other columns only where the step filter keeps rows
    groups = scan_step_groups(events) if isinstance(events, Run) else None
    lf = groups if groups is not None else lazy(events)
    lo_hi = lf.select(pl.col("step").min().alias("a"), pl.col("step").max().alias("b")).collect().row(0)
    if lo_hi[0] is None:
        job, job_span = job_steps(events, steps, last)
        return Timeline(rows=pl.DataFrame(), offsets=pl.DataFrame(), span=job_span, job=job if job.height else None)
    a, b = steps if steps is not None else (lo_hi[1] - last + 1, lo_hi[1])
    cond = pl.lit(True)
    if a is not None:
        cond = cond & (pl.col("step") >= a - 1)
    if b is not None:
        cond = cond & (pl.col("step") <= b)
    if groups is not None:
        st = finish_groups(groups.filter(cond)).sort("step", "rank").collect()
    else:
        st = step_table(lf.filter(cond)).collect()
    if a is not None:
        st = st.filter(pl.col("step") >= a)
    offsets = step_offsets(st)
    aligned = align_steps(st, offsets)
    arr = arrivals(aligned).drop("host")
    rows = aligned.join(arr, on=["step", "rank"], how="left").sort("step", "rank").collect()
    if "step_time_ms" not in rows.columns or rows.get_column("step_time_ms").drop_nulls().is_empty():
        # no rank's step is timed (Megatron: only the memory reports name a rank): the job's own
        # step lines are the timeline, when it has some (read only then: a scan of the events)
        job, job_span = job_steps(events, steps, last)
        if job.height:
            return Timeline(rows=pl.DataFrame(), offsets=pl.DataFrame(), span=job_span, job=job)
    return Timeline(rows=rows, offsets=offsets, span=(lo_hi[0], lo_hi[1]))
