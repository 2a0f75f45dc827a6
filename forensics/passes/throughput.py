"""Did training throughput drop while the loss kept falling?

Question: does throughput (samples/s over all ranks, or steps/s when samples are not logged) fall
well below its early level and stay there — and does the loss still go down meanwhile?

Domain facts relied on:
- Seed 000 §4.3: a fault low in the stack (a hot GPU) shows at the training layer as global
  throughput 1200 -> 800 samples/s (-33%) while the loss curve keeps falling; watching only the
  loss misses it. This is the training-layer symptom of the chain, never a cause by itself.
- Baseline = median of the first 20% of logged steps (after the first 2, which include start-up);
  a later step is slow when the rolling median of 5 steps is <= 80% of the baseline; the drop
  must last >= 3 consecutive steps and >= 10% of the steps.
- Each rank logs its own samples_per_s: the job's throughput is their mean times the number of
  ranks that report it (robust to a rank missing a line).

Must not: decide the root cause; read events (it works on the cached step table only).
"""
from __future__ import annotations

import polars as pl

from ..report.model import Finding
from .context import Context
from .evidence import cite, iso, num, pass_id

DROP = 0.80
WINDOW = 5
SKIP = 2
BASE_SHARE = 0.20
MIN_RUN = 3
MIN_SHARE = 0.10
ALPHA = 0.1


def series(steps: pl.DataFrame, cited: bool = True) -> tuple[pl.DataFrame, str]:
    """Per step the run's throughput (`thr`) and its unit; with `cited`, the mean loss, the times
    (t0, t1) and a line to cite as well."""
    st = steps.filter(pl.col("rank").is_not_null())
    sps = st.filter(pl.col("samples_per_s").is_not_null())
    if not sps.is_empty():
        n = sps.get_column("rank").n_unique()
        agg = pl.col("samples_per_s").mean() * n
        unit = "samples/s"
        src = sps
    else:
        src = st.filter(pl.col("step_time_ms") > 0)
        agg = 1000.0 / pl.col("step_time_ms").median()
        unit = "steps/s"
    s = (
        src.group_by("step")
        .agg(agg.alias("thr"),
             *((pl.col("loss").mean(), pl.col("t_start").min().alias("t0"), pl.col("t_end").max().alias("t1"),
                pl.col("file").first(), pl.col("train_line").first().alias("line")) if cited else ()))
        .sort("step")
    )
    return s, unit


def find(ctx: Context) -> list[Finding]:
    return _find(ctx.steps.select(
        "rank", "step", "samples_per_s", "step_time_ms", "loss", "t_start", "t_end", "file", "train_line"))


def _find(steps: pl.DataFrame) -> list[Finding]:
    # judged on the throughput alone first (half the aggregation): the loss, the times and the
    # lines only make a finding's text
    lean, unit = series(steps, cited=False)
    if not _judge(lean.with_columns(pl.lit(None).alias(c) for c in ("loss", "t0", "t1", "file", "line")), unit):
        return []
    return _judge(*series(steps))


def _judge(s: pl.DataFrame, unit: str) -> list[Finding]:
    s = s.slice(SKIP)
    n = s.height
    nb = max(3, int(n * BASE_SHARE))
    if n < nb + MIN_RUN:
        return []
    base = float(s.head(nb).get_column("thr").median())
    if not base > 0:
        return []
    # judged after the baseline window only: a dip inside it is part of what "normal" was
    s = s.with_row_index("i").with_columns(pl.col("thr").rolling_median(WINDOW, min_samples=1).alias("roll")).with_columns(
        ((pl.col("roll") <= DROP * base) & (pl.col("i") >= nb)).alias("low")
    ).with_columns((pl.col("low") != pl.col("low").shift(1)).fill_null(True).cum_sum().alias("run"))
    runs = (
        s.filter(pl.col("low")).group_by("run")
        .agg(pl.len().alias("k"), pl.col("step").first().alias("s0"), pl.col("step").last().alias("s1"),
             pl.col("thr").median().alias("thr_low"))
        .sort("k", descending=True)
    )
    if runs.is_empty():
        return []
    r = runs.row(0, named=True)
    if r["k"] < max(MIN_RUN, MIN_SHARE * n):
        return []
    win = s.filter(pl.col("step").is_between(r["s0"], r["s1"]))
    low = float(r["thr_low"])
    loss = s.filter(pl.col("loss").is_not_null())
    falling = None
    l0 = l1 = None
    if loss.height >= 3:
        e = loss.with_columns(pl.col("loss").ewm_mean(alpha=ALPHA, adjust=False).alias("ema"))
        ew = e.filter(pl.col("step").is_between(r["s0"], r["s1"]))
        before = e.filter(pl.col("step") < r["s0"])
        if ew.height >= 2:
            l0 = float(before.get_column("ema")[-1]) if not before.is_empty() else float(ew.get_column("ema")[0])
            l1 = float(ew.get_column("ema")[-1])
            falling = l1 < l0
    drop = 1 - low / base
    title = f"throughput drops from {base:.4g} to {low:.4g} {unit} (-{drop:.0%}) over steps {r['s0']}–{r['s1']}"
    if falling:
        title += f" while the loss still falls ({l0:.3g} → {l1:.3g}): the loss curve hides the slowdown"
    elif falling is False:
        title += f"; the loss does not improve meanwhile ({l0:.3g} → {l1:.3g})"
    first = win.row(0, named=True)
    last = win.row(-1, named=True)
    pre = s.filter(pl.col("step") < r["s0"]).tail(1)
    cites = [dict(x, text=f"step {x['step']}: {x['thr']:.4g} {unit}") for x in [*pre.iter_rows(named=True), first]]
    return [Finding(
        rule=pass_id("throughput"), kind="throughput_drop", layer="training", severity="WARN", ranks=[],
        title=title,
        evidence={"unit": unit, "baseline": num(base), "during": num(low), "drop": num(drop),
                  "first_step": int(r["s0"]), "last_step": int(r["s1"]), "steps": int(r["k"]),
                  "loss_still_falling": falling, "loss_ema_before": num(l0), "loss_ema_end": num(l1)},
        lines=cite(cites, text="text"),
        first_seen=iso(first["t0"]), last_seen=iso(last["t1"]),
    )]
