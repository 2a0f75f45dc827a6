"""Summaries of a store, written at ingest: the per-(rank, step) groups, the per-rank table, the
ERROR events and the files with untimed events.

Owns computing them from the events, writing them under STORE/summaries/ and reading them
back. Every diagnosis, `ranks`, `timeline` and `last-10s` starts from these tables; rebuilding them from
the events costs one scan of every part (seconds on a 4,096-rank store), reading them costs
milliseconds.

- `step_groups`: one row per (rank, step) of the events, a null rank or step included (the
  groups of `timeline.steps._step_groups` with the evidence columns and the per-rank counts):
  times, phases, waits, metrics, the lines to cite. What needs the whole run (derived step
  times, `complete`, wait estimates, clock alignment) is done when the table is read
  (`timeline.steps.finish_groups`, `passes.context`), never stored.
- `rank_table`: one row per rank: events, errors, warnings, first/last seen, host (the first
  logged) and every host, median gpu_util, max temp_c, min sm_clock_mhz, last step, whether its
  rows are in line and time order.
- `errors`: the ERROR events (time, rank, event, file, line): what the stop of the run is
  judged from; `untimed`: the files holding events without a time; `layout`: the events that
  may state the parallel layout (`topology.candidates`: rank, extra, fields, message).

A summary file is named by a key over the store's event parts (`Run.event_parts()`: part names
are unique per write) and SUMMARY_VERSION, so a changed store or a changed summary definition
never reads a stale file. Files are written atomically (temp file, then rename); a store that
cannot be written (read-only) gets its summaries computed in memory. Must not: judge the run,
print, or write anything in the store but its own files under summaries/.
"""
from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path
from typing import Callable

import polars as pl

from .store import Run

# Raise when the stored columns or their meaning change: older files are then never read.
SUMMARY_VERSION = 1
SUMMARIES_DIR = "summaries"
STEPS = "steps"
RANKS = "ranks"
ERRORS = "errors"
UNTIMED = "untimed"
LAYOUT = "layout"

# The per-rank table's columns, in order (what the report's per-rank rows and `ranks` need).
RANK_COLUMNS = ("rank", "events", "errors", "warnings", "first_seen", "last_seen", "host", "hosts", "gpu_util",
                "temp_c_max", "sm_clock_mhz_min", "last_step", "in_order")
# The ERROR events, as `timeline.stoptime` reads them to find the stop.
ERROR_COLUMNS = ("timestamp", "rank", "event", "source_file", "line")


def key(run: Run) -> str:
    """The summaries' key: the store's event parts (their names are unique per write) and the
    summary version."""
    h = hashlib.blake2b(digest_size=10)
    h.update(f"summary {SUMMARY_VERSION}\n".encode())
    # names relative to the store (a moved or copied store keeps its summaries); event_parts()
    # joins them to the store's path, so cutting the prefix is exact (and 100x cheaper than
    # relpath on 4,096 parts)
    cut = len(str(run.path / "x")) - 1
    h.update("\n".join(p[cut:] for p in run.event_parts()).encode())
    return h.hexdigest()


def path_of(run: Run, name: str) -> Path:
    return run.path / SUMMARIES_DIR / f"{name}-{key(run)}.parquet"


def rank_rows(events: pl.LazyFrame) -> pl.LazyFrame:
    """The per-rank table of `events` (RANK_COLUMNS), sorted by rank, unranked events last. One
    group_by over nine narrow columns. `in_order`: the rank's rows, as stored, have both line and
    time increasing (`timeline.monotonicity`'s fast path: only the others are checked)."""
    return (
        events.select("rank", "host", "level", "timestamp", "line", "step", "gpu_util", "temp_c", "sm_clock_mhz")
        .group_by("rank")
        .agg(
            pl.len().alias("events"),
            (pl.col("level") == "ERROR").sum().alias("errors"),
            (pl.col("level") == "WARN").sum().alias("warnings"),
            pl.col("timestamp").min().alias("first_seen"),
            pl.col("timestamp").max().alias("last_seen"),
            pl.col("host").drop_nulls().first().alias("host"),
            pl.col("host").drop_nulls().unique().sort().alias("hosts"),
            pl.col("gpu_util").median().alias("gpu_util"),
            pl.col("temp_c").max().alias("temp_c_max"),
            pl.col("sm_clock_mhz").min().alias("sm_clock_mhz_min"),
            pl.col("step").max().alias("last_step"),
            ((pl.col("line").diff().min() > 0) & (pl.col("timestamp").diff().min() >= pl.duration(microseconds=0)))
            .fill_null(True).alias("in_order"),
        )
        .sort("rank", nulls_last=True)
        .select(RANK_COLUMNS)
    )


# Events per slice when a summary is built: each slice is collected alone (a lazy concat of
# the slices runs them all at once), so the build's peak is about one slice's columns.
BUILD_SLICE_EVENTS = 250_000


def _by_slice(run: Run, query: Callable[[pl.LazyFrame], pl.LazyFrame]) -> pl.DataFrame | None:
    """`query` over each slice of whole ranks (`Run.rank_slices`) and over the unranked events,
    each collected in turn, concatenated; None when one slice holds every ranked event."""
    slices = run.rank_slices(BUILD_SLICE_EVENTS)
    if not slices:
        return None
    slices.append(run.events().filter(pl.col("rank").is_null()))
    return pl.concat([query(s).collect() for s in slices], rechunk=False)


def compute_step_groups(run: Run) -> pl.DataFrame:
    """The (rank, step) groups of every event of `run`, read one slice of whole ranks at a time
    (`timeline.rank_slices`), sorted by (rank, step), nulls last."""
    from .timeline.steps import group_rows

    df = _by_slice(run, lambda s: group_rows(s))
    return (group_rows(run).collect() if df is None else df).sort("rank", "step", nulls_last=True)


def compute_rank_table(run: Run) -> pl.DataFrame:
    """One rank is in one slice (and every row of it in `events()` order): per-slice tables
    concatenated are the whole run's."""
    df = _by_slice(run, rank_rows)
    return rank_rows(run.events()).collect() if df is None else df.sort("rank", nulls_last=True)


def _rare(run: Run) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The ERROR events (ERROR_COLUMNS, in no particular order) and the files holding events
    without a time (`source_file`, sorted): both from one scan, as both are few."""
    rare = (run.events().filter((pl.col("level") == "ERROR") | pl.col("timestamp").is_null())
            .select(*ERROR_COLUMNS, "level").collect())
    return (rare.filter(pl.col("level") == "ERROR").select(ERROR_COLUMNS),
            rare.filter(pl.col("timestamp").is_null()).select(pl.col("source_file").unique())
            .drop_nulls().sort("source_file"))


def compute_errors(run: Run) -> pl.DataFrame:
    return _rare(run)[0]


def compute_untimed(run: Run) -> pl.DataFrame:
    return _rare(run)[1]


def compute_layout(run: Run) -> pl.DataFrame:
    """The events that may state the run's parallel layout (`topology.candidates`), in order."""
    from .topology import candidates

    return candidates(run.events()).collect()


def _read(p: Path, columns: list[str] | None = None) -> pl.DataFrame | None:
    try:
        return pl.read_parquet(p, columns=columns)
    except (OSError, pl.exceptions.PolarsError):
        return None   # missing, or cut short by a crash of another writer: computed again


def _write(run: Run, name: str, df: pl.DataFrame) -> bool:
    """Write a summary atomically; False when the store cannot be written (it is computed in
    memory then, each time). Files of other keys (an earlier version of the store) are removed."""
    target = path_of(run, name)
    tmp = target.parent / f".{target.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        target.parent.mkdir(exist_ok=True)
        df.write_parquet(tmp, statistics=True)
        os.replace(tmp, target)
    except OSError:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        return False
    for old in target.parent.glob(f"{name}-*.parquet"):
        if old.name != target.name:
            try:
                old.unlink()
            except OSError:
                pass
    return True


def _load(run: Run, name: str, compute: Callable[[Run], pl.DataFrame],
          columns: list[str] | None = None) -> pl.DataFrame:
    """The summary `name` of the run (only `columns`, when given): read, else computed and
    written."""
    p = path_of(run, name)
    if p.is_file():
        df = _read(p, columns)
        if df is not None:
            return df
    df = compute(run)
    if run.event_parts() and writable(run):
        _write(run, name, df)
    return df.select(columns) if columns is not None else df


def writable(run: Run) -> bool:
    """Whether summaries may be written into the store: its directory is writable and
    FORENSICS_SUMMARIES is not "0" (reference stores, read-only media)."""
    return os.environ.get("FORENSICS_SUMMARIES", "1") != "0" and os.access(run.path, os.W_OK)


def step_groups(run: Run, columns: list[str] | None = None) -> pl.DataFrame:
    """The (rank, step) groups of the run (see the module docstring), only `columns` when
    given: read from the store's summary, or computed (and written, when the store is
    writable)."""
    return _load(run, STEPS, compute_step_groups, columns)


def rank_table(run: Run) -> pl.DataFrame:
    """The per-rank table of the run (RANK_COLUMNS): read from the store's summary, or computed
    (and written, when the store is writable)."""
    return _load(run, RANKS, compute_rank_table)


def errors(run: Run) -> pl.DataFrame:
    """The run's ERROR events (ERROR_COLUMNS): from the store's summary, or computed."""
    return _load(run, ERRORS, compute_errors)


def untimed(run: Run) -> list[str]:
    """The files of the run that hold events without a time: from the store's summary, or
    computed."""
    return _load(run, UNTIMED, compute_untimed).get_column("source_file").to_list()


def layout(run: Run) -> pl.DataFrame:
    """The events of the run that may state its parallel layout: from the store's summary, or
    computed."""
    return _load(run, LAYOUT, compute_layout)


COMPUTE: dict[str, Callable[[Run], pl.DataFrame]] = {
    STEPS: compute_step_groups, RANKS: compute_rank_table, ERRORS: compute_errors, UNTIMED: compute_untimed,
    LAYOUT: compute_layout,
}


def carry(previous: Run | None, staging: Path) -> None:
    """Hard-link the summaries of the store's previous version into the next one being assembled
    in `staging` (before it is committed): a re-ingest that keeps every part keeps its summaries
    (same key), one that changes them gets another key, and the stale files are removed when the
    new ones are written. Summaries are never changed in place, so a link is safe."""
    src = previous.path / SUMMARIES_DIR if previous is not None else None
    if src is None or not src.is_dir():
        return
    dst = staging / SUMMARIES_DIR
    try:
        dst.mkdir(exist_ok=True)
        for f in src.glob("*.parquet"):
            os.link(f, dst / f.name)
    except OSError:
        pass   # then they are computed again after the commit


def build(run: Run) -> None:
    """Compute and write both summaries (the end of an ingest); existing ones of the same key
    are kept."""
    if not run.event_parts() or not writable(run):
        return
    todo = [name for name in COMPUTE if not path_of(run, name).is_file()]
    if ERRORS in todo or UNTIMED in todo:
        rare = dict(zip((ERRORS, UNTIMED), _rare(run)))
        for name in (ERRORS, UNTIMED):
            if name in todo:
                _write(run, name, rare[name])
        todo = [n for n in todo if n not in rare]
    for name in todo:
        _write(run, name, COMPUTE[name](run))


__all__ = ["SUMMARY_VERSION", "RANK_COLUMNS", "ERROR_COLUMNS", "build", "carry", "step_groups", "rank_table",
           "rank_rows", "errors", "untimed", "layout", "key"]
