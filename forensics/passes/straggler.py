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
  ranks slow in scattered steps) covering >= 3 steps, >= one window and >= 10% of its steps.

- Ranks that log different subsets of the steps (each its own logging interval) share few or
  no steps, so no window of steps can be judged per step. Then each rank is judged by its
  medians over the steps it logged, within the phase every rank of its group logged, by the
  same rule and thresholds (steady_ranks): a median is above its peers' only when more than
  half the rank's steps are, which scattered scheduler noise does not reach.

- With a parallel topology (Context.topology) a rank is compared only with the ranks that do
  the same work: its pipeline stage (`topology.with_groups`: peer). Stages run different layers
  — the last one also computes the loss head — so a last-stage rank computing more than a
  first-stage one is the design, not a straggler. The evidence names the group and its median.
- A slow pipeline stage: when every rank of a stage (>= 75% of them) computes >= 20% (and
  >= 5 ms) more than the stage's own baseline — its median over the first window of steps —
  in an episode, while the other stages stay below half that rise, the stage is slow (a host
  or a partition that got slower), and the finding names all its ranks. A stage that is slower
  from the first step on cannot be told from a stage that computes more by design (the logs
  state no expected per-stage time): it is not reported.
- Compute is the logged per-op compute (FORWARD/BACKWARD/OPTIMIZER events, compute_ms) when
  the logs carry it (timeline.op_compute), else step - data - comm.

Must not: decide the root cause; read events (it works on the cached step table only).
"""
from __future__ import annotations

import polars as pl

from ..report.model import Finding
from ..topology import Topology
from .context import Context, keep, median, PeerGroups, rank_major, sustained, wait_expr, window_for
from .evidence import cite, iso, ms, num, pass_id, rank_ranges
from .log_every import nearest, rank_medians

STAGE_SHARE = 0.75

REL_EXCESS = 0.20
ABS_EXCESS_MS = 5.0
MIN_STEPS = 3
MIN_SHARE = 0.10


def straggling_steps(steps: pl.DataFrame, peers: PeerGroups) -> tuple[pl.DataFrame, int]:
    """Per (rank, step): compute, wait, the step's peer compute and whether the rank straggled,
    and `_row`, the row of `steps` it is (the columns to cite are taken from there, for the few
    rows cited: the table is filtered with only the columns judged). Peers are the ranks of the
    same `peer` group (the pipeline stage; all ranks without one): `peers` groups the rows of
    `steps` (the step table's, in its order) that way. Also the number of steps judged."""
    ok = pl.col("rank").is_not_null() & pl.col("compute_ms").is_not_null() & wait_expr().is_not_null()
    # per step (and stage), over the ranks with both a compute and a wait time
    x = steps.select(ok.alias("ok"), pl.when(ok).then(pl.col("compute_ms")).alias("c"),
                     pl.when(ok).then(wait_expr()).alias("w"))
    per = peers.agg(
        x, pl.col("ok").sum().alias("n"), median("c").alias("peer_compute"),
        median("w").alias("med_wait"), pl.col("w").min().alias("min_wait"),
    ).with_columns(peers.step).with_columns(peers.agg_in_order(x.select("w"), pl.col("w").sum().alias("sum_wait")))
    df = (
        steps.select("rank", "step", "compute_ms", "peer", wait_expr().alias("wait"),
                     pl.int_range(pl.len(), dtype=pl.UInt32).alias("_row"))
        .with_columns(*peers.broadcast(per.select("n", "peer_compute", "med_wait", "sum_wait", "min_wait")))
        .pipe(keep, pl.col("rank").is_not_null() & pl.col("compute_ms").is_not_null() & pl.col("wait").is_not_null()
              & (pl.col("n") >= 2))
        .with_columns(
            (pl.col("compute_ms") - pl.col("peer_compute")).alias("excess"),
            ((pl.col("sum_wait") - pl.col("wait")) / (pl.col("n") - 1)).alias("others_wait"),
        )
    )
    n_steps = per.filter(pl.col("n") >= 2).get_column("step").n_unique()
    w = window_for(n_steps) if not df.is_empty() else 5
    return rank_major(df).with_columns(slow_expr().alias("slow")).with_columns(sustained("slow", w).alias("episode")), n_steps


def slow_expr() -> pl.Expr:
    """Whether a rank straggles, on a frame with its `compute_ms` and `wait`, its peers' `n`,
    `peer_compute` (median), `med_wait`, `min_wait`, `excess` and `others_wait` (the others'
    mean): per step (straggling_steps) or per rank over a phase (steady_ranks)."""
    # waits least: under half the median wait, or (a group of two or three, where the median is
    # the others' too) the least of its group while the others wait half its excess longer
    least = (pl.col("wait") <= 0.5 * pl.col("med_wait")) | (
        (pl.col("wait") <= pl.col("min_wait")) & (pl.col("n") <= 3)
        & (pl.col("others_wait") - pl.col("wait") >= 0.5 * pl.col("excess")))
    return (
        (pl.col("excess") >= pl.max_horizontal(REL_EXCESS * pl.col("peer_compute"), pl.lit(ABS_EXCESS_MS)))
        & least
        & (pl.col("others_wait") >= 0.5 * pl.col("excess"))
    )


def steady_ranks(steps: pl.DataFrame) -> pl.DataFrame:
    """When the ranks of a peer group log different subsets of the steps (each every k-th step,
    k not the same for all: few or no steps are logged by all of them, so the per-step
    comparison has little or nothing to compare), each rank's medians over the steps it logged,
    within the phase every rank of the group logged (from the latest first step to the earliest
    last step), judged against the group's medians by the per-step rule (slow_expr). A median
    is above its peers' only when more than half the rank's steps are: scattered slow steps of
    scheduler noise do not move it. One row per rank: rank, peer, compute_ms, wait, n_rows,
    first/last step of the phase, excess, slow. Empty when all ranks log the same steps."""
    d = steps.filter(pl.col("rank").is_not_null() & pl.col("compute_ms").is_not_null()
                     & wait_expr().is_not_null()).select("rank", "step", "peer", "compute_ms", wait_expr().alias("wait"))
    per = rank_medians(d, "peer", ["compute_ms", "wait"], MIN_STEPS)
    if per.is_empty():
        return per
    per = (
        per.with_columns(median("compute_ms").over("peer").alias("peer_compute"),
                         median("wait").over("peer").alias("med_wait"), pl.col("wait").min().over("peer").alias("min_wait"),
                         pl.col("wait").sum().over("peer").alias("sum_wait"))
        .with_columns((pl.col("compute_ms") - pl.col("peer_compute")).alias("excess"),
                      ((pl.col("sum_wait") - pl.col("wait")) / (pl.col("n") - 1)).alias("others_wait"))
    )
    return per.with_columns(slow_expr().alias("slow")).sort("rank")


def find(ctx: Context) -> list[Finding]:
    topo = ctx.topology
    steps = ctx.with_groups(ctx.steps.select(
        "rank", "step", "compute_ms", "wait_est", "t_start", "t_end", "file", "train_line", "ready_line", "comm_line",
    ))
    out = slow_stages(steps, topo) if topo is not None else []
    df, n_steps = straggling_steps(steps, ctx.peers("peer"))
    cited = steps.select("t_start", "t_end", "file", "train_line", "ready_line", "comm_line")
    per_rank = pl.DataFrame() if df.is_empty() else (
        df.group_by("rank")
        .agg(
            pl.len().alias("n_steps"),
            pl.col("episode").sum().alias("n_slow"),
        )
        # at least one whole window of steps: a shorter run of slow steps is a fragment of an
        # episode (a real 5-rank run on 2 cores had a healthy rank slow for 4 steps of 40)
        .filter((pl.col("n_slow") >= max(MIN_STEPS, window_for(n_steps)))
                & (pl.col("n_slow") >= MIN_SHARE * pl.col("n_steps")))
        .sort("rank")
    )
    named: set[int] = set()
    for row in per_rank.iter_rows(named=True):
        r = int(row["rank"])
        mine = df.filter((pl.col("rank") == r) & pl.col("episode"))
        mine = mine.hstack(cited.gather(mine.get_column("_row")))
        slow_steps = mine.get_column("step")
        # the ranks at its slow steps: a mask and the columns read (a copy of the whole table
        # for a straggler slow in most steps costs more than the rest of the pass)
        at_mask = df.select(pl.col("step").is_in(slow_steps.implode())).to_series()
        excess = float(mine.get_column("excess").median())
        others = (
            df.select("rank", "wait", "compute_ms", "peer").filter(at_mask & (df.get_column("rank") != r))
            .group_by("rank").agg(median("wait").alias("wait"), median("compute_ms").alias("compute"),
                                  pl.col("peer").first())
            .sort("rank")
        )
        worst_step = mine.sort("excess", descending=True).get_column("step")[0]
        near = df.filter(at_mask & (df.get_column("step") == worst_step))
        f = _finding(topo, r, mine, others, excess, near, cited, int(row["n_steps"]), "")
        if f is not None:
            out.append(f)
            named.add(r)
    return out + _steady(topo, steps, cited, named)


def _steady(topo: Topology | None, steps: pl.DataFrame, cited: pl.DataFrame, named: set[int]) -> list[Finding]:
    """The ranks that straggle by their medians over the steps each logged (steady_ranks), when
    the per-step comparison did not name them."""
    per = steady_ranks(steps)
    if per.is_empty() or not per.get_column("slow").any():
        return []
    rows = (steps.select("rank", "step", "compute_ms", "peer", wait_expr().alias("wait"),
                         pl.int_range(pl.len(), dtype=pl.UInt32).alias("_row"))
            .join(per.select("rank", "lo", "hi"), on="rank")
            .filter(pl.col("step").is_between(pl.col("lo"), pl.col("hi")) & pl.col("compute_ms").is_not_null()
                    & pl.col("wait").is_not_null()))
    out: list[Finding] = []
    for row in per.filter(pl.col("slow")).iter_rows(named=True):
        r = int(row["rank"])
        if r in named:
            continue
        mine = rows.filter(pl.col("rank") == r).with_columns((pl.col("compute_ms") - row["peer_compute"]).alias("excess"))
        mine = mine.hstack(cited.gather(mine.get_column("_row")))
        others = (per.filter(pl.col("rank") != r)
                  .select("rank", "wait", pl.col("compute_ms").alias("compute"), "peer"))
        worst_step = int(mine.sort("excess", descending=True).get_column("step")[0])
        # the waiters' lines nearest the rank's worst step (they did not all log that one)
        near = nearest(rows.filter(pl.col("rank") != r), worst_step)
        basis = f"medians over the steps each rank logged, {int(row['n_rows'])} of its own"
        f = _finding(topo, r, mine, others, float(row["excess"]), near, cited, int(row["n_rows"]), basis,
                     compared="per-rank medians over the steps each rank logged")
        if f is not None:
            out.append(f)
    return out


def _finding(topo: Topology | None, r: int, mine: pl.DataFrame, others: pl.DataFrame, excess: float,
             near: pl.DataFrame, cited: pl.DataFrame, n_steps: int, basis: str,
             compared: str | None = None) -> Finding | None:
    """The straggler finding for rank `r`: `mine` its straggling rows (with the cited columns),
    `others` the other ranks' median wait and compute, `near` the rows of the steps to cite the
    waiters at. None when nobody waits for it."""
    slow_steps = mine.get_column("step")
    peer = int(mine.get_column("peer")[0])
    # everyone who waits for it: its stage's peers in their all-reduce, its pipeline in p2p
    victims = others.filter(pl.col("wait") >= 0.5 * excess)
    if victims.is_empty():
        return None
    v_ranks = [int(x) for x in victims.get_column("rank")]
    my_compute = float(mine.get_column("compute_ms").median())
    group = others.filter(pl.col("peer") == peer)
    peer_compute = float(group.get_column("compute").median())
    my_wait = float(mine.get_column("wait").median())
    v_wait = float(victims.get_column("wait").median())
    worst = mine.sort("excess", descending=True).row(0, named=True)
    vict_rows = near.filter(pl.col("rank").is_in(v_ranks)).sort("rank").head(3)
    vict_rows = vict_rows.hstack(cited.gather(vict_rows.get_column("_row")))
    lines = cite([{"source_file": worst["file"], "line": worst["train_line"] or worst["ready_line"], "rank": r,
                   "timestamp": worst["t_end"], "text": f"step {worst['step']}: compute {ms(worst['compute_ms'])}"}],
                 text="text")
    lines += cite([{"source_file": v["file"], "line": v["comm_line"], "rank": v["rank"], "timestamp": v["t_end"],
                    "text": f"step {v['step']}: waits {ms(v['wait'])}"} for v in vict_rows.iter_rows(named=True)],
                  text="text")
    s0, s1 = int(slow_steps.min()), int(slow_steps.max())
    where = "peers"
    grouping: dict = {}
    if topo is not None:
        g_ranks = sorted([r, *(int(x) for x in group.get_column("rank"))])
        where = f"the other ranks of {topo.describe_group(peer)} ({rank_ranges(g_ranks)})"
        grouping = {"peer_group": topo.describe_group(peer), "group_ranks": g_ranks,
                    "group_median_compute_ms": num(peer_compute), "topology": topo.to_dict()}
    if compared:
        grouping["compared"] = compared
    title = (f"rank {r} is a straggler: computes {ms(my_compute)} per step vs {ms(peer_compute)} on {where} and "
             f"waits least ({ms(my_wait)}); ranks {rank_ranges(v_ranks)} wait {ms(v_wait)} per step for it "
             f"({basis or f'{len(slow_steps)} steps'}, {s0}–{s1})")
    return Finding(
        rule=pass_id("straggler"), kind="straggler", layer="resource", severity="WARN",
        ranks=[r], victims=v_ranks, title=title,
        evidence={"compute_ms": num(my_compute), "peer_compute_ms": num(peer_compute),
                  "excess_ms": num(excess), "wait_ms": num(my_wait), "victim_wait_ms": num(v_wait),
                  "straggling_steps": len(slow_steps), "steps": n_steps,
                  "first_step": s0, "last_step": s1, **grouping},
        lines=lines,
        first_seen=iso(mine.get_column("t_start").min()), last_seen=iso(mine.get_column("t_end").max()),
    )


def slow_stages(steps: pl.DataFrame, topo: Topology) -> list[Finding]:
    """Pipeline stages whose ranks all got slower than the stage's own baseline (see the module
    docstring), each a finding naming all the stage's ranks. `steps` has `peer` (the stage)."""
    df = steps.filter(pl.col("rank").is_not_null() & pl.col("compute_ms").is_not_null() & (pl.col("peer") >= 0))
    if df.is_empty() or df.get_column("peer").n_unique() < 2:
        return []
    n_steps = df.get_column("step").n_unique()
    w = window_for(n_steps)
    first = df.get_column("step").unique().sort().head(w)
    base = (df.filter(pl.col("step").is_in(first.implode()))
            .group_by("rank").agg(median("compute_ms").alias("base")))
    per = (
        df.join(base, on="rank").with_columns(wait_expr().alias("wait"))
        .with_columns((pl.col("compute_ms") - pl.col("base")).alias("rise"))
        .with_columns(((pl.col("rise") >= pl.max_horizontal(REL_EXCESS * pl.col("base"), pl.lit(ABS_EXCESS_MS)))
                       ).alias("up"))
        .group_by("peer", "step")
        .agg(pl.col("up").mean().alias("share"), median(pl.col("rise") / pl.col("base")).alias("rel"),
             median("compute_ms").alias("compute"), median("base").alias("base"),
             pl.col("t_start").min(), pl.col("t_end").max(), pl.len().alias("n"))
    )
    # the other stages at the same step: how much they rose (a job-wide slowdown lifts them all)
    per = per.with_columns(
        ((pl.col("rel").sum().over("step") - pl.col("rel")) / (pl.len().over("step") - 1)).alias("others_rel"))
    per = per.with_columns(
        ((pl.col("share") >= STAGE_SHARE) & (pl.col("n") >= 1) & (pl.col("others_rel") < 0.5 * pl.col("rel")))
        .alias("slow")).sort("peer", "step")
    per = per.with_columns(sustained("slow", w, by="peer").alias("episode"))
    stages = topo.stages()
    everyone = sorted(int(x) for x in df.get_column("rank").unique())
    out: list[Finding] = []
    for peer in sorted(int(x) for x in per.get_column("peer").unique()):
        ep = per.filter((pl.col("peer") == peer) & pl.col("episode"))
        total = per.filter(pl.col("peer") == peer).height
        if ep.height < MIN_STEPS or ep.height < MIN_SHARE * total:
            continue
        ranks = stages.get(peer, [])
        slow_steps = ep.get_column("step")
        at = df.filter(pl.col("step").is_in(slow_steps.implode()))
        waits = (at.filter(pl.col("peer") != peer).with_columns(wait_expr().alias("wait"))
                 .group_by("rank").agg(median("wait")).sort("rank"))
        before = (df.filter(~pl.col("step").is_in(slow_steps.implode()) & (pl.col("peer") != peer))
                  .with_columns(wait_expr().alias("wait")).group_by("rank").agg(median("wait").alias("w0")))
        waits = waits.join(before, on="rank", how="left")
        rise = float(ep.get_column("compute").median() - ep.get_column("base").median())
        victims = [int(x) for x in waits.filter(pl.col("wait") - pl.col("w0").fill_null(0.0) >= 0.5 * rise)
                   .get_column("rank")]
        compute, base_ms = float(ep.get_column("compute").median()), float(ep.get_column("base").median())
        s0, s1 = int(slow_steps.min()), int(slow_steps.max())
        worst = (at.filter(pl.col("peer") == peer).sort("compute_ms", descending=True).head(len(ranks) or 1))
        lines = cite([{"source_file": x["file"], "line": x["train_line"] or x["ready_line"], "rank": x["rank"],
                       "timestamp": x["t_end"], "text": f"step {x['step']}: compute {ms(x['compute_ms'])}"}
                      for x in worst.head(3).iter_rows(named=True)], text="text")
        others = [x for x in everyone if x not in ranks]
        title = (f"pipeline stage {peer} (ranks {rank_ranges(ranks)}) is slow: its ranks compute {ms(compute)} per "
                 f"step vs {ms(base_ms)} before (+{100 * rise / base_ms:.0f}%), while the other stages "
                 f"({rank_ranges(others)}) compute as before ({len(slow_steps)} steps, {s0}–{s1})")
        if victims:
            title += f"; ranks {rank_ranges(victims)} wait for it"
        out.append(Finding(
            rule=pass_id("straggler"), kind="straggler", layer="resource", severity="WARN",
            ranks=ranks, victims=victims, title=title,
            evidence={"scope": "pipeline_stage", "stage": peer, "stage_ranks": ranks, "compute_ms": num(compute),
                      "baseline_compute_ms": num(base_ms), "excess_ms": num(rise),
                      "other_stages_rise": num(float(ep.get_column("others_rel").median())),
                      "straggling_steps": len(slow_steps), "steps": total, "first_step": s0, "last_step": s1,
                      "topology": topo.to_dict()},
            lines=lines,
            first_seen=iso(ep.get_column("t_start").min()), last_seen=iso(ep.get_column("t_end").max()),
        ))
    return out
