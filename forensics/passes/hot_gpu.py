"""Which GPU runs clearly hotter than its peers under load, without throttling?

Question: does one rank's GPU sit well above the temperature of the others while they all work,
though it never reaches the point where it would slow down? That is worth a notice in the
physical layer (airflow, a fan, a slot at the back of the chassis), not a fault: a GPU that does
not lower its clocks computes as fast as its peers.

Domain facts relied on:
- Datacenter GPUs (A100/H100, `nvidia-smi -q` "GPU Slowdown Temp" / max operating temperature)
  start lowering clocks at about 85 °C; below that, heat costs no throughput (thermal.py reports
  the GPUs that did slow down: hot AND clock down, or a thermal throttle reason 0x20/0x40).
- Idle GPUs cool down, so temperatures are compared while the GPUs work (utilisation >= 50%
  where utilisation is logged): a GPU idling during start-up is not "cool", only idle.
- NVML reports whole degrees and GPUs of one node under one load spread by a few degrees with
  their position in the airflow; 5 °C above the median GPU is the least difference reported.
- It needs >= 3 GPUs with temperatures (a median of peers) and >= 3 samples under load.

Severity INFO, always: this pass never names a root cause (rootcause.py only picks WARN/ERROR).
A GPU that is also throttled is left to thermal.py.

Must not: decide the root cause; read columns other than rank, timestamp, temp_c, gpu_util,
sm_clock_mhz, throttle_reasons and the citation columns.
"""
from __future__ import annotations

import polars as pl

from ..report.model import Finding
from .context import Context
from .evidence import cite, iso, num, pass_id
from .thermal import HOT_C, THERMAL_BITS

BUSY_UTIL = 50.0
MARGIN_C = 5.0
MIN_RANKS = 3
MIN_SAMPLES = 3


def find(ctx: Context) -> list[Finding]:
    util = pl.col("gpu_util")
    lf = (
        ctx.telemetry.lazy().select("rank", "timestamp", "temp_c", "gpu_util", "sm_clock_mhz", "throttle_reasons",
                          "source_file", "line")
        .filter(pl.col("rank").is_not_null() & pl.col("temp_c").is_not_null())
        # a rank that logs utilisation is judged on its busy samples; one that does not, on all
        .filter(util.is_null().all().over("rank") | (util >= BUSY_UTIL))
    )
    hottest = pl.col("temp_c").arg_max()
    per_rank = (
        lf.group_by("rank")
        .agg(
            pl.len().alias("samples"),
            pl.col("temp_c").median().alias("temp_med"),
            pl.col("temp_c").max().alias("temp_max"),
            pl.col("sm_clock_mhz").median().alias("clock"),
            ((pl.col("throttle_reasons") & THERMAL_BITS) != 0).fill_null(False).any().alias("thermal_bits"),
            pl.col("timestamp").min().alias("first"), pl.col("timestamp").max().alias("last"),
            pl.col("source_file").get(hottest).alias("f"), pl.col("line").get(hottest).alias("l"),
            pl.col("timestamp").get(hottest).alias("t"),
        )
        .filter(pl.col("samples") >= MIN_SAMPLES)
        .sort("rank")
        .collect()
    )
    if per_rank.height < MIN_RANKS:
        return []
    ref = float(per_rank.get_column("temp_med").median())
    clock_ref = per_rank.get_column("clock").median()
    medians = {str(r): num(t) for r, t in zip(per_rank.get_column("rank").to_list(), per_rank.get_column("temp_med").to_list())}
    out: list[Finding] = []
    hot = per_rank.filter((pl.col("temp_med") - ref >= MARGIN_C) & (pl.col("temp_max") < HOT_C) & ~pl.col("thermal_bits"))
    for r in hot.iter_rows(named=True):
        rank = int(r["rank"])
        d = r["temp_med"] - ref
        clock = ("SM clock not logged" if r["clock"] is None else
                 f"SM clock {r['clock']:.0f} MHz" + (f" vs {clock_ref:.0f} MHz median" if clock_ref else ""))
        out.append(Finding(
            rule=pass_id("hot_gpu"), kind="thermal_throttling", layer="physical", severity="INFO",
            ranks=[rank],
            title=(f"rank {rank}'s GPU runs hotter than its peers: {r['temp_med']:.0f} °C median under load "
                   f"(max {r['temp_max']:.0f} °C) vs {ref:.0f} °C on the median GPU, +{d:.0f} °C; below the "
                   f"~{HOT_C:.0f} °C slowdown point, no thermal throttle reason, {clock}: not throttled — "
                   "a cooling note, not a fault"),
            evidence={"temp_c_median": num(r["temp_med"]), "temp_c_max": num(r["temp_max"]), "peer_temp_c_median": num(ref),
                      "margin_c": num(d), "throttled": False, "sm_clock_mhz": num(r["clock"]),
                      "samples_under_load": int(r["samples"]), "busy_util": BUSY_UTIL, "slowdown_c": HOT_C,
                      "temp_c_median_per_rank": medians},
            lines=cite([{"source_file": r["f"], "line": r["l"], "rank": rank, "timestamp": r["t"],
                         "text": f"hottest sample: {r['temp_max']:.0f} °C"}], text="text"),
            first_seen=iso(r["first"]), last_seen=iso(r["last"]),
        ))
    return out
