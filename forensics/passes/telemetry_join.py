"""Can the GPU telemetry be read per rank?

Question: are there GPU samples (nvidia-smi / DCGM rows, or any row with GPU metrics) that name
a GPU — a host and a local GPU index — but no rank, so every per-rank pass (thermal, utilisation,
hot GPU) silently skips them?

Domain facts relied on:
- A telemetry file says which GPU of which host a sample is from, never which rank ran there
  (forensics/ingest/telemetry.py decides this on purpose): GPU index == rank only on a one-node
  job whose launcher placed rank i on GPU i, which the file cannot show. Only a map given by
  the user (`--gpu-map HOST:GPU=RANK`) joins them.
- Unjoined telemetry is not "nothing wrong": it is evidence nobody looked at. So it is a finding
  (WARN, about the logs: rootcause.py never makes it the root cause) that says how many rows were
  left out, which GPUs they come from, and the exact option that joins them.

Must not: guess a rank for a GPU, or judge the samples themselves (thermal.py, hot_gpu.py do).
"""
from __future__ import annotations

import polars as pl

from .. import host_names
from ..report.model import Finding
from .context import Context
from .evidence import cite, iso, pass_id

GPU_METRICS = ["temp_c", "gpu_util", "sm_clock_mhz", "power_w", "throttle_reasons"]
# how many GPUs the option example lists before "…" (the evidence keeps them all)
SHOWN = 16


def _unjoined(ctx: Context) -> pl.LazyFrame:
    present = [c for c in GPU_METRICS if c in ctx.events.collect_schema().names()]
    is_gpu = pl.col("event").is_in(["GPU_STATS"]) | pl.any_horizontal(*(pl.col(c).is_not_null() for c in present))
    return (
        ctx.events.select("rank", "host", "local_rank", "event", "timestamp", "source_file", "line", *present)
        .filter(pl.col("rank").is_null() & pl.col("local_rank").is_not_null() & is_gpu)
        .group_by("host", "local_rank")
        .agg(pl.len().alias("rows"), pl.col("timestamp").min().alias("first"), pl.col("timestamp").max().alias("last"),
             pl.col("source_file").sort_by("line").first(), pl.col("line").min())
        .sort("host", "local_rank", nulls_last=False)
    )


def gpu_map_hint(gpus: list[tuple[str | None, int]]) -> str:
    """The `--gpu-map` options that would join these GPUs, with RANK to be filled in."""
    opts = [f"--gpu-map {h + ':' if h else ''}{g}=RANK" for h, g in gpus[:SHOWN]]
    return " ".join(opts) + (" …" if len(gpus) > SHOWN else "")


def _logs_arg(ctx: Context) -> str:
    """The logs to name in the command (`--gpu-map` applies when raw logs are read, so the command
    names logs, never the store)."""
    from ..run import source_args

    return source_args(ctx.run) if ctx.run is not None else "LOGS"


def find(ctx: Context) -> list[Finding]:
    df = _unjoined(ctx).collect()
    if df.is_empty():
        return []
    gpus = [(h, int(g)) for h, g in zip(df["host"].to_list(), df["local_rank"].to_list())]
    n = int(df["rows"].sum())
    hosts = sorted({h for h, _ in gpus if h})
    where = (f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''}"
             + (f" on {', '.join(hosts)}" if hosts else " (the file names no host)"))
    # rank i on GPU i can only hold on a one-node job: offered only when the whole run names at most one host
    all_hosts = ctx.events.select(pl.col("host").drop_nulls().unique()).collect().to_series().to_list()
    one_node = len(host_names.distinct([*all_hosts, *hosts])) <= 1
    identity = ""
    logs = _logs_arg(ctx)
    if one_node:
        # only true when the launcher put rank i on GPU i of a single node: offered, never assumed
        identity = (f" (on a one-node job with rank i on GPU i: `forensics diagnose {logs} "
                    + " ".join(f"--gpu-map {hosts[0] + ':' if hosts else ''}{g}={g}" for _, g in gpus[:SHOWN]) + "`)")
    title = (f"{n:,} GPU telemetry row{'s' if n != 1 else ''} from {where} could not be joined to ranks: nothing maps "
             f"a GPU to the rank that ran on it, so no per-rank pass read them. Re-run on the logs (the map is applied "
             f"when they are read) with `forensics diagnose {logs} {gpu_map_hint(gpus)}`{identity}")
    first = df.sort("first", nulls_last=True).row(0, named=True)
    return [Finding(
        rule=pass_id("telemetry_join"), kind="log_hygiene", layer="physical", severity="WARN", ranks=[], title=title,
        evidence={"unjoined_rows": n, "gpus": [{"host": h, "local_rank": g, "rows": int(r)}
                                               for (h, g), r in zip(gpus, df["rows"].to_list())],
                  "hint": gpu_map_hint(gpus)},
        lines=cite(df.head(3).to_dicts(), rank="rank_unused"),
        first_seen=iso(first["first"]), last_seen=iso(df["last"].max()),
    )]
