"""Small helpers every pass uses to cite its evidence and to write numbers into titles.

Owns: turning rows (source_file, line, rank, timestamp, text) into `Evidence`, ISO times, rank
ranges ("0–5,7"), rounding for evidence dicts. Must not query events or judge anything.
"""
from __future__ import annotations

import datetime as dt
import math
from typing import Any, Iterable

from ..report.model import Evidence

# Pass ids are namespaced so that they never collide with rule ids (rule file stems).
def pass_id(name: str) -> str:
    return f"pass.{name}"


def iso(t: dt.datetime | None) -> str | None:
    return None if t is None else t.isoformat()


def parse_iso(s: str | None) -> dt.datetime | None:
    if not s:
        return None
    try:
        t = dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)


def rank_ranges(ranks: Iterable[int]) -> str:
    """[0,1,2,3,4,5,7] -> '0–5,7'."""
    rs = sorted(set(int(r) for r in ranks))
    if not rs:
        return "-"
    out: list[str] = []
    start = prev = rs[0]
    for r in rs[1:] + [None]:  # type: ignore[list-item]
        if r is not None and r == prev + 1:
            prev = r
            continue
        out.append(str(start) if start == prev else (f"{start},{prev}" if prev == start + 1 else f"{start}–{prev}"))
        if r is not None:
            start = prev = r
    return ",".join(out)


def ranks_phrase(ranks: Iterable[int]) -> str:
    rs = sorted(set(ranks))
    if not rs:
        return "all ranks"
    return f"rank {rs[0]}" if len(rs) == 1 else f"ranks {rank_ranges(rs)}"


def num(x: Any, digits: int = 3) -> Any:
    """A JSON-friendly rounded number (None for null/NaN)."""
    if x is None:
        return None
    if isinstance(x, bool):
        return x
    if isinstance(x, int):
        return x
    try:
        f = float(x)
    except (TypeError, ValueError):
        return x
    if math.isnan(f):
        return None
    if math.isinf(f):
        return "inf" if f > 0 else "-inf"
    if f == 0:
        return 0.0
    mag = int(math.floor(math.log10(abs(f))))
    return round(f, max(digits - 1 - mag, 0))


def ms(x: float | None) -> str:
    """Human duration from milliseconds: 180 ms, 2.3 s."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "?"
    return f"{x / 1000:.1f} s" if abs(x) >= 1000 else f"{x:.0f} ms" if abs(x) >= 10 else f"{x:.1f} ms"


def shorten(s: str | None, n: int = 160) -> str | None:
    if s is None:
        return None
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[: n - 1] + "…"


def cite(rows: Iterable[dict[str, Any]], *, file: str = "source_file", line: str = "line",
         rank: str = "rank", ts: str = "timestamp", text: str | None = None, limit: int = 5) -> list[Evidence]:
    """Evidence from rows (dicts); rows without a file or line are skipped, duplicates dropped."""
    out: list[Evidence] = []
    seen: set[tuple[str, int]] = set()
    for r in rows:
        f, ln = r.get(file), r.get(line)
        if f is None or ln is None:
            continue
        key = (str(f), int(ln))
        if key in seen:
            continue
        seen.add(key)
        t = r.get(ts)
        out.append(Evidence(
            source_file=str(f), line=int(ln),
            rank=None if r.get(rank) is None else int(r[rank]),
            timestamp=iso(t) if isinstance(t, dt.datetime) else t,
            text=shorten(r.get(text)) if text else None,
        ))
        if len(out) >= limit:
            break
    return out


def own_times(findings: list[Any], ctx: Any) -> None:
    """Every cited line's time becomes the line's OWN time, as logged; when its host's clock was
    moved to the common clock (ctx.clock_offsets), that time goes beside it in
    `aligned_timestamp`. Passes measure on the common clock (a step's end, a collective's), so
    the time they hand in is the aligned one, a few ms to tens of ms off the line's own: a
    reader who opens the file must find the time the citation prints. One lookup of the cited
    lines for the whole report. A line that holds several events (two ranks on one line) gives
    the cited rank's time; a line without a time of its own is cited without one (a time the
    pass placed it at is not in the file, and the finding's first_seen says when it counts)."""
    import polars as pl

    cited = [e for f in findings for e in f.lines]
    if not cited:
        return
    files = sorted({e.source_file for e in cited})
    lines = sorted({e.line for e in cited})
    ev = (ctx.events.select("source_file", "line", "rank", "host", "timestamp")
          .filter(pl.col("line").is_in(lines))
          .with_columns(pl.col("source_file").cast(pl.String))
          .filter(pl.col("source_file").is_in(files)))
    rows = ctx.aligned(ev).select("source_file", "line", "rank", "timestamp", "ts_aligned").collect()
    at: dict[tuple[str, int], list[tuple[Any, Any, Any]]] = {}
    for f_, ln, r, t, ta in rows.iter_rows():
        at.setdefault((f_, ln), []).append((r, t, ta))
    for e in cited:
        got = at.get((e.source_file, e.line))
        if not got:
            continue
        mine = [g for g in got if g[0] == e.rank and g[1] is not None] or [g for g in got if g[1] is not None]
        if not mine:   # the line has no time of its own: a time the pass placed it at is not in the file
            e.timestamp = e.aligned_timestamp = None
            continue
        _, t, ta = mine[0]
        e.timestamp = iso(t)
        e.aligned_timestamp = iso(ta) if ta is not None and ta != t else None
