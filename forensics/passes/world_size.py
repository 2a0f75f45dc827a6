"""Did every rank the job says it had leave a line in the logs?

Question: the logs state a world size (Megatron's `using world size: 32, ...`, printed by
rank 0 from megatron/training/arguments.py; a `world_size` key on the events); were lines of
that many ranks read? Ranks are found from every rank-bearing line, including the second of two
memory reports printed onto one physical line and the ranks a launcher lists as started
(DeepSpeed's `global_rank_mapping`, torchrun's rendezvous `global_ranks`: ingest/console/).

Domain facts relied on: Megatron's per-rank lines are its memory reports, `[Rank r] (after k iterations)
memory (MB) | ...` (report_memory in megatron/training/utils.py), printed only where
`mpu.get_data_parallel_rank() == 0`; with data parallelism the other replicas print nothing of
their own, so only data-parallel rank 0 of each model-parallel group (Megatron's rank order
tp-cp-ep-dp-pp, forensics.topology.layout_from_sizes) is expected in such a log. A rank that is
expected and absent either never ran or wrote its output elsewhere: the log alone does not say
which. So this is a finding about the logs (kind log_hygiene, WARN) naming the ranks, never a
fault of those ranks and never silence: "29 of 32 ranks" is said, with the line that states 32.
Findings here are about the logs: rootcause.py never picks them. Must not: judge a rank by its
absence, or read more than the rank column, the stated sizes and the line that states them.
"""
from __future__ import annotations

import polars as pl

from .. import topology
from ..report.model import Finding
from .context import Context
from .evidence import cite, pass_id, rank_ranges, shorten

WORLD_TEXT = r"using world size:\s*\d+|\bworld_size\b"


def find(ctx: Context) -> list[Finding]:
    found = set(ctx.ranks)
    if not found:
        return []
    sizes = topology.stated_sizes(_layout_rows(ctx))
    world = sizes.get("world")
    if not world or set(range(world)) <= found:
        return []
    layout = topology.layout_from_sizes(sizes, world)
    dp = sizes.get("dp") or 1
    if dp > 1 and layout and _per_rank_lines_are_memory_reports(ctx):
        expected = {r for r, c in layout.items() if c.get("dp") == 0}
        scope = (f"Megatron prints its per-rank memory report on data-parallel rank 0 only (dp {dp}): "
                 f"{len(expected)} of the {world} ranks are expected in this log")
    else:
        expected = set(range(world))
        scope = ""
    missing = sorted(expected - found)
    if not missing:
        return []
    stated = (ctx.events.filter(pl.col("message").str.contains(WORLD_TEXT) | pl.col("extra").str.contains(r'"world_size"'))
              .select("source_file", "line", "rank", "timestamp", "message").head(1).collect())
    lines = cite(stated.iter_rows(named=True), text="message")
    if not lines:
        return []
    lines[0].text = shorten(lines[0].text, 120)
    shown = rank_ranges(missing)
    title = (f"the log states world size {world}, but no line of rank{'s' if len(missing) > 1 else ''} {shown} was read: "
             f"{len(found & expected)} of {len(expected)} expected ranks found (log_hygiene: the logs do not show "
             "whether these ranks ran or where their output went)")
    return [Finding(
        rule=pass_id("world_size"), kind="log_hygiene", layer="training", severity="WARN", ranks=[],
        title=title,
        evidence={"world_size": world, "ranks_found": len(found), "expected": len(expected), "missing": missing,
                  "sizes": sizes, "scope": scope or None},
        lines=lines,
    )]


def _layout_rows(ctx: Context) -> pl.LazyFrame:
    """The few events that can state a size: stored at ingest for a run (forensics.summaries),
    else all of them (topology.stated_sizes filters them)."""
    if ctx.run is not None:
        from ..summaries import layout

        return layout(ctx.run).lazy()
    return ctx.events


def _per_rank_lines_are_memory_reports(ctx: Context) -> bool:
    """Every rank-bearing event of the run is a Megatron memory report (GPU_MEMORY from the
    console): the log's only per-rank lines are the ones data-parallel rank 0 prints."""
    kinds = (ctx.events.filter(pl.col("rank").is_not_null()).select(pl.col("event").unique()).collect()
             .get_column("event").to_list())
    return set(kinds) <= {"GPU_MEMORY"}
