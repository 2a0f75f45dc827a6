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
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import polars as pl

from .. import host_names
from ..report.model import Finding, Report, RunInfo
from . import (
    bandwidth,
    clock_skew,
    comm_bound,
    cost,
    data_load_skew,
    failures,
    grad_norm,
    grad_norm_rank,
    gradient_skew,
    hot_gpu,
    hygiene,
    lone_message,
    loss,
    no_data,
    outlier,
    own_gap,
    non_finite,
    rank_lag,
    rootcause,
    silent_rank,
    straggler,
    stuck_collective,
    telemetry_join,
    thermal,
    throughput,
    trace_straggler,
    unexplained,
    utilization,
    world_size,
)
from .context import Context, median
from .evidence import iso, num, own_times, parse_iso, pass_id

if TYPE_CHECKING:
    from ..config import Config
    from ..store import Run

Pass = Callable[[Context], list[Finding]]

# Bottom-up through the layers; the order only fixes the order of findings before root-cause
# selection reorders them, so a report is deterministic.
PASSES: list[Pass] = [
    no_data.find,            # the input: is there any event to diagnose at all
    thermal.find,            # physical: temperature, SM clock, throttle reasons
    hot_gpu.find,            # physical: one GPU hotter than its peers, not throttled (INFO)
    bandwidth.find,          # physical: PCIe/NVLink of one rank
    utilization.find,        # resource: one rank's GPU idle vs peers
    data_load_skew.find,     # resource: one rank's input pipeline
    straggler.find,          # resource: one rank computes longest, waits least
    trace_straggler.find,    # resource: one rank starts its NCCL kernels last (profiler traces)
    failures.find,           # resource/communication: OOM, timeouts, hangs, cascade
    lone_message.find,       # communication: the rank that said something of its own, then went silent, before the others failed
    stuck_collective.find,   # communication: ranks behind in a stuck collective (Flight Recorder)
    gradient_skew.find,      # communication: spread of gradient-ready times
    comm_bound.find,         # communication: > 40% of step time in collectives
    outlier.find,            # communication/resource: who stands apart when a slowdown is shared
    own_gap.find,            # resource: the rank whose stalls made the others wait, and what it logged
    rank_lag.find,           # training: a rank behind in steps
    loss.find,               # training: divergence / plateau, warmup-aware
    non_finite.find,         # training: where a NaN/Inf first appears (rank, step)
    grad_norm.find,          # training: spikes, vanishing adapter gradients
    grad_norm_rank.find,     # training: one rank's own gradient norm apart from its peers', every step
    throughput.find,         # training: throughput drop while loss falls
    hygiene.find,            # the logs themselves
    world_size.find,         # the logs: ranks the stated world size counts and no line shows
    telemetry_join.find,     # the logs: GPU telemetry no rank can be joined to (needs --gpu-map)
    clock_skew.find,         # the logs' clocks (times above are compared on the common clock)
]


def pass_name(p: Pass) -> str:
    return p.__module__.rsplit(".", 1)[-1]


def _rule_set(rule_dirs: Sequence[str | os.PathLike[str]] | None, config: "Config | None") -> list[Any]:
    """The rule files (forensics.rules) when the rule engine is installed; with a config, its
    overrides applied and its disabled rules left out."""
    try:
        from ..rules import load_rules
    except ImportError:
        return []
    if config is None:
        return load_rules(list(rule_dirs) if rule_dirs else None)
    from ..config import check_names

    rules = load_rules(list(rule_dirs) if rule_dirs else None, overrides=config.overrides, override_source=config.source)
    check_names(config, [r.id for r in rules], [pass_id(pass_name(p)) for p in PASSES])
    return [r for r in rules if r.id not in set(config.disabled)]


def _next_steps(ctx: Context, root: Any, findings: list[Finding], rules: list[Any],
                rule_dirs: Sequence[str | os.PathLike[str]] | None) -> None:
    """`next` on every finding and the root cause (rules/next_steps.toml, or a rule's own `next`)."""
    try:
        from ..rules import load_next_steps
        from ..rules.next_steps import attach_next
    except ImportError:
        return
    attach_next(findings, root, ctx.events, load_next_steps([Path(d) for d in rule_dirs or []]),
                {r.id: r.next for r in rules if getattr(r, "next", None)})


def _per_rank(ctx: Context) -> tuple[pl.DataFrame, list[str]]:
    """The report's per-rank rows (events, WARN/ERROR, first/last seen, host, GPU, medians of
    the phases) and every host: the run's per-rank summary (forensics.summaries, written at
    ingest), or one group_by over in-memory events."""
    from ..summaries import rank_rows, rank_table

    agg = rank_table(ctx.run) if ctx.run is not None else rank_rows(ctx.events).collect()
    agg = agg.select("rank", "events", "errors", "warnings", "first_seen", "last_seen", "host", "hosts", "gpu_util",
                     "temp_c_max", "sm_clock_mhz_min")
    hosts = host_names.distinct(h for lst in agg.get_column("hosts") for h in lst)
    st = ctx.steps
    if not st.is_empty():
        steps = st.group_by("rank").agg(
            pl.col("step").max().alias("last_step"),
            *(median(c) for c in ("step_time_ms", "data_load_ms", "compute_ms", "comm_ms", "wait_ms")),
        )
        agg = agg.join(steps, on="rank", how="left", nulls_equal=True)
    return agg.drop("hosts"), hosts


def _per_rank_rows(ctx: Context) -> tuple[pl.DataFrame, list[str], list[dict[str, Any]]]:
    """`_per_rank` and its rows as the report holds them (`report_rows`)."""
    per_rank, hosts = _per_rank(ctx)
    return per_rank, hosts, report_rows(per_rank)


def report_rows(df: pl.DataFrame) -> list[dict[str, Any]]:
    """`df`'s rows with each value as `_report_value` makes it (times as ISO text, floats rounded
    by `num`), converted a column at a time: a 4,096-rank table is ~60,000 values, one type test
    per column instead of per value."""
    cols = []
    for s in df.get_columns():
        vals = s.to_list()
        if s.dtype.is_float():
            cols.append([None if v is None else num(v) for v in vals])
        elif s.dtype.is_integer() or s.dtype in (pl.String, pl.Boolean):
            cols.append(vals)
        else:
            cols.append([_report_value(v) for v in vals])
    return [dict(zip(df.columns, r)) for r in zip(*cols)]


def _report_value(v: Any) -> Any:
    """A per-rank value in the report: a time as ISO text, a float rounded (`num`)."""
    return iso(v) if hasattr(v, "isoformat") else num(v) if isinstance(v, float) else v


def _run_info(ctx: Context, per_rank: pl.DataFrame, hosts: list[str], findings: list[Finding],
              errors: unexplained.Accounting | None = None) -> RunInfo:
    totals = ctx.run.totals if ctx.run is not None else {}
    # failures before a restart the job trained on after (failures/restart.py) did not end the run
    restarted = max((t for f in findings if (t := parse_iso((f.evidence.get("restarted") or {}).get("from")))),
                    default=None)
    crashed = any(f.kind in rootcause.FAILURES
                  and (restarted is None or (parse_iso(f.last_seen or f.first_seen) or restarted) >= restarted)
                  for f in findings)
    start = per_rank.get_column("first_seen").min() if not per_rank.is_empty() else None
    end = per_rank.get_column("last_seen").max() if not per_rank.is_empty() else None
    return RunInfo(
        ranks=len(ctx.ranks),
        hosts=len(host_names.distinct(totals.get("hosts") or hosts)),
        start=iso(start), end=iso(end),
        events=int(totals.get("events", per_rank.get_column("events").sum() if not per_rank.is_empty() else 0)),
        rejected_lines=int(totals.get("rejected", 0)),
        crashed=crashed,
        store=ctx.run.label if ctx.run is not None else None,
        error_lines=errors.total if errors is not None else None,
        error_lines_accounted=errors.accounted if errors is not None else None,
    )


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # not on Linux
        return os.cpu_count() or 1


def _findings(ctx: Context, passes: list[Pass], rule_set: Callable[[], list[Any]],
              beside: Callable[[], Any] | None = None) -> tuple[list[Finding], list[Any], Any]:
    """Every pass's findings in the passes' order, then the rules'; the rules (`rule_set()`); and
    what `beside` returns (work that needs the step table but no finding: the per-rank table).
    With two cores or more, two threads share the work (polars and numpy release the GIL while
    they compute): the rules are loaded (their engine imported: ~0.1 s) and evaluated on one
    thread, beside the step table; `beside` and the passes then run as a thread frees up. The step
    table (with the clock offsets) is built before any pass starts, so no two threads build it
    (most passes read it); a rule file's error is raised before any pass runs. The findings do not
    depend on the order in which the threads finish."""
    def rules_found(rules: list[Any]) -> list[Finding]:
        from ..rules import evaluate

        return evaluate(ctx.events, rules) if rules else []

    if _cores() < 2:
        rules = rule_set()
        found = [f for p in passes for f in ctx.found_by(p)] + rules_found(rules)
        return found, rules, beside() if beside is not None else None
    loaded: Future[list[Any]] = Future()

    def load_and_find() -> list[Finding]:
        try:
            rules = rule_set()
        except BaseException as e:
            loaded.set_exception(e)
            raise
        loaded.set_result(rules)
        return rules_found(rules)

    pool = ThreadPoolExecutor(2)
    try:
        by_rules = pool.submit(load_and_find)
        if passes or beside is not None:
            ctx.steps   # built in this thread, beside the rules
        rules = loaded.result()
        aside = pool.submit(beside) if beside is not None else None
        by_pass = [pool.submit(ctx.found_by, p) for p in passes]
        found = [f for fut in by_pass for f in fut.result()] + by_rules.result()
        return found, rules, aside.result() if aside is not None else None
    finally:
        # on an error or Ctrl-C, the passes not yet started are dropped (a running one finishes)
        pool.shutdown(cancel_futures=True)


def diagnose_context(ctx: Context, rule_dirs: Sequence[str | os.PathLike[str]] | None = None,
                     passes: Sequence[Pass] | None = None, config: "Config | None" = None) -> Report:
    """The report for a Context (tests and notebooks build one from in-memory events). `config`
    (forensics.config) disables rules / passes and overrides rule levels and thresholds."""
    off = set(config.disabled) if config is not None else set()
    # the per-rank table needs no finding: built on the passes' threads, beside them
    found, rules, (per_rank, hosts, rows) = _findings(
        ctx, [p for p in (passes if passes is not None else PASSES) if pass_id(pass_name(p)) not in off],
        lambda: _rule_set(rule_dirs, config), beside=lambda: _per_rank_rows(ctx))
    # the invariant, after every pass and rule (a full diagnosis only: a chosen list of passes
    # is a test of those passes): every ERROR line is explained by a finding or becomes one
    errors = unexplained.account(ctx, found) if passes is None else None
    if errors is not None:
        found += errors.findings
        found += silent_rank.find(ctx, found)   # a rank that stopped early, that nothing names
    own_times(found, ctx)           # citations at the lines' own times (evidence.own_times)
    cost.attach_costs(found, ctx)   # before ordering: within a severity, costlier findings first
    root, ordered = rootcause.assign(found, ctx.ranks)
    if root is not None and root.finding is not None:
        root.cost = ordered[root.finding].cost
    _next_steps(ctx, root, ordered, rules, rule_dirs)
    info = _run_info(ctx, per_rank, hosts, ordered, errors)
    return Report(run=info, root_cause=root, findings=ordered, per_rank=rows,
                  config=config.to_json() if config is not None else None)


def diagnose(run: Run | str | os.PathLike[str] | Sequence[str],
             rule_dirs: Sequence[str | os.PathLike[str]] | None = None, gpu_map: list[str] | None = None,
             config: "Config | None" = None) -> Report:
    """Diagnose a run: a `Run` (opened store), a store path, or raw log paths (ingested once into
    the cache, see forensics.run.open_run; `gpu_map` as `ingest --gpu-map`)."""
    from ..store import Run

    if not isinstance(run, Run):
        from ..run import open_run

        run = open_run([str(p) for p in run] if isinstance(run, (list, tuple)) else str(Path(run)), gpu_map=gpu_map)
    return diagnose_context(Context.from_run(run), rule_dirs, config=config)


def no_input_report(folders: list[str]) -> Report:
    """The report on folders that hold no log file at all (a job that died before writing any):
    no store to read, one no_data finding, the root cause; never "healthy"."""
    root, ordered = rootcause.assign(no_data.empty_input(folders), [])
    info = RunInfo(ranks=0, hosts=0, start=None, end=None, events=0, rejected_lines=0, crashed=False,
                   error_lines=0, error_lines_accounted=0)
    return Report(run=info, root_cause=root, findings=ordered)


__all__ = ["diagnose", "diagnose_context", "no_input_report", "PASSES", "Context", "pass_name"]
