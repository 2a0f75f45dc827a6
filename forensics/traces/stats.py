"""What a set of profiler traces says, per rank and per profiler step: `trace_stats(paths)`.

Owns the analyses HolisticTraceAnalysis (HTA) users rely on, computed on the GPU-activity
tables of reader.py with HTA's definitions (hta/analyzers/breakdown_analysis.py,
communication_analysis.py), and the late arrivals at communication kernels. Must not parse
trace files (reader.py) nor print (the CLI renders).

Definitions (HTA's, taken as facts):
- Temporal breakdown: span = end of the last GPU activity - start of the first; the busy time is
  the union of all activities' intervals over every stream; idle = span - busy; compute = the
  union of the compute kernels' intervals; non-compute = span - compute - idle.
- Idle-time causes, per stream over kernels, memcpys and memsets (not syncs): each gap before
  an activity (its start - the previous activity's end on that stream) is host wait when the
  runtime call that launched it started after the previous activity ended (the CPU had not
  enqueued it yet), kernel wait when not and the gap is under 30 (HTA's
  consecutive_kernel_delay, in the trace's microseconds), other otherwise. Summed over
  streams, so the causes can exceed the span.
- Overlap = time where a communication and a compute kernel both run (unions of each)
  / the communication kernels' union time.
- Whole-trace rows follow HTA's window: with two or more profiler steps in a rank's trace, only
  activities launched before the last step starts count (the last step is often cut short);
  per-step rows take the activities launched inside each step.

Late arrivals (the straggler question): an NCCL kernel on a rank starts when that rank enqueued
the collective and spins until every peer has arrived, so the k-th kernel of a collective on
every rank is the same collective, and the rank that starts it last is the one the others
waited for. Start times are compared on the traces' clocks (epoch); clocks of different hosts
may differ by their skew (stated with the result).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

import polars as pl

from ..errors import BAD_ARGUMENT, ForensicsError
from ..schema import KERNEL_SCHEMA as _EMPTY_K, KERNEL_STORE_SCHEMA
from .reader import IDLE_CATS, TraceInfo, iter_kernel_batches, read_trace

KERNEL_WAIT_NS = 30_000      # HTA consecutive_kernel_delay = 30 (trace time units: µs)
TOP_N = 10
# A rank is called late when it starts last at >= half of the matched communication kernels
# (at least 3) and by a median >= 100 µs after the median rank: below that, launch jitter.
LATE_SHARE = 0.5
LATE_MIN_KERNELS = 3
LATE_MIN_NS = 100_000


@dataclass
class TraceStats:
    traces: list[TraceInfo]
    breakdown: pl.DataFrame          # per rank (step null: HTA's whole-trace window) and per (rank, step)
    top_kernels: pl.DataFrame        # per rank, the kernels taking the most GPU time
    arrivals: pl.DataFrame           # per matched communication kernel: who started first / last
    late: pl.DataFrame               # per rank: how often and by how much it arrived last
    straggler: dict[str, Any] | None = None   # the rank the others waited for, when one stands out
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "traces": [t.__dict__ for t in self.traces],
            "breakdown": self.breakdown.to_dicts(),
            "top_kernels": self.top_kernels.to_dicts(),
            "arrivals": self.arrivals.to_dicts(),
            "late": self.late.to_dicts(),
            "straggler": self.straggler,
            "notes": self.notes,
        }


def trace_files(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Trace files named by paths (a folder: its *.json / *.json.gz / *.json.zst, recursively)."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(q for q in p.rglob("*") if q.is_file() and any(
                q.name.endswith(s) for s in (".json", ".json.gz", ".json.zst", ".json.zstd")))
        elif p.is_file():
            out.append(p)
        else:
            raise ForensicsError(f"no such file or folder: {p}", code=BAD_ARGUMENT)
    if not out:
        raise ForensicsError("no trace files found", where=", ".join(map(str, paths)),
                             help="name Kineto trace files (*.pt.trace.json[.gz]) or folders holding them",
                             code=BAD_ARGUMENT)
    return out


def load(paths: Iterable[str | os.PathLike[str]]) -> tuple[pl.DataFrame, pl.DataFrame, list[TraceInfo]]:
    """All GPU activities and profiler steps of the traces, in one frame (notebooks; trace_stats
    itself holds one trace at a time)."""
    frames = [_file_frames(f) for f in trace_files(paths)]
    if not frames:
        return pl.DataFrame(schema=_EMPTY_K), pl.DataFrame(schema=_EMPTY_S), []
    return (pl.concat([f[0] for f in frames], how="vertical_relaxed"),
            pl.concat([f[1] for f in frames], how="vertical_relaxed"), [f[2] for f in frames])


def load_store(path: str | os.PathLike[str], kernels: bool = True) -> tuple[pl.DataFrame, pl.DataFrame, list[TraceInfo]]:
    """The same from a store: its kernels table and the steps its PROFILE_SUMMARY events keep."""
    import orjson

    from ..store import open_store

    run = open_store(path)
    k = (run.kernels().collect() if kernels else pl.DataFrame(schema=KERNEL_STORE_SCHEMA)).rename({"source_file": "file"})
    summ = (run.events().filter(pl.col("event") == "PROFILE_SUMMARY")
            .select("rank", "rank_source", "timestamp", "extra", "source_file").collect())
    infos, steps = [], []
    for r in summ.iter_rows(named=True):
        x = orjson.loads(r["extra"] or "{}")
        infos.append(TraceInfo(path=r["source_file"], rank=r["rank"], rank_source=str(r["rank_source"]),
                               world_size=x.get("world_size"), backend=x.get("backend"),
                               absolute=r["timestamp"] is not None, trace_name=x.get("trace_name"),
                               device_name=x.get("device_name"), gpu_activities=x.get("gpu_activities") or 0))
        steps += [{"rank": r["rank"], **s, "file": r["source_file"]} for s in x.get("profiler_steps") or []
                  if isinstance(s, dict)]
    st = pl.DataFrame(steps, schema={"rank": pl.Int32, "step": pl.Int32, "start_ns": pl.Int64, "dur_ns": pl.Int64,
                                     "line": pl.Int64, "file": pl.String})
    return k, st, infos


_EMPTY_S = {"rank": pl.Int32, "step": pl.Int32, "start_ns": pl.Int64, "dur_ns": pl.Int64, "line": pl.Int64}


def _union_ns(df: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Per group: the total length of the union of [start, start + dur) intervals."""
    if df.is_empty():
        return pl.DataFrame(schema={**{c: df.schema[c] for c in by}, "union_ns": pl.Int64})
    # in start order, each interval adds what reaches past the furthest end before it (all of
    # [its start, that end] is covered already): one pass, no group per block of overlaps
    new_part = (pl.col("end_ns") - pl.max_horizontal("start_ns", pl.col("_prev").fill_null(pl.col("start_ns"))))
    return (
        df.select(*by, "start_ns", (pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns"))
        .sort([*by, "start_ns"])
        .with_columns(pl.col("end_ns").cum_max().shift(1).over(by).alias("_prev"))
        .group_by(by).agg(new_part.clip(lower_bound=0).sum().alias("union_ns"))
    )


def _breakdown(k: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Temporal breakdown, idle causes and overlap per group of activities."""
    span = k.group_by(by).agg(
        pl.len().alias("kernels"),
        (pl.col("start_ns") + pl.col("dur_ns")).max().sub(pl.col("start_ns").min()).alias("span_ns"),
        pl.col("dur_ns").filter(pl.col("category") == "communication").sum().alias("comm_kernel_ns"),
    )
    busy = _union_ns(k, by).rename({"union_ns": "busy_ns"})
    comp = _union_ns(k.filter(pl.col("category") == "compute"), by).rename({"union_ns": "compute_ns"})
    comm = _union_ns(k.filter(pl.col("category") == "communication"), by).rename({"union_ns": "comm_ns"})
    both = _union_ns(k.filter(pl.col("category").is_in(["compute", "communication"])), by).rename({"union_ns": "cc_ns"})
    causes = _idle_causes(k, by)
    out = span
    for t in (busy, comp, comm, both, causes):
        out = out.join(t, on=by, how="left", nulls_equal=True)
    z = lambda c: pl.col(c).fill_null(0)  # noqa: E731
    out = out.with_columns(
        (pl.col("span_ns") - z("busy_ns")).alias("idle_ns"),
        z("compute_ns").alias("compute_ns"),
        z("comm_ns").alias("comm_ns"),
        (z("compute_ns") + z("comm_ns") - z("cc_ns")).alias("overlap_ns"),
    ).with_columns((pl.col("span_ns") - pl.col("compute_ns") - pl.col("idle_ns")).alias("non_compute_ns"))
    pct = lambda a, b: pl.when(pl.col(b) > 0).then(100 * pl.col(a) / pl.col(b)).otherwise(None)  # noqa: E731
    us = lambda c: (pl.col(c) / 1000).alias(c.replace("_ns", "_us"))  # noqa: E731
    return out.select(
        *by, "kernels",
        us("span_ns"), us("compute_ns"), us("non_compute_ns"), us("idle_ns"),
        pct("compute_ns", "span_ns").alias("compute_pct"),
        pct("non_compute_ns", "span_ns").alias("non_compute_pct"),
        pct("idle_ns", "span_ns").alias("idle_pct"),
        us("host_wait_ns"), us("kernel_wait_ns"), us("other_wait_ns"),
        us("comm_ns"), us("overlap_ns"),
        pct("overlap_ns", "comm_ns").alias("overlap_pct"),
    ).sort(by, nulls_last=False)


def _idle_causes(k: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    g = [*by, "stream"]
    gaps = (
        k.filter(pl.col("cat").is_in(list(IDLE_CATS)))
        .sort([*g, "start_ns"])
        .with_columns((pl.col("start_ns") + pl.col("dur_ns")).shift(1).over(g).alias("_prev_end"))
        .filter(pl.col("_prev_end").is_not_null())
        .with_columns((pl.col("start_ns") - pl.col("_prev_end")).alias("_gap"),
                      (pl.col("launch_ns") > pl.col("_prev_end")).fill_null(False).alias("_host"))
    )
    return gaps.group_by(by).agg(
        pl.col("_gap").filter(pl.col("_host")).sum().alias("host_wait_ns"),
        pl.col("_gap").filter(~pl.col("_host") & (pl.col("_gap") < KERNEL_WAIT_NS)).sum().alias("kernel_wait_ns"),
        pl.col("_gap").filter(~pl.col("_host") & (pl.col("_gap") >= KERNEL_WAIT_NS)).sum().alias("other_wait_ns"),
    )


def _hta_window(k: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """The activities HTA's whole-trace numbers count (see the module docstring)."""
    last = steps.group_by("rank").agg(pl.len().alias("_n"), pl.col("start_ns").max().alias("_last"))
    if last.height > 64:   # many ranks at once (stats_of): a join
        return (k.join(last, on="rank", how="left", nulls_equal=True)
                .filter((pl.col("_n").fill_null(0) < 2) | (pl.col("launch_ns") < pl.col("_last")))
                .drop("_n", "_last"))
    # a trace's rank or a few: the last step's start as an expression (a join would copy the
    # frame once more, the largest thing a worker holds)
    cut: Any = None
    for r, n, t in last.iter_rows():
        if n < 2:
            continue
        is_r = pl.col("rank").is_null() if r is None else pl.col("rank") == r
        cut = pl.when(is_r).then(pl.lit(t)) if cut is None else cut.when(is_r).then(pl.lit(t))
    if cut is None:
        return k
    limit = cut.otherwise(None)
    return k.filter(limit.is_null() | (pl.col("launch_ns") < limit))


def _top_kernels(k: pl.DataFrame, n: int) -> pl.DataFrame:
    total = k.group_by("rank").agg(pl.col("dur_ns").sum().alias("_total"))
    return (
        _plain(k.group_by("rank", "name", "category").agg(pl.len().alias("count"), pl.col("dur_ns").sum().alias("_t")))
        .join(total, on="rank", nulls_equal=True)
        .with_columns((pl.col("_t") / 1000).alias("time_us"), (100 * pl.col("_t") / pl.col("_total")).alias("share_pct"))
        .sort(["rank", "_t", "name"], descending=[False, True, False], nulls_last=False)
        .group_by("rank", maintain_order=True).head(n)
        .select("rank", "name", "category", "count", "time_us", "share_pct")
    )


def arrivals(k: pl.DataFrame) -> pl.DataFrame:
    """Per matched communication kernel (collective, k-th occurrence on every rank): the earliest
    and latest start, the late rank, and how long the others waited for it."""
    c = (k.filter((pl.col("category") == "communication") & pl.col("rank").is_not_null())
         .with_columns(pl.col("collective").fill_null(pl.col("name")))
         .sort("rank", "start_ns")
         .with_columns(pl.int_range(pl.len()).over("rank", "collective").alias("nth")))
    if c.is_empty():
        return pl.DataFrame(schema={"collective": pl.String, "nth": pl.Int64, "ranks": pl.UInt32,
                                    "late_rank": pl.Int32, "first_rank": pl.Int32, "spread_us": pl.Float64,
                                    "late_vs_median_us": pl.Float64, "others_wait_us": pl.Float64,
                                    "step": pl.Int32, "file": pl.String, "line": pl.Int64})
    nranks = c["rank"].n_unique()
    return (
        c.group_by("collective", "nth").agg(
            pl.len().alias("ranks"),
            pl.col("rank").sort_by("start_ns").last().alias("late_rank"),
            pl.col("rank").sort_by("start_ns").first().alias("first_rank"),
            ((pl.col("start_ns").max() - pl.col("start_ns").min()) / 1000).alias("spread_us"),
            ((pl.col("start_ns").max() - pl.col("start_ns").median()) / 1000).alias("late_vs_median_us"),
            ((pl.col("start_ns").max() * pl.len() - pl.col("start_ns").sum()) / 1000).alias("others_wait_us"),
            pl.col("step").sort_by("start_ns").last().alias("step"),
            pl.col("file").sort_by("start_ns").last().alias("file"),
            pl.col("line").sort_by("start_ns").last().alias("line"),
        )
        # a kernel seen on only some ranks is not matched (a rank stopped, or another group)
        .filter(pl.col("ranks") == nranks)
        .sort("collective", "nth")
    )


def late_ranks(arr: pl.DataFrame) -> pl.DataFrame:
    n = arr.height
    return (arr.group_by("late_rank").agg(
        pl.len().alias("times_last"),
        pl.col("late_vs_median_us").median().alias("median_late_us"),
        pl.col("others_wait_us").sum().alias("others_wait_us"),
    ).with_columns((100 * pl.col("times_last") / n).alias("share_pct"), pl.lit(n).alias("matched"))
        .rename({"late_rank": "rank"}).sort("times_last", "rank", descending=[True, False]))


def straggler_of(arr: pl.DataFrame, late: pl.DataFrame) -> dict[str, Any] | None:
    if late.is_empty() or arr.height < LATE_MIN_KERNELS:
        return None
    top = late.row(0, named=True)
    if top["times_last"] / arr.height < LATE_SHARE or top["median_late_us"] * 1000 < LATE_MIN_NS:
        return None
    cites = (arr.filter(pl.col("late_rank") == top["rank"]).sort("late_vs_median_us", descending=True)
             .head(3).select("file", "line", "collective", "nth", "late_vs_median_us").to_dicts())
    return {**top, "evidence": cites}


def trace_stats(paths: Iterable[str | os.PathLike[str]], top: int = TOP_N, jobs: int | None = None) -> TraceStats:
    """Per rank and per profiler step: temporal breakdown, idle causes, overlap; top kernels;
    late arrivals at communication kernels and the rank the others waited for.

    Trace files are read in worker processes (traces/pool.py: as many as cores, files and memory
    allow; `jobs` caps them; 1 reads them one at a time, here when they are small). Each worker holds one trace at a time and hands back
    its per-rank answers and communication kernels only; results come back in file order, so
    they do not depend on the worker count. A store is read here, one rank at a time."""
    from ..store import is_store

    paths = list(paths)
    parts, infos = [], []
    if len(paths) == 1 and is_store(paths[0]):
        for k, steps, info in _store_chunks(paths[0]):
            if info is not None:
                infos += info
            parts.append(_per_rank(k, steps, top))
        return _assemble(parts, infos)
    from .pool import in_workers, pool, workers_for

    files = trace_files(paths)
    n = workers_for(files, jobs)
    if n <= 1 and not in_workers(files):
        done = [_file_part(f, top) for f in files]
    else:
        with pool(n) as ex:
            done = list(ex.map(_file_part, files, [top] * len(files)))
    for part, info in done:
        parts.append(part)
        infos.append(info)
    return _assemble(parts, infos)


def _file_part(f: Path, top: int) -> tuple[tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame], TraceInfo]:
    """One trace file's per-rank answers (a worker's job: the kernels stay in the worker).

    Memory: the activities are taken one reader batch at a time, their names as categorical
    codes (4 bytes a row, not the name's bytes), so the frame the answers are computed on is
    ~60 bytes per activity; the answers' few rows go back as plain strings."""
    out: list[Any] = []
    cols = [c for c in USED_COLUMNS if c != "file"]
    frames = [pl.from_arrow(b).with_columns(pl.col(c).cast(pl.Categorical) for c in _NAMES)
              for b in iter_kernel_batches(f, out=out, columns=cols, dictionary=True)]
    info, steps = out
    k = (pl.concat(frames, rechunk=True) if frames
         else pl.DataFrame(schema={c: _EMPTY_K[c] for c in cols}).with_columns(pl.col(c).cast(pl.Categorical) for c in _NAMES))
    del frames
    k = k.with_columns(pl.lit(str(f)).cast(pl.Categorical).alias("file"))
    return _per_rank(k, pl.from_arrow(steps).with_columns(pl.lit(str(f)).alias("file")), top), info


def _file_frames(f: Path, columns: list[str] | None = None) -> tuple[pl.DataFrame, pl.DataFrame, TraceInfo]:
    t = read_trace(f)
    k = t.kernels.select(columns) if columns else t.kernels
    return (pl.from_arrow(k).with_columns(pl.lit(str(f)).alias("file")),
            pl.from_arrow(t.steps).with_columns(pl.lit(str(f)).alias("file")), t.info)


def _store_chunks(path: str | os.PathLike[str]) -> Iterator[tuple[pl.DataFrame, pl.DataFrame, Any]]:
    from ..store import open_store

    _, steps, infos = load_store(path, kernels=False)
    run = open_store(path)
    yield pl.DataFrame(schema=_EMPTY_K), steps.clear(), infos
    ranks = run.kernels().select(pl.col("rank").unique()).collect()["rank"].to_list()
    for r in sorted(ranks, key=lambda x: (x is None, x)):
        cond = pl.col("rank").is_null() if r is None else pl.col("rank") == r
        k = run.kernels().filter(cond).collect().rename({"source_file": "file"})
        yield k, steps.filter(cond), None


_NAMES = ("category", "cat", "name", "collective")   # string columns held as categorical codes in a worker
COMM_COLUMNS = ["rank", "collective", "name", "category", "start_ns", "step", "file", "line"]
USED_COLUMNS = ["rank", "step", "stream", "category", "cat", "name", "collective", "start_ns", "dur_ns", "launch_ns",
                "file", "line"]


def _per_rank(k: pl.DataFrame, steps: pl.DataFrame, top: int) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Breakdown rows, top kernels and the communication kernels of one or more ranks' activities."""
    if "file" not in k.columns:
        k = k.with_columns(pl.lit(None, pl.String).alias("file"))
    k = k.select(USED_COLUMNS)   # copies below carry only what the answers need
    window = _hta_window(k, steps)
    whole = _breakdown(window, ["rank"]).with_columns(pl.lit(None, pl.Int32).alias("step"))
    per_step = _breakdown(k.filter(pl.col("step").is_not_null()), ["rank", "step"])
    breakdown = pl.concat([whole.select(per_step.columns), per_step], how="vertical_relaxed")
    comm = k.filter(pl.col("category") == "communication").select(COMM_COLUMNS)
    return breakdown, _top_kernels(window, top), _plain(comm)


def _plain(df: pl.DataFrame) -> pl.DataFrame:
    """Categorical columns as strings (answers from different workers are concatenated)."""
    return df.with_columns(pl.col(c).cast(pl.String) for c, t in df.schema.items() if t == pl.Categorical)


def stats_of(k: pl.DataFrame, steps: pl.DataFrame, infos: list[TraceInfo], top: int = TOP_N) -> TraceStats:
    """The same from frames already in memory (all ranks at once)."""
    return _assemble([_per_rank(k, steps, top)], infos)


def _assemble(parts: list[tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]], infos: list[TraceInfo]) -> TraceStats:
    notes: list[str] = []
    parts = [p for p in parts if p[0].height or p[2].height]
    if not parts:
        parts = [_per_rank(pl.DataFrame(schema=_EMPTY_K), pl.DataFrame(schema=_EMPTY_S), TOP_N)]
    breakdown = pl.concat([p[0] for p in parts], how="vertical_relaxed").sort("rank", "step", nulls_last=False)
    top_kernels = pl.concat([p[1] for p in parts], how="vertical_relaxed")
    arr = arrivals(pl.concat([p[2] for p in parts], how="vertical_relaxed"))
    late = late_ranks(arr) if arr.height else pl.DataFrame(schema={"rank": pl.Int32, "times_last": pl.UInt32})
    if infos and not all(t.absolute for t in infos):
        notes.append("some traces have no absolute clock: arrivals across ranks are not compared")
        arr, late = arr.clear(), late.clear()
    elif arr.height:
        notes.append("arrivals are compared on each trace's own clock: host clock skew adds to them")
    for t in infos:
        notes += [f"{t.path}: {p}" for p in t.problems]
    ranks = [t.rank for t in infos]
    if len(set(ranks)) < len(ranks):
        notes.append("two traces name the same rank: each is listed on its own")
    return TraceStats(infos, breakdown, top_kernels, arr, late, straggler_of(arr, late), notes)
