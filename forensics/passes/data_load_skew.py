"""Which rank waits for its input data while the others wait for it?

Question: is one rank's data loading much slower than its peers' (seed 000 §4.4: rank 12's
DATA_LOAD_TIME averaged 180 ms vs 20 ms on the others, its disk read 40 MB/s vs 1.2 GB/s, its
GPU utilisation 55% vs 95% — the loss curve looked normal, the job ran 40% slow)?

Domain facts relied on:
- In synchronous training a rank that fetches its batch late arrives late at the all-reduce, so
  the other ranks wait: the rank with the slow input pipeline is at fault (`ranks`), the waiters
  are `victims`. Its compute time is normal, which is what separates it from a straggler.
- A step counts when the rank's data_load_ms is >= 2.5x the step's median across ranks and the
  excess is material (>= 5 ms and >= 5% of the median step time); a rank is skewed when that
  holds in an episode (context.sustained: a loaded host slows random ranks' loading in scattered
  steps) covering >= 3 steps and >= 10% of its steps.
- Ranks that log different subsets of the steps (each its own logging interval) share few
  steps, and a step logged by two ranks has its median halfway between them (never 2.5x below
  the slow one): the slow rank's skewed steps lie scattered among its own rows, no episode. Then
  each rank is judged by its median loading over the steps it logged, within the phase every
  rank of its group logged (log_every.rank_medians), by the same thresholds: a median is above
  its peers' only when more than half the rank's steps are.
- The disk read rate (disk_read_mbps) of the same rank, when logged, is the physical evidence
  (HDD vs NVMe in the seed case).

- With a parallel topology a rank's loading is compared only inside its data-parallel group
  (same pipeline stage and tensor-parallel rank: `topology.with_groups`, dgroup): in a pipeline
  only the first stage (and the last, for labels) loads batches, so the other stages' near-zero
  loading times are no baseline.

Must not: decide the root cause; read events (it works on the cached step table only).
"""
from __future__ import annotations

import polars as pl

from ..report.model import Finding
from ..topology import Topology
from .context import Context, keep, median, rank_major, sustained, wait_expr, window_for
from .evidence import cite, iso, ms, num, pass_id, rank_ranges
from .log_every import nearest, rank_medians

RATIO = 2.5
ABS_EXCESS_MS = 5.0
STEP_SHARE = 0.05
MIN_STEPS = 3
MIN_SHARE = 0.10


def find(ctx: Context) -> list[Finding]:
    st = ctx.steps.select(
        "rank", "step", "data_load_ms", "wait_est", "disk_read_mbps", "t_start", "t_end", "file", "data_line", "comm_line",
    )
    ok = pl.col("rank").is_not_null() & pl.col("data_load_ms").is_not_null()
    if st.is_empty() or not st.select(ok.any()).item():
        return []
    topo = ctx.topology
    floor = max(ABS_EXCESS_MS, STEP_SHARE * (ctx.median_step_ms or 0.0))
    # per step (and data-parallel group): how many ranks logged their loading, and its median
    # over them (the rows without one masked, as filtering them first would leave them out)
    peers = ctx.peers("dgroup")
    per = peers.agg(st.select(ok.alias("ok"), pl.when(ok).then(pl.col("data_load_ms")).alias("dl")),
                    pl.col("ok").sum().alias("n"), median("dl").alias("peer_dl")).with_columns(peers.step)
    df = rank_major(
        ctx.with_groups(st.with_columns(*peers.broadcast(per.select("n", "peer_dl"))))
        .with_columns(wait_expr().alias("wait"))
        .pipe(keep, ok & (pl.col("n") >= 2))
        .with_columns(
            ((pl.col("data_load_ms") >= RATIO * pl.col("peer_dl"))
             & (pl.col("data_load_ms") - pl.col("peer_dl") >= floor)).alias("slow1")
        )
    )
    n_steps = per.filter(pl.col("n") >= 2).get_column("step").n_unique()
    df = df.with_columns(sustained("slow1", window_for(n_steps)).alias("slow"))
    per_rank = (
        df.group_by("rank")
        .agg(pl.len().alias("n_steps"), pl.col("slow").sum().alias("n_slow"))
        .filter((pl.col("n_slow") >= MIN_STEPS) & (pl.col("n_slow") >= MIN_SHARE * pl.col("n_steps")))
        .sort("rank")
    )
    out: list[Finding] = []
    skewed = [int(x) for x in per_rank.get_column("rank")]
    for row in per_rank.iter_rows(named=True):
        r = int(row["rank"])
        mine = df.filter((pl.col("rank") == r) & pl.col("slow"))
        slow_steps = mine.get_column("step")
        # the other ranks at its slow steps: only the columns read from them (the steps are
        # nearly all of a long run's: a copy of every column would cost more than the rest)
        at_mask = df.select(pl.col("step").is_in(slow_steps.implode()) & ~pl.col("rank").is_in(skewed)).to_series()
        at = df.select("rank", "wait").filter(at_mask)
        group = df.select("rank", "data_load_ms", "disk_read_mbps").filter(
            at_mask & (df.get_column("dgroup") == mine.get_column("dgroup")[0]))
        worst_step = mine.sort("data_load_ms", descending=True).get_column("step")[0]
        near = df.filter(at_mask & (df.get_column("step") == worst_step))
        out.append(_finding(topo, r, mine, at, group, near, int(row["n_steps"]), f"{len(slow_steps)} steps"))
    return out + _steady(topo, df, floor, set(skewed))


def _steady(topo: Topology | None, rows: pl.DataFrame, floor: float, named: set[int]) -> list[Finding]:
    """The ranks whose loading is skewed by their medians over the steps each logged, when the
    ranks log different subsets of the steps (log_every.rank_medians) and the per-step
    comparison did not name them: the same thresholds, on the medians. `rows`: the per-step
    path's (the steps two or more ranks of a group logged)."""
    per = rank_medians(rows.select("rank", "step", "dgroup", "data_load_ms"), "dgroup", ["data_load_ms"], MIN_STEPS)
    if per.is_empty():
        return []
    per = per.with_columns(median("data_load_ms").over("dgroup").alias("peer_dl")).filter(
        (pl.col("data_load_ms") >= RATIO * pl.col("peer_dl")) & (pl.col("data_load_ms") - pl.col("peer_dl") >= floor)
        & ~pl.col("rank").is_in(list(named)))
    out: list[Finding] = []
    for row in per.iter_rows(named=True):
        r = int(row["rank"])
        phase = rows.filter(pl.col("step").is_between(row["lo"], row["hi"]))
        mine = phase.filter(pl.col("rank") == r)
        others = phase.filter((pl.col("rank") != r) & ~pl.col("rank").is_in(per.get_column("rank").implode()))
        group = others.filter(pl.col("dgroup") == row["dgroup"])
        worst_step = int(mine.sort("data_load_ms", descending=True).get_column("step")[0])
        basis = f"medians over the steps each rank logged, {int(row['n_rows'])} of its own"
        out.append(_finding(topo, r, mine, others.select("rank", "wait"), group, nearest(others, worst_step),
                            int(row["n_rows"]), basis, compared="per-rank medians over the steps each rank logged"))
    return out


def _finding(topo: Topology | None, r: int, mine: pl.DataFrame, at: pl.DataFrame, group: pl.DataFrame,
             near: pl.DataFrame, n_steps: int, basis: str, compared: str | None = None) -> Finding:
    """The finding for rank `r`: `mine` its skewed rows, `at` the other ranks' waits meanwhile,
    `group` its data-parallel peers' loading, `near` the rows to cite the waiters at."""
    slow_steps = mine.get_column("step")
    my_dl = float(mine.get_column("data_load_ms").median())
    peer_dl = group.get_column("data_load_ms").median()
    excess = my_dl - (peer_dl or 0.0)
    my_disk = mine.get_column("disk_read_mbps").drop_nulls().median()
    peer_disk = group.get_column("disk_read_mbps").drop_nulls().median()
    waits = at.group_by("rank").agg(median("wait")).filter(pl.col("wait") >= 0.5 * excess).sort("rank")
    v_ranks = [int(x) for x in waits.get_column("rank")]
    v_wait = waits.get_column("wait").median() if v_ranks else None
    worst = mine.sort("data_load_ms", descending=True).row(0, named=True)
    grouping: dict = {}
    where = "peers"
    if topo is not None:
        g_ranks = sorted({r, *(int(x) for x in group.get_column("rank").unique())})
        where = f"its data-parallel group ({rank_ranges(g_ranks)})"
        grouping = {"peer_group": f"data-parallel group {mine.get_column('dgroup')[0]} (pp/tp/cp)",
                    "group_ranks": g_ranks, "group_median_data_load_ms": num(peer_dl)}
    if compared:
        grouping["compared"] = compared
    title = f"rank {r} loads each batch in {ms(my_dl)} vs {ms(peer_dl)} on {where}"
    if my_disk is not None and peer_disk is not None:
        title += f" (disk read {my_disk:.0f} MB/s vs {peer_disk:.0f} MB/s)"
    if v_ranks:
        title += f"; ranks {rank_ranges(v_ranks)} wait {ms(v_wait)} per step for it"
    title += f" ({basis}, {int(slow_steps.min())}–{int(slow_steps.max())})"
    vict_rows = near.filter(pl.col("rank").is_in(v_ranks)).sort("rank").head(2)
    lines = cite([{"source_file": worst["file"], "line": worst["data_line"], "rank": r, "timestamp": worst["t_start"],
                   "text": f"step {worst['step']}: data_load {ms(worst['data_load_ms'])}"}], text="text")
    lines += cite([{"source_file": v["file"], "line": v["comm_line"], "rank": v["rank"], "timestamp": v["t_end"],
                    "text": f"step {v['step']}: waits {ms(v['wait'])}"} for v in vict_rows.iter_rows(named=True)],
                  text="text")
    return Finding(
        rule=pass_id("data_load_skew"), kind="data_load_skew", layer="resource", severity="WARN",
        ranks=[r], victims=v_ranks, title=title,
        evidence={"data_load_ms": num(my_dl), "peer_data_load_ms": num(peer_dl), "excess_ms": num(excess),
                  "disk_read_mbps": num(my_disk), "peer_disk_read_mbps": num(peer_disk),
                  "victim_wait_ms": num(v_wait), "skewed_steps": len(slow_steps), "steps": n_steps,
                  **grouping},
        lines=lines,
        first_seen=iso(mine.get_column("t_start").min()), last_seen=iso(mine.get_column("t_end").max()),
    )
