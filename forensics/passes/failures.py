"""Why did the job stop: which rank failed first, and which failures are only its cascade?

Question: for CUDA OOM, NCCL/gloo timeouts, lost connections and hangs — which rank is at fault?

Domain facts relied on:
- Every rank blocked in a collective that one rank never joins times out; so the earliest
  timeout does not name the cause, and the timing-out ranks are victims, not culprits.
- The culprit of a timeout is, in order of strength: a rank the desync report names ("the
  lagging/dead/mismatched ranks that caused the desync are: [7]", or the rank every
  CollectiveFingerPrint mismatch error names: a different op or size at the same sequence
  number — the others all run the same one); a rank whose CUDA OOM came
  before the first timeout (an OOM on one rank followed by the others' timeouts or connection
  errors is that rank's OOM — its death closes the connections); the rank the timeout messages
  say they wait on ("rank=1 waiting on rank=2"); the rank that never joined the collective the
  others time out in (its last logged collective sequence number is below the failing SeqNum);
  the rank whose "last completed work" is smallest (the laggard); the rank that went silent
  first without an error of its own.
- A culprit silent without an error of its own is a hang (`hang`); with its own OOM it is `oom`.
- An earlier root is never replaced by the later failures it caused: rootcause.py orders
  failures by time, and this pass attributes the cascade to the first failure.

Failure times are compared on the common clock (Context.clock_offsets): hosts' clocks disagree
by milliseconds to seconds, enough to put a victim's timeout before the OOM that caused it.

Must not: decide the root cause across layers (rootcause.py).
"""
from __future__ import annotations

import re
from collections import Counter
from typing import Any

import polars as pl

from ..report.model import Finding
from .context import Context
from .evidence import cite, iso, pass_id, rank_ranges, ranks_phrase, shorten

OOM_RE = r"(?i)CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|\bCUDA_OOM\b"
TIMEOUT_RE = (r"(?i)watchdog caught collective operation timeout|collective operation timeout|timed out|"
              r"Timeout\(ms\)|waiting on rank|connection (?:reset|closed) by peer|communicator was aborted|"
              r"DistBackendError|NCCL error|remote process exited|socket timeout|NCCL_TIMEOUT")
DESYNC_RE = (r"(?i)lagging/dead/mismatched|joined but didn't finish collective|but didn't join collective|have not joined|"
             r"Detected mismatch between collectives")
COMPLETED_RE = r"(?i)last completed work:\s*(\d+)"
MISMATCH_RE = r"(?i)Detected mismatch between collectives"

_SEQ = re.compile(r"(?i)(?:SeqNum=|seq(?:uence)?(?: id)?[=: ]\s*#?|collective #)(\d+)")
_PEER = re.compile(r"(?i)waiting (?:on|for) rank[= ]?(\d+)")
_DESYNC_LIST = re.compile(r"\[(\d+(?:\s*,\s*\d+)*)\]\s*(?:joined but didn't finish|finished collective #\d+, but didn't join|have not joined|didn't join)")
_DESYNC_AFTER = re.compile(r"(?is)lagging/dead/mismatched ranks[^:]*:(.*)")
_MISMATCH = re.compile(r"(?is)Rank (\d+) is running collective:.*?but Rank (\d+) is running collective")
_TRIED = re.compile(r"(?i)Tried to allocate ([\d.]+ ?[KMGT]i?B)")
_IN_USE = re.compile(r"(?i)this process has ([\d.]+ ?[KMGT]i?B) memory in use")


def _candidates(ctx: Context) -> pl.LazyFrame:
    """Rows that may be failures: WARN/ERROR lines, or events whose name says so.

    Cheap first: the message regexes of `_classify` then run on these rows only, not on every
    INFO line of a GB-scale store (a lazy filter would be merged into one scan predicate).
    The few distinct event names are matched here rather than a regex over every row.
    """
    names = ctx.events.select(pl.col("event").drop_nulls().unique()).collect().to_series().to_list()
    named = [n for n in names if re.search(r"(?i)OOM|TIMEOUT|NCCL|WATCHDOG|DESYNC", n)]
    return ctx.aligned(
        ctx.events.select("rank", "host", "timestamp", "level", "event", "message", "seq", "peer_rank", "step",
                          "source_file", "line")
        .filter(pl.col("level").is_in(["WARN", "ERROR"]) | pl.col("event").is_in(named))
    )


def _classify(df: pl.DataFrame) -> pl.DataFrame:
    """oom / timeout / desync / info per candidate row; `completed` = "last completed work: N"."""
    msg = pl.col("message").fill_null("")
    ev = pl.col("event").fill_null("")
    err = pl.col("level") == "ERROR"
    is_oom = ev.str.contains("(?i)OOM") | msg.str.contains(OOM_RE)
    is_desync = msg.str.contains(DESYNC_RE)
    # a collective that fails (timeout, lost peer, or a mismatch caught by DETAIL debug checks)
    is_timeout = ~is_oom & (ev.str.contains("(?i)TIMEOUT") | (err & (msg.str.contains(TIMEOUT_RE)
                                                                     | msg.str.contains(MISMATCH_RE))))
    has_completed = msg.str.contains(COMPLETED_RE)
    return (
        df.filter(is_oom | is_desync | is_timeout | has_completed)
        .with_columns(
            pl.when(is_oom).then(pl.lit("oom")).when(is_timeout).then(pl.lit("timeout"))
            .when(is_desync).then(pl.lit("desync")).otherwise(pl.lit("info")).alias("kind"),
            is_desync.alias("desync"),
            msg.str.extract(COMPLETED_RE, 1).cast(pl.Int64, strict=False).alias("completed"),
        )
        .sort("ts_aligned", "rank", nulls_last=True)
    )


def _progress(ctx: Context) -> pl.LazyFrame:
    """Per rank: last training-progress event (a step-carrying, non-ERROR line) and its seq."""
    last = pl.col("ts_aligned").arg_max()
    return (
        ctx.aligned(
            ctx.events.select("rank", "host", "timestamp", "level", "step", "seq", "source_file", "line")
            .filter(pl.col("rank").is_not_null() & pl.col("step").is_not_null() & (pl.col("level") != "ERROR"))
        )
        .group_by("rank")
        .agg(
            pl.col("ts_aligned").max().alias("last_ts"),
            pl.col("step").max().alias("last_step"),
            pl.col("seq").max().alias("max_seq"),
            pl.col("source_file").get(last).alias("file"),
            pl.col("line").get(last),
        )
        .sort("rank")
    )


def _seq_of(row: dict[str, Any]) -> int | None:
    if row.get("seq") is not None:
        return int(row["seq"])
    m = _SEQ.search(row.get("message") or "")
    return int(m.group(1)) if m else None


def _peer_of(row: dict[str, Any]) -> int | None:
    if row.get("peer_rank") is not None:
        return int(row["peer_rank"])
    m = _PEER.search(row.get("message") or "")
    return int(m.group(1)) if m else None


def _desync_ranks(rows: list[dict[str, Any]]) -> list[int]:
    """Ranks a desync report names; or, from CollectiveFingerPrint mismatch errors ("Rank 1 is
    running collective: …, but Rank 3 is running collective: …"), the rank in every pair: each
    rank compares itself with the others, so the odd one out is named by all of them."""
    out: set[int] = set()
    pairs: Counter[int] = Counter()
    n_pairs = 0
    for r in rows:
        text = r.get("message") or ""
        m = _DESYNC_AFTER.search(text)
        scope = m.group(1) if m else text
        for lst in _DESYNC_LIST.findall(scope):
            out.update(int(x) for x in lst.split(","))
        for a, b in _MISMATCH.findall(text):
            pairs.update({int(a), int(b)})
            n_pairs += 1
    if not out and n_pairs:
        top = max(pairs.values())
        if top == n_pairs and (n_pairs > 1 or len(pairs) == 1):
            out = {k for k, c in pairs.items() if c == top}
    return sorted(out)


def _oom_detail(msg: str | None) -> str:
    msg = msg or ""
    bits = []
    if m := _TRIED.search(msg):
        bits.append(f"tried to allocate {m.group(1)}")
    if m := _IN_USE.search(msg):
        bits.append(f"{m.group(1)} in use")
    return f" ({', '.join(bits)})" if bits else ""


def _ev_row(r: dict[str, Any], text: str | None = None) -> dict[str, Any]:
    return {"source_file": r["source_file"], "line": r["line"], "rank": r["rank"],
            "timestamp": r.get("logged_ts", r["timestamp"]), "text": text or shorten(r.get("message") or r.get("event"), 140)}


def find(ctx: Context) -> list[Finding]:
    cand, prog = pl.collect_all([_candidates(ctx), _progress(ctx)])
    # order and compare on the common clock; citations keep the logged time
    fails_df = _classify(cand).with_columns(pl.col("timestamp").alias("logged_ts"), pl.col("ts_aligned").alias("timestamp"))
    if fails_df.is_empty():
        return []
    rows = list(fails_df.iter_rows(named=True))
    ooms = [r for r in rows if r["kind"] == "oom"]
    tos = [r for r in rows if r["kind"] == "timeout"]
    desync = [r for r in rows if r["desync"]]      # a timeout's message may carry the desync report
    completed = {int(r["rank"]): int(r["completed"]) for r in rows
                 if r["completed"] is not None and r["rank"] is not None}
    progress = {int(p["rank"]): p for p in prog.iter_rows(named=True)}

    # First OOM per rank; an OOM line without a rank only counts when no ranked one exists.
    first_oom: dict[int | None, dict[str, Any]] = {}
    for r in ooms:
        first_oom.setdefault(None if r["rank"] is None else int(r["rank"]), r)
    if any(k is not None for k in first_oom):
        first_oom.pop(None, None)
    first_to: dict[int, dict[str, Any]] = {}
    for r in tos:
        if r["rank"] is not None:
            first_to.setdefault(int(r["rank"]), r)

    out: list[Finding] = []
    t_first_to = min((r["timestamp"] for r in first_to.values() if r["timestamp"] is not None), default=None)
    failed_ranks = set(first_to) | {k for k in first_oom if k is not None}

    # -- culprit of the timeouts -------------------------------------------------------------
    culprits: list[int] = []
    how = ""
    if first_to:
        early_oom = sorted(k for k, r in first_oom.items() if k is not None and r["timestamp"] is not None
                           and (t_first_to is None or r["timestamp"] <= t_first_to))
        named = _desync_ranks(desync)
        peers = Counter(p for r in first_to.values() if (p := _peer_of(r)) is not None and p != r["rank"])
        seqs = Counter(s for r in first_to.values() if (s := _seq_of(r)) is not None)
        if early_oom:
            first = min(early_oom, key=lambda k: first_oom[k]["timestamp"])
            culprits, how = [first], "oom"
        elif named:
            culprits, how = named, "desync report"
        elif peers and peers.most_common(1)[0][1] * 2 >= len(first_to):
            culprits, how = [peers.most_common(1)[0][0]], "named as the peer the others wait on"
        if not culprits and seqs:
            fail_seq = seqs.most_common(1)[0][0]
            never = [r for r, p in progress.items() if r not in first_to and p["max_seq"] is not None
                     and p["max_seq"] < fail_seq]
            if never:
                culprits, how = sorted(never), f"never joined collective #{fail_seq}"
        if not culprits and len(set(completed.values())) > 1:
            low = min(completed.values())
            culprits, how = sorted(r for r, c in completed.items() if c == low), f"last completed work {low} is the smallest"
        if not culprits:
            silent = [r for r in progress if r not in failed_ranks]
            if silent and t_first_to is not None:
                t_min = min(progress[r]["last_ts"] for r in silent)
                culprits = sorted(r for r in silent if progress[r]["last_ts"] == t_min)
                how = "went silent first, without an error of its own"

    # -- OOM findings ---------------------------------------------------------------------------
    for rank, r in sorted(first_oom.items(), key=lambda kv: kv[1]["timestamp"] or 0):
        later = sorted(k for k, t in first_to.items() if k != rank and r["timestamp"] is not None
                       and t["timestamp"] is not None and t["timestamp"] >= r["timestamp"])
        delay = ""
        if later:
            dt_s = (min(first_to[k]["timestamp"] for k in later) - r["timestamp"]).total_seconds()
            delay = f"; ranks {rank_ranges(later)} failed in their collectives {dt_s:.1f} s later"
        where = f"rank {rank}" if rank is not None else "a rank the log does not name"
        step = f" at step {r['step']}" if r["step"] is not None else ""
        out.append(Finding(
            rule=pass_id("failures"), kind="oom", layer="resource", severity="ERROR",
            ranks=[] if rank is None else [rank], victims=later,
            title=f"{where} ran out of GPU memory (CUDA OOM){step}{_oom_detail(r['message'])}{delay}",
            evidence={"step": r["step"], "message": shorten(r["message"], 300), "victims": later},
            lines=cite([_ev_row(r)] + [_ev_row(first_to[k]) for k in later[:2]], text="text"),
            first_seen=iso(r["timestamp"]), last_seen=iso(r["timestamp"]),
        ))

    if not first_to:
        return out

    # -- hang: a culprit that stopped without an error of its own --------------------------------
    victims = sorted(k for k in first_to if k not in culprits)
    to_sorted = sorted(first_to.values(), key=lambda r: (r["timestamp"] is None, r["timestamp"]))
    seq = next((s for r in to_sorted if (s := _seq_of(r)) is not None), None)
    coll = next((r["message"] for r in to_sorted if r["message"]), None)
    t_last_to = max((r["timestamp"] for r in first_to.values() if r["timestamp"] is not None), default=None)
    silent_culprits = [c for c in culprits if c not in failed_ranks]
    if how != "oom" and silent_culprits:
        lines = [_ev_row({**progress[c], "timestamp": progress[c]["last_ts"], "source_file": progress[c]["file"]},
                         f"last line of rank {c} (step {progress[c]['last_step']})")
                 for c in silent_culprits if c in progress]
        t_silent = min((progress[c]["last_ts"] for c in silent_culprits if c in progress), default=None)
        gap = f" {(t_first_to - t_silent).total_seconds():.0f} s later" if t_silent and t_first_to else ""
        last_steps = ", ".join(f"{progress[c]['last_step']}" for c in silent_culprits if c in progress)
        out.append(Finding(
            rule=pass_id("failures"), kind="hang", layer="communication", severity="ERROR",
            ranks=silent_culprits, victims=victims,
            title=(f"{ranks_phrase(silent_culprits)} went silent after step {last_steps or '?'} and "
                   + (f"never joined collective #{seq}" if seq is not None else "stopped taking part in collectives")
                   + ("" if how.startswith("never joined") else f" ({how})")
                   + f"; {ranks_phrase(victims)} timed out waiting{gap}"),
            evidence={"how": how, "failing_seq": seq, "victims": victims,
                      "last_step": {str(c): progress[c]["last_step"] for c in silent_culprits if c in progress}},
            lines=cite(lines + [_ev_row(r) for r in to_sorted[:2]] + [_ev_row(r) for r in desync[:1]], text="text"),
            first_seen=iso(t_silent), last_seen=iso(t_last_to),
        ))

    # -- the timeouts themselves (attributed to the culprit, never to the ranks that time out) ---
    if how == "oom":
        c = culprits[0]
        dt_s = (t_first_to - first_oom[c]["timestamp"]).total_seconds() if t_first_to else None
        title = (f"{ranks_phrase(victims)}: NCCL timeout / lost connection in their collective"
                 + (f" #{seq}" if seq is not None else "")
                 + (f" {dt_s:.1f} s after rank {c}'s CUDA OOM" if dt_s is not None else f" after rank {c}'s CUDA OOM"))
    elif culprits:
        title = (f"{ranks_phrase(victims)}: NCCL timeout in collective" + (f" #{seq}" if seq is not None else "")
                 + f" waiting for {ranks_phrase(culprits)} ({how})")
    else:
        title = (f"{ranks_phrase(victims)}: NCCL timeout in collective" + (f" #{seq}" if seq is not None else "")
                 + " — the logs do not show which rank they waited for")
    out.append(Finding(
        rule=pass_id("failures"), kind="nccl_timeout", layer="communication", severity="ERROR",
        ranks=culprits, victims=victims, title=title,
        evidence={"how": how or None, "failing_seq": seq, "timeouts": len(tos), "victims": victims,
                  "first_timeout_rank": to_sorted[0]["rank"], "message": shorten(coll, 300)},
        lines=cite([_ev_row(r) for r in to_sorted[:3]] + [_ev_row(r) for r in desync[:1]], text="text"),
        first_seen=iso(t_first_to), last_seen=iso(t_last_to),
    ))
    return out
