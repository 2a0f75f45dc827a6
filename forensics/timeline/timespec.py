"""Times, durations and step ranges from the command line: `10s`, `14:30`, `-5m`, `step:1500`,
ISO-8601, `100:200`.

Owns parsing them against the run (its last event, the first time a step was logged). Bad
input is a ForensicsError naming what was expected; it must not print or judge the run.
"""
from __future__ import annotations

import datetime as dt
import re

import polars as pl

from ..errors import BAD_ARGUMENT, NO_INPUT, ForensicsError
from ..store import Run
from .inputs import TS, UTC, Events, _utc, bounds, lazy
from .records import iso


_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|sec|m|min|h)?\s*$")
_UNIT_S = {"ms": 1e-3, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_TIME_OF_DAY = re.compile(r"^\d{1,2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:?\d{2})?$")


def parse_duration(spec: str | float | int) -> float:
    """'10s', '500ms', '5m', '1h' -> seconds. A number (int/float) is seconds; text needs a unit:
    a bare '10' could as well mean minutes or steps."""
    if isinstance(spec, (int, float)):
        return float(spec)
    m = _DURATION.match(spec)
    if not m:
        raise ForensicsError(f"cannot read the duration {spec!r}", reason="expected a number with a unit: ms, s, m or h",
                             help="e.g. 10s, 500ms, 5m, 1h", code=BAD_ARGUMENT)
    if m.group(2) is None:
        raise ForensicsError(f"the duration {spec!r} has no unit", reason="a duration needs a unit: ms, s, m or h",
                             help=f"e.g. {m.group(1)}s or {m.group(1)}m", code=BAD_ARGUMENT)
    return float(m.group(1)) * _UNIT_S[m.group(2)]


def clamp_window(events: Events, window_s: float) -> tuple[float, bool]:
    """A look-back window no longer than the run (first to last event), and whether it was cut:
    a window of 999999h would otherwise reach back a century (or past year 1)."""
    first, last = bounds(events)
    if first is None or last is None:
        return window_s, False
    span = (_utc(last) - _utc(first)).total_seconds()
    return (window_s, False) if window_s <= span else (span, True)


def _end(events: Events) -> dt.datetime:
    _, end = bounds(events)
    if end is None:
        raise ForensicsError("the run has no events with a time", help="check the store with: forensics ranks STORE", code=NO_INPUT)
    return _utc(end)


def _time_of_day(s: str, events: Events) -> dt.datetime:
    """14:30:00 -> that time on the day of the run's last event (UTC unless the time names its
    zone); when that is after the last event (a run past midnight), the day before: the latest
    occurrence not after the run's end."""
    t = dt.time.fromisoformat(s)
    end = _end(events)
    tz = t.tzinfo or UTC
    day = end.astimezone(tz).date()
    at = dt.datetime.combine(day, t.replace(tzinfo=tz)).astimezone(UTC)
    return at - dt.timedelta(days=1) if at > end else at


def parse_time_spec(spec: str, events: Events) -> dt.datetime:
    """A point in time of the run, from the command line.

    - ISO-8601, with or without zone (a naive time is UTC, as in the store);
    - a time of day, `14:30:00` or `14:30` (UTC unless it names a zone): on the day of the run's
      last event; for a run past midnight, the latest such time not after the run's last event;
    - `-30s`, `-5m`, `-250ms`: relative to the last event of the run;
    - `step:1500`: the first time any rank logged that step.
    """
    s = spec.strip()
    if s.startswith("-"):
        end = _end(events)
        try:
            return end - dt.timedelta(seconds=parse_duration(s[1:]))
        except OverflowError:   # further back than a datetime reaches: the run's start says the same
            first, _ = bounds(events)
            return _utc(first) if first is not None else end
    if s.lower().startswith("step:"):
        try:
            step = int(s.split(":", 1)[1])
        except ValueError:
            raise ForensicsError(f"cannot read the time {spec!r}", reason="step:N needs an integer step",
                                 help="e.g. step:1500", code=BAD_ARGUMENT) from None
        if isinstance(events, Run):   # the step's first event, from the run's (rank, step) summary
            from ..summaries import scan_step_groups

            t = (scan_step_groups(events).filter(pl.col("step") == step).select(pl.col("t_start").min())
                 .collect().item())
        else:
            t = lazy(events).filter(pl.col("step") == step).select(pl.col(TS).min()).collect().item()
        if t is None:
            raise ForensicsError(f"no rank logged step {step}", reason="no event carries that step number",
                                 help="see the steps reached with: forensics ranks STORE", code=BAD_ARGUMENT)
        return t
    if _TIME_OF_DAY.match(s):
        try:
            return _time_of_day(s, events)
        except ValueError:
            raise ForensicsError(f"cannot read the time of day {spec!r}", reason="expected HH:MM or HH:MM:SS(.ffffff)",
                                 help="e.g. 14:30:00 or 09:05", code=BAD_ARGUMENT) from None
    try:
        t = dt.datetime.fromisoformat(s.replace(" ", "T", 1) if "T" not in s else s)
    except ValueError:
        raise ForensicsError(f"cannot read the time {spec!r}",
                             reason="expected ISO-8601, a time of day, a duration before the end, or step:N",
                             help="e.g. 2025-06-12T14:03:21Z, 14:03:21, -30s, -5m, step:1500", code=BAD_ARGUMENT) from None
    return _utc(t)


def parse_time_range(since: str | None, until: str | None, events: Events,
                     names: tuple[str, str] = ("--since", "--until")) -> tuple[dt.datetime | None, dt.datetime | None]:
    """Both ends of a time range (see `parse_time_spec`); a range that runs backwards is an
    error naming both values (it would silently match nothing)."""
    a = parse_time_spec(since, events) if since else None
    b = parse_time_spec(until, events) if until else None
    if a is not None and b is not None and a > b:
        raise ForensicsError(f"{names[0]} {since} is after {names[1]} {until}",
                             reason=f"the range runs backwards: {iso(a)} > {iso(b)}",
                             help=f"swap them: {names[0]} {until} {names[1]} {since}", code=BAD_ARGUMENT)
    return a, b


def parse_step_range(spec: str) -> tuple[int | None, int | None]:
    """'100:200' (inclusive), '100:', ':200', ':' (all), or '150' (one step)."""
    try:
        if ":" not in spec:
            n = int(spec)
            return n, n
        a, b = spec.split(":", 1)
        lo, hi = (int(a) if a.strip() else None), (int(b) if b.strip() else None)
    except ValueError:
        raise ForensicsError(f"cannot read the step range {spec!r}", reason="expected A:B with integer steps",
                             help="e.g. --steps 1500:1520, --steps 1500:, --steps : (all)", code=BAD_ARGUMENT) from None
    if lo is not None and hi is not None and lo > hi:
        raise ForensicsError(f"the step range {spec!r} runs backwards: step {lo} is after step {hi}",
                             reason="A:B needs A <= B (both steps are included)",
                             help=f"e.g. --steps {hi}:{lo}", code=BAD_ARGUMENT)
    return lo, hi
