"""The range of values a store can hold, and turning the events outside it into rejects.

Owns: the timestamp range of a store (what every reader of a store can turn into a date: Python's
datetime, 0001-01-01 to 9999-12-31 UTC) and `split_out_of_range`, which takes the events whose
time is outside it out of a reader's table. A log line dated `0000-01-01T00:00:00Z` or epoch
-62135596801 parses (polars and the C scanner hold such times), but nothing downstream can print
it: one such line aborted the whole ingest. It becomes a reject with that reason; the other lines
are kept. Also `json_safe`: a reader's extra value with an int beyond 64 bits made text (JSON
cannot hold it). Must not read files (the caller finds the rejected lines' bytes: `lines_at`).
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, BinaryIO, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..schema import RAW_LIMIT

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
TS_MIN_US = -((_EPOCH - datetime(1, 1, 1, tzinfo=timezone.utc)).days * 86_400_000_000)
TS_MAX_US = (datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc) - _EPOCH) // datetime.resolution
TS_REASON = "timestamp out of range (a store holds 0001-01-01 to 9999-12-31 UTC)"


def out_of_range(ev: pa.Table) -> np.ndarray | None:
    """Where the events' timestamps are outside the range a store holds (None: nowhere, the usual
    case, decided by one min/max)."""
    if "timestamp" not in ev.column_names or not ev.num_rows:
        return None
    us = ev["timestamp"].cast(pa.int64())
    mm = pc.min_max(us)
    lo, hi = mm["min"].as_py(), mm["max"].as_py()
    if lo is None or (lo >= TS_MIN_US and hi <= TS_MAX_US):
        return None
    bad = pc.or_(pc.less(us, TS_MIN_US), pc.greater(us, TS_MAX_US)).fill_null(False)
    return np.asarray(bad.to_numpy(zero_copy_only=False), dtype=bool)


def split_out_of_range(ev: pa.Table) -> tuple[pa.Table, list[int], np.ndarray | None]:
    """(the events a store can hold, the line numbers of the others, the mask of the others in
    `ev`; None when there are none)."""
    bad = out_of_range(ev)
    if bad is None:
        return ev, [], None
    lines = [int(x) for x in pc.filter(ev["line"], pa.array(bad)).to_pylist() if x is not None]
    return ev.filter(pa.array(~bad)), lines, bad


def lines_at(stream: BinaryIO, first_line: int, wanted: Iterable[int]) -> dict[int, tuple[bytes, int]]:
    """The bytes (first RAW_LIMIT, without the line end) and full length of the lines numbered
    `wanted` in a stream whose first line is `first_line`; a number past its end is left out.
    Reads up to the last wanted line only, a line at a time."""
    want = set(wanted)
    out: dict[int, tuple[bytes, int]] = {}
    if not want:
        return out
    last = max(want)
    n = first_line
    while n <= last:
        head = stream.readline(RAW_LIMIT + 2)
        if not head:
            break
        size = len(head)
        while not head.endswith(b"\n") and size >= RAW_LIMIT:   # a long line: its length, not its bytes
            more = stream.readline(1 << 20)
            if not more:
                break
            size += len(more)
            if more.endswith(b"\n"):
                head += b"\n"
                break
        if n in want:
            text = head.rstrip(b"\r\n")
            out[n] = (text[:RAW_LIMIT], size - (len(head) - len(text)))
        n += 1
    return out


def json_safe(o: Any) -> Any:
    """`o` with what JSON cannot hold as a number made text (an int beyond 64 bits: a pid or
    size of 30 digits in a log line, a dump's 2**70), for a reader's extra column."""
    if type(o) is int and not -2**63 <= o <= 2**64 - 1:
        return str(o)
    if isinstance(o, dict):
        return {k: json_safe(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [json_safe(v) for v in o]
    return o
