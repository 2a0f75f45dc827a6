"""Do the hosts' clocks disagree, and by how much?

Question: which hosts log times that are ahead of or behind the others?

Domain facts relied on:
- A blocking collective returns at one instant on every rank, so the spread of its logged return
  times across hosts measures their clock offsets (timeline.step_offsets; Context.clock_offsets
  keeps offsets of named hosts above jitter: >= 5 ms and >= their own spread).
- Clocks of different hosts disagree by milliseconds to seconds (spec/log-formats.md §3); the
  diagnosis compares times on the common clock, and says so here, so a reader comparing raw
  timestamps across hosts is warned. This describes the logs, never a cause of the fault.

Must not: decide the root cause; read anything but the cached clock offsets.
"""
from __future__ import annotations

from ..report.model import Finding
from .context import Context
from .evidence import num, pass_id

SECOND_MS = 1000.0
# Hosts the title names. On a run of a thousand hosts a few dozen pass the jitter test by a few
# ms; the title names the farthest and counts the rest (the evidence keeps every one).
TITLE_HOSTS = 8


def find(ctx: Context) -> list[Finding]:
    off = ctx.clock_offsets.sort("offset_ms")
    if off.is_empty():
        return []
    far = off.sort(off.get_column("offset_ms").abs(), descending=True, maintain_order=True)
    named = far.head(TITLE_HOSTS).sort("offset_ms", maintain_order=True)
    parts = [f"{r['clock']} {r['offset_ms']:+.0f} ms" for r in named.iter_rows(named=True)]
    if rest := off.height - named.height:
        near = abs(float(far.get_column("offset_ms")[named.height]))
        parts.append(f"and {rest} more host{'s' if rest != 1 else ''} within ±{near:.0f} ms")
    worst = float(off.get_column("offset_ms").abs().max())
    return [Finding(
        rule=pass_id("clock_skew"), kind="clock_skew", layer="physical",
        severity="WARN" if worst >= SECOND_MS else "INFO", ranks=[],
        title=f"host clocks disagree: {', '.join(parts)} from the consensus (times compared here are aligned)",
        evidence={"offsets_ms": {r["clock"]: num(r["offset_ms"]) for r in off.iter_rows(named=True)},
                  "spread_ms": {r["clock"]: num(r["spread_ms"]) for r in off.iter_rows(named=True)},
                  "samples": {r["clock"]: int(r["samples"]) for r in off.iter_rows(named=True)}},
    )]
