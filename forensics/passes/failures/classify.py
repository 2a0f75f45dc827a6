"""Which events are failures, of what kind, and when: the candidate rows, their kind
(oom / gpu / timeout / status / exit / kill / cancel / traceback / info) and their time on the
common clock (an untimed console line is placed between its timestamped neighbours).
"""
from __future__ import annotations

import re
from typing import Any

import polars as pl

from ... import failure_facts as facts, failure_messages as fm, failure_rows
from ...collective_text import DESYNC_TEXT, MISMATCH_TEXT
from ..context import Context
from .meaning import own, with_meaning
from .rows import TEARDOWN_RE, _extra


# The wordings of an OOM, of a device error and of a victim's failed collective are families of
# forensics/failure_messages.py (rules as data, one table): a line's kind is read by the union of
# its kind's families (whichever matches), its role (own / victim) by the first family matching.
OOM_RE = fm.pattern(kinds=("oom",), roles=("own",))


# a peer's death seen from this side (a timeout, a lost connection, a store or socket error)
TIMEOUT_RE = fm.pattern(roles=("victim",))


# The device failed (CUDA's sticky errors, the driver's Xid, ECC, NCCL's ncclUnhandledCudaError:
# a CUDA call inside NCCL failed on THIS rank): the rank whose error says so.
# A device-side assert is the program's own check failing (an index out of range): a crash.
GPU_RE = fm.pattern(kinds=("gpu_error",), roles=("own",))


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


# Events that are not a rank's own error though at ERROR: a console reader's plain line or a
# traceback's body (the TRACEBACK head is the error), and the events a rule of their own reads
# (rules/data/data_load_error.toml).
OWN_ERROR_EXCLUDED = ["LOG", "TRACEBACK_CONT", "DATA_LOAD_ERROR"]


_OP = re.compile(r"OpType=(\w+)")


_NUMEL = re.compile(r"NumelIn=(-?\d+)")


# the torch.distributed call a traceback died in (its innermost distributed_c10d.py frame, as the
# console reader keeps frames: "…/distributed_c10d.py:4287 in all_gather"): the rank's collective
_C10D_CALL = re.compile(r'distributed_c10d\.py(?::|", line )\d+,? in (\w+)')


def _candidates(ctx: Context) -> pl.LazyFrame:
    """Rows that may be failures (`failure_rows`): WARN/ERROR lines, or events whose name says so.

    Cheap first: the message regexes of `_classify` then run on these rows only, not on every
    INFO line of a GB-scale store. A store's are read from its FAILURES summary, written at
    ingest: finding them in the events decompresses every page of message and extra (0.8 CPU s
    on the 64-rank bench store).
    """
    if ctx.run is not None:
        from ...summaries import failures

        cand = failures(ctx.run).lazy()
    else:
        cand = failure_rows.rows(ctx.events)
    ev = pl.col("event")
    # an error of any name keeps its extra: the exception it carries (failure_facts.exception_of);
    # a line whose text is under another key than the message (`text`, `msg`, `error`, in the
    # record's other fields; structlog's `event` is its message) is classified by that text
    return ctx.aligned(
        cand.with_columns(pl.when(ev.is_in(TYPED) | pl.col("extra").str.contains("missing_ranks", literal=True)
                                  | pl.col("extra").str.contains("glog_time", literal=True)
                                  | (pl.col("level") == "ERROR") | pl.col("extra").str.contains(facts.EXC_FIELD_RE))
                          .then(pl.col("extra")).alias("extra"),
                          pl.coalesce("message", *facts.text_of("fields"), *facts.text_of("extra"),
                                      pl.when(ev.str.contains(" ", literal=True)).then(ev)).alias("message"))
    )


def _classify(df: pl.DataFrame) -> pl.DataFrame:
    """kind per candidate row: oom / gpu / timeout / status / exit / kill / cancel / traceback /
    info, with the watchdog numbers (`completed`, `enqueued`) and the fields of typed events.
    What a line's text means (meaning.py: forensics/failure_messages.py's families) decides over
    its wording: an own failure is never a victim's timeout, NCCL's "Cuda failure 'out of memory'"
    is an OOM, a stuck watchdog (`stuck`) is its rank's hang, a crash or host-memory message on a
    plain console line is its rank's own error."""
    df = with_meaning(df)
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
    is_stuck = ~process & ~is_oom & own(("hang",))
    is_desync = msg.str.contains(DESYNC_RE)
    # the device's own failure: typed by the reader, or the text of an error line / a traceback
    is_gpu = ~process & ~is_oom & ~is_stuck & ~own(("crash", "host_oom")) & ((ev == "GPU_XID") | ((ev == "CUDA_ERROR") & ~msg.str.contains("(?i)device-side assert"))
                                   | (err & msg.str.contains(GPU_RE)))
    # a collective that fails (timeout, lost peer, or a mismatch caught by DETAIL debug checks); a
    # name alone says so for a reader's typed event or an ERROR (a job's own WARN "watchdog" that
    # says it is aborting is no collective's timeout)
    is_timeout = ~is_oom & ~is_gpu & ~process & ~is_status & ~is_stuck & ~own() & (
        (ev.str.contains("(?i)TIMEOUT|WATCHDOG|MISMATCH") & (err | ev.is_in(TYPED)))
        | (err & (msg.str.contains(TIMEOUT_RE) | msg.str.contains(MISMATCH_RE))))
    is_tb = (ev == "TRACEBACK") & (pl.col("rank").is_not_null() | pl.col("local_rank").is_not_null())
    # an event of any name at ERROR, or carrying an exception, is its rank's own error (a
    # console line is typed by its reader: its plain lines and a traceback's body are not)
    has_exc = (pl.col("extra").str.contains(facts.EXC_FIELD_RE) | pl.col("fields").str.contains(facts.EXC_FIELD_RE)).fill_null(False)
    is_own = (~ev.is_in(OWN_ERROR_EXCLUDED) & ~ev.str.contains(failure_rows.NAMED_RE) & (err | has_exc)) | (
        (ev == "LOG") & err & own(("crash", "host_oom")))
    completed = pl.coalesce(j("$.last_completed").cast(pl.Int64, strict=False),
                            msg.str.extract(COMPLETED_RE, 1).cast(pl.Int64, strict=False))
    enqueued = pl.coalesce(j("$.last_enqueued").cast(pl.Int64, strict=False),
                           msg.str.extract(ENQUEUED_RE, 1).cast(pl.Int64, strict=False))
    # lazily: the flags recur in one another and in the kind (is_oom in five places); a query
    # evaluates each once (eagerly each use ran its regex again: 0.074 -> 0.022 s on m64's rows)
    return (
        df.lazy().with_columns(completed.alias("completed"), enqueued.alias("enqueued"))
        .filter(is_oom | is_stuck | is_gpu | is_desync | is_timeout | is_status | process | is_tb | is_own | pl.col("completed").is_not_null()
                | pl.col("extra").str.contains("missing_ranks", literal=True).fill_null(False))
        .with_columns(
            pl.when(is_oom).then(pl.lit("oom")).when(is_stuck).then(pl.lit("stuck")).when(is_gpu).then(pl.lit("gpu"))
            .when(is_timeout).then(pl.lit("timeout"))
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
            pl.coalesce(pl.col("collective"), msg.str.extract(_OP.pattern, 1),
                        pl.col("extra").str.extract_all(_C10D_CALL.pattern).list.last()
                        .str.extract(_C10D_CALL.pattern, 1)).alias("collective"),
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


# a launcher starts before its workers log: its lines may precede the run's first event by this much
GLOG_EARLY_MIN = 10


def _glog_times(ctx: Context, df: pl.DataFrame) -> pl.DataFrame:
    """A glog line (torch elastic's launcher: `W1205 11:24:43.604000 ...`) in a file with no
    full timestamp carries its month, day and time without a year (`extra.glog_time`, the
    console reader): the year is the one that puts it nearest the run's last timestamped
    event (its other files). Such a line then has a time of its own (on its file's clock: a
    launcher's console has no offset of its own to the ranks')."""
    if "extra" not in df.columns or df.is_empty():
        return df
    g = pl.col("extra").str.json_path_match("$.glog_time")
    if df.select((pl.col("ts_aligned").is_null() & g.is_not_null()).any()).item() is not True:
        return df
    start, end = ctx.events.select(pl.col("timestamp").min().alias("a"), pl.col("timestamp").max().alias("b")).collect().row(0)
    if end is None:
        return df
    cands = [pl.concat_str(pl.lit(f"{y:04d}-"), g).str.to_datetime("%Y-%m-%dT%H:%M:%S%.f", strict=False, time_zone="UTC")
             for y in (end.year - 1, end.year, end.year + 1)]
    dist = [(c - pl.lit(end)).abs() for c in cands]
    best = pl.when(dist[1] <= pl.min_horizontal(dist[0], dist[2])).then(cands[1]).when(dist[0] <= dist[2]).then(cands[0]).otherwise(cands[2])
    df = df.with_columns(best.dt.cast_time_unit("us").alias("_glog"))
    # glog writes local time: a file whose lines would fall before the run began (a console in
    # a time zone behind the ranks' UTC) keeps them untimed, as a clock that disagrees
    early = df.filter(pl.col("_glog") < pl.lit(start) - pl.duration(minutes=GLOG_EARLY_MIN)).get_column("source_file").unique()
    ok = pl.col("_glog").is_not_null() & ~pl.col("source_file").is_in(early.implode())
    return df.with_columns(pl.when(pl.col("ts_aligned").is_null() & ok).then(pl.col("_glog"))
                           .otherwise(pl.col("ts_aligned")).alias("ts_aligned")).drop("_glog")


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
    `t_earliest` / `t_latest`: the bounds themselves (the line's own time when it has one; null
    when no timestamped line is on that side of it): whether one line surely came before another.

    Only the files holding untimed failure lines are scanned (structured logs never need it)."""
    df = _glog_times(ctx, df)
    df = df.with_columns(pl.col("ts_aligned").is_not_null().alias("exact"))
    need = df.filter(pl.col("ts_aligned").is_null() & pl.col("source_file").is_not_null())
    if need.is_empty():
        return df.with_columns(*(pl.col("ts_aligned").alias(c) for c in ("t_order", "t_show", "t_earliest", "t_latest")))
    files = need.get_column("source_file").unique().to_list()
    anchors = (
        ctx.aligned(ctx.events.select("rank", "host", "timestamp", "source_file", "line")
                    .filter(pl.col("source_file").is_in(files) & pl.col("timestamp").is_not_null()))
        .select("source_file", "line", pl.col("line").alias("a_line"), pl.col("ts_aligned").alias("t_anchor"))
        .collect()
    )
    # the failure lines timed here (a glog time given its year: _glog_times) anchor their neighbours too
    own = df.filter(pl.col("ts_aligned").is_not_null() & pl.col("source_file").is_in(files)).select(
        "source_file", "line", pl.col("line").alias("a_line"), pl.col("ts_aligned").alias("t_anchor"))
    if not own.is_empty():
        anchors = pl.concat([anchors, own.cast(anchors.schema)])
    anchors = anchors.unique(["source_file", "line"], keep="first").sort("line")
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
                      .otherwise(pl.coalesce("ts_aligned", "lo", "hi")).alias("t_show"),
                      pl.coalesce("ts_aligned", "lo").alias("t_earliest"), pl.coalesce("ts_aligned", "hi").alias("t_latest"))
        .drop("lo", "hi")
    )


def reported_timeouts(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Timeouts known only from a peer's report, for logs that hold no timeout line of any rank
    (the rank that timed out wrote elsewhere: another node's log, a filtered console).

    ProcessGroupNCCL's heartbeat monitor (HeartbeatMonitor::runLoop) on every rank polls the
    TCPStore for the dump key a rank sets when its watchdog times out, and logs "Received a dump
    signal due to a collective timeout from rank N ..." (N: the rank that set it; "this local
    rank": its own watchdog). So rank N's collective timed out no later than that line: a timeout
    row of rank N at its time, citing it (the reporter's own work numbers stay on the reporter's
    status row)."""
    out = []
    for r in rows:
        if r["kind"] != "status" or r.get("event") != "NCCL_DUMP_SIGNAL":
            continue
        src = _extra(r).get("signal_from")
        who = r["rank"] if src == "self" else src if isinstance(src, int) else None
        if who is None:
            continue
        same = who == r["rank"]
        out.append({**r, "kind": "timeout", "rank": who, "enqueued": None, "completed": None, "seq": None,
                    **({} if same else {"logged_rank": r.get("logged_rank", r["rank"]), "host": None, "local_rank": None})})
    return out
