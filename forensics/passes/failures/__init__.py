"""Why did the job stop: which rank failed first, and which failures are only its cascade?

Question: for CUDA OOM, host OOM kills, Python exceptions, GPU errors, NCCL/gloo timeouts, lost
connections, desyncs, hangs and the scheduler's cancellation — which rank is at fault, how do
we know (`basis`), and what did the launcher's own report get wrong?

Domain facts relied on:
- Every rank blocked in a collective that one rank never joins times out; so the earliest
  timeout does not name the cause, and the timing-out ranks are victims, not culprits.
- The culprit of a timeout is, in order of strength (basis in brackets):
  1. a rank that died of its own error before the first timeout: CUDA OOM, a plain Python
     exception (`crash`), a device error (`gpu_error`: Xid, ECC, illegal memory access, launch
     failure). Its death closes the connections: the others' timeouts or connection errors —
     gloo "Connection closed by peer", NCCL "remote process exited" — are its cascade [own_error];
  2. a rank killed by SIGKILL with no error of its own (the host OOM killer, see below): its
     death is what the others' "remote process exited" report, whenever the launcher noticed it
     [own_error: its own exit record]; known only as "local rank 3 on host X", it is still the
     cause, but no global rank is named;
  3. a rank the desync report names ("the lagging/dead/mismatched ranks that caused the desync
     are: [7]") or an error names as missing (extra.missing_ranks: a barrier's or a
     collective's "ranks … failed to pass / did not join") [named_by_peers; weak when one rank
     says so], or the rank every CollectiveFingerPrint mismatch error names [named_by_peers];
  4. a rank whose collective differs at the same sequence number: ranks of one process group
     issue the same op with the same size at each SeqNum, so the minority OpType (or NumelIn, for
     all-reduce/broadcast where every rank sends the same tensor) is the odd rank out [own_error;
     weak when the majority is two ranks];
  4b. a rank the launcher saw exit with a code of its own (a fault signal such as SIGSEGV, or a
     positive code; not its SIGTERM of the survivors) that has no error or timeout in the logs:
     its death is what the others' lost connections report, though the agent records it after
     them [own_error: its exit record]; a crash finding of its own (deaths._failed_exit);
  5. a rank whose sequence number lags: its own timeout is at a lower SeqNum [own_error], or its
     watchdog status ("Last enqueued NCCL work: 40" in the dump-signal report every rank prints)
     shows it never enqueued the collective the others time out in [never_joined];
  6. the rank the timeout messages say they wait on ("rank=1 waiting on rank=2") [named_by_peers];
  7. the rank whose last logged collective sequence number is below the failing SeqNum [never_joined];
  8. the rank whose "last completed work" is smallest (the laggard) [never_joined];
  9. the rank that went silent first without an error of its own [last_to_log; weak when the
     next rank stopped logging within a second or half a step of it]; of the silent ranks, the
     ones the launcher's teardown did not have to stop (SIGTERM) had already exited with no
     failure to record — they left by themselves (exit code 0), and the finding says so.
- ProcessGroupNCCL ends a hang itself: the watchdog that timed out rethrows (std::terminate), and
  every other rank's heartbeat monitor, told by the TCPStore ("Received a dump signal due to a
  collective timeout from rank N"), dumps and aborts (terminateProcess: LOG(FATAL)). So every
  worker, the one that never joined included, dies of SIGABRT after the first timeout: such an
  exit is the hang's end, never a death of its own (deaths.watchdog_abort). When no rank's
  timeout line is in the logs, a peer's dump-signal report of rank N's stands for it
  (classify.reported_timeouts).
- Ranks that issued DIFFERENT collectives (fingerprints differ, another op or size at one
  SeqNum, waiting in another SeqNum) are a `collective_mismatch`; a culprit that simply never
  arrived, silent without an error of its own, is a `hang`.
- Where no line names a global rank (torchrun --tee `[default1]:` on several nodes, nothing
  printed that maps local ranks), a hang is still found among processes known as (host, local
  rank): the one that logged progress but no timeout of its own [never_joined], else the one
  whose progress stopped first [last_to_log]; it is reported as "local rank 1 on host X".
- A fingerprint mismatch (TORCH_DISTRIBUTED_DEBUG=DETAIL) says how the odd rank's collective
  differs: op type, sequence number, tensor shape or dtype (forensics/collective_text.py reads
  the text for console and structured sources alike).
- Exit code -9 / SIGKILL / "Killed" with no Python traceback means something outside Python
  killed the process; unless the launcher (its teardown after another failure), the scheduler
  (scancel, time limit) sent it, that is most often the kernel's OOM killer (host RAM, not GPU
  memory): a `host_oom` finding (evidence host_oom_killer = true), confirmed when the kernel's
  "Out of memory: Killed process" line is in the logs.
- The CUDA allocator's OOM message lists every process on the GPU, the failing one included
  (see _shared_gpu): only the others make a shared GPU.
- A Python traceback kills its rank only if the rank did not train after it and the process
  ended (an exit, its peers' failures, or it is the last thing the process wrote): programs
  print tracebacks of exceptions they survive.
- The scheduler's cancellation (scancel, time limit, node failure, preemption: Slurm's
  "*** JOB n ON host CANCELLED AT t ***") ends the job: `job_cancelled`; the workers srun and the
  launcher kill after it are its cascade, not host OOM kills.
- Launcher kills ("Killing subprocess", "Sending process … closing signal") and non-zero exits
  after a failure are its cascade, not faults of their own: they are counted into the failure.
- torch elastic's ChildFailedError "Root Cause (first observed failure)" is the first worker
  exit the agent saw, not the first fault: a rank that OOMs and hangs in teardown exits after the
  victims its hang aborted. The root is the earliest real failure on any rank; where the
  launcher's "first observed" rank differs, the finding says so.
- A message is read by what it means, whatever its wording (forensics/failure_messages.py): an
  own failure (an OOM in any allocator's words, host memory, a fatal signal, ncclSystemError) is
  never a victim's timeout; a rank whose heartbeat monitor says its watchdog got stuck is hung
  and, before any inference from silence, the culprit of the others' timeouts [own_error].
- An earlier root is never replaced by the later failures it caused: rootcause.py orders
  failures by time, and this pass attributes the cascade to the first failure.

Times: failures are compared on the common clock (Context.clock_offsets: hosts' clocks disagree
by milliseconds to seconds, enough to put a victim's timeout before the OOM that caused it).
Console lines often carry no time (a Python traceback): such a line is placed at the time of the
nearest timestamped line above it in its file (below it if none), and ties keep file order.

Must not: decide the root cause across layers (rootcause.py).

Modules (one per question): meaning (what a line's text means, by forensics/failure_messages.py's
families, and the hang of a rank whose watchdog is stuck), classify (which events are failures,
of what kind, when), rows (whose
a failure row is, its order and citation), progress (how far each rank got), culprit (which rank
held up a collective), oom, host_oom, deaths (crash, gpu_error, a failed exit), cascade (what
followed a failure), restart (the workers started again after a death), cancel (the scheduler
ended the job), timeouts (hang, collective mismatch, the timeouts); `find` here puts them together.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import polars as pl

from ... import failure_facts as facts
from ...report.model import Finding
from ..context import Context
from ..evidence import cite, iso, pass_id, ranks_phrase, shorten
from .cancel import _cancel_finding
from .cascade import _cascade_tail, _later_phrase, _launcher_first_observed
from .classify import TEARDOWN_RE, TIMEOUT_RE, _candidates, _classify, _placed, reported_timeouts
from .culprit import (
    _desync_ranks, _fingerprint_how, _laggards, _least_completed, _missing_ranks, _odd_collective, _peer_of, _seq_of,
)
from .deaths import _crashes, _death_finding, _failed_exit, _gpu_errors, first_timeout_time, watchdog_abort, worker_cause
from .independent import independent, name_all
from .host_oom import _host_oom_finding, _killed_without_traceback
from .meaning import stuck_findings
from .oom import _oom_detail, _shared_gpu, _shared_phrase
from .progress import SILENT_MARGIN_S, _progress, _progress_last, _progress_maxima, _progress_since
from . import records, restart
from .rows import LAUNCHERS, death_key, own_exit, _basis, _ev_row, _first, _key, _local, _owner, _who, _whose
from .stopped import stopped_hang
from .timeouts import _local_hang, _timeout_findings

# what other modules (passes/unexplained.py) and the tests import from the package
__all__ = ["LAUNCHERS", "TEARDOWN_RE", "TIMEOUT_RE", "_candidates", "_placed", "_progress", "_progress_last",
           "_progress_maxima", "_progress_since", "find"]


def _stalls_at_the_end(ctx: Context, rows: list[dict[str, Any]]) -> None:
    """A stall warning (Horovod's: ranks that did not submit a tensor the others wait on) after
    which the ranks it names made no progress (a later step-carrying line of theirs in its file;
    in a file without steps, a later INFO line) is where the run stopped: a timeout naming those
    ranks (in place) — whatever the other ranks still wrote. One the named ranks outlived is a slow
    rank that caught up: left as it is. A warning that names no rank is judged by every rank."""
    stalls = [r for r in rows if r.get("event") == "COLLECTIVE_STALL" and r["kind"] != "timeout"]
    if not stalls:
        return
    files = list({r["source_file"] for r in stalls})
    # the last line each rank wrote that shows it working: a progress line, else (a file whose
    # progress carries no step) any of its INFO lines
    ranked = pl.col("rank").is_not_null() & ~pl.col("level").is_in(["WARN", "ERROR"]).fill_null(False)
    last: dict[str, dict[int, tuple[Any, Any]]] = defaultdict(dict)
    for f, rk, p, a in (ctx.events.filter(pl.col("source_file").is_in(files) & ranked)
                        .group_by("source_file", "rank").agg(pl.col("line").filter(pl.col("step").is_not_null()).max().alias("p"),
                                                             pl.col("line").max().alias("a")).collect().iter_rows()):
        last[f][int(rk)] = (p, a)
    for r in stalls:
        per_rank = last.get(r["source_file"], {})
        named = set(_missing_ranks([r])[0]) & set(per_rank)
        mine = [per_rank[k] for k in (named or per_rank)]
        prog = max((p for p, _a in mine if p is not None), default=None)
        # (progress lines carry steps in this file: a rank's INFO line without one is no progress)
        steps = any(p is not None for p, _a in per_rank.values())
        end = prog if steps else max((a for _p, a in mine if a is not None), default=None)
        if end is None or end < (r["line"] or 0):
            r["kind"] = "timeout"


def find(ctx: Context) -> list[Finding]:
    cand, maxima, last = pl.collect_all([_candidates(ctx), _progress_maxima(ctx),
                                          _progress_last(ctx, _progress_since(ctx))])
    prog = _progress(ctx, maxima, last)
    # order and compare on the common clock; citations keep the logged time
    fails_df = _placed(ctx, _classify(cand)).with_columns(pl.col("timestamp").alias("logged_ts"),
                                                          pl.col("t_order").alias("timestamp"))
    if fails_df.is_empty():
        return []
    rows = _whose(ctx, sorted(fails_df.iter_rows(named=True), key=_key))
    progress = {int(p["rank"]): p for p in prog.iter_rows(named=True)}
    _stalls_at_the_end(ctx, rows)
    ooms = [r for r in rows if r["kind"] == "oom"]
    # no timeout line of any rank: a peer's report of one (the dump signal) stands in for it
    tos = [r for r in rows if r["kind"] == "timeout"] or reported_timeouts(rows)
    statuses = [r for r in rows if r["kind"] in ("status", "timeout") and (r["enqueued"] is not None or r["completed"] is not None)]
    desync = [r for r in rows if r["desync"]]      # a timeout's message may carry the desync report

    # First OOM per process; an OOM line without a rank only counts when no ranked one exists.
    all_oom: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for r in ooms:
        all_oom[_owner(r)].append(r)
    first_oom = {k: _first(v) for k, v in all_oom.items()}
    if any(isinstance(k, int) for k in first_oom):
        first_oom = {k: v for k, v in first_oom.items() if isinstance(k, int)}
    by_rank: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in tos:
        if r["rank"] is not None:
            by_rank[int(r["rank"])].append(r)
    first_to = {k: _first(v) for k, v in by_rank.items()}
    crashes = _crashes(ctx, rows, progress, first_oom)
    gpus = _gpu_errors(rows)
    # a SIGKILL after the first timeout, or after another process's own death, with no sign of
    # memory, is the teardown (the launcher's, the watchdog's), not the host's OOM killer
    own_deaths_rows = [*first_oom.values(), *crashes.values(), *gpus.values(), *(r for r in rows if own_exit(r))]
    killed = _killed_without_traceback(rows, first_timeout_time(sorted(tos, key=_key), rows), own_deaths_rows)
    cancels = [r for r in rows if r["kind"] == "cancel"]
    # ranks whose own heartbeat monitor says their watchdog is stuck (meaning.py): hung
    stuck_out, stuck = stuck_findings(rows, ctx.ranks, {k for k in [*first_oom, *crashes, *gpus] if isinstance(k, int)})

    out: list[Finding] = []
    to_sorted = sorted(first_to.values(), key=_key)
    t_first_to = to_sorted[0]["t_show"] if to_sorted else None
    failed_ranks = set(first_to) | {k for k in [*first_oom, *crashes, *gpus] if isinstance(k, int)} | set(stuck)
    seqs = Counter(s for r in first_to.values() if (s := _seq_of(r)) is not None)
    fail_seq = seqs.most_common(1)[0][0] if seqs else None

    # -- culprit of the timeouts -------------------------------------------------------------
    culprits: list[int] = []
    how = ""
    mode = ""
    weak = False
    detail: dict[str, Any] = {}
    if first_to:
        # a rank that died of its own error before the first timeout: OOM, exception, device
        deaths = [(r, k, m) for m, d in (("oom", first_oom), ("crash", crashes), ("gpu", gpus)) for k, r in d.items()
                  if isinstance(k, int) and _key(r) <= _key(to_sorted[0])]
        dead = [d for d in killed if d["rank"] is not None and d["rank"] not in failed_ranks]
        # a rank the launcher saw exit with a code of its own (SIGSEGV, exit 3) and that has no
        # error or timeout of its own here: a death, stronger than any inference from silence
        # (not a SIGABRT after the first timeout: the watchdog's teardown of the hang, deaths.watchdog_abort)
        t_abort_after = first_timeout_time(to_sorted, rows)
        exited = sorted((r for r in rows if own_exit(r) and isinstance(_owner(r), int) and _owner(r) not in failed_ranks
                         and not watchdog_abort(r, t_abort_after)),
                        key=lambda r: (facts.signal_of(r["exit_code"], r["signal"]) not in facts.FAULT_SIGNALS,
                                       death_key(r)))
        named, named_src, reporters = _desync_ranks(desync)
        missing, missing_by = _missing_ranks(rows)
        odd, odd_how, odd_weak = _odd_collective(tos, fail_seq)
        peers = Counter(p for r in first_to.values() if (p := _peer_of(r)) is not None and p != r["rank"])
        # the same, known only by host and local rank: the cause, though no global rank can be named
        local_deaths = [(r, k, m) for m, d in (("oom", first_oom), ("crash", crashes), ("gpu", gpus)) for k, r in d.items()
                        if isinstance(k, tuple) and k[0] == "local" and _key(r) <= _key(to_sorted[0])]
        local_deaths += [(d["rows"][0], ("local", d["host"], d["local_rank"]), "killed") for d in killed
                         if d["rank"] is None and d["local_rank"] is not None and _key(d["rows"][0]) <= _key(to_sorted[0])]
        if deaths:
            r, first, mode = min(deaths, key=lambda d: death_key(d[0]))
            culprits = [first]
            detail["death"] = r
            how = {"oom": "oom", "crash": "crashed with a Python exception", "gpu": "GPU error"}[mode]
        elif dead:
            culprits, how, mode = sorted({d["rank"] for d in dead}), "killed by SIGKILL (host OOM killer suspected)", "killed"
        elif stuck and not set(stuck) & set(first_to):
            culprits, how, mode = stuck, "its NCCL watchdog got stuck (heartbeat monitor)", "stuck"
        elif named:
            culprits, mode = named, named_src
            how = "desync report"
            if named_src == "fingerprint":
                how, detail["fingerprint"] = _fingerprint_how(desync, named)
            weak = len(reporters) <= 1
        elif missing:
            culprits, how, mode = missing, "named as missing by the others' errors", "missing"
            weak = len(missing_by) <= 1
        elif odd:
            culprits, how, mode, weak = odd, odd_how, "odd", odd_weak
            detail["mismatch_seq"] = fail_seq
        elif exited:
            # its death is what the others' lost connection or timeout reports, whenever the
            # launcher noticed it (the exit record comes after their errors)
            r = exited[0]
            culprits, mode = [int(_owner(r))], "exited"
            how = f"exited with {facts.code_phrase(r['exit_code'], r['signal'])} (the launcher's record)"
            detail["death"] = r
        if not culprits and local_deaths:
            # stronger than any inference from silence or lag: the process died of its own error
            r, who_key, what = min(local_deaths, key=lambda d: death_key(d[0]))
            mode = "local"
            how = {"oom": "CUDA OOM", "crash": "crash", "gpu": "GPU error", "killed": "SIGKILL"}[what]
            detail["local"] = {"host": who_key[1], "local_rank": who_key[2], "what": how, "row": r}
        if not culprits and not mode:
            lag, lag_how, own_seq = _laggards(statuses, first_to)
            if lag:
                culprits, how = lag, lag_how
                # a rank that timed out in ANOTHER collective issued a different one (a desync);
                # one that never enqueued the collective simply never arrived (a hang)
                mode = "lag_timeout" if set(lag) <= own_seq else "lag_enqueued"
        if not culprits and not mode and peers and peers.most_common(1)[0][1] * 2 >= len(first_to):
            (top, n), = peers.most_common(1)
            culprits, how, mode, weak = [top], "named as the peer the others wait on", "peer", n <= 1
        if not culprits and not mode and fail_seq is not None:
            never = [r for r, p in progress.items() if r not in first_to and p["max_seq"] is not None
                     and p["max_seq"] < fail_seq]
            if never:
                culprits, how, mode = sorted(never), f"never joined collective #{fail_seq}", "never_joined"
        if not culprits and not mode:
            low_ranks, low, margin = _least_completed(statuses)
            if low_ranks:
                culprits, how, mode, weak = low_ranks, f"last completed work {low} is the smallest", "least_completed", margin <= 1
        if not culprits and not mode:
            silent = [r for r in progress if r not in failed_ranks]
            # a rank the launcher had to stop (its teardown SIGTERM) was still running: of the
            # silent ranks, those it did not have to stop had already left by themselves
            torn = {_owner(r) for r in rows if r["kind"] == "exit" and r["exit_code"] is not None
                    and facts.signal_of(r["exit_code"], r["signal"]) in facts.TEARDOWN_SIGNALS}
            stopped = sorted(r for r in silent if r in torn)
            left = [r for r in silent if r not in torn]
            if stopped and left:
                silent = left
            if silent and to_sorted:
                t_min = min(progress[r]["last_ts"] for r in silent)
                step_ms = ctx.median_step_ms
                # ranks that stopped together (within half a step: one step's skew between ranks,
                # a whole node leaving) are named together; which of them was first, no log shows
                together = (step_ms or 0.0) / 2000
                culprits = sorted(r for r in silent if progress[r]["last_ts"] == t_min or (
                    progress[r]["last_ts"] is not None and t_min is not None
                    and (progress[r]["last_ts"] - t_min).total_seconds() <= together))
                how, mode = "went silent first, without an error of its own", "silent"
                if stopped and left:
                    # what the launcher's teardown says: it had to stop those; these had exited
                    # already, with no failure of their own to record (exit code 0)
                    how = (f"left by itself, without an error of its own: the launcher stopped {ranks_phrase(stopped)} "
                           f"(SIGTERM), not {'it' if len(culprits) == 1 else 'them'} — already exited, no failure recorded")
                # the margin: how much longer the next rank went on logging
                rest = [p["last_ts"] for r, p in progress.items() if p["last_ts"] is not None and r not in culprits]
                gap = (min(rest) - t_min).total_seconds() if rest else None
                weak = gap is None or gap < max(SILENT_MARGIN_S, (step_ms or 0.0) / 2000)
                detail["silent_margin_s"] = round(gap, 3) if gap is not None else None
        if not culprits and not mode and len(first_to) >= 2:
            # nothing tells how far each rank got: a rank that logged before but reports no timeout
            # while every other rank timed out never enqueued the collective they wait in (a rank
            # blocked before it has no pending work for its watchdog to time out)
            quiet = [r for r in ctx.ranks if r not in failed_ranks]
            if quiet and len(quiet) < len(first_to):
                culprits, mode = quiet, "no_timeout"
                how = "the only rank(s) without a timeout of their own: never joined the collective the others waited in"
                weak = len(quiet) > 1
    waiting = {int(r["rank"]) for r in statuses if r["rank"] is not None and r["enqueued"] is not None
               and fail_seq is not None and r["enqueued"] >= fail_seq}
    if fail_seq is None and first_to:
        # no collective number to compare: the ranks that heard of the timeout (the dump signal)
        # and are not its culprit were in the job's collectives, waiting like the one that fired
        waiting |= {int(r["rank"]) for r in rows if r["kind"] == "status" and r.get("event") == "NCCL_DUMP_SIGNAL"
                    and r["rank"] is not None}
    victims = sorted((set(first_to) | waiting) - set(culprits))

    # -- the launcher's cascade: kills and exits after the first failure ---------------------------
    # (a process's exit shows several times: the agent's line, the table record, its signal)
    first_fail = min([*(first_oom.values()), *crashes.values(), *gpus.values(), *to_sorted, *(d["rows"][0] for d in killed)],
                     key=_key, default=None)
    killed_rows = {id(r) for d in killed for r in d["rows"]}
    cascade = [r for r in rows if id(r) not in killed_rows and first_fail is not None and _key(r) >= _key(first_fail)
               and (r["kind"] == "exit" or r["kind"] == "kill" and r["by"] in LAUNCHERS)]

    # -- OOM findings ---------------------------------------------------------------------------
    for who_key, r in sorted(first_oom.items(), key=lambda kv: death_key(kv[1])):
        rank = who_key if isinstance(who_key, int) else None
        later, delay = _later_phrase(r, first_to, rank)
        where = _who(rank, r)
        step = f" at step {r['step']}" if r["step"] is not None else ""
        mine = all_oom.get(who_key, [])
        # one OOM is often reported by several sources (the JSONL event, the console traceback):
        # the occurrences are those of the file that reports the most of them
        # (a JSON-lines file holding the event and the traceback written after it to stderr: the
        # traceback's exception line is the same OOM, counted only where there is no event)
        typed = [x for x in mine if x["event"] == "CUDA_OOM"]
        typed = [x for x in typed if x.get("traceback_head") is None] or typed
        per_file = Counter(x["source_file"] for x in typed) or Counter(x["source_file"] for x in mine)
        n = max(per_file.values(), default=1)
        # the failing process's pid, where the launcher's records of this rank give it
        own_pids = {int(q["pid"]) for q in rows if q["pid"] is not None and q["kind"] in ("oom", "exit", "kill")
                    and _owner(q) == who_key and who_key is not None}
        shared = _shared_gpu(mine, own_pids)
        tail, kills, ex = _cascade_tail(cascade, r)
        title = (f"{where} ran out of GPU memory (CUDA OOM){step}{_oom_detail(r['message'])}"
                 + (f", {n} times" if n > 1 else "") + _shared_phrase(shared) + delay + tail)
        out.append(Finding(
            rule=pass_id("failures"), kind="oom", layer="resource", severity="ERROR",
            ranks=[] if rank is None else [rank], victims=later, title=title,
            basis=_basis(r) if who_key is not None else None, local_ranks=_local(r),
            evidence={"step": r["step"], "message": shorten(r["message"], 300), "victims": later, "occurrences": n,
                      **({} if r["exact"] else {"time_of_its_own": False}),
                      **(shared or {}),
                      "cascade": {"launcher_kills": len(kills), "failed_exits": len(ex)} if kills or ex else None,
                      **records.evidence(r)},
            lines=cite([_ev_row(r)] + [_ev_row(q) for q in records.cited(r)] + [_ev_row(first_to[k]) for k in later[:2]]
                       + [_ev_row(c) for c in (kills[:1] + ex[:1])], text="text"),
            first_seen=iso(r["t_show"]), last_seen=iso(mine[-1]["t_show"] if mine else r["t_show"]),
        ))

    # -- a rank killed by its own Python exception, or by its GPU -------------------------------
    for who_key, r in sorted(gpus.items(), key=lambda kv: death_key(kv[1])):
        out.append(_death_finding("gpu_error", who_key, r, first_to, cascade, rows))
    for who_key, r in sorted(crashes.items(), key=lambda kv: death_key(kv[1])):
        # an exception that means host memory (DefaultCPUAllocator, a DataLoader worker the OOM
        # killer took, MemoryError) is a host OOM, not a plain crash
        # (a DataLoader's "exited unexpectedly" raised from its worker's kill is that kill)
        r = worker_cause(r, rows) or r
        out.append(_death_finding("host_oom" if r.get("meaning") == "host_oom" and r.get("meaning_role") == "own" else "crash",
                                  who_key, r, first_to, cascade, rows))
    # -- ranks that failed of their own error before any sign of the cascade: all are culprits ---
    own_deaths = [(r, k, m) for m, d in (("oom", first_oom), ("crash", crashes), ("gpu", gpus)) for k, r in d.items()]
    if (others := independent(own_deaths, rows)):
        first = min(((r, k) for r, k, _m in own_deaths if isinstance(k, int)), key=lambda d: death_key(d[0]))
        f = next((f for f in out if f.ranks == [first[1]] and first[0]["line"] in [e.line for e in f.lines[:1]]), None)
        if f is not None:
            name_all(f, others)
    if first_fail is None and not cancels:
        out += _failed_exit(rows, ctx)
    elif mode == "exited":
        # the culprit's own exit is the crash (its records only: the others' exits are the cascade)
        pid = detail["death"]["pid"]
        out += _failed_exit([r for r in rows if r["kind"] != "exit" or _owner(r) == culprits[0]
                             or (pid is not None and r["pid"] == pid)], ctx)

    # -- processes killed from outside Python ----------------------------------------------------
    for d in killed:
        is_culprit = (mode == "killed" and d["rank"] in culprits) or (
            mode == "local" and detail["local"]["what"] == "SIGKILL" and d["rank"] is None
            and (d["host"], d["local_rank"]) == (detail["local"]["host"], detail["local"]["local_rank"]))
        out.append(_host_oom_finding(d, t_first_to if is_culprit else None, victims if is_culprit else []))

    out += stuck_out

    # -- the scheduler ended the job -------------------------------------------------------------
    if cancels:
        out.append(_cancel_finding(cancels, rows, alone=first_fail is None and not killed))
    if first_fail is None and not killed:
        out += stopped_hang(ctx, rows, progress)    # stopped from outside: was a rank already stuck?

    if not first_to and not first_oom and not crashes and not gpus and not killed and not cancels and not stuck:
        out += _local_hang(ctx, rows)
    if first_to:
        out.extend(_timeout_findings(first_to, to_sorted, culprits, how, mode, weak, victims, failed_ranks, progress,
                                     desync, tos, fail_seq, detail))
    _launcher_first_observed(out, rows)
    restart.mark(ctx, out)
    return out
