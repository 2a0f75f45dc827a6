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
  `hang`, basis `lone_message`), the failing ranks its victims.
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

from ..message_templates import template
from ..report.model import Finding
from .context import Context
from .evidence import cite, iso, ms, pass_id, rank_ranges, shorten
from .unexplained import SLACK, error_rows

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
    first_err = dict(ranked.group_by("rank").agg(pl.col("t").min()).iter_rows())
    onset = min(first_err.values())
    # the last step every rank finished: the end of the common path
    last_end = steps.filter(pl.col("t_end").is_not_null()).group_by("rank").agg(pl.col("t_end").max())
    if last_end.height < 2:
        return []
    common = last_end.get_column("t_end").min()
    if common is None or common >= onset:
        return []
    cols = ["rank", "host", "timestamp", "level", "event", "message", "source_file", "line"]
    said = (ctx.aligned(ctx.events.select(cols).filter(pl.col("rank").is_not_null() & pl.col("message").is_not_null()
                                                       & (pl.col("level").fill_null("INFO") != "ERROR")))
            .filter(pl.col("ts_aligned") < onset)
            .with_columns(template("message").alias("tpl")))
    tail = said.filter(pl.col("ts_aligned") > common).collect()
    if tail.is_empty():
        return []
    cand = set(tail.get_column("tpl").drop_nulls().unique().to_list())
    # who says each candidate statement before the failure, anywhere in the run
    who = (said.filter(pl.col("tpl").is_in(list(cand))).group_by("tpl").agg(pl.col("rank").unique().alias("ranks"))
           .collect())
    lone = {t for t, rs in who.iter_rows() if len(rs) == 1}
    last_line = dict(ctx.aligned(ctx.events.select("rank", "host", "timestamp").filter(pl.col("rank").is_not_null()))
                     .group_by("rank").agg(pl.col("ts_aligned").max()).collect().iter_rows())
    out: list[Finding] = []
    done: set[int] = set()
    for r in tail.filter(pl.col("tpl").is_in(list(lone))).sort("ts_aligned").iter_rows(named=True):
        rank = int(r["rank"])
        if rank in done:
            continue
        own = first_err.get(rank)
        if own is not None and own <= onset + SLACK:
            continue      # its own error is (part of) the failure: not silent
        if r["ts_aligned"] > onset - MIN_LEAD:
            continue
        silent_from = last_line.get(rank)
        if silent_from is None or silent_from >= onset:
            continue      # it went on logging while the others failed: not what held them
        victims = sorted(int(k) for k in first_err if int(k) != rank)
        if not victims:
            continue
        done.add(rank)
        lead = (onset - r["ts_aligned"]).total_seconds() * 1000.0
        first_victim = ranked.filter(pl.col("rank") != rank).sort("t").row(0, named=True)
        text = shorten(r["message"], 100)
        out.append(Finding(
            rule=pass_id("lone_message"), kind="hang", layer="communication", severity="ERROR",
            ranks=[rank], victims=victims, basis="lone_message",
            title=(f"rank {rank} alone logged \"{text}\" {ms(lead)} before ranks {rank_ranges(victims)} failed, "
                   f"and nothing after it: the others waited for it"),
            evidence={"template": r["tpl"], "event": r["event"], "lead_ms": round(lead, 1),
                      "common_step_end": iso(common), "first_failure": iso(onset)},
            lines=cite([{**r, "text": f"{r['event'] or ''}: {r['message']}"},
                        {**first_victim, "text": f"first failure: {first_victim['message'] or first_victim['event']}"}],
                       text="text"),
            first_seen=iso(r["ts_aligned"]), last_seen=iso(onset),
        ))
    return out
