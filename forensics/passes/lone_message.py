"""Which rank said something of its own just before the others failed, and then went silent?

Question: when ranks fail (ERROR lines: timeouts, lost peers, tracebacks), is there a rank without
an error of its own that, after the last step every rank finished and before the first failure,
logged a message nobody else logged before that failure (a template only it says there, or says
first), and then logged nothing more? What it said is why the others waited.

Domain facts relied on:
- In synchronous training every rank logs the same statements at each step; what only one rank
  says at the end of a failed run is where it left the common path: "waiting for prefetch worker",
  "uploading checkpoint shard 3", "retrying read of s3://..." (forensics/message_templates.py
  masks numbers, ids, addresses and paths, so one statement is one template on every rank).
- A rank that stops in something of its own leaves its peers in the next collective until their
  timeout: their errors come after its last line, and name no one (a gloo or NCCL timeout, a
  closed connection). The rank with the lone statement, silent from then on, is the culprit (kind
  `hang`, basis `own_gap`: what it logged while its peers waited), the failing ranks its victims.
- A statement one rank logs as a matter of course (rank 0's progress lines) is no evidence: only a
  template that appears after the last step all ranks finished, and that no other rank logs before
  the failure, counts.

Must not: name a rank that has an error of its own at or before the failure (passes/failures and
unexplained own those), judge a run without a failure or without steps, or read ERROR lines as the
statement (they are the failure's).
"""
from __future__ import annotations

import datetime as dt
import polars as pl

from .. import failure_facts as facts
from ..message_templates import template
from ..report.model import Finding
from .context import Context
from .evidence import cite, iso, ms, pass_id, rank_ranges, shorten
from .unexplained import DEATH_EVENTS, SLACK, error_rows, with_cascade

# the statement must be at least this long before the first failure to have caused it (a line
# written with the failure is part of it)
MIN_LEAD = dt.timedelta(seconds=1)


def find(ctx: Context) -> list[Finding]:
    steps = ctx.steps
    if steps.is_empty() or len(ctx.ranks) < 2:
        return []
    errs = error_rows(ctx)
    if errs.is_empty():
        return []
    ranked = errs.filter(pl.col("rank").is_not_null() & pl.col("t").is_not_null())
    if ranked.is_empty():
        return []
    # an error line without a time of its own (a traceback on stderr) is known only to lie after
    # the line above it: `t` is the earliest it can be, `t_hi` the latest (null: unbounded)
    first_err = dict(ranked.group_by("rank").agg(pl.col("t").min()).iter_rows())
    # a rank's own error, not its share of the cascade (the launcher's SIGTERM of it, a timeout)
    own_err = dict(with_cascade(ranked).filter(~pl.col("casc")).group_by("rank").agg(pl.col("t").min()).iter_rows())
    # the last step every rank reached, and the earliest a rank finished it: the common path's end
    timed = steps.filter(pl.col("t_end").is_not_null() & pl.col("rank").is_not_null())
    if timed.get_column("rank").n_unique() < 2:
        return []
    last_common = timed.group_by("rank").agg(pl.col("step").max()).get_column("step").min()
    common = timed.filter(pl.col("step") == last_common).get_column("t_end").min()
    if common is None:
        return []
    cols = ["rank", "host", "timestamp", "level", "event", "message", "source_file", "line"]
    own = ctx.events.select(cols).filter(pl.col("rank").is_not_null() & pl.col("message").is_not_null()
                                         & (pl.col("level").fill_null("INFO") != "ERROR"))
    said = ctx.aligned(own)
    tail = ctx.aligned_since(own, common).with_columns(template("message").alias("tpl")).collect()
    if tail.is_empty():
        return []
    lo = ranked.get_column("t").min()
    # a statement two ranks of the tail itself made before any failure can have begun is
    # nobody's own (below): only the others are looked for in the whole run (`who` holds every
    # line of the tail, so it would drop them too). In a run where every rank logs the same
    # statements up to the failure, that is all of them: the run's messages are not templated
    cand = (tail.filter(pl.col("tpl").is_not_null())
            .group_by("tpl").agg(pl.col("rank").filter(pl.col("ts_aligned") < lo).n_unique().alias("early"))
            .filter(pl.col("early") <= 1).get_column("tpl").to_list())
    if not cand:
        return []
    # who says each candidate statement, with when each rank first says it: one statement is
    # logged under one event name, so only the lines of the tail's event names are templated
    names = tail.get_column("event").unique().to_list()
    same = pl.col("event").is_in([n for n in names if n is not None]) | (pl.col("event").is_null() if None in names else False)
    # (each distinct message is templated once and joined back: a run repeats its messages, so
    # 4,096 ranks' ~2 M lines hold ~150 k messages)
    lines = said.filter(same)
    tpl_of = (lines.select("message").unique().with_columns(template("message").alias("tpl"))
              .filter(pl.col("tpl").is_in(cand)))
    who = dict(lines.join(tpl_of, on="message", how="inner")
               .group_by("tpl", "rank").agg(pl.col("ts_aligned").min())
               .group_by("tpl").agg(pl.struct("rank", "ts_aligned").alias("by")).collect().iter_rows())
    # a statement two ranks made before any failure can have begun is nobody's own: only the
    # first line of each (rank, statement) left is judged below
    kept = [t for t, by in who.items() if sum(1 for x in by if x["ts_aligned"] < lo) <= 1]
    tail = tail.filter(pl.col("tpl").is_in(kept)).sort("ts_aligned").unique(["rank", "tpl"], keep="first",
                                                                            maintain_order=True)
    if tail.is_empty():
        return []
    last_line = _last_own_lines(ctx)
    out: list[Finding] = []
    done: set[int] = set()
    for r in tail.sort("ts_aligned").iter_rows(named=True):
        rank = int(r["rank"])
        if rank in done or r["ts_aligned"] < common:
            continue
        others = ranked.filter(pl.col("rank") != rank)
        if others.is_empty():
            continue
        # the others' failure: it began no earlier than their first error can be, and at the
        # latest where their first timed error is (unbounded: only untimed tracebacks)
        bound = others.get_column("t_hi").drop_nulls().min()
        if bound is not None and r["ts_aligned"] > bound - MIN_LEAD:
            continue
        own = own_err.get(rank)
        if own is not None and (bound is None or own <= bound + SLACK):
            continue      # its own error is (part of) the failure: not silent
        silent_from = last_line.get(rank)
        # it went on logging while the others failed (without a bound: after its statement): it
        # was not what held them
        if silent_from is None or (silent_from >= bound if bound is not None else silent_from > r["ts_aligned"] + MIN_LEAD):
            continue
        # before the others fail nobody else says it (after, they may: it is then their cascade)
        before = bound if bound is not None else max(last_line.values())
        if any(int(x["rank"]) != rank and x["ts_aligned"] <= before for x in who.get(r["tpl"], [])):
            continue
        victims = sorted(int(k) for k in first_err if int(k) != rank)
        done.add(rank)
        first_victim = others.sort("t").row(0, named=True)
        t_fail = bound if bound is not None else first_victim["t"]
        lead = max(0.0, (t_fail - r["ts_aligned"]).total_seconds() * 1000.0)
        text = shorten(r["message"], 100)
        # it then ended with an exit code of its own (not the launcher's teardown of it): it
        # stopped, the statement says why (a crash); else it stopped answering (a hang)
        ended = _own_exit(ranked.filter(pl.col("rank") == rank))
        kind, layer, then = (("crash", "resource", f"then exited with {facts.code_phrase(ended['exit_code'], None)}")
                             if ended is not None else ("hang", "communication", "then logged nothing more"))
        out.append(Finding(
            rule=pass_id("lone_message"), kind=kind, layer=layer, severity="ERROR",
            ranks=[rank], victims=victims, basis="own_gap",
            title=(f"rank {rank} alone logged \"{text}\" ({r['level'] or 'INFO'}) and {then}, {ms(lead)} before "
                   f"ranks {rank_ranges(victims)} failed: the others waited for it"),
            evidence={"template": r["tpl"], "event": r["event"], "lead_ms": round(lead, 1),
                      "exit_code": ended["exit_code"] if ended is not None else None,
                      "common_step_end": iso(common), "first_failure": iso(t_fail)},
            lines=cite([{**r, "text": f"{r['event'] or ''}: {r['message']}"}]
                       + ([{**ended, "text": f"exit: {ended['message'] or ended['event']}"}] if ended is not None else [])
                       + [{**first_victim, "text": f"first failure: {first_victim['message'] or first_victim['event']}"}],
                       text="text"),
            first_seen=iso(r["ts_aligned"]), last_seen=iso(t_fail),
        ))
    return out


def _own_exit(rows: pl.DataFrame) -> dict | None:
    """A launcher's record of the rank's exit with a code of its own: non-zero, not a signal the
    launcher tears workers down with (SIGTERM ...) nor a kill (SIGKILL: the failures pass's)."""
    for r in rows.sort("t").iter_rows(named=True):
        code = r["exit_code"]
        if r["event"] in DEATH_EVENTS and code is not None and code != 0 and \
                facts.signal_of(code) not in (*facts.TEARDOWN_SIGNALS, "SIGKILL"):
            return r
    return None


def _last_own_lines(ctx: Context) -> dict[int, object]:
    """Per rank, when it last wrote a line of its own: in the files that hold only its lines (a
    launcher's console, which records its kill after the fact, is not its own), else its last
    line below ERROR."""
    ev = ctx.events.select("rank", "host", "timestamp", "level", "source_file").filter(pl.col("rank").is_not_null())
    own_files = ev.group_by("source_file").agg(pl.col("rank").n_unique().alias("n")).filter(pl.col("n") == 1)
    mine = ev.join(own_files.select("source_file", pl.lit(True).alias("own")), on="source_file", how="left")
    has_own = pl.col("own").fill_null(False).any().over("rank")
    keep = pl.when(has_own).then(pl.col("own").fill_null(False)).otherwise(pl.col("level").fill_null("INFO") != "ERROR")
    return dict(ctx.aligned(mine.filter(keep).select("rank", "host", "timestamp"))
                .group_by("rank").agg(pl.col("ts_aligned").max()).collect().iter_rows())
