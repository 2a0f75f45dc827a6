"""Did more than one rank fail on its own? The ranks whose own errors came before any sign of
the first failure's cascade: independent failures, each a culprit.

Domain facts relied on:
- A rank learns of a peer's death only through what the death does to it: its collective times
  out or its connection to the dead peer breaks (a victim message: a family of role `victim` in
  forensics/failure_messages.py, or the timeout wording classify.py reads), or the launcher /
  scheduler stops it (a kill, a teardown signal, the job's cancellation). Until one of these
  happens anywhere, every rank runs its own code: an exception of its own (a traceback that is
  no victim message and no teardown), an OOM or a device error it raises then is its own failure,
  not the first rank's cascade.
- So: the ranks whose own error precedes every victim message, launcher kill, teardown exit and
  cancellation of the run failed independently; the root cause names all of them. A rank whose
  error comes after any of these may have died because of the first: it is not named.
- "Precedes" is a fact only where the order is known: both lines carry a time on the common
  clock, or one line's latest possible time (an untimed console line is bounded by the
  timestamped lines around it, classify._placed) is before the other's earliest, or both are in
  one file (file order). Where the order cannot be known, the rank is not named.
"""
from __future__ import annotations

from typing import Any

from ... import failure_facts as facts
from ...report.model import Finding
from ..evidence import cite, shorten
from .rows import _ev_row, death_key

# rows that show the first failure's cascade has begun somewhere in the run
_VICTIM_KINDS = ("timeout", "status")


def _cascade_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Victims' messages, kills from outside the process (not the kernel's OOM killer: a death
    of its own), the scheduler's cancel and exits by a teardown signal."""
    out = []
    for r in rows:
        if r["kind"] in _VICTIM_KINDS or r["kind"] == "cancel":
            out.append(r)
        elif r["kind"] == "kill" and r["by"] != "oom_killer":
            out.append(r)
        elif r["kind"] == "exit" and facts.signal_of(r["exit_code"], r["signal"]) in facts.TEARDOWN_SIGNALS:
            out.append(r)
    return out


def precedes(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """`a` was surely written before `b`: file order in one file, else a's latest possible time
    before b's earliest."""
    if a["source_file"] is not None and a["source_file"] == b["source_file"]:
        return (a["line"] or 0) < (b["line"] or 0)
    late, early = a.get("t_latest"), b.get("t_earliest")
    return late is not None and early is not None and late < early


def independent(deaths: list[tuple[dict[str, Any], Any, str]], rows: list[dict[str, Any]]) -> list[tuple[dict[str, Any], int, str]]:
    """Of the ranks' own deaths ((row, rank, what)), those after the first that precede every
    row of the cascade: failures of their own, not the first one's consequence. Empty when only
    one rank failed so."""
    ranked = sorted(((r, k, m) for r, k, m in deaths if isinstance(k, int)), key=lambda d: death_key(d[0]))
    if len(ranked) < 2:
        return []
    cascade = _cascade_rows(rows)
    return [(r, k, m) for r, k, m in ranked[1:]
            if k != ranked[0][1] and all(precedes(r, c) for c in cascade)]


_WHAT = {"oom": "ran out of GPU memory", "crash": "crashed", "gpu": "hit a GPU error", "host_oom": "ran out of host memory"}


def name_all(f: Finding, others: list[tuple[dict[str, Any], int, str]]) -> None:
    """The first failure's finding names the ranks that failed independently too, each with its
    own error and citation (their own findings stay: this one explains them)."""
    ranks = sorted({*f.ranks, *(k for _r, k, _m in others)})
    parts = []
    for r, k, m in others:
        what = "host_oom" if m == "crash" and r.get("meaning") == "host_oom" and r.get("meaning_role") == "own" else m
        parts.append(f"rank {k} {_WHAT.get(what, 'failed')} of its own error too ({shorten(r['message'], 100)})")
    f.ranks = ranks
    f.victims = [v for v in f.victims if v not in ranks]
    f.evidence["victims"] = f.victims
    f.title += ("; before any sign of its cascade (no peer's victim message, kill or cancel yet) "
                + "; ".join(parts) + ": independent failures")
    f.evidence["independent"] = [{"rank": k, "what": m, "message": shorten(r["message"], 200),
                                  "where": f"{r['source_file']}:{r['line']}", "basis": r.get("rank_basis") or "own_error"}
                                 for r, k, m in others]
    f.lines = f.lines + cite([_ev_row(r) for r, _k, _m in others], text="text")
