"""Is there anything to diagnose? Input that holds no usable event is a finding, never "healthy".

Question: did the input give the diagnosis any event at all — or were the files empty, every
line rejected (binary garbage, a truncated stream) or unreadable? And of the events it gave, does
any carry something a diagnosis reads: a time, a step, a metric, or a WARN/ERROR level? Text that
the console reader keeps line by line (random text, a binary file's few decodable lines) gives
events with none of these: "nothing wrong found" in them would be the same unfounded green.

Domain fact: a job that died before writing anything (a node that never booted, a crash in the
launcher, logs that were never collected) leaves empty or garbage files; a report that finds
"nothing wrong" in them would turn a CI job green over a run nobody can vouch for. So no event
is an ERROR (`no_data`), the root cause, and it fails CI by default (config.ALWAYS_FAILS).

Layer: `training`, the layer of the other finding about the logs themselves (log_hygiene): no
signal of any layer was read, and the first question it raises is about the job (did it start,
where did its output go), not the hardware.
Must not: judge events (there are none) or read the raw files again (the store's per-file
accounting — lines read, events, rejects by reason — says what was in them).
"""
from __future__ import annotations

from typing import Any

import polars as pl

from ..report.model import Evidence, Finding
from ..schema import METRIC_NAMES
from .context import Context
from .evidence import pass_id, shorten

CITED_FILES = 5
LISTED_FILES = 100


def _event_count(ctx: Context) -> int:
    if ctx.run is not None and ctx.run.totals.get("events") is not None:
        return int(ctx.run.totals["events"])
    return int(ctx.events.select(pl.len()).collect().item())


def _files(ctx: Context) -> list[dict[str, Any]]:
    """Per source file: path, lines read, rejects and their reasons, the first rejected line."""
    if ctx.run is None:
        return []
    cols = ctx.run.source_columns("path", "lines_read", "events", "rejected", "rejected_by_reason")
    first = (ctx.run.rejects().group_by("source_file").agg(pl.col("line").min(), pl.col("reason").first())
             .collect())
    first_line = {f: (ln, r) for f, ln, r in first.iter_rows()}
    out = []
    for path, lines, events, rejected, reasons in zip(*(cols[c] for c in cols)):
        ln, why = first_line.get(path, (None, None))
        out.append({"path": path, "lines_read": int(lines or 0), "events": int(events or 0),
                    "rejected": int(rejected or 0), "reasons": reasons or {}, "first_reject": ln, "reason": why})
    return out


def _readable(ctx: Context) -> bool:
    """Does any event carry a time, a step, a known metric or a level above INFO? The step table
    answers for almost every run (a step row is one); the events are scanned only without it."""
    if not ctx.steps.is_empty():
        return True
    names = ctx.events.collect_schema().names()
    signs = [pl.col(c).is_not_null() for c in ("timestamp", "step", *METRIC_NAMES) if c in names]
    if "level" in names:
        signs.append(pl.col("level").cast(pl.String).is_in(["WARN", "ERROR"]))
    if not signs:
        return False
    return ctx.events.filter(pl.any_horizontal(signs)).head(1).collect().height > 0


def find(ctx: Context) -> list[Finding]:
    events = _event_count(ctx)
    if events > 0 and _readable(ctx):
        return []
    files = _files(ctx)
    lines = sum(f["lines_read"] for f in files)
    rejected = sum(f["rejected"] for f in files)
    reasons: dict[str, int] = {}
    for f in files:
        for k, v in (f["reasons"] or {}).items():
            reasons[k] = reasons.get(k, 0) + int(v)
    empty = sum(1 for f in files if f["lines_read"] == 0)
    why = ", ".join(f"{k}: {v:,}" for k, v in sorted(reasons.items(), key=lambda kv: -kv[1])[:3])
    title = (f"no usable event in the input: {len(files):,} file{'s' if len(files) != 1 else ''}"
             + (f" ({empty:,} empty)" if empty else "")
             + f", {lines:,} line{'s' if lines != 1 else ''} read, {rejected:,} rejected"
             + (f" ({why})" if why else "")
             + (f", {events:,} events of text with no time, step, metric or WARN/ERROR level" if events else ", 0 events")
             + ": nothing to diagnose, the run cannot be called healthy")
    return [Finding(
        rule=pass_id("no_data"), kind="no_data", layer="training", severity="ERROR", ranks=[], title=title,
        evidence={"files": len(files), "empty_files": empty, "lines_read": lines, "rejected": rejected,
                  "rejected_by_reason": reasons, "events": events,
                  "per_file": [{k: f[k] for k in ("path", "lines_read", "rejected", "reason")} for f in files[:LISTED_FILES]]},
        # a file's first rejected line, or the file itself (line 0) when it has none
        lines=[Evidence(source_file=f["path"], line=int(f["first_reject"] or 0),
                        text=shorten(f"{f['lines_read']:,} lines, {f['rejected']:,} rejected"
                                     + (f" ({f['reason']})" if f["reason"] else ""), 120))
               for f in files[:CITED_FILES]],
    )]


def empty_input(folders: list[str]) -> list[Finding]:
    """The no_data finding of input that holds no file at all (empty folders, a glob that matched
    only folders): nothing was read, so no store exists; the folders are cited (line 0)."""
    title = (f"no usable event in the input: no log file in {', '.join(folders[:3])}"
             + (f" and {len(folders) - 3} more" if len(folders) > 3 else "")
             + ": nothing to diagnose, the run cannot be called healthy")
    return [Finding(
        rule=pass_id("no_data"), kind="no_data", layer="training", severity="ERROR", ranks=[], title=title,
        evidence={"files": 0, "empty_files": 0, "lines_read": 0, "rejected": 0, "rejected_by_reason": {}, "events": 0,
                  "folders": folders[:LISTED_FILES]},
        lines=[Evidence(source_file=f, line=0, text="no log file") for f in folders[:CITED_FILES]],
    )]


__all__ = ["find", "empty_input"]
