"""Multi-line Python tracebacks: the head line and its frames, folded per prefix stream (see
forensics/ingest/console/__init__.py).
"""
from __future__ import annotations

import re

from .row import _MAX_MESSAGE, _Row


# Python tracebacks
_TB_HEAD = "Traceback (most recent call last):"


_FRAME = re.compile(r'^\s+File "([^"]+)", line (\d+)(?:, in (.+))?')


_EXC_LINE = re.compile(r"^((?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*))(?::(?:\s(.*))?)?$")


_EXC_SUFFIXES = ("Error", "Exception", "Exit", "Interrupt", "Warning", "Failure", "Timeout", "Fault", "Iteration", "Abort")


class _Traceback:
    __slots__ = ("head", "frames", "count", "last_line", "rank")

    def __init__(self, head: _Row, rank: int | None = None) -> None:
        self.head = head
        self.frames: list[str] = []
        self.count = 1
        self.last_line = head.line
        self.rank = rank            # the rank a launcher names as this traceback's writer (mp.spawn)


class _Tracebacks:
    """The parser's folding of a Python traceback's later lines into its head."""

    def _cont(self, r: _Row, body: str, tb: _Traceback, i: int) -> None:
        r.message = body if len(body) <= _MAX_MESSAGE else body[:_MAX_MESSAGE]
        if tb.rank is not None and r.rank is None:
            r.rank, r.rank_source = tb.rank, "record"
        # An indented line of a traceback is a frame or the source it quotes
        # (`raise torch.OutOfMemoryError(`): code, not an event that happened.
        if self.hints.trig[i] and body[:1] not in (" ", "\t"):
            self._typed(body, r)
        if r.event is None:
            r.event = "TRACEBACK_CONT"
            r.x(head=tb.head.line)
        else:
            r.x(traceback=tb.head.line)
        r.raise_level("ERROR")

    def _close_tb(self, tb: _Traceback, exc_line: str | None) -> None:
        h = tb.head
        h.x(frames=tb.frames, line_count=tb.count)
        if exc_line is not None:
            h.message = exc_line[:_MAX_MESSAGE]
            em = _EXC_LINE.match(exc_line)
            if em:
                h.x(exception=em.group(1))
        else:
            h.x(incomplete=True)
