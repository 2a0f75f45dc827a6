"""Which GPU throttles for heat, and what that did to its clock and utilisation?

Question: is a rank's GPU thermally throttled (the physical root of the seed's cascade: 92 °C ->
SM clock 1.2 GHz -> utilisation 45% -> its peers wait in every all-reduce)?

Domain facts relied on:
- NVML/DCGM clock-event (throttle) reasons are a bitmask; HW_THERMAL_SLOWDOWN is 0x40 and
  SW_THERMAL_SLOWDOWN is 0x20 (0x4 is SW_POWER_CAP, not a thermal reason).
- Datacenter GPUs report a max operating temperature of about 85 °C (nvidia-smi -q, A100/H100);
  above it the driver lowers clocks. A hot sample counts as throttled only when the SM clock is
  also down (<= 85% of the run's median SM clock): heat alone is not yet a slowdown.
- A rank throttled in fewer than 3 samples is noise, not a fault (sampling every ~5 s, seed 4.2).

Must not: decide the root cause (rootcause.py), read columns other than those below.
"""
from __future__ import annotations

import polars as pl

from ..report.model import Finding
from .context import Context
from .evidence import cite, iso, num, pass_id

HW_THERMAL = 0x40
SW_THERMAL = 0x20
THERMAL_BITS = HW_THERMAL | SW_THERMAL
REASONS = {0x1: "GPU_IDLE", 0x2: "APP_CLOCKS", 0x4: "SW_POWER_CAP", 0x8: "HW_SLOWDOWN", 0x10: "SYNC_BOOST",
           0x20: "SW_THERMAL", 0x40: "HW_THERMAL", 0x80: "HW_POWER_BRAKE", 0x100: "DISPLAY_CLOCKS"}
HOT_C = 85.0
CLOCK_DROP = 0.85
MIN_SAMPLES = 3


def decode_reasons(mask: int | None) -> list[str]:
    if mask is None:
        return []
    return [name for bit, name in REASONS.items() if mask & bit]


def find(ctx: Context) -> list[Finding]:
    lf = (
        ctx.telemetry.lazy().select("rank", "timestamp", "temp_c", "sm_clock_mhz", "throttle_reasons", "gpu_util",
                          "source_file", "line")
        .filter(pl.col("rank").is_not_null()
                & (pl.col("temp_c").is_not_null() | pl.col("sm_clock_mhz").is_not_null()
                   | pl.col("throttle_reasons").is_not_null()))
        .with_columns(pl.col("sm_clock_mhz").median().alias("ref_clock"))
        .with_columns(
            (((pl.col("throttle_reasons") & THERMAL_BITS) != 0).fill_null(False)
             | ((pl.col("temp_c") >= HOT_C) & (pl.col("sm_clock_mhz") <= CLOCK_DROP * pl.col("ref_clock"))).fill_null(False)
             ).alias("throttled")
        )
    )
    thr = pl.col("throttled")
    per_rank = (
        lf.group_by("rank")
        .agg(
            pl.len().alias("samples"),
            thr.sum().alias("n_throttled"),
            pl.col("timestamp").filter(thr).min().alias("first"),
            pl.col("timestamp").filter(thr).max().alias("last"),
            pl.col("temp_c").filter(thr).max().alias("temp_max"),
            pl.col("temp_c").filter(thr).median().alias("temp_med"),
            pl.col("sm_clock_mhz").filter(thr).median().alias("clock_med"),
            pl.col("sm_clock_mhz").filter(thr).min().alias("clock_min"),
            pl.col("gpu_util").filter(thr).median().alias("util_thr"),
            pl.col("gpu_util").filter(~thr).median().alias("util_ok"),
            pl.col("sm_clock_mhz").filter(~thr).median().alias("clock_ok"),
            pl.col("temp_c").filter(~thr).median().alias("temp_ok"),
            pl.col("throttle_reasons").filter(thr).drop_nulls().bitwise_or().alias("reasons"),
            pl.col("source_file").filter(thr).sort_by(pl.col("temp_c").filter(thr).fill_null(0.0)).last().alias("f_hot"),
            pl.col("line").filter(thr).sort_by(pl.col("temp_c").filter(thr).fill_null(0.0)).last().alias("l_hot"),
            pl.col("timestamp").filter(thr).sort_by(pl.col("temp_c").filter(thr).fill_null(0.0)).last().alias("t_hot"),
            pl.col("source_file").filter(thr).first().alias("f_first"),
            pl.col("line").filter(thr).first().alias("l_first"),
            pl.col("timestamp").filter(thr).first().alias("t_start"),
        )
        .sort("rank")
        .collect()
    )
    if per_rank.is_empty():
        return []
    hot = per_rank.filter(pl.col("n_throttled") >= MIN_SAMPLES)
    if hot.is_empty():
        return []
    cool = per_rank.filter(pl.col("n_throttled") < MIN_SAMPLES)
    peer_clock = cool.get_column("clock_ok").median() if not cool.is_empty() else None
    peer_util = cool.get_column("util_ok").median() if not cool.is_empty() else None
    peer_temp = cool.get_column("temp_ok").median() if not cool.is_empty() else None

    out: list[Finding] = []
    for r in hot.iter_rows(named=True):
        rank = int(r["rank"])
        reasons = decode_reasons(r["reasons"])
        ref_clock = peer_clock if peer_clock is not None else r["clock_ok"]
        parts = [f"rank {rank} is thermally throttled: {r['temp_max']:.0f} °C" if r["temp_max"] is not None
                 else f"rank {rank} is thermally throttled"]
        if r["clock_med"] is not None:
            parts.append(f"SM clock {r['clock_med']:.0f} MHz" + (f" vs {ref_clock:.0f} MHz on peers" if ref_clock else ""))
        if reasons:
            parts.append("throttle reasons " + "|".join(reasons))
        if r["util_thr"] is not None:
            parts.append(f"its GPU utilisation {r['util_thr']:.0f}%" + (f" vs {peer_util:.0f}%" if peer_util is not None else ""))
        title = ", ".join(parts) + f" ({r['n_throttled']} of {r['samples']} samples)"
        out.append(Finding(
            rule=pass_id("thermal"), kind="thermal_throttling", layer="physical", severity="WARN",
            ranks=[rank], title=title,
            evidence={
                "temp_c_max": num(r["temp_max"]), "temp_c_median": num(r["temp_med"]), "peer_temp_c": num(peer_temp),
                "sm_clock_mhz": num(r["clock_med"]), "sm_clock_mhz_min": num(r["clock_min"]),
                "peer_sm_clock_mhz": num(ref_clock), "gpu_util": num(r["util_thr"]), "peer_gpu_util": num(peer_util),
                "throttle_reasons": reasons, "throttle_mask": r["reasons"],
                "throttled_samples": int(r["n_throttled"]), "samples": int(r["samples"]),
                "hot_threshold_c": HOT_C,
            },
            lines=cite([
                {"source_file": r["f_first"], "line": r["l_first"], "rank": rank, "timestamp": r["t_start"],
                 "text": "first throttled sample"},
                {"source_file": r["f_hot"], "line": r["l_hot"], "rank": rank, "timestamp": r["t_hot"],
                 "text": "hottest sample"},
            ], text="text"),
            first_seen=iso(r["first"]), last_seen=iso(r["last"]),
        ))
    return out


__all__ = ["find", "decode_reasons", "HW_THERMAL"]
