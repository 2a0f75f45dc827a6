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


# c10/util/Exception.cpp (Error::Error): a c10::Error's what() ends with "Exception raised from
# FUNC at FILE:LINE (most recent call first):" and c10/util/Backtrace.cpp's "frame #N: SYMBOL + 0x..
# (0x.. in LIB)" lines: the native backtrace of the exception printed just above them
_CPP_RAISED = re.compile(r"^\s*Exception raised from \S.* at \S+:\d+ \(most recent call first\):")
_CPP_FRAME = re.compile(r"^\s*frame #\d+: ")
# how far above its backtrace an exception's line may be (its what() runs over a few lines)
_CPP_REACH = 64


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

    def _note_error(self, r: _Row, key: tuple) -> None:
        """Remember the last error of a stream: the exception a native backtrace below belongs to
        (a traceback's line stands for its head)."""
        if r.level == "ERROR" and r.reason is None:
            head = (r.extra.get("head") if r.event == "TRACEBACK_CONT" else r.extra.get("traceback")) if r.extra else None
            self.last_err[key] = head if isinstance(head, int) else r.line

    def _cpp_backtrace(self, body: str, r: _Row, key: tuple) -> bool:
        """A c10::Error's "Exception raised from ... (most recent call first):" line and the
        "frame #N:" lines after it are the backtrace of the exception above them in the stream:
        continuation lines of it (extra.head), never errors of their own (a frame's symbol
        `c10::Error::Error` is no error level). Without an exception above: plain text."""
        if _CPP_RAISED.match(body):
            head = self.last_err.get(key)
            self.cpp_bt[key] = head if head is not None and r.line - head <= _CPP_REACH else -1
        elif self.cpp_bt and key in self.cpp_bt and _CPP_FRAME.match(body):
            head = self.cpp_bt[key]
        else:
            if self.cpp_bt and body.strip():    # (a blank line inside a backtrace does not end it)
                self.cpp_bt.pop(key, None)
            return False
        r.message = body if len(body) <= _MAX_MESSAGE else body[:_MAX_MESSAGE]
        r.level = "INFO"
        if head is not None and head >= 0:
            r.event = "TRACEBACK_CONT"
            r.x(head=head, native=True)
        else:
            r.event = "LOG"
        return True

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
