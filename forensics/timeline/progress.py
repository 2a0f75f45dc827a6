"""How far each rank got and who went silent first: per-rank progress (last step, lag, silence)
and the rank that stopped while the run went on (the hung rank of a hang).

It must not print or judge beyond "went silent first" (`passes/` names the failure).
"""
from __future__ import annotations

import datetime as dt
from typing import Any, Iterable

import polars as pl

from .inputs import TS, Events, _missing_rows, _ms, known_ranks, lazy


def rank_progress(events: Events, stop: dt.datetime | None = None, time_col: str = TS,
                  ranks: Iterable[int] | None = None) -> pl.DataFrame:
    """Per rank: host, first_ts, last_ts, last_step, events, lag_steps (behind the most advanced
    rank: "rank 3 is one step behind"), silent_s (from its last event to `stop`, default the last
    event of the run), silent_order (1 = went silent first; ties share a place).

    Ranks that should exist but logged nothing (see `known_ranks`) get a row with events = 0.
    """
    lf = lazy(events)
    t = pl.col(time_col)
    df = (
        lf.group_by("rank")
        .agg(
            pl.col("host").first(ignore_nulls=True),
            t.min().alias("first_ts"),
            t.max().alias("last_ts"),
            pl.col("step").max().alias("last_step"),
            pl.len().cast(pl.Int64).alias("events"),
        )
        .sort("rank", nulls_last=True)
        .collect()
    )
    expected = list(ranks) if ranks is not None else known_ranks(events, df["rank"].drop_nulls().to_list())
    df = _missing_rows(df, expected).with_columns(pl.col("events").fill_null(0))
    return _progress(df, stop)


# A rank silent for this many median step times before the run's last event stopped while the
# others went on (a healthy run's ranks end within about a step of each other); without step
# times, SILENT_MIN_S.
SILENT_STEPS = 3.0
SILENT_MIN_S = 10.0


def first_silent(events: Events, time_col: str = TS) -> dict[str, Any] | None:
    """The rank that went silent first, when it stopped while the run went on: the hung or dead
    rank of a hang, whose peers block in the collective it never joins until their watchdog
    fires. None when the ranks stopped together.

    "Went on": the run logged for more than SILENT_STEPS median step times (SILENT_MIN_S without
    step times) after the rank's last event, and either another rank logged an ERROR after it or
    the rank is behind the most advanced rank's step. (A rank that finishes a long checkpoint
    save after the others is not a hang: no ERROR, no lag.) Times are `time_col`: pass
    `with_aligned_time(...)` and "ts_aligned" to compare hosts on a common clock.
    Keys: rank, last_ts, step (its last), lag_steps, source_file, line (its last event), silent_s
    (before the run's last event), errors_after (ERROR lines of other ranks after it).
    """
    lf = lazy(events)
    prog = rank_progress(lf, time_col=time_col).filter(pl.col("rank").is_not_null() & pl.col("last_ts").is_not_null())
    if prog.height < 2:
        return None
    first = prog.sort("last_ts", "rank").row(0, named=True)
    t = pl.col(time_col)
    step_ms, errors_after = pl.collect_all([
        lf.select(pl.col("step_time_ms").median()),
        lf.filter((pl.col("level") == "ERROR") & (pl.col("rank") != first["rank"]) & (t > pl.lit(first["last_ts"])))
        .select(pl.len()),
    ])
    step_ms, errors_after = step_ms.item(), errors_after.item()
    need = SILENT_STEPS * step_ms / 1000.0 if step_ms else SILENT_MIN_S
    if not first["silent_s"] or first["silent_s"] <= need or not (errors_after or first["lag_steps"]):
        return None
    row = (lf.filter((pl.col("rank") == first["rank"]) & (t == pl.lit(first["last_ts"])))
           .select("source_file", "line").sort("line").tail(1).collect())
    where = row.row(0, named=True) if row.height else {"source_file": None, "line": None}
    return {"rank": first["rank"], "last_ts": first["last_ts"], "step": first["last_step"],
            "lag_steps": first["lag_steps"], **where, "silent_s": first["silent_s"], "errors_after": errors_after}


def _progress(df: pl.DataFrame, stop: dt.datetime | None, t: str = "last_ts") -> pl.DataFrame:
    """lag_steps, silent_s and silent_order from per-rank last_step and the time column `t`."""
    end = stop if stop is not None else df[t].max()
    return df.with_columns(
        (pl.col("last_step").max() - pl.col("last_step")).alias("lag_steps"),
        (_ms(pl.lit(end, dtype=df.schema[t]) - pl.col(t)) / 1000.0).alias("silent_s"),
        pl.col(t).rank("min").cast(pl.Int32).alias("silent_order"),
    )
