"""The rows of a block -> a Block: the events frame (columns typed as the schema says) and the
rejects.
"""
from __future__ import annotations

from typing import Any

import orjson
import polars as pl

from ...schema import Level, RankSource
from ..jsonl import Block, rejects_frame
from ..normalize import parse_timestamp
from .row import _Row


# Canonical metric columns this reader may fill, with their dtypes (from schema).
_METRIC_COLS: dict[str, pl.DataType] = {
    "step": pl.Int64(), "loss": pl.Float64(), "lr": pl.Float64(), "step_time_ms": pl.Float64(),
    "samples_per_s": pl.Float64(), "tokens_per_s": pl.Float64(), "grad_norm": pl.Float64(),
    "mem_alloc_mb": pl.Float64(), "seq": pl.Int64(), "timeout_s": pl.Float64(),
    "duration_s": pl.Float64(), "exit_code": pl.Int64(), "peer_rank": pl.Int32(),
    "epoch": pl.Float64(), "collective": pl.String(), "process_group": pl.String(),
}


_I32 = range(-2**31, 2**31)


def _in_int32(r: _Row) -> None:
    """A rank or GPU index a store cannot hold (Int32) is left out and kept as text in extra."""
    for name in ("rank", "local_rank"):
        v = getattr(r, name)
        if v is not None and v not in _I32:
            setattr(r, name, None)
            r.x(**{f"{name}_out_of_range": str(v)[:40]})
            if name == "rank":
                r.rank_source = "none"


def _extra_json(extra: dict[str, Any]) -> str:
    d = {k: v for k, v in extra.items() if v is not None}
    try:
        return orjson.dumps(d).decode()
    except orjson.JSONEncodeError:   # an int beyond 64 bits (a pid of 30 digits): as text
        from ..bounds import json_safe

        return orjson.dumps(json_safe(d), default=str).decode()


def _to_block(rows: list[_Row]) -> Block:
    ev = [r for r in rows if r.reason is None]
    rj = [r for r in rows if r.reason is not None]
    for r in ev:
        if r.rank is not None and r.rank not in _I32 or r.local_rank is not None and r.local_rank not in _I32:
            _in_int32(r)
    used: set[str] = set()
    for r in ev:
        if r.m:
            used.update(r.m)
    cols: dict[str, pl.Series] = {
        "line": pl.Series("line", [r.line for r in ev], dtype=pl.Int64),
        "rank": pl.Series("rank", [r.rank for r in ev], dtype=pl.Int32),
        "rank_source": pl.Series("rank_source", [r.rank_source for r in ev], dtype=pl.String).cast(RankSource),
        "host": pl.Series("host", [r.host for r in ev], dtype=pl.String),
        "local_rank": pl.Series("local_rank", [r.local_rank for r in ev], dtype=pl.Int32),
        "level": pl.Series("level", [r.level for r in ev], dtype=pl.String).cast(Level),
        "event": pl.Series("event", [r.event for r in ev], dtype=pl.String),
        "message": pl.Series("message", [r.message for r in ev], dtype=pl.String),
        "extra": pl.Series(
            "extra",
            [_extra_json(r.extra) if r.extra else None for r in ev],
            dtype=pl.String,
        ),
    }
    for name in sorted(used):
        cols[name] = pl.Series(name, [r.m.get(name) if r.m else None for r in ev], dtype=_METRIC_COLS[name], strict=False)
    ts = pl.DataFrame({"ts": [r.ts for r in ev]}, schema={"ts": pl.String})
    cols["timestamp"] = ts.select(parse_timestamp(pl.col("ts")).alias("timestamp")).to_series()
    events = pl.DataFrame(cols)
    rejects = rejects_frame([(r.line, r.reason, r.raw or b"", len(r.raw or b"")) for r in rj])
    return Block(events, rejects, len(rows), ranks=_ranks_named(ev))


def _ranks_named(ev: list[_Row]) -> tuple[int, ...]:
    """Ranks the log shows besides the events' own: a second Megatron memory report glued onto
    another's line (`_MEGATRON_MEM_ALL`, kept in extra), and the ranks a launcher says it
    started -- DeepSpeed's `global_rank_mapping={'localhost': [0, 1]}` (launcher/launch.py),
    torchrun's rendezvous result `global_ranks=[4, 5, 6, 7]` (elastic agent)."""
    out: set[int] = set()
    for r in ev:
        x = r.extra
        if not x:
            continue
        out.update(int(g["rank"]) for g in x.get("interleaved", ()))
        for ranks in (x.get("global_rank_mapping") or {}).values():
            out.update(int(k) for k in ranks)
        out.update(int(k) for k in ((x.get("topology") or {}).get("global_ranks") or ()))
    return tuple(sorted(out))
