"""What counts as binary garbage in a text log: one rule, shared by every line reader.

Owns `is_binary_text`. Must not read files or decide anything else about a line.

A crashed writer, a disk that lost its tail or a file that is not a log at all leaves bytes that
are not text. Turning them into LOG events invents events (200 KB of random bytes used to become
778 console events); they are rejected with the reason `BINARY`, raw bytes kept.

The rule, on a line decoded as UTF-8 with replacement: binary if it holds a NUL, or if more than
5% of its characters are C0 control characters other than tab, carriage return and ESC (terminal
colours and tqdm redraws are text), or if more than 30% are U+FFFD (bytes that are not UTF-8).
A Latin-1 accent or a stray control byte in a long line stays text; random bytes hold ~11%
controls and ~45% invalid sequences. Short lines are judged by their neighbours (`binary_runs`):
a line of a few bytes between two binary lines is part of the same garbage.
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
    return s.count("\ufffd") * 10 > n * 3


def binary_runs(lines: list[str], flags: list[bool]) -> list[bool]:
    """`flags` with short non-binary lines that sit between binary lines (ignoring other short
    lines) marked binary too: a 3-byte fragment of random data is not a log line."""
    out = list(flags)
    n = len(lines)
    i = 0
    while i < n:
        if out[i] or len(lines[i]) >= SHORT or not lines[i].strip():
            i += 1
            continue
        j = i
        while j < n and not flags[j] and len(lines[j]) < SHORT and lines[j].strip():
            j += 1
        before = i == 0 or flags[i - 1]
        after = j == n or flags[j]
        # A whole block of short lines is text; a run needs binary on at least one real side.
        if before and after and ((i > 0 and flags[i - 1]) or (j < n and flags[j])):
            for k in range(i, j):
                out[k] = True
        i = j
    return out
