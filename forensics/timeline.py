"""Per-rank timelines from the store: steps aligned across ranks, collective arrivals, rank
progress, the stop of a run and the last seconds before it, host clock offsets, time going
backwards.

Owns the reconstruction the post-mortem commands print and the diagnosis passes build on. Every
function takes the events (a `Run`, a LazyFrame over the store, or a DataFrame), scans lazily,
reads only the columns it needs and collects once. It must not print, read raw logs, or judge
what is wrong (that is `passes/`); it must never rewrite `timestamp`: derived times get new
names (`ts_aligned`, `arrival`, `t_start`).

Domain facts this module relies on (seed 000, sections 4.2-4.5):
- a step's events share its `step` number on every rank, so steps align across ranks by number;
- the end of a blocking collective (the ALLREDUCE event, logged when it returns) is the same
  instant on every rank, which is what lets us measure host clock offsets;
- a rank arrives at the collective when its local gradients are ready (`grad_ready_ts`), and
  `wait_ms` is the part of `comm_ms` spent waiting for the last rank to arrive;
- ranks are numbered 0..world_size-1, so a gap in the rank numbers is a rank that never logged.
"""
from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Union

import polars as pl
import polars.selectors as cs

from .errors import BAD_ARGUMENT, NO_INPUT, ForensicsError
from .schema import EVENT_SCHEMA
from .store import Run

Events = Union[Run, pl.LazyFrame, pl.DataFrame]

TS = "timestamp"
# The per-step summary event: carries step_time_ms, loss, lr ... for the whole step. Phase
# metrics (data_load_ms, comm_ms) on their own events take precedence over a copy on it.
SUMMARY_EVENT = "TRAIN_STEP"
UTC = dt.timezone.utc


# --- inputs ------------------------------------------------------------------------------------

def lazy(events: Events) -> pl.LazyFrame:
    """The events as a LazyFrame, whatever was passed."""
    if isinstance(events, Run):
        return events.events()
    if isinstance(events, pl.DataFrame):
        return events.lazy()
    return events


def _ms(delta: pl.Expr) -> pl.Expr:
    """A Duration expression in milliseconds (Float64)."""
    return delta.dt.total_microseconds().cast(pl.Float64) / 1000.0


def _utc(t: dt.datetime) -> dt.datetime:
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


def bounds(events: Events) -> tuple[dt.datetime | None, dt.datetime | None]:
    """First and last event time of the run. A Run answers from its manifest without a scan."""
    if isinstance(events, Run):
        starts = [s["start"] for s in events.sources if s.get("start")]
        ends = [s["end"] for s in events.sources if s.get("end")]
        if starts and ends:
            return _utc(dt.datetime.fromisoformat(min(starts))), _utc(dt.datetime.fromisoformat(max(ends)))
    row = lazy(events).select(pl.col(TS).min().alias("a"), pl.col(TS).max().alias("b")).collect().row(0)
    return row[0], row[1]


def known_ranks(events: Events, present: Iterable[int] | None = None) -> list[int]:
    """Every rank the run should have: ranks seen, ranks named by file paths (a rank whose file is
    empty never logged) and the gaps in 0..max (ranks are numbered 0..world_size-1)."""
    seen: set[int] = set(present or [])
    if isinstance(events, Run):
        for s in events.sources:
            seen.update(int(r) for r in s.get("ranks", []) if r is not None)
            if s.get("rank_hint") is not None:
                seen.add(int(s["rank_hint"]))
    elif present is None:
        seen.update(lazy(events).select(pl.col("rank").drop_nulls().unique()).collect().to_series().to_list())
    if not seen:
        return []
    if max(seen) + 1 > GAP_FILL_MAX * len(seen):
        return sorted(seen)   # mostly gaps: not a world of 0..N-1 (odd numbering); name only what was seen
    return list(range(max(seen) + 1))


GAP_FILL_MAX = 4


def check_ranks(events: Events, asked: Iterable[int] | None) -> list[int] | None:
    """The ranks asked for (`--rank`), sorted, when the run has every one of them; None when
    none were asked. A negative rank, or one the run does not have (`known_ranks`: a rank that
    never logged but lies within 0..world_size-1 is still the run's), is a ForensicsError that
    names the ranks the run has: an empty answer would read as "that rank was quiet"."""
    if asked is None:
        return None
    want = sorted({int(r) for r in asked})
    if not want:
        return None
    from .report.fmt import rank_phrase, ranks_text

    neg = [r for r in want if r < 0]
    if neg:
        raise ForensicsError(f"{rank_phrase(neg)} cannot exist", reason="ranks are numbered from 0",
                             help="e.g. --rank 0", code=BAD_ARGUMENT)
    have = known_ranks(events)
    unknown = [r for r in want if r not in set(have)]
    if unknown:
        raise ForensicsError(
            f"{rank_phrase(unknown)} {'is' if len(unknown) == 1 else 'are'} not in this run",
            reason=f"the run has ranks {ranks_text(have, dash='-')}" if have else "no event of the run names a rank",
            help=f"e.g. --rank {have[0]}; every rank with: forensics ranks STORE" if have else
            "see where ranks come from with: forensics ingest --verbose", code=BAD_ARGUMENT)
    return want


# --- time specs --------------------------------------------------------------------------------

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|sec|m|min|h)?\s*$")
_UNIT_S = {"ms": 1e-3, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_TIME_OF_DAY = re.compile(r"^\d{1,2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:?\d{2})?$")


def parse_duration(spec: str | float | int) -> float:
    """'10s', '500ms', '5m', '1h' -> seconds. A number (int/float) is seconds; text needs a unit:
    a bare '10' could as well mean minutes or steps."""
    if isinstance(spec, (int, float)):
        return float(spec)
    m = _DURATION.match(spec)
    if not m:
        raise ForensicsError(f"cannot read the duration {spec!r}", reason="expected a number with a unit: ms, s, m or h",
                             help="e.g. 10s, 500ms, 5m, 1h", code=BAD_ARGUMENT)
    if m.group(2) is None:
        raise ForensicsError(f"the duration {spec!r} has no unit", reason="a duration needs a unit: ms, s, m or h",
                             help=f"e.g. {m.group(1)}s or {m.group(1)}m", code=BAD_ARGUMENT)
    return float(m.group(1)) * _UNIT_S[m.group(2)]


def clamp_window(events: Events, window_s: float) -> tuple[float, bool]:
    """A look-back window no longer than the run (first to last event), and whether it was cut:
    a window of 999999h would otherwise reach back a century (or past year 1)."""
    first, last = bounds(events)
    if first is None or last is None:
        return window_s, False
    span = (_utc(last) - _utc(first)).total_seconds()
    return (window_s, False) if window_s <= span else (span, True)


def _end(events: Events) -> dt.datetime:
    _, end = bounds(events)
    if end is None:
        raise ForensicsError("the run has no events with a time", help="check the store with: forensics ranks STORE", code=NO_INPUT)
    return _utc(end)


def _time_of_day(s: str, events: Events) -> dt.datetime:
    """14:30:00 -> that time on the day of the run's last event (UTC unless the time names its
    zone); when that is after the last event (a run past midnight), the day before: the latest
    occurrence not after the run's end."""
    t = dt.time.fromisoformat(s)
    end = _end(events)
    tz = t.tzinfo or UTC
    day = end.astimezone(tz).date()
    at = dt.datetime.combine(day, t.replace(tzinfo=tz)).astimezone(UTC)
    return at - dt.timedelta(days=1) if at > end else at


def parse_time_spec(spec: str, events: Events) -> dt.datetime:
    """A point in time of the run, from the command line.

    - ISO-8601, with or without zone (a naive time is UTC, as in the store);
    - a time of day, `14:30:00` or `14:30` (UTC unless it names a zone): on the day of the run's
      last event; for a run past midnight, the latest such time not after the run's last event;
    - `-30s`, `-5m`, `-250ms`: relative to the last event of the run;
    - `step:1500`: the first time any rank logged that step.
    """
    s = spec.strip()
    if s.startswith("-"):
        end = _end(events)
        try:
            return end - dt.timedelta(seconds=parse_duration(s[1:]))
        except OverflowError:   # further back than a datetime reaches: the run's start says the same
            first, _ = bounds(events)
            return _utc(first) if first is not None else end
    if s.lower().startswith("step:"):
        try:
            step = int(s.split(":", 1)[1])
        except ValueError:
            raise ForensicsError(f"cannot read the time {spec!r}", reason="step:N needs an integer step",
                                 help="e.g. step:1500", code=BAD_ARGUMENT) from None
        t = lazy(events).filter(pl.col("step") == step).select(pl.col(TS).min()).collect().item()
        if t is None:
            raise ForensicsError(f"no rank logged step {step}", reason="no event carries that step number",
                                 help="see the steps reached with: forensics ranks STORE", code=BAD_ARGUMENT)
        return t
    if _TIME_OF_DAY.match(s):
        try:
            return _time_of_day(s, events)
        except ValueError:
            raise ForensicsError(f"cannot read the time of day {spec!r}", reason="expected HH:MM or HH:MM:SS(.ffffff)",
                                 help="e.g. 14:30:00 or 09:05", code=BAD_ARGUMENT) from None
    try:
        t = dt.datetime.fromisoformat(s.replace(" ", "T", 1) if "T" not in s else s)
    except ValueError:
        raise ForensicsError(f"cannot read the time {spec!r}",
                             reason="expected ISO-8601, a time of day, a duration before the end, or step:N",
                             help="e.g. 2025-06-12T14:03:21Z, 14:03:21, -30s, -5m, step:1500", code=BAD_ARGUMENT) from None
    return _utc(t)


def parse_time_range(since: str | None, until: str | None, events: Events,
                     names: tuple[str, str] = ("--since", "--until")) -> tuple[dt.datetime | None, dt.datetime | None]:
    """Both ends of a time range (see `parse_time_spec`); a range that runs backwards is an
    error naming both values (it would silently match nothing)."""
    a = parse_time_spec(since, events) if since else None
    b = parse_time_spec(until, events) if until else None
    if a is not None and b is not None and a > b:
        raise ForensicsError(f"{names[0]} {since} is after {names[1]} {until}",
                             reason=f"the range runs backwards: {iso(a)} > {iso(b)}",
                             help=f"swap them: {names[0]} {until} {names[1]} {since}", code=BAD_ARGUMENT)
    return a, b


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
    return run.rank_slices(max_events or SLICE_EVENTS)  # the store knows its parts' rank ranges (store.Run.rank_slices)


def step_table(events: Events, time_col: str = TS, evidence: bool = False,
               slices: list[pl.LazyFrame] | None = None) -> pl.LazyFrame:
    """One row per (rank, step), sorted by step then rank (see `step_rows` for the columns; with
    `evidence`, also EVIDENCE_COLUMNS, `file` as a Categorical).

    `slices`: the events in slices of whole ranks (`rank_slices`, the default for a Run), read
    and aggregated one slice at a time: the same rows in a fraction of the memory. Given, they
    are what is read, not `events`."""
    if slices is None and isinstance(events, Run):
        slices = rank_slices(events)
    return step_rows(events, time_col, evidence, slices).sort("step", "rank")


def collect_sorted(lf: pl.LazyFrame, by: list[str]) -> pl.DataFrame:
    """`lf` collected and sorted by `by` (a unique key, so no ties), moved one column at a time:
    sorting the collected frame would hold the table twice at its peak (the bench store's step
    table is 330 MB), this holds it once plus one column."""
    cols = lf.collect().get_columns()
    # gathering from a contiguous column is several times faster than from the slices' chunks
    order = pl.DataFrame([c for c in cols if c.name in by]).rechunk().select(pl.arg_sort_by(by)).to_series()
    out: list[pl.Series] = []
    for i in range(len(cols)):
        out.append(cols[i].rechunk().gather(order))
        cols[i] = cols[i].clear()   # drop this column's data before moving the next one
    return pl.DataFrame(out)


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


def _comm_of_ops() -> pl.Expr:
    """comm_ms, or for a per-op communication event without one its duration."""
    is_comm = pl.col("event").fill_null("").str.to_uppercase().is_in(list(COMM_OP_EVENTS))
    return pl.coalesce(pl.col("comm_ms"), pl.when(is_comm).then(
        pl.coalesce(pl.col("step_time_ms"), pl.col("duration_s") * 1000.0))).alias("comm_ms")


def _op_compute_inputs() -> tuple[list[pl.Expr], list[pl.Expr]]:
    """Masked columns and aggregations of `_step_groups` for `op_compute_ms`: the compute time
    the logs state. Per (rank, step): the sum of the durations of its per-op compute events
    (OP_EVENTS; an op's duration is its compute_ms, fwd_ms + bwd_ms, elapsed_ms (typed as
    step_time_ms) or duration_s/_ms), else the largest explicit compute_ms (or fwd_ms + bwd_ms)
    on its other events, else null (then compute is step - data - comm)."""
    is_op = pl.col("event").fill_null("").str.to_uppercase().is_in(list(OP_EVENTS))
    parts = pl.when(pl.col("fwd_ms").is_not_null() | pl.col("bwd_ms").is_not_null()).then(
        pl.sum_horizontal("fwd_ms", "bwd_ms"))
    explicit = pl.coalesce(pl.col("compute_ms"), parts)
    op_dur = pl.coalesce(explicit, pl.col("step_time_ms"), pl.col("duration_s") * 1000.0)
    is_any_op = pl.col("event").fill_null("").str.to_uppercase().is_in([*OP_EVENTS, *COMM_OP_EVENTS])
    masked = [pl.when(is_op).then(op_dur).alias("op_ms"), pl.when(~is_op).then(explicit).alias("ex_ms"),
              pl.when(~is_any_op | pl.col("event").fill_null("").eq(SUMMARY_EVENT))
              .then(pl.col("step_time_ms")).alias("nonop_step_time_ms")]
    aggs = [pl.col("op_ms").sum().alias("op_sum"), pl.col("op_ms").count().alias("n_op"),
            pl.col("ex_ms").max().alias("ex_max")]
    return masked, aggs


def _with_gaps(groups: pl.LazyFrame) -> pl.LazyFrame:
    """`gap_ms`: the time since the rank's previous step ended, when that step is the one before
    (what a step took when it logged no time). Per rank: computed inside each slice."""
    def prev(c: str) -> pl.Expr:
        return pl.col(c).shift(1).over("rank", order_by="step")

    return groups.with_columns(
        pl.when(pl.col("step") - prev("step") == 1).then(_ms(pl.col("t_end") - prev("t_end"))).alias("gap_ms"))


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


def _step_groups(lf: pl.LazyFrame, time_col: str, evidence: bool, per_rank: bool = False) -> pl.LazyFrame:
    """The (rank, step) group_by of `step_rows`: per-group values, before anything run-wide.

    With `per_rank`, every event is kept (a null rank or step is a group too) and the groups also
    carry what `rank_summary` adds up per rank (temp_max, warn, error): one scan serves both."""
    names = lf.collect_schema().names()
    lf = lf.with_columns(_comm_of_ops())
    t = pl.col(time_col)
    # grad_ready_ts is logged by the host clock: shift it like the timestamp when aligning
    ready = pl.col("grad_ready_ts")
    if time_col != TS and "clock_offset_ms" in names:
        ready = ready - pl.col("clock_offset_ms").fill_null(0.0) / 1000.0
    is_sum = pl.col("event").fill_null("") == SUMMARY_EVENT
    is_coll = pl.col("comm_ms").is_not_null() & ~is_sum
    # a per-op event's elapsed_ms (typed as step_time_ms) is the op's time, not the step's
    op_masked, op_aggs = _op_compute_inputs()
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
            pl.col("file").first(), pl.col("train_line").min(), pl.col("data_line").min(),
            pl.col("comm_line").max(), pl.col("ready_line").min(), pl.col("disk_read_mbps").mean(),
        ]
    counted: list[pl.Expr] = []
    count_aggs: list[pl.Expr] = []
    if per_rank:
        counted = [pl.col("temp_c"), (pl.col("level") == "WARN").alias("warn"), (pl.col("level") == "ERROR").alias("error")]
        count_aggs = [pl.col("temp_c").max().alias("temp_max"), pl.col("warn").sum(), pl.col("error").sum()]
    else:
        lf = lf.filter(pl.col("rank").is_not_null() & pl.col("step").is_not_null())
    return (
        lf.select("rank", "step", "host", t.alias("t"), *PHASES, *STEP_VALUES, *masked, *cited, *counted)
        .group_by("rank", "step")
        # only plain aggregations here (when/coalesce inside agg() takes polars' slow path)
        .agg(
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
        )
        .with_columns(
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
              for c in STEP_VALUES), "sum_step_time_ms", "any_step_time_ms", "op_sum", "n_op", "ex_max")
    )


def arrivals(steps: pl.LazyFrame | pl.DataFrame) -> pl.LazyFrame:
    """Per (step, rank): when the rank arrived at the step's collective, its order, whether it
    was the last, and per step who was last and by how much; per rank how often it was last.

    The arrival is taken, per step, from the first source every rank of the step has:
    `grad_ready` (grad_ready_ts: the seed's gradient_skew signal), `wait_ms` (clock-free: a rank
    that waited w ms less than the longest waiter arrived w ms later than the earliest rank), or
    `comm_end` (collective return minus comm_ms). Timestamps from different hosts are only
    comparable on an aligned clock: pass `align_steps(steps, step_offsets(steps))` (or
    `step_table(with_aligned_time(events, clock_offsets(events)), "ts_aligned")`).

    Columns: step, rank, host, arrival_source, arrival (datetime, null for wait_ms), arrival_ms
    (after the step's first arrival), order (1 = first), is_last (a unique last, later than the
    first), last_rank, late_by_ms (last arrival minus the step's median arrival), spread_ms
    (last - first), arrived (ranks with an arrival), times_last (steps where this rank was last).
    """
    lf = steps.lazy() if isinstance(steps, pl.DataFrame) else steps
    per_step = ["step"]
    n = pl.len().over(per_step)
    ready_at = pl.from_epoch((pl.col("grad_ready_ts") * 1e6).round(0).cast(pl.Int64), time_unit="us").dt.replace_time_zone("UTC")
    comm_at = pl.col("comm_end") - pl.duration(microseconds=(pl.col("comm_ms") * 1000).round(0).cast(pl.Int64))
    full = {
        "grad_ready": pl.col("grad_ready_ts").count().over(per_step) == n,
        "wait_ms": pl.col("wait_ms").count().over(per_step) == n,
        "comm_end": comm_at.count().over(per_step) == n,
    }
    some = {
        "grad_ready": pl.col("grad_ready_ts").count().over(per_step) >= 2,
        "wait_ms": pl.col("wait_ms").count().over(per_step) >= 2,
        "comm_end": comm_at.count().over(per_step) >= 2,
    }
    src = pl.when(full["grad_ready"]).then(pl.lit("grad_ready"))
    for name in ("wait_ms", "comm_end"):
        src = src.when(full[name]).then(pl.lit(name))
    for name in ("grad_ready", "wait_ms", "comm_end"):
        src = src.when(some[name]).then(pl.lit(name))
    arrival = (
        pl.when(pl.col("arrival_source") == "grad_ready").then(ready_at)
        .when(pl.col("arrival_source") == "comm_end").then(comm_at)
    )
    rel = (
        pl.when(pl.col("arrival_source") == "wait_ms")
        .then(pl.col("wait_ms").max().over(per_step) - pl.col("wait_ms"))
        .otherwise(_ms(pl.col("arrival") - pl.col("arrival").min().over(per_step)))
    )
    a = pl.col("arrival_ms")
    is_max = (a == a.max().over(per_step)) & a.is_not_null()
    out = (
        lf.select("step", "rank", "host", "grad_ready_ts", "wait_ms", "comm_end", "comm_ms")
        .with_columns(src.alias("arrival_source"))
        .with_columns(arrival.alias("arrival"))
        .with_columns(rel.alias("arrival_ms"))
        .with_columns(
            a.rank("min").over(per_step).cast(pl.Int32).alias("order"),
            (is_max & (is_max.sum().over(per_step) == 1) & (a.max().over(per_step) > a.min().over(per_step))).alias("is_last"),
            a.count().over(per_step).cast(pl.Int32).alias("arrived"),
            (a.max() - a.median()).over(per_step).alias("late_by_ms"),
            (a.max() - a.min()).over(per_step).alias("spread_ms"),
        )
        .with_columns(
            pl.col("rank").filter(pl.col("is_last")).first().over(per_step).alias("last_rank"),
            pl.col("is_last").sum().over("rank").cast(pl.Int32).alias("times_last"),
        )
        .select("step", "rank", "host", "arrival_source", "arrival", "arrival_ms", "order", "is_last",
                "last_rank", "late_by_ms", "spread_ms", "arrived", "times_last")
        .sort("step", "rank")
    )
    return out


def parse_step_range(spec: str) -> tuple[int | None, int | None]:
    """'100:200' (inclusive), '100:', ':200', ':' (all), or '150' (one step)."""
    try:
        if ":" not in spec:
            n = int(spec)
            return n, n
        a, b = spec.split(":", 1)
        lo, hi = (int(a) if a.strip() else None), (int(b) if b.strip() else None)
    except ValueError:
        raise ForensicsError(f"cannot read the step range {spec!r}", reason="expected A:B with integer steps",
                             help="e.g. --steps 1500:1520, --steps 1500:, --steps : (all)", code=BAD_ARGUMENT) from None
    if lo is not None and hi is not None and lo > hi:
        raise ForensicsError(f"the step range {spec!r} runs backwards: step {lo} is after step {hi}",
                             reason="A:B needs A <= B (both steps are included)",
                             help=f"e.g. --steps {hi}:{lo}", code=BAD_ARGUMENT)
    return lo, hi


@dataclass
class Timeline:
    """`build_timeline`'s result: `rows` has one row per (step, rank) of every rank (a rank can
    only be last among all of them): the step table on the common clock plus the arrival
    columns; `offsets` the host clock estimates used; `span` the first and last step the run
    logged."""

    rows: pl.DataFrame
    offsets: pl.DataFrame
    span: tuple[int, int] | None


def build_timeline(events: Events, steps: tuple[int | None, int | None] | None = None, last: int = 20) -> Timeline:
    """Steps `steps` (inclusive bounds, None = open), default the `last` steps the run reached,
    with phases, arrival order and clock alignment. Reads only those steps (plus the one before,
    to derive a step time when none is logged)."""
    lf = lazy(events)
    lo_hi = lf.select(pl.col("step").min().alias("a"), pl.col("step").max().alias("b")).collect().row(0)
    if lo_hi[0] is None:
        return Timeline(rows=pl.DataFrame(), offsets=pl.DataFrame(), span=None)
    a, b = steps if steps is not None else (lo_hi[1] - last + 1, lo_hi[1])
    cond = pl.lit(True)
    if a is not None:
        cond = cond & (pl.col("step") >= a - 1)
    if b is not None:
        cond = cond & (pl.col("step") <= b)
    st = step_table(lf.filter(cond)).collect()
    if a is not None:
        st = st.filter(pl.col("step") >= a)
    offsets = step_offsets(st)
    aligned = align_steps(st, offsets)
    arr = arrivals(aligned).drop("host")
    rows = aligned.join(arr, on=["step", "rank"], how="left").sort("step", "rank").collect()
    return Timeline(rows=rows, offsets=offsets, span=(lo_hi[0], lo_hi[1]))


# The first ERRORs are checked one at a time (cheap: one rank's tail each); the rest in bulk.
FIRST_ERRORS_CHECKED = 8


# --- progress and the stop -----------------------------------------------------------------------

def _missing_rows(df: pl.DataFrame, ranks: list[int]) -> pl.DataFrame:
    """Add a row (all null but rank) for each expected rank that has no events."""
    have = set(df["rank"].drop_nulls().to_list())
    lost = [r for r in ranks if r not in have]
    if not lost:
        return df
    extra = pl.DataFrame({"rank": lost}, schema={"rank": df.schema["rank"]})
    return pl.concat([df, extra], how="diagonal_relaxed").sort("rank", nulls_last=True)


def rank_progress(events: Events, stop: dt.datetime | None = None, time_col: str = TS,
                  ranks: Iterable[int] | None = None) -> pl.DataFrame:
    """Per rank: host, first_ts, last_ts, last_step, events, lag_steps (behind the most advanced
    rank: "rank 3 is one step behind"), silent_s (from its last event to `stop`, default the last
    event of the run), silent_order (1 = went silent first; ties share a place).

    Ranks that should exist but logged nothing (see `known_ranks`) get a row with events = 0.
    """
    lf = lazy(events)
    t = pl.col(time_col)
    df = (
        lf.group_by("rank")
        .agg(
            pl.col("host").first(ignore_nulls=True),
            t.min().alias("first_ts"),
            t.max().alias("last_ts"),
            pl.col("step").max().alias("last_step"),
            pl.len().cast(pl.Int64).alias("events"),
        )
        .sort("rank", nulls_last=True)
        .collect()
    )
    expected = list(ranks) if ranks is not None else known_ranks(events, df["rank"].drop_nulls().to_list())
    df = _missing_rows(df, expected).with_columns(pl.col("events").fill_null(0))
    return _progress(df, stop)


# A rank silent for this many median step times before the run's last event stopped while the
# others went on (a healthy run's ranks end within about a step of each other); without step
# times, SILENT_MIN_S.
SILENT_STEPS = 3.0
SILENT_MIN_S = 10.0


def first_silent(events: Events, time_col: str = TS) -> dict[str, Any] | None:
    """The rank that went silent first, when it stopped while the run went on: the hung or dead
    rank of a hang, whose peers block in the collective it never joins until their watchdog
    fires. None when the ranks stopped together.

    "Went on": the run logged for more than SILENT_STEPS median step times (SILENT_MIN_S without
    step times) after the rank's last event, and either another rank logged an ERROR after it or
    the rank is behind the most advanced rank's step. (A rank that finishes a long checkpoint
    save after the others is not a hang: no ERROR, no lag.) Times are `time_col`: pass
    `with_aligned_time(...)` and "ts_aligned" to compare hosts on a common clock.
    Keys: rank, last_ts, step (its last), lag_steps, source_file, line (its last event), silent_s
    (before the run's last event), errors_after (ERROR lines of other ranks after it).
    """
    lf = lazy(events)
    prog = rank_progress(lf, time_col=time_col).filter(pl.col("rank").is_not_null() & pl.col("last_ts").is_not_null())
    if prog.height < 2:
        return None
    first = prog.sort("last_ts", "rank").row(0, named=True)
    t = pl.col(time_col)
    step_ms, errors_after = pl.collect_all([
        lf.select(pl.col("step_time_ms").median()),
        lf.filter((pl.col("level") == "ERROR") & (pl.col("rank") != first["rank"]) & (t > pl.lit(first["last_ts"])))
        .select(pl.len()),
    ])
    step_ms, errors_after = step_ms.item(), errors_after.item()
    need = SILENT_STEPS * step_ms / 1000.0 if step_ms else SILENT_MIN_S
    if not first["silent_s"] or first["silent_s"] <= need or not (errors_after or first["lag_steps"]):
        return None
    row = (lf.filter((pl.col("rank") == first["rank"]) & (t == pl.lit(first["last_ts"])))
           .select("source_file", "line").sort("line").tail(1).collect())
    where = row.row(0, named=True) if row.height else {"source_file": None, "line": None}
    return {"rank": first["rank"], "last_ts": first["last_ts"], "step": first["last_step"],
            "lag_steps": first["lag_steps"], **where, "silent_s": first["silent_s"], "errors_after": errors_after}


def stop_time(events: Events, at: dt.datetime | None = None) -> tuple[dt.datetime, str]:
    """When the run stopped, and how that was decided.

    `at` wins. Otherwise the first fatal ERROR: an ERROR after which its rank did not go on to log
    two different steps (an ERROR the rank survived, e.g. a retried data load, is not the stop;
    an ERROR without a rank is fatal unless some rank went on that way). Without any fatal
    ERROR: the last event.
    """
    if at is not None:
        return _utc(at), "given (--at)"
    lf = lazy(events)
    errors = (
        lf.filter(pl.col("level") == "ERROR")
        .select(TS, "rank", "event", "source_file", "line")
        .sort(TS, "rank", nulls_last=True)
        .collect()
    )
    # An ERROR without a time (a console line, a note beside the dumps) cannot be placed in time:
    # it is named, never taken for the stop.
    untimed = errors.filter(pl.col(TS).is_null())
    errors = errors.filter(pl.col(TS).is_not_null())
    if untimed.height:
        where = untimed.row(0, named=True)
        untimed_note = (f"; {untimed.height} ERROR(s) without a time not placed, first "
                        f"{where['event']} at {where['source_file']}:{where['line']}")
    else:
        untimed_note = ""
    stop, how = _first_fatal(lf, events, errors)
    if untimed_note:
        how = how.replace("(no ERROR logged)", "(no ERROR with a time logged)")
    return stop, how + untimed_note


def _first_fatal(lf: pl.LazyFrame, events: Events, errors: pl.DataFrame) -> tuple[dt.datetime, str]:
    """`stop_time` without `at`: the first fatal ERROR among `errors` (all with a time), else
    the last event."""
    if errors.height:
        # Survived = the erroring rank logged at least two different steps after the error (it
        # crossed a step boundary). Only events after the first ERROR are read.
        err_ranks = errors["rank"].drop_nulls().unique().to_list()
        base = lf.filter(pl.col("step").is_not_null() & pl.col("rank").is_not_null())
        # Usually the first ERROR is the fatal one: check the first few one by one, each reading
        # only its rank's events after it (pushdown on rank and time), before the bulk check.
        for i, row in enumerate(errors.head(FIRST_ERRORS_CHECKED).iter_rows(named=True)):
            after = base.filter(pl.col(TS) > pl.lit(row[TS]))
            if row["rank"] is not None:
                n = after.filter(pl.col("rank") == row["rank"]).select(pl.col("step").n_unique()).collect().item()
            else:
                n = after.group_by("rank").agg(pl.col("step").n_unique()).select(pl.col("step").max()).collect().item()
            if not n or n < 2:
                who = f"rank {row['rank']}" if row["rank"] is not None else "no rank"
                note = f"; {i} earlier ERROR(s) were followed by progress" if i else ""
                return row[TS], f"first fatal ERROR: {row['event']} on {who} at {row['source_file']}:{row['line']}{note}"
        post = base.filter(pl.col(TS) > pl.lit(errors[TS].min()))
        if errors["rank"].null_count() == 0:
            post = post.filter(pl.col("rank").is_in(err_ranks))

        def steps_after(keys: list[str]) -> pl.LazyFrame:
            """For each error, how many distinct steps (of its rank, or of any rank) have
            events after it: as-of join against the steps ordered by their last event."""
            last = (
                post.group_by(*keys, "step").agg(pl.col(TS).max().alias("last_ts")).sort("last_ts")
                .with_columns(pl.int_range(1, pl.len() + 1).over(keys or pl.lit(0)).alias("n_le"),
                              pl.len().over(keys or pl.lit(0)).alias("n_all"))
            )
            totals = last.group_by(*keys).agg(pl.col("n_all").first()) if keys else last.select(pl.col("n_all").first())
            errs = errors.lazy().with_row_index("i").filter(
                pl.col("rank").is_not_null() if keys else pl.col("rank").is_null()).sort(TS)
            joined = errs.join_asof(last.select(*keys, "last_ts", "n_le"), left_on=TS, right_on="last_ts",
                                    by=keys or None, strategy="backward", check_sortedness=False)
            joined = joined.join(totals, on=keys, how="left") if keys else joined.join(totals, how="cross")
            return joined.select("i", TS, "rank", "event", "source_file", "line",
                                 (pl.col("n_all").fill_null(0) - pl.col("n_le").fill_null(0)).alias("steps_after"))

        per_rank = pl.concat(pl.collect_all([steps_after(["rank"]), steps_after([])]), how="vertical_relaxed")
        fatal = per_rank.filter(pl.col("steps_after") < 2).sort("i")
        if fatal.height:
            row = fatal.row(0, named=True)
            who = f"rank {row['rank']}" if row["rank"] is not None else "no rank"
            note = f"; {row['i']} earlier ERROR(s) were followed by progress" if row["i"] else ""
            return row[TS], f"first fatal ERROR: {row['event']} on {who} at {row['source_file']}:{row['line']}{note}"
        _, end = bounds(events)
        assert end is not None
        return end, f"last event of the run (all {errors.height} ERROR(s) were followed by progress)"
    _, end = bounds(events)
    if end is None:
        if not lf.select(pl.len()).collect().item():
            raise ForensicsError("the run has no events", help="check the store with: forensics ingest --json", code=NO_INPUT)
        raise ForensicsError("no event of the run carries a time", reason="the stop and a window before it need times",
                             help="list the events in file order with: forensics events STORE", code=NO_INPUT)
    return end, "last event of the run (no ERROR logged)"


# --- clocks ---------------------------------------------------------------------------------------

def clock_key() -> pl.Expr:
    """The clock an event was stamped with: its host's (ranks on one host share a clock), or its
    rank's when the host is unknown."""
    return pl.coalesce(pl.col("host"), pl.concat_str(pl.lit("rank:"), pl.col("rank").cast(pl.String))).alias("clock")


def _offsets(ends: pl.LazyFrame, keys: list[str]) -> pl.LazyFrame:
    """The estimator behind `clock_offsets`: `ends` has one row per (rank, collective) with its
    `clock` and return time `us` (epoch microseconds); `keys` name the collective."""
    return (
        ends.group_by("clock", *keys)
        .agg(pl.col("us").median().alias("host_us"))
        .with_columns(
            pl.col("host_us").median().over(keys).alias("ref_us"),
            pl.len().over(keys).alias("hosts"),
        )
        .filter(pl.col("hosts") >= 2)
        .with_columns(((pl.col("host_us") - pl.col("ref_us")) / 1000.0).alias("d_ms"))
        .group_by("clock")
        .agg(
            pl.col("d_ms").median().alias("offset_ms"),
            pl.len().cast(pl.Int64).alias("samples"),
            (pl.col("d_ms").quantile(0.9) - pl.col("d_ms").quantile(0.1)).alias("spread_ms"),
        )
        .sort("clock")
    )


def clock_offsets(events: Events) -> pl.DataFrame:
    """Per clock (host): its estimated offset in ms from the consensus of all hosts.

    The end of a blocking collective is one instant on every rank, so for each collective (step,
    op, n-th of the step) the host's median return time minus the median over hosts measures the
    host's offset; the estimate is the median over collectives. Columns: clock, offset_ms
    (positive: the host's clock runs ahead), samples (collectives compared), spread_ms (p90 - p10
    of the per-collective offsets: jitter plus timestamp resolution). With two hosts the
    consensus is their midpoint: each gets half the difference. A host alone has no estimate.
    """
    ends = (
        lazy(events)
        .filter(pl.col("comm_ms").is_not_null() & pl.col("step").is_not_null() & pl.col("rank").is_not_null()
                & (pl.col("event").fill_null("") != SUMMARY_EVENT))
        .select(TS, "rank", "host", "step", pl.col("collective").fill_null(""), "seq")
        .with_columns(
            clock_key(),
            pl.coalesce(
                pl.col("seq"),
                pl.int_range(pl.len()).over("rank", "step", "collective", order_by=TS).cast(pl.Int64),
            ).alias("k"),
            pl.col(TS).dt.epoch("us").alias("us"),
        )
    )
    return _offsets(ends, ["step", "collective", "k"]).collect()


OFFSET_STEPS = 2000


def step_offsets(steps: pl.LazyFrame | pl.DataFrame) -> pl.DataFrame:
    """`clock_offsets` from a step table (each rank's last collective of a step, `comm_end`):
    the same estimate without another scan of the events; a long run is sampled every k-th step
    (about OFFSET_STEPS steps)."""
    lf = steps.lazy() if isinstance(steps, pl.DataFrame) else steps
    ends = lf.filter(pl.col("comm_end").is_not_null()).select(
        "step", clock_key(), pl.col("comm_end").dt.epoch("us").alias("us"))
    if isinstance(steps, pl.DataFrame) and steps.height:
        # a median over ~OFFSET_STEPS collectives is as good as over all of them, and cheap
        lo, hi = steps["step"].min(), steps["step"].max()
        every = max(1, (hi - lo + 1) // OFFSET_STEPS) if lo is not None else 1
        if every > 1:
            ends = ends.filter(pl.col("step") % every == 0)
    return _offsets(ends, ["step"]).collect()


def _offset_of(offsets: pl.DataFrame, default: float | None) -> pl.Expr:
    mapping = dict(zip(offsets["clock"].to_list(), offsets["offset_ms"].to_list())) if offsets.height else {}
    if not mapping:
        return pl.lit(default, dtype=pl.Float64)
    return clock_key().replace_strict(mapping, default=default, return_dtype=pl.Float64)


def _shift(col: str) -> pl.Expr:
    return pl.col(col) - pl.duration(microseconds=(pl.col("clock_offset_ms") * 1000).round(0).cast(pl.Int64))


def with_aligned_time(events: Events, offsets: pl.DataFrame) -> pl.LazyFrame:
    """The events with `clock_offset_ms` (0 for clocks without an estimate) and `ts_aligned` =
    timestamp - offset. `timestamp` itself is never changed."""
    return (lazy(events).with_columns(_offset_of(offsets, 0.0).alias("clock_offset_ms"))
            .with_columns(_shift(TS).alias("ts_aligned")))


def align_steps(steps: pl.LazyFrame | pl.DataFrame, offsets: pl.DataFrame) -> pl.LazyFrame:
    """A step table on the common clock: t_start, t_end, comm_end and grad_ready_ts shifted by
    their host's offset, which is kept in `clock_offset_ms` (the same as building the table from
    `with_aligned_time(...)` with time_col="ts_aligned", without another scan)."""
    lf = steps.lazy() if isinstance(steps, pl.DataFrame) else steps
    return lf.with_columns(_offset_of(offsets, 0.0).alias("clock_offset_ms")).with_columns(
        _shift("t_start"), _shift("t_end"), _shift("comm_end"),
        pl.col("grad_ready_ts") - pl.col("clock_offset_ms") / 1000.0,
    )


def monotonicity(events: Events) -> pl.DataFrame:
    """Files in which time goes backwards within a rank, in line order (reported, never fixed).

    Columns: source_file, rank, backwards (how many lines carry an earlier time than the line
    before them), first_line (the first such line), max_back_ms (the largest jump back), lines.
    Only files with at least one backward step are returned.
    """
    lf = lazy(events).select("source_file", "rank", "line", TS)
    # Fast path, no sort: a (file, rank) whose rows, as stored, have both time and line
    # increasing has line order = time order. Only the others are sorted by line.
    # Grouping by rank alone (an integer; the file name is a costly string key) is exact for a
    # rank with one file in one part; other ranks only become suspects and get the exact check.
    suspect = (
        lf.select("rank", "line", TS).group_by("rank")
        .agg(((pl.col("line").diff().min() > 0) & (pl.col(TS).diff().min() >= pl.duration(microseconds=0)))
             .fill_null(True).alias("ok"))
        .filter(~pl.col("ok"))
        .collect()
    )
    if not suspect.height:
        return pl.DataFrame(schema={"source_file": pl.String, "rank": pl.Int32, "backwards": pl.Int64,
                                    "first_line": pl.Int64, "max_back_ms": pl.Float64, "lines": pl.Int64})
    ranks = suspect["rank"].drop_nulls().to_list()
    scope = pl.col("rank").is_in(ranks)
    if suspect["rank"].null_count():
        scope = scope | pl.col("rank").is_null()
    d = pl.col(TS).sort_by("line").diff()
    back = d < pl.duration(microseconds=0)
    return (
        lf.filter(scope)
        .group_by("source_file", "rank")
        .agg(
            back.sum().cast(pl.Int64).alias("backwards"),
            pl.col("line").sort().filter(back).first().alias("first_line"),
            (-_ms(d.min())).alias("max_back_ms"),
            pl.len().cast(pl.Int64).alias("lines"),
        )
        .filter(pl.col("backwards") > 0)
        .sort("source_file", "rank", nulls_last=True)
        .collect()
    )


# --- the `ranks` table ---------------------------------------------------------------------------

def _progress(df: pl.DataFrame, stop: dt.datetime | None, t: str = "last_ts") -> pl.DataFrame:
    """lag_steps, silent_s and silent_order from per-rank last_step and the time column `t`."""
    end = stop if stop is not None else df[t].max()
    return df.with_columns(
        (pl.col("last_step").max() - pl.col("last_step")).alias("lag_steps"),
        (_ms(pl.lit(end, dtype=df.schema[t]) - pl.col(t)) / 1000.0).alias("silent_s"),
        pl.col(t).rank("min").cast(pl.Int32).alias("silent_order"),
    )


RANK_SUMMARY_COLUMNS = [
    "rank", "host", "first_ts", "last_ts", "last_step", "lag_steps", "events", "step_ms", "data_ms",
    "compute_ms", "comm_ms", "comm_share", "wait_ms", "gpu_util", "temp_max", "warn", "error",
    "silent_s", "silent_order", "clock_offset_ms",
]


def rank_summary(events: Events, ranks: Iterable[int] | None = None) -> pl.DataFrame:
    """One row per rank (the `ranks` command): host, first_ts, last_ts, last_step, lag_steps,
    events, step_ms, data_ms, compute_ms, comm_ms, comm_share (comm/step, the seed's most
    sensitive slow-node signal; it flags > 40 %), wait_ms (all medians over the rank's steps),
    gpu_util (median), temp_max, warn, error (counts), silent_s, silent_order (1 = went silent
    first), clock_offset_ms (its host's, see `step_offsets`; null when not estimable).

    Silence is compared on the common clock when offsets are known: a host whose clock runs
    250 ms behind must not look like the first to go quiet. Ranks that should exist but logged
    nothing (`known_ranks`) get a row with events = 0. One aggregation of the events (the step
    table's), in rank slices for a Run, and two narrow queries (host, gpu_util median).
    """
    lf = lazy(events)
    # The (rank, step) groups of the step table, unranked and step-less events included, carry
    # what the per-rank counts add up: one scan for both. A host (the first one logged) and a
    # median are not sums of their groups' values: two narrow queries.
    slices = rank_slices(events) if isinstance(events, Run) else []
    if slices:
        slices.append(lf.filter(pl.col("rank").is_null()))
    groups_q = _sliced(lf, slices, lambda x: _step_groups(x, TS, evidence=False, per_rank=True)).select(
        "rank", "step", "t_start", "t_end", "step_time_logged", *PHASES, "comm_end", "complete",
        "events", "temp_max", "warn", "error")
    host_q = lf.group_by("rank").agg(pl.col("host").first(ignore_nulls=True))
    util_q = lf.filter(pl.col("gpu_util").is_not_null()).group_by("rank").agg(pl.col("gpu_util").median())
    groups, hosts, util = pl.collect_all([groups_q, host_q, util_q])
    df = (
        groups.group_by("rank")
        .agg(
            pl.col("t_start").min().alias("first_ts"),
            pl.col("t_end").max().alias("last_ts"),
            pl.col("step").max().alias("last_step"),
            pl.col("events").sum().cast(pl.Int64),
            pl.col("temp_max").max(),
            pl.col("warn").sum().cast(pl.Int64),
            pl.col("error").sum().cast(pl.Int64),
        )
        .join(hosts, on="rank", how="left", nulls_equal=True)
        .join(util, on="rank", how="left", nulls_equal=True)
    )
    # only what the medians and clock offsets need
    steps = _finish_steps(_with_gaps(groups.lazy().filter(pl.col("rank").is_not_null() & pl.col("step").is_not_null())),
                          evidence=False).select("step", "rank", "step_time_ms", "data_load_ms", "compute_ms",
                                                 "comm_ms", "wait_ms", "comm_end").collect()
    per_step = steps.group_by("rank").agg(
        pl.col("step_time_ms").median().alias("step_ms"),
        pl.col("data_load_ms").median().alias("data_ms"),
        pl.col("compute_ms").median().alias("compute_ms"),
        pl.col("comm_ms").median().alias("comm_ms"),
        (pl.col("comm_ms") / pl.col("step_time_ms")).median().alias("comm_share"),
        pl.col("wait_ms").median().alias("wait_ms"),
    )
    host_of = {r: h for r, h in zip(df["rank"].to_list(), df["host"].to_list()) if r is not None and h is not None}
    offsets = step_offsets(steps.with_columns(
        pl.col("rank").replace_strict(host_of, default=None, return_dtype=pl.String).alias("host")))
    df = df.join(per_step, on="rank", how="left", nulls_equal=True).sort("rank", nulls_last=True)
    expected = list(ranks) if ranks is not None else known_ranks(events, df["rank"].drop_nulls().to_list())
    df = _missing_rows(df, expected).with_columns(
        pl.col("events", "warn", "error").fill_null(0),
        _offset_of(offsets, None).alias("clock_offset_ms"),
    )
    df = df.with_columns((pl.col("last_ts") - pl.duration(
        microseconds=(pl.col("clock_offset_ms").fill_null(0.0) * 1000).round(0).cast(pl.Int64))).alias("last_aligned"))
    # medians of ms-resolution inputs: more digits than 1 us are float noise
    return _progress(df, None, "last_aligned").select(RANK_SUMMARY_COLUMNS).with_columns(
        cs.float().exclude("comm_share").round(3), pl.col("comm_share").round(4))


# --- the last seconds before the stop ------------------------------------------------------------

# What the snapshot reads of each event: everything but the verbatim JSON (`extra`, `fields` are
# the largest columns by far, and their known metrics are already typed columns) and the
# ingest bookkeeping. `forensics events --since/--until` shows the raw objects.
SNAPSHOT_COLUMNS = [c for c in EVENT_SCHEMA if c not in ("extra", "fields", "format", "rank_source", "event_source", "local_rank")]
LAST_COLUMNS = [TS, "host", "event", "level", "message", "source_file", "line"]


@dataclass
class Snapshot:
    """What every rank was doing in the window before the stop (`last_window`).

    `ranks`: one row per rank asked for: rank, host, in_window (events in the window), shown
    (how many of them are in `events`), last_ts / last_event / last_level / last_message /
    last_where (file:line) of its last event at or before the stop, silent_s (stop - last_ts),
    step (the last step it logged by the stop), after_stop (events it logged after the stop).
    `events`: the window's events, the latest `limit` per rank, in time order.
    `quiet`: ranks with no events in the window; `missing`: ranks with no events at all;
    `untimed`: ranks none of whose events carry a time (their last event is their last line).
    """

    stop: dt.datetime
    how: str
    window_s: float
    start: dt.datetime
    ranks: pl.DataFrame
    events: pl.DataFrame
    quiet: list[int] = field(default_factory=list)
    missing: list[int] = field(default_factory=list)
    limit: int = 20
    untimed: list[int] = field(default_factory=list)

    def redacted(self) -> "Snapshot":
        """A copy with secrets in its log text masked (report/redact.py: the one policy)."""
        from dataclasses import replace

        from .report.redact import redact_frame

        return replace(self, ranks=redact_frame(self.ranks), events=redact_frame(self.events))

    def to_dict(self) -> dict[str, Any]:
        return {
            "stop": iso(self.stop), "how": self.how, "window_s": self.window_s, "start": iso(self.start),
            "events_per_rank_limit": self.limit,
            "quiet_ranks": self.quiet, "missing_ranks": self.missing, "untimed_ranks": self.untimed,
            "ranks": records(self.ranks), "events": records(self.events, drop_null_columns=True),
        }


ISO_FORMAT = "%Y-%m-%dT%H:%M:%S%.6fZ"


def iso(t: dt.datetime | None) -> str | None:
    """ISO-8601 UTC with Z, microseconds (the one time format of every machine-readable output)."""
    if t is None:
        return None
    return _utc(t).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def plain(df: pl.DataFrame, drop_null_columns: bool = False) -> pl.DataFrame:
    """A frame ready for JSON/CSV: datetimes as ISO-8601 Z strings, enums as strings, NaN/inf as
    null (JSON has no NaN), all-null columns dropped on request."""
    if drop_null_columns:
        df = df.select([c for c in df.columns if df[c].null_count() < df.height or c in ("timestamp", "rank")])
    return df.with_columns(
        cs.datetime().dt.convert_time_zone("UTC").dt.to_string(ISO_FORMAT),
        cs.by_dtype(pl.Enum, pl.Categorical).cast(pl.String),
        cs.float().replace([float("inf"), float("-inf")], None).fill_nan(None),
    )


def records(df: pl.DataFrame, drop_null_columns: bool = False) -> list[dict[str, Any]]:
    """The rows of a frame as JSON-ready dicts (see `plain`)."""
    return plain(df, drop_null_columns).to_dicts()


ORDER = "t_order"


def untimed_files(events: Events) -> list[str]:
    """The files that hold events without a time (a Flight Recorder dump's pg_status records,
    console lines without a time stamp)."""
    return (lazy(events).filter(pl.col(TS).is_null()).select(pl.col("source_file").unique())
            .collect().to_series().drop_nulls().sort().to_list())


def with_order_time(events: Events, files: list[str] | None = None) -> pl.LazyFrame:
    """The events with `t_order`, the time that places them: their timestamp, or for an event
    without one the time of the last line before it in its file that has one (a dump's
    pg_status records come after its entries, a traceback after the line that logged the error);
    null when no earlier line of the file has a time. Only `files` (default `untimed_files`) are
    filled; `timestamp` itself is never changed."""
    lf = lazy(events)
    files = untimed_files(events) if files is None else files
    if not files:
        return lf.with_columns(pl.col(TS).alias(ORDER))
    in_files = pl.col("source_file").is_in(files)
    return pl.concat([
        lf.filter(~in_files).with_columns(pl.col(TS).alias(ORDER)),
        lf.filter(in_files).with_columns(pl.col(TS).forward_fill().over("source_file", order_by="line").alias(ORDER)),
    ])


def last_window(events: Events, window_s: float = 10.0, at: dt.datetime | None = None,
                ranks: Iterable[int] | None = None, limit: int = 20) -> Snapshot:
    """The snapshot of the seed's question: what was every rank doing in the last `window_s`
    seconds before the stop (`stop_time`)?

    Events without a time are placed by their file's order (`with_order_time`); a rank whose
    events all lack a time gets its last line as its last event (silent_s unknown).

    Reads only what it needs: the window (pushdown on timestamp), and for ranks silent in the
    window their own last event and step (pushdown on rank).
    """
    asked = check_ranks(events, ranks)
    stop, how = stop_time(events, at)
    start = stop - dt.timedelta(seconds=window_s)
    lf = with_order_time(events)
    T = pl.col(ORDER)
    scope = lf if asked is None else lf.filter(pl.col("rank").is_in(asked))
    window = scope.filter(T.is_between(pl.lit(start), pl.lit(stop))).select(*SNAPSHOT_COLUMNS, ORDER)
    newest = pl.int_range(pl.len()).over("rank", order_by=[ORDER, "line"], descending=True)
    shown_q = window.filter(newest < max(limit, 1)).sort(ORDER, "rank", "line", nulls_last=True)
    counts_q = window.group_by("rank").agg(
        pl.len().cast(pl.Int64).alias("in_window"),
        pl.col("step").max().alias("w_step"),
    )
    after_q = scope.filter(T > pl.lit(stop)).group_by("rank").agg(pl.len().cast(pl.Int64).alias("after_stop"))
    shown, counts, after = pl.collect_all([shown_q, counts_q, after_q])
    last = shown.sort(ORDER, "line").group_by("rank", maintain_order=True).last().select("rank", *LAST_COLUMNS, ORDER)
    shown = shown.drop(ORDER)
    if limit < 1:
        shown = shown.clear()

    present = set(counts["rank"].drop_nulls().to_list())
    universe = asked if asked is not None else known_ranks(events, present)
    quiet = [r for r in universe if r not in present]
    # A rank's last event: the newest shown one when it logged in the window; otherwise found
    # in two cheap steps (its last time and step from three columns, then that one row).
    step_of = {r: s for r, s in zip(counts["rank"].to_list(), counts["w_step"].to_list()) if r is not None and s is not None}
    need_step = [r for r, s in zip(counts["rank"].to_list(), counts["w_step"].to_list()) if r is not None and s is None]
    untimed: list[int] = []
    if quiet or need_step:
        # quiet ranks logged nothing in [start, stop], so "before start" is "by the stop" for them
        back = (
            lf.filter(pl.col("rank").is_in([*quiet, *need_step]) & (T <= pl.lit(stop)))
            .filter(pl.col("rank").is_in(need_step) | (T < pl.lit(start)))
            .group_by("rank").agg(T.max(), pl.col("step").max())
            .collect()
        )
        step_of.update((r, s) for r, s in zip(back["rank"].to_list(), back["step"].to_list()) if s is not None)
        last_t = back.filter(pl.col("rank").is_in(quiet)).select("rank", ORDER)
        if last_t.height:
            found = (
                lf.filter(T.is_between(pl.lit(last_t[ORDER].min()), pl.lit(last_t[ORDER].max())))
                .filter(pl.col("rank").is_in(quiet))
                .select("rank", *LAST_COLUMNS, ORDER)
                .join(last_t.lazy(), on=["rank", ORDER], how="semi")
                .sort(ORDER, "line").group_by("rank", maintain_order=True).last()
                .collect()
            )
            last = pl.concat([last, found.select(last.columns)], how="vertical_relaxed")
        # a quiet rank none of whose events can be placed in time: its last line is its last event
        lost = [r for r in quiet if r not in set(last_t["rank"].to_list())]
        if lost:
            tail = (
                lf.filter(pl.col("rank").is_in(lost) & T.is_null())
                .select("rank", *LAST_COLUMNS, ORDER, "step")
                .sort("source_file", "line").group_by("rank", maintain_order=True)
                .agg(pl.all().last(), pl.col("step").max().alias("max_step"))
                .collect()
            )
            step_of.update((r, s) for r, s in zip(tail["rank"].to_list(), tail["max_step"].to_list()) if s is not None)
            untimed = sorted(tail["rank"].to_list())
            last = pl.concat([last, tail.select(last.columns)], how="vertical_relaxed")

    rows = _missing_rows(last.rename({c: f"last_{c}" for c in LAST_COLUMNS}), universe)
    table = (
        rows.join(counts.select("rank", "in_window"), on="rank", how="left", nulls_equal=True)
        .join(after, on="rank", how="left", nulls_equal=True)
        .join(shown.group_by("rank").agg(pl.len().cast(pl.Int64).alias("shown")), on="rank", how="left", nulls_equal=True)
        .with_columns(
            pl.col("in_window", "after_stop", "shown").fill_null(0),
            pl.col("rank").replace_strict(step_of, default=None, return_dtype=pl.Int64).alias("step"),
            # from the time that places the last event (its own, else its file's last before it)
            (_ms(pl.lit(stop, dtype=pl.Datetime("us", "UTC")) - pl.col(ORDER)) / 1000.0).alias("silent_s"),
            pl.concat_str(pl.col("last_source_file"), pl.lit(":"), pl.col("last_line").cast(pl.String)).alias("last_where"),
        )
        .rename({"last_timestamp": "last_ts", "last_host": "host"})
        .select("rank", "host", "in_window", "shown", "last_ts", "last_event", "last_level", "last_message",
                "last_where", "silent_s", "step", "after_stop")
        .sort("rank", nulls_last=True)
    )
    missing = table.filter(pl.col("last_where").is_null() & (pl.col("after_stop") == 0))["rank"].drop_nulls().to_list()
    return Snapshot(stop=stop, how=how, window_s=window_s, start=start, ranks=table, events=shown,
                    quiet=quiet, missing=missing, limit=limit, untimed=untimed)
