"""Comparing a run with its baseline: is the candidate slower, worse, or newly broken — and where?

Owns `compare_runs(baseline, candidate, thresholds) -> CompareResult` (plain data, its JSON
contract is `CompareResult.to_json`, documented in the README as stable) and the thresholds
that decide pass/fail (`CompareThresholds`, `parse_share`). Must not render (report/
compare_render.py does), print, or judge a single run (the diagnosis does, and is reused here:
new and resolved findings are the difference of the two diagnoses).

Domain facts relied on:
- Warmup is not the run's pace: the first steps compile, fill caches and ramp the learning
  rate, and the loss there swings by design (seed 003 case 1). Every figure is taken after
  warmup only — the last step marked stage=warmup, else the end of the initial lr ramp
  (passes/loss.py `warmup_end`, as the loss pass judges) — and, without either, after the first
  `SKIP_STEPS` start-up steps.
- Step numbers align two runs of the same job: the loss and grad norm are compared at the same
  steps (both runs past both warmups), not at the same time.
- In synchronous data parallelism one slow rank makes every rank's step slower (the others wait
  in the collective): step times cannot name it. A rank's own work per step — data loading plus
  compute, its arrival at the collective — can: the rank whose own time grew more than the job's
  did (by rank number, in both runs) is the one that changed. Its waits are not used: the victims'
  waits grow, the culprit's does not.
- Ranks are matched by number; when the world sizes differ run-level figures are still compared
  (throughput is the job's), per-rank ones only where both runs have the rank.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import polars as pl

from . import host_names
from .errors import BAD_ARGUMENT, ForensicsError

if TYPE_CHECKING:
    from .report.junit import JUnitCase
    from .report.model import Finding, Report
    from .store import Run

SKIP_STEPS = 2
LOSS_TAIL = 10              # the loss is compared over the last matched steps (median of 10)
# A rank "changed" when its own time per step moved, beyond the job's move, by at least this
# much (and 5% of its baseline): smaller shifts are scheduler noise on a shared host.
RANK_NOISE_MS = 5.0
RANK_NOISE_SHARE = 0.05
MOST_CHANGED = 3
SEVERITIES = ["INFO", "WARN", "ERROR"]
NOT_COMPARABLE_EXIT = 4     # `forensics compare`'s exit code when the runs cannot be compared (README)


@dataclass
class CompareThresholds:
    """What fails a comparison (None switches a check off). Shares: 0.05 = 5%."""

    max_slowdown: float | None = 0.05          # median step time after warmup, relative increase
    max_throughput_drop: float | None = 0.05   # job throughput (samples/s, else steps/s), relative drop
    max_loss_increase: float | None = 0.05     # loss over the last matched steps, relative increase
    fail_on_new: str | None = "WARN"           # a new finding at this severity or above fails


def parse_share(text: str | float | None, option: str = "threshold") -> float | None:
    """'5%' -> 0.05, '0.05' -> 0.05, 'off'/'none' -> None. A bare number above 1 is refused:
    it is ambiguous (5 meaning 5% or 500%?)."""
    if text is None or isinstance(text, float):
        return text
    s = str(text).strip().lower()
    if s in ("off", "none", ""):
        return None
    m = re.fullmatch(r"([0-9]*\.?[0-9]+)\s*(%?)", s)
    if not m:
        raise ForensicsError(f"cannot read {option} {text!r}", reason="expected a share such as 5% or 0.05, or off",
                             code=BAD_ARGUMENT)
    v = float(m.group(1))
    if m.group(2):
        return v / 100.0
    if v > 1:
        raise ForensicsError(f"{option} {text!r} is ambiguous", reason="a bare number above 1",
                             help=f"write {v:g}% (or {v / 100:g})", code=BAD_ARGUMENT)
    return v


@dataclass
class Delta:
    """One figure of both runs. `worse` says which direction is a regression."""

    name: str
    label: str
    unit: str
    baseline: float | None
    candidate: float | None
    worse: str | None = "higher"               # higher | lower | None (neither)

    @property
    def delta(self) -> float | None:
        if self.baseline is None or self.candidate is None:
            return None
        return self.candidate - self.baseline

    @property
    def rel(self) -> float | None:
        d = self.delta
        if d is None or not self.baseline:
            return None
        return d / abs(self.baseline)

    @property
    def regression(self) -> float | None:
        """The relative change, positive when it is worse."""
        r = self.rel
        if r is None or self.worse is None:
            return None
        return r if self.worse == "higher" else -r

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "label": self.label, "unit": self.unit, "baseline": _r(self.baseline),
                "candidate": _r(self.candidate), "delta": _r(self.delta), "rel": _r(self.rel, 4), "worse": self.worse}


@dataclass
class RankChange:
    rank: int
    host: str | None
    metrics: dict[str, Delta]
    own_delta_ms: float | None                 # change of data + compute per step
    excess_ms: float | None                    # ... beyond the job's median change
    changed: bool = False                      # beyond noise: one of the ranks that changed most
    summary: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "host": self.host, "own_delta_ms": _r(self.own_delta_ms),
                "excess_ms": _r(self.excess_ms), "changed": self.changed, "summary": self.summary,
                "metrics": {k: v.to_json() for k, v in self.metrics.items()}}


@dataclass
class Check:
    name: str
    label: str
    limit: float | str | None
    value: float | str | None
    passed: bool | None                        # None: not applicable (nothing to compare)
    text: str
    details: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "label": self.label, "limit": self.limit, "value": _r(self.value, 4),
                "passed": self.passed, "text": self.text, "details": self.details}


@dataclass
class Side:
    """One run as the comparison saw it."""

    label: str | None
    ranks: list[int]
    hosts: int
    steps: int
    first_step: int | None
    last_step: int | None
    warmup_end: int | None
    compared_from: int | None                  # first step counted (after warmup)
    wall_s: float | None
    events: int
    root_cause: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "wall_s": _r(self.wall_s)}


@dataclass
class CompareResult:
    baseline: Side
    candidate: Side
    thresholds: CompareThresholds
    metrics: list[Delta]
    ranks: list[RankChange]
    changed_most: list[int]
    only_in_baseline: list[int]
    only_in_candidate: list[int]
    matched_steps: dict[str, Any]
    new_findings: list[dict[str, Any]]
    resolved_findings: list[dict[str, Any]]
    checks: list[Check]
    notes: list[str] = field(default_factory=list)
    # per-step curves of both runs for the HTML plots (not part of the JSON contract)
    series: dict[str, dict[str, list]] = field(default_factory=dict, repr=False)
    # why the two runs cannot be compared (`_incomparable`); empty when they can
    incomparable: list[str] = field(default_factory=list)

    @property
    def comparable(self) -> bool:
        return not self.incomparable

    @property
    def passed(self) -> bool:
        """PASS is a claim: the runs were compared and no check tripped."""
        return self.comparable and all(c.passed is not False for c in self.checks)

    @property
    def verdict(self) -> str:
        if self.incomparable:
            return "NOT COMPARABLE: " + "; ".join(self.incomparable)
        failed = [c for c in self.checks if c.passed is False]
        head = "FAIL" if failed else "PASS"
        parts = [c.text for c in failed] if failed else ["no check tripped"]
        if self.changed_most:
            r = next(x for x in self.ranks if x.rank == self.changed_most[0])
            parts.append(f"changed most: {r.summary}")
        return f"{head}: " + "; ".join(parts)

    def metric(self, name: str) -> Delta | None:
        return next((m for m in self.metrics if m.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "verdict": self.verdict,
            "baseline": self.baseline.to_json(),
            "candidate": self.candidate.to_json(),
            "thresholds": asdict(self.thresholds),
            "checks": [c.to_json() for c in self.checks],
            "metrics": [m.to_json() for m in self.metrics],
            "matched_steps": self.matched_steps,
            "changed_most": self.changed_most,
            "ranks": [r.to_json() for r in self.ranks],
            "only_in_baseline": self.only_in_baseline,
            "only_in_candidate": self.only_in_candidate,
            "new_findings": self.new_findings,
            "resolved_findings": self.resolved_findings,
            "notes": self.notes,
            "comparable": self.comparable,
            "incomparable": self.incomparable,
        }


def _r(v: Any, digits: int = 3) -> Any:
    if isinstance(v, float):
        if not math.isfinite(v):
            return None
        return round(v, digits) if abs(v) >= 1 else float(f"{v:.{digits}g}")
    return v


def _f(v: Any) -> float | None:
    """A figure, or None: a NaN (0 / 0: no communication and no step time) is no figure."""
    if v is None:
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def _job_steps(events: pl.LazyFrame) -> pl.DataFrame:
    """The job's own step lines: TRAIN_STEP events that name no rank but a step and its time --
    Megatron prints `iteration N/M | ... | elapsed time per iteration (ms): X | ... | global
    batch size: B` once for the job (print_rank_last), HF Trainer its flat metric lines. Per
    step: step_time_ms, and samples/s (logged, else global batch size / step time)."""
    gbs = pl.col("extra").str.json_path_match("$.global_batch_size").cast(pl.Float64, strict=False)
    return (events.filter((pl.col("event") == "TRAIN_STEP") & pl.col("rank").is_null() & pl.col("step").is_not_null()
                          & (pl.col("step_time_ms") > 0))
            .select("step", "step_time_ms",
                    pl.coalesce(pl.col("samples_per_s"), gbs * 1000.0 / pl.col("step_time_ms")).alias("sps"))
            .group_by("step").agg(pl.col("step_time_ms").median(), pl.col("sps").median())
            .sort("step").collect())


# --- one run's figures -----------------------------------------------------------------------

@dataclass
class _Figures:
    side: Side
    run_level: dict[str, float | None]
    unit: str                                  # throughput unit
    per_rank: pl.DataFrame                     # rank, host, medians
    loss: pl.DataFrame                         # step, loss, grad_norm (means over ranks)
    curve: pl.DataFrame                        # step, step_ms, thr
    report: Report | None


def _figures(run: Run, findings: bool, rule_dirs: Sequence[str | os.PathLike[str]] | None) -> _Figures:
    from . import timeline
    from .passes import diagnose_context
    from .passes.context import Context
    from .passes.loss import loss_series, warmup_end
    from .passes.throughput import series as throughput_series

    ctx = Context.from_run(run)
    steps = ctx.steps.select("rank", "step", "host", "t_end", "step_time_ms", "data_load_ms", "compute_ms",
                             "comm_ms", "wait_est", "samples_per_s", "loss", "t_start", "file", "train_line")
    ls = loss_series(ctx.events)
    wend = warmup_end(ls) if not ls.is_empty() else None
    first = steps.get_column("step").min() if not steps.is_empty() else None
    start = (wend + 1) if wend is not None else ((first or 0) + SKIP_STEPS if first is not None else None)
    post = steps.filter(pl.col("step") >= start) if start is not None else steps
    if post.get_column("step_time_ms").drop_nulls().is_empty():
        post = steps   # a run that never left warmup (or died in its first step after): all of it, with a note
    curve, unit = throughput_series(post)
    curve = curve.join(post.group_by("step").agg(pl.col("step_time_ms").median().alias("step_ms")), on="step",
                       how="left").select("step", "step_ms", "thr").sort("step")
    untimed = curve.get_column("step_ms").drop_nulls().is_empty()
    # read only when no rank's step is timed (a scan of the events)
    job = _job_steps(ctx.events) if untimed else pl.DataFrame(schema={"step": pl.Int64})
    job_from: int | None = None
    if untimed and job.height:
        # no rank's step has a time: the job's own step lines are the run's pace
        j0 = int(job.get_column("step").min())
        # without a warmup, the first SKIP_STEPS logged lines are start-up (Megatron logs every
        # log-interval iterations: its first line's time holds the compilation)
        job_from = (wend + 1) if wend is not None and job.filter(pl.col("step") > wend).height else (
            int(job.get_column("step")[min(SKIP_STEPS, job.height - 1)]))
        jpost = job.filter(pl.col("step") >= job_from)
        if jpost.is_empty():
            jpost, job_from = job, j0
        has_sps = jpost.get_column("sps").drop_nulls().len() > 0
        unit = "samples/s" if has_sps else "steps/s"
        curve = jpost.select("step", pl.col("step_time_ms").alias("step_ms"),
                             (pl.col("sps") if has_sps else 1000.0 / pl.col("step_time_ms")).alias("thr"))
    step_ms = curve.get_column("step_ms").drop_nulls()
    own = (pl.col("data_load_ms").fill_null(0.0) + pl.col("compute_ms").fill_null(0.0))
    rl = post.select(
        pl.col("data_load_ms").median().alias("data"),
        pl.col("compute_ms").median().alias("compute"),
        pl.col("wait_est").clip(lower_bound=0.0).median().alias("wait"),
        (pl.col("comm_ms").filter(pl.col("step_time_ms").is_not_null()).sum()
         / pl.col("step_time_ms").filter(pl.col("comm_ms").is_not_null()).sum()).alias("comm_share"),
    ).row(0, named=True)
    t_from = post.get_column("t_start").min() if not post.is_empty() else None
    tele = ctx.events.select("rank", "timestamp", "gpu_util", "temp_c", "sm_clock_mhz").filter(
        pl.any_horizontal(pl.col("gpu_util", "temp_c", "sm_clock_mhz").is_not_null()))
    if t_from is not None:
        tele = tele.filter(pl.col("timestamp") >= t_from)
    tele_aggs = [pl.col("gpu_util").median().alias("gpu_util"), pl.col("temp_c").median().alias("temp_c"),
                 pl.col("temp_c").max().alias("temp_c_max"), pl.col("sm_clock_mhz").median().alias("sm_clock_mhz")]
    gn = (ctx.events.select("step", "grad_norm").filter(pl.col("grad_norm").is_not_null() & pl.col("step").is_not_null())
          .group_by("step").agg(pl.col("grad_norm").mean()))
    tele_run, tele_rank, gn = pl.collect_all([tele.select(tele_aggs), tele.group_by("rank").agg(tele_aggs), gn])
    tr = tele_run.row(0, named=True) if tele_run.height else {}
    per_rank = (
        post.filter(pl.col("rank").is_not_null()).group_by("rank")
        .agg(pl.col("host").drop_nulls().first(), pl.col("step_time_ms").median(), pl.col("data_load_ms").median(),
             pl.col("compute_ms").median(), own.median().alias("own_ms"),
             pl.col("wait_est").clip(lower_bound=0.0).median().alias("wait_ms"))
        .join(tele_rank.filter(pl.col("rank").is_not_null()), on="rank", how="full", coalesce=True)
        .sort("rank")
    )
    loss = ls.select("step", "loss").join(gn, on="step", how="full", coalesce=True).sort("step")
    run_level = {
        "step_time_median_ms": _f(step_ms.median()) if len(step_ms) else None,
        "step_time_p95_ms": _f(step_ms.quantile(0.95, "linear")) if len(step_ms) else None,
        "throughput": _f(curve.get_column("thr").median()) if curve.height else None,
        "data_load_median_ms": _f(rl["data"]),
        "compute_median_ms": _f(rl["compute"]),
        "comm_share": _f(rl["comm_share"]),
        "wait_median_ms": _f(rl["wait"]),
        "gpu_util_median": _f(tr.get("gpu_util")),
        "temp_c_median": _f(tr.get("temp_c")),
        "temp_c_max": _f(tr.get("temp_c_max")),
        "sm_clock_mhz_median": _f(tr.get("sm_clock_mhz")),
    }
    t0, t1 = timeline.bounds(run)
    report = diagnose_context(ctx, rule_dirs) if findings else None
    all_steps = pl.concat([steps.get_column("step"), job.get_column("step")]).drop_nulls()
    side = Side(
        label=run.label, ranks=list(ctx.ranks),
        hosts=len(host_names.distinct(run.totals.get("hosts") or [])) if run.totals else 0,
        steps=int(all_steps.n_unique()),
        first_step=int(all_steps.min()) if len(all_steps) else None,  # type: ignore[arg-type]
        last_step=int(all_steps.max()) if len(all_steps) else None,  # type: ignore[arg-type]
        warmup_end=wend, compared_from=job_from if job_from is not None else (
            int(post.get_column("step").min()) if not post.is_empty() else None),
        wall_s=(t1 - t0).total_seconds() if t0 is not None and t1 is not None else None,
        events=int(run.totals.get("events", 0)) if run.totals else 0,
        root_cause=report.root_cause.summary if report is not None and report.root_cause is not None else None,
    )
    return _Figures(side, run_level, unit, per_rank, loss, curve, report)


# --- the comparison ---------------------------------------------------------------------------

METRICS = [  # name, label, unit, worse
    ("step_time_median_ms", "step time, median", "ms", "higher"),
    ("step_time_p95_ms", "step time, p95", "ms", "higher"),
    ("throughput", "throughput", "", "lower"),
    ("data_load_median_ms", "data load, median", "ms", "higher"),
    ("compute_median_ms", "compute, median", "ms", "higher"),
    ("comm_share", "communication share of step time", "share", "higher"),
    ("wait_median_ms", "collective wait, median", "ms", "higher"),
    ("gpu_util_median", "GPU utilisation, median", "%", "lower"),
    ("temp_c_median", "GPU temperature, median", "°C", "higher"),
    ("temp_c_max", "GPU temperature, max", "°C", "higher"),
    ("sm_clock_mhz_median", "SM clock, median", "MHz", "lower"),
]
RANK_METRICS = [  # column, label, unit, worse
    ("step_time_ms", "step ms", "ms", "higher"), ("own_ms", "data+compute ms", "ms", "higher"),
    ("data_load_ms", "data ms", "ms", "higher"), ("compute_ms", "compute ms", "ms", "higher"),
    ("wait_ms", "wait ms", "ms", "higher"), ("gpu_util", "GPU util %", "%", "lower"),
    ("temp_c_max", "temp max °C", "°C", "higher"), ("sm_clock_mhz", "SM clock MHz", "MHz", "lower"),
]


def _open(x: Run | str | os.PathLike[str] | Sequence[str]) -> Run:
    from .store import Run

    if isinstance(x, Run):
        return x
    from .run import open_run

    return open_run([str(p) for p in x] if isinstance(x, (list, tuple)) else str(x))


def _matched(b: pl.DataFrame, c: pl.DataFrame, after: int | None) -> tuple[pl.DataFrame, list[Delta]]:
    """Loss and grad norm at the steps both runs logged, after both warmups."""
    j = b.join(c, on="step", suffix="_c").sort("step")
    if after is not None:
        j = j.filter(pl.col("step") > after)
    out = []
    for col, label in (("loss", "loss at matched steps (median of the last 10)"),
                       ("grad_norm", "grad norm at matched steps (median of the last 10)")):
        k = j.filter(pl.col(col).is_not_null() & pl.col(f"{col}_c").is_not_null() & pl.col(col).is_finite()
                     & pl.col(f"{col}_c").is_finite()).tail(LOSS_TAIL)
        if k.height:
            out.append(Delta(f"{col}_matched", label, "", _f(k.get_column(col).median()),
                             _f(k.get_column(f"{col}_c").median()), "higher"))
        else:
            out.append(Delta(f"{col}_matched", label, "", None, None, "higher"))
    return j, out


def _finding_key(f: Finding) -> tuple[str, tuple[int, ...]]:
    return f.kind, tuple(sorted(f.ranks))


def _finding_json(f: Finding) -> dict[str, Any]:
    return {"kind": f.kind, "rule": f.rule, "severity": f.severity, "layer": f.layer, "ranks": list(f.ranks),
            "title": f.title, "cost": f.cost, "evidence": [e.where for e in f.lines[:3]]}


def _diff_findings(b: Report | None, c: Report | None) -> tuple[list[dict], list[dict]]:
    """New (in the candidate only) and resolved (in the baseline only) findings, matched by kind
    and ranks: the same fault moved to another rank is one new and one resolved."""
    if b is None or c is None:
        return [], []

    def index(r: Report) -> dict[tuple, Finding]:
        out: dict[tuple, Finding] = {}
        for f in r.findings:
            k = _finding_key(f)
            if k not in out or SEVERITIES.index(f.severity) > SEVERITIES.index(out[k].severity):
                out[k] = f
        return out

    bi, ci = index(b), index(c)
    new = [_finding_json(f) for k, f in ci.items() if k not in bi]
    gone = [_finding_json(f) for k, f in bi.items() if k not in ci]
    order = lambda d: (-SEVERITIES.index(d["severity"]), -float((d["cost"] or {}).get("seconds") or 0.0))  # noqa: E731
    return sorted(new, key=order), sorted(gone, key=order)


def _rank_changes(b: pl.DataFrame, c: pl.DataFrame) -> tuple[list[RankChange], list[int]]:
    j = b.join(c, on="rank", suffix="_c").sort("rank")
    rows = list(j.iter_rows(named=True))
    deltas = [r["own_ms_c"] - r["own_ms"] for r in rows if r.get("own_ms") is not None and r.get("own_ms_c") is not None]
    job = sorted(deltas)[len(deltas) // 2] if deltas else None
    out: list[RankChange] = []
    for r in rows:
        metrics = {col: Delta(col, label, unit, _f(r.get(col)), _f(r.get(f"{col}_c")), worse)
                   for col, label, unit, worse in RANK_METRICS}
        own = metrics["own_ms"].delta
        excess = own - job if own is not None and job is not None and len(deltas) > 1 else own
        base = metrics["own_ms"].baseline or 0.0
        changed = excess is not None and abs(excess) >= max(RANK_NOISE_MS, RANK_NOISE_SHARE * base)
        out.append(RankChange(int(r["rank"]), r.get("host_c") or r.get("host"), metrics, own, excess, changed))
    for rc in out:
        rc.summary = _rank_summary(rc)
    top = sorted((x for x in out if x.changed), key=lambda x: -abs(x.excess_ms or 0.0))[:MOST_CHANGED]
    return out, [x.rank for x in top]


def _signed(v: float, unit: str = "ms") -> str:
    return f"{v:+.0f} {unit}" if abs(v) >= 10 else f"{v:+.1f} {unit}"


def _rank_summary(rc: RankChange) -> str:
    if rc.own_delta_ms is None:
        return f"rank {rc.rank}: no step phases to compare"
    m = rc.metrics
    base = m["own_ms"].baseline
    rel = f" ({rc.own_delta_ms / base:+.0%})" if base else ""
    parts = [f"rank {rc.rank}: data+compute {_signed(rc.own_delta_ms)} per step{rel}"]
    if rc.excess_ms is not None and abs(rc.excess_ms - rc.own_delta_ms) >= 1.0:
        parts.append(f"{_signed(rc.excess_ms)} beyond the job's change")
    phase = max(("compute_ms", "data_load_ms"), key=lambda k: abs(m[k].delta or 0.0))
    if m[phase].delta:
        parts.append(f"{'compute' if phase == 'compute_ms' else 'data load'} {_signed(m[phase].delta)}")
    for k, unit in (("temp_c_max", "°C"), ("sm_clock_mhz", "MHz"), ("gpu_util", "%")):
        d = m[k].delta
        if d is not None and m[k].regression is not None and m[k].regression > 0.05:
            parts.append(f"{m[k].label.split(' ')[0] if k != 'gpu_util' else 'GPU util'} {d:+.0f} {unit}")
    return ", ".join(parts)


def _share_check(name: str, label: str, d: Delta | None, limit: float | None, what: str) -> Check:
    if limit is None:
        return Check(name, label, None, None, None, f"{label}: not checked")
    if d is None or d.regression is None:
        return Check(name, label, limit, None, None, f"{label}: nothing to compare")
    v = d.regression
    shown = f"{d.rel:+.1%}" if d.rel is not None else "?"
    ok = v <= limit
    text = f"{label} {shown} ({_num(d.baseline)} → {_num(d.candidate)}{(' ' + d.unit) if d.unit else ''}; {what}{limit:.0%})"
    return Check(name, label, limit, v, ok, text)


def _num(v: float | None) -> str:
    from .report.fmt import num

    return num(v)


def compare_runs(baseline: Run | str | os.PathLike[str] | Sequence[str],
                 candidate: Run | str | os.PathLike[str] | Sequence[str],
                 thresholds: CompareThresholds | None = None, *, findings: bool = True,
                 rule_dirs: Sequence[str | os.PathLike[str]] | None = None) -> CompareResult:
    """Compare `candidate` with `baseline` (each a Run, a store, or log paths). `findings`:
    diagnose both and report new / resolved findings (the slow part on a big run)."""
    th = thresholds or CompareThresholds()
    fb = _figures(_open(baseline), findings, rule_dirs)
    fc = _figures(_open(candidate), findings, rule_dirs)
    notes: list[str] = []
    metrics = [Delta(n, lab, (fb.unit if n == "throughput" else u), fb.run_level[n], fc.run_level[n], w)
               for n, lab, u, w in METRICS]
    if fb.unit != fc.unit:
        notes.append(f"throughput is {fb.unit} in the baseline and {fc.unit} in the candidate: not compared")
        metrics = [m if m.name != "throughput" else Delta(m.name, m.label, "", None, None, "lower") for m in metrics]
    after = max((w for w in (fb.side.warmup_end, fc.side.warmup_end) if w is not None), default=None)
    joined, loss_deltas = _matched(fb.loss, fc.loss, after)
    metrics += loss_deltas
    metrics.append(Delta("wall_s", "wall time (first to last event)", "s", fb.side.wall_s, fc.side.wall_s, None))
    k = joined.filter(pl.col("loss").is_not_null() & pl.col("loss_c").is_not_null())
    matched = {"count": k.height, "first": int(k.get_column("step").min()) if k.height else None,
               "last": int(k.get_column("step").max()) if k.height else None, "after_warmup_step": after}
    rb, rc_ = set(fb.side.ranks), set(fc.side.ranks)
    if len(rb) != len(rc_):
        from .report.fmt import counted

        notes.append(f"world sizes differ: {counted(len(rb), 'rank')} in the baseline, {len(rc_)} in the candidate; "
                     "per-rank figures only for the ranks both have")
    for s, name in ((fb.side, "baseline"), (fc.side, "candidate")):
        if s.warmup_end is not None and s.compared_from is not None and s.compared_from <= s.warmup_end:
            notes.append(f"the {name} never left warmup (stage/lr ramp up to its last step): its warmup steps are compared")
    ranks, most = _rank_changes(fb.per_rank, fc.per_rank)
    new, gone = _diff_findings(fb.report, fc.report)
    # no usable event on a side is never a pass: there is nothing to vouch for (issue 27)
    checks = [Check("data", f"usable data ({name})", None, 0, False,
                    f"the {name} holds no usable event: nothing to compare, not a pass")
              for s, name in ((fb.side, "baseline"), (fc.side, "candidate")) if s.events == 0]
    checks += [
        _share_check("slowdown", "median step time", next(m for m in metrics if m.name == "step_time_median_ms"),
                     th.max_slowdown, "limit +"),
        _share_check("throughput_drop", "throughput", next(m for m in metrics if m.name == "throughput"),
                     th.max_throughput_drop, "limit -"),
        _share_check("loss_increase", "loss at matched steps", next(m for m in metrics if m.name == "loss_matched"),
                     th.max_loss_increase, "limit +"),
    ]
    if th.fail_on_new is None:
        checks.append(Check("new_findings", "new findings", None, None, None, "new findings: not checked"))
    elif fb.report is None:
        checks.append(Check("new_findings", "new findings", th.fail_on_new, None, None, "new findings: not diagnosed"))
    else:
        bad = [f for f in new if SEVERITIES.index(f["severity"]) >= SEVERITIES.index(th.fail_on_new)]
        text = (f"{len(bad)} new finding{'s' if len(bad) != 1 else ''} at {th.fail_on_new} or above: "
                + "; ".join(_finding_line(f) for f in bad[:3]) if bad
                else f"no new finding at {th.fail_on_new} or above")
        checks.append(Check("new_findings", "new findings", th.fail_on_new, len(bad), not bad, text,
                            details=[f"{_finding_line(f)} [{', '.join(f['evidence'])}]" for f in bad]))
    series = {
        "baseline": {"step": fb.curve.get_column("step").to_list(), "step_ms": fb.curve.get_column("step_ms").to_list(),
                     "thr": fb.curve.get_column("thr").to_list()},
        "candidate": {"step": fc.curve.get_column("step").to_list(), "step_ms": fc.curve.get_column("step_ms").to_list(),
                      "thr": fc.curve.get_column("thr").to_list()},
        "loss": {"step": joined.get_column("step").to_list(), "baseline": joined.get_column("loss").to_list(),
                 "candidate": joined.get_column("loss_c").to_list()},
        "unit": {"thr": fb.unit},
    }
    return CompareResult(
        baseline=fb.side, candidate=fc.side, thresholds=th, metrics=metrics, ranks=ranks, changed_most=most,
        only_in_baseline=sorted(rb - rc_), only_in_candidate=sorted(rc_ - rb), matched_steps=matched,
        new_findings=new, resolved_findings=gone, checks=checks, notes=notes, series=series,
        incomparable=_incomparable(fb.side, fc.side, metrics),
    )


def _incomparable(b: Side, c: Side, metrics: list[Delta]) -> list[str]:
    """Why nothing of the two runs can be held against the other (empty: they compare). A
    verdict of its own, never PASS: a comparison in which no check could look is no evidence
    that the candidate is as good."""
    why: list[str] = []
    if b.ranks and c.ranks and len(b.ranks) != len(c.ranks):
        from .report.fmt import counted

        why.append(f"different world sizes ({counted(len(b.ranks), 'rank')} in the baseline, {len(c.ranks)} in the candidate): "
                   "step time and throughput differ by design")
    core = [m for m in metrics if m.name in ("step_time_median_ms", "throughput", "loss_matched")]
    if all(m.baseline is None or m.candidate is None for m in core):
        have = lambda side: [m.label for m in core if getattr(m, side) is not None]  # noqa: E731
        why.append("no common metric: neither step time, throughput nor loss at matched steps is in both runs "
                   f"(the baseline has {', '.join(have('baseline')) or 'none of them'}; "
                   f"the candidate {', '.join(have('candidate')) or 'none of them'})")
    if (None not in (b.first_step, b.last_step, c.first_step, c.last_step)
            and (b.last_step < c.first_step or c.last_step < b.first_step)):  # type: ignore[operator]
        why.append(f"no overlapping steps (baseline {b.first_step}–{b.last_step}, candidate {c.first_step}–{c.last_step})")
    return why


def _finding_line(f: dict[str, Any]) -> str:
    from .report.fmt import cost_text, kind_label, rank_phrase

    who = rank_phrase(f["ranks"]) if f["ranks"] else "the job"
    c = cost_text(f.get("cost"))
    return f"{f['severity']} {kind_label(f['kind'])} on {who}" + (f" ({c})" if c else "")


def compare_junit_cases(result: CompareResult) -> list[JUnitCase]:
    """One JUnit test case per check (forensics/report/junit.py); a failed check carries its
    text, and the new findings' file:line evidence."""
    from .report.junit import JUnitCase

    cases = [JUnitCase(name=c.name, classname="forensics.compare", failure=c.text if c.passed is False else None,
                       details="\n".join([c.text, *c.details]))
             for c in result.checks]
    if result.incomparable:   # a CI job must not read "nothing compared" as green
        cases.insert(0, JUnitCase(name="comparable", classname="forensics.compare", failure=result.verdict,
                                  details="\n".join(result.incomparable)))
    return cases


__all__ = ["CompareThresholds", "CompareResult", "Delta", "RankChange", "Check", "Side", "compare_runs",
           "compare_junit_cases", "parse_share", "NOT_COMPARABLE_EXIT"]
