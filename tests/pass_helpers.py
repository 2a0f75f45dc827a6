"""Small in-memory runs for the pass tests: synchronous data-parallel steps and single events.

Owns nothing but test scaffolding; the physics is the one the passes rely on (each rank loads,
computes, arrives at the all-reduce, waits for the last rank, transfers; all leave together),
so waits and step times follow from the injected fault instead of being written by hand.
"""
from __future__ import annotations

import datetime as dt
import random
from typing import Any, Callable

import polars as pl

from forensics.passes import diagnose_context
from forensics.passes.context import Context

T0 = dt.datetime(2025, 6, 12, 14, 0, 0, tzinfo=dt.timezone.utc)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


class Rows:
    """Collects event rows with a file and a line number per rank, like a real per-rank log."""

    def __init__(self, host: Callable[[int], str | None] = lambda r: None,
                 skew: Callable[[int], float] = lambda r: 0.0) -> None:
        """`host(rank)` names each rank's host; `skew(rank)` seconds are added to every time the
        rank logs (its host clock runs ahead by that much)."""
        self.rows: list[dict[str, Any]] = []
        self._line: dict[Any, int] = {}
        self.host, self.skew = host, skew

    def add(self, t: float, rank: int | None, event: str | None, level: str = "INFO", file: str | None = None,
            **fields: Any) -> dict[str, Any]:
        f = file or (f"rank_{rank}.jsonl" if rank is not None else "logging.jsonl")
        self._line[f] = self._line.get(f, 0) + 1
        off = self.skew(rank) if rank is not None else 0.0
        if "grad_ready_ts" in fields:
            fields["grad_ready_ts"] += off
        row = {"timestamp": at(t + off), "rank": rank, "rank_source": "record" if rank is not None else "none",
               "host": self.host(rank) if rank is not None else None,
               "level": level, "event": event, "source_file": f, "line": self._line[f], "format": "jsonl", **fields}
        self.rows.append(row)
        return row

    def frame(self) -> pl.DataFrame:
        if not self.rows:
            return pl.DataFrame()
        return pl.from_dicts(self.rows, infer_schema_length=None)

    def ctx(self) -> Context:
        return Context.from_frame(self.frame())

    def report(self, **kw: Any):
        return diagnose_context(self.ctx(), **kw)


def sync_run(
    rows: Rows | None = None,
    *,
    ranks: int = 4,
    steps: int = 40,
    compute: Callable[[int, int], float] = lambda r, s: 800.0,
    data: Callable[[int, int], float] = lambda r, s: 20.0,
    disk: Callable[[int, int], float] = lambda r, s: 1200.0,
    transfer: Callable[[int], float] = lambda s: 150.0,
    late: Callable[[int, int], float] = lambda r, s: 0.0,
    overlap: bool = False,
    loss: Callable[[int], float] = lambda s: 3.0 - 0.01 * s,
    log_wait: bool = True,
    grad_ready: bool = True,
    samples: bool = True,
    seed: int = 0,
    opt_ms: float = 30.0,
) -> Rows:
    """Synchronous steps; `late` delays a rank's gradient-ready time (with `overlap` nobody waits
    for it: the reduction runs with stale gradients)."""
    rows = rows or Rows()
    rng = random.Random(seed)
    t = 0.0
    for s in range(steps):
        arrive, ready = {}, {}
        for r in range(ranks):
            dl = data(r, s) * rng.uniform(0.95, 1.05)
            comp = compute(r, s) * rng.uniform(0.99, 1.01)
            rows.add(t + dl / 1000, r, "DATA_LOAD_TIME", step=s, data_load_ms=dl, disk_read_mbps=disk(r, s))
            arrive[r] = t + (dl + comp) / 1000
            ready[r] = arrive[r] + late(r, s) / 1000
        last = max(arrive.values()) if not overlap else None
        xfer = transfer(s)
        ends = {}
        for r in range(ranks):
            if grad_ready:
                rows.add(ready[r], r, "GRAD_READY", step=s, grad_ready_ts=T0.timestamp() + ready[r])
            wait = ((last - arrive[r]) * 1000 if last is not None else 0.0) + rng.uniform(0.2, 1.0)
            done = (last if last is not None else arrive[r]) + xfer / 1000
            extra = {"wait_ms": wait} if log_wait else {}
            rows.add(done, r, "ALLREDUCE", step=s, comm_ms=wait + xfer, collective="allreduce", seq=s + 1, **extra)
            ends[r] = done + opt_ms / 1000
        end = max(ends.values())
        for r in range(ranks):
            st = (end - t) * 1000
            kw = {"samples_per_s": 32 / (st / 1000)} if samples else {}
            rows.add(end, r, "TRAIN_STEP", step=s, step_time_ms=st, loss=loss(s) + rng.gauss(0, 0.01), lr=1e-4,
                     stage="stable", **kw)
        t = end + 0.002
    return rows


EVERY = {0: 1, 1: 2, 2: 3, 3: 5}


def every(rows: Rows, every: dict[int, int]) -> Rows:
    """`rows` with rank r's lines kept only at every `every[r]`-th step (each rank logs its own
    subset of the steps, as with a per-rank --log-every); line numbers stay those of the full log."""
    rows.rows = [x for x in rows.rows if x["step"] % every[x["rank"]] == 0]
    return rows


def train_only(rows: Rows | None = None, *, ranks: int = 4, steps: int = 200, every: int = 1,
               loss: Callable[[int], float], lr: Callable[[int], float] = lambda s: 1e-4,
               stage: Callable[[int], str | None] = lambda s: None, noise: float = 0.02, seed: int = 0,
               rank_field: bool = True, **metrics: Callable[[int], float]) -> Rows:
    """TRAIN_STEP lines only (the minimal logger)."""
    rows = rows or Rows()
    rng = random.Random(seed)
    for s in range(0, steps, every):
        for r in range(ranks):
            extra = {k: f(s) for k, f in metrics.items()}
            st = stage(s)
            if st is not None:
                extra["stage"] = st
            rows.add(float(s), r if rank_field else None, "TRAIN_STEP", step=s, loss=loss(s) + rng.gauss(0, noise),
                     lr=lr(s), **extra)
    return rows
