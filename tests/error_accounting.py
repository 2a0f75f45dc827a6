"""The invariant of issue 27, checked from outside the pass: every ERROR line of a run is cited by,
or explained under, some finding of its report.

A reference written for the tests, line by line in Python (the pass does it in polars,
forensics/passes/unexplained.py): the error lines are read from the store's events (not from the
summaries the pass reads), and a line counts as explained when a finding cites it (or the first
line of its traceback), or when a failure-kind finding at WARN/ERROR (or an unexplained_error)
began no later than one second after the line and the line is that finding's — its rank, a
victim, its local rank, a line naming no process, a whole-job finding, or a cascade line (an exit
or kill record, a teardown exception, a lost peer or timeout). Lines without a time are not held
to the time condition (the pass places them between their file's timestamped lines).
"""
from __future__ import annotations

import datetime as dt
import json
import re

import polars as pl

from forensics.passes.evidence import parse_iso
from forensics.passes.failures import TEARDOWN_RE, TIMEOUT_RE
from forensics.passes.unexplained import DEATH_EVENTS, ENDING_KINDS
from forensics.report.model import Report

SLACK = dt.timedelta(seconds=1)


def error_lines(events: pl.LazyFrame) -> list[dict]:
    """ERROR events and launcher records of workers that exited non-zero or were killed."""
    code = pl.col("exit_code")
    keep = (pl.col("level") == "ERROR") | (pl.col("event").is_in(DEATH_EVENTS) & (code.is_null() | (code != 0)))
    return (events.filter(keep).select("rank", "host", "local_rank", "timestamp", "event", "message", "extra",
                                       "source_file", "line").collect().to_dicts())


def _head(r: dict) -> int:
    if r["event"] == "TRACEBACK_CONT" and r["extra"]:
        try:
            return int(json.loads(r["extra"]).get("head", r["line"]))
        except (ValueError, TypeError):
            return r["line"]
    return r["line"]


def _cascade(r: dict) -> bool:
    msg, ev = r["message"] or "", r["event"] or ""
    return (ev in DEATH_EVENTS or bool(re.search(TEARDOWN_RE, msg)) or bool(re.search(TIMEOUT_RE, msg))
            or bool(re.search("(?i)TIMEOUT|WATCHDOG", ev)))


def unaccounted(events: pl.LazyFrame, report: Report, ranks: list[int]) -> list[str]:
    """file:line of every error line no finding of `report` cites or explains."""
    cited = {(e.source_file, e.line) for f in report.findings for e in f.lines}
    everyone = set(ranks)
    fails = [f for f in report.findings if f.severity in ("WARN", "ERROR") and f.kind in ENDING_KINDS]
    out = []
    for r in error_lines(events):
        if (r["source_file"], r["line"]) in cited or (r["source_file"], _head(r)) in cited:
            continue
        t = r["timestamp"]
        ok = False
        for f in fails:
            t0 = parse_iso(f.first_seen)
            if t is not None and t0 is not None and t < t0 - SLACK:
                continue
            whole = (not f.ranks and not f.local_ranks) or (len(everyone) > 1 and set(f.ranks) >= everyone)
            mine = (r["rank"] is not None and r["rank"] in set(f.ranks) | set(f.victims)) or (
                r["rank"] is None and any(x.get("host") == r["host"] and x.get("local_rank") == r["local_rank"]
                                          for x in f.local_ranks))
            if whole or mine or (r["rank"] is None and r["local_rank"] is None) or _cascade(r):
                ok = True
                break
        if not ok:
            out.append(f"{r['source_file']}:{r['line']} rank {r['rank']} {r['event']}: {(r['message'] or '')[:80]}")
    return out
