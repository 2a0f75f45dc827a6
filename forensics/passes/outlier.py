"""When a slowdown is shared by every rank, which host or ranks stand apart in their own readings?

Question: every rank's communication time (or step time) rises together, so timing within a step
names nobody (comm_bound: "the interconnect is slow for everyone"). Which host's or ranks' own
values — any numeric field of any event type, whatever it is called — changed over that episode
while their peers' did not?

Domain facts relied on:
- A fault on one host's network (a NIC dropping packets, a link retraining, a switch port with
  CRC errors) slows every collective of the job alike: a ring or tree all-reduce runs at the pace
  of its slowest link, so every rank's collective time rises and nobody arrives late. Timing
  cannot localise it; the host's own readings (its NIC counters, whatever the logger calls them)
  can. The same holds for any job-wide slowdown with a local cause.
- Ranks and hosts differ statically (disk speed, pids, addresses, a bigger shard): a difference
  that was there before the slowdown is not its cause. So a group (a host, else a rank) stands
  apart when its values changed at the episode — its median during the episode against its own
  median before it — by at least `REL` of itself and `K_NOISE` robust deviations (1.4826 x MAD of
  the values before the episode, over every group; at least 1.25 x their mean absolute deviation,
  for counters that are mostly constant), to a median outside every value any group logged
  before the episode (a new state, not noise within the old one), while every peer's change
  stayed under `PEER_SHARE` of it, and the groups that changed are a minority (one of two hosts
  at most).
- Without a "before" (the slowdown spans the whole run) a group stands apart only as a minority
  of >= 3 groups: its median is >= 2x (or <= 1/2 of) the median of the groups' medians and
  `K_NOISE` x 1.4826 x MAD of those medians away from it.
- The shared symptom (`shared_episode`): after the first `SKIP` steps (start-up) and a baseline
  of the first 20% of the rest, the steps where the median over ranks of the transfer time
  (comm_ms - wait: waiting is someone being late, not the fabric), else of the step time
  without the wait (a late rank makes every step longer: that is the straggler's question) is >= `RISE` x its baseline, sustained (context.sustained), covering >= one
  window and >= 10% of the steps, with >= 75% of the ranks' own medians risen that much. A run
  whose transfers take > 40% of the step time from the start has no baseline: the whole
  run is the episode, judged cross-sectionally.
- The step's own phases (data loading, disk reads, compute) and the training signals are left
  out: their passes know their physics, and on a loaded host they move by 4x without a fault.
- Progress counters and clocks (step, seq, epoch, *_ts, timestamps, pids, ranks) are not
  readings: they are left out by name and by value (epoch seconds or milliseconds).

- What the ranks say is compared too, when no reading stands apart: a message template
  (forensics.message_templates: the message with numbers, ids, addresses and paths masked) that
  one host (else one rank) logs during the episode — >= REPEAT times, or at WARN (ERROR lines
  are failures: the failures' question) — and that nobody logged before it nor any peer during it.

The finding names the host's (or the ranks') ranks with basis `outlier`, the field, its value and
the peers' median (during and before), and cites the lines holding the outlying values. Its kind
is the symptom's: comm_bound when communication rose (it explains comm_bound's job-wide finding
and the throughput drop: rootcause.py), straggler when step time rose without it.

Must not: decide the root cause; time anything (the symptom comes from the step table).
"""
from __future__ import annotations

import json
import math
import re
from typing import Any

import polars as pl

from ..message_templates import template
from ..report.model import Finding
from ..schema import ALIASES, METRIC_NAMES
from .context import Context, PeerGroups, median, sustained, window_for
from .evidence import cite, iso, ms, num, pass_id, rank_ranges, shorten

SKIP = 2
BASE_SHARE = 0.20
RISE = 1.3
RISE_MIN_MS = 5.0
RANKS_RISEN = 0.75
MIN_SHARE = 0.10
COMM_SHARE = 0.40
K_NOISE = 5.0
REL = 0.5
PEER_SHARE = 0.25
CROSS_RATIO = 2.0
MIN_SAMPLES = 2
REPEAT = 3
# rows read per (rank, event type) on each side of the episode's start: enough for a median
CAP = 48
MIN_CAP = 4
ROW_BUDGET = 400_000
EVENT_TYPES = 8      # a typical run's event types, for the per-rank share of the budget
# progress counters, clocks and identities: not readings of anything
_NOT_READINGS = re.compile(
    r"(^|[._])(step|steps|global_step|iter|iteration|seq|seq_num|seqnum|epoch|ts|time_s|timestamp|pid|tid|rank|"
    r"local_rank|world_size|world|node_rank|port|id|index|idx|count_total|line)$", re.I)
_TIMING = ("comm_ms", "wait_ms", "xfer_ms", "step_time_ms", "samples_per_s", "tokens_per_s")
# the step's own phases and the training signals: each has its pass, which knows its physics (a
# slow input pipeline or a slow device makes its rank late: a waiting pattern, not a shared
# slowdown); real runs move them by 4x on a loaded host without a fault (disk reads, page cache)
_PHASES = ("data_load_ms", "disk_read_mbps", "disk_read_bytes", "compute_ms", "fwd_ms", "bwd_ms", "loss", "lr",
           "grad_norm", "grad_norm_adapter", "grad_norm_backbone", "threshold")
# measures of waiting or lateness (however named): the symptom, or a late rank's, never a reading
_WAITING = re.compile(r"wait|lag|late|idle|skew|stall|block", re.I)


def shared_episode(steps: pl.DataFrame, peers: PeerGroups | None = None) -> dict[str, Any] | None:
    """The shared slowdown, or None: {"metric", "s0", "s1", "t0", "t1", "t_base", "base", "during",
    "steps", "of", "baseline": bool} — `t_base` where the readings before the episode begin: the
    run's first step (the timing's baseline skips start-up; a counter sampled every 10 or 50
    steps needs every sample it has). `peers`: the rows of `steps` grouped by step, when built
    (context.PeerGroups: the per-step medians without hashing every row's step again)."""
    ranked = pl.col("rank").is_not_null()
    st = steps.with_columns(
        pl.when(ranked).then((pl.col("comm_ms") - pl.col("wait_est").fill_null(0.0)).clip(lower_bound=0.0))
        .alias("xfer_ms"),
        pl.when(ranked).then((pl.col("step_time_ms") - pl.col("wait_est").fill_null(0.0)).clip(lower_bound=0.0))
        .alias("busy_ms"))
    if st.get_column("rank").drop_nulls().n_unique() < 2:
        return None
    peers = peers if peers is not None else PeerGroups(st.get_column("step"))
    x = st.select("xfer_ms", "busy_ms", pl.when(ranked).then(pl.col("t_start")).alias("t_start"),
                  pl.when(ranked).then(pl.col("t_end")).alias("t_end"))
    by_step = (peers.agg(x, median("xfer_ms").alias("xfer_ms"), median("busy_ms").alias("busy_ms"),
                         pl.col("xfer_ms").count().alias("n_xfer_ms"), pl.col("busy_ms").count().alias("n_busy_ms"),
                         pl.col("t_start").min().alias("t0"), pl.col("t_end").max().alias("t1"))
               .with_columns(peers.step).filter(pl.col("step").is_not_null()).sort("step"))
    for metric in ("xfer_ms", "busy_ms"):
        if st.get_column(metric).null_count() == st.height:
            continue
        per = (by_step.select("step", pl.col(metric).alias("m"), "t0", "t1", pl.col(f"n_{metric}").alias("n"))
               .filter(pl.col("n") >= 2).slice(SKIP))
        n = per.height
        nb = max(3, int(n * BASE_SHARE))
        if n < nb + 3:
            continue
        base = float(per.head(nb).get_column("m").median())
        per = per.with_row_index("i").with_columns(
            ((pl.col("m") >= RISE * base) & (pl.col("m") >= base + RISE_MIN_MS) & (pl.col("i") >= nb)).alias("up1"))
        per = per.with_columns(sustained("up1", window_for(n), by=None).alias("up"))
        ep = per.filter("up")
        if ep.height >= max(3, window_for(n)) and ep.height >= MIN_SHARE * n:
            s0, s1 = int(ep.get_column("step").min()), int(ep.get_column("step").max())
            b0, b1 = int(per.get_column("step")[0]), int(per.get_column("step")[nb - 1])
            risen = (st.select("rank", "step", metric).filter(pl.col("rank").is_not_null()).group_by("rank").agg(
                median(pl.when(pl.col("step").is_between(s0, s1)).then(pl.col(metric))).alias("e"),
                median(pl.when(pl.col("step").is_between(b0, b1)).then(pl.col(metric))).alias("b"))
                .select(((pl.col("e") >= RISE * pl.col("b")).fill_null(False)).mean()).item())
            if risen >= RANKS_RISEN:
                return {"metric": metric, "s0": s0, "s1": s1, "t0": ep.get_column("t0").min(),
                        "t1": ep.get_column("t1").max(), "t_base": by_step.get_column("t0").min(),
                        "base": base, "during": float(ep.get_column("m").median()), "steps": ep.height, "of": n,
                        "baseline": True}
        if metric == "xfer_ms":
            # communication-heavy from the start: no "before" to compare with
            # transfer, not waiting: ranks waiting for a late one is a late rank's question
            share = st.select(median(pl.when(pl.col("step_time_ms") > 0)
                                     .then(pl.col("xfer_ms") / pl.col("step_time_ms")))).item()
            if share is not None and share > COMM_SHARE:
                return {"metric": "xfer_ms", "s0": int(per.get_column("step").min()),
                        "s1": int(per.get_column("step").max()), "t0": per.get_column("t0").min(),
                        "t1": per.get_column("t1").max(), "t_base": None, "base": None,
                        "during": float(per.get_column("m").median()), "steps": n, "of": n, "baseline": False,
                        "share": float(share)}
    return None


def _skip_field(name: str) -> bool:
    return bool(_NOT_READINGS.search(name) or _WAITING.search(name))


def numbers(obj: Any, prefix: str = "") -> list[tuple[str, float]]:
    """The numeric leaves of a JSON object (nested objects flattened as a.b), booleans left out."""
    out: list[tuple[str, float]] = []
    if not isinstance(obj, dict):
        return out
    for k, v in obj.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            out += numbers(v, name + ".")
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out.append((name, float(v)))
    return out


def readings(ctx: Context, t_base: Any, t0: Any, t1: Any) -> pl.DataFrame:
    """Every numeric reading of every event of a rank or a host between `t_base` (None: from `t0`) and `t1`:
    rank, host, event, field, value, `during` (at or after `t0`), source_file, line. Typed metric
    columns and the numeric keys of `extra` / `fields` that are not typed (any name). At most
    CAP rows per (rank, event type) on each side of `t0` (fewer on big runs: ROW_BUDGET)."""
    typed = [c for c in METRIC_NAMES if not _skip_field(c) and c not in ("grad_ready_ts",)]
    lo = t0 if t_base is None else t_base
    # a budget of rows over the whole run: a median needs a few values per rank, not thousands
    cap = max(MIN_CAP, min(CAP, ROW_BUDGET // max(1, 2 * EVENT_TYPES * len(ctx.ranks))))
    ev = ctx.aligned(ctx.events.select("rank", "host", "timestamp", "event", "extra", "fields", "source_file", "line",
                                       *typed)
                       # a host's own lines (its NIC or node exporter, no rank) count for the host
                       .filter(pl.col("rank").is_not_null() | pl.col("host").is_not_null()))
    ev = (ev.filter(pl.col("ts_aligned").is_between(lo, t1))
          .with_columns((pl.col("ts_aligned") >= t0).alias("during"))
          .filter(pl.int_range(pl.len()).over("rank", "event", "during") < cap)
          .collect())
    if ev.is_empty():
        return pl.DataFrame(schema={"rank": pl.Int32, "host": pl.String, "event": pl.String, "field": pl.String,
                                    "value": pl.Float64, "during": pl.Boolean, "source_file": pl.String,
                                    "line": pl.Int64})
    ev = ev.with_columns(pl.col("event").fill_null("?"))
    keys = ["rank", "host", "event", "during", "timestamp", "source_file", "line"]
    present = [c for c in typed if ev.get_column(c).null_count() < ev.height]
    parts = []
    if present:
        parts.append(ev.select(*keys, *(pl.col(c).cast(pl.Float64) for c in present))
                     .unpivot(present, index=keys, variable_name="field", value_name="value")
                     .filter(pl.col("value").is_not_null() & pl.col("value").is_finite()))
    for col in ("extra", "fields"):
        for (event,), g in ev.filter(pl.col(col).is_not_null()).group_by("event", maintain_order=True):
            parts.append(_json_readings(g.select(*keys, col), col, keys))
    if not parts:
        return pl.DataFrame()
    df = pl.concat([p.select(*keys, "field", "value") for p in parts], how="vertical_relaxed")
    df = df.filter(~pl.col("field").is_in([f for f in df.get_column("field").unique() if _skip_field(f)]))
    # clocks written as numbers (epoch seconds or milliseconds) are not readings
    clocks = (df.group_by("event", "field").agg(pl.col("value").abs().median().alias("m"))
              .filter(pl.col("m").is_between(1e9, 1e10) | pl.col("m").is_between(1e12, 1e13)))
    return df.join(clocks.select("event", "field"), on=["event", "field"], how="anti")


def _json_readings(g: pl.DataFrame, col: str, keys: list[str]) -> pl.DataFrame:
    """The numeric keys of one event type's JSON column `col` (nested objects flattened a.b), long:
    keys..., field, value. Decoded in one go (one schema per event type); where the type's lines
    disagree too much for that, line by line."""
    try:
        dec = g.get_column(col).str.json_decode()
    except Exception:      # noqa: BLE001 - mixed shapes polars cannot unify: read each line
        return _json_rows(g, col, keys)
    if not isinstance(dec.dtype, pl.Struct):
        return _json_rows(g.head(0), col, keys)
    cols: list[pl.Series] = []

    def walk(s: pl.Series, name: str) -> None:
        if isinstance(s.dtype, pl.Struct):
            for f in s.struct.fields:
                walk(s.struct.field(f), f"{name}.{f}" if name else f)
        elif s.dtype.is_numeric() and name not in ALIASES:   # known metrics: read from their typed columns
            cols.append(s.cast(pl.Float64).alias(name))

    walk(dec, "")
    if not cols:
        return _json_rows(g.head(0), col, keys)
    wide = g.select(keys).hstack(cols)
    return (wide.unpivot([c.name for c in cols], index=keys, variable_name="field", value_name="value")
            .filter(pl.col("value").is_not_null() & pl.col("value").is_finite()))


def _json_rows(g: pl.DataFrame, col: str, keys: list[str]) -> pl.DataFrame:
    """`_json_readings` one line at a time."""
    rows: dict[str, list[Any]] = {k: [] for k in (*keys, "field", "value")}
    for r in g.iter_rows(named=True):
        try:
            obj = json.loads(r[col])
        except (ValueError, TypeError):
            continue
        for name, v in numbers(obj):
            if name in ALIASES:
                continue
            for k in keys:
                rows[k].append(r[k])
            rows["field"].append(name)
            rows["value"].append(v)
    return pl.DataFrame(rows, schema={**{k: g.schema[k] for k in keys}, "field": pl.String, "value": pl.Float64})


def _judge(df: pl.DataFrame, group: str, baseline: bool) -> list[dict[str, Any]]:
    """Per (event, field), the groups (`group`: host or rank) that stand apart (module docstring)."""
    g = pl.col(group)
    per = (df.filter(g.is_not_null())
           .group_by("event", "field", group)
           .agg(median(pl.col("value").filter(pl.col("during"))).alias("e"),
                median(pl.col("value").filter(~pl.col("during"))).alias("b"),
                pl.col("during").sum().alias("ne"), (~pl.col("during")).sum().alias("nb")))
    out: list[dict[str, Any]] = []
    noise_tab = (df.filter(g.is_not_null())
                 .with_columns(median(pl.col("value")).over("event", "field", group, "during").alias("_m"))
                 .group_by("event", "field", "during")
                 # a counter that is mostly constant has a MAD of 0 however it jumps now and then:
                 # the mean absolute deviation (x 1.25, its ratio to sigma) is the floor
                 .agg(pl.max_horizontal(1.4826 * (pl.col("value") - pl.col("_m")).abs().median(),
                                        1.25 * (pl.col("value") - pl.col("_m")).abs().mean()).alias("noise"),
                      pl.col("value").min().alias("lo"), pl.col("value").max().alias("hi")))
    noise = {(r["event"], r["field"], r["during"]): float(r["noise"] or 0.0) for r in noise_tab.iter_rows(named=True)}
    span = {(r["event"], r["field"]): (r["lo"], r["hi"]) for r in noise_tab.filter(~pl.col("during")).iter_rows(named=True)}
    for (event, field), rows in per.group_by("event", "field"):
        rows = rows.filter(pl.col("ne") >= MIN_SAMPLES)
        if rows.height < 2:
            continue
        names = rows.get_column(group).to_list()
        e = rows.get_column("e").to_list()
        b = rows.get_column("b").to_list()
        nb = rows.get_column("nb").to_list()
        if baseline:
            # a "before" exists: only what changed counts (a static difference is no cause)
            if not all(x >= MIN_SAMPLES for x in nb):
                continue
            nz = noise.get((event, field, False), 0.0)
            change = [ei - bi for ei, bi in zip(e, b)]
            top = max(abs(c) for c in change)
            if top <= 0:
                continue
            out_idx = [i for i, c in enumerate(change) if abs(c) >= 0.5 * top]
            peers = [i for i in range(len(names)) if i not in out_idx]
            if not peers or len(out_idx) > len(names) / 2:
                continue
            low = min(abs(change[i]) for i in out_idx)
            if any(abs(change[i]) > PEER_SHARE * low for i in peers):
                continue
            if low < K_NOISE * nz or any(abs(change[i]) < REL * max(abs(b[i]), abs(e[i])) for i in out_idx):
                continue
            lo, hi = span.get((event, field), (None, None))
            if lo is not None and any(lo <= e[i] <= hi for i in out_idx):
                continue     # still where some group's values were before the slowdown: no new state
            score = low / max(nz, 1e-3 * max(abs(x) for x in e + b) or 1e-12)
        elif len(names) >= 3:
            m = float(sorted(e)[len(e) // 2]) if len(e) % 2 else (sorted(e)[len(e) // 2 - 1] + sorted(e)[len(e) // 2]) / 2
            dev = [x - m for x in e]
            mad = 1.4826 * _med([abs(d) for d in dev])
            nz = noise.get((event, field, True), 0.0)
            out_idx = [i for i, x in enumerate(e)
                       if abs(dev[i]) >= max(K_NOISE * mad, K_NOISE * nz)
                       and (abs(x) >= CROSS_RATIO * abs(m) or abs(m) >= CROSS_RATIO * abs(x))]
            if not out_idx or len(out_idx) >= len(names) / 2:
                continue
            peers = [i for i in range(len(names)) if i not in out_idx]
            score = min(abs(dev[i]) for i in out_idx) / max(mad, nz, 1e-3 * max(abs(x) for x in e) or 1e-12)
        else:
            continue
        out.append({"event": event, "field": field, "group": group, "score": score,
                    "who": [names[i] for i in out_idx],
                    "value": _med([e[i] for i in out_idx]), "peer_value": _med([e[i] for i in peers]),
                    "value_before": _med([b[i] for i in out_idx if b[i] is not None]) if baseline else None,
                    "peer_value_before": _med([b[i] for i in peers if b[i] is not None]) if baseline else None})
    return out


def _med(xs: list[float]) -> float | None:
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    k = len(xs) // 2
    return xs[k] if len(xs) % 2 else (xs[k - 1] + xs[k]) / 2


def find(ctx: Context) -> list[Finding]:
    steps = ctx.steps.select("rank", "step", "host", "comm_ms", "wait_est", "step_time_ms", "t_start", "t_end")
    ep = shared_episode(steps, ctx.peers(None))
    if ep is None:
        return []
    df = readings(ctx, ep["t_base"], ep["t0"], ep["t1"])
    # the symptom itself is shared by construction: it cannot name anybody
    df = df.filter(~pl.col("field").is_in([*_TIMING, *_PHASES])) if not df.is_empty() else df
    ranks_of_host = {h: sorted(int(r) for r in grp.get_column("rank").unique())
                     for (h,), grp in steps.filter(pl.col("host").is_not_null()).group_by("host")}
    cands = []
    if not df.is_empty():
        if len(ranks_of_host) >= 2:
            cands += _judge(df, "host", ep["baseline"])
        cands += _judge(df, "rank", ep["baseline"])
    if not cands:
        # no reading stands apart: what the ranks say (message templates) may
        return said_apart(ctx, ep, steps, ranks_of_host)
    best = max(cands, key=lambda c: (c["score"], c["group"] == "host"))
    if best["group"] == "rank":
        # the ranks that stand apart are exactly one host's: the host is what differs
        same = [c for c in cands if c["group"] == "host" and (c["event"], c["field"]) == (best["event"], best["field"])
                and {r for h in c["who"] for r in ranks_of_host.get(h, [])} == {int(r) for r in best["who"]}]
        best = same[0] if same else best
    if best["group"] == "host":
        # a host stands apart through its ranks: when only some of them do (the host's median
        # moved with one rank), the ranks that stand apart are named, not their host-mates
        host_ranks = {r for h in best["who"] for r in ranks_of_host.get(h, [])}
        narrower = [c for c in cands if c["group"] == "rank" and (c["event"], c["field"]) == (best["event"], best["field"])
                    and set(int(r) for r in c["who"]) < host_ranks]
        if narrower:
            best = max(narrower, key=lambda c: c["score"])
    if best["group"] == "host":
        ranks = sorted(r for h in best["who"] for r in ranks_of_host.get(h, []))
        who = (f"host {', '.join(best['who'])} (rank{'s' if len(ranks) > 1 else ''} {rank_ranges(ranks)})")
    else:
        ranks = sorted(int(r) for r in best["who"])
        who = f"rank{'s' if len(ranks) > 1 else ''} {rank_ranges(ranks)}"
    everyone = sorted(int(r) for r in steps.get_column("rank").drop_nulls().unique())
    one = len(best["who"]) == 1
    victims = [r for r in everyone if r not in ranks]
    field = f"{best['event']}.{best['field']}"
    comm = ep["metric"] == "xfer_ms"
    what = "transfer time in its collectives" if comm else "step time"
    if ep["baseline"]:
        symptom = (f"every rank's {what} rose together ({ms(ep['base'])} → {ms(ep['during'])} per step, steps "
                   f"{ep['s0']}–{ep['s1']})")
        title = (f"{who} stand{'s' if one else ''} apart in {field}: {_v(best['value'])} during the "
                 f"slowdown vs {_v(best['peer_value'])} on the other {'hosts' if best['group'] == 'host' else 'ranks'} "
                 f"(before: {_v(best['value_before'])} vs {_v(best['peer_value_before'])}) — {symptom}, and "
                 f"only {who} changed")
    else:
        symptom = f"communication takes {ep['share']:.0%} of every rank's step time from the start"
        title = (f"{who} stand{'s' if one else ''} apart in {field}: {_v(best['value'])} vs "
                 f"{_v(best['peer_value'])} on the other {'hosts' if best['group'] == 'host' else 'ranks'} — {symptom}")
    hot = df.filter(pl.col("during") & (pl.col("event") == best["event"]) & (pl.col("field") == best["field"]))
    mine = hot.filter(pl.col(best["group"]).is_in(best["who"]))
    theirs = hot.filter(~pl.col(best["group"]).is_in(best["who"]))
    side = 1 if (best["value"] or 0) >= (best["peer_value"] or 0) else -1
    lines = cite([{**r, "text": f"{field} = {_v(r['value'])}"}
                  for r in mine.sort(pl.col("value") * side, descending=True).head(3).iter_rows(named=True)], text="text")
    lines += cite([{**r, "text": f"{field} = {_v(r['value'])} (a peer)"} for r in theirs.head(1).iter_rows(named=True)],
                  text="text")
    others = sorted((c for c in cands if c is not best and set(c["who"]) == set(best["who"])),
                    key=lambda c: -c["score"])[:5]
    return [Finding(
        rule=pass_id("outlier"), kind="comm_bound" if comm else "straggler",
        layer="communication" if comm else "resource", severity="WARN", ranks=ranks, victims=victims,
        title=title, basis="outlier",
        evidence={"mode": "network" if comm else "outlier", "field": field, "grouped_by": best["group"],
                  "outliers": [str(x) for x in best["who"]], "value": num(best["value"]),
                  "peer_value": num(best["peer_value"]), "value_before": num(best["value_before"]),
                  "peer_value_before": num(best["peer_value_before"]), "score": num(best["score"]),
                  "symptom": ep["metric"], "symptom_before_ms": num(ep["base"]), "symptom_ms": num(ep["during"]),
                  "first_step": ep["s0"], "last_step": ep["s1"], "episode_steps": ep["steps"], "steps": ep["of"],
                  "also_apart": [f"{c['event']}.{c['field']}" for c in others]},
        lines=lines, first_seen=iso(ep["t0"]), last_seen=iso(ep["t1"]),
    )]


def said_apart(ctx: Context, ep: dict[str, Any], steps: pl.DataFrame,
               ranks_of_host: dict[str, list[int]]) -> list[Finding]:
    """A message template (forensics.message_templates) that one host (else at most half the ranks) logs during
    the shared slowdown — >= REPEAT times or at WARN (not ERROR) — and nobody logged before it nor
    any peer during it: what that host said differently. The finding as `find`'s."""
    if not ep["baseline"]:
        return []     # without a "before", a message only one rank logs is its role, not a change
    ev = (ctx.aligned(ctx.events.select("rank", "host", "timestamp", "level", "event", "message", "source_file", "line")
                      # an ERROR is a failure, the failures' question; what is said around one is asked here
                      .filter((pl.col("rank").is_not_null() | pl.col("host").is_not_null()) & pl.col("message").is_not_null()
                              & (pl.col("level").cast(pl.String) != "ERROR")))
          .filter(pl.col("ts_aligned") <= ep["t1"])
          .with_columns(template("message").alias("tpl"), (pl.col("ts_aligned") >= ep["t0"]).alias("during"))
          .collect())
    if ev.is_empty():
        return []
    ev = ev.with_columns(pl.col("host").fill_null(pl.col("rank").cast(pl.String)).alias("_host"))
    if len(ranks_of_host) < 2:
        ev = ev.filter(pl.col("rank").is_not_null())
    fresh = ev.group_by("tpl").agg((~pl.col("during")).sum().alias("before")).filter(pl.col("before") == 0)
    ev = ev.join(fresh.select("tpl"), on="tpl", how="semi").filter("during")
    grouping = "host" if len(ranks_of_host) >= 2 else "rank"
    key = "_host" if grouping == "host" else "rank"
    n_groups = len(ranks_of_host) if grouping == "host" else steps.get_column("rank").n_unique()
    # said by one host, or by a minority of the ranks (at most half: hosts may be unnamed in the
    # logs, and one host's ranks then say it together)
    most = 1 if grouping == "host" else max(1, n_groups // 2)
    per = (ev.group_by("tpl").agg(pl.col(key).n_unique().alias("groups"), pl.col(key).unique().sort().alias("who"),
                                  pl.len().alias("n"), (pl.col("level").cast(pl.String) == "WARN").any()
                                  .alias("loud"))
           .filter((pl.col("groups") <= most) & ((pl.col("n") >= REPEAT) | pl.col("loud")))
           .sort(["loud", "n"], descending=True))
    if per.is_empty() or n_groups < 2:
        return []
    best = per.row(0, named=True)
    rows = ev.filter((pl.col("tpl") == best["tpl"])).sort("ts_aligned")
    if grouping == "host":
        host = best["who"][0]
        ranks = ranks_of_host.get(host, sorted(int(r) for r in rows.get_column("rank").drop_nulls().unique()))
        who = f"host {host} (rank{'s' if len(ranks) > 1 else ''} {rank_ranges(ranks)})"
    else:
        ranks = sorted(int(r) for r in best["who"])
        who = f"rank{'s' if len(ranks) > 1 else ''} {rank_ranges(ranks)}"
    everyone = sorted(int(r) for r in steps.get_column("rank").drop_nulls().unique())
    comm = ep["metric"] == "xfer_ms"
    what = "transfer time in its collectives" if comm else "step time"
    title = (f"{who} alone logged \"{shorten(rows.get_column('message')[0], 100)}\" ({best['n']} times, "
             f"never before) while every rank's {what} rose together ({ms(ep['base'])} → {ms(ep['during'])} per step, "
             f"steps {ep['s0']}–{ep['s1']}); no other {'host' if grouping == 'host' else 'rank'} said it")
    return [Finding(
        rule=pass_id("outlier"), kind="comm_bound" if comm else "straggler",
        layer="communication" if comm else "resource", severity="WARN", ranks=ranks,
        victims=[r for r in everyone if r not in ranks], title=title, basis="outlier",
        evidence={"mode": "network" if comm else "outlier", "field": "message template", "template": best["tpl"],
                  "grouped_by": grouping, "outliers": [str(x) for x in best["who"]], "value": int(best["n"]),
                  "peer_value": 0,
                  "value_before": 0, "peer_value_before": 0, "symptom": ep["metric"],
                  "symptom_before_ms": num(ep["base"]), "symptom_ms": num(ep["during"]),
                  "first_step": ep["s0"], "last_step": ep["s1"], "episode_steps": ep["steps"], "steps": ep["of"]},
        lines=cite(rows.head(3).iter_rows(named=True), text="message"),
        first_seen=iso(ep["t0"]), last_seen=iso(ep["t1"]),
    )]


def _v(x: float | None) -> str:
    if x is None:
        return "?"
    return f"{x:.4g}"
