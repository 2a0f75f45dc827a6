"""Does the loss diverge or plateau — judged on raw AND smoothed loss, outside warmup?

Question: after warmup, does the loss rise for good (divergence), turn non-finite, or stop
improving for 100 steps (plateau)?

Domain facts relied on:
- Seed 000 §4.2: "loss not decreasing for 100 consecutive steps" is the plateau threshold; log
  and judge the EMA as well as the raw value so that one noisy point is not taken for
  divergence. Seed 003: an alert when the loss rises for 10 consecutive logging steps.
- Seed 003 case 1: loss jumping between 3.0 and 5.0 while the learning rate ramps up
  (stage=warmup) is normal and needs no action. Warmup ends at the last step marked
  stage=warmup, or at the end of the initial strictly rising learning-rate ramp when no stage is
  logged; nothing before it is judged (except a non-finite loss, which is never normal).
- Each rank logs its own local loss, and those differ by data shard (seed 003): the series
  judged is the mean over ranks per step, and a divergence or plateau of that mean is the whole
  job's (`ranks` = every rank that logs the loss; none when the lines carry no rank). A
  non-finite loss names the ranks that logged it.
- Divergence: EMA (alpha 0.1) >= 15% above its running minimum for >= 10 consecutive logged
  points AND the raw median over those points >= 15% above that minimum too.
- Plateau: over a window of 100 steps — or a tenth of the run when longer, since a slowly
  falling loss on a long run is still progress — (>= 5 points) the EMA improves by < 1% and does
  not rise by more than 5% (a rising loss is divergence, not a plateau).
- Proportion (issue 27): a loss that fell by >= 10% (EMA) after warmup and only then flattens
  is a run converging, not a fault: its plateau is a note (INFO), never a root cause by itself.
  A loss that never improved after warmup (flat from the start) is a WARN: the training is stuck.

Must not: decide the root cause; read columns other than those in `loss_series`.
"""
from __future__ import annotations

import polars as pl

from ..report.model import Finding
from .context import Context
from .evidence import cite, iso, num, pass_id

ALPHA = 0.1
DIV_RISE = 0.15
DIV_POINTS = 10
PLATEAU_STEPS = 100
PLATEAU_GAIN = 0.01
PLATEAU_RISE = 0.05
PLATEAU_POINTS = 5
# the EMA fell by at least this share from the loss's first post-warmup level before flattening: converged
CONVERGED_DROP = 0.10


def loss_series(events: pl.LazyFrame) -> pl.DataFrame:
    """One row per logged step: mean loss over ranks, lr, warmup flag, time and a citation
    (also used by the HTML report's loss plot)."""
    return _loss_frames(events, cited=True)[0]


def _loss_frames(events: pl.LazyFrame, cited: bool) -> tuple[pl.DataFrame, pl.DataFrame]:
    """`loss_series`, and per rank whether it logged a non-finite loss, in one collect.
    Without `cited`, the series lacks the times (t0, t1) and the citation (file, line): the
    judgement never reads them, only the findings' text does, and their columns are half the
    scan (`find`).

    Read from the events, not the step table: flat metric lines (HF/ms-swift) often carry no
    rank, and their loss still tells whether training converges.
    """
    rows = (
        events.select("rank", "step", "loss", "lr", "stage", *(("timestamp", "source_file", "line") if cited else ()))
        .filter(pl.col("loss").is_not_null() & pl.col("step").is_not_null())
    )
    series = rows.group_by("step").agg(
        pl.col("loss").mean(),
        pl.col("loss").is_finite().all().alias("finite"),
        pl.col("lr").max(),
        pl.col("stage").str.contains("(?i)^warm").any().alias("warm"),
        *((pl.col("timestamp").min().alias("t0"), pl.col("timestamp").max().alias("t1")) if cited else ()),
    )
    if cited:
        lowest = pl.col("rank").fill_null(-1)
        at = (
            rows.select("step", "rank", "source_file", "line", "loss")
            .filter(lowest == lowest.min().over("step"))
            .group_by("step")
            .agg(pl.col("source_file").first().alias("file"), pl.col("line").first(),
                 pl.col("loss").first().alias("line_loss"))
        )
        series = series.join(at, on="step", how="left")
    per_rank = rows.group_by("rank").agg((~pl.col("loss").is_finite()).any().alias("bad")).sort("rank")
    s, r = pl.collect_all([series.sort("step"), per_rank])
    return s, r


def warmup_end(s: pl.DataFrame) -> int | None:
    """Last step of warmup: stage=warmup, or the initial strictly rising lr ramp (>= 3 points)."""
    ends: list[int] = []
    w = s.filter(pl.col("warm").fill_null(False))
    if not w.is_empty():
        ends.append(int(w.get_column("step").max()))
    lr = s.filter(pl.col("lr").is_not_null()).select("step", "lr")
    if lr.height >= 3:
        rising = lr.with_columns((pl.col("lr").diff() > 0).fill_null(True).alias("up"))
        first_flat = rising.with_row_index().filter(~pl.col("up"))
        stop = int(first_flat.get_column("index").min()) if not first_flat.is_empty() else lr.height
        if stop >= 3:
            ends.append(int(lr.get_column("step")[stop - 1]))
    return max(ends) if ends else None


def _cite_rows(s: pl.DataFrame, steps: list[int], text: str) -> list[dict]:
    """The series' rows of `steps` as `cite` reads them: the step's line (the lowest rank's,
    `_loss_frames`) and its last time; the text states the loss that line logs, and the mean
    over the ranks (the series' value) beside it when they differ."""
    def said(r: dict) -> str:
        own, mean = r.get("line_loss"), r["loss"]
        if own is None or f"{own:.4g}" == f"{mean:.4g}":
            return f"loss {mean:.4g}"
        return f"loss {own:.4g} (mean over ranks {mean:.4g})"

    return [{"source_file": r["file"], "line": r["line"], "timestamp": r["t1"],
             "text": f"{text} step {r['step']}: {said(r)}"}
            for r in s.filter(pl.col("step").is_in(steps)).iter_rows(named=True)]


def _nonfinite(s: pl.DataFrame, per_rank: pl.DataFrame) -> Finding | None:
    bad = s.filter(~pl.col("finite"))
    if bad.is_empty():
        return None
    first = bad.row(0, named=True)
    bad_ranks = sorted(int(r) for r in per_rank.filter(pl.col("bad")).get_column("rank").drop_nulls())
    ranks = bad_ranks
    return Finding(
        rule=pass_id("loss"), kind="loss_divergence", layer="training", severity="ERROR", ranks=ranks,
        title=f"loss is not finite from step {first['step']} ({bad.height} logged steps with NaN/inf loss"
              + (f" on rank(s) {','.join(map(str, bad_ranks))}" if ranks else "") + ")",
        evidence={"first_step": int(first["step"]), "nonfinite_steps": bad.height, "ranks": bad_ranks},
        lines=cite([{"source_file": first["file"], "line": first["line"], "timestamp": first["t1"],
                     "text": f"step {first['step']}: loss {first['loss']}"}], text="text"),
        first_seen=iso(first["t0"]), last_seen=iso(bad.get_column("t1").max()),
    )


def _divergence(p: pl.DataFrame, wend: int | None, ranks: list[int]) -> Finding | None:
    d = p.with_columns(pl.col("ema").cum_min().alias("emin")).with_columns(
        (pl.col("ema") >= (1 + DIV_RISE) * pl.col("emin")).alias("up")
    ).with_columns((pl.col("up") != pl.col("up").shift(1)).fill_null(True).cum_sum().alias("run"))
    runs = (
        d.filter(pl.col("up"))
        .group_by("run")
        .agg(pl.len().alias("n"), pl.col("step").first().alias("s0"), pl.col("step").last().alias("s1"),
             pl.col("emin").first().alias("base"), pl.col("loss").median().alias("raw_med"),
             pl.col("ema").max().alias("ema_max"), pl.col("loss").max().alias("raw_max"))
        .filter((pl.col("n") >= DIV_POINTS) & (pl.col("raw_med") >= (1 + DIV_RISE) * pl.col("base")))
        .sort("s0")
    )
    if runs.is_empty():
        return None
    r = runs.row(0, named=True)
    # onset: the last point before the rise still on the floor (within 2% of the minimum EMA)
    floor = d.filter((pl.col("step") < r["s0"]) & (pl.col("ema") <= 1.02 * r["base"]))
    onset = floor.row(-1, named=True) if not floor.is_empty() else d.row(0, named=True)
    end = d.filter(pl.col("step") <= r["s1"]).row(-1, named=True)
    rise = r["ema_max"] / r["base"] - 1
    lr = end["lr"]
    title = (f"loss diverges after warmup: EMA {r['base']:.3g} at step {onset['step']} → {r['ema_max']:.3g} by step "
             f"{r['s1']} (+{rise:.0%}), raw loss up to {r['raw_max']:.3g}"
             + (f"; lr {lr:.2g}" if lr is not None else "") + (f", warmup ended at step {wend}" if wend is not None else ""))
    return Finding(
        rule=pass_id("loss"), kind="loss_divergence", layer="training", severity="WARN", ranks=ranks,
        title=title,
        evidence={"ema_min": num(r["base"]), "ema_max": num(r["ema_max"]), "raw_median": num(r["raw_med"]),
                  "raw_max": num(r["raw_max"]), "rise": num(rise), "onset_step": int(onset["step"]),
                  "first_step": int(r["s0"]), "last_step": int(r["s1"]), "points": int(r["n"]),
                  "warmup_end_step": wend, "alpha": ALPHA},
        lines=cite(_cite_rows(d, [int(onset["step"]), int(r["s0"]), int(r["s1"])], "at"), text="text"),
        first_seen=iso(onset["t0"]), last_seen=iso(end["t1"]),
    )


def _plateau(p: pl.DataFrame, wend: int | None, ranks: list[int]) -> Finding | None:
    span = int(p.get_column("step").max() - p.get_column("step").min())
    # 100 steps (seed 000), or a tenth of the run when that is longer: on a long run a loss that
    # falls 0.5% per 100 steps is still progress, not a plateau
    window = max(PLATEAU_STEPS, span // 10)
    if p.height < PLATEAU_POINTS or span < window:
        return None
    win = f"{window + 1}i"
    q = p.with_columns(
        pl.col("ema").rolling_min_by("step", window_size=win).alias("wmin"),
        pl.col("ema").rolling_max_by("step", window_size=win).alias("wmax"),
        pl.col("step").rolling_min_by("step", window_size=win).alias("wstart"),
        pl.col("ema").is_not_null().cast(pl.Int32).rolling_sum_by("step", window_size=win).alias("npts"),
    )
    first_step = int(p.get_column("step").min())
    start_ema = p.select(pl.col("step").alias("wstart"), pl.col("ema").alias("e0"))
    q = q.join(start_ema, on="wstart", how="left").filter(
        (pl.col("step") - window >= first_step)
        & (pl.col("npts") >= PLATEAU_POINTS)
        & (pl.col("wmin") >= (1 - PLATEAU_GAIN) * pl.col("e0"))
        & (pl.col("wmax") <= (1 + PLATEAU_RISE) * pl.col("e0"))
    )
    if q.is_empty():
        return None
    a = q.row(0, named=True)
    z = q.row(-1, named=True)
    s0 = int(a["wstart"])
    e0 = float(a["e0"])
    e1 = float(a["ema"])
    title = (f"loss plateaus after warmup: EMA {e0:.4g} at step {s0} → {e1:.4g} at step {a['step']} "
             f"(< {PLATEAU_GAIN:.0%} better over {window} steps; {q.height} such windows up to step {z['step']})")
    t0 = p.filter(pl.col("step") == s0).get_column("t0")
    # the loss where judging starts: the median of its first points (one noisy point is not a level)
    e_first = float(p.get_column("loss").head(PLATEAU_POINTS).median())
    converged = e0 <= (1 - CONVERGED_DROP) * e_first
    if converged:
        title += f", after falling from {e_first:.4g}: converging, a note"
    return Finding(
        rule=pass_id("loss"), kind="loss_plateau", layer="training", severity="INFO" if converged else "WARN",
        ranks=ranks, title=title,
        evidence={"ema_start": num(e0), "ema_end": num(e1), "first_step": s0, "last_step": int(z["step"]),
                  "window_steps": window, "min_gain": PLATEAU_GAIN, "warmup_end_step": wend,
                  "ema_after_warmup": num(e_first), "converged": converged},
        lines=cite(_cite_rows(p, [s0, int(a["step"])], "at"), text="text"),
        first_seen=iso(t0[0] if len(t0) else None), last_seen=iso(z["t1"]),
    )


def find(ctx: Context) -> list[Finding]:
    # judged without the times and citations first: a healthy run never needs them
    s, per_rank = _loss_frames(ctx.events, cited=False)
    if not _judge(s.with_columns(pl.lit(None).alias(c) for c in ("t0", "t1", "file", "line")), per_rank):
        return []
    return _judge(*_loss_frames(ctx.events, cited=True))


def _judge(s: pl.DataFrame, per_rank: pl.DataFrame) -> list[Finding]:
    if s.is_empty():
        return []
    out: list[Finding] = []
    all_ranks = sorted(int(r) for r in per_rank.get_column("rank").drop_nulls())
    nf = _nonfinite(s, per_rank)
    if nf is not None:
        out.append(nf)
    wend = warmup_end(s)
    post = s.filter(pl.col("finite") & ((pl.col("step") > wend) if wend is not None else pl.lit(True)))
    post = post.filter(pl.col("loss").is_finite())
    if post.height < 2:
        return out
    p = post.with_columns(pl.col("loss").ewm_mean(alpha=ALPHA, adjust=False).alias("ema"))
    if nf is not None:
        return out  # a NaN loss already is the divergence; the finite remainder says nothing more
    div = _divergence(p, wend, all_ranks)
    if div is not None:
        return [div]
    plat = _plateau(p, wend, all_ranks)
    return [plat] if plat is not None else []
