"""The row a console line becomes (columns in `m`, the rest in `extra`), and the small readers of
numbers in a line's text the typed events share.
"""
from __future__ import annotations

import re
from typing import Any


# A traceback longer than this (or left open this many lines) is emitted as it stands.
_MAX_PENDING = 20_000


_MAX_MESSAGE = 65_536


_MAX_FRAMES = 200


_LEVEL_ORDER = {"DEBUG": 0, "INFO": 1, "WARN": 2, "ERROR": 3}


class _Row:
    __slots__ = ("line", "event", "level", "message", "rank", "rank_source", "host", "local_rank", "ts", "extra", "m", "reason", "raw")

    def __init__(self, line: int) -> None:
        self.line = line
        self.event: str | None = None
        self.level = "INFO"
        self.message: str | None = None
        self.rank: int | None = None
        self.rank_source = "none"
        self.host: str | None = None
        self.local_rank: int | None = None
        self.ts: str | None = None
        self.extra: dict[str, Any] | None = None
        self.m: dict[str, Any] | None = None
        self.reason: str | None = None    # set for rejects
        self.raw: bytes | None = None

    def put(self, **kv: Any) -> None:
        if self.m is None:
            self.m = {}
        for k, v in kv.items():
            if v is not None:
                self.m[k] = v

    def x(self, **kv: Any) -> None:
        if self.extra is None:
            self.extra = {}
        for k, v in kv.items():
            if v is not None:
                self.extra[k] = v

    def raise_level(self, level: str) -> None:
        if _LEVEL_ORDER[level] > _LEVEL_ORDER[self.level]:
            self.level = level


def _num(s: str) -> float | None:
    s = s.strip().rstrip("%").strip()
    try:
        return float(s)
    except ValueError:
        return None


def _int(s: str | None) -> int | None:
    if s is None:
        return None
    try:
        return int(s)
    except ValueError:
        return None


def _ranks(s: str) -> list[int]:
    return [int(t) for t in re.findall(r"\d+", s)]


def _small_int(t: str) -> bool:
    """ASCII digits int() reads ('²' is a digit to str.isdigit; 5,000 digits are past int's limit)."""
    return t.isascii() and t.isdigit() and len(t) <= 12
