"""Which rank stopped logging well before the others, with no finding that says why?

Question: after every pass, rule and the error accounting (passes/unexplained.py), is there a
rank whose last line (on the common clock) comes well before the other ranks' last lines, that
no finding names (as culprit or victim)? Such a rank contradicts "healthy": it is a WARN
`rank_lag` finding (basis last_to_log), the verdict when nothing else is found.

Domain facts relied on:
- In synchronous training every rank logs until the job ends, within a step of the others: a
  rank that stops while the others go on has died, hung or lost its output. rank_lag judges the
  steps; this judges time, for ranks whose lines carry no step.
- Hosts' clocks disagree by seconds (a realrun_varied run has one host 2.4 s behind): last
  lines are compared after Context.clock_offsets are applied. Measured on the 53 sample /
  fixture / real runs of this repository: where no rank failed, every rank's last aligned line
  is within 0.02 s (0.2% of the run, under one logging interval) of the median rank's; where
  one died or hung, 2.5 s or more (21 or more of its own logging intervals). A rank is flagged
  when its gap is at least 1 s, 20 of its own logging intervals and 5% of the run's span.

Must not: flag a rank a finding already names (hang, rank_lag, a failure's victims, an
unexplained error), one that stopped after a failure began (it stopped with the job), or judge
without times.
"""
from __future__ import annotations

import datetime as dt

import polars as pl

from ..report.model import Finding
from .context import Context
from .evidence import cite, iso, num, parse_iso, pass_id
from .unexplained import ENDING_KINDS, SLACK

MIN_GAP_S = 1.0
MIN_INTERVALS = 20
MIN_SHARE = 0.05


def _last_lines(ctx: Context) -> pl.DataFrame:
    """Per rank: host, events, first and last time (logged, and on the common clock)."""
    if ctx.run is not None:
        from ..summaries import rank_table

        per = rank_table(ctx.run).select("rank", "host", "events", "first_seen", "last_seen")
    else:
        from ..summaries import rank_rows

        per = rank_rows(ctx.events).collect().select("rank", "host", "events", "first_seen", "last_seen")
    per = per.filter(pl.col("rank").is_not_null() & pl.col("last_seen").is_not_null())
    if per.is_empty():
        return per
    lo = ctx.aligned(per.lazy().with_columns(pl.col("first_seen").alias("timestamp"))).select("rank", pl.col("ts_aligned").alias("t0"))
    hi = ctx.aligned(per.lazy().with_columns(pl.col("last_seen").alias("timestamp"))).select("rank", pl.col("ts_aligned").alias("t1"))
    return per.join(lo.collect(), on="rank").join(hi.collect(), on="rank")


def find(ctx: Context, findings: list[Finding]) -> list[Finding]:
    per = _last_lines(ctx)
    if per.height < 2:
        return []
    span = (per.get_column("t1").max() - per.get_column("t0").min())   # type: ignore[operator]
    span_s = span.total_seconds() if isinstance(span, dt.timedelta) else 0.0
    if span_s <= 0:
        return []
    med = per.get_column("t1").median()
    gap = (pl.lit(med) - pl.col("t1")).dt.total_microseconds() / 1e6
    cadence = (pl.col("t1") - pl.col("t0")).dt.total_microseconds() / 1e6 / pl.col("events").cast(pl.Float64)
    # a rank whose lines all carry one time has no interval of its own: the ranks' median stands in
    per = per.with_columns(cadence.alias("cadence_s"))
    typical = per.get_column("cadence_s").median() or 0.0
    flagged = per.with_columns(gap.alias("gap_s"), pl.when(pl.col("cadence_s") > 0).then(pl.col("cadence_s"))
                               .otherwise(pl.lit(typical)).alias("cadence_s")).filter(
        (pl.col("cadence_s") > 0) & (pl.col("gap_s") >= MIN_GAP_S) & (pl.col("gap_s") >= MIN_INTERVALS * pl.col("cadence_s"))
        & (pl.col("gap_s") >= MIN_SHARE * span_s))
    named = {r for f in findings for r in [*f.ranks, *f.victims]}
    local_hosts = {x.get("host") for f in findings for x in f.local_ranks}
    flagged = flagged.filter(~pl.col("rank").is_in(list(named))
                             & ~pl.col("host").is_in([h for h in local_hosts if h]).fill_null(False))
    # a rank that stopped once a failure had begun stopped with the job (the launcher's kill,
    # its peers gone): the failure explains it
    began = [t for f in findings if f.severity in ("WARN", "ERROR") and f.kind in ENDING_KINDS
             and (t := parse_iso(f.first_seen)) is not None]
    if began:
        flagged = flagged.filter(pl.col("t1") < pl.lit(min(began) - SLACK, pl.Datetime("us", "UTC")))
    if flagged.is_empty():
        return []
    # the last line of each flagged rank, to cite (a few ranks: a filtered scan)
    ranks = flagged.get_column("rank").to_list()
    last = (ctx.events.filter(pl.col("rank").is_in(ranks)).select("rank", "timestamp", "event", "source_file", "line")
            .join(flagged.lazy().select("rank", pl.col("last_seen").alias("timestamp")), on=["rank", "timestamp"])
            .group_by("rank").agg(pl.all().sort_by("line").last()).collect())
    lines = {r["rank"]: r for r in last.iter_rows(named=True)}
    out = []
    for r in flagged.sort("t1").iter_rows(named=True):
        row = lines.get(r["rank"], {})
        title = (f"rank {r['rank']} stopped logging {r['gap_s']:.1f} s before the others (about "
                 f"{r['gap_s'] / r['cadence_s']:.0f} of its logging intervals); no finding says why")
        out.append(Finding(
            rule=pass_id("silent_rank"), kind="rank_lag", layer="training", severity="WARN", ranks=[int(r["rank"])],
            title=title, basis="last_to_log",
            evidence={"gap_s": num(r["gap_s"]), "cadence_s": num(r["cadence_s"]), "events": int(r["events"]),
                      "last_seen": iso(r["last_seen"]), "median_last_seen": iso(med), "span_s": num(span_s)},
            lines=cite([{**row, "text": f"last line of rank {r['rank']} ({row.get('event')})"}] if row else [], text="text"),
            first_seen=iso(r["t1"]), last_seen=iso(med),
        ))
    return out


__all__ = ["find"]
