"""The (rank, step) aggregation both the step table (`timeline.steps`) and the store's summaries
(`forensics.summaries`) are built from: the groups of the events, their partial states and
merges, their run-wide finishing (derived step times, compute remainder), and reading a Run in
slices of whole ranks. It knows neither of its two users (steps reads the summaries, the
summaries store these groups): it must not print, judge the run, read a summary, or rewrite
`timestamp`.

Domain facts (seed 000, sections 4.2-4.5): a step's events share its `step` number on every
rank, so steps align across ranks by number; `wait_ms` is the part of `comm_ms` spent waiting
for the last rank to arrive.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import polars as pl

from ..store import Run
from .inputs import SUMMARY_EVENT, TS, Events, _ms, lazy

if TYPE_CHECKING:
    import numpy as np


# --- steps ------------------------------------------------------------------------------------

# Phase metrics: summed over the step's own events (several collectives in one step add up),
# else the copy on the summary event. Per-step values (loss, lr ...): the summary event's, else
# any event's. Columns are masked before the group_by: filtered aggregations are 2-3x slower.
PHASES = ("data_load_ms", "comm_ms", "wait_ms")
STEP_VALUES = ("loss", "lr", "samples_per_s", "stage")


# The step table's columns, in order (see `step_rows`).
STEP_COLUMNS = (
    "step", "rank", "host", "t_start", "t_end", "step_time_ms", "step_time_source", "data_load_ms", "compute_ms",
    "comm_ms", "wait_ms", "grad_ready_ts", "comm_end", "loss", "lr", "samples_per_s", "stage", "events", "complete",
)

# What the diagnosis cites (`step_table(..., evidence=True)`): the step's file, the first line
# of its summary (or loss), data load and gradient-ready events, the last line of its collectives,
# and its disk read rate. Aggregated in the same group_by as the phases: no second scan, no join.
EVIDENCE_COLUMNS = ("file", "train_line", "data_line", "comm_line", "ready_line", "disk_read_mbps")

# The (rank, step) group_by keeps the aggregation state of every group until its input ends:
# ~30 states x 2 M rank-steps on the bench store, where the diagnosis' step table then peaks at
# 2.1 GB RSS (1.0 GB in slices of 1 M events). A group never spans two ranks, so aggregating a
# slice of whole ranks at a time gives the same rows with one slice's state.
SLICE_EVENTS = 1_000_000


def rank_slices(run: Run, max_events: int | None = None) -> list[pl.LazyFrame]:
    """The run's ranked events in slices of whole, consecutive ranks of about `max_events`
    (default SLICE_EVENTS) events each; [] when one slice holds them all (store.Run.rank_slices:
    the store knows its parts' rank ranges)."""
    return run.rank_slices(max_events or SLICE_EVENTS)


def group_rows(events: Events, slices: list[pl.LazyFrame] | None = None) -> pl.LazyFrame:
    """Every (rank, step) group of the events, a null rank or step included, with the evidence
    columns and the per-rank counts (`_step_groups(..., evidence=True, per_rank=True)`): what
    `forensics.summaries` stores. A Run is read in slices of whole ranks (`rank_slices`), its
    unranked events last."""
    if slices is None and isinstance(events, Run):
        slices = rank_slices(events)
        if slices:
            slices.append(lazy(events).filter(pl.col("rank").is_null()))
    return _sliced(events, slices, lambda lf: _step_groups(lf, TS, evidence=True, per_rank=True))


def finish_groups(groups: pl.LazyFrame, evidence: bool = False, ordered: bool = False) -> pl.LazyFrame:
    """`step_rows` from stored (rank, step) groups (`group_rows`): the ranked, stepped groups
    with the run-wide finishing (gaps, derived step times, compute). `ordered`: the ranked,
    stepped groups are in (rank, step) order (see `in_key_order`; a stored summary is)."""
    return _finish_steps(_with_gaps(groups.filter(pl.col("rank").is_not_null() & pl.col("step").is_not_null()),
                                    ordered), evidence)


def finish_collected(groups: pl.DataFrame, columns: list[str], evidence: bool = False) -> pl.DataFrame:
    """`finish_groups` of collected (rank, step) groups (a stored summary: `group_rows`), only
    `columns`, sorted by (rank, step), in one chunk per column (see `collect_sorted`).

    The groups come in a chunk per row group of the file. Made contiguous first, the ranked,
    stepped rows only (`ranked_rows`: one copy), the finishing then keeps every column it does not
    compute as it is; when they are in (rank, step) order (a summary is stored sorted), nothing
    else is copied. Collected, then filtered and rechunked, the table was copied twice."""
    ranked = ranked_rows(groups)
    ordered = bool(ranked.select(in_key_order(["rank", "step"])).item())
    lf = finish_groups(ranked.lazy(), evidence, ordered).select(columns)
    if not ordered:
        return collect_sorted(lf, ["rank", "step"])
    return pl.DataFrame([c.rechunk() for c in lf.collect(engine="in-memory").get_columns()])


def ranked_rows(groups: pl.DataFrame, keep: "np.ndarray | None" = None) -> pl.DataFrame:
    """The rows of `groups` with a rank and a step, in one chunk per column: the runs of such rows
    (a summary has one unstepped row per rank) concatenated, each column copied once (a filter
    copies each chunk, then the rechunk again). `keep`: which rows those are, when `groups` holds
    other columns of the table (`ranked_mask` of its rank and step)."""
    import numpy as np

    if keep is None:
        keep = ranked_mask(groups)
    # the runs of kept rows: [start, end) where keep turns on, then off
    edges = np.flatnonzero(np.diff(np.concatenate(([False], keep, [False])).astype(np.int8)))
    if not len(edges):
        return groups.clear()
    return pl.concat([groups.slice(int(a), int(b - a)) for a, b in zip(edges[::2], edges[1::2])], rechunk=True)


def ranked_mask(groups: pl.DataFrame) -> "np.ndarray":
    """Per row of `groups` (rank and step columns): whether it has a rank and a step."""
    return groups.select(pl.col("rank").is_not_null() & pl.col("step").is_not_null()).to_series().to_numpy()


def collect_sorted(lf: pl.LazyFrame, by: list[str]) -> pl.DataFrame:
    """`lf` collected and sorted by `by` (a unique key, so no ties), moved one column at a time:
    sorting the collected frame would hold the table twice at its peak (the bench store's step
    table is 330 MB), this holds it once plus one column."""
    cols = lf.collect().get_columns()
    keys = pl.DataFrame([c for c in cols if c.name in by])
    # already in order (a summary is stored sorted): only made contiguous. Either way the result
    # is one chunk per column: every filter of the table by a pass then costs a fraction (a
    # filter of 2 M rows in 40 chunks, once per pass, cost more than the whole rechunk).
    order = None if keys.height < 2 or keys.select(in_key_order(by)).item() else \
        keys.rechunk().select(pl.arg_sort_by(by)).to_series()
    out: list[pl.Series] = []
    for i in range(len(cols)):
        # gathering from a contiguous column is several times faster than from the slices' chunks
        out.append(cols[i].rechunk() if order is None else cols[i].rechunk().gather(order))
        cols[i] = cols[i].clear()   # drop this column's data before moving the next one
    return pl.DataFrame(out)


def in_key_order(by: list[str]) -> pl.Expr:
    """Whether every row's key `by` is above the previous row's (lexicographic; a null key is not
    in order). A few diffs: 20 ms on 2 M rows, where an arg_sort_by of two columns takes 1 s."""
    def above(i: int) -> pl.Expr:
        d = pl.col(by[i]).diff()
        return (d > 0) if i == len(by) - 1 else (d > 0) | ((d == 0) & above(i + 1))

    nulls = pl.any_horizontal([pl.col(c).is_null() for c in by]).any()
    return above(0).fill_null(False).slice(1).all() & ~nulls


def _sliced(events: Events, slices: list[pl.LazyFrame] | None,
            query: Callable[[pl.LazyFrame], pl.LazyFrame]) -> pl.LazyFrame:
    """`query` over each slice (see `rank_slices`) concatenated; over `events` without slices."""
    if not slices:
        return query(lazy(events))
    return pl.concat([query(x) for x in slices])


def step_rows(events: Events, time_col: str = TS, evidence: bool = False,
              slices: list[pl.LazyFrame] | None = None) -> pl.LazyFrame:
    """One row per (rank, step), in no particular order (`step_table` sorts).

    Columns: step, rank, host, t_start, t_end (first/last event of the step on that rank),
    step_time_ms (logged, else the time since the rank's previous step ended), step_time_source
    (logged|derived), data_load_ms, comm_ms, wait_ms, compute_ms (step - data - comm, at least 0:
    a prefetching loader overlaps compute), grad_ready_ts (epoch s), comm_end (when the rank's
    last collective of the step returned), loss, lr, samples_per_s, stage, events, complete (the
    step's TRAIN_STEP was logged; an unfinished step gets no derived step time); with `evidence`,
    EVIDENCE_COLUMNS.

    With `time_col="ts_aligned"` (see `with_aligned_time`) times and grad_ready_ts are on the
    common clock. `slices`: see `step_table`.
    """
    return _finish_steps(_sliced(events, slices, lambda lf: _with_gaps(_step_groups(lf, time_col, evidence))),
                         evidence)


# Per-op compute events: a rank's forward / backward / optimizer work of a step, each with its
# duration (pipeline-parallel traces log one per micro-batch). Names are compared upper-cased.
OP_EVENTS = ("FORWARD", "BACKWARD", "OPTIMIZER", "OPTIMIZER_STEP", "FWD", "BWD", "FORWARD_STEP", "BACKWARD_STEP",
             "FORWARD_BACKWARD", "FWD_BWD", "OPTIM", "OPTIM_STEP", "OPT_STEP")


# Per-op communication events (p2p of a pipeline, collectives): when one logs only its duration
# (duration_ms / elapsed_ms, no comm_ms), that duration is its communication time.
COMM_OP_EVENTS = ("SEND", "RECV", "ISEND", "IRECV", "SEND_FORWARD", "RECV_FORWARD", "SEND_BACKWARD", "RECV_BACKWARD",
                  "SEND_RECV", "P2P", "ALLREDUCE", "ALL_REDUCE", "REDUCE_SCATTER", "ALL_GATHER", "ALLGATHER",
                  "BROADCAST", "ALL_TO_ALL", "ALLTOALL")


def _event_kinds() -> tuple[pl.Expr, pl.Expr, pl.Expr]:
    """Per row, from its event name: the step summary, a per-op compute event (OP_EVENTS), a
    per-op communication event (COMM_OP_EVENTS); a null name is "". The ingest's summaries
    compute the same three flags once per distinct name (summaries._event_flags)."""
    up = pl.col("event").fill_null("").str.to_uppercase()
    return (pl.col("event").fill_null("") == SUMMARY_EVENT, up.is_in(list(OP_EVENTS)),
            up.is_in(list(COMM_OP_EVENTS)))


def _comm_of_ops(is_comm: pl.Expr) -> pl.Expr:
    """comm_ms, or for a per-op communication event (`is_comm`) without one its duration."""
    return pl.coalesce(pl.col("comm_ms"), pl.when(is_comm).then(
        pl.coalesce(pl.col("step_time_ms"), pl.col("duration_s") * 1000.0))).alias("comm_ms")


def _op_compute_inputs(is_sum: pl.Expr, is_op: pl.Expr, is_cop: pl.Expr) -> tuple[list[pl.Expr], list[pl.Expr]]:
    """Masked columns and aggregations of `_step_groups` for `op_compute_ms`: the compute time
    the logs state. Per (rank, step): the sum of the durations of its per-op compute events
    (OP_EVENTS; an op's duration is its compute_ms, fwd_ms + bwd_ms, elapsed_ms (typed as
    step_time_ms) or duration_s/_ms), else the largest explicit compute_ms (or fwd_ms + bwd_ms)
    on its other events, else null (then compute is step - data - comm)."""
    parts = pl.when(pl.col("fwd_ms").is_not_null() | pl.col("bwd_ms").is_not_null()).then(
        pl.sum_horizontal("fwd_ms", "bwd_ms"))
    explicit = pl.coalesce(pl.col("compute_ms"), parts)
    op_dur = pl.coalesce(explicit, pl.col("step_time_ms"), pl.col("duration_s") * 1000.0)
    masked = [pl.when(is_op).then(op_dur).alias("op_ms"), pl.when(~is_op).then(explicit).alias("ex_ms"),
              pl.when(~(is_op | is_cop) | is_sum).then(pl.col("step_time_ms")).alias("nonop_step_time_ms")]
    aggs = [pl.col("op_ms").sum().alias("op_sum"), pl.col("op_ms").count().alias("n_op"),
            pl.col("ex_ms").max().alias("ex_max")]
    return masked, aggs


def _with_gaps(groups: pl.LazyFrame, ordered: bool = False) -> pl.LazyFrame:
    """`gap_ms`: the time since the rank's previous step ended, when that step is the one before
    (what a step took when it logged no time). Per rank: computed inside each slice. `ordered`:
    the rows are in (rank, step) order, so a rank's previous step is the row above when that row
    is of the same rank (a plain shift; the window sorts every rank's rows)."""
    def prev(c: str) -> pl.Expr:
        return pl.col(c).shift(1) if ordered else pl.col(c).shift(1).over("rank", order_by="step")

    same = (pl.col("rank").shift(1) == pl.col("rank")) if ordered else pl.lit(True)
    return groups.with_columns(
        pl.when(same & (pl.col("step") - prev("step") == 1)).then(_ms(pl.col("t_end") - prev("t_end"))).alias("gap_ms"))


def _finish_steps(groups: pl.LazyFrame, evidence: bool) -> pl.LazyFrame:
    """`step_rows` from the (rank, step) groups of `_step_groups` with `_with_gaps`: what needs
    the whole run. The groups may lack columns nobody asked for (rank_summary's)."""
    have = {*groups.collect_schema().names(), "step_time_ms", "step_time_source", "compute_ms"}
    # after the slices are joined up: whether the run has summary events is a run-wide fact
    complete = pl.col("complete") | ~pl.col("complete").any()
    # an unfinished step (crash mid-step) has no duration: only whole steps are derived
    derived = pl.when(pl.col("complete")).then(pl.col("gap_ms"))
    return (
        groups.with_columns(complete)
        .with_columns(
            pl.coalesce("step_time_logged", derived).alias("step_time_ms"),
            pl.when(pl.col("step_time_logged").is_not_null()).then(pl.lit("logged"))
            .when(derived.is_not_null()).then(pl.lit("derived")).alias("step_time_source"),
        )
        .with_columns(
            # the compute the logs state (per-op events, compute_ms) beats the remainder of the step
            pl.coalesce(
                *(["op_compute_ms"] if "op_compute_ms" in have else []),
                (pl.col("step_time_ms") - pl.col("data_load_ms").fill_null(0.0) - pl.col("comm_ms").fill_null(0.0))
                .clip(lower_bound=0.0)).alias("compute_ms"),
        )
        .select([c for c in (*STEP_COLUMNS, *(EVIDENCE_COLUMNS if evidence else ())) if c in have])
    )


def _step_groups(lf: pl.LazyFrame, time_col: str, evidence: bool, per_rank: bool = False,
                 state: bool = False) -> pl.LazyFrame:
    """The (rank, step) group_by of `step_rows`: per-group values, before anything run-wide.

    With `per_rank`, every event is kept (a null rank or step is a group too) and the groups also
    carry what `rank_summary` adds up per rank (temp_max, warn, error): one scan serves both.
    With `state`, the groups' aggregation state (`merge_group_states` merges states of several
    slices of the same events; `finish_group_states` gives what this returns without it)."""
    names = lf.collect_schema().names()
    # grad_ready_ts is logged by the host clock: shift it like the timestamp when aligning
    ready = pl.col("grad_ready_ts")
    if time_col != TS and "clock_offset_ms" in names:
        ready = ready - pl.col("clock_offset_ms").fill_null(0.0) / 1000.0
    comm, inputs, aggs = step_group_exprs(_event_kinds(), pl.col(time_col), ready, evidence, per_rank, state)
    lf = lf.with_columns(comm)
    if not per_rank:
        lf = lf.filter(pl.col("rank").is_not_null() & pl.col("step").is_not_null())
    # only plain aggregations in agg() (when/coalesce inside it takes polars' slow path)
    grouped = lf.select(inputs).group_by("rank", "step").agg(aggs)
    return grouped if state else finish_group_states(grouped, evidence)


def _train_line_in_file() -> pl.Expr:
    """A (rank, step)'s step line, in its cited `file` (the first): a console that prints the
    ranks' step lines (`[rank0]: step 40/70 loss=...`) beside their JSON lines made the step
    cite the JSON file with the console's line number -- a line about another step. Only the
    step line is filtered (the console lines are step lines, not data / collective / ready
    lines): a filter per column costs ~1 s of CPU per 300 k (rank, step) groups at ingest."""
    return pl.col("train_line").filter(pl.col("file") == pl.col("file").first()).min()


def step_group_exprs(kinds: tuple[pl.Expr, pl.Expr, pl.Expr], t: pl.Expr, ready: pl.Expr, evidence: bool,
                     per_rank: bool, state: bool, train_line: pl.Expr | None = None
                     ) -> tuple[pl.Expr, list[pl.Expr], list[pl.Expr]]:
    """`_step_groups`' expressions: the comm_ms column to add, the per-row inputs to select, and
    the (rank, step) aggregations. `kinds`: the (summary, compute op, comm op) flags of
    `_event_kinds`, or columns holding them (the ingest makes them once per distinct name).
    `train_line`: the step line's aggregation, `_train_line_in_file()` unless the caller settles
    the groups of several files itself (summaries._step_state)."""
    is_sum, is_op, is_cop = kinds
    is_coll = pl.col("comm_ms").is_not_null() & ~is_sum
    # a per-op event's elapsed_ms (typed as step_time_ms) is the op's time, not the step's
    op_masked, op_aggs = _op_compute_inputs(is_sum, is_op, is_cop)
    masked = [
        *op_masked,
        *(pl.when(~is_sum).then(pl.col(c)).alias(f"own_{c}") for c in PHASES),
        *(pl.when(is_sum).then(pl.col(c)).alias(f"sum_{c}") for c in (*PHASES, "step_time_ms", *STEP_VALUES)),
        pl.when(is_coll).then(t).alias("coll_t"),
        ready.alias("ready"),
        is_sum.alias("is_sum"),
    ]
    cited: list[pl.Expr] = []
    cite_aggs: list[pl.Expr] = []
    if evidence:
        line = pl.col("line")
        cited = [
            pl.col("source_file").alias("file"),
            pl.when(is_sum | pl.col("loss").is_not_null()).then(line).alias("train_line"),
            pl.when(pl.col("data_load_ms").is_not_null()).then(line).alias("data_line"),
            pl.when(is_coll).then(line).alias("comm_line"),
            pl.when(pl.col("grad_ready_ts").is_not_null()).then(line).alias("ready_line"),
            pl.col("disk_read_mbps"),
        ]
        cite_aggs = [
            pl.col("file").first(), _train_line_in_file() if train_line is None else train_line, pl.col("data_line").min(),
            pl.col("comm_line").max(), pl.col("ready_line").min(), pl.col("disk_read_mbps").mean(),
            # a mean merges from its sum and count (mean == sum / count in polars)
            *([pl.col("disk_read_mbps").sum().alias("disk_sum"), pl.col("disk_read_mbps").count().alias("disk_n")]
              if state else []),
        ]
    counted: list[pl.Expr] = []
    count_aggs: list[pl.Expr] = []
    if per_rank:
        counted = [pl.col("temp_c"), (pl.col("level") == "WARN").alias("warn"), (pl.col("level") == "ERROR").alias("error")]
        count_aggs = [pl.col("temp_c").max().alias("temp_max"), pl.col("warn").sum(), pl.col("error").sum()]
    inputs = ["rank", "step", "host", t.alias("t"), *PHASES, *STEP_VALUES, *masked, *cited, *counted]
    aggs = [
        pl.col("host").first(ignore_nulls=True),
        pl.col("t").min().alias("t_start"),
        pl.col("t").max().alias("t_end"),
        pl.col("sum_step_time_ms").max(),
        pl.col("nonop_step_time_ms").max().alias("any_step_time_ms"),
        *op_aggs,
        *(pl.col(f"own_{c}").sum() for c in PHASES),
        *(pl.col(f"own_{c}").count().alias(f"n_{c}") for c in PHASES),
        *(pl.col(f"sum_{c}").max() for c in PHASES),
        pl.col("ready").min().alias("grad_ready_ts"),
        pl.col("coll_t").max().alias("comm_end"),
        *(pl.col(f"sum_{c}").last(ignore_nulls=True) for c in STEP_VALUES),
        *(pl.col(c).last(ignore_nulls=True).alias(f"any_{c}") for c in STEP_VALUES),
        pl.len().alias("events"),
        pl.col("is_sum").any().alias("complete"),
        *cite_aggs,
        *count_aggs,
    ]
    return _comm_of_ops(is_cop), inputs, aggs


def finish_group_states(grouped: pl.LazyFrame, evidence: bool) -> pl.LazyFrame:
    """The (rank, step) groups of `_step_groups` from their aggregation state."""
    return (
        grouped.with_columns(
            pl.coalesce("sum_step_time_ms", "any_step_time_ms").alias("step_time_logged"),
            pl.when(pl.col("n_op") > 0).then(pl.col("op_sum")).otherwise(pl.col("ex_max")).alias("op_compute_ms"),
            *(pl.when(pl.col(f"n_{c}") > 0).then(pl.col(f"own_{c}")).otherwise(pl.col(f"sum_{c}")).alias(c)
              for c in PHASES),
            *(pl.coalesce(f"sum_{c}", f"any_{c}").alias(c) for c in STEP_VALUES),
            # a few file names, 2 M rows: as a Categorical they take 4 bytes a row instead of ~60
            # (cast after the group_by: casting every event costs a second of CPU on the bench)
            *([pl.col("file").cast(pl.Categorical)] if evidence else []),
        )
        .drop(*(f"{p}_{c}" for p in ("own", "n", "sum") for c in PHASES), *(f"{p}_{c}" for p in ("sum", "any")
              for c in STEP_VALUES), "sum_step_time_ms", "any_step_time_ms", "op_sum", "n_op", "ex_max",
              *(["disk_sum", "disk_n"] if "disk_sum" in grouped.collect_schema().names() else []))
    )


def _state_merges() -> dict[str, pl.Expr]:
    """How each state column of `_step_groups(..., state=True)` merges over the states of
    consecutive slices of the same events (in their order): min / max / sum / any, first or last
    non-null value in event order."""
    first = lambda c: pl.col(c).first(ignore_nulls=True)  # noqa: E731
    last = lambda c: pl.col(c).last(ignore_nulls=True)  # noqa: E731
    return {
        "host": first("host"), "t_start": pl.col("t_start").min(), "t_end": pl.col("t_end").max(),
        "sum_step_time_ms": pl.col("sum_step_time_ms").max(), "any_step_time_ms": pl.col("any_step_time_ms").max(),
        "op_sum": pl.col("op_sum").sum(), "n_op": pl.col("n_op").sum(), "ex_max": pl.col("ex_max").max(),
        **{f"own_{c}": pl.col(f"own_{c}").sum() for c in PHASES},
        **{f"n_{c}": pl.col(f"n_{c}").sum() for c in PHASES},
        **{f"sum_{c}": pl.col(f"sum_{c}").max() for c in PHASES},
        "grad_ready_ts": pl.col("grad_ready_ts").min(), "comm_end": pl.col("comm_end").max(),
        **{f"sum_{c}": last(f"sum_{c}") for c in STEP_VALUES},
        **{f"any_{c}": last(f"any_{c}") for c in STEP_VALUES},
        "events": pl.col("events").sum(), "complete": pl.col("complete").any(),
        "file": pl.col("file").first(), "train_line": _train_line_in_file(),
        "data_line": pl.col("data_line").min(), "comm_line": pl.col("comm_line").max(),
        "ready_line": pl.col("ready_line").min(),
        "disk_read_mbps": pl.col("disk_read_mbps").first(),   # see merge_group_states
        "disk_sum": pl.col("disk_sum").sum(), "disk_n": pl.col("disk_n").sum(),
        "temp_max": pl.col("temp_max").max(), "warn": pl.col("warn").sum(), "error": pl.col("error").sum(),
    }


def merge_group_states(states: pl.LazyFrame) -> pl.LazyFrame:
    """The states (`_step_groups(..., state=True)`) of consecutive slices of the same events,
    concatenated in event order, merged into the state of the whole: a (rank, step) cut between
    slices gets one row with what one scan of its events would give (float sums up to rounding)."""
    schema = states.collect_schema()
    merges = _state_merges()
    merged = states.group_by("rank", "step").agg(
        *(merges[c].alias(c) for c in schema.names() if c not in ("rank", "step")), pl.len().alias("_slices"))
    if "disk_sum" in schema:
        # a group in one slice keeps its own mean (bit-equal to one scan's); a merged one: sum / count,
        # null without a value (as one scan's mean; 0 / 0 was NaN)
        merged = merged.with_columns(pl.when(pl.col("_slices") == 1).then(pl.col("disk_read_mbps"))
                                     .when(pl.col("disk_n") > 0).then(pl.col("disk_sum") / pl.col("disk_n"))
                                     .alias("disk_read_mbps"))
    return merged.drop("_slices").cast(dict(schema))
