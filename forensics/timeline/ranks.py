"""The `ranks` table: one row per rank with its progress, phase medians, GPU, WARN/ERROR counts,
who went silent first and its clock offset.

It must not print (render/timeline.py does).
"""
from __future__ import annotations

from typing import Iterable

import polars as pl
import polars.selectors as cs

from ..store import Run
from .clocks import _offset_of, step_offsets
from .inputs import TS, Events, _missing_rows, known_ranks, lazy
from .progress import _progress
from .steptable import PHASES, _finish_steps, _step_groups, _with_gaps


# --- the `ranks` table ---------------------------------------------------------------------------

RANK_SUMMARY_COLUMNS = [
    "rank", "host", "first_ts", "last_ts", "last_step", "lag_steps", "events", "step_ms", "data_ms",
    "compute_ms", "comm_ms", "comm_share", "wait_ms", "gpu_util", "temp_max", "warn", "error",
    "silent_s", "silent_order", "clock_offset_ms",
]


def rank_summary(events: Events, ranks: Iterable[int] | None = None) -> pl.DataFrame:
    """One row per rank (the `ranks` command): host, first_ts, last_ts, last_step, lag_steps,
    events, step_ms, data_ms, compute_ms, comm_ms, comm_share (comm/step, the seed's most
    sensitive slow-node signal; it flags > 40 %), wait_ms (all medians over the rank's steps),
    gpu_util (median), temp_max, warn, error (counts), silent_s, silent_order (1 = went silent
    first), clock_offset_ms (its host's, see `step_offsets`; null when not estimable).

    Silence is compared on the common clock when offsets are known: a host whose clock runs
    250 ms behind must not look like the first to go quiet. Ranks that should exist but logged
    nothing (`known_ranks`) get a row with events = 0. A Run is read from its summaries (the
    (rank, step) groups and the per-rank table); other events by one aggregation (the step
    table's) and two narrow queries (host, gpu_util median).
    """
    if isinstance(events, Run):
        # the run's summaries (forensics.summaries, written at ingest): no scan of the events
        from ..summaries import rank_table, step_groups

        groups = step_groups(events, ["rank", "step", "t_end", "step_time_logged", *PHASES, "comm_end", "complete"])
        df = rank_table(events).select(
            "rank", pl.col("first_seen").alias("first_ts"), pl.col("last_seen").alias("last_ts"), "last_step",
            pl.col("events").cast(pl.Int64), pl.col("temp_c_max").alias("temp_max"),
            pl.col("warnings").cast(pl.Int64).alias("warn"), pl.col("errors").cast(pl.Int64).alias("error"), "host",
            pl.col("gpu_util"))
    else:
        lf = lazy(events)
        # The (rank, step) groups of the step table, unranked and step-less events included, carry
        # what the per-rank counts add up: one scan for both. A host (the first one logged) and a
        # median are not sums of their groups' values: two narrow queries.
        groups_q = _step_groups(lf, TS, evidence=False, per_rank=True).select(
            "rank", "step", "t_start", "t_end", "step_time_logged", *PHASES, "comm_end", "complete", "events",
            "temp_max", "warn", "error")
        host_q = lf.group_by("rank").agg(pl.col("host").first(ignore_nulls=True))
        util_q = lf.filter(pl.col("gpu_util").is_not_null()).group_by("rank").agg(pl.col("gpu_util").median())
        groups, hosts, util = pl.collect_all([groups_q, host_q, util_q])
        df = (
            groups.group_by("rank")
            .agg(
                pl.col("t_start").min().alias("first_ts"),
                pl.col("t_end").max().alias("last_ts"),
                pl.col("step").max().alias("last_step"),
                pl.col("events").sum().cast(pl.Int64),
                pl.col("temp_max").max(),
                pl.col("warn").sum().cast(pl.Int64),
                pl.col("error").sum().cast(pl.Int64),
            )
            .join(hosts, on="rank", how="left", nulls_equal=True)
            .join(util, on="rank", how="left", nulls_equal=True)
        )
    # only what the medians and clock offsets need
    steps = _finish_steps(_with_gaps(groups.lazy().filter(pl.col("rank").is_not_null() & pl.col("step").is_not_null())),
                          evidence=False).select("step", "rank", "step_time_ms", "data_load_ms", "compute_ms",
                                                 "comm_ms", "wait_ms", "comm_end").collect()
    per_step = steps.group_by("rank").agg(
        pl.col("step_time_ms").median().alias("step_ms"),
        pl.col("data_load_ms").median().alias("data_ms"),
        pl.col("compute_ms").median().alias("compute_ms"),
        pl.col("comm_ms").median().alias("comm_ms"),
        (pl.col("comm_ms") / pl.col("step_time_ms")).median().alias("comm_share"),
        pl.col("wait_ms").median().alias("wait_ms"),
    )
    host_of = {r: h for r, h in zip(df["rank"].to_list(), df["host"].to_list()) if r is not None and h is not None}
    offsets = step_offsets(steps.with_columns(
        pl.col("rank").replace_strict(host_of, default=None, return_dtype=pl.String).alias("host")))
    df = df.join(per_step, on="rank", how="left", nulls_equal=True).sort("rank", nulls_last=True)
    expected = list(ranks) if ranks is not None else known_ranks(events, df["rank"].drop_nulls().to_list())
    df = _missing_rows(df, expected).with_columns(
        pl.col("events", "warn", "error").fill_null(0),
        _offset_of(offsets, None).alias("clock_offset_ms"),
    )
    df = df.with_columns((pl.col("last_ts") - pl.duration(
        microseconds=(pl.col("clock_offset_ms").fill_null(0.0) * 1000).round(0).cast(pl.Int64))).alias("last_aligned"))
    # medians of ms-resolution inputs: more digits than 1 us are float noise
    return _progress(df, None, "last_aligned").select(RANK_SUMMARY_COLUMNS).with_columns(
        cs.float().exclude("comm_share").round(3), pl.col("comm_share").round(4))
