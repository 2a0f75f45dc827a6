"""Which rank made the others wait, over the whole run, and what was it doing meanwhile?

Question: summed over every step, is most of the run's waiting in collectives caused by one rank
— however it is spread in time (two 8 s stalls count as much as 16 s of small delays) — and what
did that rank log while its peers waited?

Domain facts relied on:
- In a synchronous collective every rank leaves when the last one has arrived: at each step the
  rank that waits least is the one the others waited for, and what it made them wait is the
  others' median wait minus its own. Summed per rank over the run, that is the waiting each rank
  caused (a healthy run spreads it over every rank: whoever the scheduler delayed last).
- The sustained passes (straggler, data_load_skew, comm_bound) look for episodes; a rank that
  stops now and then for seconds (an evaluation, a checkpoint upload, a garbage collection of its
  own) is in no episode, yet costs the whole job its stalls. A stall step is one where the
  waiting it caused is >= `STALL_MS` and >= `STALL_STEPS` times the run's median step time; a rank
  is named when
  the waiting it caused in stall steps is >= `SHARE` of all the waiting of the run and
  >= `MIN_SECONDS`.
- What it was doing is in its own log, between the end of its previous step and its arrival at
  the collective (gradients ready, else the collective's end minus its time): the lines it wrote
  there that are not its per-step routine (event types it logs at most steps), whatever they are
  called. A duration logged with such a line (a numeric key named like a duration: duration,
  elapsed, took, secs, *_s, *_ms ...) is preferred; else the silence before the line, measured
  on its own clock. Nothing written there: the silence itself is reported, between the two lines
  around it.

- Spread thin, the same total counts: a rank waited for at most steps, a little each time (a
  sleep in its input pipeline, 10% more compute: under the sustained passes' thresholds), that
  caused most of the run's waiting is named too (`_spread`), the kind from what it did meanwhile
  — its own data_load_ms or compute_ms above its peers' at those steps (data_load_skew or
  straggler). Its bar is proportionate, not a number of seconds: what it caused is >=
  `SPREAD_WALL` of the run's time (a 10 s run slowed 7% costs as much, in share, as a 10 h one),
  and it was the one waited for at more steps than chance allows — in a healthy run which rank
  arrives last is a matter of scheduling, equally likely for every rank, so being last at k of N
  steps of n ranks has the binomial chance P(X >= k | N, 1/n), times n for whichever rank it is;
  a rank is named only when that is <= `SPREAD_CHANCE` (two ranks, last at 20 of 29 steps: 0.06;
  four ranks, last at 19 of 29: 2e-5).
- When the ranks log different subsets of the steps (each its own --log-every: log_every), a
  rank can be the one waited for only at the steps it logged: it is judged over those steps
  alone (its share of their waiting and of their time, same bars), and its chance of being last
  at a step is 1 over the ranks that logged that step (`last_by_chance_among`).

Must not: decide the root cause; replace the sustained passes (only stalls of seconds count here,
which no per-step delay of a straggler or a slow input pipeline reaches).
"""
from __future__ import annotations

import json
import math
import re
from typing import Any

import numpy as np
import polars as pl

from ..report.model import Finding
from .context import Context, PeerGroups, median, wait_expr
from .evidence import cite, iso, ms, num, pass_id, rank_ranges, shorten
from .log_every import rank_medians
from .outlier import numbers

STALL_MS = 1000.0
STALL_STEPS = 2.0
SHARE = 0.5
MIN_SECONDS = 2.0
ROUTINE = 0.5
# a rank that causes the waiting a little at a time (no stall): most of it, 5% of the run,
# at most steps, more often than chance (_spread); a healthy run spreads it (measured on the
# held-out gloo runs where nothing was injected, batches 1-3, 5, 7: the top rank's share
# 0.21-0.80 and 2-17% of the run, its chance of being last that often >= 3e-3 (x n: 2.4e-2);
# the two weak stragglers there, 60 ms of sleep on 300 and 700 ms steps: 1.3e-9 and 4.9e-6)
SPREAD_SHARE = 0.65
SPREAD_WALL = 0.05
SPREAD_STEPS = 0.5
SPREAD_MIN_STEPS = 10
SPREAD_CHANCE = 1e-4
_DURATION = re.compile(r"(dur|elapsed|took|latency|secs|seconds|(^|_)time|_s$|_ms$|_us$|_ns$|_sec$)", re.I)
_UNIT = (("_ms", 1.0), ("_us", 1e-3), ("_ns", 1e-6), ("millis", 1.0), ("msec", 1.0))


def caused(steps: pl.DataFrame, peers: PeerGroups | None = None) -> pl.DataFrame:
    """Per step judged (>= 2 ranks with a wait): the rank that waited least (`rank`), its wait
    (`own`), the others' median (`others`, see below), the waiting it caused (`caused_ms` =
    others - own) and the step's median step time (`step_ms`). Only the columns judged are
    aggregated (64 ranks x 28,750 steps: a group_by of four columns)."""
    st = steps.filter(pl.col("rank").is_not_null())
    # no collective time logged at all: the step times say it, for a stall between steps — the
    # waiting ranks' step holds the wait, the late rank's does not (a stall inside a step, which
    # every rank's step time holds alike, cannot be seen without collective times)
    wait = (wait_expr() if st.get_column("wait_est").null_count() < st.height
            else pl.col("step_time_ms") - pl.col("step_time_ms").min().over("step"))
    aggs = (pl.col("wait").count().alias("n"), pl.col("rank").get(pl.col("wait").arg_min()).alias("rank"),
            pl.col("wait").min().alias("own"), median("wait").alias("_med"), pl.col("wait").max().alias("_max"),
            median("step_time_ms").alias("step_ms"))
    if peers is not None and st.height == steps.height:
        # the step table's rows grouped by step once for every pass (context.PeerGroups)
        per = peers.agg(st.select("rank", wait.alias("wait"), "step_time_ms"), *aggs).with_columns(peers.step)
    else:
        per = st.select("rank", "step", wait.alias("wait"), "step_time_ms").group_by("step").agg(*aggs)
    # the others' median is the median of the step's waits (the max with two ranks): within one
    # order statistic of the median without the least, and 5x cheaper than sorting every step's
    # waits; `stall_rows` gives the exact figure of the few stall steps that are reported
    return (per.filter((pl.col("n") >= 2) & pl.col("step").is_not_null())
            .with_columns(pl.when(pl.col("n") == 2).then(pl.col("_max")).otherwise(pl.col("_med")).alias("others"))
            .drop("_med", "_max")
            .with_columns((pl.col("others") - pl.col("own")).clip(lower_bound=0.0).alias("caused_ms"))
            .sort("step"))


def stall_rows(steps: pl.DataFrame, stalls: pl.DataFrame) -> pl.DataFrame:
    """The stall steps (`caused` rows) with the late rank's row of the step table (times, lines),
    the end of its previous logged step (`prev_end`) and the ranks that waited (`waiters`)."""
    out = []
    for s in stalls.iter_rows(named=True):
        mine = steps.filter((pl.col("rank") == s["rank"]) & (pl.col("step") <= s["step"])).sort("step").tail(2)
        row = mine.row(-1, named=True)
        prev = mine.row(0, named=True)["t_end"] if mine.height == 2 else None
        others = steps.filter((pl.col("step") == s["step"]) & (pl.col("rank") != s["rank"]))
        exact = others.get_column("wait_est").drop_nulls().median()
        caused_ms = max(0.0, float(exact) - s["own"]) if exact is not None and steps.get_column("wait_est").null_count() < steps.height else s["caused_ms"]
        out.append({**row, **s, "caused_ms": caused_ms, "prev_end": prev,
                    "waiters": sorted(int(w) for w in others.get_column("rank"))})
    return pl.DataFrame(out, infer_schema_length=None)


def _duration_ms(name: str, v: float) -> float | None:
    if not _DURATION.search(name) or not math.isfinite(v) or v < 0:
        return None
    low = name.lower()
    for suffix, f in _UNIT:
        if low.endswith(suffix) or suffix.strip("_") in low.split("_"):
            return v * f
    return v * 1000.0      # seconds: duration, elapsed, took_s, secs ...


def gap_events(ctx: Context, rank: int, windows: list[tuple[Any, Any, int]], routine: set[str]) -> list[dict[str, Any]]:
    """What `rank` logged in each (start, end, step) window that is not routine, with a duration
    (ms) per line: a logged one when a key says so, else the silence before the line."""
    lo = min(w[0] for w in windows)
    hi = max(w[1] for w in windows)
    ev = (ctx.aligned(ctx.events.select("rank", "host", "timestamp", "event", "message", "duration_s", "extra",
                                        "fields", "source_file", "line")
                      .filter(pl.col("rank") == rank))
          .filter(pl.col("ts_aligned").is_between(lo, hi)).sort("ts_aligned").collect())
    out = []
    for start, end, step in windows:
        inside = ev.filter(pl.col("ts_aligned").is_between(start, end))
        prev_t = start
        for r in inside.iter_rows(named=True):
            silent = (r["ts_aligned"] - prev_t).total_seconds() * 1000.0
            prev_t = r["ts_aligned"]
            if r["event"] in routine:
                continue
            logged = None
            if r["duration_s"] is not None and math.isfinite(r["duration_s"]):
                logged = ("duration_s", r["duration_s"] * 1000.0)
            for col in ("extra", "fields"):
                if logged is None and r[col]:
                    try:
                        obj = json.loads(r[col])
                    except ValueError:
                        continue
                    for k, v in numbers(obj):
                        d = _duration_ms(k, v)
                        if d is not None:
                            logged = (k, d)
                            break
            out.append({**r, "step": step, "silent_ms": silent, "key": logged[0] if logged else None,
                        "dur_ms": logged[1] if logged else silent})
    return out


def find(ctx: Context) -> list[Finding]:
    steps = ctx.steps.select("rank", "step", "wait_est", "step_time_ms", "t_start", "t_end", "comm_ms",
                             "grad_ready_ts", "file", "train_line", "comm_line", "ready_line", "data_line",
                             "data_load_ms", "compute_ms")
    if steps.is_empty():
        return []
    per = caused(steps, ctx.peers(None))
    if per.is_empty():
        return []
    # the run's first step is everyone's warm-up: its collective sets up the connections (a
    # communicator is created lazily, at its first use), and ranks arrive from their start-up
    # work at different times: no rank made the others wait there
    per = per.filter(pl.col("step") > per.get_column("step").min())
    if per.is_empty():
        return []
    total = float(per.get_column("caused_ms").sum())
    # against the run's median step: a stall step's own step time holds the stall
    typical = per.get_column("step_ms").drop_nulls().median() or 0.0
    stall = pl.col("caused_ms") >= max(STALL_MS, STALL_STEPS * float(typical))
    stalls = per.filter(stall)
    if total <= 0:
        return []
    if stalls.is_empty():
        return _spread(ctx, steps, per, total, set())
    by_rank = stalls.group_by("rank").agg(pl.col("caused_ms").sum().alias("ms"), pl.len().alias("k")).sort(
        "ms", descending=True)
    out: list[Finding] = []
    run_total = total
    for row in by_rank.iter_rows(named=True):
        r, caused_ms = int(row["rank"]), float(row["ms"])
        if caused_ms < SHARE * total or caused_ms < MIN_SECONDS * 1000.0:
            continue
        mine = stall_rows(steps, stalls.filter(pl.col("rank") == r).sort("step"))
        total += float(mine.get_column("caused_ms").sum()) - caused_ms     # the exact figures reported
        caused_ms = float(mine.get_column("caused_ms").sum())
        n_steps = steps.get_column("step").n_unique()
        counts = (ctx.events.filter(pl.col("rank") == r).group_by("event").agg(pl.len().alias("c")).collect())
        routine = {e for e, c in counts.iter_rows() if e is not None and c >= ROUTINE * n_steps}
        windows = []
        for s in mine.iter_rows(named=True):
            arrive = s["t_end"] - _td(s["comm_ms"]) if s["t_end"] is not None else None
            start = s["prev_end"] if s["prev_end"] is not None else s["t_start"]
            if start is not None and arrive is not None and arrive > start:
                windows.append((start, arrive, int(s["step"])))
        found = gap_events(ctx, r, windows, routine) if windows else []
        waiters = sorted({int(w) for lst in mine.get_column("waiters") for w in lst})
        parts = []
        for s in mine.iter_rows(named=True):
            here = [g for g in found if g["step"] == s["step"]]
            best = max(here, key=lambda g: g["dur_ms"], default=None)
            parts.append((s, best))
        named = [(s, g) for s, g in parts if g is not None and g["dur_ms"] >= 0.25 * s["caused_ms"]]
        what = _phrase(named, parts)
        phase = _stall_phase(steps, mine, caused_ms) if not named else None
        kind = "straggler"
        if phase is not None:
            kind, col, per_step = phase
            what += (f", {_PHASE_WORDS[col]}: its {col} " + ", ".join(
                f"{ms(own)} at step {st} vs its peers' {ms(peer)}" for st, own, peer in per_step[:4]))
        stall_txt = "; ".join(f"{ms(s['caused_ms'])} at step {s['step']}" for s, _ in parts[:6])
        title = (f"rank {r} {what} while ranks {rank_ranges(waiters)} waited ({stall_txt}): it caused "
                 f"{ms(caused_ms)} of waiting over the run, {caused_ms / total:.0%} of all of it")
        lines = cite([{**g, "text": shorten(f"{g['event']}: {g['message'] or ''}", 120)} for _, g in named], text="text")
        lines += cite([{"source_file": s["file"], "line": s["comm_line"] or s["train_line"], "rank": r,
                        "timestamp": s["t_end"], "text": f"step {s['step']}: arrives {ms(s['caused_ms'])} after its peers"}
                       for s, _ in parts[:3]], text="text")
        victims_rows = steps.filter(pl.col("step").is_in(mine.get_column("step").implode()) & (pl.col("rank") != r)
                                    ).sort("wait_est", descending=True).head(2)
        lines += cite([{"source_file": v["file"], "line": v["comm_line"], "rank": v["rank"], "timestamp": v["t_end"],
                        "text": f"step {v['step']}: waits {ms(v['wait_est'])}"} for v in victims_rows.iter_rows(named=True)],
                      text="text")
        out.append(Finding(
            rule=pass_id("own_gap"), kind=kind, layer="resource", severity="WARN", ranks=[r],
            victims=waiters, title=title, basis="own_gap",
            evidence={"caused_wait_ms": num(caused_ms), "all_wait_ms": num(total), "share": num(caused_ms / total),
                      "stalls": [{"step": int(s["step"]), "caused_ms": num(s["caused_ms"]),
                                  "event": g["event"] if g else None, "key": g["key"] if g else None,
                                  "duration_ms": num(g["dur_ms"]) if g else None,
                                  "line": f"{g['source_file']}:{g['line']}" if g else None} for s, g in parts],
                      "gap_events": sorted({g["event"] for _, g in named}),
                      **({"phase": phase[1]} if phase is not None else {})},
            lines=lines,
            first_seen=iso(mine.get_column("t_start").min()), last_seen=iso(mine.get_column("t_end").max()),
        ))
    return out + _spread(ctx, steps, per, run_total, {r for f in out for r in f.ranks})


def _spread(ctx: Context, steps: pl.DataFrame, per: pl.DataFrame, total: float, named: set[int]) -> list[Finding]:
    """The rank that made the others wait at most steps, a little each time: no stall of seconds,
    yet most of the run's waiting (>= SPREAD_SHARE, >= SPREAD_WALL of the run's time, the one
    waited for at >= SPREAD_STEPS of the steps). What it did meanwhile is in its own times: its
    input (data_load_ms) or its compute above its peers' at those steps; the larger names the
    kind (data_load_skew or straggler), cited with the lines that logged it."""
    if per.height < SPREAD_MIN_STEPS:
        return []
    by = per.group_by("rank").agg(pl.col("caused_ms").sum().alias("ms"), pl.len().alias("k")).sort("ms", descending=True)
    r = int(by.row(0, named=True)["rank"])
    # ranks logging different subsets of the steps (log_every): a rank can be waited for only at
    # the steps it logged, among the ranks that logged them: judged there, by the same bars
    mixed = not rank_medians(steps.select("rank", "step", pl.lit(0).alias("g"), "step_time_ms").drop_nulls(),
                             "g", ["step_time_ms"]).is_empty()
    if mixed:
        per = per.filter(pl.col("step").is_in(steps.filter(pl.col("rank") == r).get_column("step").implode()))
        total = float(per.get_column("caused_ms").sum())
    if per.height < SPREAD_MIN_STEPS:
        return []
    mine_per = per.filter(pl.col("rank") == r)
    caused_ms, k = float(mine_per.get_column("caused_ms").sum()), mine_per.height
    wall = float(per.get_column("step_ms").drop_nulls().sum())
    n_ranks = steps.get_column("rank").n_unique() if mixed else int(per.get_column("n").median() or 0)
    chance = n_ranks * (last_by_chance_among(k, per.get_column("n").to_list()) if mixed
                        else last_by_chance(k, per.height, n_ranks))
    if (r in named or caused_ms < SPREAD_SHARE * total or wall <= 0 or caused_ms < SPREAD_WALL * wall
            or k < SPREAD_STEPS * per.height or n_ranks < 2 or chance > SPREAD_CHANCE):
        return []
    # what the sustained passes name, they explain better (their episode, their basis): only
    # a rank they miss is named here (asked only when a rank stands out this way: rare; their
    # findings computed once, for the diagnosis and here: Context.found_by)
    from . import data_load_skew, straggler

    if any(r in f.ranks for f in ctx.found_by(straggler.find) + ctx.found_by(data_load_skew.find)):
        return []
    at = per.filter(pl.col("rank") == r).get_column("step").implode()
    sel = steps.filter(pl.col("step").is_in(at))
    mine, others = sel.filter(pl.col("rank") == r), sel.filter(pl.col("rank") != r)
    per_step = float(per.filter(pl.col("rank") == r).get_column("caused_ms").median() or 0.0)

    def excess(col: str) -> tuple[float, float, float]:
        a = mine.get_column(col).drop_nulls().median() if col in mine.columns else None
        b = others.get_column(col).drop_nulls().median() if col in others.columns else None
        return (float(a or 0.0), float(b or 0.0), float(a or 0.0) - float(b or 0.0)) if a is not None and b is not None \
            else (0.0, 0.0, 0.0)

    d_own, d_peer, d_x = excess("data_load_ms")
    c_own, c_peer, c_x = excess("compute_ms")
    data = d_x >= 0.5 * per_step and d_x >= c_x
    kind, what, col, line = (("data_load_skew", "loading its input", "data_load_ms", "data_line") if data
                             else ("straggler", "computing", "compute_ms", "train_line"))
    own_v, peer_v = (d_own, d_peer) if data else (c_own, c_peer)
    waiters = sorted(int(w) for w in steps.get_column("rank").drop_nulls().unique() if int(w) != r)
    title = (f"rank {r} was the one its peers waited for at {k} of {per.height} steps ({ms(per_step)} a step): it "
             f"spent {ms(own_v)} {what} per step vs {ms(peer_v)} on ranks {rank_ranges(waiters)}; it caused "
             f"{ms(caused_ms)} of waiting over the run, {caused_ms / total:.0%} of all of it")
    shown = mine.sort(col, descending=True, nulls_last=True).head(3)
    lines = cite([{"source_file": s["file"], "line": s[line] or s["train_line"], "rank": r, "timestamp": s["t_end"],
                   "text": f"step {s['step']}: {col}={num(s[col])}"} for s in shown.iter_rows(named=True)], text="text")
    victims = others.sort("wait_est", descending=True, nulls_last=True).head(2)
    lines += cite([{"source_file": v["file"], "line": v["comm_line"], "rank": v["rank"], "timestamp": v["t_end"],
                    "text": f"step {v['step']}: waits {ms(v['wait_est'])}"} for v in victims.iter_rows(named=True)], text="text")
    return [Finding(
        rule=pass_id("own_gap"), kind=kind, layer="resource", severity="WARN", ranks=[r], victims=waiters,
        title=title, basis="own_gap",
        evidence={"caused_wait_ms": num(caused_ms), "all_wait_ms": num(total), "share": num(caused_ms / total),
                  "share_of_run": num(caused_ms / wall), "steps_waited_for": k, "steps_judged": per.height,
                  "chance": float(f"{chance:.2g}"),
                  **({"compared": f"the {per.height} steps rank {r} logged (ranks log different steps)"} if mixed else {}),
                  "field": col, "rank_ms": num(own_v), "peers_ms": num(peer_v)},
        lines=lines, first_seen=iso(mine.get_column("t_start").min()), last_seen=iso(mine.get_column("t_end").max()),
    )]


def last_by_chance(k: int, steps: int, ranks: int) -> float:
    """The chance that a given rank is the last to arrive at >= k of `steps` steps when each of
    `ranks` ranks is equally likely to be last at each step: the binomial tail P(X >= k)
    (`last_by_chance_among` with every step logged by all the ranks)."""
    return last_by_chance_among(k, [ranks] * steps)


def last_by_chance_among(k: int, ranks_per_step: list[int]) -> float:
    """The chance that a given rank is the last to arrive at >= k of the steps when the step i was
    logged by `ranks_per_step[i]` ranks (ranks logging different subsets of the steps): at a step
    of n ranks a given rank is the last with chance 1/n; the tail P(X >= k) of the sum (a binomial
    per n, in log space, convolved)."""
    if k <= 0:
        return 1.0
    pmf = np.ones(1)
    for n in sorted(set(ranks_per_step)):
        trials = ranks_per_step.count(n)
        i = np.arange(trials + 1)
        log_b = (math.lgamma(trials + 1) - np.array([math.lgamma(j + 1) + math.lgamma(trials - j + 1) for j in i])
                 + i * math.log(1.0 / n) + (trials - i) * math.log1p(-1.0 / n))
        pmf = np.convolve(pmf, np.exp(log_b))
    return float(min(1.0, pmf[k:].sum()))


_PHASE_WORDS = {"data_load_ms": "loading its input", "compute_ms": "computing"}


def _stall_phase(steps: pl.DataFrame, mine: pl.DataFrame, caused_ms: float) -> tuple[str, str, list] | None:
    """Which of its own phases held the late rank at its stall steps: its data_load_ms or
    compute_ms at each stall step above its peers' median at that step. The phase whose excess,
    summed over the stalls, covers at least half of the waiting the rank caused names the kind
    (data_load_skew or straggler) with (step, its value, its peers') per stall; else None (the
    rank logged nothing that says, and the silence is reported)."""
    best = None
    for col, kind in (("data_load_ms", "data_load_skew"), ("compute_ms", "straggler")):
        if col not in steps.columns:
            continue
        rows, excess = [], 0.0
        for st in mine.get_column("step").to_list():
            at = steps.filter(pl.col("step") == st)
            own = at.filter(pl.col("rank") == mine.get_column("rank")[0]).get_column(col).drop_nulls()
            peer = at.filter(pl.col("rank") != mine.get_column("rank")[0]).get_column(col).drop_nulls().median()
            if own.is_empty() or peer is None:
                continue
            excess += max(0.0, float(own[0]) - float(peer))
            rows.append((int(st), float(own[0]), float(peer)))
        if rows and excess >= 0.5 * caused_ms and (best is None or excess > best[0]):
            best = (excess, kind, col, rows)
    return best[1:] if best is not None else None


def _td(comm_ms: float | None):  # type: ignore[no-untyped-def]
    import datetime as dt

    return dt.timedelta(milliseconds=float(comm_ms or 0.0))


def _phrase(named: list[tuple[dict, dict]], parts: list[tuple[dict, dict | None]]) -> str:
    """'spent 8.1 s in validation_pass (elapsed_s) at step 13 and 8.0 s at step 28' or the silence."""
    if named:
        return "spent " + " and ".join(f"{ms(g['dur_ms'])} in {g['event']}" + ("" if g["key"] else " (silent before it)")
                                       + f" before step {s['step']}" for s, g in named[:4])
    gaps = [s for s, _ in parts]
    return ("logged nothing of its own for " + " and ".join(f"{ms(s['caused_ms'])} before step {s['step']}" for s in gaps[:4]))
