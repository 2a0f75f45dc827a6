"""What a slowdown cost: how much sooner the run would have ended had the faulty rank(s) run
like their peers — a what-if replay over the step table.

Owns `finding_cost`, `attach_costs` and the two replays they use (`peer_replay`,
`temporal_replay`). Must not judge anything (passes find, this only prices what they found),
must not change the step table or the findings' other fields, and never prints.

Domain facts relied on:
- In a synchronous data-parallel step every rank leaves the collective when the LAST rank has
  arrived at it, plus the transfer: the step's duration is max over ranks of (the rank's own
  work before the collective) + transfer. The rank's own work is its data loading plus its
  compute (`compute_ms` = step - data - comm, context.py), so `data_load_ms + compute_ms` is the
  rank's arrival at the collective, measured from the step's start, and the transfer (the part
  no rank waits in) is the same for every rank.
- So replacing the faulty ranks' phase times (compute, data, or both: `PEER_PHASES`) by the
  median of the other ranks at the same step — never making them slower than they were — and
  taking the max again gives the step's duration had they kept pace; the difference, summed over
  every step of the run, is the time the fault cost. The transfer cancels out: it is not needed.
  In a step where the rank kept pace the replay gives back at most the jitter by which it
  happened to be the last to arrive (< 0.5% of a healthy run, tests/test_cost.py).
- With a parallel topology (Context.topology) "the other ranks" are the ones that do the same
  work, as in the passes that found the fault: compute is replayed at the median of the rank's
  pipeline stage (the last stage computes more by design), data loading at the median of its
  data-parallel group (`topology.with_groups`: peer, dgroup). A faulty rank with no healthy
  peer in its group (a whole slow stage) has no peer to say what "normal" is: it is priced
  against the run's own steps outside the finding instead (`temporal_replay` of the step time).
- A fault of the fabric itself (comm_bound in "network" mode, low_bandwidth: a slow link slows
  every rank's transfer alike) or of the whole job (throughput_drop) has no healthy peer at the
  same step: its reference is the run's own steps outside the finding's window (median
  transfer or step time there), and only what lies above it counts (`temporal_replay`). A run
  slow from start to end gives no such reference: its cost is unknown (None), not zero.
- share = seconds / wall time of the run (first to last event); gpu_hours = seconds x world
  size / 3600: every GPU of the job waited for the slow one.
"""
from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any, Callable, Sequence

import polars as pl

from ..report.model import Finding
from .context import PeerGroups, median, peer_groups
from .evidence import parse_iso

if TYPE_CHECKING:
    from ..topology import Topology
    from .context import Context

# The group a phase is compared in (topology.with_groups): compute within the pipeline stage,
# data loading within the data-parallel group.
GROUP_OF = {"compute_ms": "peer", "data_load_ms": "dgroup"}

# Per kind, the phases of the faulty rank(s) that are replayed at their peers' median.
PEER_PHASES: dict[str, tuple[str, ...]] = {
    "straggler": ("compute_ms",),
    "thermal_throttling": ("compute_ms",),          # a throttled GPU computes slowly
    "data_load_skew": ("data_load_ms",),
    "gpu_underutilized": ("data_load_ms", "compute_ms"),   # idle for either reason
    "gradient_skew": ("data_load_ms", "compute_ms"),       # late gradients: late arrival
    "comm_bound": ("data_load_ms", "compute_ms"),          # waiting mode: the rank(s) waited for
}
# Kinds whose reference is the run's own steps outside the finding: which per-step quantity.
TEMPORAL: dict[str, str] = {
    "throughput_drop": "step",
    "low_bandwidth": "transfer",
    "comm_bound": "transfer",                              # network mode: everyone's transfer
}
SLOWDOWNS = frozenset(PEER_PHASES) | frozenset(TEMPORAL)
# The first steps include start-up (compilation, allocator warm-up, the first data fetch): never
# the reference of "normal".
SKIP_STEPS = 2
MIN_REFERENCE_STEPS = 3

STEP_COLUMNS = ["rank", "step", "t_start", "t_end", "step_time_ms", "data_load_ms", "compute_ms", "comm_ms", "wait_est"]


def _window(steps: pl.DataFrame, f: Finding) -> pl.Expr:
    """The finding's steps: its first_step..last_step when it names them, else the steps that
    overlap its first_seen..last_seen; every step when it says neither."""
    ev = f.evidence or {}
    s0, s1 = ev.get("first_step"), ev.get("last_step")
    if isinstance(s0, int) and isinstance(s1, int):
        return pl.col("step").is_between(s0, s1)
    t0, t1 = parse_iso(f.first_seen), parse_iso(f.last_seen)
    cond = pl.lit(True)
    tz = steps.schema.get("t_end")
    if t0 is not None:
        cond = cond & (pl.col("t_end") >= _lit_time(t0, tz))
    if t1 is not None:
        cond = cond & (pl.col("t_start") <= _lit_time(t1, tz))
    return cond


def _lit_time(t: dt.datetime, dtype: Any) -> pl.Expr:
    zone = getattr(dtype, "time_zone", None)
    if zone is None:
        t = t.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return pl.lit(t).cast(dtype) if dtype is not None else pl.lit(t)


def peer_replay(steps: pl.DataFrame, ranks: Sequence[int], phases: Sequence[str],
                window: pl.Expr | None = None, topo: Topology | None = None,
                peers: Callable[[str | None], PeerGroups] | None = None) -> pl.DataFrame:
    """Per step (of the window, with >= 1 healthy peer): `actual_ms` (max over ranks of data +
    compute), `whatif_ms` (the same with `ranks`' `phases` replaced by the median of their peers
    at that step — the same stage / data-parallel group under `topo` — never made slower) and
    `saved_ms` = actual - whatif. `peers` groups the rows of `steps` by step (and group: see
    context.peer_groups; Context.peers for its step table), built here when not given."""
    if peers is None:
        peers = peer_groups(steps, topo)
    faulty = pl.col("rank").is_in(list(ranks)).fill_null(False)
    valid = pl.col("rank").is_not_null() & pl.col("step_time_ms").is_not_null()
    if window is not None:
        valid = valid & window.fill_null(False)
    own = pl.col("data_load_ms").fill_null(0.0) + pl.col("compute_ms").fill_null(0.0)
    replaced = {
        p: pl.when(pl.col(f"peer_{p}").is_not_null())
        .then(pl.min_horizontal(pl.col(p).fill_null(0.0), pl.col(f"peer_{p}")))
        .otherwise(pl.col(p).fill_null(0.0))
        for p in phases
    }
    whatif = sum((replaced.get(p, pl.col(p).fill_null(0.0)) for p in ("data_load_ms", "compute_ms")), pl.lit(0.0))

    # Every row of the table stays in place (the groups are of its rows): the rows outside the
    # window or without a step time are masked, as filtering them first would leave them out.
    # Per step, over the healthy ranks: their count and largest own time; per phase the healthy
    # peers' median in each group. Only the faulty ranks' rows (a few of every step's) are then
    # replayed against their group's median.
    ok = valid & ~faulty
    x = steps.select("step", ok.alias("ok"), pl.when(ok).then(own).alias("own_ok"),
                     *(pl.when(ok).then(pl.col(p)).alias(f"ok_{p}") for p in phases))
    by_step = peers(None)
    bad_mask = steps.select((valid & faulty).fill_null(False)).to_series()
    bad = steps.select("rank", "step", "data_load_ms", "compute_ms").filter(bad_mask).with_columns(
        by_step.index.filter(bad_mask).alias("_s"))
    # one aggregation per grouping (without a topology every phase's is the step's)
    work: dict[int, tuple[PeerGroups, list[str], list[pl.Expr]]] = {
        id(by_step): (by_step, ["ok", "own_ok"], [pl.col("ok").sum().alias("peers"), pl.col("own_ok").max().alias("max_ok")])}
    for p in phases:
        g = peers(GROUP_OF.get(p, "peer"))
        work.setdefault(id(g), (g, [], []))
        work[id(g)][1].append(f"ok_{p}")
        work[id(g)][2].append(median(f"ok_{p}").alias(f"peer_{p}"))
    per = pl.DataFrame()
    for g, cols, aggs in work.values():
        res = g.agg(x.select(cols), *aggs)
        if g is by_step:
            per = res
        meds = [c for c in res.get_columns() if c.name.startswith("peer_")]
        if meds:
            idx = g.index.filter(bad_mask)
            bad = bad.with_columns(c.gather(idx) for c in meds)
    out = (
        bad.select("step", "_s", own.alias("own"), whatif.alias("whatif"),
                   pl.any_horizontal(*(pl.col(f"peer_{p}").is_not_null() for p in phases)).alias("has_peers"))
        .group_by("step")
        .agg(pl.col("own").max().alias("own_bad"), pl.col("whatif").max().alias("whatif_bad"),
             # a step counts only where a faulty rank has peers in its own group to be replayed at
             pl.col("has_peers").any().alias("counted"), pl.col("_s").first())
        .filter(pl.col("counted"))
    )
    out = out.with_columns(per.get_column("peers").gather(out.get_column("_s")),
                           per.get_column("max_ok").gather(out.get_column("_s")))
    return (
        out.filter(pl.col("peers") >= 1)
        .select("step",
                pl.max_horizontal("max_ok", "own_bad").alias("actual_ms"),
                pl.max_horizontal("max_ok", "whatif_bad").alias("whatif_ms"))
        .with_columns((pl.col("actual_ms") - pl.col("whatif_ms")).clip(lower_bound=0.0).alias("saved_ms"))
        .sort("step")
    )


def per_step(steps: pl.DataFrame, quantity: str, peers: Callable[[str | None], PeerGroups] | None = None) -> pl.DataFrame:
    """One value per step, the same on every rank of a lockstep step: `step` = the median step
    time, `transfer` = the median over ranks of collective time minus waiting."""
    if peers is None:
        peers = peer_groups(steps, None)
    if quantity == "step":
        q = pl.col("step_time_ms")
    else:
        q = (pl.col("comm_ms") - pl.col("wait_est").fill_null(0.0)).clip(lower_bound=0.0)
    ranked = pl.col("rank").is_not_null()
    x = steps.select(pl.when(ranked).then(q).alias("q"), ranked.alias("ranked"))
    by_step = peers(None)
    per = by_step.agg(x, median("q"), pl.col("ranked").any()).with_columns(by_step.step)
    return per.filter(pl.col("ranked")).select("step", "q").drop_nulls("q").sort("step")


def temporal_replay(series: pl.DataFrame, window: pl.Expr) -> pl.DataFrame | None:
    """Per step of the window: `saved_ms` = what the quantity `q` lay above its median outside
    the window (start-up steps excluded); None without enough steps outside to know "normal"."""
    s = series.with_columns(window.alias("in_window"))
    first = s.get_column("step").min() if not s.is_empty() else None
    ref_rows = s.filter(~pl.col("in_window") & (pl.col("step") >= (first or 0) + SKIP_STEPS))
    if ref_rows.height < MIN_REFERENCE_STEPS:
        return None
    ref = float(ref_rows.get_column("q").median())
    return s.filter(pl.col("in_window")).with_columns((pl.col("q") - ref).clip(lower_bound=0.0).alias("saved_ms"))


def finding_cost(f: Finding, steps: pl.DataFrame, wall_s: float | None, world: int,
                 topo: Topology | None = None, peers: Callable[[str | None], PeerGroups] | None = None,
                 memo: dict[Any, Any] | None = None) -> dict[str, Any] | None:
    """The cost of one finding, `{"seconds", "share", "gpu_hours", "steps", "method"}`, or None
    when it is not a slowdown or the logs cannot price it. `peers`: see `peer_replay`; `memo`
    keeps replays for the next finding of the same table (findings of one fault, e.g. a pass's
    and a rule's of the same rank, replay the same ranks and phases)."""
    if f.kind not in SLOWDOWNS or steps.is_empty():
        return None
    memo = {} if memo is None else memo
    if peers is None:
        peers = memo.setdefault("peers", peer_groups(steps, topo))

    def once(key: tuple, compute: Callable[[], Any]) -> Any:
        if key not in memo:
            memo[key] = compute()
        return memo[key]

    if f.basis == "own_gap" and f.evidence.get("caused_wait_ms"):
        # stalls between steps (passes/own_gap.py): no phase of the step table holds them; the
        # waiting they caused every peer is what the run would have saved
        seconds = float(f.evidence["caused_wait_ms"]) / 1000.0
        return {"seconds": round(seconds, 3), "share": round(seconds / wall_s, 4) if wall_s else None,
                "gpu_hours": round(seconds * world / 3600.0, 4), "steps": len(f.evidence.get("stalls") or []),
                "method": "caused_wait"}
    all_ranks = once(("ranks",), lambda: set(int(r) for r in steps.get_column("rank").drop_nulls().unique()))
    job_wide = not f.ranks or set(f.ranks) >= all_ranks
    # a host or ranks standing apart in a slowdown every rank shares (passes/outlier.py) slowed
    # everyone alike: no peer kept pace, the reference is the run's own steps before it
    shared = f.basis == "outlier"
    if f.kind in PEER_PHASES and not job_wide and not shared:
        # every step, not only the finding's: a finding's window starts where its evidence got
        # strong enough (a sustained episode, the first hot telemetry sample), the fault often
        # earlier; in steps where the rank kept pace the replay gives back ~nothing
        phases = PEER_PHASES[f.kind]
        saved = once(("peers", frozenset(f.ranks), phases),
                     lambda: peer_replay(steps, f.ranks, phases, topo=topo, peers=peers))
        method = "peers"
        if saved.is_empty():
            # no healthy peer in the faulty ranks' group (a whole slow pipeline stage): the
            # reference is the run's own steps outside the finding, as for a job-wide slowdown
            saved = temporal_replay(once(("per_step", "step"), lambda: per_step(steps, "step", peers)),
                                    _window(steps, f))
            method = "own_steps_outside"
    elif (f.kind in TEMPORAL or shared) and (job_wide or shared or f.kind not in PEER_PHASES):
        if f.kind == "comm_bound" and not f.ranks:
            return None     # waiting for random late ranks (INFO): nobody to replay
        q = TEMPORAL.get(f.kind, "step")
        saved = temporal_replay(once(("per_step", q), lambda: per_step(steps, q, peers)), _window(steps, f))
        method = "own_steps_outside"
    else:
        return None
    if saved is None or saved.is_empty():
        return None
    seconds = float(saved.get_column("saved_ms").sum()) / 1000.0
    return {
        "seconds": round(seconds, 3),
        "share": round(seconds / wall_s, 4) if wall_s else None,
        "gpu_hours": round(seconds * world / 3600.0, 4),
        "steps": saved.height,
        "method": method,
    }


def attach_costs(findings: list[Finding], ctx: Context) -> None:
    """Set `cost` on every slowdown finding (others keep None). Reads the cached step table once;
    findings that replay the same ranks and phases share one replay."""
    if not any(f.kind in SLOWDOWNS for f in findings):
        return
    from .. import timeline

    steps = ctx.steps.select(STEP_COLUMNS)
    t0, t1 = timeline.bounds(ctx.run if ctx.run is not None else ctx.events)
    wall_s = (t1 - t0).total_seconds() if t0 is not None and t1 is not None else None
    world = max(len(ctx.ranks), 1)
    topo = ctx.topology
    memo: dict[Any, Any] = {}
    for f in findings:
        f.cost = finding_cost(f, steps, wall_s, world, topo, peers=ctx.peers, memo=memo)


__all__ = ["SLOWDOWNS", "PEER_PHASES", "TEMPORAL", "peer_replay", "temporal_replay", "per_step",
           "finding_cost", "attach_costs"]
