"""What every timeline question starts from: the run's events (a `Run`, a LazyFrame or a
DataFrame), its first and last event time, and the ranks it should have.

Owns the input types and the rank universe (`known_ranks`, `check_ranks`, rows for ranks that
never logged). It must not print, judge what is wrong, or rewrite `timestamp`.
"""
from __future__ import annotations

import datetime as dt
from typing import Iterable, Union

import polars as pl

from ..errors import BAD_ARGUMENT, ForensicsError
from ..schema import EVENT_SCHEMA
from ..store import Run


Events = Union[Run, pl.LazyFrame, pl.DataFrame]

TS = "timestamp"
# The per-step summary event: carries step_time_ms, loss, lr ... for the whole step. Phase
# metrics (data_load_ms, comm_ms) on their own events take precedence over a copy on it.
SUMMARY_EVENT = "TRAIN_STEP"
UTC = dt.timezone.utc


# --- inputs ------------------------------------------------------------------------------------

def lazy(events: Events) -> pl.LazyFrame:
    """The events as a LazyFrame, whatever was passed."""
    if isinstance(events, Run):
        return events.events()
    if isinstance(events, pl.DataFrame):
        return events.lazy()
    return events


def scan(events: Events, ranks: Iterable[int] | None = None, since: dt.datetime | None = None) -> pl.LazyFrame:
    """`lazy(events)`, for a Run reading only the parts that can hold events of `ranks` at or
    after `since` (t_order included: see `windows.with_order_time`), by the store's part table
    (each event part's rank range and last time): `last-10s --rank 12` opens rank 12's part, not
    all of them. A part with unranked or untimed rows is always read (an untimed line is placed
    by its file's earlier lines); the caller still filters rows."""
    if not isinstance(events, Run):
        return lazy(events)
    if ranks is None and since is None:
        return events.events()
    want = sorted({int(r) for r in ranks}) if ranks is not None else None
    paths: list[str] = []
    for p in events.parts:
        if p["kind"] != "events":
            continue
        lo, hi = p.get("rank_min"), p.get("rank_max")
        if want is not None and lo is not None and hi is not None and p.get("unranked", 1) == 0 \
                and not any(lo <= r <= hi for r in want):
            continue
        if since is not None and p.get("ts_max") and p.get("untimed", 1) == 0 \
                and _utc(dt.datetime.fromisoformat(p["ts_max"])) < since:
            continue
        paths.append(str(events.path / p["path"]))
    if not paths:
        return pl.LazyFrame(schema=EVENT_SCHEMA)
    return pl.scan_parquet(sorted(paths), schema=EVENT_SCHEMA)


def _ms(delta: pl.Expr) -> pl.Expr:
    """A Duration expression in milliseconds (Float64)."""
    return delta.dt.total_microseconds().cast(pl.Float64) / 1000.0


def _utc(t: dt.datetime) -> dt.datetime:
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


def bounds(events: Events) -> tuple[dt.datetime | None, dt.datetime | None]:
    """First and last event time of the run. A Run answers from its manifest without a scan."""
    if isinstance(events, Run):
        cols = events.source_columns("start", "end")
        starts = [s for s in cols["start"] if s]
        ends = [s for s in cols["end"] if s]
        if starts and ends:
            return _utc(dt.datetime.fromisoformat(min(starts))), _utc(dt.datetime.fromisoformat(max(ends)))
    row = lazy(events).select(pl.col(TS).min().alias("a"), pl.col(TS).max().alias("b")).collect().row(0)
    return row[0], row[1]


def known_ranks(events: Events, present: Iterable[int] | None = None) -> list[int]:
    """Every rank the run should have: ranks seen, ranks named by file paths (a rank whose file is
    empty never logged) and the gaps in 0..max (ranks are numbered 0..world_size-1)."""
    seen: set[int] = set(present or [])
    if isinstance(events, Run):
        cols = events.source_columns("ranks", "rank_hint")
        for ranks in cols["ranks"]:
            seen.update(int(r) for r in ranks or () if r is not None)
        seen.update(int(r) for r in cols["rank_hint"] if r is not None)
    elif present is None:
        seen.update(lazy(events).select(pl.col("rank").drop_nulls().unique()).collect().to_series().to_list())
    if not seen:
        return []
    if max(seen) + 1 > GAP_FILL_MAX * len(seen):
        return sorted(seen)   # mostly gaps: not a world of 0..N-1 (odd numbering); name only what was seen
    return list(range(max(seen) + 1))


GAP_FILL_MAX = 4


def check_ranks(events: Events, asked: Iterable[int] | None) -> list[int] | None:
    """The ranks asked for (`--rank`), sorted, when the run has every one of them; None when
    none were asked. A negative rank, or one the run does not have (`known_ranks`: a rank that
    never logged but lies within 0..world_size-1 is still the run's), is a ForensicsError that
    names the ranks the run has: an empty answer would read as "that rank was quiet"."""
    if asked is None:
        return None
    want = sorted({int(r) for r in asked})
    if not want:
        return None
    from ..report.fmt import rank_phrase, ranks_text

    neg = [r for r in want if r < 0]
    if neg:
        raise ForensicsError(f"{rank_phrase(neg)} cannot exist", reason="ranks are numbered from 0",
                             help="e.g. --rank 0", code=BAD_ARGUMENT)
    have = known_ranks(events)
    unknown = [r for r in want if r not in set(have)]
    if unknown:
        raise ForensicsError(
            f"{rank_phrase(unknown)} {'is' if len(unknown) == 1 else 'are'} not in this run",
            reason=f"the run has ranks {ranks_text(have, dash='-')}" if have else "no event of the run names a rank",
            help=f"e.g. --rank {have[0]}; every rank with: forensics ranks STORE" if have else
            "see where ranks come from with: forensics ingest --verbose", code=BAD_ARGUMENT)
    return want


def _missing_rows(df: pl.DataFrame, ranks: list[int]) -> pl.DataFrame:
    """Add a row (all null but rank) for each expected rank that has no events."""
    have = set(df["rank"].drop_nulls().to_list())
    lost = [r for r in ranks if r not in have]
    if not lost:
        return df
    extra = pl.DataFrame({"rank": lost}, schema={"rank": df.schema["rank"]})
    return pl.concat([df, extra], how="diagonal_relaxed").sort("rank", nulls_last=True)
