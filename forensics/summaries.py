"""Summaries of a store, written at ingest: the per-(rank, step) groups, the per-rank table, the
ERROR events, the files with untimed events and the events that may be failures.

Owns computing them from the events, writing them under STORE/summaries/ and reading them
back. At ingest they are not computed from the committed events: each ingest unit writes the
partial summaries of its own part (`Partial`, summaries/parts/), and the commit merges them
(`assemble`); `build` (after the commit) only fills in what is missing. Every diagnosis, `ranks`, `timeline` and `last-10s` starts from these tables; rebuilding them from
the events costs one scan of every part (seconds on a 4,096-rank store), reading them costs
milliseconds.

- `step_groups`: one row per (rank, step) of the events, a null rank or step included (the
  groups of `timeline.steptable._step_groups` with the evidence columns and the per-rank counts):
  times, phases, waits, metrics, the lines to cite. Stored as a folder of Parquet files in
  rank order (the parts' step groups, linked: `_assemble_steps`). What needs the whole run
  (derived step times, `complete`, wait estimates, clock alignment) is done when the table is
  read (`timeline.steptable.finish_groups`, `passes.context`), never stored.
- `rank_table`: one row per rank: events, errors, warnings, first/last seen, host (the first
  logged) and every host, median gpu_util, max temp_c, min sm_clock_mhz, last step, whether its
  rows are in line and time order.
- `errors`: the ERROR events (time, rank, event, file, line): what the stop of the run is
  judged from; `untimed`: the files holding events without a time; `layout`: the events that
  may state the parallel layout (`topology.candidates`: rank, extra, fields, message);
  `failures`: the events that may be failures (`failure_rows.rows`: WARN/ERROR lines and events
  named so), what `passes.failures` classifies. A table of its own, not more columns of `errors`:
  it holds the WARN lines and the text (message, extra), `errors` is read by every `timeline`
  and `last-10s`, which need neither.

A summary file is named by a key over the store's event parts (`Run.event_parts()`: part names
are unique per write) and SUMMARY_VERSION, so a changed store or a changed summary definition
never reads a stale file. Files are written atomically (temp file, then rename); a store that
cannot be written (read-only) gets its summaries computed in memory. Must not: judge the run,
print, or write anything in the store but its own files under summaries/.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import uuid
from pathlib import Path
from typing import Any, Callable

import polars as pl

from . import failure_rows
from ._lazy import lazy
from .store import COMPRESSION, Run

pa = lazy("pyarrow")   # the writing side's: reading a summary needs no pyarrow (~0.25 s to import)

# Raise when the stored columns or their meaning change (`failure_rows`' test and columns
# included): older files are then never read.
SUMMARY_VERSION = 5
SUMMARIES_DIR = "summaries"
STEPS = "steps"
RANKS = "ranks"
ERRORS = "errors"
UNTIMED = "untimed"
LAYOUT = "layout"
FAILURES = "failures"

# The per-rank table's columns, in order (what the report's per-rank rows and `ranks` need).
RANK_COLUMNS = ("rank", "events", "errors", "warnings", "first_seen", "last_seen", "host", "hosts", "gpu_util",
                "temp_c_max", "sm_clock_mhz_min", "last_step", "in_order")
# The ERROR events, as `timeline.stoptime` reads them to find the stop.
ERROR_COLUMNS = ("timestamp", "rank", "event", "source_file", "line")


def key(run: Run) -> str:
    """The summaries' key: the store's event parts (their names are unique per write) and the
    summary version."""
    # names relative to the store (a moved or copied store keeps its summaries); event_parts()
    # joins them to the store's path, so cutting the prefix is exact (and 100x cheaper than
    # relpath on 4,096 parts)
    cut = len(str(run.path / "x")) - 1
    return key_of([p[cut:] for p in run.event_parts()])


def key_of(rels: list[str]) -> str:
    """`key` of a store whose event parts are `rels` (relative to the store, sorted)."""
    h = hashlib.blake2b(digest_size=10)
    h.update(f"summary {SUMMARY_VERSION}\n".encode())
    h.update("\n".join(rels).encode())
    return h.hexdigest()


def path_of(run: Run, name: str) -> Path:
    """Where the summary `name` of the run is: a Parquet file; for STEPS a folder (`_assemble_steps`)."""
    return _path_at(run.path / SUMMARIES_DIR, name, key(run))


def _path_at(d: Path, name: str, k: str) -> Path:
    return d / (f"{name}-{k}" if name == STEPS else f"{name}-{k}.parquet")


_RANK_INPUT = ("rank", "host", "level", "timestamp", "line", "step", "gpu_util", "temp_c", "sm_clock_mhz")


def _rank_aggs() -> list[pl.Expr]:
    """The per-rank aggregations but the median gpu_util (which does not merge: `_gpu_state`)."""
    return [
        pl.len().alias("events"),
        (pl.col("level") == "ERROR").sum().alias("errors"),
        (pl.col("level") == "WARN").sum().alias("warnings"),
        pl.col("timestamp").min().alias("first_seen"),
        pl.col("timestamp").max().alias("last_seen"),
        pl.col("host").drop_nulls().first().alias("host"),
        pl.col("host").drop_nulls().unique().sort().alias("hosts"),
        pl.col("temp_c").max().alias("temp_c_max"),
        pl.col("sm_clock_mhz").min().alias("sm_clock_mhz_min"),
        pl.col("step").max().alias("last_step"),
        # false iff two adjacent rows (both known) go back in line or in time
        ((pl.col("line").diff().min() > 0) & (pl.col("timestamp").diff().min() >= pl.duration(microseconds=0)))
        .fill_null(True).alias("in_order"),
    ]


def rank_rows(events: pl.LazyFrame) -> pl.LazyFrame:
    """The per-rank table of `events` (RANK_COLUMNS), sorted by rank, unranked events last. One
    group_by over nine narrow columns. `in_order`: the rank's rows, as stored, have both line and
    time increasing (`timeline.monotonicity`'s fast path: only the others are checked)."""
    return (
        events.select(*_RANK_INPUT)
        .group_by("rank")
        .agg(*_rank_aggs(), pl.col("gpu_util").median().alias("gpu_util"))
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
    from .timeline.steptable import group_rows

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


def compute_failures(run: Run) -> pl.DataFrame:
    """The events that may be failures (`failure_rows.rows`), in order."""
    return failure_rows.rows(run.events()).collect()


def _scan(p: Path) -> pl.LazyFrame:
    """The stored summary at `p`: a Parquet file, or the STEPS folder: its files in rank order,
    their step groups columns (the state columns after them are for merges: `_write_groups`)."""
    if p.is_dir():
        return pl.scan_parquet(sorted(p.glob("*.parquet"))).select(_step_columns()[1])
    return pl.scan_parquet(p)


def _read(p: Path, columns: list[str] | None = None) -> pl.DataFrame | None:
    try:
        # a scan's projection decodes the columns asked for in parallel: 0.45 s instead of read_parquet's
        # 0.75 s for the 64-rank bench store's 1.8 M (rank, step) groups, the same frame
        lf = _scan(p)
        return (lf.select(columns) if columns is not None else lf).collect()
    except (OSError, pl.exceptions.PolarsError):
        return None   # missing, or cut short by a crash of another writer: computed again


def _write(run: Run, name: str, df: pl.DataFrame) -> bool:
    """Write a summary atomically; False when the store cannot be written (it is computed in
    memory then, each time). Files of other keys (an earlier version of the store) are removed."""
    return _write_at(path_of(run, name), name, df)


def _write_at(target: Path, name: str, df: pl.DataFrame) -> bool:
    """`_write` to `target`."""
    try:
        target.parent.mkdir(exist_ok=True)
        _replace_with(target, lambda tmp: df.write_parquet(tmp, statistics=True))
    except OSError:
        return False
    _remove_others(target, name)
    return True


def _replace_with(target: Path, write: Callable[[Path], Any]) -> None:
    """Write `target` atomically: `write` writes a temp file beside it, which then replaces it
    (readers see the old file or the new one, never a part of one)."""
    tmp = target.parent / f".{target.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        write(tmp)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise


def _load(run: Run, name: str, compute: Callable[[Run], pl.DataFrame],
          columns: list[str] | None = None) -> pl.DataFrame:
    """The summary `name` of the run (only `columns`, when given): read, else computed and
    written (STEPS: from the parts' partials, `_build_steps`)."""
    p = path_of(run, name)
    if p.exists():
        df = _read(p, columns)
        if df is not None:
            return df
    store = bool(run.event_parts()) and writable(run)
    if name == STEPS and store and _build_steps(run):
        df = _read(p, columns)
        if df is not None:
            return df
    df = compute(run)
    if store and name != STEPS:
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


# columns of the STEPS summary decoded together by `ranked_step_groups`
READ_BATCH = 4


def ranked_step_groups(run: Run, columns: list[str]) -> pl.DataFrame:
    """`step_groups(run, columns)`, only the groups with a rank and a step, in one chunk per column
    (`timeline.steptable.ranked_rows`: what the step table is finished from). The stored summary is
    decoded a few columns at a time, each batch's rows copied into one chunk before the next is
    decoded: the decoded chunks (one per row group) of every column and their copy are never in
    memory together, and the next batch's chunks reuse the last one's memory. Memory the process
    touches for the first time costs a page fault each 4 KB: on the 64-rank bench store (1.8 M
    groups) ~150k -> ~100k faults, the same CPU."""
    from .timeline.steptable import ranked_mask, ranked_rows

    p = path_of(run, STEPS)
    if p.is_dir():
        try:
            lf = _scan(p)
            keep = ranked_mask(lf.select("rank", "step").collect())
            batches = [columns[i:i + READ_BATCH] for i in range(0, len(columns), READ_BATCH)]
            take = _ranked_taker(keep, ranked_rows)
            return pl.DataFrame([c for b in batches for c in take(lf.select(b).collect()).get_columns()])
        except (OSError, pl.exceptions.PolarsError):
            pass    # missing, or damaged: read or computed again, as step_groups does
    return ranked_rows(step_groups(run, list(dict.fromkeys([*columns, "rank", "step"])))).select(columns)


# Above this many runs of ranked rows, a batch's rows are taken by one filter, not run by run
RUN_SLICES_MAX = 256


def _ranked_taker(keep: Any, ranked_rows: Callable[..., pl.DataFrame]) -> Callable[[pl.DataFrame], pl.DataFrame]:
    """`ranked_rows(df, keep)` for every batch of columns, the way chosen once: a summary has an
    unstepped row per rank, so as many runs of ranked rows as ranks. A few runs are sliced and
    concatenated (each column copied once); thousands (4,096 ranks: 4,096 slices per batch, 0.14
    of the step table's 0.26 CPU s) are taken by one filter and a rechunk (0.04 s)."""
    import numpy as np

    runs = int(np.count_nonzero(np.diff(keep.astype(np.int8)) == 1)) + int(bool(len(keep)) and bool(keep[0]))
    if runs <= RUN_SLICES_MAX:
        return lambda df: ranked_rows(df, keep)
    mask = pl.Series(keep)
    return lambda df: df.filter(mask).rechunk()


def scan_step_groups(run: Run) -> pl.LazyFrame:
    """`step_groups` as a LazyFrame over the stored summary, so that a filter on rank (the
    files are sorted by rank) reads only the row groups whose statistics can match; the table read
    or computed (`step_groups`) when the summary is missing or damaged."""
    p = path_of(run, STEPS)
    if p.is_dir():
        try:
            lf = _scan(p)
            for f in p.glob("*.parquet"):   # readable footers: not cut short (a full disk, a damaged copy)
                pl.read_parquet_schema(f)
            return lf
        except (OSError, pl.exceptions.PolarsError):
            pass
    return step_groups(run).lazy()


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


def failures(run: Run) -> pl.DataFrame:
    """The events of the run that may be failures (`failure_rows.COLUMNS`), in order: from the
    store's summary, or computed."""
    return _load(run, FAILURES, compute_failures)


COMPUTE: dict[str, Callable[[Run], pl.DataFrame]] = {
    STEPS: compute_step_groups, RANKS: compute_rank_table, ERRORS: compute_errors, UNTIMED: compute_untimed,
    LAYOUT: compute_layout, FAILURES: compute_failures,
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
        entries = list(src.iterdir())
    except OSError:
        return   # then they are computed again after the commit
    for f in entries:
        if f.name.startswith(".") or f.name == PARTS_DIR:   # a crashed writer's temp files; partials: `assemble`
            continue
        try:
            if f.is_dir():   # STEPS: a folder, carried whole or not at all
                _publish_dir(dst / f.name, functools.partial(_link_all, f))
            else:
                os.link(f, dst / f.name)
        except OSError:
            pass   # computed again


def build(run: Run) -> None:
    """Compute and write the summaries missing from a committed store (the end of an ingest: a
    no-op when `assemble` wrote them); existing ones of the same key are kept."""
    if not run.event_parts() or not writable(run):
        return
    todo = [name for name in COMPUTE if not path_of(run, name).exists()]
    if STEPS in todo:
        _build_steps(run)
        todo.remove(STEPS)
    if ERRORS in todo or UNTIMED in todo:
        rare = dict(zip((ERRORS, UNTIMED), _rare(run)))
        for name in (ERRORS, UNTIMED):
            if name in todo:
                _write(run, name, rare[name])
        todo = [n for n in todo if n not in rare]
    for name in todo:
        _write(run, name, COMPUTE[name](run))


# --- partial summaries: built by each ingest unit, merged at commit ----------------------------
#
# Each events part gets the summaries of its own rows, as aggregation *states* (what merges),
# written by the unit that wrote the part: `Partial` is fed every sorted chunk the part writer
# writes (`store.PartWriter(on_write=...)`) from the rows the unit holds in memory, and writes
# summaries/parts/<part>.<name>.arrow beside the part; the (rank, step) states go to
# <part>.steps.parquet with the step groups they finish into (`_write_groups`). The commit
# (`assemble`) links those files into the STEPS summary when the parts hold disjoint rank ranges,
# and otherwise merges the partials of the new version's parts in the order `Run.events()` reads
# them (sorted part paths):
# a (rank, step) or a rank cut between parts (a big file read in 64 MB ranges, a rank's files in
# different units) merges by min / max / sum / count / first / last in that order, which is what
# one scan of the events gives (float sums of a merged group up to rounding). A kept part keeps
# its partials (linked from the previous version); a part without them (compacted or rewritten
# at commit, an older store) gets them from its rows.
PARTS_DIR = "parts"
GPU = "gpu"                       # (rank, gpu_util, n): the per-rank median merges from counts
PARTIALS = (STEPS, RANKS, GPU, ERRORS, UNTIMED, LAYOUT, FAILURES)
# the event columns the partials read of every row: the wide text ones only the layout's
# (`_layout_rows`); FAILURES' others only of its rows (`_failure_rows`)
_LAYOUT_INPUT = ("rank", "extra", "fields", "message")
_NARROW_INPUT = ["rank", "step", "host", "timestamp", "event", "level", "line", "source_file", "loss", "lr",
                 "samples_per_s", "stage", "step_time_ms", "data_load_ms", "comm_ms", "wait_ms", "duration_s",
                 "compute_ms", "fwd_ms", "bwd_ms", "grad_ready_ts", "disk_read_mbps", "temp_c", "gpu_util",
                 "sm_clock_mhz"]
_PARTIAL_INPUT = list(dict.fromkeys([*_NARROW_INPUT, *_LAYOUT_INPUT[1:], *failure_rows.COLUMNS]))


def enabled() -> bool:
    """Whether an ingest writes summaries (FORENSICS_SUMMARIES is not "0")."""
    return os.environ.get("FORENSICS_SUMMARIES", "1") != "0"


def partial_path(root: str | os.PathLike[str], part: str, name: str) -> Path:
    """Where the partial `name` of the events part `part` (its path, absolute or relative to the
    store `root`) lives."""
    # the (rank, step) states with their step groups are Parquet: linked as they are into the
    # STEPS summary (`_assemble_steps`)
    suffix = "parquet" if name == STEPS else "arrow"
    return Path(root) / SUMMARIES_DIR / PARTS_DIR / f"{Path(part).stem}.{name}.{suffix}"


def _legacy_states(root: str | os.PathLike[str], part: str) -> Path:
    """Where a store of SUMMARY_VERSION 1 or 2 kept a part's (rank, step) states (Arrow IPC, and
    its step groups apart, or none): what its STEPS partial is made from (`_write_part_groups`)."""
    return partial_path(root, part, STEPS).with_suffix(".arrow")


def _rank_state(lf: pl.LazyFrame) -> pl.LazyFrame:
    """The per-rank aggregation state: `_rank_aggs` and the first / last row's line and time
    (whether the rank stays in order across a cut)."""
    return lf.select(*_RANK_INPUT).group_by("rank").agg(
        *_rank_aggs(),
        pl.col("line").first().alias("line_first"), pl.col("line").last().alias("line_last"),
        pl.col("timestamp").first().alias("ts_first"), pl.col("timestamp").last().alias("ts_last"))


def _merge_rank_states(states: pl.LazyFrame) -> pl.LazyFrame:
    """Per-rank states of consecutive slices (in event order) merged into the whole's."""
    schema = states.collect_schema()
    prev = lambda c: pl.col(c).shift(1).over("rank")  # noqa: E731
    # the pair of rows across each cut: in order unless both are known and go back
    across = ((pl.col("line_first") - prev("line_last") > 0)
              & (pl.col("ts_first") - prev("ts_last") >= pl.duration(microseconds=0))).fill_null(True)
    first, last = (lambda c: pl.col(c).first()), (lambda c: pl.col(c).last())  # noqa: E731
    merges = {
        "events": pl.col("events").sum(), "errors": pl.col("errors").sum(), "warnings": pl.col("warnings").sum(),
        "first_seen": pl.col("first_seen").min(), "last_seen": pl.col("last_seen").max(),
        "host": pl.col("host").first(ignore_nulls=True),
        "hosts": pl.col("hosts").list.explode(keep_nulls=False, empty_as_null=False).unique().sort(),
        "temp_c_max": pl.col("temp_c_max").max(), "sm_clock_mhz_min": pl.col("sm_clock_mhz_min").min(),
        "last_step": pl.col("last_step").max(), "in_order": pl.col("in_order").all(),
        "line_first": first("line_first"), "line_last": last("line_last"),
        "ts_first": first("ts_first"), "ts_last": last("ts_last"),
    }
    return (states.with_columns(pl.col("in_order") & across).group_by("rank")
            .agg(*(merges[c].alias(c) for c in schema.names() if c != "rank")).cast(dict(schema)))


def _gpu_state(lf: pl.LazyFrame) -> pl.LazyFrame:
    return lf.filter(pl.col("gpu_util").is_not_null()).group_by("rank", "gpu_util").agg(pl.len().alias("n"))


def _partials_of(df: pl.DataFrame, text: pl.DataFrame) -> list[pl.LazyFrame]:
    """The PARTIALS of some events, in that order (states, or rows for the few-row tables);
    `text`: their _LAYOUT_INPUT columns, `df` the others."""
    from .topology import candidates

    lf = df.lazy()
    return [
        _step_state(df),
        _rank_state(lf),
        _gpu_state(lf),
        lf.filter(pl.col("level") == "ERROR").select(ERROR_COLUMNS),
        lf.filter(pl.col("timestamp").is_null()).select(pl.col("source_file").unique()),
        candidates(_layout_rows(text).lazy()),
    ]


def _failure_rows(t: pa.Table | pl.DataFrame, narrow: pl.DataFrame) -> pl.DataFrame:
    """The FAILURES partial of the events `t` (`narrow`: their _NARROW_INPUT columns, typed):
    `failure_rows.test` on the narrow columns, with the chunk's distinct event names, and only
    the rows it keeps (a few in a thousand) taken from `t` and converted."""
    names = failure_rows.named(narrow.get_column("event").unique().to_list())
    keep = narrow.select(failure_rows.test(names)).to_series()
    cols = list(failure_rows.COLUMNS)
    rows = t.select(cols).filter(keep) if isinstance(t, pl.DataFrame) else pl.from_arrow(
        t.select(cols).filter(keep.to_arrow()))
    assert isinstance(rows, pl.DataFrame)
    return _typed(rows)


def _layout_rows(df: pl.DataFrame) -> pl.DataFrame:
    """The rows `topology.candidates` may keep, and a few more: those whose extra, fields or
    message hold one of its literal hints (`_layout_hint`). `candidates` tests its regexes on every row it is
    given (a regex after the literal test in one filter still runs on every row): given these
    only, it costs a fraction. Its text is extra + " " + fields, and no EVENT_HINTS holds a space,
    so a hint in that text is in one of the two."""
    return df.lazy().select(_LAYOUT_INPUT).filter(_layout_hint()).collect(engine="in-memory")


@functools.cache
def _layout_hint() -> pl.Expr:
    """`_layout_rows`' test. A hint is looked for by its last six characters (wherever a hint is,
    they are): a dozen literals are one fast SIMD search, the 39 hints an automaton at a third of
    the speed ("tensor_size_mb", "peer_rank" do not match). In extra, '"stage"' counts only where
    `candidates`' stage pattern ('"stage"\\s*:\\s*"?\\d') can go on from it: there or at the end of
    extra (its text goes on in fields). Else every TRAIN_STEP's '"stage":"warmup"' passed (1 row
    in 6 of the bench, to regexes costing as much as this test)."""
    import re

    from .topology import EVENT_HINTS, TEXT_HINTS

    stage = '"stage"'
    ends = sorted({h[-6:] for h in EVENT_HINTS if h != stage})
    keys = "|".join(re.escape(h) for h in ends)
    in_extra = pl.col("extra").str.contains(rf'{keys}|{re.escape(stage)}\s*(?::\s*"?)?(?:\d|$)')
    return (in_extra.fill_null(False)
            | pl.col("fields").str.contains(f"{keys}|{re.escape(stage)}").fill_null(False)
            | pl.col("message").str.contains_any(TEXT_HINTS).fill_null(False))


def _merge(name: str, frames: list[pl.DataFrame]) -> pl.DataFrame:
    """The partials `name` of consecutive slices of the events, in event order, as one."""
    if len(frames) == 1 and name not in (UNTIMED,):
        return frames[0]
    if name in (STEPS, RANKS, GPU):
        return _merge_by_rank(name, frames)
    df = pl.concat(frames, rechunk=False)
    if name == UNTIMED:
        return df.unique()
    return df   # ERRORS, LAYOUT, FAILURES: rows in event order


def _merge_by_rank(name: str, frames: list[pl.DataFrame]) -> pl.DataFrame:
    """Only the rows whose key is found in more than one frame are merged (a group_by): the
    (rank, step) groups for STEPS (a rank cut between chunks shares the one step at the cut,
    not its thousands of others: merging them all cost 5 of the 10 s of the 64-rank store's
    states), the rank otherwise. The others (most: parts hold disjoint rank ranges) are
    concatenated as they are."""
    from .timeline.steptable import merge_group_states

    keys = ["rank", "step"] if name == STEPS else ["rank"]
    # a frame's keys are unique but for GPU's (rank, gpu_util) rows
    seen = pl.concat([f.select(keys).unique() for f in frames], rechunk=False)
    shared = seen.filter(pl.struct(keys).is_duplicated()).unique()
    df = pl.concat(frames, rechunk=False)
    if not shared.height:
        return df
    # in the frames' order (merges take the first / last value in event order)
    todo = df.join(shared, on=keys, how="semi", nulls_equal=True, maintain_order="left").lazy()
    if name == STEPS:
        merged = merge_group_states(todo).collect()
    elif name == RANKS:
        merged = _merge_rank_states(todo).collect()
    else:
        merged = todo.group_by("rank", "gpu_util").agg(pl.col("n").sum()).collect()
    rest = df.join(shared, on=keys, how="anti", nulls_equal=True, maintain_order="left")
    return pl.concat([rest, merged.select(df.columns)], rechunk=False)


def _finish(name: str, df: pl.DataFrame, gpu: pl.DataFrame | None = None) -> pl.DataFrame:
    """A merged partial as the summary table `build` writes."""
    if name == RANKS:
        assert gpu is not None
        med = (gpu.select("rank", pl.col("gpu_util").repeat_by("n")).explode("gpu_util")
               .group_by("rank").agg(pl.col("gpu_util").median()))
        return (df.join(med, on="rank", how="left", nulls_equal=True)
                .sort("rank", nulls_last=True).select(RANK_COLUMNS))
    if name == UNTIMED:
        return df.drop_nulls().sort("source_file")
    return df


# --- the (rank, step) state of one chunk at ingest ---------------------------------------------
#
# `_step_groups(..., evidence=True, per_rank=True, state=True)` -- its expressions
# (`timeline.steptable.step_group_exprs`), so bit-equal states (tests/test_summaries.py compares
# them) -- but with the event kinds made once per distinct name and given as columns:
# `_step_groups` upper-cases every row's name three times and looks it up in three lists, a third
# of its cost on the 64-rank bench. The expressions are built once (building them per chunk cost
# as much as a small chunk's aggregation).
_STEP_EXPRS: tuple[pl.Expr, list[pl.Expr], list[pl.Expr]] | None = None


def _event_flags(df: pl.DataFrame) -> pl.DataFrame:
    """Per row: is the event the step summary (`_sum`), a per-op compute event (`_op`), a per-op
    communication event (`_cop`) -- `timeline.steptable`' tests on a null event's "" included."""
    import numpy as np
    import pyarrow.compute as pc

    from .timeline.inputs import SUMMARY_EVENT
    from .timeline.steptable import COMM_OP_EVENTS, OP_EVENTS

    enc = pc.dictionary_encode(df.get_column("event").to_arrow(), null_encoding="encode")
    if isinstance(enc, pa.ChunkedArray):
        enc = enc.combine_chunks()
    names = [x or "" for x in enc.dictionary.to_pylist()]   # a null event is "" (fill_null(""))
    idx = enc.indices   # from its buffer: converting Arrow arrays to numpy imports pandas
    codes = np.frombuffer(idx.buffers()[1], dtype=np.int32, count=len(idx), offset=idx.offset * 4)
    up = [x.upper() for x in names]

    def flag(keep: Callable[[int], bool]) -> pl.Series:
        return pl.Series(np.fromiter((keep(i) for i in range(len(names))), dtype=bool, count=len(names))[codes])

    return pl.DataFrame({"_sum": flag(lambda i: names[i] == SUMMARY_EVENT), "_op": flag(lambda i: up[i] in OP_EVENTS),
                         "_cop": flag(lambda i: up[i] in COMM_OP_EVENTS)})


def _step_exprs() -> tuple[pl.Expr, list[pl.Expr], list[pl.Expr]]:
    """`timeline.steptable.step_group_exprs` of `_step_groups(..., evidence=True, per_rank=True,
    state=True)` on the flag columns of `_event_flags`, but for the step line in the cited file
    (`_train_line_in_file`: a filter inside each group, polars' slow path, was 0.05 of the 0.09 CPU
    s of a 33,564-row chunk's aggregation on the 32-rank bench): a plain min, and the least and
    greatest code of the groups' files (`_FILE_CODE`) to tell the groups where it is that from
    those where it is not (`_step_state`). Built once per process (units' threads may both
    build them: one assignment, so either's is taken whole)."""
    global _STEP_EXPRS
    if _STEP_EXPRS is None:
        from .timeline.steptable import step_group_exprs

        comm, inputs, aggs = step_group_exprs((pl.col("_sum"), pl.col("_op"), pl.col("_cop")), pl.col("timestamp"),
                                              pl.col("grad_ready_ts"), evidence=True, per_rank=True, state=True,
                                              train_line=pl.col("train_line").min())
        aggs = [*aggs, pl.col(_FILE_CODE).min().alias(_FILE_LO), pl.col(_FILE_CODE).max().alias(_FILE_HI)]
        _STEP_EXPRS = comm, [*inputs, _FILE_CODE], aggs
    return _STEP_EXPRS


# a row's source file as a number (-1: none), and its least and greatest in a (rank, step) group
_FILE_CODE, _FILE_LO, _FILE_HI = "_file_code", "_file_lo", "_file_hi"


def _step_state(df: pl.DataFrame) -> pl.LazyFrame:
    """The (rank, step) aggregation state of some events: `_step_groups(df, TS, evidence=True,
    per_rank=True, state=True)`. In the order the groups first appear (`write` sorts them): on a
    chunk of one part (tens of thousands of rows, few ranks) the ordered group_by costs ~30% less
    CPU than the unordered one's hash partitions (measured on the 64-rank bench's chunks).

    The step line of a group in the file it cites (its first row's) is its least step line where
    all its rows come from one file (almost every group: a rank's steps are in its own file), null
    where none names one, and `_train_line_in_file` computed for the other groups alone."""
    comm, inputs, aggs = _step_exprs()
    rows = (pl.concat([df, _event_flags(df), _file_codes(df)], how="horizontal").lazy().with_columns(comm)
            .select(inputs).collect(engine="in-memory"))
    g = rows.lazy().group_by("rank", "step", maintain_order=True).agg(aggs).collect(engine="in-memory")
    lo, hi = pl.col(_FILE_LO), pl.col(_FILE_HI)
    one = pl.when(lo >= 0).then(pl.col("train_line"))   # one file (-1: no file: null, as the filter gives)
    mixed = g.filter(lo != hi).select("rank", "step")
    if mixed.height:
        from .timeline.steptable import _train_line_in_file

        exact = (rows.join(mixed, on=["rank", "step"], how="semi", nulls_equal=True, maintain_order="left")
                 .group_by("rank", "step").agg(_train_line_in_file().alias("_exact")))
        g = g.join(exact, on=["rank", "step"], how="left", nulls_equal=True, maintain_order="left")
        one = pl.when(lo == hi).then(one).otherwise(pl.col("_exact"))
    return g.with_columns(one.alias("train_line")).drop(_FILE_LO, _FILE_HI, "_exact", strict=False).lazy()


def _file_codes(df: pl.DataFrame) -> pl.DataFrame:
    """Per row: its source file's index among the chunk's distinct files (-1: none)."""
    import pyarrow.compute as pc

    enc = pc.dictionary_encode(df.get_column("source_file").to_arrow())
    if isinstance(enc, pa.ChunkedArray):
        enc = enc.combine_chunks()
    codes = pl.from_arrow(enc.indices)
    assert isinstance(codes, pl.Series)
    return pl.DataFrame({_FILE_CODE: codes.cast(pl.Int32).fill_null(-1)})


def _typed(df: pl.DataFrame) -> pl.DataFrame:
    """`df` with the columns the store types otherwise (a reader's null column) cast to its type."""
    from .schema import EVENT_SCHEMA

    wrong = {c: EVENT_SCHEMA[c] for c, d in df.schema.items() if d != EVENT_SCHEMA[c]}
    return df.cast(wrong) if wrong else df  # type: ignore[arg-type]


def _rank_span(df: pl.DataFrame) -> tuple[float, float]:
    """The (rank, step) states' first and last rank in the summary's order (a null rank last)."""
    r = df.get_column("rank")
    lo, hi = r.min(), r.max()
    inf = float("inf")
    return (lo if lo is not None else inf), (inf if r.null_count() or hi is None else hi)  # type: ignore[return-value]


@functools.cache
def _step_columns() -> tuple[pl.Schema, list[str], list[str]]:
    """The (rank, step) state's schema (`_step_state`'s, as `timeline.steptable._step_groups` gives it:
    no pyarrow needed to read a summary), the step groups' columns it finishes into
    (`timeline.steptable.finish_group_states`) and the state's columns those lack."""
    from .schema import EVENT_SCHEMA
    from .timeline.inputs import TS
    from .timeline.steptable import _step_groups, finish_group_states

    events = pl.LazyFrame(schema={c: EVENT_SCHEMA[c] for c in _NARROW_INPUT})
    state = _step_groups(events, TS, evidence=True, per_rank=True, state=True)
    groups = finish_group_states(state, evidence=True).collect_schema().names()
    schema = state.collect_schema()
    return schema, groups, [c for c in schema.names() if c not in groups]


# step groups columns whose values differ from group to group: a step's number, times, lines, loss
_UNIQUE = frozenset({"step", "t_start", "t_end", "comm_end", "grad_ready_ts", "train_line", "data_line", "comm_line",
                     "ready_line", "loss"})
# ... the integer ones (times in us) go up from group to group: stored as Parquet deltas (a chunk's
# steps file 337 -> 272 KB, the same CPU to write and read: 36,614 rows of the 490 MB bench)
_DELTAS = ("step", "t_start", "t_end", "comm_end", "train_line", "data_line", "comm_line", "ready_line")


def _write_groups(path: Path, states: pl.DataFrame, writer: Any = None) -> Any:
    """Append the step groups of `states` (sorted (rank, step) states of whole groups), and after
    them the state's own columns (what merges read back: `_read_states`), to the Parquet file
    `path` (`writer`: its open writer, or None to start it); returns the writer. One file for both:
    an Arrow IPC file of the states beside it cost ~1/5 of the partials' CPU (zstd), and a
    mostly null state column costs next to nothing in Parquet. The groups as the STEPS summary
    reads them: the parts' codec (store.COMPRESSION: LZ4 wrote the 32-rank bench's four files in
    0.16 CPU s instead of zstd's 0.19-0.21, read as fast, 9.0 MB instead of 6.7) and dictionaries
    (without, -0.29 CPU s at ingest, +0.17 s at every diagnose of the 64-rank store) but on the
    columns of a value per group (_UNIQUE: there a dictionary only costs, the 64-rank store's
    STEPS summary read in 0.37 CPU s instead of 0.44-0.49, 58 MB instead of 89), deltas on its
    integer columns (_DELTAS); statistics only on what readers filter on (rank, step, times)."""
    import pyarrow.parquet as pq

    from .timeline.steptable import finish_group_states

    _, groups, own = _step_columns()
    g = finish_group_states(states.lazy(), evidence=True).collect(engine="in-memory")
    t = pl.concat([g, states.select(own)], how="horizontal").to_arrow()
    if writer is None:
        writer = pq.ParquetWriter(path, t.schema, compression=COMPRESSION,
                                  use_dictionary=[c for c in groups if c not in _UNIQUE],
                                  column_encoding=dict.fromkeys(_DELTAS, "DELTA_BINARY_PACKED"),
                                  write_statistics=["rank", "step", "t_start", "t_end"])
    writer.write_table(t.cast(writer.schema))
    return writer


def _read_states(path: Path) -> pl.DataFrame:
    """The (rank, step) states of a STEPS partial (`_write_groups`)."""
    schema = _step_columns()[0]
    return pl.read_parquet(path, columns=schema.names()).cast(dict(schema))


class Partial:
    """The partial summaries of the events part `part` (its path) of the store being assembled in
    `root`, fed its rows chunk by chunk in the part's order (`store.PartWriter(on_write=
    partial.add)`), written beside the part by `write` (`abort`: nothing is).

    The (rank, step) states, the big one (a row per group), are not held to the end while the
    chunks come in rank order (a part written streaming: the usual case): the states of the
    ranks before a chunk's first rank are final, and go to the partial's temp file as they come
    (-70 MB peak RSS on the 4,096-rank bench), with the step groups they finish into (what the
    STEPS summary links when no other part holds the same ranks: `_write_groups`). A chunk that
    goes back in rank (a part sorted in runs) reads the states back: held and merged, as the
    other partials are."""

    def __init__(self, root: str | os.PathLike[str], part: str, steps_only: bool = False) -> None:
        self.root, self.part = root, part
        self._steps_only = steps_only     # only the (rank, step) states (`of_part`)
        self._chunks: dict[str, list[pl.DataFrame]] = {n: [] for n in PARTIALS}
        self._held_last = float("-inf")   # the last rank of the held states
        # the temp file of the states and their step groups (its Parquet writer), once written to
        self._out: Any = None
        self._out_last = float("-inf")    # ... and the last rank in it
        self._streaming = True            # no chunk went back in rank order yet
        target = partial_path(root, part, STEPS)
        self._tmp = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex[:8]}"

    def add(self, t: pa.Table | pl.DataFrame) -> None:
        # a part writer's table is the reader's blocks (one or more per file: hundreds for small
        # files): joined in Arrow first, converting costs 1/4 of converting the chunks (measured on
        # 4,096-rank files), and aggregating one contiguous chunk less than many. The wide text
        # columns, only searched for the layout's hints, are converted as they are (joining them
        # copied every row's text)
        df = t.select(_NARROW_INPUT).rechunk() if isinstance(t, pl.DataFrame) else pl.from_arrow(
            t.select(_NARROW_INPUT).combine_chunks())
        assert isinstance(df, pl.DataFrame)
        df = _typed(df)
        if self._steps_only:
            self._add([_step_state(df).collect(engine="in-memory")])
            return
        text = t.select(_LAYOUT_INPUT) if isinstance(t, pl.DataFrame) else pl.from_arrow(t.select(list(_LAYOUT_INPUT)))
        assert isinstance(text, pl.DataFrame)
        # one chunk (tens of thousands of rows): the in-memory engine costs ~1/3 less CPU than the
        # streaming one here (measured on the 64-rank bench's chunks)
        frames = pl.collect_all(_partials_of(df, _typed(text)), engine="in-memory")
        frames.append(_failure_rows(t, df))
        del df, text
        self._add(frames)

    def _add(self, frames: list[pl.DataFrame]) -> None:
        """Hold the partials of a chunk (PARTIALS, in that order: the first only, `steps_only`)."""
        first, last = _rank_span(frames[0])
        if self._out is not None and first <= self._out_last:
            # back in rank order: the states written out are held again, and so are the rest
            self._close()
            self._chunks[STEPS].insert(0, _read_states(self._tmp))
            self._tmp.unlink()
            self._streaming = False
        elif self._streaming and self._chunks[STEPS] and first > self._held_last:
            # (held to 16,384 states and written as one row group: same CPU, +45 MB peak RSS on
            # the 490 MB bench)
            self._write_steps()
        for name, frame in zip(PARTIALS, frames):
            self._chunks[name].append(frame)
        self._held_last = max(self._held_last, last)
        # several chunks' states of one part: merged as they come, so few are held
        if len(self._chunks[STEPS]) >= 16:
            for name in PARTIALS:
                if self._chunks[name]:
                    self._chunks[name] = [_merge(name, self._chunks[name])]

    def _write_steps(self) -> None:
        """The held (rank, step) states, merged, in the summary's order, with the step groups they
        finish into, to the temp file (`_write_groups`)."""
        df = _merge(STEPS, self._chunks[STEPS]).sort("rank", "step", nulls_last=True)
        self._chunks[STEPS] = []
        if self._out is None:
            self._tmp.parent.mkdir(parents=True, exist_ok=True)
        self._out = _write_groups(self._tmp, df, self._out)
        self._out_last = self._held_last

    def _close(self) -> None:
        if self._out is not None:
            self._out.close()
        self._out = None

    def write(self) -> None:
        """Write the part's partials (atomically: temp file, then rename)."""
        if self._chunks[STEPS]:
            self._write_steps()
        if self._out is not None:   # the (rank, step) states and their groups, written as they came
            self._close()
            os.replace(self._tmp, partial_path(self.root, self.part, STEPS))
        for name in PARTIALS:
            if not self._chunks[name]:
                continue
            target = partial_path(self.root, self.part, name)
            target.parent.mkdir(parents=True, exist_ok=True)
            _write_partial(target, _merge(name, self._chunks[name]))
        self._chunks = {n: [] for n in PARTIALS}

    def abort(self) -> None:
        """Remove the temp file (the part is not written)."""
        self._close()
        self._tmp.unlink(missing_ok=True)

    @classmethod
    def of_part(cls, root: str | os.PathLike[str], part: str, steps_only: bool = False) -> "Partial":
        """The partials of a written part (its path relative to `root`), from its rows (one row
        group at a time). `steps_only`: the (rank, step) states alone, from the narrow columns (a
        store whose other partials are good: written before the states were Parquet)."""
        import pyarrow.parquet as pq

        out = cls(root, part, steps_only)
        f = pq.ParquetFile(str(Path(root) / part))
        for i in range(f.num_row_groups):
            out.add(f.read_row_group(i, columns=list(_NARROW_INPUT if steps_only else _PARTIAL_INPUT)))
        return out


def assemble(root: Path, parts: list[dict[str, Any]], previous: Run | None) -> None:
    """The summaries of the store version being assembled in `root` (its staging folder) whose
    part table is `parts`, from the partials of its events parts: the new parts' (written by the
    ingest units), the kept parts' (linked from `previous`), and for any other part (merged by
    compaction, rewritten) computed from its rows. Partials of parts not in the table are removed.
    Summaries of the same key carried from `previous` (`carry`) are kept as they are."""
    events = sorted((p for p in parts if p["kind"] == "events"), key=lambda p: p["path"])
    rels = [p["path"] for p in events]
    pdir = root / SUMMARIES_DIR / PARTS_DIR
    if not rels:
        return
    for rel in rels:
        if all(partial_path(root, rel, n).is_file() for n in PARTIALS):
            continue
        if previous is None or not _link_kept(previous.path, root, rel):
            Partial.of_part(root, rel).write()
    stems = {Path(rel).stem for rel in rels}
    for f in pdir.iterdir():
        if f.name.split(".", 1)[0] not in stems:
            f.unlink()
    k = key_of(rels)
    d = root / SUMMARIES_DIR
    todo = [n for n in COMPUTE if not _path_at(d, n, k).exists()]
    if not todo:
        return
    if STEPS in todo:
        _assemble_steps(root, events, _path_at(d, STEPS, k))
        todo.remove(STEPS)
    merged: dict[str, pl.DataFrame] = {}
    for name in (GPU, *todo) if RANKS in todo else todo:
        merged[name] = _merge(name, [pl.read_ipc(partial_path(root, rel, name)) for rel in rels])
    for name in todo:
        _write_at(_path_at(d, name, k), name, _finish(name, merged.pop(name), merged.get(GPU)))


def _link_kept(prev: Path, root: Path, rel: str) -> bool:
    """Link the partials of the kept part `rel` from the store version at `prev` into the one
    being assembled in `root`; False when some are missing. A store of SUMMARY_VERSION 1 or 2 kept
    the (rank, step) states apart (`_legacy_states`): the STEPS partial is made from them. A store
    written before the FAILURES partials gets them from the part's rows (16 columns, not the 28 of
    `Partial.of_part`)."""
    old = {n: partial_path(prev, rel, n) for n in PARTIALS}
    if not all(p.is_file() for n, p in old.items() if n not in (STEPS, FAILURES)):
        return False
    legacy = _legacy_states(prev, rel)
    if not (old[STEPS].is_file() or legacy.is_file()):
        return False
    pdir = root / SUMMARIES_DIR / PARTS_DIR
    pdir.mkdir(parents=True, exist_ok=True)
    for p in old.values():
        if p.is_file() and not (pdir / p.name).exists():
            os.link(p, pdir / p.name)
    if not partial_path(root, rel, STEPS).is_file():
        _write_part_groups(root, rel, pl.read_ipc(legacy))
    if not partial_path(root, rel, FAILURES).is_file():
        _write_partial(partial_path(root, rel, FAILURES), failure_rows.rows(pl.scan_parquet(root / rel)).collect())
    return True


def _assemble_steps(root: Path, parts: list[dict[str, Any]], target: Path) -> None:
    """The STEPS summary folder `target` of the events parts `parts` (part-table rows, in path
    order), from their partials. When the parts hold disjoint rank ranges (the usual layout: each
    part's groups are sorted by (rank, step)) the step groups files the units wrote, linked in
    rank order: nothing is read or written here. Else one file of the parts' states merged.
    Published whole (`_publish_dir`)."""
    # the part table's rank span and rows without a rank (unknown: counted as some, then merged)
    spans = [(p["rank_min"], p["rank_max"], p.get("unranked", 1) > 0, p["path"]) for p in parts]
    ranked = sorted((s for s in spans if s[0] is not None), key=lambda s: s[0])
    unranked = [s for s in spans if s[0] is None]
    disjoint = all(a[1] < b[0] for a, b in zip(ranked, ranked[1:]))
    # rows without a rank sort last: only the last part in rank order may hold them
    order = ranked + unranked

    def fill(tmp: Path) -> None:
        if disjoint and len(unranked) <= 1 and not any(s[2] for s in order[:-1]):
            for i, s in enumerate(order):
                _link(partial_path(root, s[3], STEPS), tmp / f"{i:06d}.parquet")
        else:
            states = [_read_states(partial_path(root, p["path"], STEPS)) for p in parts]
            _write_groups(tmp / f"{0:06d}.parquet", _merge(STEPS, states).sort("rank", "step", nulls_last=True)).close()

    _publish_dir(target, fill)
    _remove_others(target, STEPS)


def _publish_dir(target: Path, fill: Callable[[Path], Any]) -> None:
    """Make the folder `target` whole or not at all: `fill` fills a temp folder beside it, which
    then replaces it (a damaged one, `_build_steps`) by a rename. Readers see the old folder, the
    new one, or none; never a part of one."""
    tmp = target.parent / f".{target.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    try:
        fill(tmp)
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _link_all(src: Path, dst: Path) -> None:
    """Hard-link every file of the folder `src` into the folder `dst`."""
    for f in src.iterdir():
        os.link(f, dst / f.name)


def _link(src: Path, dst: Path) -> None:
    """A hard link (summaries are never changed in place), or a copy where the file system has none."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def _remove_others(target: Path, name: str) -> None:
    """Remove the summaries `name` of other keys (earlier versions of the store) beside `target`."""
    for old in target.parent.glob(f"{name}-*"):
        if old.name == target.name:
            continue
        try:
            shutil.rmtree(old) if old.is_dir() else old.unlink()
        except OSError:
            pass


def _write_partial(target: Path, df: pl.DataFrame) -> None:
    """A partial other than STEPS (`_write_part_groups`): Arrow IPC, zstd, written atomically."""
    _replace_with(target, lambda tmp: df.write_ipc(tmp, compression="zstd"))


def _write_part_groups(root: Path, rel: str, states: pl.DataFrame) -> None:
    """The STEPS partial of the part `rel` from its (rank, step) states."""
    _replace_with(partial_path(root, rel, STEPS), lambda tmp: _write_groups(tmp, states).close())


def _build_steps(run: Run) -> bool:
    """Write the STEPS summary of a committed store from its parts' partials: a part's STEPS
    partial missing (a store of SUMMARY_VERSION 1 or 2) or unreadable is made from its states
    kept apart (`_legacy_states`), or, those missing too, computed from its rows (the states
    alone when its other partials are there). False when the store cannot be written."""
    root = run.path
    events = sorted((p for p in run.parts if p["kind"] == "events"), key=lambda p: p["path"])
    try:
        for p in events:
            rel = p["path"]
            try:
                pl.read_parquet_schema(partial_path(root, rel, STEPS))
                continue
            except (OSError, pl.exceptions.PolarsError):
                pass
            try:
                states = pl.read_ipc(_legacy_states(root, rel))
            except (OSError, pl.exceptions.PolarsError):
                others = all(partial_path(root, rel, n).is_file() for n in PARTIALS if n != STEPS)
                Partial.of_part(root, rel, steps_only=others).write()
                continue
            _write_part_groups(root, rel, states)
        _assemble_steps(root, events, path_of(run, STEPS))
    except OSError:
        return False
    return True


__all__ = ["SUMMARY_VERSION", "RANK_COLUMNS", "ERROR_COLUMNS", "build", "carry", "step_groups", "rank_table",
           "rank_rows", "errors", "untimed", "layout", "failures", "key", "Partial", "assemble", "enabled"]
