"""Is the job communication-bound, and is that a slow network or waiting for a straggler?

Question: does communication take more than 40% of the step time, and if so, is the time spent
moving data (every rank slow: the interconnect) or waiting for a late rank (one rank at fault)?

Domain facts relied on:
- Seed 000 §4.2: communication share > 40% of the step time is the anomaly threshold; §4.5:
  "communication time / step time" is the most sensitive signal for finding a slow node.
- A collective's time on a rank = waiting for the last peer to arrive + the transfer itself.
  The last rank to arrive does not wait, so transfer ~ the smallest collective time at a step
  (context.wait_expr estimates wait that way when wait_ms is not logged).
- Transfer dominating on every rank = the network is slow for everybody: a job-wide fault
  (`ranks` = every rank). Waiting dominating = the ranks wait for someone: the rank that waits
  least in most of those steps is the one waited for (`ranks`), the others are `victims`; with
  no such rank the waiting is jitter (a loaded host delays random ranks): INFO, no rank named,
  `jitter` (rootcause.py: like `within_noise`, the rules' job-wide finding of the same steps is
  then no root cause either — the rule cannot tell waiting from transfer, the pass did).
- Transfer dominating on every rank (below DOMINANT) without rising (against the steps before the episode, or
  the run's first window when it starts with the run: the share may cross the threshold only as
  a warm-up's slow steps end) — the rule's own false positive, "small models on many GPUs, where
  communication dominates by design" — is the job's balance of compute and communication, not a
  fault during the run: INFO, `by_design` (rootcause.py: no root cause by itself, nor the rules'
  job-wide finding of it). A fabric slow from the start is said, not blamed.
- A rise is a fault only when it costs the run time: on a loaded CPU host communication wanders,
  and a transfer up by RISE over a handful of steps whose step time barely moved is the run's own
  variation (issue 27 item 6: a signal with no fault and no cost is a note). The episode's steps
  must be slower than the baseline's by at least MIN_COST of the whole run's step time (the
  baseline's median step time against the episode's, times the episode's steps), else INFO,
  `within_noise`.
- The rule's "by design" false positive holds while communication does not dominate the step:
  above DOMINANT (communication more than twice everything else the step does) the job spends
  most of its time moving data, whether or not that rose — the verdict is communication-bound on
  no single rank (`ranks` empty: every rank does the same, none differs), WARN.
- A step is communication-bound when the median share across ranks is > 40%; the finding needs
  an episode of such steps (context.sustained: one rank's checkpoint or a preempted process makes
  single steps communication-heavy) covering >= 3 steps, >= one window and >= 10% of the steps.

Must not: decide the root cause; read events (it works on the cached step table only).
"""
from __future__ import annotations

import polars as pl

from ..report.model import Finding
from . import log_every
from .context import Context, median, PeerGroups, sustained, wait_expr, window_for
from .evidence import cite, iso, ms, num, pass_id, rank_ranges
from .outlier import RISE

SHARE = 0.40
MIN_STEPS = 3
MIN_SHARE = 0.10
CULPRIT_SHARE = 0.5
MIN_COST = 0.10          # share of the run's step time a rise must cost to be a fault
DOMINANT = 2 / 3         # communication twice the rest of the step: not a balance, the bottleneck


def per_step_shares(steps: pl.DataFrame, peers: PeerGroups) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per step, over its ranks with a collective time and a step time: how many (n), the median
    comm share, wait share, comm, wait and step time, the rank that waited least and the step's
    first start and last end, sorted by step; and `steps` with wait, share, wshare and `ok`
    (the rows judged). `peers` groups the rows of `steps` by step: the rows not judged are
    masked (a filter would copy the table and regroup it), steps without any are left out."""
    ok = pl.col("rank").is_not_null() & pl.col("comm_ms").is_not_null() & (pl.col("step_time_ms") > 0)
    df = steps.with_columns(ok.fill_null(False).alias("ok"), wait_expr().clip(lower_bound=0.0).alias("wait"))
    df = df.with_columns(
        (pl.col("comm_ms") / pl.col("step_time_ms")).alias("share"),
        (pl.col("wait").fill_null(0.0) / pl.col("step_time_ms")).alias("wshare"),
    )
    judged = ("share", "wshare", "comm_ms", "wait", "step_time_ms", "t_start", "t_end")
    x = df.select("rank", "ok", *(pl.when("ok").then(pl.col(c)).alias(c) for c in judged))
    per = (
        peers.agg(
            x,
            pl.col("ok").sum().alias("n"),
            *(median(c) for c in judged[:5]),
            # the judged ranks in the table's order, as a group_by of those rows gives them
            pl.col("rank").filter("ok").sort_by(pl.col("wait").filter("ok")).first().alias("least"),
            pl.col("t_start").min().alias("t0"),
            pl.col("t_end").max().alias("t1"),
        )
        .insert_column(0, peers.step)
        .filter(pl.col("n") > 0)
        .sort("step")
    )
    return per, df


def _rise(per_step: pl.DataFrame, hot: pl.DataFrame) -> tuple[float, float, float] | None:
    """(transfer per step before, during, and the share of the run's step time the episode's
    slower steps cost) for the communication-bound steps (`hot`): the transfer (comm minus wait,
    medians over ranks) against the steps before them — or, when the episode starts with the run,
    its first window (after the first step's warm-up). The cost is the episode's median step time
    above the baseline's, times its steps, over the sum of every step's median step time (0 when
    the steps did not slow). None when there are too few steps on either side to compare."""
    xfer = (pl.col("comm_ms") - pl.col("wait").fill_null(0.0)).clip(lower_bound=0.0)
    ps = per_step.filter(pl.col("step") > per_step.get_column("step").min())
    w = window_for(per_step.height)
    before = ps.filter(pl.col("step") < hot.get_column("step").min())
    base = before if before.height >= w else ps.head(w)
    during = hot.filter(~pl.col("step").is_in(base.get_column("step").implode()))
    if base.height < w or during.height < w:
        return None
    first = float(base.select(xfer.median()).item() or 0.0)
    later = float(during.select(xfer.median()).item() or 0.0)
    slower = float(during.get_column("step_time_ms").median()) - float(base.get_column("step_time_ms").median())
    total = float(per_step.get_column("step_time_ms").sum())
    cost = max(slower, 0.0) * during.height / total if total > 0 else 0.0
    return first, later, cost


def find(ctx: Context) -> list[Finding]:
    per_step, df = per_step_shares(ctx.steps.select(
        "rank", "step", "comm_ms", "step_time_ms", "wait_est", "t_start", "t_end", "file", "comm_line"), ctx.peers(None))
    if per_step.is_empty():
        return []
    per_step = per_step.with_columns((pl.col("share") > SHARE).alias("hot1"))
    per_step = per_step.with_columns(sustained("hot1", window_for(per_step.height), by=None).alias("hot"))
    hot = per_step.filter(pl.col("hot"))
    n, k = per_step.height, hot.height
    # at least one whole window of steps, as for a straggler: shorter is a fragment of an episode
    if k < max(MIN_STEPS, window_for(n)) or k < MIN_SHARE * n:
        return []
    share = float(hot.get_column("share").median())
    wshare = float(hot.get_column("wshare").median())
    comm = float(hot.get_column("comm_ms").median())
    step_ms = float(hot.get_column("step_time_ms").median())
    wait = float(hot.get_column("wait").drop_nulls().median() or 0.0)
    hot_steps = hot.get_column("step")
    s0, s1 = int(hot_steps.min()), int(hot_steps.max())
    df = df.filter("ok")
    all_ranks = sorted(int(r) for r in df.get_column("rank").unique())
    waiting = wshare >= 0.5 * share
    unsure = False
    if waiting:
        # ranks logging different subsets of the steps (log_every): at a step the late rank did
        # not log, the least-waiting of those that did is a victim — count only the steps every
        # judged rank logged; with too few, no rank is named, and that is not jitter either
        apart = not log_every.rank_medians(
            df.select("rank", "step", pl.lit(0).alias("g"), "wait").drop_nulls(), "g", ["wait"]).is_empty()
        counted = hot.filter(pl.col("n") == len(all_ranks)) if apart else hot
        counts = counted.group_by("least").agg(pl.len().alias("c")).sort("c", descending=True)
        unsure = apart and counted.height < MIN_STEPS
        culprits = [] if unsure else [int(r) for r, c in counts.iter_rows() if c >= CULPRIT_SHARE * counted.height]
    else:
        culprits = all_ranks          # the fabric is slow for every rank: the job-wide fault
    victims = [r for r in all_ranks if r not in culprits] if waiting and culprits else []
    sample = df.filter(pl.col("step").is_in(hot_steps.implode()))
    severity, flag, rise = "WARN", None, None
    if waiting and culprits:
        v = sample.filter(pl.col("rank").is_in(victims))
        v_wait = float(v.get_column("wait").median())
        v_share = float(v.get_column("share").median())
        title = (f"ranks {rank_ranges(victims)} spend {v_share:.0%} of each step in collectives, waiting "
                 f"{ms(v_wait)} per step for rank {rank_ranges(culprits)} (steps {s0}–{s1}, {k} of {n})")
        mode = "waiting"
        rows = v.sort("wait", descending=True).head(3)
    elif waiting:
        title = (f"communication takes {share:.0%} of the step time ({ms(comm)} of {ms(step_ms)}), mostly waiting "
                 f"({ms(wait)}) for ranks that arrive late at random — no single rank is waited for "
                 f"(steps {s0}–{s1}, {k} of {n})")
        mode = "waiting"
        rows = sample.sort("wait", descending=True).head(3)
        severity = "INFO"
        if unsure:   # too few steps logged by every rank to tell who is waited for: said, not judged noise
            title = (f"communication takes {share:.0%} of the step time ({ms(comm)} of {ms(step_ms)}), mostly waiting "
                     f"({ms(wait)}); the ranks log different steps and too few were logged by all {len(all_ranks)} "
                     f"to tell which rank is waited for (steps {s0}–{s1}, {k} of {n})")
        else:
            flag = "jitter"   # random late arrivals: host noise, not a communication fault
    else:
        mode = "network"
        rows = sample.sort("comm_ms", descending=True).head(3)
        rise = _rise(per_step, hot)
        first, later, cost = rise if rise is not None else (0.0, 0.0, 0.0)
        rose = rise is not None and first > 0 and later >= RISE * first
        dominant = share > DOMINANT
        flag = None
        if rose and (cost >= MIN_COST or dominant):
            title = (f"communication takes {share:.0%} of the step time on all {len(all_ranks)} ranks ({ms(comm)} of "
                     f"{ms(step_ms)}), and it is transfer, not waiting ({ms(wait)}): the interconnect is slow for "
                     f"everyone (steps {s0}–{s1}, {k} of {n})")
        elif dominant:
            culprits = []   # every rank does the same: the job's balance, no rank at fault
            title = (f"communication takes {share:.0%} of the step time on all {len(all_ranks)} ranks ({ms(comm)} of "
                     f"{ms(step_ms)}), transfer rather than waiting ({ms(wait)}): more than twice everything else the "
                     f"step does, on every rank alike — the job is communication-bound by its own balance of compute "
                     f"and communication, whether or not that rose (steps {s0}–{s1}, {k} of {n})")
        elif rose:
            title = (f"communication takes {share:.0%} of the step time on all {len(all_ranks)} ranks ({ms(comm)} of "
                     f"{ms(step_ms)}); the transfer rose ({ms(first)} per step before, {ms(later)} in those steps) but "
                     f"the slower steps cost {cost:.0%} of the run's step time: communication wandering on a loaded "
                     f"host, not a fault (steps {s0}–{s1}, {k} of {n})")
            severity, flag = "INFO", "within_noise"
        else:
            basis = (f"the transfer did not rise ({ms(first)} per step before or at the start, {ms(later)} in those "
                     f"steps)" if rise is not None else "too few steps to show the transfer rose")
            title = (f"communication takes {share:.0%} of the step time on all {len(all_ranks)} ranks ({ms(comm)} of "
                     f"{ms(step_ms)}), transfer rather than waiting ({ms(wait)}), and {basis}: the job's own balance of "
                     f"compute and communication — a small model on many ranks, or a fabric slow from the start — "
                     f"not something that went wrong during the run (steps {s0}–{s1}, {k} of {n})")
            severity, flag = "INFO", "by_design"
    return [Finding(
        rule=pass_id("comm_bound"), kind="comm_bound", layer="communication", severity=severity,
        ranks=culprits, victims=victims, title=title,
        evidence={"mode": mode, "comm_share": num(share), "wait_share": num(wshare), "comm_ms": num(comm),
                  **({flag: True} if flag else {}),
                  **({"transfer_before_ms": num(first), "transfer_ms": num(later), "rise_cost_share": num(cost)}
                     if mode == "network" and rise is not None else {}),
                  "wait_ms": num(wait), "step_time_ms": num(step_ms), "threshold": SHARE,
                  "bound_steps": k, "steps": n, "first_step": s0, "last_step": s1},
        lines=cite([{"source_file": x["file"], "line": x["comm_line"], "rank": x["rank"], "timestamp": x["t_end"],
                     "text": f"step {x['step']}: comm {ms(x['comm_ms'])}, wait {ms(x['wait'])} of {ms(x['step_time_ms'])}"}
                    for x in rows.iter_rows(named=True)], text="text"),
        first_seen=iso(hot.get_column("t0").min()), last_seen=iso(hot.get_column("t1").max()),
    )]
