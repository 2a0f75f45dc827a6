"""c10's own logger (c10/util/Logging.cpp, MessageLogger) writes `[rank{N}]:` (when the global
rank is known) then `[{IWEF}{(tm_mon + 1) * 100 + tm_mday} HH:MM:SS.{ns:09} file:line] `: the
month is not zero-padded (`E321` is March 21, `E1206` December 6). Both read as the line's time
(the year from the file's full timestamps) and level. A collector's time of day in front of the
`[rankN]:` prefix is a prefix too (extra.clock), not the start of the message.

Every line here is ours, in that format.
"""
from __future__ import annotations

import io
import json

import polars as pl
import pytest

from forensics.ingest.console import read_console
from forensics.ingest.formats import ReaderContext


def _events(*lines: str) -> pl.DataFrame:
    data = ("\n".join(lines) + "\n").encode()
    blocks = list(read_console("c.log", io.BytesIO(data), ReaderContext("c.log", None, None)))
    return pl.concat([b.events for b in blocks], how="diagonal_relaxed")


_WATCHDOG = ("ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=52, "
             "OpType=ALLREDUCE, NumelIn=2048, NumelOut=2048, Timeout(ms)=600000) ran for 600031 milliseconds before timing out.")


@pytest.mark.parametrize("stamp,want", [
    ("E321 14:03:22.123456789", "2025-03-21 14:03:22.123456"),
    ("E1206 09:00:01.500000000", "2025-12-06 09:00:01.500000"),
    ("E705 23:59:59.000000001", "2025-07-05 23:59:59"),
])
def test_an_unpadded_month_is_read(stamp, want):
    ev = _events("2025-09-01 08:00:00,000 - INFO - training starts", f"[rank3]:[{stamp} {_WATCHDOG}")
    row = ev.row(1, named=True)
    assert (row["event"], row["rank"], row["level"]) == ("NCCL_TIMEOUT", 3, "ERROR")
    assert str(row["timestamp"]).startswith(want)


@pytest.mark.parametrize("clock", ["14:03:22", "[14:03:22.120]", "14:03:22,120"])
def test_a_collectors_clock_before_the_rank_prefix_is_a_prefix(clock):
    ev = _events("2025-03-01 08:00:00,000 - INFO - training starts", f"{clock} [rank3]:[E321 14:03:22.123456789 {_WATCHDOG}")
    row = ev.row(1, named=True)
    assert (row["event"], row["rank"], row["rank_source"]) == ("NCCL_TIMEOUT", 3, "prefix")
    assert str(row["timestamp"]).startswith("2025-03-21 14:03:22")
    assert json.loads(row["extra"])["clock"].startswith("14:03:22")
    assert not row["message"].startswith(clock)


def test_a_clock_without_a_routing_prefix_stays_text():
    row = _events("14:03:22 step 40 loss 2.1").row(0, named=True)
    assert row["message"].startswith("14:03:22")
