"""What followed a failure: the launcher's kills and exits after it, the ranks whose
collectives failed later, and where torch elastic's "first observed failure" disagrees with
the first real one.
"""
from __future__ import annotations

from typing import Any

from ... import failure_facts as facts
from ...report.model import Finding
from ..evidence import cite, rank_ranges, ranks_phrase
from .rows import _ev_row, _key, _processes


def _cascade_tail(cascade: list[dict[str, Any]], after: dict[str, Any], by: str = "the launcher") -> tuple[str, list, list]:
    """"; the launcher then stopped the workers (3 kills, 1 failed exit): its cascade" for the
    kills and exits after a failure."""
    mine = [c for c in cascade if _key(c) >= _key(after)]
    kills = _processes([c for c in mine if c["kind"] == "kill"])
    ex = _processes([c for c in mine if c["kind"] == "exit"])
    if not kills and not ex:
        return "", kills, ex
    parts = [p for p in (f"{len(kills)} kill{'s' if len(kills) != 1 else ''}" if kills else "",
                         f"{len(ex)} failed exit{'s' if len(ex) != 1 else ''}" if ex else "") if p]
    return f"; {by} then stopped the workers ({', '.join(parts)}): its cascade, not another fault", kills, ex


def _later_phrase(r: dict[str, Any], first_to: dict[int, dict[str, Any]], rank: Any) -> tuple[list[int], str]:
    """The ranks whose collectives failed after this failure, and "; ranks … failed … 0.4 s later"."""
    later = sorted(k for k, t in first_to.items() if k != rank and _key(t) >= _key(r))
    if not later:
        return later, ""
    # a delay only between times the lines carried (placed times are bounds)
    exact = [first_to[k]["timestamp"] for k in later if first_to[k]["exact"]]
    return later, f"; {ranks_phrase(later)} failed in their collectives" + (
        f" {(min(exact) - r['timestamp']).total_seconds():.1f} s later" if exact and r["exact"] else " after it")


ROOT_KINDS = {"oom": 0, "gpu_error": 0, "crash": 0, "host_oom": 0, "collective_mismatch": 1, "hang": 1}


def _launcher_first_observed(out: list[Finding], rows: list[dict[str, Any]]) -> None:
    """Say where torch elastic's "Root Cause (first observed failure)" disagrees with the first
    real failure: it is the first exit the agent saw. Annotates the earliest failure finding."""
    reported = [r for r in rows if r["kind"] == "exit" and r["first_observed"] and r["rank"] is not None]
    failures = [f for f in out if f.kind in (*ROOT_KINDS, "nccl_timeout") and f.ranks]
    if not reported or not failures:
        return
    root = min(failures, key=lambda f: (f.first_seen is None, f.first_seen or "", ROOT_KINDS.get(f.kind, 2)))
    fo = reported[0]
    rank = int(fo["rank"])
    agrees = rank in root.ranks
    root.evidence["launcher_first_observed"] = {
        "rank": rank, "exit_code": fo["exit_code"], "signal": fo["signal"], "agrees": agrees,
        "where": f"{fo['source_file']}:{fo['line']}",
    }
    if not agrees:
        code = f" ({facts.code_phrase(fo['exit_code'], fo['signal'])})" if fo["exit_code"] is not None else ""
        what = {"oom": "CUDA OOM", "crash": "crash", "gpu_error": "GPU error", "host_oom": "kill"}.get(root.kind, "failure")
        root.title += (f"; torchrun's ChildFailedError names rank {rank}{code} as the \"first observed failure\": "
                       f"only the first exit the launcher saw, after rank "
                       f"{rank_ranges(root.ranks)}'s {what}")
        root.lines = root.lines + cite([_ev_row(fo, "ChildFailedError: first observed failure")], text="text")
