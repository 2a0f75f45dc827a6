"""Per-rank timelines from the store: steps aligned across ranks, collective arrivals, rank
progress, the stop of a run and the last seconds before it, host clock offsets, time going
backwards.

One module per question; this package re-exports their public names, so callers keep writing
`from forensics import timeline` / `timeline.step_table(...)`:

- inputs.py: the events, their bounds, the ranks a run should have (`known_ranks`, `check_ranks`);
- timespec.py: times, durations and step ranges from the command line;
- steps.py: the per-(rank, step) table (`step_table`, `step_rows`, `rank_slices`);
- arrivals.py: who arrives last at each collective, and the `timeline` view (`build_timeline`);
- progress.py: how far each rank got, who went silent first;
- stoptime.py: when the run stopped;
- clocks.py: host clock offsets, the common clock, time going backwards;
- ranks.py: the `ranks` table (`rank_summary`);
- windows.py: the last seconds before the stop (`last_window`);
- records.py: the one machine-readable time format, JSON/CSV-ready frames.

Owns the reconstruction the post-mortem commands print and the diagnosis passes build on. Every
function takes the events (a `Run`, a LazyFrame over the store, or a DataFrame), scans lazily,
reads only the columns it needs and collects once. It must not print, read raw logs, or judge
what is wrong (that is `passes/`); it must never rewrite `timestamp`: derived times get new
names (`ts_aligned`, `arrival`, `t_start`).

Domain facts this package relies on (seed 000, sections 4.2-4.5):
- a step's events share its `step` number on every rank, so steps align across ranks by number;
- the end of a blocking collective (the ALLREDUCE event, logged when it returns) is the same
  instant on every rank, which is what lets us measure host clock offsets;
- a rank arrives at the collective when its local gradients are ready (`grad_ready_ts`), and
  `wait_ms` is the part of `comm_ms` spent waiting for the last rank to arrive;
- ranks are numbered 0..world_size-1, so a gap in the rank numbers is a rank that never logged.

Module constants (SLICE_EVENTS, FIRST_ERRORS_CHECKED ...) are read where they are defined:
patch them on their module (`timeline.steps`, `timeline.stoptime`), not on this package.
"""
from __future__ import annotations

from .arrivals import Timeline, arrivals, build_timeline
from .clocks import OFFSET_STEPS, align_steps, clock_key, clock_offsets, monotonicity, step_offsets, with_aligned_time
from .inputs import GAP_FILL_MAX, SUMMARY_EVENT, TS, UTC, Events, bounds, check_ranks, known_ranks, lazy
from .progress import SILENT_MIN_S, SILENT_STEPS, first_silent, rank_progress
from .ranks import RANK_SUMMARY_COLUMNS, rank_summary
from .records import ISO_FORMAT, iso, plain, records
from .steps import (COMM_OP_EVENTS, EVIDENCE_COLUMNS, OP_EVENTS, PHASES, SLICE_EVENTS, STEP_COLUMNS, STEP_VALUES,
                    collect_sorted, rank_slices, step_rows, step_table)
from .stoptime import FIRST_ERRORS_CHECKED, stop_time
from .timespec import clamp_window, parse_duration, parse_step_range, parse_time_range, parse_time_spec
from .windows import LAST_COLUMNS, ORDER, SNAPSHOT_COLUMNS, Snapshot, last_window, untimed_files, with_order_time

__all__ = [
    "Timeline", "arrivals", "build_timeline", "OFFSET_STEPS", "align_steps", "clock_key", "clock_offsets",
    "monotonicity", "step_offsets", "with_aligned_time", "GAP_FILL_MAX", "SUMMARY_EVENT", "TS", "UTC", "Events",
    "bounds", "check_ranks", "known_ranks", "lazy", "SILENT_MIN_S", "SILENT_STEPS", "first_silent", "rank_progress",
    "RANK_SUMMARY_COLUMNS", "rank_summary", "ISO_FORMAT", "iso", "plain", "records", "COMM_OP_EVENTS",
    "EVIDENCE_COLUMNS", "OP_EVENTS", "PHASES", "SLICE_EVENTS", "STEP_COLUMNS", "STEP_VALUES", "collect_sorted",
    "rank_slices", "step_rows", "step_table", "FIRST_ERRORS_CHECKED", "stop_time", "clamp_window", "parse_duration",
    "parse_step_range", "parse_time_range", "parse_time_spec", "LAST_COLUMNS", "ORDER", "SNAPSHOT_COLUMNS",
    "Snapshot", "last_window", "untimed_files", "with_order_time",
]
