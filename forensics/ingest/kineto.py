"""PyTorch profiler (Kineto) Chrome traces -> COMM_KERNEL events + one PROFILE_SUMMARY per trace.

Owns: finding the communication kernels of a trace (NCCL kernels on the GPU; gloo collectives,
which run on the CPU) and summarising the trace's communication time. Must not emit the
thousands of compute ops of a trace (they are not evidence a log-forensics pass reads) nor
interpret overlap between compute and communication (a pass may).

Records: line = index of the trace event in `traceEvents` (1-based), so a finding points at
the record; PROFILE_SUMMARY is line len(traceEvents) + 1. Only emitted records are counted:
`lines == events + rejects` over the records this reader selects, not over every trace event.
Rank: `distributedInfo.rank` (record), else `rank<N>`/`worker<N>` in the file name (path).
Time: `ts` is microseconds; relative to `baseTimeNanoseconds` when the trace has it, else
absolute epoch microseconds when it looks like one, else unknown (null; extra.ts_us keeps it).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, BinaryIO, Iterator

import orjson
import polars as pl

from ..errors import UNREADABLE, ForensicsError
from ..schema import Level, RankSource
from .formats import ReaderContext
from .jsonl import Block, rejects_frame

MAX_TRACE_BYTES = 4 << 30
_NCCL_KERNEL = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)", re.I)
_WORKER = re.compile(r"(?i)(?:worker|rank)[_\-]?(\d+)")
# Epoch microseconds after 2001-09-09: anything smaller is a relative clock.
_EPOCH_US = 1e15


def _collective(name: str) -> str | None:
    m = _NCCL_KERNEL.search(name)
    if m:
        return m.group(1)
    low = name.lower()
    if low.startswith("gloo:"):
        return low[5:]
    return None


def read_kineto(path: str, stream: BinaryIO, ctx: ReaderContext) -> Iterator[Block]:
    data = stream.read(MAX_TRACE_BYTES + 1)
    if len(data) > MAX_TRACE_BYTES:
        raise ForensicsError(f"profiler trace larger than {MAX_TRACE_BYTES >> 30} GiB", where=path,
                             help="profile fewer steps", code=UNREADABLE)
    try:
        trace = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        rej = rejects_frame([(1, f"invalid JSON: {e}", data, len(data))])
        yield Block(pl.DataFrame({"line": []}, schema={"line": pl.Int64}), rej, 1)
        return
    if not isinstance(trace, dict):
        trace = {"traceEvents": trace} if isinstance(trace, list) else {}
    events = trace.get("traceEvents") if isinstance(trace.get("traceEvents"), list) else []

    info = trace.get("distributedInfo") if isinstance(trace.get("distributedInfo"), dict) else {}
    rank: int | None
    if isinstance(info.get("rank"), int):
        rank, source = info["rank"], "record"
    elif ctx.rank_hint is not None:
        rank, source = ctx.rank_hint, "path"
    else:
        m = _WORKER.search(Path(path).name)
        rank, source = (int(m.group(1)), "path") if m else (None, "none")
    base_ns = trace.get("baseTimeNanoseconds")
    base_us = base_ns / 1000 if isinstance(base_ns, (int, float)) else None

    def abs_us(ts: Any) -> int | None:
        if not isinstance(ts, (int, float)):
            return None
        if base_us is not None:
            return int(base_us + ts)
        return int(ts) if ts >= _EPOCH_US else None

    rows: list[dict[str, Any]] = []
    comm_us = 0.0
    kernel_us = 0.0
    t_min: float | None = None
    t_max: float | None = None
    for i, e in enumerate(events, start=1):
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        ts, dur = e.get("ts"), e.get("dur")
        if isinstance(ts, (int, float)) and isinstance(dur, (int, float)):
            t_min = ts if t_min is None else min(t_min, ts)
            t_max = ts + dur if t_max is None else max(t_max, ts + dur)
        name = str(e.get("name", ""))
        cat = e.get("cat")
        if cat == "kernel" and isinstance(dur, (int, float)):
            kernel_us += dur
        coll = _collective(name) if cat in ("kernel", "cpu_op", "user_annotation") else None
        if coll is None or (cat != "kernel" and not name.lower().startswith("gloo:")):
            continue
        d = float(dur) if isinstance(dur, (int, float)) else None
        if d is not None:
            comm_us += d
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        extra = {"kernel": name, "cat": cat, "ts_us": ts}
        for k in ("device", "stream", "correlation", "grid", "block"):
            if k in args:
                extra[k] = args[k]
        rows.append({"line": i, "event": "COMM_KERNEL", "collective": coll, "ts_us": abs_us(ts),
                     "comm_ms": d / 1000 if d is not None else None, "local_rank": args.get("device"),
                     "message": name[:200], "extra": extra})
    span_ms = (t_max - t_min) / 1000 if t_min is not None and t_max is not None else None
    summary = {
        "comm_kernels": len(rows),
        "kernel_ms": kernel_us / 1000,
        "comm_fraction_of_kernel_time": (comm_us / kernel_us) if kernel_us else None,
        "span_ms": span_ms,
        "world_size": info.get("world_size"),
        "backend": info.get("backend"),
        "trace_name": trace.get("traceName"),
    }
    devs = trace.get("deviceProperties")
    if isinstance(devs, list) and devs and isinstance(devs[0], dict):
        summary["device_name"] = devs[0].get("name")
    rows.append({"line": len(events) + 1, "event": "PROFILE_SUMMARY", "collective": None,
                 "ts_us": abs_us(t_min), "comm_ms": comm_us / 1000, "local_rank": None,
                 "message": f"{len(rows)} communication kernels, {comm_us / 1000:.3f} ms",
                 "extra": summary})
    n = len(rows)
    ts_col = pl.Series([r["ts_us"] for r in rows], dtype=pl.Int64)
    frame = pl.DataFrame({
        "line": pl.Series([r["line"] for r in rows], dtype=pl.Int64),
        "timestamp": ts_col.cast(pl.Datetime("us")).dt.replace_time_zone("UTC"),
        "rank": pl.Series([rank] * n, dtype=pl.Int32),
        "rank_source": pl.Series([source] * n, dtype=pl.String).cast(RankSource),
        "host": pl.Series([ctx.host_hint] * n, dtype=pl.String),
        "local_rank": pl.Series([r["local_rank"] if isinstance(r["local_rank"], int) else None for r in rows], dtype=pl.Int32),
        "level": pl.Series(["INFO"] * n, dtype=pl.String).cast(Level),
        "event": pl.Series([r["event"] for r in rows], dtype=pl.String),
        "message": pl.Series([r["message"] for r in rows], dtype=pl.String),
        "collective": pl.Series([r["collective"] for r in rows], dtype=pl.String),
        "comm_ms": pl.Series([r["comm_ms"] for r in rows], dtype=pl.Float64),
        "extra": pl.Series([orjson.dumps(r["extra"]).decode() for r in rows], dtype=pl.String),
    })
    yield Block(frame, rejects_frame([]), n)


read = read_kineto
