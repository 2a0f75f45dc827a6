"""Are the logs themselves fit for a post-mortem?

Question: do records carry a rank and an event id, do ERROR floods bury the WARNs that matter,
and are resource metrics polled so often that the polling itself costs throughput?

Domain facts relied on (seed 000 §4.1, §4.5):
- Every line must carry its rank, or single-card and collective faults cannot be told apart;
  every event type should have a stable id so tools aggregate instead of string-matching.
- Misclassified severities: if gradient-norm anomalies are logged as ERROR, the real NCCL
  timeout drowns in thousands of ERRORs. WARN = self-healing, ERROR = needs a person. A flood is
  one event type with >= 50 ERROR lines, >= 10 per rank that logs it (every rank reporting the
  same timeout once is not a flood), making up >= 80% of all ERROR lines.
- Resource metrics should be sampled every >= 2 s (one team polled NVML every 200 ms and lost
  5% throughput to it); a rank whose median interval between GPU metric samples is < 2 s
  (over >= 10 samples) is flagged.

Findings here are about the logs, never a cause of the training fault: rootcause.py never picks
them. Must not: read columns other than those below.
"""
from __future__ import annotations

import polars as pl

from ..report.model import Finding
from .context import Context
from .evidence import cite, pass_id, rank_ranges

FLOOD_MIN = 50
FLOOD_SHARE = 0.8
PER_RANK = 10
MIN_INTERVAL_S = 2.0
MIN_SAMPLES = 10
RESOURCE = ["gpu_util", "temp_c", "sm_clock_mhz", "power_w", "mem_alloc_mb"]


def _missing_fields(ctx: Context) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    no_rank = (
        ctx.events.select("rank_source", "format", "source_file", "line", "rank", "timestamp")
        .filter(pl.col("rank_source").is_in(["path", "none"]) & (pl.col("format") == "jsonl"))
        .group_by("source_file", "rank_source")
        .agg(pl.len().alias("n"), pl.col("line").min().alias("line"), pl.col("rank").first(),
             pl.col("timestamp").min())
        .sort("source_file")
    )
    no_event = (
        ctx.events.select("event_source", "format", "source_file", "line", "rank", "timestamp")
        .filter((pl.col("event_source") == "inferred") & (pl.col("format") == "jsonl"))
        .group_by("source_file")
        .agg(pl.len().alias("n"), pl.col("line").min().alias("line"), pl.col("rank").first(),
             pl.col("timestamp").min())
        .sort("source_file")
    )
    return no_rank, no_event


def _levels(ctx: Context) -> pl.LazyFrame:
    """Per (level, event) of the WARN and ERROR lines: how many, on how many ranks. The lines to
    cite are fetched for the flood alone (`_first_of`): their columns were 3/4 of this scan."""
    return (
        ctx.events.select("level", "event", "format", "rank")
        # the application's own levels: a console traceback's lines are one error, not a flood
        .filter(_own_level())
        .group_by("level", "event")
        .agg(pl.len().alias("n"), pl.col("rank").n_unique().alias("ranks"))
    )


def _own_level() -> pl.Expr:
    return pl.col("level").is_in(["ERROR", "WARN"]) & (pl.col("format") == "jsonl")


def _first_of(ctx: Context, groups: pl.DataFrame) -> pl.DataFrame:
    """`groups` (level, event rows of `_levels`) with the file, line, rank and time of each
    group's first line in store order."""
    first = (
        ctx.events.select("level", "event", "format", "source_file", "line", "rank", "timestamp")
        .filter(_own_level())
        .join(groups.lazy().select("level", "event"), on=["level", "event"], nulls_equal=True, maintain_order="left")
        .group_by("level", "event")
        .agg(pl.col("source_file").first(), pl.col("line").first(), pl.col("rank").first(),
             pl.col("timestamp").first())
        .collect()
    )
    return groups.join(first, on=["level", "event"], how="left", nulls_equal=True, maintain_order="left")


def _sampling(ctx: Context) -> pl.LazyFrame:
    """Per rank: GPU metric samples (distinct times), their median interval and first time.
    Times only: the line to cite is fetched for the flagged ranks alone (`_first_lines`)."""
    has = pl.any_horizontal([pl.col(c).is_not_null() for c in RESOURCE])
    # a rank's distinct times, sorted, within its group: 3x cheaper than unique() and sort() of
    # the whole table (a null time counts and sorts first, as it did there)
    times = pl.col("timestamp").unique().sort()
    return (
        ctx.telemetry.lazy().filter(has)
        .group_by("rank")
        .agg(times.len().alias("n"),
             (times.diff().dt.total_microseconds() / 1e6).median().alias("interval_s"),
             times.first().alias("timestamp"))
        .sort("rank")
    )


def _first_lines(ctx: Context, firsts: pl.DataFrame) -> pl.DataFrame:
    """`firsts` (rank, timestamp: a rank's first GPU metric sample) with the file and line of
    that sample (the first such line in store order)."""
    has = pl.any_horizontal([pl.col(c).is_not_null() for c in RESOURCE])
    lines = (
        ctx.telemetry.lazy().select("rank", "timestamp", "source_file", "line", *RESOURCE)
        .filter(pl.col("rank").is_in(firsts.get_column("rank").implode()) & has)
        .join(firsts.lazy().select("rank", "timestamp"), on=["rank", "timestamp"], maintain_order="left")
        .group_by("rank", "timestamp", maintain_order=True)
        .agg(pl.col("source_file").first(), pl.col("line").first())
        .collect()
    )
    return firsts.join(lines, on=["rank", "timestamp"], how="left", maintain_order="left")


def find(ctx: Context) -> list[Finding]:
    no_rank_lf, no_event_lf = _missing_fields(ctx)
    no_rank, no_event, levels, sampling = pl.collect_all([no_rank_lf, no_event_lf, _levels(ctx), _sampling(ctx)])
    out: list[Finding] = []
    rid = pass_id("hygiene")

    if not no_rank.is_empty():
        n = int(no_rank.get_column("n").sum())
        from_path = no_rank.filter(pl.col("rank_source") == "path")
        unknown = no_rank.filter(pl.col("rank_source") == "none")
        parts = []
        if not from_path.is_empty():
            parts.append(f"{int(from_path.get_column('n').sum())} in {from_path.height} file(s) got their rank from the file name")
        if not unknown.is_empty():
            parts.append(f"{int(unknown.get_column('n').sum())} in {unknown.height} file(s) have no rank at all")
        out.append(Finding(
            rule=rid, kind="log_hygiene", layer="training", severity="INFO", ranks=[],
            title=f"{n} records carry no rank field: " + "; ".join(parts),
            evidence={"check": "rank_missing", "records": n,
                      "files": {r["source_file"]: r["n"] for r in no_rank.iter_rows(named=True)}},
            lines=cite(no_rank.iter_rows(named=True)),
        ))
    if not no_event.is_empty():
        n = int(no_event.get_column("n").sum())
        out.append(Finding(
            rule=rid, kind="log_hygiene", layer="training", severity="INFO", ranks=[],
            title=f"{n} records in {no_event.height} file(s) carry no event id",
            evidence={"check": "event_missing", "records": n,
                      "files": {r["source_file"]: r["n"] for r in no_event.iter_rows(named=True)}},
            lines=cite(no_event.iter_rows(named=True)),
        ))

    errors = levels.filter(pl.col("level") == "ERROR").sort("n", descending=True)
    if not errors.is_empty():
        total = int(errors.get_column("n").sum())
        top = errors.row(0, named=True)
        warns = int(levels.filter(pl.col("level") == "WARN").get_column("n").sum())
        others = errors.slice(1)
        repeated = top["n"] >= PER_RANK * max(top["ranks"], 1)   # one timeout per rank is no flood
        if top["n"] >= FLOOD_MIN and top["n"] >= FLOOD_SHARE * total and repeated and (not others.is_empty() or warns):
            buried = ", ".join(f"{r['n']} {r['event']}" for r in others.head(3).iter_rows(named=True))
            out.append(Finding(
                rule=rid, kind="log_hygiene", layer="training", severity="WARN", ranks=[],
                title=(f"ERROR flood: {top['n']} {top['event']} lines logged as ERROR ({top['n'] / total:.0%} of all "
                       f"ERRORs) bury " + (f"{buried} and " if buried else "") + f"{warns} WARN line(s)"),
                evidence={"check": "error_flood", "event": top["event"], "errors": total, "flood": int(top["n"]),
                          "warns": warns, "other_errors": {r["event"]: r["n"] for r in others.iter_rows(named=True)}},
                lines=cite(_first_of(ctx, errors.head(3)).iter_rows(named=True)),
            ))

    fast = sampling.filter((pl.col("n") >= MIN_SAMPLES) & (pl.col("interval_s") < MIN_INTERVAL_S))
    if not fast.is_empty():
        ranks = [int(r) for r in fast.get_column("rank")]
        iv = float(fast.get_column("interval_s").median())
        out.append(Finding(
            rule=rid, kind="log_hygiene", layer="resource", severity="WARN", ranks=ranks,
            title=(f"GPU metrics sampled every {iv:.2g} s on ranks {rank_ranges(ranks)} (keep >= {MIN_INTERVAL_S:g} s: "
                   "polling NVML too often steals throughput)"),
            evidence={"check": "sampling_interval", "interval_s": round(iv, 3), "min_interval_s": MIN_INTERVAL_S},
            lines=cite(_first_lines(ctx, fast.head(3)).iter_rows(named=True)),
        ))
    return out
