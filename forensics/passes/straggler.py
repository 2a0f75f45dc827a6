"""Which rank computes slowly and makes everyone else wait?

Question: is there a straggler — a rank whose compute time per step is well above its peers'
while the others wait for it in every collective?

Domain facts relied on:
- In synchronous data parallelism every rank leaves an all-reduce at the same moment, so step
  times are equal and cannot name the culprit. The straggler is the rank that computes LONGEST
  and, arriving last, WAITS LEAST; the long collective waits of all the other ranks are the
  symptom, never the cause (`ranks` = the slow rank, `victims` = the waiters).
- Compute here is step time minus data loading minus collective time, so a rank slowed by its
  input pipeline is not called a straggler (that is data_load_skew's question).
- A step counts as a straggling step for rank r when r's compute exceeds the step's median
  compute by >= 20% (and >= 5 ms), r waits less than half the step's median wait, and the other
  ranks wait on average at least half of r's excess. A rank is a straggler when that holds in
  an episode (>= 75% of a window of steps, see context.sustained: scheduler noise makes random
  ranks slow in scattered steps) covering >= 3 steps and >= 10% of its steps.

Must not: decide the root cause; read events (it works on the cached step table only).
"""
from __future__ import annotations

import polars as pl

from ..report.model import Finding
from .context import Context, sustained, wait_expr, window_for
from .evidence import cite, iso, ms, num, pass_id, rank_ranges

REL_EXCESS = 0.20
ABS_EXCESS_MS = 5.0
MIN_STEPS = 3
MIN_SHARE = 0.10


def straggling_steps(steps: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, step): compute, wait, the step's peer compute and whether the rank straggled."""
    df = (
        steps.filter(pl.col("rank").is_not_null() & pl.col("compute_ms").is_not_null())
        .with_columns(wait_expr().alias("wait"))
        .filter(pl.col("wait").is_not_null())
        .with_columns(
            pl.len().over("step").alias("n"),
            pl.col("compute_ms").median().over("step").alias("peer_compute"),
            pl.col("wait").median().over("step").alias("med_wait"),
            pl.col("wait").sum().over("step").alias("sum_wait"),
        )
        .filter(pl.col("n") >= 2)
        .with_columns(
            (pl.col("compute_ms") - pl.col("peer_compute")).alias("excess"),
            ((pl.col("sum_wait") - pl.col("wait")) / (pl.col("n") - 1)).alias("others_wait"),
        )
    )
    slow = (
        (pl.col("excess") >= pl.max_horizontal(REL_EXCESS * pl.col("peer_compute"), pl.lit(ABS_EXCESS_MS)))
        & (pl.col("wait") <= 0.5 * pl.col("med_wait"))
        & (pl.col("others_wait") >= 0.5 * pl.col("excess"))
    )
    w = window_for(df.get_column("step").n_unique()) if not df.is_empty() else 5
    return df.sort("rank", "step").with_columns(slow.alias("slow")).with_columns(sustained("slow", w).alias("episode"))


def find(ctx: Context) -> list[Finding]:
    df = straggling_steps(ctx.steps.select(
        "rank", "step", "compute_ms", "wait_est", "t_start", "t_end", "file", "train_line", "ready_line", "comm_line"))
    if df.is_empty():
        return []
    per_rank = (
        df.group_by("rank")
        .agg(
            pl.len().alias("n_steps"),
            pl.col("episode").sum().alias("n_slow"),
        )
        .filter((pl.col("n_slow") >= MIN_STEPS) & (pl.col("n_slow") >= MIN_SHARE * pl.col("n_steps")))
        .sort("rank")
    )
    out: list[Finding] = []
    for row in per_rank.iter_rows(named=True):
        r = int(row["rank"])
        mine = df.filter((pl.col("rank") == r) & pl.col("episode"))
        slow_steps = mine.get_column("step")
        at = df.filter(pl.col("step").is_in(slow_steps.implode()))
        excess = float(mine.get_column("excess").median())
        others = (
            at.filter(pl.col("rank") != r)
            .group_by("rank").agg(pl.col("wait").median().alias("wait"), pl.col("compute_ms").median().alias("compute"))
            .sort("rank")
        )
        victims = others.filter(pl.col("wait") >= 0.5 * excess)
        if victims.is_empty():
            continue
        v_ranks = [int(x) for x in victims.get_column("rank")]
        my_compute = float(mine.get_column("compute_ms").median())
        peer_compute = float(others.get_column("compute").median())
        my_wait = float(mine.get_column("wait").median())
        v_wait = float(victims.get_column("wait").median())
        worst = mine.sort("excess", descending=True).row(0, named=True)
        vict_rows = at.filter((pl.col("step") == worst["step"]) & pl.col("rank").is_in(v_ranks)).sort("rank").head(3)
        lines = cite([{"source_file": worst["file"], "line": worst["train_line"] or worst["ready_line"], "rank": r,
                       "timestamp": worst["t_end"], "text": f"step {worst['step']}: compute {ms(worst['compute_ms'])}"}],
                     text="text")
        lines += cite([{"source_file": v["file"], "line": v["comm_line"], "rank": v["rank"], "timestamp": v["t_end"],
                        "text": f"step {v['step']}: waits {ms(v['wait'])}"} for v in vict_rows.iter_rows(named=True)],
                      text="text")
        s0, s1 = int(slow_steps.min()), int(slow_steps.max())
        title = (f"rank {r} is a straggler: computes {ms(my_compute)} per step vs {ms(peer_compute)} on peers and "
                 f"waits least ({ms(my_wait)}); ranks {rank_ranges(v_ranks)} wait {ms(v_wait)} per step for it "
                 f"({len(slow_steps)} steps, {s0}–{s1})")
        out.append(Finding(
            rule=pass_id("straggler"), kind="straggler", layer="resource", severity="WARN",
            ranks=[r], victims=v_ranks, title=title,
            evidence={"compute_ms": num(my_compute), "peer_compute_ms": num(peer_compute),
                      "excess_ms": num(excess), "wait_ms": num(my_wait), "victim_wait_ms": num(v_wait),
                      "straggling_steps": len(slow_steps), "steps": int(row["n_steps"]),
                      "first_step": s0, "last_step": s1},
            lines=lines,
            first_seen=iso(mine.get_column("t_start").min()), last_seen=iso(mine.get_column("t_end").max()),
        ))
    return out
