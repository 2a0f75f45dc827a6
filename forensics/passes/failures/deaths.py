"""Which ranks died of their own error: a fatal Python exception (`crash`), a device error
(`gpu_error`), or a non-zero exit the launcher saw when nothing else failed.
"""
from __future__ import annotations

import datetime as dt
import os
import re
from typing import Any

import polars as pl

from ... import failure_facts as facts, failure_messages as fm
from ...report.model import Finding
from ..context import Context
from ..evidence import cite, iso, pass_id, shorten
from .cascade import _cascade_tail, _later_phrase
from .classify import TEARDOWN_RE
from . import records
from .progress import _others_went_on, _restarted_after, _trained_after
from .rows import REPORTERS, own_exit, _basis, _ev_row, _exit_key, _extra, _key, _local, _owner, _who


def _last_lines(ctx: Context, tbs: list[dict[str, Any]]) -> set[tuple[str, int]]:
    """(file, line) of the tracebacks that are the last thing their process wrote in that file
    (nothing but the traceback's own continuation lines after it). Only their files are read.

    An exception's message may run over several lines after the traceback closed (NCCL's
    "ncclSystemError: ..", "Last error:", the socket error): untimed lines that carry no step are
    its rest, not the process writing on; only a line with a time or a step, another traceback,
    or another candidate shows the process went on."""
    files = sorted({r["source_file"] for r in tbs if r["source_file"] is not None})
    if not files:
        return set()
    mine = sorted({f"{r['source_file']}:{r['line']}" for r in tbs if r["source_file"] is not None})
    went_on = (pl.col("timestamp").is_not_null() | pl.col("step").is_not_null() | (pl.col("event") == "TRACEBACK")
               | pl.concat_str([pl.col("source_file"), pl.col("line").cast(pl.String)], separator=":").is_in(mine))
    last = (
        ctx.events.select("rank", "host", "local_rank", "event", "source_file", "line", "timestamp", "step")
        .filter(pl.col("source_file").is_in(files) & (pl.col("event") != "TRACEBACK_CONT") & went_on)
        .group_by("source_file", "rank", "host", "local_rank")
        .agg(pl.col("line").max())
        .collect()
    )
    ends = {(f, rk, h, lr): ln for f, rk, h, lr, ln in last.iter_rows()}
    return {(r["source_file"], r["line"]) for r in tbs
            if ends.get((r["source_file"], r.get("logged_rank", r["rank"]), r.get("logged_host", r["host"]),
                         r.get("logged_local_rank", r["local_rank"]))) == r["line"]}


def _crashes(ctx: Context, rows: list[dict[str, Any]], progress: dict[int, dict[str, Any]],
             first_oom: dict[Any, dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    """First fatal plain Python exception per process (rank, or host + local rank): a traceback
    that is not an OOM, a GPU error, a lost peer / timeout (classified before) nor a teardown
    signal, from a rank with no OOM of its own before it.

    Fatal: the rank did not train after it (or trained again only from an earlier step: a new
    process, the job restarted: progress._restarted_after), and something shows the process ended — a process
    exit or kill after it, its peers' failed collectives after it, or it is the last thing the
    process wrote. (Programs print tracebacks of exceptions they survive: at start-up, a skipped
    sample; those are not crashes.)"""
    # a traceback whose exception line the reader typed as a failure of its own (a barrier or
    # collective timeout, an OOM: extra.traceback points back at the head) is that failure
    typed = {(r["source_file"], r["traceback_head"]) for r in rows
             if r.get("traceback_head") is not None and r["kind"] in ("timeout", "oom", "gpu", "desync")}
    tbs = [r for r in rows if r["kind"] == "traceback" and not re.search(TEARDOWN_RE, r["message"] or "")
           and (r["source_file"], r["line"]) not in typed and _owner(r) is not None]
    survived = [r for r in tbs if _trained_after(r, progress)]
    restarted = _restarted_after(ctx, survived)
    tbs = [r for r in tbs if not _trained_after(r, progress) or id(r) in restarted]
    if not tbs:
        return {}
    ends = [r for r in rows if r["kind"] in ("exit", "kill", "timeout")]
    last = _last_lines(ctx, tbs)
    out: dict[Any, dict[str, Any]] = {}
    for r in tbs:
        who = _owner(r)
        if who in out or (who in first_oom and _key(first_oom[who]) <= _key(r)):
            continue
        ended = any(_key(e) > _key(r) for e in ends)
        if r["event"] == "TRACEBACK" and (r["source_file"], r["line"]) in last or ended:
            out[who] = r
        elif (r["source_file"], r["line"]) in last and _others_went_on(ctx, r, progress):
            # an error event of another name, the last its rank wrote: fatal only when the run
            # went on without it (a last ERROR line as every rank ends is not a death)
            out[who] = r
    return out


def _gpu_errors(rows: list[dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    """First device error per process; a kernel Xid line (no rank) per host and PCI address."""
    out: dict[Any, dict[str, Any]] = {}
    for r in rows:
        if r["kind"] != "gpu":
            continue
        who = _owner(r)
        if who is None:
            who = ("device", r.get("host"), r["message"][:40] if r["event"] == "GPU_XID" and r["message"] else r["line"])
        out.setdefault(who, r)
    return out


# torch/csrc/DataLoader.cpp (_error_if_any_worker_fails): "DataLoader worker (pid %d) is killed by
# signal: %s. " with strsignal(3)'s text (failure_messages.dataloader_killed_oom)
_WORKER_KILLED = re.compile(r"DataLoader worker \(pid (\d+)\) is killed by signal: (Killed|Bus error)")
# what shows the host's memory ran out: the kernel's or the cgroup's OOM killer, Slurm's oom-kill
# or memory-limit report, an allocation of host memory that failed (failure_messages families)
_MEMORY_FAMILIES = ("kernel_oom_killer", "slurm_oom_kill", "slurm_memory_limit", "cpu_allocator", "python_memory_error")


def _worker_kill(r: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The finding's words for a rank whose DataLoader worker was killed by a signal, or None when
    `r` is no such exception. The kind stays host_oom (spec/report.md: host memory, "SIGKILL / exit
    -9 without a CUDA error"), but the title says what the logs show: SIGKILL is often the OOM
    killer, confirmed only by a memory line of the same host (or of a line naming none) — else
    "no memory evidence in the logs"; SIGBUS is the workers' shared memory (/dev/shm) running out."""
    m = _WORKER_KILLED.search(r.get("message") or "")
    if m is None:
        return None
    pid, sig = int(m.group(1)), "SIGKILL" if m.group(2) == "Killed" else "SIGBUS"
    mem = [q for q in sorted(rows, key=_key) if q is not r
           and (q.get("by") == "oom_killer" or q.get("meaning_family") in _MEMORY_FAMILIES)
           and (q.get("host") is None or r.get("host") is None or q["host"] == r["host"])]
    memory = next((q for q in mem if q.get("pid") == pid), mem[0] if mem else None)   # the kill of that worker first
    who = _who(r["rank"] if r["rank"] is not None else None, r)
    head = f"{who}: its DataLoader worker (pid {pid}) was killed by {sig}"
    if sig == "SIGBUS":
        title = head + " (its shared memory, /dev/shm, ran out: often a container's small --shm-size)"
    elif memory is not None:
        title = (head + f" and the host's memory ran out ({os.path.basename(memory['source_file'] or '')}:"
                 f"{memory['line']}: {shorten(memory.get('message') or memory.get('event'), 80)})")
    else:
        title = head + " (often the host's OOM killer; no memory evidence in the logs)"
    return {"title": title, "memory": memory, "confirmed": memory is not None,
            "evidence": {"pid": pid, "signal": sig, "memory_line": f"{memory['source_file']}:{memory['line']}" if memory else None}}


# torch/utils/data/dataloader.py (_try_get_data): `raise RuntimeError(f"DataLoader worker (pid(s)
# {pids_str}) exited unexpectedly") from e` — e being the SIGCHLD handler's "is killed by signal"
# error of the same worker: CPython prints that cause's traceback first, then "The above exception
# was the direct cause of the following exception:", then this one
_WORKER_EXITED = re.compile(r"DataLoader worker \(pid\(s\) ([\d, ]+)\) exited unexpectedly")


def worker_cause(r: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The row of the DataLoader worker's kill that the fatal "exited unexpectedly" exception `r`
    was raised from (its chained cause: the same process, the same file, before it, naming one of
    its pids), or None."""
    m = _WORKER_EXITED.search(r.get("message") or "")
    if m is None:
        return None
    pids = {int(p) for p in m.group(1).replace(",", " ").split()}
    return next((q for q in sorted(rows, key=lambda q: -(q["line"] or 0))
                 if q["source_file"] == r["source_file"] and (q["line"] or 0) < (r["line"] or 0) and _owner(q) == _owner(r)
                 and (k := _WORKER_KILLED.search(q.get("message") or "")) and int(k.group(1)) in pids), None)


def _death_finding(kind: str, who_key: Any, r: dict[str, Any], first_to: dict[int, dict[str, Any]],
                   cascade: list[dict[str, Any]], all_rows: list[dict[str, Any]]) -> Finding:
    """A rank killed by its own Python exception (`crash`; `host_oom` when the exception means
    host memory: failure_messages.py) or by its device (`gpu_error`)."""
    rank = who_key if isinstance(who_key, int) else None
    later, delay = _later_phrase(r, first_to, rank)
    tail, kills, ex = _cascade_tail(cascade, r)
    x = _extra(r)
    where = ""
    frames = x.get("frames") or []
    if frames:
        where = f" (at {frames[-1]})"
    who = _who(rank, r)
    etype, emsg = facts.exception_of(r)
    worker = None
    if kind in ("crash", "host_oom"):
        # an error event of any name: its exception's type and message, where the line has them
        text = r["message"] or r["event"] or ""
        if etype and etype not in text:
            text = f"{etype}: {emsg}" if emsg and emsg not in text else (f"{etype} ({text})" if text else etype)
        worker = _worker_kill(r, all_rows) if kind == "host_oom" else None
        title = (worker["title"] + f": {shorten(text, 160)}{where}" if worker is not None else
                 f"{who} ran out of host memory (RAM, not GPU memory): {shorten(text, 160)}{where}" if kind == "host_oom"
                 else f"{who} crashed with a Python exception: {shorten(text, 160)}{where}")
        # the rank's own process failed (its code, its data loader): below the communication its
        # peers then lose, so the chain reads bottom-up from it, like an OOM
        layer = "resource"
    else:
        host = f" on host {r['host']}" if r.get("host") and rank is None and not _local(r) else ""
        subject = who if rank is not None or _local(r) else f"a GPU{host}"
        title = f"{subject}: the GPU failed ({shorten(r['message'], 160)})"
        layer = "physical"
    mine = [q for q in all_rows if q["kind"] == r["kind"] and _owner(q) == who_key]
    return Finding(
        rule=pass_id("failures"), kind=kind, layer=layer, severity="ERROR",
        ranks=[] if rank is None else [rank], victims=later, title=title + delay + tail,
        basis=_basis(r) if rank is not None or _local(r) else None, local_ranks=_local(r),
        evidence={"message": shorten(r["message"], 300), "exception": etype or x.get("exception"), "frames": frames[-3:] or None,
                  **({} if r["exact"] else {"time_of_its_own": False}),
                  "event": r["event"], "victims": later, "host": r.get("host"),
                  "cascade": {"launcher_kills": len(kills), "failed_exits": len(ex)} if kills or ex else None,
                  **({"dataloader_worker": worker["evidence"], "confirmed": worker["confirmed"]} if worker else {}),
                  **records.evidence(r)},
        lines=cite([_ev_row(r)] + ([_ev_row(worker["memory"])] if worker and worker["memory"] else [])
                   + [_ev_row(q) for q in records.cited(r)] + [_ev_row(first_to[k]) for k in later[:2]]
                   + [_ev_row(c) for c in (kills[:1] + ex[:1])], text="text"),
        first_seen=iso(r["t_show"]), last_seen=iso(mine[-1]["t_show"] if mine else r["t_show"]),
    )


def watchdog_abort(r: dict[str, Any], t_timeout: dt.datetime | None) -> bool:
    """An exit by SIGABRT at or after the first collective timeout (`t_timeout`): ProcessGroupNCCL's
    teardown of the hang, not a death of the worker's own.

    torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp: on a timeout the watchdog logs "To avoid
    data inconsistency, we are taking the entire process down." and rethrows in its thread
    ("Process group watchdog thread terminated with exception"; uncaught: std::terminate, SIGABRT);
    on every other rank the heartbeat monitor sees the dump signal the timed-out rank set in the
    TCPStore, dumps the Flight Recorder and calls terminateProcess (LOG(FATAL): std::abort) — the
    rank that never joined the collective included. An exit record's time may be cut to the second
    (ChildFailedError's `time : 2025-07-06_18:45:01`): within a second before the timeout counts."""
    if t_timeout is None or r["kind"] != "exit" or facts.signal_of(r["exit_code"], r["signal"]) != "SIGABRT":
        return False
    t = r["timestamp"]
    return t is not None and t + dt.timedelta(seconds=1) > t_timeout


# A peer's death seen from this side of the socket (gloo's "Connection closed by peer" / "reset
# by peer", a broken pipe, NCCL's remote error: "remote process exited or there was a network
# error", "... a remote process exiting prematurely"; failure_messages.py's peer_lost family):
# a consequence of a death, never a timed-out wait that a watchdog tears down after.
LOST_PEER_RE = re.compile(fm.family("peer_lost").pattern, re.I | re.M)


def first_timeout_time(tos: list[dict[str, Any]], rows: list[dict[str, Any]]) -> dt.datetime | None:
    """When the first collective timed out: the earliest timeout with a time; else (a glog line
    without a year, in a file with no full timestamp) the earliest exit of a rank that timed out —
    the watchdog's abort of that rank follows its timeout, so the timeout was no later. Lost
    peers are not timeouts (LOST_PEER_RE): with only those, None."""
    def lost(r: dict[str, Any]) -> bool:
        return LOST_PEER_RE.search(r.get("message") or "") is not None

    # the earliest timed row that is not a lost peer: the rows read in time order, each message
    # only until one is found (4,095 ranks' timeouts: one search, not 4,095)
    for r in sorted((r for r in tos if r["timestamp"] is not None), key=lambda r: r["timestamp"]):
        if not lost(r):
            return r["timestamp"]
    tos = [r for r in tos if r["timestamp"] is None and not lost(r)]   # (every timed one is lost)
    timed_out = {_owner(r) for r in tos if _owner(r) is not None}
    ts = [r["timestamp"] for r in rows if r["kind"] == "exit" and r["timestamp"] is not None and _owner(r) in timed_out]
    return min(ts) if ts else None


# libstdc++'s verbose terminate handler (libsupc++/vterminate.cc) prints the exception's what()
# on the line after "terminate called after throwing an instance of '%s'": "  what():  %s"
_WHAT = re.compile(r"^\s*what\(\):\s*(.*)")
# a build path in a native error's text, said by its file name only (the build machine's dirs)
_PATH = re.compile(r"(?<![\w.])/(?:[^\s/\]]+/)+([^\s/\]]+)")


def _what(ctx: Context | None, tb: dict[str, Any]) -> str | None:
    """The `what():` line libstdc++ prints after an uncaught C++ exception's line, if any."""
    if ctx is None or not (tb.get("message") or "").startswith("terminate called after throwing") or tb.get("line") is None:
        return None
    nxt = (ctx.events.filter((pl.col("source_file") == tb["source_file"]) & (pl.col("line") == tb["line"] + 1))
           .select("message").collect())
    m = _WHAT.match(nxt.item(0, 0) or "") if nxt.height else None
    return m.group(1).strip() if m else None


def _failed_exit(rows: list[dict[str, Any]], ctx: Context | None = None) -> list[Finding]:
    """When nothing else failed: a worker the launcher saw exit with a non-zero code (torch
    elastic's "failed (exitcode: 1) local_rank: N", its ChildFailedError record) crashed, its
    own error being in output these logs do not hold (its stderr, its error_file). The earliest
    exit is the crash (ties: the one the agent calls the first observed failure); later ones are
    its cascade. A negative code (or 128+N from a shell) is a signal (failure_facts.signal_of):
    SIGKILL is a kill (_killed_without_traceback), SIGTERM or SIGINT a teardown, never a crash;
    SIGSEGV, SIGBUS, SIGABRT, SIGILL, SIGFPE are the worker's own death in native code: a crash,
    named by its signal."""
    exits = sorted((r for r in rows if own_exit(r) and (_owner(r) is not None or r["by"] in REPORTERS)),
                   key=_exit_key)
    if not exits:
        return []
    r = exits[0]
    # the agent's line names the local rank, the ChildFailedError record the global one: one pid
    same = [o for o in exits if r["pid"] is not None and o["pid"] == r["pid"]] or [r]
    # (the record that states the rank itself, before a row given it by a join)
    r = next((o for o in same if o.get("logged_rank", o["rank"]) is not None),
             next((o for o in same if o["rank"] is not None), r))
    rank = None if r["rank"] is None else int(r["rank"])
    others = sorted({_who(None if o["rank"] is None else int(o["rank"]), o) for o in exits
                     if o not in same and _owner(o) != _owner(r)})
    sig = facts.signal_of(r["exit_code"], r["signal"])
    # a traceback printed before the exit in the same output that names no rank (no [rankN]:
    # prefix): most likely this worker's, said as such, never taken for a rank's own error
    # (the launcher's own teardown traceback — ChildFailedError, SignalException — is not the
    # worker's; an uncaught C++ exception's "terminate called ..." line is, with its what())
    tb = max((t for t in rows if t["kind"] == "traceback" and _owner(t) is None
              and (t["event"] == "TRACEBACK" or t.get("meaning") == "crash")
              and not re.search(TEARDOWN_RE, t["message"] or "")
              and t["source_file"] == r["source_file"] and (t["line"] or 0) < (r["line"] or 0)),
             key=lambda t: t["line"] or 0, default=None)
    what = _what(ctx, tb) if tb else None
    said = _PATH.sub(r"…/\1", f"{tb['message']}: {what}" if what else tb["message"]) if tb else ""
    kind_of = "the traceback" if tb and tb["event"] == "TRACEBACK" else "the error"
    seen = f"; {kind_of} printed before it names no rank: {shorten(said, 300)}" if tb else ""
    if sig in facts.FAULT_SIGNALS:
        title = (f"{_who(rank, r)} died of {sig} (exit code {r['exit_code']}, the launcher's record): "
                 f"{facts.FAULT_SIGNALS[sig]}{seen}")
    else:
        title = (f"{_who(rank, r)} exited with {facts.code_phrase(r['exit_code'], r['signal'])} (the launcher's record)"
                 + (seen or "; its own error is not in these logs — its stderr or error_file has it"))
    title += f"; then {', '.join(others)} exited too" if others else ""
    return [Finding(
        rule=pass_id("failures"), kind="crash", layer="resource", severity="ERROR",
        ranks=[] if rank is None else [rank], title=title,
        basis=_basis(r) if _owner(r) is not None else None, local_ranks=_local(r),
        evidence={"exit_code": r["exit_code"], "signal": sig, "pid": r["pid"], "host": r.get("host"), "event": r["event"],
                  **({"unattributed_error": shorten(said, 300)} if tb else {}),
                  "others": others or None, **({"one_node": r["one_node"]} if r.get("one_node") else {})},
        lines=cite([_ev_row(o) for o in exits[:3]] + ([_ev_row(tb)] if tb else []), text="text"),
        first_seen=iso(r["t_show"]), last_seen=iso(exits[-1]["t_show"]),
    )]
