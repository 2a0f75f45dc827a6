"""Ad-hoc questions to the store: the `events` filter and SQL.

Owns the one filter behind `forensics events` ("filter all events of one card", seed 000 §4.5)
and the SQL entry point over the tables `events`, `rejects` and `ranks` (DuckDB with file access
off: a query sees those three tables and nothing else on the machine). Filters are pushed into
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
from .timeline import ORDER, Events, check_ranks, parse_time_spec, with_order_time

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
    """The events that match every given condition, in time order (then rank, file, line; an
    event without a time right after the line of its file before it, see
    `timeline.with_order_time`).

    ranks: any of these ranks (a rank the run does not have is a ForensicsError); event: ids, comma-separated or a list, `*` wildcards;
    level: this level or above; since/until: inclusive bounds (datetime, or a spec for
    `parse_time_spec`: ISO, -30s, step:1500); grep: case-insensitive text in message or extra;
    limit: the first N after sorting (None or 0 = all).
    """
    conds: list[pl.Expr] = []
    rank_list = check_ranks(events, ranks) or []
    if rank_list:
        conds.append(pl.col("rank").is_in(rank_list))
    names = _names(event)
    if names:
        conds.append(event_is(names))
    if level:
        conds.append(level_at_least(level))
    t0, t1 = _time(since, events), _time(until, events)
    # an event without a time is placed after its file's last timed line before it; a store
    # reads only the parts that can hold the ranks and times asked for
    lf = with_order_time(events, ranks=rank_list or None, since=t0)
    if t0 is not None:
        conds.append(pl.col(ORDER) >= pl.lit(t0))
    if t1 is not None:
        conds.append(pl.col(ORDER) <= pl.lit(t1))
    if grep:
        pat = "(?i)" + re.escape(grep)
        conds.append(pl.col("message").str.contains(pat).fill_null(False)
                     | pl.col("extra").str.contains(pat).fill_null(False))
    if conds:
        lf = lf.filter(pl.all_horizontal(conds))
    lf = lf.sort(ORDER, "rank", "source_file", "line", nulls_last=True).drop(ORDER)
    if limit:
        lf = lf.head(limit)
    return lf


# The tables `sql` offers; nothing else is reachable from a query (see `sql`).
SQL_TABLES = ("events", "rejects", "ranks")


def _quote(path: str) -> str:
    return "'" + path.replace("'", "''") + "'"


def _connect(run: Run, with_ranks: bool) -> "duckdb.DuckDBPyConnection":  # noqa: F821
    """An in-memory DuckDB that sees the tables `events`, `rejects` (views over the store's
    Parquet parts) and, when asked, `ranks`, and no file: external access is switched off after
    the views are defined (only the store's own parts stay readable, through `allowed_paths`) and
    the configuration is locked, so read_csv/read_parquet/COPY/ATTACH/INSTALL/LOAD are refused."""
    import duckdb

    from .schema import EVENT_SCHEMA, REJECT_SCHEMA

    # extensions would be fetched or loaded from disk: the ones built into the wheel (json,
    # parquet, icu) are all a query needs
    con = duckdb.connect(":memory:", config={"autoinstall_known_extensions": False,
                                             "autoload_known_extensions": False})
    allowed: list[str] = []
    for name, key, schema in (("events", "event_parts", EVENT_SCHEMA), ("rejects", "reject_parts", REJECT_SCHEMA)):
        parts = run.event_parts() if name == "events" else run.reject_parts()   # a part holds many files
        if parts:
            con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet([{', '.join(map(_quote, parts))}])")
            allowed += parts
        else:
            con.register(f"_{name}_empty", pl.DataFrame(schema=schema).to_arrow())
            con.execute(f"CREATE VIEW {name} AS SELECT * FROM _{name}_empty")
    if with_ranks:
        from .timeline import rank_summary   # the step-table machinery: `sql` only, not `events`

        con.register("ranks", rank_summary(run).to_arrow())
    if allowed:
        con.execute(f"SET allowed_paths = [{', '.join(map(_quote, allowed))}]")
    con.execute("SET TimeZone = 'UTC'")   # timestamps come back in UTC, as stored
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


SQL_TIMEOUT_S = 60.0   # the default time limit of one query: any question about a run's store takes seconds
# DuckDB types with no polars or JSON/CSV form (a BLOB, INTERVAL, UNION, BIT, VARIANT, or a MAP anywhere in
# a column's type): such a column comes back as DuckDB's text of it
_AS_TEXT = re.compile(r"\b(BLOB|BYTEA|BINARY|VARBINARY|BIT|BITSTRING|INTERVAL|UNION|MAP|VARIANT|GEOMETRY)\b")


def _as_text(rel: "duckdb.DuckDBPyRelation") -> "duckdb.DuckDBPyRelation":  # noqa: F821
    """`rel` with every column of a type in _AS_TEXT cast to VARCHAR (rejects' raw bytes as
    text, so they are redacted like any other text)."""
    types = [str(t) for t in rel.types]
    if not any(_AS_TEXT.search(t) for t in types):
        return rel
    cols = ['"' + c.replace('"', '""') + '"' for c in rel.columns]
    return rel.project(", ".join(f"CAST({c} AS VARCHAR) AS {c}" if _AS_TEXT.search(t) else c for c, t in zip(cols, types)))


def sql(run: Run, query: str, timeout: float = SQL_TIMEOUT_S) -> pl.DataFrame:
    """Run SQL (DuckDB's dialect, with its JSON functions for `extra`/`fields`) over `events`
    (the store's events), `rejects` (lines ingest could not read) and `ranks` (the `forensics
    ranks` table, computed only when the query names it). Columns are named as DuckDB names them
    (`count_star()`, or the alias); a BLOB, INTERVAL, UNION or MAP column comes back as text. No
    file outside the store can be read or written. A query still running after `timeout` seconds
    is stopped (ForensicsError)."""
    import threading

    import duckdb

    con = _connect(run, with_ranks=re.search(r"\branks\b", query, re.IGNORECASE) is not None)
    timer = threading.Timer(timeout, con.interrupt)
    timer.daemon = True
    timer.start()
    try:
        rel = con.sql(query)
        if rel is None:   # a statement without a result (CREATE, SET ...)
            return pl.DataFrame()
        return _as_text(rel).pl()
    except duckdb.InterruptException:
        raise ForensicsError("the SQL query ran too long", where=query if len(query) <= 200 else query[:200] + " ...",
                             reason=f"stopped after the time limit of {timeout:g} s",
                             help="ask for less (a WHERE, a LIMIT), or allow more time with --timeout SECONDS",
                             code=BAD_QUERY) from None
    except duckdb.Error as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        denied = isinstance(e, duckdb.PermissionException) or "disabled by configuration" in first \
            or "configuration has been locked" in first
        raise ForensicsError(
            "the SQL query failed" if not denied else "the SQL query tried to reach outside the store",
            where=query if len(query) <= 200 else query[:200] + " ...",
            reason=first,
            help=("sql reads only the tables events, rejects and ranks (no files, no extensions, no settings); "
                  if denied else "tables: events, rejects, ranks; ")
            + "see the columns with: forensics sql STORE \"SELECT * FROM events LIMIT 1\"",
            code=BAD_QUERY,
        ) from None
    finally:
        timer.cancel()
        con.close()
