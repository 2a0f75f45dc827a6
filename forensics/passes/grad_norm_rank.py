"""Does one rank's own gradient norm stand apart from its peers' at the same steps, persistently?

Question: in data parallelism every rank computes the gradient of the same model on its own
shard of one global batch; is there a rank whose local gradient norm (the norm it logs before
the all-reduce) is several times its peers' — or a fraction of it — step after step?

Domain facts relied on:
- Data-parallel ranks draw their batches from one distribution with the same model weights, so
  their local gradient norms estimate the same quantity and differ by sampling noise (tens of
  percent at ordinary batch sizes). A rank whose norm is >= `FACTOR` x (or <= 1/`FACTOR` of) the
  median over the ranks at the same step, at >= `SHARE` of the >= `MIN_STEPS` steps it shares
  with >= 2 peers, computes another gradient: its loss is scaled differently (a loss scale or
  a loss averaged over another count), its data is another distribution or batch size, or its
  weights differ. The all-reduce averages it into every rank's update: that rank steers the
  training. A transient spike of one step is grad_norm.py's question, not this one.
- Norms logged after the all-reduce are the same on every rank: nothing stands apart.
- Under a topology ranks are compared within their data-parallel group only (topology.
  with_groups, dgroup): ranks of other pipeline stages or tensor shards hold other parameters,
  whose norms differ by design.
- The ranks that stand apart must be a minority of their group (at most a third, and one of
  three): the median is then a peer's value.

The finding (kind grad_norm_spike: the training signal whose question is the gradient's size;
WARN) names the rank(s), the median ratio and the steps, and cites its lines.

Must not: decide the root cause; judge a norm over time (grad_norm.py).
"""
from __future__ import annotations

import polars as pl

from .. import topology as topo_mod
from ..report.model import Finding
from .context import Context
from .evidence import cite, iso, num, pass_id, ranks_phrase

FACTOR = 3.0
SHARE = 0.8
MIN_STEPS = 5
MIN_RANKS = 3


def find(ctx: Context) -> list[Finding]:
    gn = pl.col("grad_norm")
    rows = (
        ctx.events.select("rank", "step", "grad_norm", "timestamp", "source_file", "line")
        .filter(pl.col("rank").is_not_null() & pl.col("step").is_not_null() & gn.is_not_null() & gn.is_finite() & (gn > 0))
        .unique(["rank", "step"], keep="first", maintain_order=True)
        .collect()
    )
    if rows.is_empty() or rows.get_column("rank").n_unique() < MIN_RANKS:
        return []
    rows = topo_mod.with_groups(rows, ctx.topology)
    key = ["step", "dgroup"]
    judged = (
        rows.with_columns(pl.len().over(key).alias("n"), gn.median().over(key).alias("med"))
        .filter(pl.col("n") >= MIN_RANKS)
        .with_columns((gn / pl.col("med")).alias("ratio"))
        .with_columns(((pl.col("ratio") >= FACTOR) | (pl.col("ratio") <= 1.0 / FACTOR)).alias("apart"))
    )
    if judged.is_empty():
        return []
    per = (
        judged.group_by("rank", "dgroup")
        .agg(pl.len().alias("steps"), pl.col("apart").mean().alias("share"), pl.col("ratio").median().alias("ratio"),
             pl.col("med").median().alias("peers"), gn.median().alias("own"))
        .filter((pl.col("steps") >= MIN_STEPS) & (pl.col("share") >= SHARE))
        .sort("rank")
    )
    if per.is_empty():
        return []
    size = judged.group_by("dgroup").agg(pl.col("rank").n_unique().alias("size"))
    per = per.join(size, on="dgroup").filter(
        pl.len().over("dgroup") * 3 <= pl.col("size"))   # a minority of its group: the median is a peer's value
    if per.is_empty():
        return []
    ranks = [int(r) for r in per.get_column("rank")]
    top = per.sort((pl.col("ratio").log().abs()), descending=True).row(0, named=True)
    at = judged.filter(pl.col("rank").is_in(ranks) & pl.col("apart")).sort("step", "rank")
    first, last = at.get_column("timestamp").min(), at.get_column("timestamp").max()
    way = f"{top['ratio']:.1f}x" if top["ratio"] >= 1 else f"1/{1 / top['ratio']:.1f} of"
    title = (f"{ranks_phrase(ranks)}: local gradient norm {way} its peers' at {int(top['share'] * top['steps'])} of "
             f"{top['steps']} steps (median {top['own']:.3g} vs {top['peers']:.3g}) — it computes another gradient "
             f"(loss scale, batch, data) and steers the averaged update")
    return [Finding(
        rule=pass_id("grad_norm_rank"), kind="grad_norm_spike", layer="training", severity="WARN", ranks=ranks,
        basis="outlier", title=title,
        evidence={"field": "grad_norm", "ratio": num(top["ratio"]), "value": num(top["own"]), "peers": num(top["peers"]),
                  "steps": int(top["steps"]), "share": num(top["share"]), "factor": FACTOR},
        lines=cite(at.head(20).iter_rows(named=True), limit=4),
        first_seen=iso(first), last_seen=iso(last),
    )]
