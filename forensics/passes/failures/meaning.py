"""What each candidate failure line MEANS, by the message families of forensics/failure_messages.py
(whatever its event name or wording): its meaning (oom, host_oom, non_finite, hang, crash, ...),
whether it is the writer's own failure or a victim's view of a peer's, and the rank its text names;
and the hang findings of ranks whose own watchdog says it is stuck.

Domain facts relied on (the families cite their upstream sources):
- A message meaning the writer's own failure (CUDA OOM in any wording — NCCL's "Cuda failure 'out
  of memory'" included; host memory: DefaultCPUAllocator, a DataLoader worker killed by SIGKILL or
  SIGBUS, MemoryError; a fatal signal; ncclSystemError) is that rank's own error, even on a plain
  console line (event LOG): never a victim's timeout, whatever other words ("NCCL error",
  "DistBackendError") it also carries.
- ProcessGroupNCCL's heartbeat monitor ("watchdog got stuck for N seconds", "Heartbeat monitor
  timed out!") fires on the rank whose watchdog thread is blocked (a NCCL/CUDA call or the GIL):
  that rank is hung. When only some ranks say so, they are the hang's culprits [own_error]; when
  every rank does, the message names nobody.
- A line that carries no rank but whose family names one in its text (Megatron's "Rank 11: ...",
  its rerun machine's "Rank 5, node ..") is that rank's [named_in_text].
"""
from __future__ import annotations

import re
from typing import Any

import polars as pl

from ... import failure_messages as fm
from ...report.model import Finding
from ..evidence import cite, iso, pass_id, ranks_phrase, shorten
from .rows import _ev_row, _key

_FAMILY_RE = [(f, re.sub(r"\(\?P<\w+>", "(?:", f.pattern)) for f in fm.FAMILIES]
_TEXT_RANK = [(f, f.pattern, re.compile(f.pattern).groupindex["rank"]) for f in fm.FAMILIES if f.rank == "text"]
_ANY = fm.pattern()


def with_meaning(df: pl.DataFrame) -> pl.DataFrame:
    """`meaning` (the family's kind), `meaning_role` (own / victim / job / benign), `meaning_family`
    and `text_rank` (the rank the text names) per row; null where no family matches. The families'
    regexes run only on rows the union of them matches."""
    msg = pl.col("message").fill_null("")
    fam = pl.lit(None, dtype=pl.String)
    for f, pat in reversed(_FAMILY_RE):          # the first family of the table wins
        fam = pl.when(msg.str.contains(pat)).then(pl.lit(f.id)).otherwise(fam)
    kind = {f.id: f.kind for f in fm.FAMILIES}
    role = {f.id: f.role for f in fm.FAMILIES}
    text_rank = pl.lit(None, dtype=pl.Int64)
    for f, pat, g in _TEXT_RANK:
        text_rank = pl.when(pl.col("meaning_family") == f.id).then(msg.str.extract(pat, g).cast(pl.Int64, strict=False)).otherwise(text_rank)
    hit = msg.str.contains(_ANY)
    return (df.with_columns(pl.when(hit).then(fam).alias("meaning_family"))
            .with_columns(pl.col("meaning_family").replace_strict(kind, default=None, return_dtype=pl.String).alias("meaning"),
                          pl.col("meaning_family").replace_strict(role, default=None, return_dtype=pl.String).alias("meaning_role"),
                          text_rank.alias("text_rank")))


def own(kinds: tuple[str, ...] | None = None) -> pl.Expr:
    """The row's message means its writer's own failure (of these kinds)."""
    e = pl.col("meaning_role") == "own"
    if kinds is not None:
        e = e & pl.col("meaning").is_in(list(kinds))
    return e.fill_null(False)


def stuck_findings(rows: list[dict[str, Any]], ranks: list[int], failed_before: set[int]) -> tuple[list[Finding], list[int]]:
    """Hang findings for the ranks whose own heartbeat monitor says their watchdog is stuck, when
    not every rank of the run says so; and those ranks (the culprits of the others' timeouts)."""
    stuck = [r for r in rows if r["kind"] == "stuck"]
    by_rank: dict[int, dict[str, Any]] = {}
    for r in sorted(stuck, key=_key):
        if r["rank"] is not None:
            by_rank.setdefault(int(r["rank"]), r)
    culprits = sorted(k for k in by_rank if k not in failed_before)
    if not culprits:
        return [], []
    if ranks and set(culprits) >= set(ranks) and len(culprits) > 1:
        return [_every_rank_stuck(by_rank, culprits)], []
    # (one rank that is all the log shows: its own watchdog is stuck, the log says no more)
    first = min((by_rank[k] for k in culprits), key=_key)
    others = sorted(set(ranks) - set(culprits))
    title = (f"hang on {ranks_phrase(culprits)}: its NCCL watchdog made no progress (the heartbeat monitor: "
             f"{shorten(first['message'], 150)})" + (f"; {ranks_phrase(others)} did not report one" if others else ""))
    return [Finding(
        rule=pass_id("failures"), kind="hang", layer="communication", severity="ERROR",
        ranks=culprits, victims=others, basis="own_error", title=title,
        evidence={"how": "heartbeat monitor", "message": shorten(first["message"], 300), "family": first.get("meaning_family"),
                  "victims": others},
        lines=cite([_ev_row(by_rank[k]) for k in culprits[:3]], text="text"),
        first_seen=iso(first["t_show"]), last_seen=iso(max((by_rank[k]["t_show"] for k in culprits if by_rank[k]["t_show"]),
                                                           default=first["t_show"])),
    )], culprits


def _every_rank_stuck(by_rank: dict[int, dict[str, Any]], stuck: list[int]) -> Finding:
    """Every rank's heartbeat monitor says its watchdog is stuck: a hang of the whole job that
    names no rank (each watchdog waits on work the others wait on too), not a crash of whichever
    rank printed first. Cites the first report and explains the others' (the whole job's)."""
    first = min(by_rank.values(), key=_key)
    title = (f"hang: every rank's NCCL watchdog made no progress ({ranks_phrase(stuck)} — the heartbeat monitor: "
             f"{shorten(first['message'], 150)}); no one rank is named by it: the ranks' last collectives "
             "(TORCH_NCCL_TRACE_BUFFER_SIZE / Flight Recorder dumps) or stack traces say which one held the others up")
    ordered = sorted(by_rank.values(), key=_key)
    return Finding(
        rule=pass_id("failures"), kind="hang", layer="communication", severity="ERROR",
        ranks=[], victims=[], basis=None, title=title,
        evidence={"how": "heartbeat monitor on every rank", "message": shorten(first["message"], 300),
                  "family": first.get("meaning_family"), "stuck_ranks": stuck},
        lines=cite([_ev_row(r) for r in ordered[:3]], text="text"),
        first_seen=iso(first["t_show"]),
        last_seen=iso(max((r["t_show"] for r in ordered if r["t_show"]), default=first["t_show"])),
    )
