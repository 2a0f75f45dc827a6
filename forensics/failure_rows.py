"""The events that may be failures: what the failures pass (`passes.failures`) classifies.

WARN/ERROR lines, or events whose name NAMED_RE matches: ~2,000 of the 64-rank bench store's
7.7 M events. Finding them means reading the message and extra columns of every event (a
decompression floor: WARN lines in every page), so the ingest stores them as the FAILURES
summary (`forensics.summaries`), from each chunk it writes, with `test` as the pass uses it.
Changing NAMED_RE, `test` or COLUMNS changes that summary's content: raise
`summaries.SUMMARY_VERSION` with it. A module of its own: the ingest imports it (importing
`forensics.passes` costs ~0.16 s).
"""
from __future__ import annotations

import re
from typing import Iterable

import polars as pl

NAMED_RE = r"(?i)OOM|TIMEOUT|NCCL|WATCHDOG|DESYNC|DUMP_SIGNAL|CHILD_FAILED|KILLED|CANCELLED|MISMATCH|XID|CUDA_ERROR"
# the event columns the pass reads, in this order
COLUMNS = ("rank", "host", "local_rank", "timestamp", "level", "event", "message", "seq", "peer_rank", "step",
           "collective", "process_group", "exit_code", "extra", "fields", "source_file", "line", "rank_source")


def named(names: Iterable[str | None]) -> list[str]:
    """The names NAMED_RE matches, of some distinct event names (Python's `re` has the last word)."""
    return [n for n in names if n is not None and re.search(NAMED_RE, n)]


def test(names: list[str]) -> pl.Expr:
    """Whether an event may be a failure, `names` the events' distinct names NAMED_RE matches
    (`named`): a name is matched once, not every row's."""
    return pl.col("level").is_in(["WARN", "ERROR"]) | pl.col("event").is_in(names)


def event_names(events: pl.LazyFrame) -> list[str]:
    """`named` of the distinct event names of `events`. Filtered by the pattern in the scan first:
    0.03 s where the unique names of 7.7 M events cost 0.13 s. The filter also keeps names with
    non-ASCII letters, where polars' case folding may differ from `re`'s."""
    maybe = pl.col("event").str.contains(NAMED_RE) | pl.col("event").str.contains(r"[^\x00-\x7F]")
    return named(events.select("event").filter(maybe).unique().collect().to_series().to_list())


def rows(events: pl.LazyFrame) -> pl.LazyFrame:
    """The events that may be failures (COLUMNS), in the order of `events`."""
    return events.select(COLUMNS).filter(test(event_names(events)))
