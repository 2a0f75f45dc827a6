"""Log hygiene: the review checklist of seed 000 §4.5 (复盘清单, 误区一/二), answered from the logs.

Owns `lint(run) -> LintResult`: one check per checklist question, each pass / warn / fail / n/a
with the numbers behind it and an example file:line. The questions:

  rank_field      does every structured line carry its rank?   (must: 所有日志必须携带 rank)
  event_field     does every line carry an event id?            (flat metric lines do not)
  rank_filter     can one command filter one card's events?     (rank known, one rank id per card)
  comm_ratio      can communication / step time be plotted?     (comm_ms and step_time_ms per step)
  error_flood     do ERROR floods bury the WARNs?               (误区二)
  sampling        are resource metrics sampled every >= 2 s?    (误区一: 200 ms polling cost 5 %)
  hot_path_traces are stack traces logged on the hot path?      (§4.1: 禁止在热路径中记录冗长的堆栈)
  joint_alerts    are there multi-metric joint alerts?          (lives in the alerting system)
  retention       do the logs reach back 72 h?                  (保留策略是否支持 72 小时回溯)

Relation to the `hygiene` diagnosis pass (passes/hygiene.py): that pass reports only what is
wrong, as findings inside `diagnose`; this module answers every question, passing ones too, with
their numbers. For the two questions both ask with a judgement of their own (ERROR floods, the
sampling interval) lint calls the pass and takes its verdict, so the two never disagree; it
only adds the counts a passing check shows.

Must not: print (render/lint.py does), read raw logs (the store has every line, rejected ones
included), or claim what logs cannot show: joint alerts are reported as not checkable.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import polars as pl

from . import host_names
from .report.model import Evidence

if TYPE_CHECKING:
    from .store import Run

STATUSES = ["pass", "n/a", "warn", "fail"]
FAIL_LEVELS = {"WARN": "warn", "FAIL": "fail"}

# Thresholds: the seed's where it gives one; the others are ours and say so.
COMM_COVERAGE = 0.9          # ours: a ratio plot with gaps in > 10 % of steps hides the slow steps
ERROR_OVER_WARN = 10         # ours: "ERROR count >> WARN" read as 10x, with at least FLOOD_MIN ERRORs
REPEAT_ERROR = 1000          # seed 000 误区二: "淹没在数千条 ERROR 中" (thousands of identical ERRORs)
TRACE_PER_STEP_FAIL = 0.5    # ours: a traceback every other step is "on the hot path"
TRACE_PER_STEP_WARN = 0.05   # ours: one every 20 steps is a habit, not a crash
TRACE_MIN = 10               # a crash prints a few tracebacks (one per rank); that is not hot-path logging
RETENTION_H = 72.0           # seed 000 §4.5
RETENTION_FIRST_STEP = 100   # ours: logs whose first step is beyond this (and 10 logging intervals) lost their start
TRACE_HEAD = "Traceback (most recent call last)"
STRUCTURED = "jsonl"         # the seed's structured format; console/telemetry lines have no rank field


@dataclass
class Check:
    id: str
    question: str
    status: str                      # pass | warn | fail | n/a
    summary: str                     # one line, with the numbers
    numbers: dict[str, Any] = field(default_factory=dict)
    examples: list[Evidence] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["examples"] = [asdict(e) for e in self.examples]
        return d


@dataclass
class LintResult:
    store: str | None
    events: int
    checks: list[Check]

    @property
    def worst(self) -> str:
        return max((c.status for c in self.checks), key=STATUSES.index, default="pass")

    def trips(self, level: str) -> bool:
        """True when a check is at least as bad as `level` (WARN or FAIL)."""
        need = STATUSES.index(FAIL_LEVELS[level.upper()])
        return any(STATUSES.index(c.status) >= need for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        return {"store": self.store, "events": self.events, "worst": self.worst,
                "counts": {s: sum(c.status == s for c in self.checks) for s in STATUSES},
                "checks": [c.to_json() for c in self.checks]}


def _ev(row: dict[str, Any] | None, text: str | None = None) -> list[Evidence]:
    if not row or row.get("source_file") is None or row.get("line") is None:
        return []
    ts = row.get("timestamp")
    return [Evidence(source_file=row["source_file"], line=int(row["line"]), rank=row.get("rank"),
                     timestamp=ts.isoformat() if isinstance(ts, dt.datetime) else ts, text=text)]


def _pct(a: int, b: int) -> str:
    return f"{a / b:.1%}" if b else "-"


def _first(df: pl.DataFrame) -> dict[str, Any] | None:
    return df.row(0, named=True) if df.height else None


# --- the queries: one lazy plan each, collected together ----------------------------------------

def _is_flat() -> pl.Expr:
    """A line without an event id (HF Trainer / ms-swift flat metric lines): ingest named its
    event and says so in `event_source`."""
    return pl.col("event_source") == "inferred"


# lines a reader keeps as the file's structure, not as a rank's event
STRUCTURE = ("TELEMETRY_HEADER",)


def _queries(ev: pl.LazyFrame) -> dict[str, pl.LazyFrame]:
    from .passes.hygiene import RESOURCE

    js = ev.filter(pl.col("format") == STRUCTURED)
    cite = ["source_file", "line", "rank", "timestamp"]
    return {
        "sources": js.group_by("rank_source").agg(pl.len().alias("n")),
        "no_rank_ex": js.filter(pl.col("rank_source") != "record").select(*cite, "rank_source").sort("source_file", "line").head(50),
        "flat": js.select(_is_flat().sum().alias("n"), pl.len().alias("total")),
        "flat_ex": js.filter(_is_flat()).select(*cite).sort("source_file", "line").head(1),
        "hosts": ev.filter(pl.col("rank").is_not_null() & pl.col("host").is_not_null())
                   .group_by("rank").agg(pl.col("host").unique().sort().alias("hosts"), pl.col("source_file").first(),
                                         pl.col("line").first()),
        # a table's header line (telemetry CSV: TELEMETRY_HEADER) is the file's structure, kept as a
        # line read, not an event of any rank: a multi-rank table's header has none to miss
        "unranked": ev.filter(~pl.col("event").is_in(STRUCTURE).fill_null(False))
                      .select(pl.col("rank").is_null().sum().alias("n"), pl.len().alias("total")),
        "levels": ev.filter(pl.col("level").is_in(["WARN", "ERROR"])).group_by("level").agg(pl.len().alias("n")),
        "repeat": ev.filter(pl.col("level") == "ERROR").group_by("event", "message")
                    .agg(pl.len().alias("n"), pl.col("source_file").first(), pl.col("line").min(), pl.col("rank").first(),
                         pl.col("timestamp").min())
                    .sort("n", descending=True).head(1),
        "sampling": ev.filter(pl.col("rank").is_not_null() & pl.any_horizontal([pl.col(c).is_not_null() for c in RESOURCE]))
                      .select("rank", "timestamp").unique().sort("rank", "timestamp")
                      .group_by("rank").agg(pl.len().alias("n"),
                                            (pl.col("timestamp").diff().dt.total_microseconds() / 1e6).median().alias("interval_s")),
        "sample_ex": ev.filter(pl.any_horizontal([pl.col(c).is_not_null() for c in RESOURCE])).select(*cite).head(1),
        "traces": ev.filter((pl.col("event") == "TRACEBACK") | pl.col("message").str.contains(TRACE_HEAD, literal=True))
                    .select(*cite).sort("timestamp", "source_file", "line", nulls_last=True),
        "steps": ev.select(pl.col("step").drop_nulls().n_unique().alias("n"), pl.col("step").min().alias("first"),
                           pl.col("step").max().alias("last"), pl.col("timestamp").min().alias("t0"),
                           pl.col("step").drop_nulls().unique().sort().diff().median().alias("gap"),
                           pl.col("timestamp").max().alias("t1"), pl.len().alias("events")),
        "first_step": ev.filter(pl.col("step").is_not_null()).sort("timestamp", nulls_last=True).select(*cite, "step").head(1),
    }


def lint(run: "Run") -> LintResult:
    """Answer the seed's review checklist for a run's logs."""
    from . import timeline
    from .passes import hygiene
    from .passes.context import Context

    ev = run.events()
    qs = _queries(ev)
    names = list(qs)
    res = dict(zip(names, pl.collect_all([qs[n] for n in names])))
    # the raw bytes, searched as bytes: a rejected line is often not UTF-8 (binary garbage), and a
    # cast to text fails on it
    rejected_traces = (run.rejects().filter(pl.col("raw").bin.contains(TRACE_HEAD.encode()))
                       .select("source_file", "line").collect())
    steps = timeline.step_table(run).select(
        pl.len().alias("rows"),
        (pl.col("step_time_ms").is_not_null() & pl.col("comm_ms").is_not_null()).sum().alias("both"),
        pl.col("step_time_ms").is_not_null().sum().alias("with_step"),
        pl.col("comm_ms").is_not_null().sum().alias("with_comm"),
        (pl.col("comm_ms") / pl.col("step_time_ms")).median().alias("share"),
    ).collect().row(0, named=True)
    hyg = {f.evidence.get("check"): f for f in hygiene.find(Context.from_run(run))}

    st = res["steps"].row(0, named=True)
    checks = [
        _rank_field(res),
        _event_field(res),
        _rank_filter(res),
        _comm_ratio(steps),
        _error_flood(res, hyg.get("error_flood")),
        _sampling(res, hyg.get("sampling_interval")),
        _hot_path(res, rejected_traces, st),
        Check("joint_alerts", "Are there joint alerts on several metrics (e.g. low GPU util AND low disk read on one rank)?",
              "n/a", "not checkable from logs: alerts live in the monitoring system, not in what the training writes; "
              "`forensics diagnose` applies such joint rules offline (rules/), which is not the same as alerting"),
        _retention(st, _first(res["first_step"])),
    ]
    if int(st["events"] or 0) == 0:
        checks.insert(0, _no_data(run))
    # the logs the user pointed at, not the cache store they were read into (as reports do)
    return LintResult(store=run.label, events=int(st["events"]), checks=checks)


# --- the checks -------------------------------------------------------------------------------

def _no_data(run: "Run") -> Check:
    """Logs with no usable event (empty, all rejected) are not fit for any post-mortem: a fail
    that fails CI without --fail-on (config.ALWAYS_FAILS), as diagnose's no_data finding does."""
    t = run.totals
    files, lines, rejected = int(t.get("files") or 0), int(t.get("lines_read") or 0), int(t.get("rejected") or 0)
    first = run.rejects().select("source_file", "line", "reason").head(1).collect()
    return Check("no_data", "Do the logs hold any usable event?", "fail",
                 f"no usable event: {files:,} file{'s' if files != 1 else ''}, {lines:,} lines read, "
                 f"{rejected:,} rejected: nothing to check",
                 numbers={"files": files, "lines_read": lines, "rejected": rejected, "events": 0},
                 examples=_ev(row, row["reason"]) if (row := _first(first)) else [])


def _rank_field(res: dict[str, pl.DataFrame]) -> Check:
    q = "Does every structured log line carry its rank?"
    src = dict(zip(res["sources"]["rank_source"].cast(pl.String).to_list(), res["sources"]["n"].to_list()))
    total = sum(src.values())
    if not total:
        return Check("rank_field", q, "n/a", "no structured (JSON) event lines in these logs")
    none = src.get("none", 0)
    inferred = total - src.get("record", 0) - none
    nums = {"lines": total, "with_rank": src.get("record", 0), "rank_from_path_or_prefix": inferred, "no_rank": none}
    ex = res["no_rank_ex"]
    if none:
        row = _first(ex.filter(pl.col("rank_source") == "none"))
        return Check("rank_field", q, "fail", f"{none:,} of {total:,} lines ({_pct(none, total)}) carry no rank and none "
                     "could be inferred: single-card and collective faults cannot be told apart", nums,
                     _ev(row, "no rank field"))
    if inferred:
        return Check("rank_field", q, "warn", f"{inferred:,} of {total:,} lines ({_pct(inferred, total)}) carry no rank field; "
                     "the rank was taken from the file name", nums, _ev(_first(ex), "rank from the file name"))
    return Check("rank_field", q, "pass", f"all {total:,} lines carry a rank", nums)


def _event_field(res: dict[str, pl.DataFrame]) -> Check:
    q = "Does every line carry an event id?"
    f = res["flat"].row(0, named=True)
    n, total = int(f["n"] or 0), int(f["total"] or 0)
    if not total:
        return Check("event_field", q, "n/a", "no structured (JSON) event lines in these logs")
    nums = {"lines": total, "without_event": n}
    if n:
        return Check("event_field", q, "warn", f"{n:,} of {total:,} lines ({_pct(n, total)}) are flat metric lines without an "
                     "event id (named TRAIN_STEP/METRICS by ingest): tools must guess what they are", nums,
                     _ev(_first(res["flat_ex"]), "no event field"))
    return Check("event_field", q, "pass", f"all {total:,} lines carry an event id", nums)


def _rank_filter(res: dict[str, pl.DataFrame]) -> Check:
    q = "Can one command filter one card's events (one rank id per card)?"
    u = res["unranked"].row(0, named=True)
    total, unranked = int(u["total"] or 0), int(u["n"] or 0)
    # a loopback name beside a named host is that host (host_names), not a second card
    multi = res["hosts"].filter(pl.col("hosts").map_elements(lambda h: len(host_names.distinct(h)) > 1,
                                                             return_dtype=pl.Boolean)).sort("rank")
    ranks = res["hosts"].height
    nums = {"events": total, "events_without_rank": unranked, "ranks_on_several_hosts": multi["rank"].to_list()}
    if multi.height:
        r = multi.row(0, named=True)
        return Check("rank_filter", q, "fail", f"{multi.height} rank id(s) appear on more than one host (rank {r['rank']} on "
                     f"{', '.join(r['hosts'])}): the rank does not name one card; log the global rank", nums,
                     _ev(r, f"rank {r['rank']}"))
    if total and unranked / total > 0.01:
        return Check("rank_filter", q, "warn", f"{unranked:,} of {total:,} events ({_pct(unranked, total)}) have no rank: "
                     "filtering by rank misses them", nums)
    how = "every event is attributed to one rank" + (f" ({ranks} rank{'s' if ranks != 1 else ''} with hosts)" if ranks else "")
    return Check("rank_filter", q, "pass", how + f"; {unranked:,} events without a rank", nums)


def _comm_ratio(steps: dict[str, Any]) -> Check:
    q = "Can communication / step time be plotted (comm_ms and step_time_ms per step)?"
    rows, both = int(steps["rows"] or 0), int(steps["both"] or 0)
    nums = {"rank_steps": rows, "with_both": both, "with_step_time": int(steps["with_step"] or 0),
            "with_comm": int(steps["with_comm"] or 0), "median_share": steps["share"]}
    if not rows:
        return Check("comm_ratio", q, "fail", "no step is logged per rank: there is no step time to divide by", nums)
    if not both:
        missing = "comm_ms" if steps["with_step"] else "step_time_ms" if steps["with_comm"] else "comm_ms and step_time_ms"
        return Check("comm_ratio", q, "fail", f"none of {rows:,} rank-steps has both: {missing} is never logged — the most "
                     "sensitive signal of a slow node cannot be seen", nums)
    share = f"; median communication share {steps['share']:.0%}" if steps["share"] is not None else ""
    if both / rows < COMM_COVERAGE:
        return Check("comm_ratio", q, "warn", f"only {both:,} of {rows:,} rank-steps ({_pct(both, rows)}) have both{share}", nums)
    return Check("comm_ratio", q, "pass", f"{both:,} of {rows:,} rank-steps ({_pct(both, rows)}) have both{share}", nums)


def _error_flood(res: dict[str, pl.DataFrame], finding) -> Check:
    from .passes.hygiene import FLOOD_MIN

    q = "Do floods of ERROR lines bury the WARNs (thousands of ERRORs hide the one that matters)?"
    lv = dict(zip(res["levels"]["level"].cast(pl.String).to_list(), res["levels"]["n"].to_list()))
    errors, warns = int(lv.get("ERROR", 0)), int(lv.get("WARN", 0))
    top = _first(res["repeat"])
    nums: dict[str, Any] = {"errors": errors, "warns": warns,
                            "most_repeated_error": {"event": top["event"], "count": int(top["n"])} if top else None}
    if finding is not None:
        return Check("error_flood", q, "warn" if finding.severity != "ERROR" else "fail", finding.title,
                     {**nums, **{k: v for k, v in finding.evidence.items() if k != "check"}}, list(finding.lines[:1]))
    if top and top["n"] >= REPEAT_ERROR:
        return Check("error_flood", q, "warn", f"one ERROR is repeated {int(top['n']):,} times ({top['event']}): a real "
                     "failure would drown in it", nums, _ev(top, "first of the repeats"))
    if errors >= FLOOD_MIN and errors > ERROR_OVER_WARN * max(warns, 1):
        return Check("error_flood", q, "warn", f"{errors:,} ERROR lines vs {warns:,} WARN: ERROR is used for what should be "
                     "WARN (self-healing) — keep ERROR for what needs a person", nums, _ev(top))
    return Check("error_flood", q, "pass", f"{errors:,} ERROR and {warns:,} WARN lines; no flood", nums)


def _sampling(res: dict[str, pl.DataFrame], finding) -> Check:
    from .passes.hygiene import MIN_INTERVAL_S, MIN_SAMPLES

    q = f"Are resource metrics sampled no more often than every {MIN_INTERVAL_S:g} s (fast polling slows training)?"
    s = res["sampling"].filter(pl.col("n") >= MIN_SAMPLES)
    if res["sampling"].is_empty():
        return Check("sampling", q, "warn", "no GPU/resource metrics (utilisation, temperature, SM clock, memory) in the logs: "
                     "the physical and resource layers of a diagnosis have nothing to read")
    if s.is_empty():
        return Check("sampling", q, "n/a", f"fewer than {MIN_SAMPLES} resource samples per rank: too few to measure the interval",
                     {"ranks": res["sampling"].height})
    med = float(s["interval_s"].median())
    nums = {"ranks": s.height, "median_interval_s": round(med, 3), "min_rank_interval_s": round(float(s["interval_s"].min()), 3),
            "min_interval_s": MIN_INTERVAL_S}
    if finding is not None:
        return Check("sampling", q, "warn" if finding.severity != "ERROR" else "fail", finding.title, nums,
                     list(finding.lines[:1]))
    return Check("sampling", q, "pass", f"resource metrics every {med:.3g} s (median over {s.height} rank{'s' if s.height != 1 else ''})", nums,
                 _ev(_first(res["sample_ex"]), "a resource sample"))


def _hot_path(res: dict[str, pl.DataFrame], rejected: pl.DataFrame, st: dict[str, Any]) -> Check:
    q = "Are stack traces kept off the training hot path (not logged every step)?"
    tr = res["traces"]
    n = tr.height + rejected.height
    steps = int(st["n"] or 0)
    per = n / steps if steps else 0.0
    nums = {"tracebacks": n, "in_events": tr.height, "in_rejected_lines": rejected.height, "steps": steps,
            "per_step": round(per, 3)}
    ex = _ev(_first(tr), "traceback") or _ev(_first(rejected.with_columns(pl.lit(None).alias("rank"))), "traceback (rejected line)")
    if n >= TRACE_MIN and per >= TRACE_PER_STEP_FAIL:
        return Check("hot_path_traces", q, "fail", f"{n:,} stack traces over {steps:,} steps ({per:.2f} per step): they are "
                     "logged on the hot path; log a one-line event and keep the trace for the failure", nums, ex)
    if n >= TRACE_MIN and per >= TRACE_PER_STEP_WARN:
        return Check("hot_path_traces", q, "warn", f"{n:,} stack traces over {steps:,} steps ({per:.2f} per step)", nums, ex)
    return Check("hot_path_traces", q, "pass", f"{n:,} stack trace(s) over {steps:,} steps", nums, ex)


def _retention(st: dict[str, Any], first: dict[str, Any] | None) -> Check:
    q = f"Do the logs reach back {RETENTION_H:g} h (a retention policy that allows a post-mortem)?"
    t0, t1 = st["t0"], st["t1"]
    if t0 is None or t1 is None:
        return Check("retention", q, "n/a", "no timestamps: the span of the logs is unknown")
    hours = (t1 - t0).total_seconds() / 3600
    nums = {"span_h": round(hours, 3), "first_step": st["first"], "last_step": st["last"], "required_h": RETENTION_H}
    span = f"{hours:.1f} h" if hours >= 1 else f"{hours * 60:.1f} min"
    if hours >= RETENTION_H:
        return Check("retention", q, "pass", f"the logs span {span}", nums)
    # a run logged every k steps starts at step k (HF logging_steps): only a start far beyond the
    # logging interval means lost lines
    if st["first"] is not None and st["first"] > max(RETENTION_FIRST_STEP, 10 * (st["gap"] or 1)):
        return Check("retention", q, "warn", f"the logs span {span} and begin at step {st['first']:,}: the start of the run "
                     "is gone (rotated or not kept)", nums, _ev(first, f"earliest step {st['first']}"))
    return Check("retention", q, "n/a", f"the logs span {span} from step {st['first'] if st['first'] is not None else '?'}: "
                 f"the whole run is here, but a run shorter than {RETENTION_H:g} h cannot show a {RETENTION_H:g} h policy", nums)
