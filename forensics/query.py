"""Ad-hoc questions to the store: the `events` filter and SQL.

Owns the one filter behind `forensics events` ("filter all events of one card", seed 000 §4.5)
and the SQL entry point over the tables `events`, `rejects` and `ranks`. Filters are pushed into
the Parquet scan (rank and timestamp have statistics in every part, so one rank's events read
only that rank's parts). Must not print (render/events.py does) nor judge what is wrong.
"""
from __future__ import annotations

import datetime as dt
import re
from typing import Iterable

import polars as pl

from .errors import BAD_ARGUMENT, BAD_QUERY, ForensicsError
from .schema import LEVELS
from .store import Run
from .timeline import TS, Events, lazy, parse_time_spec, rank_summary

TimeSpec = dt.datetime | str | None


def _time(spec: TimeSpec, events: Events) -> dt.datetime | None:
    if spec is None or isinstance(spec, dt.datetime):
        return spec
    return parse_time_spec(spec, events)


def _names(values: str | Iterable[str] | None) -> list[str]:
    if values is None:
        return []
    items = [values] if isinstance(values, str) else list(values)
    return [v.strip() for item in items for v in item.split(",") if v.strip()]


def level_at_least(level: str) -> pl.Expr:
    """Events at `level` or above (DEBUG < INFO < WARN < ERROR); WARNING/ERR/... accepted."""
    from .schema import LEVEL_ALIASES

    canon = LEVEL_ALIASES.get(level.strip().upper())
    if canon is None:
        raise ForensicsError(f"unknown level {level!r}", reason=f"levels are {', '.join(LEVELS)}",
                             help="e.g. --level WARN (shows WARN and ERROR)", code=BAD_ARGUMENT)
    return pl.col("level").is_in(LEVELS[LEVELS.index(canon):])


def event_is(names: list[str]) -> pl.Expr:
    """Exact event ids; a trailing or inner `*` matches any text (`NCCL_*`)."""
    exact = [n for n in names if "*" not in n]
    globs = [n for n in names if "*" in n]
    e = pl.col("event").is_in(exact) if exact else pl.lit(False)
    for g in globs:
        e = e | pl.col("event").str.contains("^" + ".*".join(re.escape(p) for p in g.split("*")) + "$")
    return e


def filter_events(
    events: Events,
    *,
    ranks: Iterable[int] | None = None,
    event: str | Iterable[str] | None = None,
    level: str | None = None,
    since: TimeSpec = None,
    until: TimeSpec = None,
    grep: str | None = None,
    limit: int | None = None,
) -> pl.LazyFrame:
    """The events that match every given condition, in time order (then rank, line).

    ranks: any of these ranks; event: ids, comma-separated or a list, `*` wildcards;
    level: this level or above; since/until: inclusive bounds (datetime, or a spec for
    `parse_time_spec`: ISO, -30s, step:1500); grep: case-insensitive text in message or extra;
    limit: the first N after sorting (None or 0 = all).
    """
    lf = lazy(events)
    conds: list[pl.Expr] = []
    rank_list = sorted(set(ranks)) if ranks is not None else []
    if rank_list:
        conds.append(pl.col("rank").is_in(rank_list))
    names = _names(event)
    if names:
        conds.append(event_is(names))
    if level:
        conds.append(level_at_least(level))
    t0, t1 = _time(since, events), _time(until, events)
    if t0 is not None:
        conds.append(pl.col(TS) >= pl.lit(t0))
    if t1 is not None:
        conds.append(pl.col(TS) <= pl.lit(t1))
    if grep:
        pat = "(?i)" + re.escape(grep)
        conds.append(pl.col("message").str.contains(pat).fill_null(False)
                     | pl.col("extra").str.contains(pat).fill_null(False))
    if conds:
        lf = lf.filter(pl.all_horizontal(conds))
    lf = lf.sort(TS, "rank", "line", nulls_last=True)
    if limit:
        lf = lf.head(limit)
    return lf


def sql(run: Run, query: str) -> pl.DataFrame:
    """Run SQL over `events` (the store's events), `rejects` (lines ingest could not read) and
    `ranks` (the `forensics ranks` table, computed only when the query names it)."""
    ctx = pl.SQLContext(events=run.events(), rejects=run.rejects(), eager=False)
    if re.search(r"\branks\b", query, re.IGNORECASE):
        ctx.register("ranks", rank_summary(run).lazy())
    try:
        return ctx.execute(query).collect()
    except pl.exceptions.PolarsError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ForensicsError(
            "the SQL query failed",
            where=query if len(query) <= 200 else query[:200] + " ...",
            reason=first,
            help="tables: events, rejects, ranks; see the columns with: forensics sql STORE \"SELECT * FROM events LIMIT 1\"",
            code=BAD_QUERY,
        ) from None
