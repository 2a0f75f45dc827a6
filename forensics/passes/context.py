"""What every pass sees: the run, its events (a LazyFrame) and the per-(rank, step) table, cached.

Owns the read-only Context handed to passes and the step table they aggregate from. Must not
judge anything (passes do) and must not be mutated by passes: cached values are computed once,
on first use, from the events alone.

The step table is `forensics.timeline.step_table` with its evidence columns, computed by one
lazy query over the events (one row per (rank, step): t_start, t_end, step_time_ms,
data_load_ms, compute_ms, comm_ms, wait_ms, grad_ready_ts, comm_end, loss, samples_per_s, the
lines to cite: file, train_line, data_line, comm_line, ready_line, and disk_read_mbps), plus
wait_est (wait_ms, or estimated from comm_ms where it is not logged: see `_wait_estimate`).
Sorted by (rank, step). Passes select the columns they use before they filter or sort it: on
the bench store the table has 2 M rows, and each copy of a column is 16 MB. Per-step statistics
over ranks (medians, counts, spreads) are aggregated over the table's rows grouped by step
(`Context.peers`, `PeerGroups`: built once, shared by the passes and the costs), not by a window
per pass that hashes every row's step again.

`compute_ms` is the rank's forward/backward/optimizer time, the quantity a straggler has too
much of: the logged per-op durations when the logs carry them (FORWARD / BACKWARD / OPTIMIZER
events, or compute_ms / fwd_ms + bwd_ms fields: see timeline.op_compute), else step_time -
data_load - comm, which in synchronous data parallelism is the same thing.

`topology` is the run's parallel layout (forensics.topology: pipeline stage and data-parallel
group per rank), None for plain data parallelism; passes compare a rank only with the peers
that do the same work (`topology.with_groups`).
"""
from __future__ import annotations

import datetime as dt
import math
import threading
from concurrent.futures import Future
from functools import cached_property
from typing import TYPE_CHECKING, Callable

import polars as pl

from .. import timeline
from .. import topology as topo_mod
from ..schema import conform

if TYPE_CHECKING:
    from ..store import Run

# Columns of timeline.step_table the passes rely on, with its evidence columns (file and the
# lines to cite, disk_read_mbps). Nothing else is aggregated: projection pushdown drops the rest
# of the step table's aggregations (lr, stage, step_time_source ...) from the query.
STEP_COLUMNS = [
    "rank", "step", "host", "t_start", "t_end", "step_time_ms", "data_load_ms", "compute_ms", "comm_ms",
    "wait_ms", "grad_ready_ts", "comm_end", "loss", "samples_per_s", *timeline.EVIDENCE_COLUMNS,
]
# The columns of the stored (rank, step) summary that STEP_COLUMNS are finished from
# (timeline.steps.finish_groups): the others (per-rank counts, lr, stage) are not read.
GROUP_COLUMNS = [
    "rank", "step", "host", "t_start", "t_end", "step_time_logged", "op_compute_ms", "data_load_ms", "comm_ms",
    "wait_ms", "grad_ready_ts", "comm_end", "loss", "samples_per_s", "complete", *timeline.EVIDENCE_COLUMNS,
]
# GPU metrics: the events carrying any of them are `Context.telemetry`.
TELEMETRY_COLUMNS = ["gpu_util", "temp_c", "sm_clock_mhz", "throttle_reasons", "power_w", "mem_alloc_mb"]
# Host clock offsets below this are jitter, not skew: they are not applied.
MIN_OFFSET_MS = 5.0


def step_table(events: pl.LazyFrame, run: Run | None = None, *, summary: bool = True) -> pl.DataFrame:
    """timeline.step_table with its evidence columns and wait_est, sorted by (rank, step): the
    order the run's summary is stored in (so it is not moved) and the one the passes' per-rank
    episodes (`sustained`) need (a sort of 2 M rows by two keys costs a second or more). With
    the `run` the events are from, finished from the run's (rank, step) summary
    (forensics.summaries, written at ingest; computed once when missing); with `summary=False`,
    aggregated from the events one slice of ranks at a time (timeline.rank_slices). Without a
    run: one lazy query over `events`, collected once."""
    return with_wait_estimate(_collect_steps(events, run, summary))


def _collect_steps(events: pl.LazyFrame, run: Run | None, summary: bool) -> pl.DataFrame:
    """`step_table` without wait_est."""
    if run is not None and summary:
        from ..summaries import ranked_step_groups

        df = timeline.steps.finish_collected(ranked_step_groups(run, GROUP_COLUMNS), STEP_COLUMNS, evidence=True)
    else:
        slices = timeline.rank_slices(run) if run is not None else None
        steps = timeline.step_rows(events, evidence=True, slices=slices)
        df = timeline.collect_sorted(steps.select(STEP_COLUMNS), ["rank", "step"])
    # flagged as sorted (it is: rank is the first sort key): every pass's group_by("rank") then
    # aggregates contiguous slices instead of hashing 2 M keys, and filters keep the flag
    return df.with_columns(pl.col("rank").set_sorted())


def with_wait_estimate(df: pl.DataFrame, by_step: PeerGroups | None = None) -> pl.DataFrame:
    """The step table `df` with wait_est (`_wait_estimate`); `by_step`: its rows grouped by step
    (PeerGroups), built here when needed and not given."""
    if df.get_column("wait_ms").null_count() == 0:
        # every wait logged (the usual case): the estimate is the logged wait, without its window
        return df.with_columns(pl.col("wait_ms").alias("wait_est"))
    # the smallest collective time at each step (`_wait_estimate`'s window), over the step's
    # slice of rows: a window hashing every row's step costs a quarter second on 2 M rows
    by_step = by_step if by_step is not None else PeerGroups(df.get_column("step"))
    low = by_step.agg(df.select("comm_ms"), pl.col("comm_ms").min().alias("_low"))
    return df.with_columns(pl.coalesce(pl.col("wait_ms"), pl.col("comm_ms") - by_step.broadcast(low)[0])
                           .alias("wait_est"))


# A fault is persistent; scheduler noise is not. On a loaded host any rank is preempted now and
# then (real 4-rank gloo runs on 2 cores: a random rank is "slow" in ~10% of steps), so a
# per-step condition only counts inside an episode where it holds in >= 75% of a window of
# steps. With 10% random hits the chance of such an episode on some rank is below 1%.
SUSTAIN_SHARE = 0.75


def window_for(n_steps: int) -> int:
    """Episode window: 10% of the steps, between 5 and 20."""
    return max(5, min(20, n_steps // 10))


def sustained(flag: str, window: int, by: str | None = "rank") -> pl.Expr:
    """True where `flag` holds and is part of an episode: >= 75% of the `window` rows ending or
    starting at this row have it too. Rows must be sorted by (by, step), each `by` value's rows
    together.

    The same as a rolling mean of the flag within each `by` group (`.over(by)`), computed over
    the whole column at once: a window of consecutive rows lies in one group when its first and
    last rows are of the same group (the rows are contiguous), and counts of 0/1 are exact, so
    `count >= 0.75 * window` is `mean >= 0.75`. A window holding a null flag has no mean (as
    with min_samples=window). Five times faster than the window over 64 ranks of 2 M rows."""
    f = pl.col(flag)
    back = f.cast(pl.Int32).rolling_sum(window, min_samples=window)
    fwd = back.shift(-(window - 1))
    if by is not None:
        key = pl.col(by)
        back = pl.when(key.shift(window - 1).eq_missing(key)).then(back)
        fwd = pl.when(key.shift(-(window - 1)).eq_missing(key)).then(fwd)
    need = SUSTAIN_SHARE * window
    return f.fill_null(False) & ((back >= need) | (fwd >= need)).fill_null(False)


def rank_major(df: pl.DataFrame) -> pl.DataFrame:
    """`df` sorted by (rank, step): as it is when it already is (a selection of the step table),
    which a check finds in milliseconds where sorting 2 M rows by two keys takes a second."""
    if df.height < 2 or df.select(timeline.steps.in_key_order(["rank", "step"])).item():
        return df
    return df.sort("rank", "step")


class PeerGroups:
    """The rows of a step table grouped by step (or by step and a peer group: the ranks that are
    compared with each other at a step), for per-step statistics over ranks.

    `over(df, ...)` is `expr.over(["step", group])` of each aggregation, and `agg` the group_by,
    computed the fast way: the table is in (rank, step) order, where every step's rows are
    scattered over the whole table and polars hashes 2 M keys for each window (0.2-0.6 s per
    pass on 64 ranks x 28,750 steps). Here the rows are put in (step, group, rank) order once
    (`order`, a stable sort: within a step the ranks keep their order), aggregated over
    contiguous slices (polars' sorted-key path, ~10x faster) and the results put back on each
    row by its group number (`index`). Within a group the rows keep the table's order: counts,
    medians, min / max and first values are the window's exactly; sums and means over slices
    are added pairwise (the last bit can differ), `agg_in_order` adds them up as the window does.

    A frame given to `over` / `agg` must have the rows of the table the groups were built from,
    in its order (a selection of its columns); filter after, or mask (when/then) the values an
    aggregation must leave out, as one would filter before an `over`. `step`: each group's step
    (null for the rows without one), one value per group in group order, as `agg` of
    `pl.col("step").first()` gives it.
    """

    def __init__(self, step: pl.Series, group: pl.Series | None = None) -> None:
        import numpy as np

        n = len(step)
        if group is None and step.null_count() == 0:
            keys = [step.to_numpy()]
            order = np.argsort(keys[0], kind="stable")      # a merge of the ranks' sorted runs
        else:
            keys = [step.is_null().to_numpy(), step.fill_null(0).to_numpy()]   # nulls: a group of their own, last
            if group is not None:
                keys.append(group.rank("dense").fill_null(0).to_numpy())      # null group: code 0, its own
            # np.lexsort is stable and sorts by its last key first: step, then group, then row order
            order = np.lexsort(tuple(reversed(keys)))
        same = np.zeros(n, dtype=bool)     # in the group of the row before it (in group order)
        same[1:] = True
        for k in keys:
            ks = k[order]
            same[1:] &= ks[1:] == ks[:-1]
        # without gathering the table's step column in each `agg` (15 MB touched afresh on the bench)
        self.step = step.gather(order[~same]).rename("step")
        self._set(order, np.cumsum(~same) - 1)

    def _set(self, order, gid) -> None:  # type: ignore[no-untyped-def]
        import numpy as np

        index = np.empty(len(order), dtype=np.uint32)
        index[order] = gid
        self.order = pl.Series("order", order.astype(np.uint32))
        self.gid = pl.Series("_g", gid.astype(np.uint32)).set_sorted()
        self.index = pl.Series("_g", index)
        self.n = int(gid[-1]) + 1 if len(gid) else 0

    def agg(self, df: pl.DataFrame, *aggs: pl.Expr) -> pl.DataFrame:
        """One row per group, in group order (by step, then group): `aggs` over the group's rows
        of `df` (the table's rows, in its order)."""
        g = df.gather(self.order).with_columns(self.gid)
        return g.group_by("_g", maintain_order=True).agg(*aggs).drop("_g")

    def agg_in_order(self, df: pl.DataFrame, *aggs: pl.Expr) -> pl.DataFrame:
        """`agg` for sums and means that must add up exactly as `over` / a group_by of the
        table does: one value after the other, in the table's order. `agg`'s slices are summed
        pairwise (the last bit differs); here the groups are hashed (slower, still without
        the table's 2 M-row key of every step) and summed one row at a time."""
        g = df.gather(self.order).with_columns(pl.Series("_g", self.gid.to_numpy()))   # not flagged sorted
        return g.group_by("_g", maintain_order=True).agg(*aggs).drop("_g")

    def broadcast(self, per_group: pl.DataFrame) -> list[pl.Series]:
        """The columns of `per_group` (one row per group, from `agg`), each row of the table
        given its group's value."""
        return [s.gather(self.index) for s in per_group.get_columns()]

    def over(self, df: pl.DataFrame, *aggs: pl.Expr) -> pl.DataFrame:
        """`df` with `aggs` as window columns: `agg(...).over(["step", group])` of each."""
        return df.with_columns(self.broadcast(self.agg(df, *aggs)))


def group_columns(steps: pl.DataFrame, topo: topo_mod.Topology | None) -> pl.DataFrame:
    """`peer` and `dgroup` (topology.with_groups) of every row of `steps`, in its order."""
    st = steps.select("rank")
    if topo is None:
        return topo_mod.with_groups(st, None).drop("rank")
    g = topo_mod.with_groups(st.with_row_index("_row"), topo)     # a join: the order is restored
    return g.sort("_row").drop("_row", "rank")


def peer_groups(steps: pl.DataFrame, topo: topo_mod.Topology | None,
                groups: Callable[[], pl.DataFrame] | None = None,
                by_step: PeerGroups | None = None) -> Callable[[str | None], PeerGroups]:
    """`get(group)`: the rows of `steps` grouped by step, or by step and `group` (a column of
    `group_columns`, given by `groups` when already computed) under a topology; each grouping
    built on first use (`by_step`: the grouping by step, when already built)."""
    cache: dict[str | None, PeerGroups] = {} if by_step is None else {None: by_step}

    def get(group: str | None = None) -> PeerGroups:
        key = group if topo is not None else None
        if key not in cache:
            cols = None if key is None else (groups() if groups is not None else group_columns(steps, topo))
            cache[key] = PeerGroups(steps.get_column("step"), cols.get_column(key) if cols is not None else None)
        return cache[key]

    return get


def median(col: str | pl.Expr) -> pl.Expr:
    """The median of a column (a name or an expression), its nulls dropped first: the same value
    (a median skips nulls), but polars takes a slow path for a group that holds a null. Masked
    columns hold many: 26 vs 66 ms for a per-step median over 64 ranks x 28,750 steps, and 12 vs
    45 ms per rank over a column with one unfinished step per rank."""
    return (pl.col(col) if isinstance(col, str) else col).drop_nulls().median()


def keep(df: pl.DataFrame, cond: pl.Expr) -> pl.DataFrame:
    """`df.filter(cond)`, without the copy when every row is kept (the usual case for the step
    table's rows: a filter of 2 M rows of 17 columns that drops none still costs 0.3 s)."""
    mask = df.select(cond.fill_null(False)).to_series()
    return df if mask.all() else df.filter(mask)


def step_peers(topo: topo_mod.Topology | None, group: str) -> list[str]:
    """The keys of a per-step comparison among peers: the step and the `group` column of
    `topology.with_groups`; the step alone without a topology, where every rank is in one group
    (the same groups, hashed on one integer key instead of two)."""
    return ["step", group] if topo is not None else ["step"]


def _wait_estimate() -> pl.Expr:
    """Time a rank waited in its collectives at a step: the logged wait_ms, else an estimate.

    Domain fact: in a synchronous collective the last rank to arrive does not wait, so the
    smallest collective time across ranks at a step is (close to) the pure transfer time and
    anything above it on another rank is waiting.
    """
    return pl.coalesce(pl.col("wait_ms"), pl.col("comm_ms") - pl.col("comm_ms").min().over("step")).alias("wait_est")


def wait_expr() -> pl.Expr:
    """The step table's wait (logged, else estimated once when the table is built)."""
    return pl.col("wait_est")


class Context:
    """The run as passes see it. Read-only; derived tables are computed once on first use."""

    def __init__(self, events: pl.LazyFrame, run: Run | None = None) -> None:
        """`events` of the `run` when one is given (`from_run`): the step table then reads the
        run's parts slice by slice instead of `events`."""
        self._events = events
        self.run = run
        self._found: dict[Callable, Future] = {}
        self._found_lock = threading.Lock()

    @classmethod
    def from_run(cls, run: Run) -> Context:
        return cls(run.events(), run)

    @classmethod
    def from_frame(cls, df: pl.DataFrame) -> Context:
        """A context over in-memory events (tests, notebooks); missing columns become nulls."""
        return cls(conform(df).lazy())

    @property
    def events(self) -> pl.LazyFrame:
        return self._events

    def found_by(self, find: Callable[[Context], list]) -> list:
        """`find(self)`: a pass's findings, computed once per Context, whichever thread asks first
        (the others wait for it). A pass that defers to another's findings (own_gap leaves what
        straggler and data_load_skew name to them) reads them here instead of running it again;
        the returned list is shared: read it, never change it."""
        with self._found_lock:
            fut = self._found.get(find)
            mine = fut is None
            if mine:
                fut = self._found[find] = Future()
        if mine:
            try:
                fut.set_result(find(self))
            except BaseException as e:
                fut.set_exception(e)
        return fut.result()

    @cached_property
    def _collected(self) -> pl.DataFrame:
        return _collect_steps(self._events, self.run, True)

    @cached_property
    def _by_step(self) -> PeerGroups:
        """The step table's rows grouped by step (alignment to the common clock keeps them)."""
        return PeerGroups(self._collected.get_column("step"))

    @cached_property
    def _raw_steps(self) -> pl.DataFrame:
        raw = with_wait_estimate(self._collected, self._by_step)
        del self.__dict__["_collected"]    # its columns live on in `raw`
        return raw

    @cached_property
    def clock_offsets(self) -> pl.DataFrame:
        """Per host clock, its offset from the consensus (timeline.step_offsets: a blocking
        collective ends at one instant on every rank). Only hosts that are named (>= 2 of them)
        and offsets above jitter (>= 5 ms and >= their spread) are kept: without host names each
        rank would count as its own clock, and aligning jitter only adds noise."""
        raw = self._raw_steps
        empty = pl.DataFrame(schema={"clock": pl.String, "offset_ms": pl.Float64, "samples": pl.Int64,
                                     "spread_ms": pl.Float64})
        if raw.is_empty() or raw.get_column("host").drop_nulls().n_unique() < 2:
            return empty
        off = timeline.step_offsets(raw)
        return off.filter(~pl.col("clock").str.starts_with("rank:")
                          & (pl.col("offset_ms").abs() >= pl.max_horizontal(pl.lit(MIN_OFFSET_MS), pl.col("spread_ms"))))

    @cached_property
    def steps(self) -> pl.DataFrame:
        """The per-(rank, step) table, collected once, sorted by (rank, step); times and grad_ready_ts on the common clock
        when hosts' clocks disagree (`clock_offset_ms` says by how much)."""
        raw = self._raw_steps
        off = self.clock_offsets
        if off.is_empty():
            return raw.with_columns(pl.lit(0.0).alias("clock_offset_ms"))
        # only the columns the alignment reads and writes go through the query; the others stay
        # as they are. In one chunk per column, as `raw` is: a query's output comes in morsels,
        # and every pass's filter of a 2 M-row table in 20 chunks costs ten times more (before,
        # the whole table went through it and was copied again by the rechunk: 300 MB)
        moved = timeline.align_steps(raw.select("host", "t_start", "t_end", "comm_end", "grad_ready_ts"), off)
        return raw.with_columns(c.rechunk() for c in moved.collect(engine="in-memory").drop("host").get_columns())

    def aligned(self, lf: pl.LazyFrame) -> pl.LazyFrame:
        """`lf` (events with rank, host, timestamp) with `ts_aligned` on the common clock."""
        return timeline.with_aligned_time(lf, self.clock_offsets)

    def aligned_since(self, lf: pl.LazyFrame, since: object) -> pl.LazyFrame:
        """`aligned(lf)` keeping the rows with ts_aligned >= `since`. The same rows, but the
        store's timestamps are filtered first (by `since` moved by the largest shift any clock
        gets, a bound every kept row meets), so the scan decodes the other columns of those rows
        only: on the 4,096-rank store, the lines after the last common step instead of 2 M
        messages (0.28 -> 0.08 CPU s, ~200 MB less)."""
        off = self.clock_offsets
        low = min([0.0, *(o for o in off.get_column("offset_ms").to_list() if o is not None)]) if off.height else 0.0
        # ts_aligned = timestamp - round(offset_ms * 1000) us: a kept row's timestamp is at least
        # `since` plus the smallest rounded shift (1 us of slack for the rounding)
        bound = since + dt.timedelta(microseconds=math.floor(low * 1000.0) - 1)   # type: ignore[operator]
        return self.aligned(lf.filter(pl.col("timestamp") >= bound)).filter(pl.col("ts_aligned") >= since)

    @cached_property
    def telemetry(self) -> pl.DataFrame:
        """The ranked events carrying a GPU metric (TELEMETRY_COLUMNS), with rank, timestamp,
        source_file and line, in store order: what thermal, hot_gpu, utilization and hygiene's
        sampling check read, scanned once (a few % of the events) instead of once each."""
        has = pl.any_horizontal([pl.col(c).is_not_null() for c in TELEMETRY_COLUMNS])
        return (self._events.select("rank", "timestamp", *TELEMETRY_COLUMNS, "source_file", "line")
                .filter(pl.col("rank").is_not_null() & has).collect(engine="in-memory"))

    @cached_property
    def ranks(self) -> list[int]:
        """Every rank that logged anything (unattributed events excluded)."""
        if self.run is not None and self.run.totals.get("ranks") is not None:
            return sorted(int(r) for r in self.run.totals["ranks"])
        s = self._events.select(pl.col("rank").drop_nulls().unique()).collect().to_series()
        return sorted(int(r) for r in s)

    @cached_property
    def topology(self) -> topo_mod.Topology | None:
        """The parallel layout the logs state (pipeline stages, data-parallel groups), None for
        plain data parallelism or when the logs say nothing about it."""
        if self.run is not None:   # the few events that can state it, stored at ingest (forensics.summaries)
            from ..summaries import layout

            return topo_mod.read(layout(self.run).lazy(), self.ranks)
        return topo_mod.read(self._events, self.ranks)

    def with_groups(self, df: pl.DataFrame) -> pl.DataFrame:
        """`df` (rows of `steps`, in its order) with `peer` and `dgroup` (topology.with_groups).
        Kept only under a topology (a join): without one they are two constants, added as
        such (polars never makes them 1.8 M values on the bench store: 45 MB, touched afresh
        each time, ~11k page faults a pass)."""
        if self.topology is None:
            return topo_mod.with_groups(df, None)
        return df.hstack(self._topo_groups)

    @cached_property
    def _topo_groups(self) -> pl.DataFrame:
        return group_columns(self.steps, self.topology)

    @cached_property
    def peers(self) -> Callable[[str | None], PeerGroups]:
        """`peers(group)`: the rows of `steps` grouped by step, or by step and `group` ("peer":
        the pipeline stage, "dgroup": the data-parallel group) under a topology (without one
        every rank is in one group: by step alone). Built once per grouping."""
        return peer_groups(self.steps, self.topology, lambda: self._topo_groups, by_step=self._by_step)

    @cached_property
    def median_step_ms(self) -> float | None:
        s = self.steps.get_column("step_time_ms").drop_nulls()
        return float(s.median()) if len(s) else None


__all__ = ["Context", "PeerGroups", "keep", "median", "STEP_COLUMNS", "TELEMETRY_COLUMNS", "step_table", "wait_expr", "sustained", "window_for", "rank_major", "step_peers"]
