"""When and how severe: the timestamp written in the line (ISO, US date, syslog, glog without
a year) and its level.
"""
from __future__ import annotations

import re

from .row import _Row


_ISO = re.compile(
    r"((?:19|20)\d\d)-(\d\d)-(\d\d)[ T_](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?(Z|[+-]\d\d:?\d\d)?(?!\d)"
)


_US_DATE = re.compile(r"^(\d\d)/(\d\d)/((?:19|20)\d\d) (\d\d):(\d\d):(\d\d)")


_SYSLOG = re.compile(r"^(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(\d{1,2}) (\d\d):(\d\d):(\d\d)")


_MONTHS = {m: i + 1 for i, m in enumerate("Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split())}


_LEVEL_MAP = {
    "DEBUG": "DEBUG", "TRACE": "DEBUG", "INFO": "INFO", "WARNING": "WARN", "WARN": "WARN",
    "ERROR": "ERROR", "CRITICAL": "ERROR", "FATAL": "ERROR",
}


_GLOG_LEVEL = {"I": "INFO", "W": "WARN", "E": "ERROR", "F": "ERROR"}


_LEVEL_START = re.compile(r"(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)[:\s]")


class _Times:
    """The parser's reading of a line's time and level."""

    def _glog(self, m: re.Match[str], r: _Row) -> None:
        r.level = _GLOG_LEVEL[m.group(1)]
        r.x(src=m.group(8))
        if m.group(2) and not (1 <= int(m.group(2)) <= 12 and 1 <= int(m.group(3)) <= 31):
            return                          # no date: a level letter before a number
        if m.group(2) and self.year is not None:
            mon, day = int(m.group(2)), int(m.group(3))
            year = self.year
            # The reference timestamp may sit on the other side of a new year.
            if self.month is not None and mon - self.month > 6:
                year -= 1
            elif self.month is not None and self.month - mon > 6:
                year += 1
            frac = f".{m.group(7)}" if m.group(7) else ""
            r.ts = f"{year:04d}-{mon:02d}-{day:02d}T{m.group(4)}:{m.group(5)}:{m.group(6)}{frac}"
        elif m.group(2):
            # no full timestamp anywhere in the file to take a year from: the month, day and
            # time stay with the line (a diagnosis may take the year from the run's other files)
            frac = f".{m.group(7)}" if m.group(7) else ""
            r.x(glog_time=f"{int(m.group(2)):02d}-{int(m.group(3)):02d}T{m.group(4)}:{m.group(5)}:{m.group(6)}{frac}")

    def _time_level(self, body: str, r: _Row, i: int) -> None:
        h = self.hints
        if r.ts is None:
            if h.ts[i] is not None:
                r.ts = h.ts[i]
                self.year, self.month = h.year[i], h.month[i]
            elif body[2:3] == "/" and body[5:6] == "/":
                m = _US_DATE.match(body)
                if m:
                    r.ts = f"{m.group(3)}-{m.group(1)}-{m.group(2)}T{m.group(4)}:{m.group(5)}:{m.group(6)}"
                    self.year, self.month = int(m.group(3)), int(m.group(1))
            elif self.year is not None and body[:3] in _MONTHS:
                m = _SYSLOG.match(body)
                if m:
                    r.ts = f"{self.year:04d}-{_MONTHS[m.group(1)]:02d}-{int(m.group(2)):02d}T{m.group(3)}:{m.group(4)}:{m.group(5)}"
        if r.extra is None or "src" not in r.extra:  # glog already set the level
            word = h.lvl[i]
            if word is None:
                m = _LEVEL_START.match(body)
                word = m.group(1) if m else None
            if word is not None:
                r.level = _LEVEL_MAP[word]
            elif h.err[i]:
                r.level = "ERROR"
            elif h.warn[i]:
                r.level = "WARN"
