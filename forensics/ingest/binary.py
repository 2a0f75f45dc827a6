"""What counts as binary garbage in a text log: one rule, shared by every line reader.

Owns `is_binary_text`. Must not read files or decide anything else about a line.

A crashed writer, a disk that lost its tail or a file that is not a log at all leaves bytes that
are not text. Turning them into LOG events invents events (200 KB of random bytes used to become
778 console events); they are rejected with the reason `BINARY`, raw bytes kept.

The rule, on a line decoded as UTF-8 with replacement: binary if it holds a NUL, or if more than
5% of its characters are C0 control characters other than tab, carriage return and ESC (terminal
colours and tqdm redraws are text), or if more than 30% are U+FFFD (bytes that are not UTF-8).
A Latin-1 accent or a stray control byte in a long line stays text; random bytes hold ~11%
controls and ~45% invalid sequences; a line with both a control byte and invalid UTF-8 is binary
from 10% on, and one with two or more invalid sequences when less than half of it is letters,
digits and spaces (Latin-1 text is mostly letters; random bytes are a third). Short lines that do not read as text are judged by their neighbours
(`binary_runs`): a line of a few bytes between two binary lines is part of the same garbage.
"""
from __future__ import annotations

import re

BINARY = "binary data"
# Characters that betray a non-text line: C0 controls except \t \n \r ESC, DEL, U+FFFD.
SUSPECT = "[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f\ufffd]"
_CONTROL = re.compile("[\x01-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f]")
SHORT = 16  # a line shorter than this (characters) cannot be judged on its own


def is_binary_text(s: str) -> bool:
    """True if the decoded line `s` (newline stripped or not) is binary garbage."""
    if "\x00" in s:
        return True
    s = s.rstrip("\r\n")
    if not s:
        return False
    n = len(s)
    ctrl = len(_CONTROL.findall(s))
    if ctrl * 20 > n:
        return True
    bad = s.count("\ufffd")
    if bad * 10 > n * 3:
        return True
    # a control byte next to invalid UTF-8 is not a text line in some other encoding
    if ctrl > 0 and bad > 0 and (ctrl + bad) * 10 > n:
        return True
    # text in a legacy encoding (Latin-1 accents) is still mostly letters, digits and spaces;
    # random bytes are about a third of that
    return bad >= 2 and sum(c.isalnum() or c == " " for c in s if c != "\ufffd") * 2 < n


def _plain(s: str) -> bool:
    """A short line that reads as text on its own: printable ASCII, at least 4 characters."""
    return len(s) >= 4 and s.isascii() and s.isprintable()


def binary_runs(lines: list[str], flags: list[bool], before_binary: bool | None = None) -> list[bool]:
    """`flags` with short lines that do not read as text on their own (`_plain`) marked binary
    when the nearest judged lines on both sides are binary (`before_binary`: was the previous
    block's last line binary; None at the start of the file, where the line after decides): a 3-byte fragment of random data is not
    a log line, `}` between two log lines is."""
    out = list(flags)
    n = len(lines)
    i = 0
    while i < n:
        if out[i] or len(lines[i]) >= SHORT or not lines[i].strip() or _plain(lines[i]):
            i += 1
            continue
        j = i
        while j < n and not flags[j] and len(lines[j]) < SHORT and lines[j].strip() and not _plain(lines[j]):
            j += 1
        b, a = i - 1, j
        while b >= 0 and not lines[b].strip():     # blank lines are neither text nor garbage
            b -= 1
        while a < n and not lines[a].strip():
            a += 1
        before = flags[b] if b >= 0 else before_binary
        after = flags[a] if a < n else None
        # at the start of the file or the end of the block, the other side decides alone
        if before is None:
            before = after
        if after is None:
            after = before
        if before and after:
            for k in range(i, j):
                out[k] = True
        i = j
    return out
