"""A run as a Chrome Trace Event Format file, for ui.perfetto.dev and chrome://tracing.

Owns `trace_events(run, ...)` (the trace as a dict) and `export_perfetto(run, path, ...)` (JSON,
gzip-compressed when the name ends in .gz). Layout: one process per host, one thread per rank
(process_name / thread_name metadata), and on each rank's track:

- complete events ("ph": "X") per step: the step, and inside it its phases in the order a
  synchronous data-parallel step runs them: data load, compute, communication (of which the
  first `wait_ms` is waiting for the slowest peer: a blocking collective waits for the last
  arrival before it transfers), then what follows the collective (optimizer, logging);
- instant events ("ph": "i") for every WARN/ERROR line, with file:line in args, and a "went
  silent here" marker at the last event of the rank that went silent first, when it stopped well
  before the others (`timeline.first_silent`: the hung rank of a hang);
- counter events ("ph": "C") for GPU temperature, utilisation, SM clock and the loss.

Phases are placed backwards from the step's end (the TRAIN_STEP line is logged when the step is
done) and from the collective's return (the ALLREDUCE line), on the common clock of
`timeline.with_aligned_time` so that ranks on different hosts line up. Phases are clipped into
their step and steps never overlap on a track, so the slices nest as Perfetto requires.

Big runs are bounded: `max_events` caps the output; when the run is larger, every k-th step (the
same steps on every rank) and every k-th counter sample are kept, WARN/ERROR instants are capped
(ERRORs first), and the summary says what was cut. Log messages are redacted by default.

Must not: judge the run, print (the CLI prints the summary), or rewrite `timestamp` (times are
derived into `ts_aligned` / `us`).
"""
from __future__ import annotations

import datetime as dt
import gzip
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import polars as pl

from .. import __version__
from ..errors import BAD_ARGUMENT, NO_INPUT, ForensicsError

if TYPE_CHECKING:
    from ..store import Run

DEFAULT_MAX_EVENTS = 500_000
# Share of the budget WARN/ERROR instants may take when the run must be cut.
INSTANT_SHARE = 0.1
COUNTERS = ("temp_c", "gpu_util", "sm_clock_mhz", "loss")
MESSAGE_CHARS = 500
NO_RANK = "no rank"
# The process of ranks whose lines name no host (and whose file path does not either).
NO_HOST = "host not logged"
SILENT = "went silent here"


@dataclass
class ExportSummary:
    path: str
    events: int
    bytes: int
    ranks: list[int]
    hosts: list[str]
    steps: tuple[int, int] | None
    cut: dict[str, Any] | None = None
    counts: dict[str, int] = field(default_factory=dict)
    gpu_activities: int = 0       # complete events of profiler-trace GPU activities (_kernel_events)

    @property
    def message(self) -> str | None:
        """What was cut, for stderr; None when the trace is whole."""
        c = self.cut
        if not c:
            return None
        parts = []
        if c.get("step_stride", 1) > 1:
            k = _nth(c["step_stride"])
            parts.append(f"kept every {k} step ({c['steps_kept']:,} of {c['steps_total']:,} steps, "
                         f"the same steps on every rank) and every {k} counter sample")
        if c.get("instants_kept", 0) < c.get("instants_total", 0):
            parts.append(f"{c['instants_kept']:,} of {c['instants_total']:,} WARN/ERROR instants (ERRORs first)")
        return (f"trace cut to fit --max-events {c['max_events']:,} ({c['events_full']:,} events in full): "
                + "; ".join(parts) + ". Narrow it with --steps A:B or --ranks, or raise --max-events.")


def _nth(k: int) -> str:
    suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{suffix}"


# --- arguments --------------------------------------------------------------------------------

MAX_RANKS_LISTED = 1 << 20      # more ranks than any job has run on
_RANGE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+))?\s*$")


def parse_ranks(spec: str | None) -> list[int] | None:
    """'0,3,5-7' -> [0, 3, 5, 6, 7]."""
    if spec is None or not spec.strip():
        return None
    out: list[int] = []
    for part in spec.split(","):
        m = _RANGE.match(part)
        if not m:
            raise ForensicsError(f"cannot read the rank list {spec!r}", reason=f"{part.strip()!r} is not N or N-M",
                                 help="e.g. --ranks 0,3,5-7", code=BAD_ARGUMENT)
        a, b = int(m.group(1)), int(m.group(2) or m.group(1))
        if b < a:
            raise ForensicsError(f"cannot read the rank list {spec!r}", reason=f"{part.strip()!r} runs backwards",
                                 help="e.g. --ranks 5-7", code=BAD_ARGUMENT)
        if len(out) + b - a >= MAX_RANKS_LISTED:   # 0-99999999999 was a list of every number: a MemoryError
            raise ForensicsError(f"cannot read the rank list {spec!r}", reason=f"it names more than {MAX_RANKS_LISTED:,} ranks",
                                 help="name the ranks to keep, or leave --ranks out for all of them", code=BAD_ARGUMENT)
        out.extend(range(a, b + 1))
    return sorted(set(out))


def parse_steps(spec: str | None) -> tuple[int | None, int | None] | None:
    """'100:200' (both ends included), '100:', ':200', ':' or '150': timeline.parse_step_range's
    forms (the `timeline --steps` option reads the same), and a range may not run backwards."""
    from ..timeline import parse_step_range

    if spec is None or not spec.strip():
        return None
    lo, hi = parse_step_range(spec.strip())
    if lo is not None and hi is not None and hi < lo:
        raise ForensicsError(f"cannot read the step range {spec!r}", reason="the range runs backwards",
                             help="e.g. --steps 100:200 (both included)", code=BAD_ARGUMENT)
    return None if lo is None and hi is None else (lo, hi)


# --- building the trace -----------------------------------------------------------------------


def _placed(aligned: pl.LazyFrame, inst: pl.DataFrame) -> pl.DataFrame:
    """Instants whose line carries no time (a traceback written between JSON lines or in a
    console log) at the time of the nearest timed line above them in their file (else below),
    as the failures pass places them; ones with no timed line in their file are left out."""
    need = inst.filter(pl.col("ts_aligned").is_null() & pl.col("source_file").is_not_null())
    if need.is_empty():
        return inst
    files = need.get_column("source_file").unique().to_list()
    anchors = (aligned.filter(pl.col("source_file").is_in(files) & pl.col("ts_aligned").is_not_null())
               .select("source_file", "line", pl.col("ts_aligned").alias("t_anchor")).sort("line").collect())
    keys = inst.with_row_index("_i").sort("line")
    back = keys.join_asof(anchors, on="line", by="source_file", strategy="backward", check_sortedness=False)
    fwd = keys.join_asof(anchors, on="line", by="source_file", strategy="forward", check_sortedness=False)
    t = back.select("_i", pl.col("t_anchor").alias("b")).join(fwd.select("_i", pl.col("t_anchor").alias("f")), on="_i")
    return (keys.join(t, on="_i").sort("_i")
            .with_columns(pl.coalesce("ts_aligned", "b", "f").alias("ts_aligned"))
            .filter(pl.col("ts_aligned").is_not_null()).drop("_i", "b", "f"))


def _us(col: str, t0: dt.datetime) -> pl.Expr:
    """Microseconds since the trace start (Perfetto shows relative time; small numbers keep the
    file short and exact)."""
    return (pl.col(col) - pl.lit(t0, dtype=pl.Datetime("us", "UTC"))).dt.total_microseconds()


def _phases(steps: pl.DataFrame) -> pl.DataFrame:
    """Start/end (µs) of the step and of each phase, per (rank, step); see the module docstring."""
    ms = lambda c: (pl.col(c).fill_null(0.0).clip(lower_bound=0.0) * 1000.0)  # noqa: E731
    d = steps.with_columns(
        pl.when(pl.col("step_time_ms").is_not_null()).then(pl.col("step_time_ms") * 1000.0)
        .otherwise((pl.col("end") - pl.col("first")).cast(pl.Float64)).clip(lower_bound=0.0).alias("dur"),
    ).with_columns((pl.col("end") - pl.col("dur")).alias("start0"))
    prev_end = pl.col("end").shift(1).over("rank", order_by="step")
    d = d.with_columns(pl.max_horizontal("start0", prev_end.fill_null(pl.col("start0"))).alias("start"))
    d = d.with_columns(pl.min_horizontal(pl.col("start") + ms("data_load_ms"), pl.col("end")).alias("data_end"))
    has_comm = pl.col("comm_ms").is_not_null() & (pl.col("comm_ms") > 0)
    c_end = pl.min_horizontal(pl.coalesce("comm_end_us", "end"), pl.col("end"))
    d = d.with_columns(
        pl.when(has_comm).then(pl.max_horizontal(c_end - ms("comm_ms"), pl.col("data_end"))).alias("comm_start"),
        pl.when(has_comm).then(pl.max_horizontal(c_end, pl.col("data_end"))).alias("comm_stop"),
    )
    d = d.with_columns(
        pl.when(has_comm & (pl.col("wait_ms").fill_null(0) > 0))
        .then(pl.min_horizontal(pl.col("comm_start") + ms("wait_ms"), pl.col("comm_stop"))).alias("wait_end"),
        pl.coalesce("comm_start", "end").alias("compute_end"),
    )
    return d


def _x(df: pl.DataFrame, name: str | pl.Expr, a: str, b: str, cat: str, args: list[str]) -> pl.DataFrame:
    """X events from columns a..b (µs); zero-length phases are dropped."""
    nm = pl.lit(name) if isinstance(name, str) else name
    return (
        df.filter(pl.col(a).is_not_null() & pl.col(b).is_not_null() & (pl.col(b) > pl.col(a)))
        .select(
            nm.alias("name"), pl.lit(cat).alias("cat"), pl.col(a).round(0).cast(pl.Int64).alias("ts"),
            (pl.col(b).round(0).cast(pl.Int64) - pl.col(a).round(0).cast(pl.Int64)).alias("dur"),
            "pid", "tid", pl.struct(*args).alias("args"),
        )
        .filter(pl.col("dur") >= 0)
    )


def trace_events(run: "Run", *, steps: tuple[int | None, int | None] | None = None, ranks: list[int] | None = None,
                 max_events: int = DEFAULT_MAX_EVENTS, redact: bool = True, align: bool = True) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The trace as a dict (`traceEvents` + `otherData`) and what was cut (None when nothing)."""
    from .. import timeline

    ranks = timeline.check_ranks(run, ranks)   # a rank the run does not have: say which it has
    ev = run.events()
    t_first, t_last = timeline.bounds(run)
    if t_first is None:
        raise ForensicsError("the run has no events", help="check the store with: forensics ingest --json", code=NO_INPUT)
    offsets = timeline.clock_offsets(ev) if align else pl.DataFrame(schema={"clock": pl.String, "offset_ms": pl.Float64})
    aligned = timeline.with_aligned_time(ev, offsets)
    if ranks is not None:
        aligned = aligned.filter(pl.col("rank").is_in(ranks))
    # the earliest aligned time can precede the logged one; a run dated in year 1 has no second before it
    earliest = dt.datetime.min.replace(tzinfo=dt.timezone.utc)
    t0 = t_first - dt.timedelta(seconds=1) if t_first - earliest >= dt.timedelta(seconds=1) else earliest

    # one scan per kind of event; each reads only its columns
    st_q = (timeline.step_table(aligned, "ts_aligned")
            .select("rank", "step", "t_start", "t_end", "step_time_ms", "data_load_ms", "compute_ms", "comm_ms",
                    "wait_ms", "comm_end"))
    if steps is not None:
        lo, hi = steps
        if lo is not None:
            st_q = st_q.filter(pl.col("step") >= lo)
        if hi is not None:
            st_q = st_q.filter(pl.col("step") <= hi)
    host_q = (aligned.select("rank", "host").group_by("rank").agg(pl.col("host").drop_nulls().first()))
    inst_q = (aligned.filter(pl.col("level").is_in(["WARN", "ERROR"]))
              .select("rank", "ts_aligned", "level", "event", "message", "step", "source_file", "line"))
    # flat metric lines (HF Trainer) often carry no rank: their loss goes on the "no rank" track
    cnt_q = (aligned.filter(pl.any_horizontal([pl.col(c).is_not_null() for c in COUNTERS]))
             .select("rank", "ts_aligned", *COUNTERS))
    st, hosts, inst, cnt = pl.collect_all([st_q, host_q, inst_q, cnt_q])
    inst = _placed(aligned, inst)
    # the hung rank: silence is judged among all ranks, on the common clock
    silent = timeline.first_silent(timeline.with_aligned_time(ev, offsets), "ts_aligned")
    if silent is not None and ranks is not None and silent["rank"] not in ranks:
        silent = None

    if steps is not None and st.height:
        # counters and instants: the time the selected steps span
        a, b = st["t_start"].min(), st["t_end"].max()
        inst = inst.filter(pl.col("ts_aligned").is_between(a, b))
        cnt = cnt.filter(pl.col("ts_aligned").is_between(a, b))
        if silent is not None and not (a <= silent["last_ts"] <= b):
            silent = None
    elif steps is not None:
        inst, cnt = inst.head(0), cnt.head(0)
        silent = None

    # processes (hosts) and threads (ranks)
    host_of = {int(r): h for r, h in hosts.iter_rows() if r is not None}
    rank_set = sorted(set(host_of) | set(int(r) for r in st["rank"].unique().drop_nulls().to_list()))
    host_names = sorted({h for h in host_of.values() if h is not None})
    pid_of_host: dict[str | None, int] = {h: i + 1 for i, h in enumerate(host_names)}
    if any(host_of.get(r) is None for r in rank_set):
        pid_of_host[None] = len(pid_of_host) + 1
    no_rank_pid = len(pid_of_host) + 1
    pid_map = {r: pid_of_host[host_of.get(r)] for r in rank_set}
    pid_expr = (pl.when(pl.col("rank").is_null()).then(pl.lit(no_rank_pid, pl.Int64))
                .otherwise(pl.col("rank").replace_strict(pid_map, default=no_rank_pid, return_dtype=pl.Int64))
                if pid_map else pl.lit(no_rank_pid, pl.Int64))
    tid_expr = pl.col("rank").cast(pl.Int64).fill_null(0)

    # steps -> phases
    st = st.with_columns(
        _us("t_start", t0).alias("first"), _us("t_end", t0).alias("end"),
        _us("comm_end", t0).cast(pl.Float64).alias("comm_end_us"),
        pid_expr.alias("pid"), tid_expr.alias("tid"),
    ).with_columns(pl.col("first").cast(pl.Float64), pl.col("end").cast(pl.Float64))
    ph = _phases(st)

    def x_events(p: pl.DataFrame) -> pl.DataFrame:
        step_name = pl.format("step {}", pl.col("step"))
        parts = [
            _x(p, step_name, "start", "end", "step", ["step", "step_time_ms", "data_load_ms", "compute_ms", "comm_ms", "wait_ms"]),
            _x(p, "data load", "start", "data_end", "phase", ["step", "data_load_ms"]),
            _x(p, "compute", "data_end", "compute_end", "phase", ["step", "compute_ms"]),
            _x(p, "communication", "comm_start", "comm_stop", "phase", ["step", "comm_ms", "wait_ms"]),
            _x(p, "waiting for peers", "comm_start", "wait_end", "phase", ["step", "wait_ms"]),
            _x(p, "after collective", "comm_stop", "end", "phase", ["step"]),
        ]
        return pl.concat(parts, how="vertical_relaxed")

    # counters: one event per sample and metric
    cnt = cnt.with_columns(_us("ts_aligned", t0).alias("ts"), pid_expr.alias("pid"), tid_expr.alias("tid"))
    # instants
    inst = inst.with_columns(_us("ts_aligned", t0).alias("ts"), pid_expr.alias("pid"), tid_expr.alias("tid"))

    n_inst = inst.height
    n_cnt = sum(int(cnt[c].is_not_null().sum()) for c in COUNTERS)
    xs_full = x_events(ph)
    n_x = xs_full.height
    n_meta = 2 * (len(pid_of_host) + 1) + 2 * (len(rank_set) + 1)
    full = n_x + n_cnt + n_inst + n_meta
    cut: dict[str, Any] | None = None
    xs = xs_full
    if full > max_events:
        inst_cap = max(0, min(n_inst, int(max_events * INSTANT_SHARE)))
        if n_inst > inst_cap:
            inst = inst.sort(pl.col("level") != "ERROR", "ts")
            inst = inst.gather_every(max(1, math.ceil(n_inst / inst_cap))) if inst_cap else inst.head(0)
            inst = inst.head(inst_cap)
        room = max(max_events - n_meta - inst.height, 1)
        k = max(1, math.ceil((n_x + n_cnt) / room))
        steps_total = ph["step"].n_unique()
        if k > 1:
            s0 = ph["step"].min()
            ph = ph.filter((pl.col("step") - s0) % k == 0)
            xs = x_events(ph)
            cnt = cnt.filter(pl.int_range(pl.len()).over("rank", order_by="ts") % k == 0)
        cut = {"max_events": max_events, "events_full": full, "step_stride": k, "steps_total": steps_total,
               "steps_kept": ph["step"].n_unique(), "instants_total": n_inst, "instants_kept": inst.height}
        if k == 1 and inst.height == n_inst:
            cut = None

    out: list[dict[str, Any]] = []
    # metadata: names and order of the tracks
    for h, pid in sorted(pid_of_host.items(), key=lambda kv: kv[1]):
        out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "ts": 0, "args": {"name": h or NO_HOST}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "ts": 0, "args": {"sort_index": pid}})
    for r in rank_set:
        out.append({"ph": "M", "name": "thread_name", "pid": pid_map[r], "tid": r, "ts": 0, "args": {"name": f"rank {r}"}})
        out.append({"ph": "M", "name": "thread_sort_index", "pid": pid_map[r], "tid": r, "ts": 0, "args": {"sort_index": r}})
    has_unranked = inst.filter(pl.col("rank").is_null()).height > 0 or cnt.filter(pl.col("rank").is_null()).height > 0
    if has_unranked:
        out.append({"ph": "M", "name": "process_name", "pid": no_rank_pid, "tid": 0, "ts": 0, "args": {"name": NO_RANK}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": no_rank_pid, "tid": 0, "ts": 0, "args": {"sort_index": no_rank_pid}})
        out.append({"ph": "M", "name": "thread_name", "pid": no_rank_pid, "tid": 0, "ts": 0, "args": {"name": "events without a rank"}})

    # X events: per track in time order, a parent before the phases it contains
    xs = xs.sort("pid", "tid", "ts", pl.col("dur"), descending=[False, False, False, True])
    for r in xs.iter_rows(named=True):
        r["args"] = {k: v for k, v in r["args"].items() if v is not None}
        r["ph"] = "X"
        out.append(r)

    if redact:
        from ..report.redact import redact_frame

        inst = redact_frame(inst)
    for r in inst.sort("ts").iter_rows(named=True):
        msg = r["message"] or ""
        args = {"level": str(r["level"]), "message": msg[:MESSAGE_CHARS], "where": f"{r['source_file']}:{r['line']}"}
        if r["step"] is not None:
            args["step"] = r["step"]
        out.append({"ph": "i", "s": "t", "name": f"{r['level']} {r['event'] or ''}".strip(), "cat": str(r["level"]).lower(),
                    "ts": r["ts"], "pid": r["pid"], "tid": r["tid"], "args": args})

    if silent is not None and silent["rank"] in pid_map:
        # a thread-scoped marker on the rank's own track, at its last event
        r = silent["rank"]
        ts = int(round((silent["last_ts"] - t0).total_seconds() * 1e6))
        out.append({"ph": "i", "s": "t", "name": SILENT, "cat": "silence", "ts": ts, "pid": pid_map[r], "tid": r,
                    "args": {"rank": r, "step": silent["step"], "where": f"{silent['source_file']}:{silent['line']}",
                             "silent before the run's last event (s)": silent["silent_s"],
                             "steps behind": silent["lag_steps"], "ERRORs of other ranks after it": silent["errors_after"]}})

    for c in COUNTERS:
        sub = cnt.filter(pl.col(c).is_not_null()).select("rank", "ts", "pid", "tid", c).sort("rank", "ts")
        for rank, ts, pid, tid, v in sub.iter_rows():
            if isinstance(v, float) and not math.isfinite(v):
                continue
            who = f"rank {rank}" if rank is not None else NO_RANK
            out.append({"ph": "C", "name": f"{who} {c}", "ts": ts, "pid": pid, "tid": tid, "args": {"value": v}})
    out += _kernel_events(run, ranks, steps, t0, max(max_events - len(out), 0))
    if len(out) == sum(e["ph"] == "M" for e in out):
        raise ForensicsError("nothing to export: no step, counter or WARN/ERROR event in the selection",
                             reason="the run (or the --steps/--ranks chosen) has no event a timeline can show",
                             help="check the steps and ranks with: forensics ranks STORE", code=NO_INPUT)

    lo_hi = (int(st["step"].min()), int(st["step"].max())) if st.height else None
    trace = {
        "traceEvents": out,
        "displayTimeUnit": "ms",
        "otherData": {
            "tool": f"forensics {__version__}", "store": str(run.path),
            "t0": t0.isoformat(), "clock": "aligned (host offsets removed)" if align else "as logged",
            "clock_offsets_ms": dict(zip(offsets["clock"].to_list(), offsets["offset_ms"].to_list())) if offsets.height else {},
            "steps": list(lo_hi) if lo_hi else None, "ranks": rank_set, "redacted": redact,
            "cut": cut,
        },
    }
    return trace, cut


# Profiler-trace GPU activities get processes of their own, after every host's: pid KERNEL_PID + rank
KERNEL_PID = 1_000_000


def _kernel_events(run: "Run", ranks: list[int] | None, steps: tuple[int | None, int | None] | None,
                   t0: dt.datetime, room: int) -> list[dict[str, Any]]:
    """The GPU activities of the run's profiler traces (kernels, memcpys, memsets) as complete
    events: a process per rank ("rank N GPU (profiler trace)"), a thread per CUDA stream, on the
    traces' own clock (epoch ns; not shifted by the log clock offsets). At most `room` of them,
    the longest first, so a cut keeps what dominates the GPU time."""
    k = run.kernels()
    if ranks is not None:
        k = k.filter(pl.col("rank").is_in(ranks))
    if steps is not None:
        lo, hi = steps
        k = k.filter(pl.col("step").is_null() | (pl.col("step") >= (lo if lo is not None else -(2**31)))
                     & (pl.col("step") <= (hi if hi is not None else 2**31 - 1)))
    t0_ns = int(t0.timestamp() * 1e9)
    df = (k.select("rank", "step", "stream", "category", "name", "collective", "start_ns", "dur_ns", "source_file", "line")
          .filter(pl.col("start_ns").is_not_null() & pl.col("dur_ns").is_not_null())
          .sort("dur_ns", descending=True).head(room).sort("rank", "stream", "start_ns").collect())
    if df.is_empty():
        return []
    out: list[dict[str, Any]] = []
    for rank in df["rank"].unique(maintain_order=True).to_list():
        pid = KERNEL_PID + (rank if rank is not None else -1)
        label = f"rank {rank} GPU (profiler trace)" if rank is not None else f"{NO_RANK} GPU (profiler trace)"
        out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "ts": 0, "args": {"name": label}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "ts": 0, "args": {"sort_index": pid}})
        for stream in df.filter(pl.col("rank").eq_missing(rank))["stream"].unique(maintain_order=True).to_list():
            out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": stream if stream is not None else 0, "ts": 0,
                        "args": {"name": f"stream {stream}"}})
    for r in df.iter_rows(named=True):
        args = {"category": r["category"], "where": f"{r['source_file']}:{r['line']}"}
        if r["step"] is not None:
            args["step"] = r["step"]
        if r["collective"]:
            args["collective"] = r["collective"]
        out.append({"ph": "X", "name": r["name"] or "?", "cat": f"gpu_{r['category'] or 'other'}",
                    "ts": (r["start_ns"] - t0_ns) / 1000, "dur": r["dur_ns"] / 1000,
                    "pid": KERNEL_PID + (r["rank"] if r["rank"] is not None else -1),
                    "tid": r["stream"] if r["stream"] is not None else 0, "args": args})
    return out


def export_perfetto(run: "Run", path: str | os.PathLike[str], *, steps: tuple[int | None, int | None] | None = None,
                    ranks: list[int] | None = None, max_events: int = DEFAULT_MAX_EVENTS, redact: bool = True,
                    align: bool = True) -> ExportSummary:
    """Write the trace to `path` (gzip when it ends in .gz) and say what is in it."""
    if max_events < 100:
        raise ForensicsError(f"--max-events {max_events} is too small", reason="a trace needs room for its tracks",
                             help="use at least 100 (default 500000)", code=BAD_ARGUMENT)
    trace, cut = trace_events(run, steps=steps, ranks=ranks, max_events=max_events, redact=redact, align=align)
    data = orjson.dumps(trace)
    p = Path(path)
    try:
        if p.name.endswith(".gz"):
            with gzip.open(p, "wb", compresslevel=6) as f:
                f.write(data)
        else:
            p.write_bytes(data)
    except OSError as e:
        raise ForensicsError(f"cannot write {p}", where=str(p), reason=e.strerror, code=BAD_ARGUMENT) from None
    evs = trace["traceEvents"]
    counts: dict[str, int] = {}
    for e in evs:
        counts[e["ph"]] = counts.get(e["ph"], 0) + 1
    od = trace["otherData"]
    hosts = [e["args"]["name"] for e in evs if e["ph"] == "M" and e["name"] == "process_name" and e["pid"] < KERNEL_PID]
    gpu = sum(1 for e in evs if e["ph"] == "X" and e["pid"] >= KERNEL_PID)
    return ExportSummary(path=str(p), events=len(evs), bytes=p.stat().st_size, ranks=od["ranks"], hosts=hosts, gpu_activities=gpu,
                         steps=tuple(od["steps"]) if od["steps"] else None, cut=cut, counts=counts)
