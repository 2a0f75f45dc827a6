"""Per-rank timelines from the store: steps aligned across ranks, collective arrivals, rank
progress, the stop of a run and the last seconds before it, host clock offsets, time going
backwards.

One module per question; this package re-exports their public names, so callers keep writing
`from forensics import timeline` / `timeline.step_table(...)`:

- inputs.py: the events, their bounds, the ranks a run should have (`known_ranks`, `check_ranks`);
- timespec.py: times, durations and step ranges from the command line;
- steps.py: the per-(rank, step) table (`step_table`, finished from the store's summary);
- steptable.py: the (rank, step) aggregation the table and the summaries share (`step_rows`,
  `group_rows`, `rank_slices`, partial states and their merge);
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
patch them on their module (`timeline.steptable`, `timeline.stoptime`), not on this package.
"""
from __future__ import annotations

import importlib
from typing import Any

# Each name is imported from its module on first use (PEP 562): `last-10s` needs inputs,
# stoptime, windows and records, not the step table and arrival machinery (~0.1 s of imports).
_FROM = {
    "arrivals": ("Timeline", "arrivals", "build_timeline"),
    "clocks": ("OFFSET_STEPS", "align_steps", "clock_key", "clock_offsets", "monotonicity", "step_offsets",
               "with_aligned_time"),
    "inputs": ("GAP_FILL_MAX", "SUMMARY_EVENT", "TS", "UTC", "Events", "bounds", "check_ranks", "known_ranks", "lazy"),
    "progress": ("SILENT_MIN_S", "SILENT_STEPS", "first_silent", "rank_progress"),
    "ranks": ("RANK_SUMMARY_COLUMNS", "rank_summary"),
    "records": ("ISO_FORMAT", "iso", "plain", "records"),
    "steps": ("COMM_OP_EVENTS", "EVIDENCE_COLUMNS", "OP_EVENTS", "PHASES", "SLICE_EVENTS", "STEP_COLUMNS",
              "STEP_VALUES", "collect_sorted", "rank_slices", "step_rows", "step_table"),
    "steptable": (),   # steps' aggregation (its names are steps'): a submodule to patch
    "stoptime": ("FIRST_ERRORS_CHECKED", "stop_time"),
    "timespec": ("clamp_window", "parse_duration", "parse_step_range", "parse_time_range", "parse_time_spec"),
    "windows": ("LAST_COLUMNS", "ORDER", "SNAPSHOT_COLUMNS", "Snapshot", "last_window", "untimed_files",
                "with_order_time"),
}
_MODULE_OF = {name: mod for mod, names in _FROM.items() for name in names}


def __getattr__(name: str) -> Any:
    mod = _MODULE_OF.get(name)
    if mod is None:
        if name in _FROM:   # a submodule (`timeline.steps`), as after an eager import
            return importlib.import_module(f".{name}", __name__)
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f".{mod}", __name__)
    # all its names at once, later reads skip this function; and `arrivals` is the function,
    # not the submodule the import just set as an attribute of this package
    globals().update((n, getattr(module, n)) for n in _FROM[mod])
    return globals()[name]


def __dir__() -> list[str]:
    return sorted([*globals(), *_MODULE_OF])


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
