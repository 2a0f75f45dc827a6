"""Synthetic seed-schema logs at GB scale, for the query benchmarks (bench/queries.py).

Owns one thing: writing realistic multi-rank JSONL (one file per rank under one folder per host)
with a known ground truth (host clock offsets, a data-starved straggler, a rank that dies, the
NCCL timeouts that follow). It must not ingest or query; bench/queries.py does that.

The event mix follows the seeds: per step DATA_LOAD_TIME, GRAD_READY, ALLREDUCE, TRAIN_STEP;
GPU_STATS every 5 steps; an occasional GRAD_NORM WARN. Collective timing is physical: every rank
leaves the allreduce at the same instant (the last arrival + transfer), so comm_ms and wait_ms
follow from the arrivals, and the logged timestamps carry each host's clock offset.

    python bench/_gen.py OUT_DIR --gb 2 [--ranks 64 --hosts 8]
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import time
from pathlib import Path

import numpy as np
import polars as pl

T0 = dt.datetime(2025, 6, 12, 2, 0, 0, tzinfo=dt.timezone.utc)
BYTES_PER_STEP_RANK = 1000     # measured: ~4.2 lines of ~235 bytes per (step, rank)


def _fmt(template: str, *args: str | pl.Expr) -> pl.Expr:
    """Fill the `{}` holes of a JSON template with columns (pl.format reads braces as names)."""
    pieces = template.split("{}")
    assert len(pieces) == len(args) + 1, template
    parts: list[pl.Expr] = []
    for lit, a in zip(pieces, [*args, None]):
        if lit:
            parts.append(pl.lit(lit))
        if a is not None:
            parts.append((pl.col(a) if isinstance(a, str) else a).cast(pl.String))
    return pl.concat_str(parts)


def _iso(col: str) -> pl.Expr:
    return pl.col(col).dt.to_string("%Y-%m-%dT%H:%M:%S%.3fZ")


def generate(out: str | os.PathLike[str], *, ranks: int = 64, hosts: int = 8, gb: float = 2.0,
             steps: int | None = None, straggler: int = 12, dead_rank: int = 5, seed: int = 0) -> dict:
    """Write the logs; return the ground truth (offsets, straggler, dead rank, steps)."""
    rng = np.random.default_rng(seed)
    straggler, dead_rank = straggler % ranks, dead_rank % ranks
    out = Path(out)
    n_steps = steps or max(20, int(gb * 1e9 / BYTES_PER_STEP_RANK / ranks))
    per_host = max(1, ranks // hosts)
    host_of = np.minimum(np.arange(ranks) // per_host, hosts - 1)
    # Clock offsets of hosts (s): most within a few ms, two hosts far off.
    offsets = rng.normal(0, 0.002, hosts)
    if hosts > 3:
        offsets[3] = 0.250
    if hosts > 5:
        offsets[5] = -0.120

    data = rng.gamma(8.0, 2.5, (n_steps, ranks))                 # ~20 ms
    data[:, straggler] = rng.gamma(18.0, 10.0, n_steps)          # ~180 ms: HDD-backed shard (seed 4.4)
    compute = rng.normal(600.0, 15.0, (n_steps, ranks))
    arrival_rel = data + compute                                 # ms after step start
    last = arrival_rel.max(axis=1)
    transfer = rng.normal(95.0, 5.0, n_steps)
    end_rel = last + transfer                                    # all ranks leave together
    period = end_rel + 5.0
    start = np.concatenate([[0.0], np.cumsum(period)[:-1]])      # ms since T0
    comm = end_rel[:, None] - arrival_rel
    wait = last[:, None] - arrival_rel
    step_time = end_rel[:, None] + 2.0 + np.zeros((1, ranks))

    out.mkdir(parents=True, exist_ok=True)
    t_us0 = int(T0.timestamp() * 1e6)
    total = 0
    death_step = n_steps - 1
    for r in range(ranks):
        h = int(host_of[r])
        off_us = int(offsets[h] * 1e6)
        s0 = start * 1000 + t_us0 + off_us                      # host clock, us
        k = np.arange(n_steps)
        base = pl.DataFrame({
            "step": k, "rank": r,
            "t_data": (s0 + data[:, r] * 1000).astype(np.int64),
            "t_ready": (s0 + arrival_rel[:, r] * 1000).astype(np.int64),
            "t_end": (s0 + end_rel * 1000).astype(np.int64),
            "t_step": (s0 + (end_rel + 2.0) * 1000).astype(np.int64),
            "data": data[:, r].round(1), "comm": comm[:, r].round(1), "wait": wait[:, r].round(1),
            "step_time": step_time[:, r].round(1),
            "disk": np.where(r == straggler, rng.normal(40, 4, n_steps), rng.normal(1200, 60, n_steps)).round(0),
            "loss": (2.9 * np.exp(-k / (n_steps * 0.7)) + rng.normal(0, 0.03, n_steps)).round(4),
            "util": np.where(r == straggler, rng.normal(55, 3, n_steps), rng.normal(96, 1.5, n_steps)).round(1),
            "temp": rng.normal(68, 2, n_steps).round(1),
        }).with_columns(
            pl.col("^t_.*$").cast(pl.Datetime("us", "UTC")),
            pl.lit(f"node{h}").alias("host"),
        )
        if r == dead_rank:
            # the process dies during the data load of the last step: nothing more from it
            base = base.filter(pl.col("step") < death_step)
        lr = pl.when(pl.col("step") < 2000).then(pl.col("step") * 6e-8 + 1e-6).otherwise(1.2e-4)
        stage = pl.when(pl.col("step") < 2000).then(pl.lit("warmup")).otherwise(pl.lit("stable"))
        frames = [
            base.select(pl.col("t_data").alias("ts"), pl.lit(0).alias("o"), _fmt(
                '"level": "INFO", "event": "DATA_LOAD_TIME", "message": "step={} batch fetched", '
                '"extra": {"data_load_ms": {}, "disk_read_mbps": {}}}', "step", "data", "disk").alias("body"), "rank", "host"),
            base.select(pl.col("t_ready").alias("ts"), pl.lit(1).alias("o"), _fmt(
                '"level": "INFO", "event": "GRAD_READY", "message": "step={}", "extra": {"grad_ready_ts": {}}}',
                "step", (pl.col("t_ready").dt.epoch("us") / 1e6).round(6)).alias("body"), "rank", "host"),
            base.filter(pl.col("step") < death_step).select(pl.col("t_end").alias("ts"), pl.lit(2).alias("o"), _fmt(
                '"level": "INFO", "event": "ALLREDUCE", "message": "step={} allreduce done", '
                '"extra": {"comm_ms": {}, "wait_ms": {}, "collective": "allreduce", "tensor_size_mb": 512}}',
                "step", "comm", "wait").alias("body"), "rank", "host"),
            base.filter(pl.col("step") < death_step).select(pl.col("t_step").alias("ts"), pl.lit(3).alias("o"), _fmt(
                '"level": "INFO", "event": "TRAIN_STEP", "message": "step={} loss={} lr={}", '
                '"extra": {"step_time_ms": {}, "samples_per_s": {}, "stage": "{}"}}',
                "step", "loss", lr.round(9), "step_time", (pl.lit(32000.0) / pl.col("step_time")).round(1), stage).alias("body"), "rank", "host"),
            base.filter(pl.col("step") % 5 == 0).select((pl.col("t_data") - pl.duration(milliseconds=1)).alias("ts"), pl.lit(4).alias("o"), _fmt(
                '"level": "INFO", "event": "GPU_STATS", "message": "gpu stats", '
                '"extra": {"gpu_util": {}, "mem_alloc": 40500, "temp_c": {}, "sm_clock_mhz": 1410}}',
                "util", "temp").alias("body"), "rank", "host"),
            base.filter(pl.col("step") % 997 == 13).select((pl.col("t_step") + pl.duration(milliseconds=1)).alias("ts"), pl.lit(5).alias("o"), _fmt(
                '"level": "WARN", "event": "GRAD_NORM", "message": "grad_norm={} exceeds threshold=10.0", '
                '"extra": {"param_group": "embedding"}}', (pl.col("loss") * 20).round(2)).alias("body"), "rank", "host"),
        ]
        if r != dead_rank:
            # every surviving rank blocks in the last allreduce until the NCCL watchdog fires
            tt = base.filter(pl.col("step") == death_step).select(
                (pl.col("t_ready") + pl.duration(seconds=1800)).alias("ts"), pl.lit(6).alias("o"), _fmt(
                    '"level": "ERROR", "event": "NCCL_TIMEOUT", "message": "rank={} waiting on rank={} for 1800s", '
                    '"extra": {"collective": "allreduce", "tensor_size_mb": 512, "timeout_s": 1800}}',
                    "rank", pl.lit(dead_rank)).alias("body"), "rank", "host")
            frames.append(tt)
        ev = pl.concat(frames).sort("ts", "o").select(
            pl.concat_str(_fmt('{"timestamp": "{}", "rank": {}, "host": "{}", ', _iso("ts"), "rank", "host"),
                          pl.col("body")).alias("line"))
        path = out / f"node{h}" / f"rank_{r:02d}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w") as f:
            f.write("\n".join(ev["line"].to_list()))
            f.write("\n")
        total += path.stat().st_size
    truth = {
        "ranks": ranks, "hosts": hosts, "steps": n_steps, "straggler": straggler, "dead_rank": dead_rank,
        "death_step": death_step, "host_offsets_ms": {f"node{h}": round(float(offsets[h]) * 1000, 3) for h in range(hosts)},
        "bytes": total,
    }
    # beside the log folder, not in it: ingest would read it as a log
    out.with_name(out.name + ".truth.json").write_text(json.dumps(truth, indent=1))
    return truth


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--gb", type=float, default=2.0)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--steps", type=int, default=None)
    a = ap.parse_args()
    t = time.perf_counter()
    truth = generate(a.out, ranks=a.ranks, hosts=a.hosts, gb=a.gb, steps=a.steps)
    print(f"wrote {truth['bytes'] / 1e9:.2f} GB ({truth['ranks']} ranks, {truth['steps']} steps) "
          f"in {time.perf_counter() - t:.1f} s to {a.out}")


if __name__ == "__main__":
    main()
