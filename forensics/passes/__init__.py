"""Diagnosis: run every pass (and the rules) over a run, pick the root cause, build the Report.

Owns `diagnose(run, rule_dirs=None) -> Report`, the explicit ordered list `PASSES`, the run
summary and the per-rank table; every slowdown finding gets its cost (cost.py) before the
findings are ordered. Must not print, plot or render (report/ renders); passes must
not mutate the Context.

A pass is a function `Context -> list[Finding]` living in a module named for what it finds,
whose docstring states the question and the domain fact it relies on.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

import polars as pl

from ..report.model import Finding, Report, RunInfo
from . import (
    bandwidth,
    clock_skew,
    comm_bound,
    cost,
    data_load_skew,
    failures,
    grad_norm,
    gradient_skew,
    hot_gpu,
    hygiene,
    loss,
    rank_lag,
    rootcause,
    straggler,
    stuck_collective,
    thermal,
    throughput,
    utilization,
)
from .context import Context
from .evidence import iso, num

if TYPE_CHECKING:
    from ..store import Run

Pass = Callable[[Context], list[Finding]]

# Bottom-up through the layers; the order only fixes the order of findings before root-cause
# selection reorders them, so a report is deterministic.
PASSES: list[Pass] = [
    thermal.find,            # physical: temperature, SM clock, throttle reasons
    hot_gpu.find,            # physical: one GPU hotter than its peers, not throttled (INFO)
    bandwidth.find,          # physical: PCIe/NVLink of one rank
    utilization.find,        # resource: one rank's GPU idle vs peers
    data_load_skew.find,     # resource: one rank's input pipeline
    straggler.find,          # resource: one rank computes longest, waits least
    failures.find,           # resource/communication: OOM, timeouts, hangs, cascade
    stuck_collective.find,   # communication: ranks behind in a stuck collective (Flight Recorder)
    gradient_skew.find,      # communication: spread of gradient-ready times
    comm_bound.find,         # communication: > 40% of step time in collectives
    rank_lag.find,           # training: a rank behind in steps
    loss.find,               # training: divergence / plateau, warmup-aware
    grad_norm.find,          # training: spikes, vanishing adapter gradients
    throughput.find,         # training: throughput drop while loss falls
    hygiene.find,            # the logs themselves
    clock_skew.find,         # the logs' clocks (times above are compared on the common clock)
]


def pass_name(p: Pass) -> str:
    return p.__module__.rsplit(".", 1)[-1]


def _rule_findings(ctx: Context, rule_dirs: Sequence[str | os.PathLike[str]] | None) -> list[Finding]:
    """Findings of the rule files (forensics.rules), when the rule engine is installed."""
    try:
        from ..rules import evaluate, load_rules
    except ImportError:
        return []
    rules = load_rules(list(rule_dirs) if rule_dirs else None)
    return list(evaluate(ctx.events, rules))


def _per_rank(ctx: Context) -> tuple[pl.DataFrame, list[str]]:
    agg = (
        ctx.events.select("rank", "host", "level", "timestamp", "gpu_util", "temp_c", "sm_clock_mhz")
        .group_by("rank")
        .agg(
            pl.len().alias("events"),
            (pl.col("level") == "ERROR").sum().alias("errors"),
            (pl.col("level") == "WARN").sum().alias("warnings"),
            pl.col("timestamp").min().alias("first_seen"),
            pl.col("timestamp").max().alias("last_seen"),
            pl.col("host").drop_nulls().first().alias("host"),
            pl.col("host").drop_nulls().unique().alias("hosts"),
            pl.col("gpu_util").median().alias("gpu_util"),
            pl.col("temp_c").max().alias("temp_c_max"),
            pl.col("sm_clock_mhz").min().alias("sm_clock_mhz_min"),
        )
        .sort("rank", nulls_last=True)
        .collect()
    )
    hosts = sorted({h for lst in agg.get_column("hosts") for h in lst})
    st = ctx.steps
    if not st.is_empty():
        steps = st.group_by("rank").agg(
            pl.col("step").max().alias("last_step"),
            pl.col("step_time_ms").median(),
            pl.col("data_load_ms").median(),
            pl.col("compute_ms").median(),
            pl.col("comm_ms").median(),
            pl.col("wait_ms").median(),
        )
        agg = agg.join(steps, on="rank", how="left", nulls_equal=True)
    return agg.drop("hosts"), hosts


def _run_info(ctx: Context, per_rank: pl.DataFrame, hosts: list[str], findings: list[Finding]) -> RunInfo:
    totals = ctx.run.totals if ctx.run is not None else {}
    crashed = any(f.kind in rootcause.FAILURES for f in findings)
    start = per_rank.get_column("first_seen").min() if not per_rank.is_empty() else None
    end = per_rank.get_column("last_seen").max() if not per_rank.is_empty() else None
    return RunInfo(
        ranks=len(ctx.ranks),
        hosts=len(totals.get("hosts") or hosts),
        start=iso(start), end=iso(end),
        events=int(totals.get("events", per_rank.get_column("events").sum() if not per_rank.is_empty() else 0)),
        rejected_lines=int(totals.get("rejected", 0)),
        crashed=crashed,
        store=ctx.run.label if ctx.run is not None else None,
    )


def diagnose_context(ctx: Context, rule_dirs: Sequence[str | os.PathLike[str]] | None = None,
                     passes: Sequence[Pass] | None = None) -> Report:
    """The report for a Context (tests and notebooks build one from in-memory events)."""
    found: list[Finding] = []
    for p in passes if passes is not None else PASSES:
        found.extend(p(ctx))
    found.extend(_rule_findings(ctx, rule_dirs))
    cost.attach_costs(found, ctx)   # before ordering: within a severity, costlier findings first
    root, ordered = rootcause.assign(found, ctx.ranks)
    if root is not None and root.finding is not None:
        root.cost = ordered[root.finding].cost
    per_rank, hosts = _per_rank(ctx)
    info = _run_info(ctx, per_rank, hosts, ordered)
    rows = [{k: (iso(v) if hasattr(v, "isoformat") else num(v) if isinstance(v, float) else v) for k, v in r.items()}
            for r in per_rank.iter_rows(named=True)]
    return Report(run=info, root_cause=root, findings=ordered, per_rank=rows)


def diagnose(run: Run | str | os.PathLike[str] | Sequence[str],
             rule_dirs: Sequence[str | os.PathLike[str]] | None = None) -> Report:
    """Diagnose a run: a `Run` (opened store), a store path, or raw log paths (ingested once into
    the cache, see forensics.run.open_run)."""
    from ..store import Run

    if not isinstance(run, Run):
        from ..run import open_run

        run = open_run([str(p) for p in run] if isinstance(run, (list, tuple)) else str(Path(run)))
    return diagnose_context(Context.from_run(run), rule_dirs)


__all__ = ["diagnose", "diagnose_context", "PASSES", "Context", "pass_name"]
