"""How many trace files to read at once, and the process pool that reads them.

Owns the worker count for profiler traces (`trace-stats` and the ingest of trace files): as
many processes as cores and files allow, fewer when their estimated peak memory would not fit
in the memory budget. Must not read traces itself (reader.py) nor compute anything (stats.py).

Why processes: reading a trace is Python work per trace event (msgspec decodes in C, but the
loop over events holds the GIL), so threads would read one trace at a time. Why `spawn`: the
parent has polars' and Arrow's thread pools running; a forked child can inherit their locks
held. Each worker pays its imports (~1 s) once.

Memory: by default the whole process tree (this process and its workers) is kept under
DEFAULT_CAP_MB: the workers share DEFAULT_CAP_MB - MAIN_MB (or half the memory available, when
less), and $FORENSICS_TRACE_MEMORY_MB raises or lowers that share. Each worker reads ONE trace
then exits (`max_tasks_per_child=1`): the allocator's held pages go back to the system with
it, so memory does not build up across traces. Workers die with their parent (a parent-death
signal on Linux, and a thread watching the parent elsewhere): stopping a run leaves no orphans.

A worker's peak grows with the trace's GPU activities, which grow with its size; measured on a
generated 1 GB trace (bench/gen_traces.py, ~1.08 M activities, one per ~0.9 KB of trace) in a
spawned worker, with the names held as dictionary codes: 0.53 GB for trace-stats (the per-rank
analysis included), 0.70 GB for the ingest (which keeps the whole kernel table until its part
is written): ~200 MB of libraries plus ~0.32 x / ~0.49 x the trace size, estimated here at
PER_BYTE / INGEST_PER_BYTE to leave room for traces denser in kernels. A gzip trace is counted
at 8 x its size on disk (Kineto traces compress ~8-10x).
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Iterable

BASE_MB = 200                   # one spawned worker's libraries (polars, pyarrow, msgspec) resident
PER_BYTE = 0.38                 # peak bytes per (uncompressed) trace byte: trace-stats' worker
INGEST_PER_BYTE = 0.55          # ... the ingest's (the whole kernel table, names as codes, until written)
GZIP_RATIO = 8
DEFAULT_BUDGET = 0.5            # of the memory available when no budget is given ...
DEFAULT_CAP_MB = 1400           # ... and at most this for the whole tree by default
MAIN_MB = 200                   # of which the parent process keeps (libraries, the gathered answers)
ENV_BUDGET = "FORENSICS_TRACE_MEMORY_MB"
ENV_JOBS = "FORENSICS_TRACE_JOBS"
# below this much trace text in all a worker's imports (~1.5 CPU s) cost more than they save
POOL_MIN_MB = 128


def trace_mb(path: str | os.PathLike[str]) -> float:
    """The trace's text in MB (a compressed trace counted at GZIP_RATIO x its size on disk)."""
    p = Path(path)
    try:
        size = p.stat().st_size
    except OSError:
        size = 0
    if p.name.endswith((".gz", ".zst", ".zstd")):
        size *= GZIP_RATIO
    return size / 1e6


def estimated_mb(path: str | os.PathLike[str], per_byte: float = PER_BYTE) -> float:
    """A worker's estimated peak memory (MB) reading this trace (`per_byte`: peak bytes per
    trace byte of the worker's job)."""
    return BASE_MB + per_byte * trace_mb(path)


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


def default_budget_mb() -> float:
    """The workers' memory: $FORENSICS_TRACE_MEMORY_MB, else half the memory available now but
    at most DEFAULT_CAP_MB - MAIN_MB (the whole tree then stays under DEFAULT_CAP_MB)."""
    env = os.environ.get(ENV_BUDGET, "")
    if env.isdigit():
        return float(env)
    return min(DEFAULT_BUDGET * available_mb(), DEFAULT_CAP_MB - MAIN_MB)


def in_workers(paths: Iterable[str | os.PathLike[str]]) -> bool:
    """Whether these traces are worth worker processes at all (POOL_MIN_MB of trace text or
    more): then even one worker reads them, never this process, whose memory would build up
    across traces."""
    return sum(trace_mb(p) for p in paths) >= POOL_MIN_MB


def workers_for(paths: Iterable[str | os.PathLike[str]], jobs: int | None = None,
                budget_mb: float | None = None, per_byte: float = PER_BYTE) -> int:
    """Processes to read these traces with: at most `jobs` (default: the cores, or
    $FORENSICS_TRACE_JOBS), at most one per file, and as many of the largest files' estimated
    peaks as fit in `budget_mb` (default: default_budget_mb()); without `jobs`, no pool for
    less than POOL_MIN_MB of traces. 1 means one at a time (in a worker when in_workers())."""
    sizes = [trace_mb(p) for p in paths]
    if len(sizes) < 2 or jobs == 1:
        return 1
    if jobs is None and sum(sizes) < POOL_MIN_MB:   # not in_workers()
        return 1
    est = sorted((BASE_MB + per_byte * mb for mb in sizes), reverse=True)
    if jobs is None:
        env = os.environ.get(ENV_JOBS, "")
        jobs = int(env) if env.isdigit() and int(env) > 0 else (os.cpu_count() or 1)
    if budget_mb is None:
        budget_mb = default_budget_mb()
    n = 0
    used = 0.0
    for e in est[:max(1, jobs)]:
        if n and used + e > budget_mb:
            break
        used += e
        n += 1
    return max(1, n)


def pool(workers: int) -> ProcessPoolExecutor:
    """`workers` spawned processes, each doing one task then exiting (its memory returned)."""
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               max_tasks_per_child=1, initializer=die_with_parent, initargs=(os.getpid(),))


def die_with_parent(parent: int) -> None:
    """In a worker: end when `parent` ends (killed or stopped), so no worker is left reading."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            PR_SET_PDEATHSIG = 1
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
                if os.getppid() != parent:      # it died before the signal was asked for
                    os._exit(1)
                return
        except (OSError, AttributeError):
            pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="die-with-parent").start()


def trace_units(units: list[Any], workers: int | None = None) -> tuple[ProcessPoolExecutor | None, set[int]]:
    """For the ingest: the units made only of profiler-trace pieces (ingest.unit.Unit), and a
    process pool sized for them (None, with no unit, when one worker would do: they then run
    with the others, in threads)."""
    idx = {i for i, u in enumerate(units) if u.pieces and all(p.fmt == "kineto" for p in u.pieces)}
    paths = [p.path for i in sorted(idx) for p in units[i].pieces]
    if not idx or not (in_workers(paths) or (workers or 0) > 1 and len(idx) > 1):
        return None, set()
    return pool(workers_for(paths, workers, per_byte=INGEST_PER_BYTE)), idx
