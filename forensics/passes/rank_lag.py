"""Which rank fell behind the others in step progress?

Question: at the end of the logs, is some rank at an earlier step than the rest?

Domain facts relied on:
- Seed 003 case 2: "[Rank 0] Step 2340 … [Rank 3] Step 2339 ← one step behind" — a rank whose
  output lags the others' is the one in trouble (there: buffers piling up until CUDA OOM).
- In synchronous training the ranks cannot drift apart by more than the step in flight, so a
  rank whose last logged step is below the other ranks' is stuck or dead — the ranks ahead of it
  are not at fault. Progress is the highest step seen in ANY event of the rank (not only
  TRAIN_STEP), so one lost or truncated last line does not fake a lag.

Must not: decide the root cause; read events (it works on the cached step table only).
"""
from __future__ import annotations

import polars as pl

from ..report.model import Finding
from .context import Context
from .evidence import cite, iso, num, pass_id, rank_ranges


def progress(steps: pl.DataFrame) -> pl.DataFrame:
    """Per rank: last step seen, when, and the line that shows it."""
    return (
        steps.filter(pl.col("rank").is_not_null())
        .sort("rank", "step")
        .group_by("rank")
        .agg(
            pl.col("step").last().alias("last_step"),
            pl.col("t_end").last().alias("t"),
            pl.col("t_end").max().alias("t_max"),
            pl.col("file").last().alias("file"),
            pl.coalesce(pl.col("train_line"), pl.col("comm_line"), pl.col("ready_line"), pl.col("data_line"))
            .last().alias("line"),
        )
        .sort("rank")
    )


def find(ctx: Context) -> list[Finding]:
    prog = progress(ctx.steps.select("rank", "step", "t_end", "file", "train_line", "comm_line", "ready_line", "data_line"))
    if prog.height < 2:
        return []
    ref = float(prog.get_column("last_step").median())
    behind = prog.filter(pl.col("last_step") < ref)
    if behind.is_empty():
        return []
    ahead = prog.filter(pl.col("last_step") >= ref)
    lead_step = int(ahead.get_column("last_step").max())
    lag_ranks = [int(r) for r in behind.get_column("rank")]
    worst = behind.sort("last_step").row(0, named=True)
    lagging = ", ".join(f"rank {int(r['rank'])} at step {int(r['last_step'])}" for r in behind.iter_rows(named=True))
    title = (f"{lagging} while ranks {rank_ranges(int(x) for x in ahead.get_column('rank'))} reached step "
             f"{lead_step}")
    lead = ahead.sort("last_step", descending=True).row(0, named=True)
    return [Finding(
        rule=pass_id("rank_lag"), kind="rank_lag", layer="training", severity="WARN",
        ranks=lag_ranks, title=title,
        evidence={"last_step": {str(int(r["rank"])): int(r["last_step"]) for r in prog.iter_rows(named=True)},
                  "reference_step": num(ref), "max_lag_steps": int(lead_step - worst["last_step"])},
        lines=cite([{"source_file": r["file"], "line": r["line"], "rank": r["rank"], "timestamp": r["t"],
                     "text": f"last step {r['last_step']}"} for r in [*behind.iter_rows(named=True), lead]],
                   text="text"),
        first_seen=iso(behind.get_column("t").min()), last_seen=iso(prog.get_column("t_max").max()),
    )]
