"""Synthetic multi-rank runs at benchmark scale: the seed schema with the event mix of a real run.

Shared by the bench scripts (not by tests). Deterministic for given arguments; written once and
cached under bench/out/.
"""
from __future__ import annotations

import datetime as dt
import random
from pathlib import Path

import orjson

T0 = dt.datetime(2025, 6, 12, 14, 0, 0, tzinfo=dt.timezone.utc).timestamp()


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def write_rank(path: Path, rank: int, steps: int, ranks: int, seed: int = 0) -> int:
    """One rank's JSONL: per step DATA_LOAD_TIME, GRAD_READY, 3 ALLREDUCE buckets, TRAIN_STEP;
    GPU_STATS every 10 steps, CHECKPOINT every 500, a rare GRAD_NORM warning, and on the last
    step of the last rank an NCCL_TIMEOUT whose extra keys appear nowhere else."""
    rnd = random.Random(seed * 100_003 + rank)
    host = f"node{rank // 8}"
    t = T0 + rnd.random() * 0.01
    out = bytearray()
    dumps = orjson.dumps
    for step in range(steps):
        data_ms = 20 + rnd.random() * 4 + (160 if rank == 12 else 0)
        out += dumps({"timestamp": _iso(t), "rank": rank, "host": host, "level": "INFO", "event": "DATA_LOAD_TIME",
                      "message": f"step={step}", "extra": {"step": step, "data_load_ms": round(data_ms, 3),
                                                           "disk_read_mbps": 1200.0 if rank != 12 else 40.0}}) + b"\n"
        t += data_ms / 1000
        compute = 0.21 + rnd.random() * 0.01
        t += compute
        out += dumps({"timestamp": _iso(t), "rank": rank, "host": host, "level": "INFO", "event": "GRAD_READY",
                      "message": "", "extra": {"step": step, "grad_ready_ts": round(t, 6)}}) + b"\n"
        for b in range(3):
            comm = 0.012 + rnd.random() * 0.003
            wait = rnd.random() * 0.002
            t += comm
            out += dumps({"timestamp": _iso(t), "rank": rank, "host": host, "level": "INFO", "event": "ALLREDUCE",
                          "message": f"bucket={b}", "extra": {"step": step, "comm_ms": round(comm * 1000, 3),
                                                              "wait_ms": round(wait * 1000, 3), "collective": "allreduce",
                                                              "tensor_size_mb": 128}}) + b"\n"
        loss = 3.0 * (0.999 ** step) + rnd.random() * 0.05
        out += dumps({"timestamp": _iso(t), "rank": rank, "host": host, "level": "INFO", "event": "TRAIN_STEP",
                      "message": f"step={step} loss={loss:.4f} lr=1.2e-4",
                      "extra": {"step_time_ms": round((t - T0) * 1000 / (step + 1), 3), "samples_per_s": 1200.0,
                                "stage": "warmup" if step < 100 else "stable"}}) + b"\n"
        if step % 10 == 0:
            out += dumps({"timestamp": _iso(t), "rank": rank, "host": host, "level": "INFO", "event": "GPU_STATS",
                          "message": "", "extra": {"gpu_util": 97.0 + rnd.random(), "mem_alloc_mb": 40500,
                                                   "temp_c": 65 + rnd.random() * 3, "sm_clock_mhz": 1980,
                                                   "pcie_mbps": 12000.0}}) + b"\n"
        if step % 500 == 499:
            out += dumps({"timestamp": _iso(t), "rank": rank, "host": host, "level": "INFO", "event": "CHECKPOINT",
                          "message": f"saved step {step}", "extra": {"step": step, "path": f"/ckpt/{step}", "duration": 4.2}}) + b"\n"
        if rnd.random() < 0.0005:
            out += dumps({"timestamp": _iso(t), "rank": rank, "host": host, "level": "WARN", "event": "GRAD_NORM",
                          "message": "grad_norm=45.6 exceeds threshold=10.0", "extra": {"param_group": "embedding"}}) + b"\n"
    if rank == ranks - 1:
        out += dumps({"timestamp": _iso(t + 1800), "rank": rank, "host": host, "level": "ERROR", "event": "NCCL_TIMEOUT",
                      "message": f"rank={rank} waiting on rank=12 for 1800s",
                      "extra": {"collective": "allreduce", "tensor_size_mb": 512, "seq_num": 987654,
                                "watchdog_rare_key": "only here"}}) + b"\n"
    path.write_bytes(out)
    return len(out)


def dataset(root: Path, ranks: int = 64, steps: int = 2000, seed: int = 0) -> Path:
    """Write (once) `ranks` per-rank files; ~2.9 KB per rank-step, so 64 x 5500 steps ~ 1 GB."""
    d = root / f"run_r{ranks}_s{steps}_seed{seed}"
    done = d / ".complete"
    if done.exists():
        return d
    d.mkdir(parents=True, exist_ok=True)
    for r in range(ranks):
        write_rank(d / f"rank_{r:05d}.jsonl", r, steps, ranks, seed)
    done.write_text("ok")
    return d


def one_line_files(root: Path, n: int = 100_000, per_dir: int = 1000) -> Path:
    """Write (once) `n` files of one JSON line each (~130 bytes: ~13 MB for 100,000), `per_dir`
    to a folder, file i the TRAIN_STEP of rank i % 4096 at step i // 4096: the many-tiny-files
    case (an ingest cost that grows with files, not bytes)."""
    d = root / f"one_line_n{n}"
    done = d / ".complete"
    if done.exists():
        return d
    for i in range(n):
        sub = d / f"d{i // per_dir:04d}"
        if i % per_dir == 0:
            sub.mkdir(parents=True, exist_ok=True)
        rank, step = i % 4096, i // 4096
        line = orjson.dumps({"timestamp": _iso(T0 + step * 0.3 + rank * 1e-4), "rank": rank, "host": f"node{rank // 8}",
                             "level": "INFO", "event": "TRAIN_STEP", "message": f"step={step}",
                             "extra": {"step": step, "loss": 2.5}}) + b"\n"
        (sub / f"rank_{rank:05d}_step{step:03d}.jsonl").write_bytes(line)
    done.write_text("ok")
    return d
