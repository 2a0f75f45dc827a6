"""How many trace files to read at once, and the process pool that reads them.

Owns the worker count for profiler traces (`trace-stats` and the ingest of trace files): as
many processes as cores and files allow, fewer when their estimated peak memory would not fit
in the memory budget. Must not read traces itself (reader.py) nor compute anything (stats.py).

Why processes: reading a trace is Python work per trace event (msgspec decodes in C, but the
loop over events holds the GIL), so threads would read one trace at a time. Why `spawn`: the
parent has polars' and Arrow's thread pools running; a forked child can inherit their locks
held. Each worker pays its imports (~1 s) once.

Memory: a reader's peak grows with the trace's GPU activities, which grow with its size; it was
measured on generated traces (bench/gen_traces.py, one kernel per ~0.9 KB of trace) at 0.93 GB
for a 1 GB trace and 0.44 GB for a 250 MB one (the per-rank analysis included, in a spawned
worker): ~200 MB of libraries plus ~0.75 x the trace size, estimated here at 0.9 x to leave room
for traces denser in kernels. A gzip trace is counted at 8 x its size on disk (Kineto traces
compress ~8-10x).
"""
from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Iterable

BASE_MB = 200                   # one spawned worker's libraries (polars, pyarrow, msgspec) resident
PER_BYTE = 0.9                  # peak bytes per (uncompressed) trace byte
GZIP_RATIO = 8
DEFAULT_BUDGET = 0.5            # of the memory available when no budget is given
ENV_BUDGET = "FORENSICS_TRACE_MEMORY_MB"
ENV_JOBS = "FORENSICS_TRACE_JOBS"
# below this much trace text in all a worker's imports (~1.5 CPU s) cost more than they save
POOL_MIN_MB = 128


def estimated_mb(path: str | os.PathLike[str]) -> float:
    """A worker's estimated peak memory (MB) reading this trace."""
    p = Path(path)
    try:
        size = p.stat().st_size
    except OSError:
        size = 0
    if p.name.endswith((".gz", ".zst", ".zstd")):
        size *= GZIP_RATIO
    return BASE_MB + PER_BYTE * size / 1e6


def available_mb() -> float:
    """MemAvailable of /proc/meminfo (Linux); elsewhere the physical memory."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20
    except (ValueError, OSError, AttributeError):
        return 4096.0


def workers_for(paths: Iterable[str | os.PathLike[str]], jobs: int | None = None,
                budget_mb: float | None = None) -> int:
    """Processes to read these traces with: at most `jobs` (default: the cores, or
    $FORENSICS_TRACE_JOBS), at most one per file, and as many of the largest files' estimated
    peaks as fit in `budget_mb` (default: $FORENSICS_TRACE_MEMORY_MB, else half the memory
    available now); without `jobs`, no pool for less than POOL_MIN_MB of traces. 1 means: read
    them here, one after another."""
    est = sorted((estimated_mb(p) for p in paths), reverse=True)
    if len(est) < 2 or jobs == 1:
        return 1
    if jobs is None and sum(e - BASE_MB for e in est) / PER_BYTE < POOL_MIN_MB:
        return 1
    if jobs is None:
        env = os.environ.get(ENV_JOBS, "")
        jobs = int(env) if env.isdigit() and int(env) > 0 else (os.cpu_count() or 1)
    if budget_mb is None:
        env = os.environ.get(ENV_BUDGET, "")
        budget_mb = float(env) if env.isdigit() else DEFAULT_BUDGET * available_mb()
    n = 0
    used = 0.0
    for e in est[:max(1, jobs)]:
        if n and used + e > budget_mb:
            break
        used += e
        n += 1
    return max(1, n)


def pool(workers: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))


def trace_units(units: list[Any], workers: int | None = None) -> tuple[ProcessPoolExecutor | None, set[int]]:
    """For the ingest: the units made only of profiler-trace pieces (ingest.unit.Unit), and a
    process pool sized for them (None, with no unit, when one worker would do: they then run
    with the others, in threads)."""
    idx = {i for i, u in enumerate(units) if u.pieces and all(p.fmt == "kineto" for p in u.pieces)}
    paths = [p.path for i in sorted(idx) for p in units[i].pieces]
    n = workers_for(paths, workers) if len(idx) > 1 else 1
    if n <= 1:
        return None, set()
    return pool(n), idx
