"""Majority versus the odd one out: which members' signature differs from the one most members
share (a collective's op and size per rank; a Flight Recorder entry's op, shape or dtype per rank).

Owns the rule, the one place that decides it: the reference is the most common signature; on a tie,
that of the first member in the order given (callers order members by rank: the analyser judges
every rank against its first rank). Must not know what a signature means, read files or build
findings; imports nothing of forensics.
"""
from __future__ import annotations

from collections import Counter
from typing import Hashable, Sequence


def minority(sigs: Sequence[Hashable]) -> tuple[list[int], int | None, int]:
    """(indices whose signature differs from the reference, index of the first member holding the
    reference, how many members hold it). No members: ([], None, 0); all agree: ([], 0, len)."""
    if not sigs:
        return [], None, 0
    counts = Counter(sigs)
    top = max(counts.values())
    ref = next(i for i, s in enumerate(sigs) if counts[s] == top)
    return [i for i, s in enumerate(sigs) if s != sigs[ref]], ref, top
