"""Do the ranks' gradients become ready at very different times?

Question: how far apart are the per-rank gradient-ready times (GRAD_READY.grad_ready_ts) within
a step, and is one rank consistently the late one?

Domain facts relied on:
- Seed 000 §4.5 (误区三): when one card's gradient computation is delayed its gradient arrives
  late in the all-reduce; with overlapped/asynchronous reduction the optimizer then applies stale
  gradients and the loss oscillates locally. The signal to watch is gradient_skew — the spread
  of gradient timestamps across ranks — not the mean loss.
- A step is skewed when the spread (latest - earliest ready time) is >= 10% of the median step
  time (50 ms when step time is not logged); the run has gradient skew when >= 3 steps and
  >= 10% of the steps with GRAD_READY from >= 2 ranks are skewed.
- The culprit is a rank that is the last one in episodes of skewed steps (context.sustained)
  covering >= 20% of the steps: arrival order is the noisiest signal of all (a preempted process
  is last for a few steps in a row), and a gradient that is late now and then does no harm. With
  no such rank the skew is jitter spread over the job: reported as INFO, no rank named.
- grad_ready_ts is a wall-clock reading: across hosts it is compared on the common clock
  (Context.steps is aligned with the hosts' clock offsets), or a host whose clock runs 250 ms
  ahead would make its ranks look late in every step.

- With a parallel topology gradient-ready times are compared inside each data-parallel group
  (`topology.with_groups`, dgroup): those ranks meet in one gradient all-reduce; ranks of other
  pipeline stages reduce other gradients in other groups, at other times by design.

Must not: decide the root cause; read events (it works on the cached step table only).
"""
from __future__ import annotations

import polars as pl

from ..report.model import Finding
from .context import Context, keep, median, rank_major, sustained, wait_expr, window_for
from .evidence import cite, iso, ms, num, pass_id

STEP_SHARE = 0.10
DEFAULT_MS = 50.0
MIN_STEPS = 3
MIN_SHARE = 0.10
CULPRIT_SHARE = 0.20


def find(ctx: Context) -> list[Finding]:
    steps = ctx.steps
    ok = pl.col("rank").is_not_null() & pl.col("grad_ready_ts").is_not_null()
    if steps.is_empty() or not steps.select(ok.any()).item():
        return []
    thr = STEP_SHARE * ctx.median_step_ms if ctx.median_step_ms else DEFAULT_MS
    # per step (and data-parallel group), over the ranks that logged a gradient-ready time: how
    # many, their spread, median and latest, and the median wait (the others masked)
    peers = ctx.peers("dgroup")
    g = pl.col("g")
    per = peers.agg(
        steps.select(ok.alias("ok"), pl.when(ok).then(pl.col("grad_ready_ts")).alias("g"),
                     pl.when(ok).then(wait_expr()).alias("w")),
        pl.col("ok").sum().alias("n"), ((g.max() - g.min()) * 1000.0).alias("spread_ms"), median(g).alias("g_med"),
        g.max().alias("g_max"), median("w").alias("med_wait"),
    ).with_columns(peers.step, (pl.col("spread_ms") >= thr).alias("skewed"))
    # only the columns judged; the ones cited are taken from the table by row (`_row`)
    df = rank_major(
        steps.select("rank", "step", "grad_ready_ts", wait_expr().alias("wait"),
                     pl.int_range(pl.len(), dtype=pl.UInt32).alias("_row"))
        .with_columns(*peers.broadcast(per.select("n", "spread_ms", "g_med", "g_max", "med_wait", "skewed")))
        .pipe(keep, ok & (pl.col("n") >= 2))
        .with_columns(
            ((pl.col("grad_ready_ts") - pl.col("g_med")) * 1000.0).alias("late_ms"),
            (pl.col("grad_ready_ts") == pl.col("g_max")).alias("is_last"),
        )
        .with_columns((pl.col("skewed") & pl.col("is_last")).alias("late"))
    )
    if df.is_empty():
        return []
    judged = per.filter(pl.col("n") >= 2)
    n = judged.get_column("step").n_unique()
    df = df.with_columns(sustained("late", window_for(n)).alias("episode"))
    k = judged.filter(pl.col("skewed")).get_column("step").n_unique()
    if k < MIN_STEPS or k < MIN_SHARE * n:
        return []
    per_rank = (
        df.filter(pl.col("episode")).group_by("rank")
        .agg(pl.len().alias("c"), median("late_ms"), pl.col("step").min().alias("s0"),
             pl.col("step").max().alias("s1"))
        .filter((pl.col("c") >= MIN_STEPS) & (pl.col("c") >= CULPRIT_SHARE * n))
        .sort("rank")
    )
    culprits = [int(r) for r in per_rank.get_column("rank")]
    # the steps' spreads: one value per (step, group) judged
    per_step = judged.select("step", "spread_ms", "med_wait", "skewed")
    if culprits:
        ep = df.filter(pl.col("episode") & pl.col("rank").is_in(culprits))
        spread = per_step.filter(pl.col("step").is_in(ep.get_column("step").unique().implode()))
    else:
        ep = df.filter(pl.col("skewed") & pl.col("is_last"))
        spread = per_step.filter(pl.col("skewed"))
    ep = ep.hstack(steps.select("t_start", "t_end", "file", "ready_line").gather(ep.get_column("_row")))
    med_spread = float(spread.get_column("spread_ms").median())
    max_spread = float(spread.get_column("spread_ms").max())
    med_wait = spread.get_column("med_wait").drop_nulls().median()
    if culprits:
        late = ", ".join(f"rank {int(r['rank'])} last in {r['c']} steps ({r['s0']}–{r['s1']}), "
                         f"{ms(r['late_ms'])} behind the median rank" for r in per_rank.iter_rows(named=True))
        title = f"gradient-ready times spread {ms(med_spread)} across ranks (threshold {ms(thr)}): {late}"
        if med_wait is not None and med_wait < 0.5 * med_spread:
            title += f"; peers wait only {ms(med_wait)}, so the late gradients are applied stale"
        severity = "WARN"
    else:
        title = (f"gradient-ready times spread {ms(med_spread)} across ranks in {k} of {n} steps (threshold "
                 f"{ms(thr)}), but no rank is late consistently: jitter, not one slow rank")
        severity = "INFO"
    worst = ep.sort("late_ms", descending=True).head(3)
    return [Finding(
        rule=pass_id("gradient_skew"), kind="gradient_skew", layer="communication", severity=severity,
        ranks=culprits, title=title,
        evidence={"spread_ms_median": num(med_spread), "spread_ms_max": num(max_spread), "threshold_ms": num(thr),
                  "skewed_steps": k, "steps": n, "median_wait_ms": num(med_wait),
                  "late_steps": {str(int(r["rank"])): int(r["c"]) for r in per_rank.iter_rows(named=True)}},
        lines=cite([{"source_file": w["file"], "line": w["ready_line"], "rank": w["rank"], "timestamp": w["t_end"],
                     "text": f"step {w['step']}: ready {ms(w['late_ms'])} after the median rank"}
                    for w in worst.iter_rows(named=True)], text="text"),
        first_seen=iso(ep.get_column("t_start").min()), last_seen=iso(ep.get_column("t_end").max()),
    )]
