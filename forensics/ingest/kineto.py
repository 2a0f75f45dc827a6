"""PyTorch profiler (Kineto) Chrome traces -> COMM_KERNEL events, one PROFILE_SUMMARY per trace,
and every GPU activity as a row of the store's `kernels` table.

Owns: turning what traces/reader.py streams out of a trace (GPU activities joined to their
launches and profiler steps, CPU-side gloo collectives, distributedInfo) into events and kernel
rows. Must not parse the JSON itself (the reader streams it: memory stays bounded whatever the
trace size) nor interpret overlap or idle time (traces/stats.py, `trace-stats`).

Records: line = index of the trace event in `traceEvents` (1-based), so a finding points at
the record; PROFILE_SUMMARY is line len(traceEvents) + 1. Only emitted records are counted:
`lines == events + rejects` over the records this reader selects, not over every trace event.
A trace cut short (a crash while writing, a truncated gzip) keeps what was read and is one
reject at the event after the last complete one.
Rank: `distributedInfo.rank` (record), else the path's rank, else `rank<N>`/`worker<N>` in the
file name (path). Time: `ts` is microseconds; relative to `baseTimeNanoseconds` when the trace
has it, else absolute epoch microseconds when it looks like one, else unknown (null;
extra.ts_us keeps it).
"""
from __future__ import annotations

from typing import Any, BinaryIO, Iterator

import orjson
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from ..schema import Level, RankSource
from ..traces.reader import DICT_SCHEMA, KERNEL_SCHEMA, iter_kernel_batches
from .formats import ReaderContext
from .jsonl import Block, rejects_frame


def read_kineto(path: str, stream: BinaryIO, ctx: ReaderContext) -> Iterator[Block]:
    out: list[Any] = []
    # names as dictionary codes: the table lives until its part is written (unit._write_kernels
    # turns them into strings one row group at a time)
    kernels = pa.Table.from_batches(list(iter_kernel_batches(path, stream, ctx.rank_hint, out, dictionary=True)),
                                    schema=DICT_SCHEMA)
    info, steps = out
    rows: list[dict[str, Any]] = []
    to_us = (lambda ns: ns // 1000) if info.absolute else (lambda ns: None)  # noqa: E731
    # the communication kernels picked in Arrow: a polars frame of the whole table would copy
    # every activity's strings once more
    comm = pl.from_arrow(kernels.filter(pc.and_(pc.equal(kernels["cat"], "kernel"), pc.is_valid(kernels["collective"])))
                         .cast(KERNEL_SCHEMA))
    for r in comm.iter_rows(named=True):
        raw_ts = (r["start_ns"] - info.offset_ns) / 1000
        extra = {"kernel": r["name"], "cat": r["cat"], "ts_us": raw_ts, "device": r["device"], "stream": r["stream"],
                 "correlation": r["correlation"], "step": r["step"]}
        rows.append({"line": r["line"], "event": "COMM_KERNEL", "collective": r["collective"], "ts_us": to_us(r["start_ns"]),
                     "comm_ms": r["dur_ns"] / 1e6, "local_rank": r["device"], "message": r["name"][:200],
                     "extra": extra})
    for line, name, ts, dur in info.cpu_collectives:   # gloo runs its collectives on the CPU
        rows.append({"line": line, "event": "COMM_KERNEL", "collective": name[5:].lower(),
                     "ts_us": to_us(ts + info.offset_ns), "comm_ms": dur / 1e6 if dur is not None else None,
                     "local_rank": None, "message": name[:200],
                     "extra": {"kernel": name, "cat": "cpu_op", "ts_us": ts / 1000}})
    rows.sort(key=lambda r: r["line"])
    comm_us = sum(r["comm_ms"] or 0 for r in rows) * 1000
    kernel_us = (pc.sum(kernels.filter(pc.equal(kernels["cat"], "kernel"))["dur_ns"]).as_py() or 0) / 1000
    rejects: list[tuple[int, str, bytes, int]] = []
    if info.problems:
        # one reason for every cut trace (rejects are counted by reason); the detail is in the problems
        rejects.append((info.events + 1, "invalid JSON: trace ends before its last event", info.last_bytes,
                        len(info.last_bytes)))
    if info.events or not rejects:
        lo, hi = info.span_ns or (None, None)
        summary = {
            "comm_kernels": len(rows),
            "kernel_ms": kernel_us / 1000,
            "comm_fraction_of_kernel_time": (comm_us / kernel_us) if kernel_us else None,
            "span_ms": (hi - lo) / 1e6 if lo is not None and hi is not None else None,
            "world_size": info.world_size,
            "backend": info.backend,
            "trace_name": info.trace_name,
            "device_name": info.device_name,
            "gpu_activities": info.gpu_activities,
            # the steps' spans (epoch ns when the clock is known): trace-stats on a store needs them
            "profiler_steps": steps.select(["step", "start_ns", "dur_ns", "line"]).to_pylist(),
        }
        rows.append({"line": info.events + 1 + len(rejects), "event": "PROFILE_SUMMARY", "collective": None,
                     "ts_us": to_us(lo + info.offset_ns) if lo is not None else None, "comm_ms": comm_us / 1000,
                     "local_rank": None, "message": f"{len(rows)} communication kernels, {comm_us / 1000:.3f} ms",
                     "extra": summary})
    n = len(rows)
    src = info.rank_source
    frame = pl.DataFrame({
        "line": pl.Series([r["line"] for r in rows], dtype=pl.Int64),
        "timestamp": pl.Series([r["ts_us"] for r in rows], dtype=pl.Int64).cast(pl.Datetime("us")).dt.replace_time_zone("UTC"),
        "rank": pl.Series([info.rank] * n, dtype=pl.Int32),
        "rank_source": pl.Series([src] * n, dtype=pl.String).cast(RankSource),
        "host": pl.Series([ctx.host_hint] * n, dtype=pl.String),
        "local_rank": pl.Series([r["local_rank"] if isinstance(r["local_rank"], int) else None for r in rows], dtype=pl.Int32),
        "level": pl.Series(["INFO"] * n, dtype=pl.String).cast(Level),
        "event": pl.Series([r["event"] for r in rows], dtype=pl.String),
        "message": pl.Series([r["message"] for r in rows], dtype=pl.String),
        "collective": pl.Series([r["collective"] for r in rows], dtype=pl.String),
        "comm_ms": pl.Series([r["comm_ms"] for r in rows], dtype=pl.Float64),
        "extra": pl.Series([orjson.dumps(r["extra"]).decode() for r in rows], dtype=pl.String),
    })
    yield Block(frame, rejects_frame(rejects), n + len(rejects), kernels=kernels)


read = read_kineto
