"""Which rank do the others wait for at their communication kernels (profiler traces)?

Question: in the Kineto traces of a run, is there a rank that starts the communication kernels
last, so every other rank's NCCL kernel spins waiting for it?

Domain facts relied on (traces/stats.py states them in full):
- An NCCL kernel starts on a rank when that rank enqueued the collective and runs until every
  peer has arrived; the k-th kernel of a collective on every rank is the same collective. The
  rank that starts it last is the one the others waited for: it is at fault (`ranks`), the
  others are the victims.
- A rank is named when it starts last at >= half of the kernels matched on every rank (at
  least 3) by a median >= 100 µs after the median rank (stats.LATE_*); below that, launch
  jitter. Start times are the traces' clocks: host clock skew adds to them (said in the
  evidence).
- A profile usually covers a few steps: fewer than WARN_MIN_MATCHED matched collectives is a
  reading (INFO, basis weak), not yet a fault — one step's late rank may be one step's noise.

Must not: decide the root cause; read events other than COMM_KERNEL (written by
ingest/kineto.py, one per communication kernel with its start time and collective).
"""
from __future__ import annotations

import polars as pl

from ..report.model import Evidence, Finding
from .context import Context
from .evidence import pass_id, ranks_phrase

WARN_MIN_MATCHED = 20


def find(ctx: Context) -> list[Finding]:
    k = (ctx.events.select("rank", "event", "timestamp", "collective", "source_file", "line", "comm_ms")
         .filter((pl.col("event") == "COMM_KERNEL") & pl.col("rank").is_not_null() & pl.col("timestamp").is_not_null())
         .collect())
    if k.height < 3 or k["rank"].n_unique() < 2:
        return []
    k = k.select(
        "rank", "collective", "line",
        pl.col("collective").alias("name"),
        pl.lit("communication").alias("category"),
        pl.col("timestamp").dt.epoch("ns").alias("start_ns"),
        pl.lit(None, pl.Int32).alias("step"),
        pl.col("source_file").alias("file"),
    )
    from ..traces.stats import arrivals, late_ranks, straggler_of   # the trace reader: only for runs with kernels

    arr = arrivals(k)
    if arr.is_empty():
        return []
    g = straggler_of(arr, late_ranks(arr))
    if g is None:
        return []
    rank = int(g["rank"])
    victims = sorted(int(r) for r in k["rank"].unique() if r != rank)
    enough = g["matched"] >= WARN_MIN_MATCHED
    return [Finding(
        rule=pass_id("trace_straggler"), kind="straggler", layer="resource",
        severity="WARN" if enough else "INFO",
        ranks=[rank], victims=victims, basis="timing_within_group", basis_weak=not enough,
        title=(f"{ranks_phrase([rank])} starts its communication kernels last at {g['times_last']} of "
               f"{g['matched']} collectives in the profiler traces (median {g['median_late_us'] / 1000:.3f} ms "
               f"after the median rank); the others wait {g['others_wait_us'] / 1000:.3f} ms in all"),
        evidence={"times_last": g["times_last"], "matched": g["matched"], "share_pct": round(g["share_pct"], 1),
                  "median_late_ms": round(g["median_late_us"] / 1000, 3),
                  "others_wait_ms": round(g["others_wait_us"] / 1000, 3),
                  "how": "profiler traces: start of the k-th kernel of each collective on every rank, "
                         "compared on the traces' clocks (host clock skew adds to it)"},
        lines=[Evidence(source_file=e["file"], line=int(e["line"]), rank=rank,
                        text=f"{e['collective']} #{e['nth']}: {e['late_vs_median_us'] / 1000:.3f} ms after the median rank")
               for e in g["evidence"]],
    )]
