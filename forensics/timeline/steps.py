"""The step table: one row per (rank, step) with its times, phases (data load, compute,
communication, wait), per-step values (loss, lr ...) and, on request, the lines it rests on.

Owns `step_table`: a Run's table finished from its stored summary (`forensics.summaries`),
other events aggregated in slices of whole ranks. The aggregation itself, which the summaries
store too, is `timeline.steptable`'s (its names are re-exported here). It must not print, judge
the run, or rewrite `timestamp`.

Domain facts (seed 000, sections 4.2-4.5): a step's events share its `step` number on every
rank, so steps align across ranks by number; `wait_ms` is the part of `comm_ms` spent waiting
for the last rank to arrive.
"""
from __future__ import annotations

import polars as pl

from ..store import Run
from .inputs import TS, Events
from .steptable import (
    COMM_OP_EVENTS,
    EVIDENCE_COLUMNS,
    OP_EVENTS,
    PHASES,
    SLICE_EVENTS,
    STEP_COLUMNS,
    STEP_VALUES,
    _step_groups,
    collect_sorted,
    finish_collected,
    finish_group_states,
    finish_groups,
    group_rows,
    in_key_order,
    merge_group_states,
    rank_slices,
    ranked_mask,
    ranked_rows,
    step_group_exprs,
    step_rows,
)


def step_table(events: Events, time_col: str = TS, evidence: bool = False,
               slices: list[pl.LazyFrame] | None = None) -> pl.LazyFrame:
    """One row per (rank, step), sorted by step then rank (see `step_rows` for the columns; with
    `evidence`, also EVIDENCE_COLUMNS, `file` as a Categorical).

    `slices`: the events in slices of whole ranks (`rank_slices`, the default for a Run), read
    and aggregated one slice at a time: the same rows in a fraction of the memory. Given, they
    are what is read, not `events`. A Run without `slices` is read from its summary
    (`forensics.summaries.step_groups`), computed once."""
    if slices is None and isinstance(events, Run) and time_col == TS:
        from ..summaries import step_groups

        return finish_groups(step_groups(events).lazy(), evidence).sort("step", "rank")
    if slices is None and isinstance(events, Run):
        slices = rank_slices(events)
    return step_rows(events, time_col, evidence, slices).sort("step", "rank")


__all__ = [
    "COMM_OP_EVENTS", "EVIDENCE_COLUMNS", "OP_EVENTS", "PHASES", "SLICE_EVENTS", "STEP_COLUMNS", "STEP_VALUES",
    "_step_groups", "collect_sorted", "finish_collected", "finish_group_states", "finish_groups", "group_rows",
    "in_key_order", "merge_group_states", "rank_slices", "ranked_mask", "ranked_rows", "step_group_exprs",
    "step_rows", "step_table",
]
