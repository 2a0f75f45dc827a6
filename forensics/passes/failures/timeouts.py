"""The findings of collectives that failed: a hang, a collective mismatch, and the timeouts
themselves (attributed to the culprit, never to the ranks that time out); a hang among
processes known only by host and local rank.
"""
from __future__ import annotations

import re
from typing import Any

import polars as pl

from ... import failure_messages as messages
from ...report.model import Finding, local_ranks_phrase
from ..context import Context
from ..evidence import cite, iso, pass_id, ranks_phrase, shorten
from .culprit import MISMATCH_MODES, MODE_BASIS, _seq_of
from .progress import SILENT_MARGIN_S
from .rows import _ev_row, _key, _owner


def _local_hang(ctx: Context, rows: list[dict[str, Any]]) -> list[Finding]:
    """A hang where no line names a global rank (torchrun --tee `[default1]:` on several nodes,
    no topology printed): processes are known only as (host, local rank). The culprit is the
    process that logged progress but no timeout of its own while the others timed out (it never
    joined the collective they wait in) [never_joined], else the one whose progress stopped first
    [last_to_log]. The finding names "local rank N on host X", never a guessed global rank."""
    local_to: dict[Any, dict[str, Any]] = {}
    for r in rows:
        if r["kind"] == "timeout" and r["rank"] is None and r["local_rank"] is not None:
            who = _owner(r)
            if who not in local_to or _key(r) < _key(local_to[who]):
                local_to[who] = r
    if not local_to:
        return []
    last = pl.col("ts_aligned").arg_max()
    prog = (
        ctx.aligned(ctx.events.select("rank", "host", "local_rank", "timestamp", "level", "step", "source_file", "line")
                    .filter(pl.col("rank").is_null() & pl.col("local_rank").is_not_null() & pl.col("step").is_not_null()
                            & (pl.col("level") != "ERROR")))
        .group_by("host", "local_rank")
        .agg(pl.col("ts_aligned").max().alias("last_ts"), pl.col("step").max().alias("last_step"),
             pl.col("source_file").get(last).alias("file"), pl.col("line").get(last))
        .collect()
    )
    progress = {("local", p["host"], int(p["local_rank"])): p for p in prog.iter_rows(named=True)}
    quiet = sorted((k for k in progress if k not in local_to), key=str)
    weak = False
    if quiet and len(quiet) < len(local_to):
        culprits, basis = quiet, "never_joined"
        how = "logged progress but no timeout of its own while the others timed out: never joined the collective they wait in"
        weak = len(quiet) > 1
    else:
        timed = [(p["last_ts"], k) for k, p in progress.items() if p["last_ts"] is not None]
        if len(timed) < 2:
            return []
        timed.sort(key=lambda x: x[0])
        t_min = timed[0][0]
        culprits = sorted((k for t, k in timed if t == t_min), key=str)
        if len(culprits) == len(timed):
            return []
        nxt = min(t for t, _ in timed if t != t_min)
        basis, how = "last_to_log", "its progress stopped first"
        weak = (nxt - t_min).total_seconds() < max(SILENT_MARGIN_S, (ctx.median_step_ms or 0.0) / 2000)
    loc = [{"host": k[1], "local_rank": k[2]} for k in culprits]
    waiting = [{"host": k[1], "local_rank": k[2]} for k in sorted(local_to, key=str) if k not in culprits]
    steps = ", ".join(str(progress[k]["last_step"]) for k in culprits if k in progress)
    title = (f"{local_ranks_phrase(loc)} went silent" + (f" after step {steps}" if steps else "") + f" ({how})"
             + (f"; {local_ranks_phrase(waiting)} timed out waiting" if waiting else "")
             + "; which global ranks these are, the logs do not say")
    tos = sorted(local_to.values(), key=_key)
    lines = [_ev_row({**progress[k], "rank": None, "timestamp": progress[k]["last_ts"], "source_file": progress[k]["file"]},
                     f"last progress line of {local_ranks_phrase([{'host': k[1], 'local_rank': k[2]}])} (step {progress[k]['last_step']})")
             for k in culprits if k in progress]
    t_silent = min((progress[k]["last_ts"] for k in culprits if k in progress), default=None)
    return [Finding(
        rule=pass_id("failures"), kind="hang", layer="communication", severity="ERROR",
        ranks=[], local_ranks=loc, basis=basis, basis_weak=weak, title=title,
        evidence={"how": how, "local_victims": waiting, "global_ranks_known": False,
                  "last_step": {f"{k[1]}/{k[2]}": progress[k]["last_step"] for k in culprits if k in progress}},
        lines=cite(lines + [_ev_row(r) for r in tos[:2]], text="text"),
        first_seen=iso(t_silent or tos[0]["t_show"]), last_seen=iso(max((r["t_show"] for r in tos if r["t_show"]), default=None)),
    )]


def _what_failed(rows: list[dict[str, Any]], victims: list[int]) -> str:
    """What the cited failure lines show, in words: every line a lost peer (gloo's "Connection
    closed by peer" / "reset by peer", NCCL's remote error) -> "lost its peer (...)"; else a timeout
    of the one library they name ("NCCL collective timeout", "gloo collective timeout"), or of a
    collective when they name none or both."""
    texts = [r.get("message") or r.get("event") or "" for r in rows]
    fams = [messages.meaning(t, kinds=("nccl_timeout",)) for t in texts]
    if texts and all(m is not None and m.family.id == "peer_lost" for m in fams):
        how = "connection closed/reset" if any(re.search(r"(?i)connection (?:closed|reset)", t) for t in texts) \
            else "remote process gone"
        return f"lost {'its' if len(set(victims)) == 1 else 'their'} peer ({how})"
    # the library: named by the line's text, or by its event's name (a structured log's NCCL_TIMEOUT)
    libs = {messages.transport(f"{r.get('message') or ''} {r.get('event') or ''}") for r in rows} - {None}
    return f"{libs.pop()} collective timeout" if len(libs) == 1 else "collective timeout"


def _timeout_findings(first_to: dict[int, dict[str, Any]], to_sorted: list[dict[str, Any]], culprits: list[int],
                      how: str, mode: str, weak: bool, victims: list[int], failed_ranks: set[int],
                      progress: dict[int, dict[str, Any]], desync: list[dict[str, Any]], tos: list[dict[str, Any]],
                      fail_seq: int | None, detail: dict[str, Any]) -> list[Finding]:
    out: list[Finding] = []
    t_first_to = to_sorted[0]["t_show"]
    died = mode in ("oom", "crash", "gpu") and culprits
    death = detail.get("death")
    if (died or mode == "exited") and death["t_show"] is not None and t_first_to is not None:
        # the victims' errors follow the death that caused them (placed times are only bounds)
        t_first_to = max(t_first_to, death["t_show"])
    silent_culprits = [c for c in culprits if c not in failed_ranks]
    t_silent = min((progress[c]["last_ts"] for c in silent_culprits if c in progress and progress[c]["last_ts"] is not None),
                   default=None)
    if (not died and mode not in ("killed", "exited") and t_silent is not None and t_first_to is not None
            and not any(r["exact"] for r in to_sorted)):
        # nor do they come before the silence they report: an untimed error (a traceback after
        # the victim's last timed line, nothing timed below it) is placed at the earliest it can
        # have been written — a rank that left (exit 0) resets its peers' connections after its
        # own last line, whatever the victims' last lines before their tracebacks say
        t_first_to = max(t_first_to, t_silent)
    seq = fail_seq if fail_seq is not None else next((s for r in to_sorted if (s := _seq_of(r)) is not None), None)
    coll = next((r["message"] for r in to_sorted if r["message"]), None)
    t_last_to = max((r["t_show"] for r in first_to.values() if r["t_show"] is not None), default=None)
    first_rank = to_sorted[0]["rank"]
    first_note = (f"; rank {first_rank} timed out first, a victim like the others"
                  if first_rank is not None and first_rank not in culprits and culprits and len(first_to) > 1 else "")
    basis = MODE_BASIS.get(mode) if culprits or mode == "local" else None
    if died and death.get("rank_basis"):
        basis = death["rank_basis"]      # the dead rank is known from its text or a one-node launch
    mismatch = [r for r in tos if r["rank"] in culprits and (
        (detail.get("mismatch_seq") is not None and _seq_of(r) == detail["mismatch_seq"]) or mode == "lag_timeout")]

    # -- hang: a culprit that stopped without an error of its own --------------------------------
    if not died and mode not in ("killed", "exited") and mode not in MISMATCH_MODES and silent_culprits:
        lines = [_ev_row({**progress[c], "timestamp": progress[c]["last_ts"], "source_file": progress[c]["file"]},
                         f"last line of rank {c} (step {progress[c]['last_step']})")
                 for c in silent_culprits if c in progress]
        gap = f" {(t_first_to - t_silent).total_seconds():.0f} s later" if t_silent and t_first_to else ""
        last_steps = ", ".join(f"{progress[c]['last_step']}" for c in silent_culprits if c in progress)
        if last_steps:
            head = (f"{ranks_phrase(silent_culprits)} went silent after step {last_steps} and "
                    + (f"never joined collective #{seq}" if seq is not None else "stopped taking part in collectives")
                    + ("" if how.startswith("never joined") else f" ({how})"))
        elif how.startswith("never"):
            head = f"{ranks_phrase(silent_culprits)} {how}"
        else:
            head = (f"{ranks_phrase(silent_culprits)} held up "
                    + (f"collective #{seq}" if seq is not None else "the collective") + f" ({how})")
        out.append(Finding(
            rule=pass_id("failures"), kind="hang", layer="communication", severity="ERROR",
            ranks=silent_culprits, victims=victims, basis=basis, basis_weak=weak,
            title=head + f"; {ranks_phrase(victims)} timed out waiting{gap}{first_note}",
            evidence={"how": how, "failing_seq": seq, "victims": victims, "first_timeout_rank": first_rank,
                      "last_step": {str(c): progress[c]["last_step"] for c in silent_culprits if c in progress},
                      **({"silent_margin_s": detail["silent_margin_s"]} if "silent_margin_s" in detail else {})},
            lines=cite(lines + [_ev_row(r) for r in to_sorted[:2]] + [_ev_row(r) for r in desync[:1]], text="text"),
            first_seen=iso(t_silent or t_first_to), last_seen=iso(t_last_to),
        ))

    # -- a desync: the odd rank(s) issued a different collective -----------------------------------
    if mode in MISMATCH_MODES and culprits:
        out.append(Finding(
            rule=pass_id("failures"), kind="collective_mismatch", layer="communication", severity="ERROR",
            ranks=culprits, victims=victims, basis=basis, basis_weak=weak,
            title=(f"{ranks_phrase(culprits)} issued a different collective than the others ({how})"
                   + ((f"; {ranks_phrase(victims)} found the mismatch in their own pre-collective check" if mode == "fingerprint"
                       else f"; {ranks_phrase(victims)} waited for it until the watchdog fired") if victims else "") + first_note),
            evidence={"how": how, "failing_seq": seq, "victims": victims, "first_timeout_rank": first_rank,
                      **({"fingerprints": detail["fingerprint"]} if detail.get("fingerprint") else {})},
            lines=cite([_ev_row(r) for r in mismatch[:2]] + [_ev_row(r) for r in desync[:1]] + [_ev_row(r) for r in to_sorted[:2]],
                       text="text"),
            first_seen=iso(t_first_to), last_seen=iso(t_last_to),
        ))

    # -- the timeouts themselves (attributed to the culprit, never to the ranks that time out) ---
    lost = victims
    what_failed = _what_failed(to_sorted[:3], lost)
    at_seq = f" at collective #{seq}" if seq is not None else ""
    if died:
        c = culprits[0]
        what = {"oom": "CUDA OOM", "crash": "crash", "gpu": "GPU error"}[mode]
        dt_s = ((to_sorted[0]["timestamp"] - death["timestamp"]).total_seconds()
                if to_sorted[0]["exact"] and death["exact"] else None)
        title = (f"{ranks_phrase(lost)}: {what_failed}{at_seq}"
                 + (f" {dt_s:.1f} s after rank {c}'s {what}" if dt_s is not None else f" after rank {c}'s {what}"))
    elif mode == "local":
        loc = detail["local"]
        who = local_ranks_phrase([{"host": loc["host"], "local_rank": loc["local_rank"]}])
        title = (f"{ranks_phrase(lost)}: {what_failed}{at_seq}" + f" after {who} died ({loc['what']}); which global rank "
                 "it was, the logs do not say")
    elif mode == "exited":
        title = (f"{ranks_phrase(lost)}: lost {ranks_phrase(culprits)} in their collective"
                 + (f" #{seq}" if seq is not None else "") + f" after it {how}")
    elif mode == "killed":
        title = (f"{ranks_phrase(lost)}: lost {ranks_phrase(culprits)} in their collective"
                 + (f" #{seq}" if seq is not None else "") + " after it was killed (SIGKILL)")
    elif culprits:
        title = (f"{ranks_phrase(lost)}: {what_failed}{at_seq}" + f" waiting for {ranks_phrase(culprits)} ({how}){first_note}")
    else:
        title = (f"{ranks_phrase(lost)}: {what_failed}{at_seq}" + " — the logs do not show which rank they waited for")
    out.append(Finding(
        rule=pass_id("failures"), kind="nccl_timeout", layer="communication", severity="ERROR",
        ranks=culprits, victims=victims, title=title, basis=basis, basis_weak=weak and bool(culprits),
        local_ranks=([{"host": detail["local"]["host"], "local_rank": detail["local"]["local_rank"]}]
                     if mode == "local" else []),
        evidence={"how": how or None, "failing_seq": seq, "timeouts": len(tos), "victims": victims,
                  "first_timeout_rank": first_rank, "message": shorten(coll, 300)},
        lines=cite([_ev_row(r) for r in mismatch[:1]] + [_ev_row(r) for r in to_sorted[:3]] + [_ev_row(r) for r in desync[:1]],
                   text="text"),
        first_seen=iso(t_first_to), last_seen=iso(t_last_to),
    ))
    return out
