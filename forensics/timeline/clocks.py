"""Host clocks: each host's offset from the consensus, measured at the end of blocking
collectives (one instant on every rank), events and step tables moved onto the common clock,
and files in which time goes backwards.

Derived times get new names (`ts_aligned`); `timestamp` is never rewritten. It must not print.
"""
from __future__ import annotations

import polars as pl

from ..store import Run
from .inputs import SUMMARY_EVENT, TS, Events, _ms, lazy, scan


# --- clocks ---------------------------------------------------------------------------------------

def clock_key() -> pl.Expr:
    """The clock an event was stamped with: its host's (ranks on one host share a clock), or its
    rank's when the host is unknown."""
    return pl.coalesce(pl.col("host"), pl.concat_str(pl.lit("rank:"), pl.col("rank").cast(pl.String))).alias("clock")


def _offsets(ends: pl.LazyFrame, keys: list[str]) -> pl.LazyFrame:
    """The estimator behind `clock_offsets`: `ends` has one row per (rank, collective) with its
    `clock` and return time `us` (epoch microseconds); `keys` name the collective."""
    return (
        ends.group_by("clock", *keys)
        .agg(pl.col("us").median().alias("host_us"))
        .with_columns(
            pl.col("host_us").median().over(keys).alias("ref_us"),
            pl.len().over(keys).alias("hosts"),
        )
        .filter(pl.col("hosts") >= 2)
        .with_columns(((pl.col("host_us") - pl.col("ref_us")) / 1000.0).alias("d_ms"))
        .group_by("clock")
        .agg(
            pl.col("d_ms").median().alias("offset_ms"),
            pl.len().cast(pl.Int64).alias("samples"),
            (pl.col("d_ms").quantile(0.9) - pl.col("d_ms").quantile(0.1)).alias("spread_ms"),
        )
        .sort("clock")
    )


def clock_offsets(events: Events) -> pl.DataFrame:
    """Per clock (host): its estimated offset in ms from the consensus of all hosts.

    The end of a blocking collective is one instant on every rank, so for each collective (step,
    op, n-th of the step) the host's median return time minus the median over hosts measures the
    host's offset; the estimate is the median over collectives. Columns: clock, offset_ms
    (positive: the host's clock runs ahead), samples (collectives compared), spread_ms (p90 - p10
    of the per-collective offsets: jitter plus timestamp resolution). With two hosts the
    consensus is their midpoint: each gets half the difference. A host alone has no estimate.
    """
    ends = (
        lazy(events)
        .filter(pl.col("comm_ms").is_not_null() & pl.col("step").is_not_null() & pl.col("rank").is_not_null()
                & (pl.col("event").fill_null("") != SUMMARY_EVENT))
        .select(TS, "rank", "host", "step", pl.col("collective").fill_null(""), "seq")
        .with_columns(
            clock_key(),
            pl.coalesce(
                pl.col("seq"),
                pl.int_range(pl.len()).over("rank", "step", "collective", order_by=TS).cast(pl.Int64),
            ).alias("k"),
            pl.col(TS).dt.epoch("us").alias("us"),
        )
    )
    return _offsets(ends, ["step", "collective", "k"]).collect()


OFFSET_STEPS = 2000


def step_offsets(steps: pl.LazyFrame | pl.DataFrame) -> pl.DataFrame:
    """`clock_offsets` from a step table (each rank's last collective of a step, `comm_end`):
    the same estimate without another scan of the events; a long run is sampled every k-th step
    (about OFFSET_STEPS steps)."""
    lf = steps.lazy() if isinstance(steps, pl.DataFrame) else steps
    ends = lf.filter(pl.col("comm_end").is_not_null()).select(
        "step", clock_key(), pl.col("comm_end").dt.epoch("us").alias("us"))
    if isinstance(steps, pl.DataFrame) and steps.height:
        # a median over ~OFFSET_STEPS collectives is as good as over all of them, and cheap
        lo, hi = steps["step"].min(), steps["step"].max()
        every = max(1, (hi - lo + 1) // OFFSET_STEPS) if lo is not None else 1
        if every > 1:
            ends = ends.filter(pl.col("step") % every == 0)
    return _offsets(ends, ["step"]).collect()


def _offset_of(offsets: pl.DataFrame, default: float | None) -> pl.Expr:
    mapping = dict(zip(offsets["clock"].to_list(), offsets["offset_ms"].to_list())) if offsets.height else {}
    if not mapping:
        return pl.lit(default, dtype=pl.Float64)
    if not any(str(k).startswith("rank:") for k in mapping):
        # only named hosts have an offset: a row without a host (clock "rank:N") gets the
        # default, without building the clock key of every row (a string per row)
        by_host = pl.col("host").replace_strict(mapping, default=default, return_dtype=pl.Float64)
        return by_host.fill_null(default) if default is not None else by_host
    return clock_key().replace_strict(mapping, default=default, return_dtype=pl.Float64)


def _shift(col: str) -> pl.Expr:
    return pl.col(col) - pl.duration(microseconds=(pl.col("clock_offset_ms") * 1000).round(0).cast(pl.Int64))


def with_aligned_time(events: Events, offsets: pl.DataFrame) -> pl.LazyFrame:
    """The events with `clock_offset_ms` (0 for clocks without an estimate) and `ts_aligned` =
    timestamp - offset. `timestamp` itself is never changed."""
    return (lazy(events).with_columns(_offset_of(offsets, 0.0).alias("clock_offset_ms"))
            .with_columns(_shift(TS).alias("ts_aligned")))


def align_steps(steps: pl.LazyFrame | pl.DataFrame, offsets: pl.DataFrame) -> pl.LazyFrame:
    """A step table on the common clock: t_start, t_end, comm_end and grad_ready_ts shifted by
    their host's offset, which is kept in `clock_offset_ms` (the same as building the table from
    `with_aligned_time(...)` with time_col="ts_aligned", without another scan)."""
    lf = steps.lazy() if isinstance(steps, pl.DataFrame) else steps
    return lf.with_columns(_offset_of(offsets, 0.0).alias("clock_offset_ms")).with_columns(
        _shift("t_start"), _shift("t_end"), _shift("comm_end"),
        pl.col("grad_ready_ts") - pl.col("clock_offset_ms") / 1000.0,
    )


def monotonicity(events: Events) -> pl.DataFrame:
    """Files in which time goes backwards within a rank, in line order (reported, never fixed).

    Columns: source_file, rank, backwards (how many lines carry an earlier time than the line
    before them), first_line (the first such line), max_back_ms (the largest jump back), lines.
    Only files with at least one backward step are returned.
    """
    lf = lazy(events).select("source_file", "rank", "line", TS)
    # Fast path, no sort: a (file, rank) whose rows, as stored, have both time and line
    # increasing has line order = time order. Only the others are sorted by line.
    # Grouping by rank alone (an integer; the file name is a costly string key) is exact for a
    # rank with one file in one part; other ranks only become suspects and get the exact check.
    # A Run's per-rank summary holds that check (`in_order`): no scan for an ordered run.
    if isinstance(events, Run):
        from ..summaries import rank_table

        suspect = rank_table(events).filter(~pl.col("in_order")).select("rank")
    else:
        suspect = (
            lf.select("rank", "line", TS).group_by("rank")
            .agg(((pl.col("line").diff().min() > 0) & (pl.col(TS).diff().min() >= pl.duration(microseconds=0)))
                 .fill_null(True).alias("ok"))
            .filter(~pl.col("ok"))
            .collect()
        )
    if not suspect.height:
        return pl.DataFrame(schema={"source_file": pl.String, "rank": pl.Int32, "backwards": pl.Int64,
                                    "first_line": pl.Int64, "max_back_ms": pl.Float64, "lines": pl.Int64})
    ranks = suspect["rank"].drop_nulls().to_list()
    scope = pl.col("rank").is_in(ranks)
    if suspect["rank"].null_count():
        scope = scope | pl.col("rank").is_null()
    else:
        lf = scan(events, ranks).select("source_file", "rank", "line", TS)   # only the suspects' parts
    d = pl.col(TS).sort_by("line").diff()
    back = d < pl.duration(microseconds=0)
    return (
        lf.filter(scope)
        .group_by("source_file", "rank")
        .agg(
            back.sum().cast(pl.Int64).alias("backwards"),
            pl.col("line").sort().filter(back).first().alias("first_line"),
            (-_ms(d.min())).alias("max_back_ms"),
            pl.len().cast(pl.Int64).alias("lines"),
        )
        .filter(pl.col("backwards") > 0)
        .sort("source_file", "rank", nulls_last=True)
        .collect()
    )
