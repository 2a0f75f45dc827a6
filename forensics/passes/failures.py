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
  5. a rank whose sequence number lags: its own timeout is at a lower SeqNum [own_error], or its
     watchdog status ("Last enqueued NCCL work: 40" in the dump-signal report every rank prints)
     shows it never enqueued the collective the others time out in [never_joined];
  6. the rank the timeout messages say they wait on ("rank=1 waiting on rank=2") [named_by_peers];
  7. the rank whose last logged collective sequence number is below the failing SeqNum [never_joined];
  8. the rank whose "last completed work" is smallest (the laggard) [never_joined];
  9. the rank that went silent first without an error of its own [last_to_log; weak when the
     next rank stopped logging within a second or half a step of it].
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
- An earlier root is never replaced by the later failures it caused: rootcause.py orders
  failures by time, and this pass attributes the cascade to the first failure.

Times: failures are compared on the common clock (Context.clock_offsets: hosts' clocks disagree
by milliseconds to seconds, enough to put a victim's timeout before the OOM that caused it).
Console lines often carry no time (a Python traceback): such a line is placed at the time of the
nearest timestamped line above it in its file (below it if none), and ties keep file order.

Must not: decide the root cause across layers (rootcause.py).
"""
from __future__ import annotations

import datetime as dt
import re
from collections import Counter, defaultdict
from typing import Any

import orjson
import polars as pl

from .. import failure_facts as facts
from .. import failure_rows
from ..collective_text import DESYNC_TEXT, FP_ASPECTS, MISMATCH_TEXT, desync_ranks, fingerprint_diff, mismatch_pairs
from ..report.model import Finding, local_ranks_phrase
from ..report.fmt import memory
from .context import Context
from .evidence import cite, iso, pass_id, rank_ranges, ranks_phrase, shorten

OOM_RE = r"(?i)CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|\bCUDA_OOM\b"
TIMEOUT_RE = (r"(?i)watchdog caught collective operation timeout|collective operation timeout|timed out|"
              r"Timeout\(ms\)|waiting on rank|connection (?:reset|closed) by (?:remote )?peer|communicator was aborted|"
              r"DistBackendError|NCCL error|remote process exited|socket timeout|NCCL_TIMEOUT|"
              # a peer's death seen from this side of the socket (gloo / c10d store): a victim's error
              r"Broken pipe|Connection refused|DistNetworkError|DistStoreError")
# The device failed (CUDA's sticky errors, the driver's Xid, ECC): the rank whose error says so.
# A device-side assert is the program's own check failing (an index out of range): a crash.
GPU_RE = (r"(?i)illegal memory access|unspecified launch failure|uncorrectable ECC|ECC error|NVRM: Xid|\bXid\b|"
          r"fallen off the bus|misaligned address|illegal instruction|hardware stack error|launch timed out|"
          # NCCL's ncclUnhandledCudaError: a CUDA call inside NCCL failed on THIS rank (a peer's
          # death is ncclRemoteError / ncclSystemError, a victim's error)
          r"unhandled cuda error|ncclUnhandledCudaError")
# Exceptions raised by a teardown, not by the program: not a crash of their own.
TEARDOWN_RE = r"SignalException|KeyboardInterrupt|SystemExit|got signal|ChildFailedError"
# the desync report's and the fingerprint mismatch's text: forensics/collective_text.py
DESYNC_RE = DESYNC_TEXT
COMPLETED_RE = r"(?i)last completed (?:\w+ )?work:\s*(-?\d+)"
ENQUEUED_RE = r"(?i)last enqueued (?:\w+ )?work:\s*(-?\d+)"
MISMATCH_RE = MISMATCH_TEXT
# Typed events whose `extra` the pass reads (only these rows' extra is kept, and any row whose
# extra names the ranks an error says did not arrive: `missing_ranks`).
TYPED = ["NCCL_TIMEOUT", "NCCL_WATCHDOG", "NCCL_DUMP_SIGNAL", "CUDA_OOM", "CHILD_FAILED", "PROCESS_KILLED",
         "JOB_CANCELLED", "HOST_OOM_KILL", "BARRIER_TIMEOUT", "NCCL_DESYNC", "COLLECTIVE_MISMATCH", "TRACEBACK",
         "GPU_XID", "CUDA_ERROR"]
LAUNCHERS = ("launcher", "deepspeed launcher")
# Launchers whose exit record names no rank (DeepSpeed's line quotes the LAST spawned command;
# srun names a task): the exit is still a worker's, reported as "a rank the log does not name".
REPORTERS = ("deepspeed launcher", "slurm")
# Events that are not a rank's own error though at ERROR: a console reader's plain line or a
# traceback's body (the TRACEBACK head is the error), and the events a rule of their own reads
# (rules/data/data_load_error.toml).
OWN_ERROR_EXCLUDED = ["LOG", "TRACEBACK_CONT", "DATA_LOAD_ERROR"]
# Collectives where every rank sends a tensor of the same size (all-to-all and uneven
# all-gather legitimately differ per rank).
SAME_SIZE_RE = re.compile(r"(?i)all_?reduce|broadcast")

_SEQ = re.compile(r"(?i)(?:SeqNum=|seq(?:uence)?(?: id)?[=: ]\s*#?|collective #)(\d+)")
_PEER = re.compile(r"(?i)waiting (?:on|for) rank[= ]?(\d+)")
_TRIED = re.compile(r"(?i)Tried to allocate ([\d.]+ ?[KMGT]i?B)")
_IN_USE = re.compile(r"(?i)this process has ([\d.]+ ?[KMGT]i?B) memory in use")
_OP = re.compile(r"OpType=(\w+)")
_NUMEL = re.compile(r"NumelIn=(-?\d+)")


def _candidates(ctx: Context) -> pl.LazyFrame:
    """Rows that may be failures (`failure_rows`): WARN/ERROR lines, or events whose name says so.

    Cheap first: the message regexes of `_classify` then run on these rows only, not on every
    INFO line of a GB-scale store. A store's are read from its FAILURES summary, written at
    ingest: finding them in the events decompresses every page of message and extra (0.8 CPU s
    on the 64-rank bench store).
    """
    if ctx.run is not None:
        from ..summaries import failures

        cand = failures(ctx.run).lazy()
    else:
        cand = failure_rows.rows(ctx.events)
    ev = pl.col("event")
    # an error of any name keeps its extra: the exception it carries (failure_facts.exception_of);
    # a line whose text is under another key than the message (`text`, `msg`, `error`, in the
    # record's other fields; structlog's `event` is its message) is classified by that text
    return ctx.aligned(
        cand.with_columns(pl.when(ev.is_in(TYPED) | pl.col("extra").str.contains("missing_ranks", literal=True)
                                  | (pl.col("level") == "ERROR") | pl.col("extra").str.contains(facts.EXC_FIELD_RE))
                          .then(pl.col("extra")).alias("extra"),
                          pl.coalesce("message", *facts.text_of("fields"), *facts.text_of("extra"),
                                      pl.when(ev.str.contains(" ", literal=True)).then(ev)).alias("message"))
    )


def _classify(df: pl.DataFrame) -> pl.DataFrame:
    """kind per candidate row: oom / gpu / timeout / status / exit / kill / cancel / traceback /
    info, with the watchdog numbers (`completed`, `enqueued`) and the fields of typed events."""
    msg = pl.col("message").fill_null("")
    ev = pl.col("event").fill_null("")
    err = pl.col("level") == "ERROR"
    j = pl.col("extra").str.json_path_match
    is_exit = ev == "CHILD_FAILED"
    is_kill = ev.is_in(["PROCESS_KILLED", "HOST_OOM_KILL"])
    is_cancel = ev == "JOB_CANCELLED"
    is_status = ev == "NCCL_DUMP_SIGNAL"
    process = is_exit | is_kill | is_cancel
    is_oom = ~process & (ev.str.contains("(?i)OOM") | msg.str.contains(OOM_RE))
    is_desync = msg.str.contains(DESYNC_RE)
    # the device's own failure: typed by the reader, or the text of an error line / a traceback
    is_gpu = ~process & ~is_oom & ((ev == "GPU_XID") | ((ev == "CUDA_ERROR") & ~msg.str.contains("(?i)device-side assert"))
                                   | (err & msg.str.contains(GPU_RE)))
    # a collective that fails (timeout, lost peer, or a mismatch caught by DETAIL debug checks)
    is_timeout = ~is_oom & ~is_gpu & ~process & ~is_status & (
        ev.str.contains("(?i)TIMEOUT|WATCHDOG|MISMATCH") | (err & (msg.str.contains(TIMEOUT_RE) | msg.str.contains(MISMATCH_RE))))
    is_tb = (ev == "TRACEBACK") & (pl.col("rank").is_not_null() | pl.col("local_rank").is_not_null())
    # an event of any name at ERROR, or carrying an exception, is its rank's own error (a
    # console line is typed by its reader: its plain lines and a traceback's body are not)
    has_exc = (pl.col("extra").str.contains(facts.EXC_FIELD_RE) | pl.col("fields").str.contains(facts.EXC_FIELD_RE)).fill_null(False)
    is_own = ~ev.is_in(OWN_ERROR_EXCLUDED) & ~ev.str.contains(failure_rows.NAMED_RE) & (err | has_exc)
    completed = pl.coalesce(j("$.last_completed").cast(pl.Int64, strict=False),
                            msg.str.extract(COMPLETED_RE, 1).cast(pl.Int64, strict=False))
    enqueued = pl.coalesce(j("$.last_enqueued").cast(pl.Int64, strict=False),
                           msg.str.extract(ENQUEUED_RE, 1).cast(pl.Int64, strict=False))
    # lazily: the flags recur in one another and in the kind (is_oom in five places); a query
    # evaluates each once (eagerly each use ran its regex again: 0.074 -> 0.022 s on m64's rows)
    return (
        df.lazy().with_columns(completed.alias("completed"), enqueued.alias("enqueued"))
        .filter(is_oom | is_gpu | is_desync | is_timeout | is_status | process | is_tb | is_own | pl.col("completed").is_not_null()
                | pl.col("extra").str.contains("missing_ranks", literal=True).fill_null(False))
        .with_columns(
            pl.when(is_oom).then(pl.lit("oom")).when(is_gpu).then(pl.lit("gpu")).when(is_timeout).then(pl.lit("timeout"))
            .when(is_status).then(pl.lit("status")).when(is_exit).then(pl.lit("exit"))
            .when(is_kill).then(pl.lit("kill")).when(is_cancel).then(pl.lit("cancel"))
            .when(is_tb).then(pl.lit("traceback")).when(is_desync).then(pl.lit("desync"))
            .when(is_own).then(pl.lit("traceback"))
            .otherwise(pl.lit("info")).alias("kind"),
            is_desync.alias("desync"),
            pl.coalesce(pl.col("seq"), j("$.seq").cast(pl.Int64, strict=False),
                        msg.str.extract(r"SeqNum=(\d+)", 1).cast(pl.Int64, strict=False)).alias("seq"),
            pl.coalesce(pl.col("process_group"), j("$.pg")).alias("process_group"),
            pl.coalesce(pl.col("exit_code"), j("$.exitcode").cast(pl.Int64, strict=False)).alias("exit_code"),
            pl.coalesce(pl.col("collective"), msg.str.extract(_OP.pattern, 1)).alias("collective"),
            pl.coalesce(j("$.numel_in").cast(pl.Int64, strict=False),
                        msg.str.extract(_NUMEL.pattern, 1).cast(pl.Int64, strict=False)).alias("numel_in"),
            j("$.signal").alias("signal"),
            pl.when(ev == "HOST_OOM_KILL").then(pl.lit("oom_killer")).otherwise(j("$.by")).alias("by"),
            j("$.pid").cast(pl.Int64, strict=False).alias("pid"),
            (j("$.first_observed") == "true").fill_null(False).alias("first_observed"),
            j("$.missing_ranks").alias("missing_ranks"),
            j("$.traceback").cast(pl.Int64, strict=False).alias("traceback_head"),
        )
        .collect()
    )


def _placed(ctx: Context, df: pl.DataFrame) -> pl.DataFrame:
    """`t_order`, the time failures are compared by (on the common clock), and `t_show`, the one
    a finding states.

    A line without a time (a traceback) was printed after the nearest timestamped line above it
    in its file (`lo`) and before the nearest one below it (`hi`); 1 µs per line from that line
    keeps file order among lines placed from one anchor. A possible cause (OOM, kill, exit) is
    compared at the earliest time it can have happened (`lo`), a timeout at the latest (`hi`,
    unbounded — null, sorted last — with no timestamped line below it): interleaved output of
    dying ranks must not make a victim look earlier than the fault it may follow. Only a line
    between them that carries a time puts a victim's error before an OOM.
    `exact` says the line carried its own time (it wins over an untimed copy of the same failure).

    Only the files holding untimed failure lines are scanned (structured logs never need it)."""
    df = df.with_columns(pl.col("ts_aligned").is_not_null().alias("exact"))
    need = df.filter(pl.col("ts_aligned").is_null() & pl.col("source_file").is_not_null())
    if need.is_empty():
        return df.with_columns(pl.col("ts_aligned").alias("t_order"), pl.col("ts_aligned").alias("t_show"))
    files = need.get_column("source_file").unique().to_list()
    anchors = (
        ctx.aligned(ctx.events.select("rank", "host", "timestamp", "source_file", "line")
                    .filter(pl.col("source_file").is_in(files) & pl.col("timestamp").is_not_null()))
        .select("source_file", "line", pl.col("line").alias("a_line"), pl.col("ts_aligned").alias("t_anchor"))
        .sort("line").collect()
    )
    keys = need.select("source_file", "line").unique().sort("line")
    step = pl.duration(microseconds=1)
    back = keys.join_asof(anchors, on="line", by="source_file", strategy="backward", check_sortedness=False)
    fwd = keys.join_asof(anchors, on="line", by="source_file", strategy="forward", check_sortedness=False)
    pos = back.select("source_file", "line", (pl.col("t_anchor") + step * (pl.col("line") - pl.col("a_line"))).alias("lo")).join(
        fwd.select("source_file", "line", (pl.col("t_anchor") - step * (pl.col("a_line") - pl.col("line"))).alias("hi")),
        on=["source_file", "line"])
    timeout = pl.col("kind") == "timeout"
    return (
        df.join(pos, on=["source_file", "line"], how="left", nulls_equal=True)
        .with_columns(pl.when(timeout).then(pl.coalesce("ts_aligned", "hi"))
                      .otherwise(pl.coalesce("ts_aligned", "lo", "hi")).alias("t_order"),
                      pl.when(timeout).then(pl.coalesce("ts_aligned", "hi", "lo"))
                      .otherwise(pl.coalesce("ts_aligned", "lo", "hi")).alias("t_show"))
        .drop("lo", "hi")
    )


def _progress_rows() -> pl.Expr:
    """The events that show training progress: a step-carrying, non-ERROR line of a rank."""
    return pl.col("rank").is_not_null() & pl.col("step").is_not_null() & (pl.col("level") != "ERROR")


def _progress_maxima(ctx: Context) -> pl.LazyFrame:
    """Per (rank, host): its highest step and seq among its progress events. Without their
    times: `_progress_last` reads those from the end of the run only."""
    return (
        ctx.events.select("rank", "host", "level", "step", "seq")
        .filter(_progress_rows())
        .group_by("rank", "host")
        .agg(pl.col("step").max(), pl.col("seq").max())
    )


def _progress_last(ctx: Context, since: dt.datetime | None) -> pl.LazyFrame:
    """Per (rank, host) with a progress event at or after `since` (None: any): the time of its
    last one and the line to cite, its first in store order at that time. The bound lets the
    scan skip the row groups (a rank's earlier hours) whose statistics end before it."""
    ts = pl.col("timestamp")
    at_last = ts == ts.max()
    return (
        ctx.events.select("rank", "host", "timestamp", "level", "step", "source_file", "line")
        .filter(_progress_rows() & (ts >= since if since is not None else pl.lit(True)))
        .group_by("rank", "host", maintain_order=True)
        .agg(ts.max(), pl.col("source_file").filter(at_last).first(), pl.col("line").filter(at_last).first())
    )


def _progress_since(ctx: Context) -> dt.datetime | None:
    """Where the last progress events of the ranks likely are: the earliest start of a rank's
    last step in the step table, widened by the largest clock offset (it is on the common clock,
    the events on their host's). A guess: `_progress` checks it and reads everything when wrong."""
    s = ctx.steps
    if s.is_empty():
        return None
    last = s.filter(pl.col("step") == pl.col("step").max().over("rank"))
    off = pl.duration(microseconds=(pl.col("clock_offset_ms").abs().max() * 1000).ceil().cast(pl.Int64))
    return last.select(pl.col("t_start").min() - off).item()


def _progress(ctx: Context, maxima: pl.DataFrame, last: pl.DataFrame) -> pl.DataFrame:
    """Per rank: last training-progress event (a step-carrying, non-ERROR line) and its seq.

    Reduced per (rank, host) on the logged time first (`_progress_maxima`, `_progress_last`: one
    host's events share one clock offset, so its latest event is the same on either clock),
    then per rank on the common clock: the offsets are applied to a row per (rank, host), not
    to every event. `last` holds the times of the (rank, host)s that logged progress after a
    bound (`_progress_since`); when one is missing (it stopped before), they are read again
    from every event."""
    if last.height < maxima.height:
        last = _progress_last(ctx, None).collect()
    per_host = maxima.join(last, on=["rank", "host"], how="left", nulls_equal=True)
    at = pl.col("ts_aligned").arg_max()
    return (
        ctx.aligned(per_host.lazy())
        .group_by("rank")
        .agg(
            pl.col("ts_aligned").max().alias("last_ts"),
            pl.col("step").max().alias("last_step"),
            pl.col("seq").max().alias("max_seq"),
            pl.col("source_file").get(at).alias("file"),
            pl.col("line").get(at),
        )
        .sort("rank")
        .collect()
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


def _desync_ranks(rows: list[dict[str, Any]]) -> tuple[list[int], str, set[int]]:
    """Ranks a desync report names ("report"); or, from CollectiveFingerPrint mismatch errors
    ("Rank 1 is running collective: …, but Rank 3 is running collective: …"), the rank in every
    pair ("fingerprint"): each rank compares itself with the others, so the odd one out is named
    by all of them. `reporters`: the ranks whose lines named them (one reporter is a weak basis)."""
    out: set[int] = set()
    reporters: set[int] = set()
    pairs: Counter[int] = Counter()
    pair_reporters: set[int] = set()
    n_pairs = 0
    for r in rows:
        text = r.get("message") or ""
        named = desync_ranks(text)
        if named:
            out.update(named)
            if r.get("rank") is not None:
                reporters.add(int(r["rank"]))
        for a, _fa, b, _fb in mismatch_pairs(text):
            pairs.update({a, b})
            n_pairs += 1
            if r.get("rank") is not None:
                pair_reporters.add(int(r["rank"]))
    if out:
        return sorted(out), "report", reporters
    if n_pairs:
        top = max(pairs.values())
        if top == n_pairs and (n_pairs > 1 or len(pairs) == 1):
            odd = {k for k, c in pairs.items() if c == top}
            return sorted(odd), "fingerprint", (pair_reporters - odd) or pair_reporters
    return [], "", set()


def _fingerprint_how(rows: list[dict[str, Any]], odd: list[int]) -> tuple[str, dict[str, Any] | None]:
    """How the odd rank's collective differs, from the first mismatch error that compares it with
    a rank of the majority: "rank 2's ALLREDUCE #40 has tensor dtype Half where rank 0's has
    Float" (op type, sequence number, shape or dtype, as compute_collective_diff lists them)."""
    for r in rows:
        for a, fa, b, fb in mismatch_pairs(r.get("message") or ""):
            if (a in odd) == (b in odd):
                continue
            (o, fo), (p, fp) = ((a, fa), (b, fb)) if a in odd else ((b, fb), (a, fa))
            diff = fingerprint_diff(fo, fp)
            if not diff:
                continue
            names = dict(FP_ASPECTS)

            def show(k: str, fpr: dict[str, Any]) -> str:
                v = fpr[k]
                return ", ".join(map(str, v)) if k == "dtypes" else (f"[{', '.join(map(str, v))}]" if k == "shape" else str(v))

            what = f"rank {o}'s {fo.get('op', 'collective')}" + (f" #{fo['seq']}" if "seq" in fo else "")
            parts = [f"{names[k]} {show(k, fo)} where rank {p}'s has {show(k, fp)}" for k in diff]
            return (f"collective fingerprints differ: {what} has {'; '.join(parts)}",
                    {"rank": o, "fingerprint": fo, "peer": p, "peer_fingerprint": fp, "differ": diff,
                     "where": f"{r.get('source_file')}:{r.get('line')}"})
    return "collective fingerprints differ", None


def _missing_ranks(rows: list[dict[str, Any]]) -> tuple[list[int], set[int]]:
    """Ranks an error names as not arriving (a barrier's or collective's timeout, a desync report,
    read by the console reader into extra.missing_ranks), and the ranks whose errors name them.
    A rank that names itself is not counted."""
    out: set[int] = set()
    reporters: set[int] = set()
    for r in rows:
        raw = r.get("missing_ranks")
        if not raw:
            continue
        try:
            vals = orjson.loads(raw) if isinstance(raw, str) else raw
        except orjson.JSONDecodeError:
            continue
        named = {int(v) for v in (vals if isinstance(vals, list) else [vals]) if isinstance(v, (int, str)) and str(v).lstrip("-").isdigit()}
        named.discard(r["rank"] if r.get("rank") is not None else -1)
        if named:
            out |= named
            if r.get("rank") is not None:
                reporters.add(int(r["rank"]))
    return sorted(out), reporters


def _odd_collective(tos: list[dict[str, Any]], fail_seq: int | None) -> tuple[list[int], str, bool]:
    """Ranks whose timed-out collective at the failing SeqNum differs from the majority's
    (another OpType, or another NumelIn where sizes must agree). Needs >= 3 ranks to have a
    majority; returns ([], "", False) when all agree. The flag says the majority is only two
    ranks (a weak basis)."""
    if fail_seq is None:
        return [], "", False
    sig: dict[int, tuple[str | None, int | None]] = {}
    for r in tos:
        if r["rank"] is None or _seq_of(r) != fail_seq or r.get("collective") is None:
            continue
        op = str(r["collective"]).upper()
        size = r.get("numel_in") if SAME_SIZE_RE.search(op) else None
        sig.setdefault(int(r["rank"]), (op, size))
    if len(sig) < 3:
        return [], "", False
    (top, n), = Counter(sig.values()).most_common(1)
    if n * 2 <= len(sig) or n == len(sig):
        return [], "", False
    odd = sorted(k for k, s in sig.items() if s != top)
    theirs = sorted({s for k, s in sig.items() if s != top}, key=str)

    def fmt(s: tuple[str | None, int | None]) -> str:
        return f"{s[0]}" + (f" NumelIn={s[1]}" if s[1] is not None else "")

    return odd, (f"runs {', '.join(fmt(s) for s in theirs)} at SeqNum {fail_seq} while the others run {fmt(top)}"), n < 3


def _pg_scoped(rows: list[dict[str, Any]]) -> dict[str | None, list[dict[str, Any]]]:
    """Rows by process group. Sequence numbers count per group, so they are compared within one;
    rows that do not name their group join the only group named, if exactly one is."""
    named = {r["process_group"] for r in rows if r.get("process_group") is not None}
    out: dict[str | None, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        pg = r.get("process_group")
        out[pg if pg is not None else (next(iter(named)) if len(named) == 1 else None)].append(r)
    return out


def _oom_detail(msg: str | None) -> str:
    msg = msg or ""
    bits = []
    if m := _TRIED.search(msg):
        bits.append(f"tried to allocate {m.group(1)}")
    if m := _IN_USE.search(msg):
        bits.append(f"{m.group(1)} in use")
    return f" ({', '.join(bits)})" if bits else ""


def _shared_gpu(rows: list[dict[str, Any]], own_pids: set[int]) -> dict[str, Any] | None:
    """Who else holds memory on the GPU of an OOM, from the allocator's message.

    Fact (c10/cuda/CUDACachingAllocator.cpp, reportProcessMemoryInfo): the message lists every
    process NVML sees on the device, the failing one included; it is written "Including non-PyTorch
    memory, this process has X memory in use" only when NVML's pid equals the process's getpid(),
    else "Process N has X memory in use". In a container (its own pid namespace) the two differ,
    so the failing process itself appears as "Process N". Hence: "Process N" lines are OTHER
    processes only when the message also has the "this process" line, or when the failing
    process's pid is known from the logs (`own_pids`: the launcher's record of that rank) and
    excluded. Otherwise sharing is unknown and not claimed.

    Returns, for the OOM that saw the most memory held by others (or the first one), the listed
    processes, the failing pid if known, and `shared_gpu`: True / False / None (unknown)."""
    best: dict[str, Any] | None = None
    for r in rows:
        if not r.get("extra"):
            continue
        try:
            x = orjson.loads(r["extra"])
        except orjson.JSONDecodeError:
            continue
        listed = [o for o in x.get("other_processes") or [] if isinstance(o, dict) and o.get("mb") is not None]
        this_mb = x.get("process_mb")
        if not listed and this_mb is None:
            continue
        mine = [o for o in listed if o.get("pid") in own_pids]
        known = this_mb is not None or bool(mine)
        others = [o for o in listed if o not in mine] if known else []
        held = float(sum(o["mb"] for o in others))
        d = {"shared_gpu": bool(others) if known else None,
             "other_processes": len(others) if known else None,
             "other_processes_mb": round(held, 1) if known else None,
             "listed_processes": [{"pid": o.get("pid"), "mb": o["mb"]} for o in listed],
             "failing_pid": mine[0].get("pid") if mine else None,
             "failing_process_identified": known,
             "gpu_total_mb": x.get("total_mb"), "device": x.get("device"),
             "process_mb": this_mb if this_mb is not None else (mine[0]["mb"] if mine else None)}
        if best is None or (known and (best["other_processes_mb"] or 0) < held):
            best = d
    return best


def _shared_phrase(shared: dict[str, Any] | None) -> str:
    if not shared:
        return ""
    gpu = f"GPU {shared['device']}" if shared["device"] is not None else "its GPU"
    listed = shared["listed_processes"]
    if shared["shared_gpu"]:
        n = shared["other_processes"]
        total = f" of {memory(shared['gpu_total_mb'])}" if shared["gpu_total_mb"] else ""
        return (f"; {gpu} is shared: {n} other process{'es' if n != 1 else ''} "
                f"hold{'s' if n == 1 else ''} {memory(shared['other_processes_mb'])}{total}")
    if shared["shared_gpu"] is None and listed:
        pids = ", ".join(f"pid {o['pid']} {memory(o['mb'])}" for o in listed[:4])
        if len(listed) == 1:
            return (f"; the allocator lists one process on {gpu} ({pids}): most likely the failing process "
                    f"itself (its own pid is not in the log), not another job")
        return (f"; the allocator lists {len(listed)} processes on {gpu} ({pids}); the failing process's own pid "
                f"is not in the log, so whether another job shared the GPU is not known")
    return ""


def _ev_row(r: dict[str, Any], text: str | None = None) -> dict[str, Any]:
    return {"source_file": r["source_file"], "line": r["line"], "rank": r["rank"],
            "timestamp": r.get("logged_ts", r["timestamp"]), "text": text or shorten(r.get("message") or r.get("event"), 140)}


def _key(r: dict[str, Any]) -> tuple:
    """Order of failure rows: time on the common clock (placed), then file order."""
    t = r["timestamp"]
    return (t is None, t or dt.datetime.min.replace(tzinfo=dt.timezone.utc), r["source_file"] or "", r["line"] or 0)


def _processes(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per process: the agent's line, the table record and the signal of one exit name the
    same pid (rows without a pid count each)."""
    seen: set[int] = set()
    out = []
    for r in rows:
        if r["pid"] is not None:
            if r["pid"] in seen:
                continue
            seen.add(r["pid"])
        out.append(r)
    return out


def _first(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The first of one rank's reports of a failure: the earliest that carried its own time,
    else the earliest placed one (a placed time is only a bound)."""
    exact = [r for r in rows if r["exact"]]
    return min(exact or rows, key=_key)


def _killed_without_traceback(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Processes that died of SIGKILL (exit code -9, "Signal 9 (SIGKILL) received", "Killed",
    the kernel's OOM-killer line) that nobody in the logs killed on purpose: not the launcher
    (it signals the pid first), not the scheduler (job cancelled first), and, where the rank is
    known, without a Python error of that rank before it. One entry per process."""
    launcher_pids = {r["pid"]: r for r in rows if r["kind"] == "kill" and r["by"] in LAUNCHERS and r["pid"] is not None}
    launcher_any = [r for r in rows if r["kind"] == "kill" and r["by"] in LAUNCHERS]
    cancels = [r for r in rows if r["kind"] == "cancel"]
    groups: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        # a launcher's kills are its teardown; its exit record is the worker's own end (DeepSpeed's
        # "exits with return code = -9" reports the process that failed)
        if r["kind"] not in ("exit", "kill") or (r["by"] in LAUNCHERS and r["kind"] == "kill"):
            continue
        sigkill = facts.signal_of(r["exit_code"], r["signal"]) == "SIGKILL" or r["by"] == "oom_killer"
        if sigkill:
            groups[r["pid"] if r["pid"] is not None else ("line", r["source_file"], r["line"])].append(r)
    out = []
    for key, grp in groups.items():
        grp.sort(key=_key)
        first = grp[0]
        rank = next((int(r["rank"]) for r in grp if r["rank"] is not None), None)
        confirmed = any(r["by"] == "oom_killer" for r in grp)
        pid = first["pid"]
        if not confirmed:
            sent = launcher_pids.get(pid) if pid is not None else next((k for k in launcher_any if k["pid"] is None), None)
            if sent is not None and _key(sent) <= _key(first):
                continue            # the launcher's own teardown
            if any(_key(c) <= _key(first) for c in cancels) or (cancels and any(r["by"] == "slurm" for r in grp)):
                # the scheduler cancelled the job (srun reports the tasks it killed, often printed
                # before slurmstepd's CANCELLED line, and without a time of its own)
                continue
            if rank is not None and any(r["rank"] == rank and r["kind"] in ("oom", "gpu", "traceback", "timeout")
                                        and _key(r) <= _key(first) for r in rows):
                continue            # it died of its own error (or was torn down after it)
        local = next((r["local_rank"] for r in grp if r["local_rank"] is not None), None)
        host = next((r["host"] for r in grp if r["host"] is not None), None)
        out.append({"rank": rank, "pid": pid, "local_rank": local, "host": host, "confirmed": confirmed,
                    "basis": next((r.get("rank_basis") for r in grp if r["rank"] is not None), None),
                    "exit_code": next((r["exit_code"] for r in grp if r["exit_code"] is not None), None),
                    "rows": grp, "timestamp": first["t_show"]})
    out.sort(key=lambda d: _key(d["rows"][0]))
    return out


def _host_oom_finding(d: dict[str, Any], t_first: dt.datetime | None, victims: list[int]) -> Finding:
    who = (f"rank {d['rank']}" if d["rank"] is not None
           else local_ranks_phrase(_local(d)) if d["local_rank"] is not None else "a worker process")
    on_host = f" on {d['host']}" if d["host"] and not (d["rank"] is None and d["local_rank"] is not None) else ""
    pid = f" (pid {d['pid']}{on_host})" if d["pid"] is not None else ""
    code = (f"exit code {d['exit_code']}" + (" = 128+9, a shell's" if (d["exit_code"] or 0) > 128 else "")
            if d["exit_code"] is not None else "SIGKILL")
    if d["confirmed"]:
        title = f"{who}{pid} was killed by the kernel's out-of-memory killer (host RAM, not GPU memory)"
    else:
        title = (f"{who}{pid} was killed by SIGKILL ({code}) without a Python traceback: the host's "
                 f"out-of-memory killer is suspected (check `dmesg -T | grep -i 'killed process'`"
                 + (f" on {d['host']})" if d["host"] else ")"))
    if victims:
        title += f"; {ranks_phrase(victims)} then lost it in their collectives"
    t = d["timestamp"]
    if t_first is not None and (t is None or t_first < t):
        t = t_first     # it died before the others noticed; the launcher reports it later
    return Finding(
        rule=pass_id("failures"), kind="host_oom", layer="resource", severity="ERROR",
        ranks=[] if d["rank"] is None else [d["rank"]], victims=victims, title=title,
        basis=d.get("basis") or "own_error" if d["rank"] is not None or d["local_rank"] is not None else None,
        local_ranks=_local(d) if d["rank"] is None else [],
        evidence={"host_oom_killer": True, "confirmed": d["confirmed"], "signal": "SIGKILL", "exit_code": d["exit_code"],
                  "pid": d["pid"], "local_rank": d["local_rank"], "host": d["host"], "python_traceback": False,
                  "victims": victims},
        lines=cite([_ev_row(r) for r in d["rows"]], text="text"),
        first_seen=iso(t), last_seen=iso(d["timestamp"]),
    )


def _local(r: dict[str, Any]) -> list[dict[str, Any]]:
    """[{"host", "local_rank"}] for a row known only by its local rank (spec/report.md)."""
    if r.get("rank") is None and r.get("local_rank") is not None:
        return [{"host": r.get("host"), "local_rank": int(r["local_rank"])}]
    return []


def _who(rank: int | None, row: dict[str, Any]) -> str:
    if rank is not None:
        return f"rank {rank}"
    loc = _local(row)
    return local_ranks_phrase(loc) if loc else "a rank the log does not name"


def _owner(r: dict[str, Any]) -> Any:
    """One process's identity for grouping its errors: the rank, else (host, local rank)."""
    if r["rank"] is not None:
        return int(r["rank"])
    if r.get("local_rank") is not None:
        return ("local", r.get("host"), int(r["local_rank"]))
    return None


# How the culprit of the timeouts was found -> the basis a finding states (spec/report.md).
MODE_BASIS = {
    "oom": "own_error", "crash": "own_error", "gpu": "own_error", "killed": "own_error",
    "report": "named_by_peers", "missing": "named_by_peers", "fingerprint": "named_by_peers", "peer": "named_by_peers",
    "odd": "own_error", "lag_timeout": "own_error",
    "lag_enqueued": "never_joined", "never_joined": "never_joined", "least_completed": "never_joined",
    "silent": "last_to_log", "local": "own_error", "no_timeout": "never_joined",
}
# Ranks that issued a DIFFERENT collective than their peers (not ranks that never arrived).
MISMATCH_MODES = {"fingerprint", "odd", "lag_timeout"}
# A silent rank is named by when it last logged; within this margin of the next rank's last line
# (or half a step: ranks log a step's end at slightly different times) the order is thin evidence.
SILENT_MARGIN_S = 1.0


def _trained_after(r: dict[str, Any], progress: dict[int, dict[str, Any]]) -> bool:
    """The rank went on training after this line (a caught and logged exception, a retried sample)."""
    if r["rank"] is None or int(r["rank"]) not in progress or r["timestamp"] is None:
        return False
    last = progress[int(r["rank"])]["last_ts"]
    return last is not None and last > r["timestamp"]


def _last_lines(ctx: Context, tbs: list[dict[str, Any]]) -> set[tuple[str, int]]:
    """(file, line) of the tracebacks that are the last thing their process wrote in that file
    (nothing but the traceback's own continuation lines after it). Only their files are read."""
    files = sorted({r["source_file"] for r in tbs if r["source_file"] is not None})
    if not files:
        return set()
    last = (
        ctx.events.select("rank", "host", "local_rank", "event", "source_file", "line")
        .filter(pl.col("source_file").is_in(files) & (pl.col("event") != "TRACEBACK_CONT"))
        .group_by("source_file", "rank", "host", "local_rank")
        .agg(pl.col("line").max())
        .collect()
    )
    ends = {(f, rk, h, lr): ln for f, rk, h, lr, ln in last.iter_rows()}
    return {(r["source_file"], r["line"]) for r in tbs
            if ends.get((r["source_file"], r.get("logged_rank", r["rank"]), r["host"], r["local_rank"])) == r["line"]}


def _crashes(ctx: Context, rows: list[dict[str, Any]], progress: dict[int, dict[str, Any]],
             first_oom: dict[Any, dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    """First fatal plain Python exception per process (rank, or host + local rank): a traceback
    that is not an OOM, a GPU error, a lost peer / timeout (classified before) nor a teardown
    signal, from a rank with no OOM of its own before it.

    Fatal: the rank did not train after it, and something shows the process ended — a process
    exit or kill after it, its peers' failed collectives after it, or it is the last thing the
    process wrote. (Programs print tracebacks of exceptions they survive: at start-up, a skipped
    sample; those are not crashes.)"""
    # a traceback whose exception line the reader typed as a failure of its own (a barrier or
    # collective timeout, an OOM: extra.traceback points back at the head) is that failure
    typed = {(r["source_file"], r["traceback_head"]) for r in rows
             if r.get("traceback_head") is not None and r["kind"] in ("timeout", "oom", "gpu", "desync")}
    tbs = [r for r in rows if r["kind"] == "traceback" and not re.search(TEARDOWN_RE, r["message"] or "")
           and (r["source_file"], r["line"]) not in typed
           and _owner(r) is not None and not _trained_after(r, progress)]
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


def _others_went_on(ctx: Context, r: dict[str, Any], progress: dict[int, dict[str, Any]]) -> bool:
    """Another rank logged progress clearly after this line (by SILENT_MARGIN_S, or two steps)."""
    if r["timestamp"] is None:
        return False
    margin = dt.timedelta(seconds=max(SILENT_MARGIN_S, 2 * (ctx.median_step_ms or 0.0) / 1000))
    return any(p["last_ts"] is not None and p["last_ts"] > r["timestamp"] + margin
               for k, p in progress.items() if k != r.get("logged_rank", r["rank"]))


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


def _death_finding(kind: str, who_key: Any, r: dict[str, Any], first_to: dict[int, dict[str, Any]],
                   cascade: list[dict[str, Any]], all_rows: list[dict[str, Any]]) -> Finding:
    """A rank killed by its own Python exception (`crash`) or by its device (`gpu_error`)."""
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
    if kind == "crash":
        # an error event of any name: its exception's type and message, where the line has them
        text = r["message"] or r["event"] or ""
        if etype and etype not in text:
            text = f"{etype}: {emsg}" if emsg and emsg not in text else (f"{etype} ({text})" if text else etype)
        title = f"{who} crashed with a Python exception: {shorten(text, 160)}{where}"
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
                  "cascade": {"launcher_kills": len(kills), "failed_exits": len(ex)} if kills or ex else None},
        lines=cite([_ev_row(r)] + [_ev_row(first_to[k]) for k in later[:2]] + [_ev_row(c) for c in (kills[:1] + ex[:1])],
                   text="text"),
        first_seen=iso(r["t_show"]), last_seen=iso(mine[-1]["t_show"] if mine else r["t_show"]),
    )


def _failed_exit(rows: list[dict[str, Any]]) -> list[Finding]:
    """When nothing else failed: a worker the launcher saw exit with a non-zero code (torch
    elastic's "failed (exitcode: 1) local_rank: N", its ChildFailedError record) crashed, its
    own error being in output these logs do not hold (its stderr, its error_file). The earliest
    exit is the crash (ties: the one the agent calls the first observed failure); later ones are
    its cascade. A negative code (or 128+N from a shell) is a signal (failure_facts.signal_of):
    SIGKILL is a kill (_killed_without_traceback), SIGTERM or SIGINT a teardown, never a crash;
    SIGSEGV, SIGBUS, SIGABRT, SIGILL, SIGFPE are the worker's own death in native code: a crash,
    named by its signal."""
    def crashed(r: dict[str, Any]) -> bool:
        sig = facts.signal_of(r["exit_code"], r["signal"])
        return sig in facts.FAULT_SIGNALS or (r["exit_code"] > 0 and sig not in ("SIGKILL", *facts.TEARDOWN_SIGNALS))

    exits = sorted((r for r in rows if r["kind"] == "exit" and r["exit_code"] is not None and crashed(r)
                    and (_owner(r) is not None or r["by"] in REPORTERS)), key=lambda r: (_key(r), not r["first_observed"]))
    if not exits:
        return []
    r = exits[0]
    # the agent's line names the local rank, the ChildFailedError record the global one: one pid
    same = [o for o in exits if r["pid"] is not None and o["pid"] == r["pid"]] or [r]
    r = next((o for o in same if o["rank"] is not None), r)
    rank = None if r["rank"] is None else int(r["rank"])
    others = sorted({_who(None if o["rank"] is None else int(o["rank"]), o) for o in exits
                     if o not in same and _owner(o) != _owner(r)})
    sig = facts.signal_of(r["exit_code"], r["signal"])
    # a traceback printed before the exit in the same output that names no rank (no [rankN]:
    # prefix): most likely this worker's, said as such, never taken for a rank's own error
    tb = max((t for t in rows if t["kind"] == "traceback" and t["event"] == "TRACEBACK" and _owner(t) is None
              and t["source_file"] == r["source_file"] and (t["line"] or 0) < (r["line"] or 0)),
             key=lambda t: t["line"] or 0, default=None)
    seen = f"; the traceback printed before it names no rank: {shorten(tb['message'], 160)}" if tb else ""
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
                  "others": others or None, **({"one_node": r["one_node"]} if r.get("one_node") else {})},
        lines=cite([_ev_row(o) for o in exits[:3]] + ([_ev_row(tb)] if tb else []), text="text"),
        first_seen=iso(r["t_show"]), last_seen=iso(exits[-1]["t_show"]),
    )]


def _extra(r: dict[str, Any]) -> dict[str, Any]:
    if not r.get("extra"):
        return {}
    try:
        x = orjson.loads(r["extra"])
    except orjson.JSONDecodeError:
        return {}
    return x if isinstance(x, dict) else {}


def _tasks(spec: str | None) -> set[int]:
    """Slurm task list "0-3,7" -> {0, 1, 2, 3, 7}."""
    out: set[int] = set()
    for part in (spec or "").split(","):
        a, _, b = part.partition("-")
        if a.strip().isdigit():
            out.update(range(int(a), int(b) + 1) if b.strip().isdigit() else [int(a)])
    return out


CANCEL_REASONS = {"TIME LIMIT": "its time limit", "NODE FAILURE": "a node failure", "PREEMPTION": "preemption"}
# A node failure is a fault; a cancellation, a time limit, a preemption end a run that may have
# been fine (WARN: the run did not finish, a person decides whether that is a problem).
CANCEL_ERRORS = {"NODE FAILURE"}


def _cancel_finding(cancels: list[dict[str, Any]], rows: list[dict[str, Any]], alone: bool = False) -> Finding:
    """The scheduler ended the job (scancel, time limit, node failure, preemption). Every worker
    it killed afterwards (srun "Killed"/"Terminated", the launcher's exits) is its cascade.
    `alone`: no failure of the job's own was found; then a kill line without a time of its own is
    the cancel's cascade wherever it sits (torch.distributed.launch's sigkill_handler prints
    "Killing subprocess PID" per worker, then "Main process received SIGTERM, exiting": those
    lines, untimed, are often printed before the slurmstepd line), and a process that received
    the signal without a pid is the launcher itself, not a worker."""
    first = cancels[0]
    xs = [_extra(c) for c in cancels]
    # Slurm prints the step's line ("STEP 12.0") and the job's ("JOB 12"); the job id is before the dot
    job = next((x.get("job") for x in xs if x.get("kind") == "job"), None) or (str(xs[0].get("job") or "").split(".")[0] or None)
    reason = next(((x.get("reason") or "").strip() for x in xs if (x.get("reason") or "").strip()), None)
    why = CANCEL_REASONS.get((reason or "").upper(), reason.lower() if reason else "a cancellation (scancel)")
    after = [r for r in rows if r["kind"] in ("kill", "exit")
             and (_key(r) >= _key(first) or r["by"] == "slurm" or (alone and not r["exact"]))]
    tasks: set[int] = set()
    for r in after:
        if r["by"] == "slurm":
            tasks |= _tasks(_extra(r).get("tasks"))
    signalled = [r for r in after if alone and r["kind"] == "kill" and r["by"] is None and r["pid"] is None]
    others = _processes([r for r in after if r["by"] != "slurm" and not any(r is x for x in signalled)])
    n = len(tasks) + len(others)
    host = f" on {first['host']}" if first.get("host") else ""
    title = (f"the scheduler ended job {job or '?'}{host} by {why}"
             + (f"; the {n} worker process{'es' if n != 1 else ''} killed after it" if n else "")
             + (f"{' and' if n else ';'} the {len(signalled)} launcher process{'es' if len(signalled) != 1 else ''} "
                "that received its signal" if signalled else "")
             + (" are its cascade, not faults of their own" if n or signalled else ""))
    return Finding(
        rule=pass_id("failures"), kind="job_cancelled", layer="resource",
        severity="ERROR" if (reason or "").upper() in CANCEL_ERRORS else "WARN", ranks=[], title=title,
        evidence={"job": job, "reason": reason, "host": first.get("host"), "cancellations": len(cancels),
                  "cascade": {"killed_processes": n, "slurm_tasks": len(tasks), "launchers_signalled": len(signalled)}
                  if n or signalled else None},
        lines=cite([_ev_row(first)] + [_ev_row(r) for r in after[:2]], text="text"),
        first_seen=iso(first["t_show"]), last_seen=iso(max((r["t_show"] for r in [*cancels, *after] if r["t_show"]),
                                                           default=first["t_show"])),
    )


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
    ooms = [r for r in rows if r["kind"] == "oom"]
    tos = [r for r in rows if r["kind"] == "timeout"]
    statuses = [r for r in rows if r["kind"] in ("status", "timeout") and (r["enqueued"] is not None or r["completed"] is not None)]
    desync = [r for r in rows if r["desync"]]      # a timeout's message may carry the desync report
    progress = {int(p["rank"]): p for p in prog.iter_rows(named=True)}

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
    killed = _killed_without_traceback(rows)
    crashes = _crashes(ctx, rows, progress, first_oom)
    gpus = _gpu_errors(rows)
    cancels = [r for r in rows if r["kind"] == "cancel"]

    out: list[Finding] = []
    to_sorted = sorted(first_to.values(), key=_key)
    t_first_to = to_sorted[0]["t_show"] if to_sorted else None
    failed_ranks = set(first_to) | {k for k in [*first_oom, *crashes, *gpus] if isinstance(k, int)}
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
            r, first, mode = min(deaths, key=lambda d: _key(d[0]))
            culprits = [first]
            detail["death"] = r
            how = {"oom": "oom", "crash": "crashed with a Python exception", "gpu": "GPU error"}[mode]
        elif dead:
            culprits, how, mode = sorted({d["rank"] for d in dead}), "killed by SIGKILL (host OOM killer suspected)", "killed"
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
        if not culprits and local_deaths:
            # stronger than any inference from silence or lag: the process died of its own error
            r, who_key, what = min(local_deaths, key=lambda d: _key(d[0]))
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
            if silent and to_sorted:
                t_min = min(progress[r]["last_ts"] for r in silent)
                culprits = sorted(r for r in silent if progress[r]["last_ts"] == t_min)
                how, mode = "went silent first, without an error of its own", "silent"
                # the margin: how much longer the next rank went on logging
                rest = [p["last_ts"] for r, p in progress.items() if p["last_ts"] is not None and p["last_ts"] != t_min]
                gap = (min(rest) - t_min).total_seconds() if rest else None
                step_ms = ctx.median_step_ms
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
    victims = sorted((set(first_to) | waiting) - set(culprits))

    # -- the launcher's cascade: kills and exits after the first failure ---------------------------
    # (a process's exit shows several times: the agent's line, the table record, its signal)
    first_fail = min([*(first_oom.values()), *crashes.values(), *gpus.values(), *to_sorted, *(d["rows"][0] for d in killed)],
                     key=_key, default=None)
    killed_rows = {id(r) for d in killed for r in d["rows"]}
    cascade = [r for r in rows if id(r) not in killed_rows and first_fail is not None and _key(r) >= _key(first_fail)
               and (r["kind"] == "exit" or r["kind"] == "kill" and r["by"] in LAUNCHERS)]

    # -- OOM findings ---------------------------------------------------------------------------
    for who_key, r in sorted(first_oom.items(), key=lambda kv: _key(kv[1])):
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
                      "cascade": {"launcher_kills": len(kills), "failed_exits": len(ex)} if kills or ex else None},
            lines=cite([_ev_row(r)] + [_ev_row(first_to[k]) for k in later[:2]] + [_ev_row(c) for c in (kills[:1] + ex[:1])],
                       text="text"),
            first_seen=iso(r["t_show"]), last_seen=iso(mine[-1]["t_show"] if mine else r["t_show"]),
        ))

    # -- a rank killed by its own Python exception, or by its GPU -------------------------------
    for who_key, r in sorted(gpus.items(), key=lambda kv: _key(kv[1])):
        out.append(_death_finding("gpu_error", who_key, r, first_to, cascade, rows))
    for who_key, r in sorted(crashes.items(), key=lambda kv: _key(kv[1])):
        out.append(_death_finding("crash", who_key, r, first_to, cascade, rows))
    if first_fail is None and not cancels:
        out += _failed_exit(rows)

    # -- processes killed from outside Python ----------------------------------------------------
    for d in killed:
        is_culprit = (mode == "killed" and d["rank"] in culprits) or (
            mode == "local" and detail["local"]["what"] == "SIGKILL" and d["rank"] is None
            and (d["host"], d["local_rank"]) == (detail["local"]["host"], detail["local"]["local_rank"]))
        out.append(_host_oom_finding(d, t_first_to if is_culprit else None, victims if is_culprit else []))

    # -- the scheduler ended the job -------------------------------------------------------------
    if cancels:
        out.append(_cancel_finding(cancels, rows, alone=first_fail is None and not killed))

    if not first_to and not first_oom and not crashes and not gpus and not killed and not cancels:
        out += _local_hang(ctx, rows)
    if first_to:
        out.extend(_timeout_findings(first_to, to_sorted, culprits, how, mode, weak, victims, failed_ranks, progress,
                                     desync, tos, fail_seq, detail))
    _launcher_first_observed(out, rows)
    return out


# the rows a rank named in their own text may be attributed to: a rank's own errors, never a
# timeout or a status line (their text names the peer they wait on)
_OWN_KINDS = ("oom", "gpu", "traceback")
# the rows a one-node launch maps to a global rank: a process's own end (its error, its exit or
# kill). Timeouts known by local rank stay so: a hang among them is judged by (host, local rank)
# (_local_hang), from progress lines that carry no global rank either.
_DEATH_KINDS = (*_OWN_KINDS, "exit", "kill")


def _whose(ctx: Context, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each row's rank where the line gave none (failure_facts): the rank its own text names
    (`rank_basis` named_in_text), else, when the log shows a one-node launch, its local rank
    (one_node). `logged_rank` keeps the rank as stored (what the events table is matched by)."""
    node: dict[str, Any] | None | bool = False
    for r in rows:
        r["logged_rank"], r["rank_basis"] = r["rank"], None
        if r["rank"] is not None:
            continue
        if r["kind"] in _OWN_KINDS and r.get("local_rank") is None:
            named = facts.rank_in_text(r.get("message"))
            if named is not None:
                r["rank"], r["rank_basis"] = named, "named_in_text"
                continue
        if r.get("local_rank") is not None and r["kind"] in _DEATH_KINDS:
            if node is False:
                node = facts.one_node(ctx.events)
            if node:
                r["rank"], r["rank_basis"] = int(r["local_rank"]), "one_node"
                r["one_node"] = node
    return rows


def _basis(r: dict[str, Any], default: str | None = "own_error") -> str | None:
    """How a row's rank is known: named in its text, a one-node launch's local rank, else `default`."""
    return r.get("rank_basis") or default


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


def _laggards(statuses: list[dict[str, Any]], first_to: dict[int, dict[str, Any]]) -> tuple[list[int], str, set[int]]:
    """Ranks whose sequence number lags within a process group: their own timeout is at a lower
    SeqNum than the group's, or their last enqueued work is below it. The set: ranks whose
    position came from their own timeout (they wait in another collective)."""
    for pg, grp in _pg_scoped([*statuses, *first_to.values()]).items():
        tos = [r for r in grp if r["kind"] == "timeout" and r["rank"] is not None]
        seqs = Counter(s for r in tos if (s := _seq_of(r)) is not None)
        if not seqs:
            continue
        fail_seq = seqs.most_common(1)[0][0]
        pos: dict[int, int] = {}
        own: dict[int, int] = {}
        for r in grp:
            if r["rank"] is None:
                continue
            s = _seq_of(r) if r["kind"] == "timeout" else None
            if s is not None:
                own[int(r["rank"])] = max(own.get(int(r["rank"]), s), s)
            for v in (s, r["enqueued"]):
                if v is not None:
                    pos[int(r["rank"])] = max(pos.get(int(r["rank"]), v), v)
        lag = sorted(k for k, p in pos.items() if p < fail_seq)
        if lag and len(lag) < len(pos):
            behind = ", ".join(f"#{pos[k]}" + (f" on rank {k}" if len(lag) > 1 else "") for k in lag)
            in_own = {k for k in lag if own.get(k) == pos[k]}
            what = (f"timed out in collective {behind} while the others wait in #{fail_seq}" if set(lag) <= in_own
                    else f"never issued collective #{fail_seq}: last enqueued work {behind}")
            return lag, what + (f" in pg {pg}" if pg else ""), in_own
    return [], "", set()


def _least_completed(statuses: list[dict[str, Any]]) -> tuple[list[int], int | None, int]:
    """The rank(s) whose "last completed work" is smallest within a process group (the laggard),
    when the ranks disagree, and by how many works the next rank is ahead of them."""
    for _pg, grp in _pg_scoped(statuses).items():
        done: dict[int, int] = {}
        for r in grp:
            if r["rank"] is not None and r["completed"] is not None:
                done[int(r["rank"])] = int(r["completed"])     # the latest report of each rank
        if len(set(done.values())) > 1:
            low = min(done.values())
            nxt = min(v for v in done.values() if v != low)
            return sorted(k for k, c in done.items() if c == low), low, nxt - low
    return [], None, 0


def _timeout_findings(first_to: dict[int, dict[str, Any]], to_sorted: list[dict[str, Any]], culprits: list[int],
                      how: str, mode: str, weak: bool, victims: list[int], failed_ranks: set[int],
                      progress: dict[int, dict[str, Any]], desync: list[dict[str, Any]], tos: list[dict[str, Any]],
                      fail_seq: int | None, detail: dict[str, Any]) -> list[Finding]:
    out: list[Finding] = []
    t_first_to = to_sorted[0]["t_show"]
    died = mode in ("oom", "crash", "gpu") and culprits
    death = detail.get("death")
    if died and death["t_show"] is not None and t_first_to is not None:
        # the victims' errors follow the death that caused them (placed times are only bounds)
        t_first_to = max(t_first_to, death["t_show"])
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
    silent_culprits = [c for c in culprits if c not in failed_ranks]
    if not died and mode != "killed" and mode not in MISMATCH_MODES and silent_culprits:
        lines = [_ev_row({**progress[c], "timestamp": progress[c]["last_ts"], "source_file": progress[c]["file"]},
                         f"last line of rank {c} (step {progress[c]['last_step']})")
                 for c in silent_culprits if c in progress]
        t_silent = min((progress[c]["last_ts"] for c in silent_culprits if c in progress), default=None)
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
    if died:
        c = culprits[0]
        what = {"oom": "CUDA OOM", "crash": "crash", "gpu": "GPU error"}[mode]
        dt_s = ((to_sorted[0]["timestamp"] - death["timestamp"]).total_seconds()
                if to_sorted[0]["exact"] and death["exact"] else None)
        title = (f"{ranks_phrase(lost)}: NCCL timeout / lost connection in their collective"
                 + (f" #{seq}" if seq is not None else "")
                 + (f" {dt_s:.1f} s after rank {c}'s {what}" if dt_s is not None else f" after rank {c}'s {what}"))
    elif mode == "local":
        loc = detail["local"]
        who = local_ranks_phrase([{"host": loc["host"], "local_rank": loc["local_rank"]}])
        title = (f"{ranks_phrase(lost)}: NCCL timeout / lost connection in their collective"
                 + (f" #{seq}" if seq is not None else "") + f" after {who} died ({loc['what']}); which global rank "
                 "it was, the logs do not say")
    elif mode == "killed":
        title = (f"{ranks_phrase(lost)}: lost {ranks_phrase(culprits)} in their collective"
                 + (f" #{seq}" if seq is not None else "") + " after it was killed (SIGKILL)")
    elif culprits:
        title = (f"{ranks_phrase(lost)}: NCCL timeout in collective" + (f" #{seq}" if seq is not None else "")
                 + f" waiting for {ranks_phrase(culprits)} ({how}){first_note}")
    else:
        title = (f"{ranks_phrase(lost)}: NCCL timeout in collective" + (f" #{seq}" if seq is not None else "")
                 + " — the logs do not show which rank they waited for")
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
