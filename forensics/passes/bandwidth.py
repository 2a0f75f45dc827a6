"""Does one rank's PCIe or NVLink link run far below its peers'?

Question: is a rank's interconnect throughput (pcie_mbps, nvlink_mbps) below 30% of what the
other ranks achieve — a degraded link (a PCIe slot trained at x4, an NVLink down) that makes the
rank slow in every collective?

Domain facts relied on:
- Seed 000 §4.2: bandwidth < 30% of the theoretical value is the anomaly threshold. The logs do
  not carry the theoretical value, so the peers' median is used as what the hardware can do.
- A whole job at low bandwidth is not a per-rank link fault (it is comm_bound's question); at
  least 3 low samples are needed.

Must not: decide the root cause; read columns other than those below.
"""
from __future__ import annotations

import polars as pl

from ..report.model import Finding
from .context import Context
from .evidence import cite, iso, num, pass_id

SHARE = 0.30
MIN_SAMPLES = 3


def find(ctx: Context) -> list[Finding]:
    out: list[Finding] = []
    cols = ["pcie_mbps", "nvlink_mbps"]
    frames = pl.collect_all([
        ctx.events.select("rank", "timestamp", c, "source_file", "line")
        .filter(pl.col("rank").is_not_null() & pl.col(c).is_not_null() & (pl.col(c) >= 0))
        .with_columns(pl.col(c).median().over("rank").alias("rank_med"))
        .with_columns(pl.col("rank_med").median().alias("ref"))
        .with_columns((pl.col(c) < SHARE * pl.col("ref")).alias("low"))
        .group_by("rank")
        .agg(pl.col("low").sum().alias("n_low"), pl.col(c).filter(pl.col("low")).median().alias("value"),
             pl.col("ref").first(), pl.col("timestamp").filter(pl.col("low")).min().alias("first"),
             pl.col("timestamp").filter(pl.col("low")).max().alias("last"),
             pl.col("source_file").filter(pl.col("low")).first().alias("source_file"),
             pl.col("line").filter(pl.col("low")).first().alias("line"),
             pl.col("timestamp").filter(pl.col("low")).first().alias("timestamp"))
        .filter(pl.col("n_low") >= MIN_SAMPLES)
        .sort("rank")
        for c in cols
    ])
    for c, df in zip(cols, frames):
        if df.is_empty() or df.height * 2 > max(len(ctx.ranks), 1):
            continue  # half the job or more is low: not one rank's link
        link = "PCIe" if c.startswith("pcie") else "NVLink"
        for r in df.iter_rows(named=True):
            rank = int(r["rank"])
            out.append(Finding(
                rule=pass_id("bandwidth"), kind="low_bandwidth", layer="physical", severity="WARN", ranks=[rank],
                title=(f"rank {rank} {link} throughput {r['value']:.0f} MB/s vs {r['ref']:.0f} MB/s on peers "
                       f"(< {SHARE:.0%}, {r['n_low']} samples)"),
                evidence={"link": link, "mbps": num(r["value"]), "peer_mbps": num(r["ref"]), "low_samples": int(r["n_low"]),
                          "threshold_share": SHARE},
                lines=cite([r]), first_seen=iso(r["first"]), last_seen=iso(r["last"]),
            ))
    return out
