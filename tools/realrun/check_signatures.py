#!/usr/bin/env python3
"""Check that each realrun fixture really carries the signature of its injected fault.

    python tools/realrun/check_signatures.py tests/fixtures/realrun            # all scenarios
    python tools/realrun/check_signatures.py tests/fixtures/realrun/straggler  # one

Reads rank_*.jsonl with plain json (NaN tokens allowed, as Python wrote them) into polars,
prints per-rank medians and asserts the scenario's signature. Exit 1 if any check fails.
This is a check of the fixtures, not of `forensics`.
"""
from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

import polars as pl

COLS = ["data_load_ms", "disk_read_mbps", "compute_ms", "wait_ms", "xfer_ms", "comm_ms",
        "peer_lag_ms", "step_time_ms"]


def load(d: Path) -> pl.DataFrame:
    rows = []
    for f in sorted(d.glob("rank_*.jsonl")):
        for ln in f.read_text().splitlines():
            r = json.loads(ln)
            ex = r.pop("extra")
            rows.append({**r, **{k: v for k, v in ex.items() if not isinstance(v, (dict, list))}})
    return pl.from_dicts(rows, infer_schema_length=None)


pl.Config(tbl_cols=-1, tbl_width_chars=220, tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True)


def medians(df: pl.DataFrame, where: pl.Expr | None = None) -> pl.DataFrame:
    d = df if where is None else df.filter(where)
    have = [c for c in COLS if c in d.columns]
    return (d.filter(pl.col("step") >= 1)  # step 0 carries one-off warm-up costs
             .group_by("rank").agg([pl.col(c).median().round(2) for c in have]).sort("rank"))


def med(m: pl.DataFrame, rank: int, col: str) -> float:
    return m.filter(pl.col("rank") == rank)[col].item()


def check(d: Path) -> list[str]:
    exp = tomllib.loads((d / "expected.toml").read_text())
    name = d.name
    df = load(d)
    m = medians(df)
    print(f"\n== {name}  (root_cause={exp['expect']['root_cause']} ranks={exp['expect']['ranks']})")
    print(m)
    fails: list[str] = []

    def need(cond: bool, what: str) -> None:
        print(f"  [{'ok' if cond else 'FAIL'}] {what}")
        if not cond:
            fails.append(f"{name}: {what}")

    ranks = sorted(m["rank"].to_list())
    others = lambda r: [x for x in ranks if x != r]  # noqa: E731
    errors = df.filter(pl.col("level") == "ERROR")
    if name == "healthy":
        need(errors.height == 0, "no ERROR lines")
        w = m["wait_ms"]
        need(w.max() < 5 * max(w.min(), 1.0), "wait_ms medians within 5x of each other")
    elif name == "straggler":
        r = 2
        need(med(m, r, "compute_ms") > max(med(m, o, "compute_ms") for o in others(r)) + 25,
             "rank 2 compute_ms median > others + 25 ms")
        need(med(m, r, "wait_ms") < min(med(m, o, "wait_ms") for o in others(r)),
             "rank 2 wait_ms median is the smallest")
        need(min(med(m, o, "wait_ms") for o in others(r)) > 25, "others wait > 25 ms")
    elif name == "data_skew":
        r = 1
        need(med(m, r, "data_load_ms") > 10 * max(med(m, o, "data_load_ms") for o in others(r)),
             "rank 1 data_load_ms median > 10x others")
        need(med(m, r, "disk_read_mbps") < 0.1 * min(med(m, o, "disk_read_mbps") for o in others(r)),
             "rank 1 disk_read_mbps < 0.1x others")
        need(med(m, r, "wait_ms") < min(med(m, o, "wait_ms") for o in others(r)),
             "rank 1 wait_ms median is the smallest")
    elif name == "thermal":
        r = 3
        late = medians(df, pl.col("step") >= 40)
        early = medians(df, pl.col("step") < 40)
        print("  steps >= 40:"); print(late)
        need(med(late, r, "compute_ms") > med(early, r, "compute_ms") + 30,
             "rank 3 compute_ms rises by > 30 ms from step 40")
        need(med(late, r, "wait_ms") < min(med(late, o, "wait_ms") for o in others(r)),
             "rank 3 wait_ms smallest after step 40")
        need(min(med(late, o, "wait_ms") for o in others(r))
             > max(med(early, o, "wait_ms") for o in others(r)) + 25,
             "others' wait_ms grows by > 25 ms after step 40")
        gs = df.filter(pl.col("event") == "GPU_STATS", pl.col("step") >= 40)
        hot = gs.filter(pl.col("rank") == r)
        cool = gs.filter(pl.col("rank") != r)
        need(hot["temp_c"].min() > 88 and cool["temp_c"].max() < 70, "rank 3 hot, others cool")
        need(hot["sm_clock_mhz"].max() < 1300 < cool["sm_clock_mhz"].min(), "rank 3 clock low")
    elif name in ("rank_dies", "rank_dies_fast"):
        oom = errors.filter(pl.col("event") == "CUDA_OOM")
        to = errors.filter(pl.col("event") == "NCCL_TIMEOUT")
        need(oom["rank"].to_list() == [1], "exactly one CUDA_OOM, on rank 1")
        need(sorted(to["rank"].to_list()) == [0, 2, 3], "NCCL_TIMEOUT on ranks 0, 2, 3")
        need(oom["timestamp"].min() <= to["timestamp"].min(), "OOM logged before any timeout")
        if name == "rank_dies":
            need(to["elapsed_ms"].min() >= 5000 and set(to["reason"]) == {"timeout"},
                 "survivors really timed out (>= 5 s)")
        else:
            need(to["elapsed_ms"].max() < 2000 and set(to["reason"]) == {"peer_closed"},
                 "survivors saw the closed connection (< 2 s)")
        print(to.select("rank", "timestamp", "elapsed_ms", "reason", "message"))
    elif name == "hang":
        r = 3
        last = df.filter(pl.col("event") == "TRAIN_STEP").group_by("rank").agg(pl.col("step").max())
        print(last.sort("rank"))
        need(last.filter(pl.col("rank") == r)["step"].item() == 44, "rank 3 last TRAIN_STEP is 44")
        to = errors.filter(pl.col("event") == "NCCL_TIMEOUT")
        need(sorted(to["rank"].to_list()) == [0, 1, 2], "NCCL_TIMEOUT on ranks 0, 1, 2")
        need(errors.filter(pl.col("rank") == r).height == 0, "rank 3 logs no error")
        lastts = df.group_by("rank").agg(pl.col("timestamp").max()).sort("timestamp")
        need(lastts["rank"][0] == r, "rank 3 went silent first")
        print(to.select("rank", "timestamp", "elapsed_ms", "message"))
    elif name == "grad_spike":
        ts = df.filter(pl.col("event") == "TRAIN_STEP")
        before = ts.filter(pl.col("step").is_between(50, 59))["loss"].median()
        peak = ts.filter(pl.col("step").is_between(60, 70))["loss"].fill_nan(1e30).max()
        after = ts.filter(pl.col("step") >= 70)["loss"].fill_nan(1e30).median()
        print(f"  loss median steps 50-59: {before:.4g}, max 60-70: {peak:.4g}, median >= 70: {after:.4g}")
        need(peak > 100 * before, "loss spikes > 100x after the lr spike")
        need(after > before, "loss stays above its pre-spike level")
        gw = df.filter(pl.col("event") == "GRAD_NORM")
        need(gw.height > 0 and gw["step"].min() >= 60, "GRAD_NORM WARNs only from step 60")
    elif name == "lora_vanishing":
        ts = df.filter(pl.col("event") == "TRAIN_STEP")
        a = ts["grad_norm_adapter"].median()
        b = ts["grad_norm_backbone"].max()
        l0 = ts.filter(pl.col("step") < 10)["loss"].mean()
        l1 = ts.filter(pl.col("step") >= ts["step"].max() - 9)["loss"].mean()
        print(f"  grad_norm_adapter median {a:.3g}, backbone max {b}, loss {l0:.4f} -> {l1:.4f}")
        need(a < 1e-4, "adapter grad norm tiny")
        need(b == 0.0, "backbone grad norm 0.0")
        need(abs(l0 - l1) < 0.05, "loss plateaus")
    return fails


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/realrun")
    dirs = [root] if (root / "expected.toml").exists() else sorted(
        p for p in root.iterdir() if (p / "expected.toml").exists())
    fails = [f for d in dirs for f in check(d)]
    print("\n" + ("all signatures present" if not fails else "FAILED:\n  " + "\n  ".join(fails)))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
