"""Which rank's GPU sits idle while its peers are busy?

Question: is one rank's GPU utilisation far below its peers' (the resource-layer link of the
seed's chains: rank 12 at 55% vs 95% on the others; the throttled GPU at 45%)?

Domain facts relied on:
- Seed 000 §4.2: utilisation < 60% is the anomaly threshold. Judged here against the peers at
  the same time (< 75% of the median over ranks in the same 10 s; with fewer than 3 ranks
  sampled there, the sample is not judged), and the peers must be busy (>= 60%) then: when every
  GPU is low, the cause is shared
  (network, input pipeline of the whole job) and no single rank is at fault — that case is left
  to the absolute-threshold rule and to comm_bound.
- Low utilisation is a symptom, never the verdict by itself: rootcause.py lets thermal,
  data-load skew or a straggler on the same rank explain it.
- Fewer than 3 low samples, or under 10% of a rank's samples, is noise.

Must not: decide the root cause; read columns other than rank, timestamp, gpu_util, citations.
"""
from __future__ import annotations

import polars as pl

from ..report.model import Finding
from .context import Context
from .evidence import cite, iso, num, pass_id

LOW_UTIL = 60.0
PEER_FRACTION = 0.75
MIN_SAMPLES = 3
MIN_SHARE = 0.10
BUCKET = "10s"


def find(ctx: Context) -> list[Finding]:
    lf = (
        ctx.telemetry.lazy().select("rank", "timestamp", "gpu_util", "source_file", "line")
        .filter(pl.col("rank").is_not_null() & pl.col("gpu_util").is_not_null())
        # The reference is what the peers did at the same time (a BUCKET-long window), so a phase
        # where every GPU idles together (start-up, evaluation, shutdown) blames no rank.
        .with_columns(pl.col("timestamp").dt.truncate(BUCKET).alias("_b"))
        .with_columns(
            pl.col("gpu_util").median().over("_b").alias("_ref_t"),
            pl.col("rank").n_unique().over("_b").alias("_ranks_t"),
            pl.col("gpu_util").median().alias("_ref_all"),
        )
        .with_columns(
            pl.when(pl.col("_ranks_t") >= 3).then(pl.col("_ref_t"))
            .when(pl.col("timestamp").is_null()).then(pl.col("_ref_all")).alias("ref")
        )
        .with_columns(((pl.col("gpu_util") < LOW_UTIL) & (pl.col("ref") >= LOW_UTIL)
                       & (pl.col("gpu_util") < PEER_FRACTION * pl.col("ref"))).fill_null(False).alias("low"))
    )
    low = pl.col("low")
    per_rank = (
        lf.group_by("rank")
        .agg(
            pl.len().alias("samples"),
            low.sum().alias("n_low"),
            pl.col("gpu_util").filter(low).median().alias("util_low"),
            pl.col("gpu_util").filter(~low).median().alias("util_ok"),
            pl.col("timestamp").filter(low).min().alias("first"),
            pl.col("timestamp").filter(low).max().alias("last"),
            pl.col("source_file").filter(low).sort_by(pl.col("gpu_util").filter(low)).first().alias("f"),
            pl.col("line").filter(low).sort_by(pl.col("gpu_util").filter(low)).first().alias("l"),
            pl.col("timestamp").filter(low).sort_by(pl.col("gpu_util").filter(low)).first().alias("t"),
            pl.col("gpu_util").filter(low).min().alias("util_min"),
        )
        .sort("rank")
        .collect()
    )
    if per_rank.is_empty():
        return []
    flagged = per_rank.filter((pl.col("n_low") >= MIN_SAMPLES) & (pl.col("n_low") >= MIN_SHARE * pl.col("samples")))
    if flagged.is_empty():
        return []
    peers = per_rank.filter(~pl.col("rank").is_in(flagged.get_column("rank").implode()))
    peer_util = peers.get_column("util_ok").median() if not peers.is_empty() else None
    out: list[Finding] = []
    for r in flagged.iter_rows(named=True):
        rank = int(r["rank"])
        title = (f"rank {rank} GPU utilisation {r['util_low']:.0f}%"
                 + (f" vs {peer_util:.0f}% on peers" if peer_util is not None else "")
                 + f" ({r['n_low']} of {r['samples']} samples below {LOW_UTIL:.0f}%)")
        out.append(Finding(
            rule=pass_id("utilization"), kind="gpu_underutilized", layer="resource", severity="WARN",
            ranks=[rank], title=title,
            evidence={"gpu_util": num(r["util_low"]), "gpu_util_min": num(r["util_min"]),
                      "peer_gpu_util": num(peer_util), "low_samples": int(r["n_low"]), "samples": int(r["samples"]),
                      "threshold": LOW_UTIL},
            lines=cite([{"source_file": r["f"], "line": r["l"], "rank": rank, "timestamp": r["t"],
                         "text": f"gpu_util={r['util_min']}"}], text="text"),
            first_seen=iso(r["first"]), last_seen=iso(r["last"]),
        ))
    return out
