"""forensics.timeline on small synthetic runs ingested from seed-schema JSONL, and on sample_logs.

`write_run` writes per-rank logs whose timing follows synchronous data parallelism (each rank
loads, computes, arrives at the all-reduce, waits for the last one; all leave together), with
host clocks that can be skewed, ranks that can be slow or stop early: the expected values
follow from the injected fault, they are not written by hand. test_query.py and
test_cli_postmortem.py reuse it.
"""
from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import forensics
from forensics import timeline as tl
from forensics.errors import ForensicsError
from forensics.store import Run, open_store

T0 = dt.datetime(2025, 6, 12, 14, 0, 0, tzinfo=dt.timezone.utc)
REPO = Path(__file__).resolve().parents[1]


def iso(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Truth:
    """What write_run injected, in true (not host-clock) time."""

    path: Path
    ends: dict[int, dt.datetime] = field(default_factory=dict)        # step -> all-reduce end
    arrivals: dict[tuple[int, int], dt.datetime] = field(default_factory=dict)  # (step, rank) -> arrival
    last_line: dict[int, int] = field(default_factory=dict)           # rank -> lines written


def write_run(
    d: Path,
    *,
    ranks: int = 4,
    steps: int = 6,
    per_host: int = 2,
    offsets_ms: dict[str, float] | None = None,
    slow_ms: dict[int, float] | None = None,
    last_step: dict[int, int] | None = None,
    skip_ranks: tuple[int, ...] = (),
    empty_ranks: tuple[int, ...] = (),
    extra: dict[int, list[dict[str, Any]]] | None = None,
) -> Truth:
    """Per-rank JSONL under d/<host>/rank_<r>.jsonl. `slow_ms`: extra compute per step;
    `last_step`: the rank dies after finishing that step (the others then log the start of the
    next step and hang in its all-reduce); `skip_ranks`: no file;
    `empty_ranks`: an empty file; `extra`: more records per rank (dicts with a `t` offset in s
    from T0 instead of a timestamp, appended in time order)."""
    offsets_ms, slow_ms, last_step, extra = offsets_ms or {}, slow_ms or {}, last_step or {}, extra or {}
    truth = Truth(path=d)
    lines: dict[int, list[tuple[dt.datetime, dict[str, Any]]]] = {r: [] for r in range(ranks)}
    host = {r: f"node{r // per_host}" for r in range(ranks)}

    def rec(r: int, t: dt.datetime, event: str, message: str, level: str = "INFO", **x: Any) -> None:
        shifted = t + dt.timedelta(milliseconds=offsets_ms.get(host[r], 0.0))
        lines[r].append((t, {"timestamp": iso(shifted), "rank": r, "host": host[r], "level": level, "event": event,
                             "message": message, "extra": x}))

    start = T0
    live = [r for r in range(ranks) if r not in skip_ranks and r not in empty_ranks]
    for s in range(steps):
        alive = [r for r in live if last_step.get(r, steps) >= s]
        arrive: dict[int, dt.datetime] = {}
        for r in alive:
            data = 20.0 + r
            rec(r, start + dt.timedelta(milliseconds=data), "DATA_LOAD_TIME", f"step={s}", data_load_ms=data, disk_read_mbps=1200.0)
            arrive[r] = start + dt.timedelta(milliseconds=data + 500.0 + 3 * r + slow_ms.get(r, 0.0))
            truth.arrivals[(s, r)] = arrive[r]
        if len(alive) < len(live):
            for r in arrive:   # a rank died: the all-reduce never completes, the others hang in it
                shifted = arrive[r] + dt.timedelta(milliseconds=offsets_ms.get(host[r], 0.0))
                rec(r, arrive[r], "GRAD_READY", f"step={s}", grad_ready_ts=shifted.timestamp())
            break
        last = max(arrive.values())
        end = last + dt.timedelta(milliseconds=50.0)
        truth.ends[s] = end
        for r, a in arrive.items():
            shifted = a + dt.timedelta(milliseconds=offsets_ms.get(host[r], 0.0))
            rec(r, a, "GRAD_READY", f"step={s}", grad_ready_ts=shifted.timestamp())
            comm = (end - a).total_seconds() * 1000
            wait = (last - a).total_seconds() * 1000
            rec(r, end, "ALLREDUCE", f"step={s}", comm_ms=round(comm, 3), wait_ms=round(wait, 3), collective="allreduce")
            step_ms = (end - start).total_seconds() * 1000 + 1
            rec(r, end + dt.timedelta(milliseconds=1), "TRAIN_STEP", f"step={s} loss={3.0 - 0.1 * s:.3f} lr=1e-4",
                step_time_ms=round(step_ms, 3), samples_per_s=1000.0, stage="stable")
        start = end + dt.timedelta(milliseconds=5)
    for r, items in extra.items():
        for x in items:
            x = dict(x)
            t = T0 + dt.timedelta(seconds=x.pop("t"))
            shifted = t + dt.timedelta(milliseconds=offsets_ms.get(host[r], 0.0))
            lines[r].append((t, {"timestamp": iso(shifted), "rank": r, "host": host[r], **x}))
    for r in range(ranks):
        if r in skip_ranks:
            continue
        p = d / host[r] / f"rank_{r}.jsonl"
        p.parent.mkdir(parents=True, exist_ok=True)
        rows = [obj for _, obj in sorted(lines[r], key=lambda x: x[0])]
        p.write_text("".join(json.dumps(o) + "\n" for o in rows))
        truth.last_line[r] = len(rows)
    return truth


def ingest(tmp_path: Path, name: str = "logs", **kw: Any) -> tuple[Run, Truth]:
    truth = write_run(tmp_path / name, **kw)
    forensics.ingest([str(tmp_path / name)], tmp_path / f"{name}.forensics")
    return open_store(tmp_path / f"{name}.forensics"), truth


def store_of(tmp_path: Path, records: dict[str, list[dict[str, Any]]]) -> Run:
    """A store from literal records per file name."""
    d = tmp_path / "raw"
    d.mkdir()
    for name, recs in records.items():
        (d / name).write_text("".join(json.dumps(r) + "\n" for r in recs))
    forensics.ingest([str(d)], tmp_path / "raw.forensics")
    return open_store(tmp_path / "raw.forensics")


# --- step table ----------------------------------------------------------------------------------

def test_step_table_phases_follow_the_logged_values(tmp_path: Path) -> None:
    run, truth = ingest(tmp_path, ranks=4, steps=5, slow_ms={1: 300.0})
    st = tl.step_table(run).collect()
    assert st.height == 4 * 5 and st["step"].is_sorted()
    row = st.filter((pl.col("rank") == 2) & (pl.col("step") == 3)).row(0, named=True)
    assert row["host"] == "node1" and row["data_load_ms"] == 22.0 and row["step_time_source"] == "logged"
    assert row["compute_ms"] == pytest.approx(row["step_time_ms"] - 22.0 - row["comm_ms"])
    # rank 1 computes 300 ms longer: everyone else waits for it, it waits for nobody
    waits = st.filter(pl.col("step") == 3).sort("rank")["wait_ms"].to_list()
    assert waits[1] == 0.0 and min(waits[0], waits[2], waits[3]) > 290
    slow = st.filter(pl.col("rank") == 1)["compute_ms"].median()
    fast = st.filter(pl.col("rank") == 0)["compute_ms"].median()
    assert slow - fast == pytest.approx(303.0, abs=2.0)
    assert st["complete"].all() and st.filter(pl.col("step") == 3)["comm_end"].n_unique() == 1


def test_step_table_sums_collectives_and_derives_missing_step_times(tmp_path: Path) -> None:
    def ev(t: float, event: str | None, **x: Any) -> dict[str, Any]:
        return {"timestamp": iso(T0 + dt.timedelta(seconds=t)), "rank": 0, "level": "INFO", "event": event, "extra": x}

    recs = [
        ev(0.0, "ALLREDUCE", step=1, comm_ms=30.0, wait_ms=5.0),
        ev(0.1, "ALLREDUCE", step=1, comm_ms=20.0, wait_ms=1.0),
        # a TRAIN_STEP that repeats the step's comm total must not be counted twice
        ev(0.2, "TRAIN_STEP", step=1, comm_ms=50.0, step_time_ms=900.0),
        ev(1.2, "TRAIN_STEP", step=2, comm_ms=40.0),           # no step time: derived 1000 ms
        ev(2.0, "DATA_LOAD_TIME", step=3, data_load_ms=10.0),  # unfinished step: no derived time
    ]
    st = tl.step_table(store_of(tmp_path, {"rank_0.jsonl": recs})).collect().sort("step")
    assert st["comm_ms"].to_list() == [50.0, 40.0, None]
    assert st["wait_ms"].to_list() == [6.0, None, None]
    assert st["step_time_ms"].to_list() == [900.0, pytest.approx(1000.0), None]
    assert st["step_time_source"].to_list() == ["logged", "derived", None]
    assert st["complete"].to_list() == [True, True, False]


def test_flat_metric_lines_without_events_get_derived_step_times(tmp_path: Path) -> None:
    recs = [{"timestamp": iso(T0 + dt.timedelta(seconds=2 * s)), "step": s, "loss": 2.0} for s in range(4)]
    st = tl.step_table(store_of(tmp_path, {"rank_0.jsonl": recs})).collect()
    assert st["step_time_ms"].to_list() == [None, 2000.0, 2000.0, 2000.0]
    assert st["complete"].all()


# --- arrivals and clocks ---------------------------------------------------------------------------

def test_arrivals_name_the_straggler_and_by_how_much(tmp_path: Path) -> None:
    run, truth = ingest(tmp_path, ranks=4, steps=6, slow_ms={2: 200.0})
    arr = tl.arrivals(tl.step_table(run)).collect()
    per_step = arr.unique("step").sort("step")
    assert per_step["last_rank"].to_list() == [2] * 6
    assert (per_step["arrival_source"] == "grad_ready").all()
    for s in range(6):
        a = {r: truth.arrivals[(s, r)] for r in range(4)}
        others = sorted((a[2] - a[r]).total_seconds() * 1000 for r in (0, 1, 3))
        row = arr.filter((pl.col("step") == s) & (pl.col("rank") == 2)).row(0, named=True)
        assert row["order"] == 4 and row["is_last"]
        assert row["spread_ms"] == pytest.approx(max(others), abs=0.01)
    assert arr.filter(pl.col("rank") == 2)["times_last"].unique().to_list() == [6]
    assert arr.filter(pl.col("rank") != 2)["times_last"].unique().to_list() == [0]


def test_arrivals_fall_back_to_wait_and_a_tie_has_no_last() -> None:
    steps = pl.DataFrame({
        "step": [1, 1, 1, 2, 2], "rank": [0, 1, 2, 0, 1], "host": ["a"] * 5,
        "grad_ready_ts": [None] * 5, "wait_ms": [100.0, 0.0, 60.0, 5.0, 5.0],
        "comm_end": [None] * 5, "comm_ms": [None] * 5,
    }, schema_overrides={"grad_ready_ts": pl.Float64, "comm_end": pl.Datetime("us", "UTC"), "comm_ms": pl.Float64})
    arr = tl.arrivals(steps).collect().sort("step", "rank")
    s1 = arr.filter(pl.col("step") == 1)
    assert s1["arrival_source"].unique().to_list() == ["wait_ms"]
    assert s1["arrival_ms"].to_list() == [0.0, 100.0, 40.0] and s1["last_rank"][0] == 1
    s2 = arr.filter(pl.col("step") == 2)
    assert not s2["is_last"].any() and s2["last_rank"].is_null().all()


def test_skewed_clocks_are_recovered_and_alignment_finds_the_real_straggler(tmp_path: Path) -> None:
    offsets = {"node0": 0.0, "node1": 250.0, "node2": -120.0, "node3": 3.0}
    run, truth = ingest(tmp_path, ranks=8, steps=8, offsets_ms=offsets, slow_ms={0: 40.0})
    est = tl.clock_offsets(run)
    got = dict(zip(est["clock"], est["offset_ms"]))
    ref = sorted(offsets.values())[1:3]   # offsets are relative to the median host
    center = (ref[0] + ref[1]) / 2
    for h, o in offsets.items():
        assert got[h] == pytest.approx(o - center, abs=1.0), (h, got)
    assert est["samples"].min() == 8
    # the same estimate from the step table, without another scan
    st = tl.step_table(run).collect()
    assert dict(zip(*tl.step_offsets(st).select("clock", "offset_ms"))) == pytest.approx(got, abs=0.01)
    # unaligned, node1's ranks (clock 250 ms ahead) look like they arrive last; aligned, rank 0 does
    raw = tl.arrivals(st).collect().unique("step")["last_rank"].to_list()
    assert set(raw) <= {2, 3}
    aligned = tl.arrivals(tl.align_steps(st, est)).collect().unique("step")["last_rank"].to_list()
    assert aligned == [0] * 8
    ev = tl.with_aligned_time(run, est).filter(pl.col("host") == "node1").select("timestamp", "ts_aligned", "clock_offset_ms").collect()
    assert (ev["timestamp"] - ev["ts_aligned"]).dt.total_microseconds().to_list() == [round(got["node1"] * 1000)] * ev.height
    # and the logged timestamps are untouched
    assert run.events().filter(pl.col("host") == "node1").select("timestamp").collect().equals(ev.select("timestamp"))


def test_a_host_alone_gets_no_clock_estimate(tmp_path: Path) -> None:
    run, _ = ingest(tmp_path, ranks=2, per_host=2)
    assert tl.clock_offsets(run).height == 0
    assert tl.with_aligned_time(run, tl.clock_offsets(run)).select(pl.col("clock_offset_ms").max()).collect().item() == 0.0


# --- progress, stop, snapshot ------------------------------------------------------------------------

def test_rank_progress_names_the_rank_that_stopped_early_and_the_silent_ones(tmp_path: Path) -> None:
    run, truth = ingest(tmp_path, ranks=5, steps=6, last_step={3: 3}, empty_ranks=(4,))
    p = tl.rank_progress(run)
    assert p["rank"].to_list() == [0, 1, 2, 3, 4]
    r3, r4 = p.row(3, named=True), p.row(4, named=True)
    # "rank 3 is one step behind": it finished step 3, the others started step 4 and hang
    assert r3["last_step"] == 3 and r3["lag_steps"] == 1 and r3["silent_order"] == 1 and r3["silent_s"] > 0.4
    assert r4["events"] == 0 and r4["last_ts"] is None     # an empty file: the rank is known, never logged
    assert p.filter(pl.col("rank") < 3)["lag_steps"].to_list() == [0, 0, 0]


def test_a_gap_in_rank_numbers_is_a_rank_without_events(tmp_path: Path) -> None:
    run, _ = ingest(tmp_path, ranks=4, steps=3, skip_ranks=(2,))
    p = tl.rank_progress(run)
    assert p["rank"].to_list() == [0, 1, 2, 3] and p.filter(pl.col("rank") == 2)["events"].item() == 0
    # from a LazyFrame (no manifest) the gap is found too
    assert tl.rank_progress(run.events())["rank"].to_list() == [0, 1, 2, 3]


def test_stop_time_without_error_is_the_last_event(tmp_path: Path) -> None:
    run, truth = ingest(tmp_path, ranks=2, steps=3, per_host=1)
    t, how = tl.stop_time(run)
    assert t == max(truth.ends.values()) + dt.timedelta(milliseconds=1) and "no ERROR" in how
    given = T0 + dt.timedelta(seconds=1)
    assert tl.stop_time(run, at=given) == (given, "given (--at)")


@pytest.fixture(params=[8, 0], ids=["one-by-one", "bulk"])
def error_check(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """stop_time checks the first ERRORs one at a time and the rest in bulk: test both paths."""
    monkeypatch.setattr(tl.stoptime, "FIRST_ERRORS_CHECKED", request.param)


def test_stop_time_skips_errors_the_rank_survived(tmp_path: Path, error_check: None) -> None:
    survived = {"t": 0.03, "level": "ERROR", "event": "DATA_LOAD_ERROR", "message": "retrying shard 7", "extra": {"step": 0}}
    fatal = {"t": 3.0, "level": "ERROR", "event": "CUDA_OOM", "message": "CUDA out of memory", "extra": {}}
    run, truth = ingest(tmp_path, ranks=3, steps=4, last_step={1: 3}, extra={0: [survived], 1: [fatal]})
    t, how = tl.stop_time(run)
    assert t == T0 + dt.timedelta(seconds=3) and "CUDA_OOM on rank 1" in how and "rank_1.jsonl" in how
    assert "1 earlier ERROR(s) were followed by progress" in how


def test_an_error_without_rank_is_fatal_unless_ranks_go_on(tmp_path: Path, error_check: None) -> None:
    base = [{"timestamp": iso(T0 + dt.timedelta(seconds=s)), "rank": 0, "level": "INFO", "event": "TRAIN_STEP",
             "message": f"step={s}"} for s in range(5)]
    early = {"timestamp": iso(T0 + dt.timedelta(seconds=0.5)), "level": "ERROR", "event": "LAUNCHER", "message": "x"}
    late = {"timestamp": iso(T0 + dt.timedelta(seconds=3.5)), "level": "ERROR", "event": "LAUNCHER", "message": "y"}
    run = store_of(tmp_path, {"rank_0.jsonl": base, "launcher.jsonl": [early, late]})
    t, how = tl.stop_time(run)
    assert t == T0 + dt.timedelta(seconds=3.5) and "no rank" in how


def test_last_window_names_quiet_and_missing_ranks(tmp_path: Path) -> None:
    run, truth = ingest(tmp_path, ranks=5, steps=30, last_step={3: 10}, empty_ranks=(4,))
    snap = tl.last_window(run, window_s=0.3)
    stop, how = tl.stop_time(run)
    assert "no ERROR" in how and snap.stop == stop and snap.start == stop - dt.timedelta(seconds=0.3)
    assert snap.quiet == [3, 4] and snap.missing == [4]
    r = {row["rank"]: row for row in snap.ranks.iter_rows(named=True)}
    assert r[3]["in_window"] == 0 and r[3]["step"] == 10 and r[3]["last_event"] == "TRAIN_STEP"
    assert r[3]["silent_s"] > 0.3 and r[3]["last_where"].endswith(f"rank_3.jsonl:{truth.last_line[3]}")
    assert r[0]["in_window"] == 1 and r[0]["last_event"] == "GRAD_READY" and r[0]["step"] == 11
    assert r[4]["last_ts"] is None and r[4]["in_window"] == 0
    assert tl.rank_progress(run).filter(pl.col("rank") == 3).row(0, named=True)["lag_steps"] == 1


def test_last_window_is_bounded_per_rank(tmp_path: Path) -> None:
    run, truth = ingest(tmp_path, ranks=3, steps=30)
    snap = tl.last_window(run, window_s=3.0, limit=3)
    r = {row["rank"]: row for row in snap.ranks.iter_rows(named=True)}
    assert r[0]["in_window"] > 3 and r[0]["shown"] == 3 and r[0]["step"] == 29 and r[0]["silent_s"] < 0.01
    # the newest `limit` events per rank, in time order
    assert snap.events.group_by("rank").len()["len"].to_list() == [3, 3, 3]
    assert snap.events["timestamp"].is_sorted() and snap.events["timestamp"].min() >= snap.start
    newest = run.events().filter(pl.col("rank") == 0).sort("timestamp").tail(3).select("line").collect()
    assert snap.events.filter(pl.col("rank") == 0)["line"].to_list() == newest["line"].to_list()
    d = snap.to_dict()
    assert d["quiet_ranks"] == [] and d["stop"].endswith("Z") and d["events"][0]["timestamp"].endswith("Z")
    json.dumps(d)


def test_last_window_at_a_time_for_chosen_ranks(tmp_path: Path) -> None:
    run, truth = ingest(tmp_path, ranks=4, steps=10)
    at = tl.parse_time_spec("step:5", run)
    snap = tl.last_window(run, window_s=0.3, at=at, ranks=[1, 2])
    assert snap.how == "given (--at)" and snap.ranks["rank"].to_list() == [1, 2]
    assert set(snap.events["rank"].unique()) <= {1, 2}
    assert (snap.ranks["after_stop"] > 0).all() and (snap.events["timestamp"] <= at).all()


# --- time specs, monotonicity, the ranks table --------------------------------------------------------

def test_parse_time_spec_forms(tmp_path: Path) -> None:
    run, truth = ingest(tmp_path, ranks=2, steps=4, per_host=1)
    end = tl.bounds(run)[1]
    assert tl.parse_time_spec("-30s", run) == end - dt.timedelta(seconds=30)
    assert tl.parse_time_spec("-5m", run) == end - dt.timedelta(minutes=5)
    assert tl.parse_time_spec("-250ms", run) == end - dt.timedelta(milliseconds=250)
    assert tl.parse_time_spec("2025-06-12T14:00:01Z", run) == T0 + dt.timedelta(seconds=1)
    assert tl.parse_time_spec("2025-06-12 14:00:01", run) == T0 + dt.timedelta(seconds=1)
    assert tl.parse_time_spec("2025-06-12T16:00:01+02:00", run) == T0 + dt.timedelta(seconds=1)
    first = run.events().filter(pl.col("step") == 2).select(pl.col("timestamp").min()).collect().item()
    assert tl.parse_time_spec("step:2", run) == first
    for bad in ("yesterday", "step:x", "step:999", "-ten"):
        with pytest.raises(ForensicsError):
            tl.parse_time_spec(bad, run)
    assert tl.parse_duration("10s") == 10 and tl.parse_duration("500ms") == 0.5 and tl.parse_duration("2m") == 120
    assert tl.parse_step_range("10:20") == (10, 20) and tl.parse_step_range(":") == (None, None)
    assert tl.parse_step_range("7") == (7, 7)


def test_monotonicity_reports_time_going_backwards(tmp_path: Path) -> None:
    ts = [0.0, 1.0, 2.0, 1.5, 3.0, 2.9, 4.0]
    recs = [{"timestamp": iso(T0 + dt.timedelta(seconds=t)), "rank": 0, "level": "INFO", "event": "X", "message": ""} for t in ts]
    ok = [{"timestamp": iso(T0 + dt.timedelta(seconds=t)), "rank": 1, "level": "INFO", "event": "X", "message": ""} for t in range(5)]
    run = store_of(tmp_path, {"rank_0.jsonl": recs, "rank_1.jsonl": ok})
    m = tl.monotonicity(run)
    assert m.height == 1
    row = m.row(0, named=True)
    assert row["source_file"].endswith("rank_0.jsonl") and row["rank"] == 0
    assert (row["backwards"], row["first_line"], row["max_back_ms"], row["lines"]) == (2, 4, 500.0, 7)


def test_monotonicity_clean_run(tmp_path: Path) -> None:
    run, _ = ingest(tmp_path, ranks=3, steps=3)
    assert tl.monotonicity(run).height == 0


def test_rank_summary(tmp_path: Path) -> None:
    warn = {"t": 0.2, "level": "WARN", "event": "GRAD_NORM", "message": "grad_norm=45.6 exceeds threshold=10.0", "extra": {}}
    gpu = [{"t": 0.1 * i, "level": "INFO", "event": "GPU_STATS", "message": "", "extra": {"gpu_util": u, "temp_c": c}}
           for i, (u, c) in enumerate([(50.0, 80.0), (60.0, 92.0), (55.0, 85.0)])]
    run, _ = ingest(tmp_path, ranks=4, steps=6, skip_ranks=(2,), offsets_ms={"node1": 100.0},
                    slow_ms={3: 150.0}, extra={0: [warn], 1: gpu})
    s = tl.rank_summary(run)
    assert s.columns == tl.RANK_SUMMARY_COLUMNS and s["rank"].to_list() == [0, 1, 2, 3]
    r = {row["rank"]: row for row in s.iter_rows(named=True)}
    assert r[2]["events"] == 0 and r[2]["host"] is None
    assert r[0]["warn"] == 1 and r[1]["gpu_util"] == 55.0 and r[1]["temp_max"] == 92.0
    assert r[3]["data_ms"] == 23.0 and r[3]["wait_ms"] == 0.0 and r[0]["wait_ms"] > 140
    assert r[0]["comm_share"] == pytest.approx(r[0]["comm_ms"] / r[0]["step_ms"], rel=0.05)
    assert r[3]["clock_offset_ms"] - r[0]["clock_offset_ms"] == pytest.approx(100.0, abs=1.0)
    # host node1's clock runs 100 ms ahead, so its ranks' last events look later than they are;
    # on the aligned clock rank 0/1 (node0) and 3 (node1) finish within a few ms of each other
    assert abs(r[3]["silent_s"] - r[0]["silent_s"]) < 0.05


def test_rank_summary_counts_every_event_of_a_rank(tmp_path: Path) -> None:
    """The per-rank counts come from the step table's groups: events without a step (telemetry,
    an ERROR) or without a rank must count exactly as they do in a plain per-rank aggregation."""
    def ev(t: float, rank: int | None, event: str, level: str = "INFO", **x: Any) -> dict[str, Any]:
        r = {"timestamp": iso(T0 + dt.timedelta(seconds=t)), "level": level, "event": event, "extra": x}
        return r if rank is None else {**r, "rank": rank, "host": f"node{rank}"}

    run = store_of(tmp_path, {
        "rank_0.jsonl": [ev(0.0, 0, "GPU_STATS", gpu_util=40.0, temp_c=91.0),
                         *(ev(1.0 + s, 0, "TRAIN_STEP", step=s, step_time_ms=1000.0) for s in range(3)),
                         ev(2.5, 0, "GRAD_NORM", "WARN", step=1, grad_norm=45.0),
                         ev(3.5, 0, "GRAD_NORM", "WARN", step=2, grad_norm=45.0),
                         ev(4.0, 0, "CUDA_OOM", "ERROR")],
        "rank_1.jsonl": [ev(0.5, 1, "GPU_STATS", gpu_util=u, temp_c=60.0) for u in (90.0, 80.0, 70.0)],
        "launcher.jsonl": [ev(5.0, None, "ELASTIC_RESTART", "ERROR")],
    })
    got = tl.rank_summary(run)
    ref = (run.events().group_by("rank").agg(
        pl.col("host").first(ignore_nulls=True), pl.col("timestamp").min().alias("first_ts"),
        pl.col("timestamp").max().alias("last_ts"), pl.col("step").max().alias("last_step"),
        pl.len().cast(pl.Int64).alias("events"), pl.col("gpu_util").median(),
        pl.col("temp_c").max().alias("temp_max"),
        (pl.col("level") == "WARN").sum().cast(pl.Int64).alias("warn"),
        (pl.col("level") == "ERROR").sum().cast(pl.Int64).alias("error"),
    ).collect())
    cols = ["rank", "host", "first_ts", "last_ts", "last_step", "events", "gpu_util", "temp_max", "warn", "error"]
    assert got.select(cols).sort("rank", nulls_last=True).equals(ref.select(cols).sort("rank", nulls_last=True))
    r0 = got.filter(pl.col("rank") == 0).row(0, named=True)
    assert (r0["events"], r0["warn"], r0["error"], r0["temp_max"], r0["last_step"]) == (7, 2, 1, 91.0, 2)
    assert got.filter(pl.col("rank").is_null())["error"].to_list() == [1]


# --- slices and evidence ---------------------------------------------------------------------------

def test_rank_slices_cover_every_rank_once_and_change_nothing(tmp_path: Path, monkeypatch) -> None:
    gpu = [{"t": 0.05, "level": "INFO", "event": "GPU_STATS", "message": "", "extra": {"gpu_util": 55.0, "temp_c": 88.0}}]
    run, _ = ingest(tmp_path, ranks=6, steps=5, offsets_ms={"node1": 40.0}, slow_ms={4: 100.0}, last_step={5: 3},
                    extra={2: gpu})
    slices = tl.rank_slices(run, max_events=25)
    assert len(slices) >= 3
    assert tl.rank_slices(run, max_events=10**9) == []
    # every ranked event in exactly one slice, each slice reading only its ranks' parts
    key = ["source_file", "line"]
    got = pl.concat([x.select(*key, "rank") for x in slices]).collect().sort(key)
    assert got.equals(run.events().filter(pl.col("rank").is_not_null()).select(*key, "rank").collect().sort(key))
    def parts_read(lf: pl.LazyFrame) -> int:   # explain: "SCAN [a.parquet, b.parquet]" or "[a.parquet, ... 4 other sources]"
        scan = next(line for line in lf.explain().splitlines() if "SCAN [" in line)
        return scan.count(".parquet") + sum(int(n) for n in re.findall(r"(\d+) other source", scan))

    # small files share parts (tests/test_store_layout.py checks slices over parts of rank ranges)
    assert parts_read(run.events()) == len(run.event_parts())
    assert max(map(parts_read, slices)) <= len(run.event_parts())
    whole = tl.step_table(run, evidence=True, slices=[]).collect()
    assert tl.step_table(run, evidence=True, slices=slices).collect().equals(whole)
    # the Run's default slicing (and rank_summary's) follows SLICE_EVENTS
    summary = tl.rank_summary(run)
    monkeypatch.setattr(tl.steptable, "SLICE_EVENTS", 25)
    assert len(tl.rank_slices(run)) == len(slices)
    assert tl.step_table(run, evidence=True).collect().equals(whole)
    assert tl.rank_summary(run).equals(summary)


def test_a_slice_without_summary_events_is_judged_by_the_whole_run(tmp_path: Path) -> None:
    """Whether steps without TRAIN_STEP are unfinished depends on the whole run: rank 1 logs only
    data loads, rank 0 logs TRAIN_STEP, so rank 1's steps get no derived step time, also when
    rank 1 is aggregated in a slice of its own."""
    def ev(t: float, rank: int, event: str, **x: Any) -> dict[str, Any]:
        return {"timestamp": iso(T0 + dt.timedelta(seconds=t)), "rank": rank, "level": "INFO", "event": event, "extra": x}

    run = store_of(tmp_path, {
        "rank_0.jsonl": [ev(s, 0, "TRAIN_STEP", step=s, step_time_ms=900.0) for s in range(4)],
        "rank_1.jsonl": [ev(s, 1, "DATA_LOAD_TIME", step=s, data_load_ms=20.0) for s in range(4)],
    })
    whole = tl.step_table(run, slices=[]).collect()
    halves = [run.events().filter(pl.col("rank") <= 0), run.events().filter(pl.col("rank") > 0)]
    assert tl.step_table(run, slices=halves).collect().equals(whole)
    assert whole.filter(pl.col("rank") == 1)["step_time_ms"].is_null().all()
    assert whole.filter(pl.col("rank") == 0)["step_time_ms"].to_list() == [900.0] * 4


def test_step_table_evidence_cites_the_line_of_each_phase(tmp_path: Path) -> None:
    run, _ = ingest(tmp_path, ranks=2, steps=3)
    st = tl.step_table(run, evidence=True).collect()
    assert st.columns[-len(tl.EVIDENCE_COLUMNS):] == list(tl.EVIDENCE_COLUMNS)
    assert st.schema["file"] == pl.Categorical
    row = st.filter((pl.col("rank") == 1) & (pl.col("step") == 2)).row(0, named=True)
    # rank 1's file holds, per step: DATA_LOAD_TIME, GRAD_READY, ALLREDUCE, TRAIN_STEP
    assert row["file"].endswith("node0/rank_1.jsonl")
    assert (row["data_line"], row["ready_line"], row["comm_line"], row["train_line"]) == (9, 10, 11, 12)
    assert row["disk_read_mbps"] == 1200.0
    # the same rows and values as without evidence
    assert st.drop(tl.EVIDENCE_COLUMNS).equals(tl.step_table(run).collect())


def test_collect_sorted_is_a_sort() -> None:
    df = pl.DataFrame({"step": [3, 1, 2, 1, 2], "rank": [0, 1, 0, 0, 1], "x": [0.5, None, 2.5, 3.5, 4.5],
                       "s": ["a", "b", None, "d", "e"]})
    lf = pl.concat([df.head(2).lazy(), df.tail(3).lazy()])   # chunked, like the slices
    assert tl.collect_sorted(lf, ["step", "rank"]).equals(df.sort("step", "rank"))


def test_collect_sorted_keeps_a_table_already_in_order() -> None:
    """A table already in key order (a stored summary) comes back as it is; one that is almost
    in order (a later key equal or below the one before it, a null key) is sorted."""
    df = pl.DataFrame({"rank": [0, 0, 1, 1, 2], "step": [1, 2, 0, 5, 1], "x": [1.0, 2.0, 3.0, 4.0, 5.0]})
    assert tl.collect_sorted(df.lazy(), ["rank", "step"]).equals(df)
    for bad in ({"rank": [0, 0, 1, 1, 2], "step": [1, 2, 5, 0, 1]},        # step goes back within rank 1
                {"rank": [0, 1, 0, 1, 2], "step": [1, 0, 2, 5, 1]},        # rank goes back
                {"rank": [0, 0, 1, 1, 2], "step": [1, 1, 0, 5, 1]}):       # a duplicate key
        d = df.with_columns(pl.Series("rank", bad["rank"]), pl.Series("step", bad["step"]))
        got = tl.collect_sorted(d.lazy(), ["rank", "step"])
        assert got.equals(d.sort("rank", "step", maintain_order=True))
    d = df.with_columns(pl.Series("step", [1, None, 0, 5, 1], dtype=pl.Int64))
    assert tl.collect_sorted(d.lazy(), ["rank", "step"]).equals(d.sort("rank", "step", maintain_order=True))


# --- sample_logs ------------------------------------------------------------------------------------

def test_sample_hang(tmp_path: Path) -> None:
    """sample_logs/hang: rank 2 goes silent in step 40 and ranks 0, 3, 1 hit the watchdog timeout
    in that order (expected.toml); rank 2's records carry no rank field (it comes from the path)."""
    run = forensics.open_run([str(REPO / "sample_logs" / "hang")])
    t, how = tl.stop_time(run)
    assert "NCCL_TIMEOUT on rank 0" in how
    p = tl.rank_progress(run)
    assert p.sort("silent_order")["rank"].to_list()[0] == 2
    snap = tl.last_window(run)
    assert 2 in snap.quiet and snap.ranks.filter(pl.col("rank") == 2)["silent_s"].item() > 1700


def test_sample_oom_cascade(tmp_path: Path, error_check: None) -> None:
    """sample_logs/oom_cascade: rank 3 dies of CUDA OOM in step 30; the NCCL errors come after."""
    run = forensics.open_run([str(REPO / "sample_logs" / "oom_cascade")])
    t, how = tl.stop_time(run)
    assert "CUDA_OOM on rank 3" in how
    snap = tl.last_window(run)
    assert snap.ranks.filter(pl.col("rank") == 3)["last_event"].item() == "CUDA_OOM"
    assert (snap.ranks.filter(pl.col("rank") != 3)["after_stop"] > 0).all()


# --- events without a time, and ranks the run does not have ---------------------------------------

from conftest import SHARED  # noqa: E402

FR = SHARED / "realdata" / "flight_recorder"


@pytest.mark.skipif(not FR.is_dir(), reason="needs ../shared/realdata")
def test_last_window_on_flight_recorder_dumps_places_records_without_a_time(tmp_path: Path) -> None:
    """A dump's pg_status records carry no time; the notes beside the dumps have ERROR lines
    without a time. Neither may break the snapshot (it raised TypeError) or become the stop."""
    forensics.ingest([str(FR / "gpu_error_1st")], tmp_path / "g")
    run = open_store(tmp_path / "g")
    snap = tl.last_window(run, limit=3)
    assert snap.stop == run.events().select(pl.col("timestamp").max()).collect().item()
    assert "2 ERROR(s) without a time not placed" in snap.how and "fault_injection.log:3" in snap.how
    rows = {r["rank"]: r for r in snap.ranks.iter_rows(named=True)}
    assert sorted(rows) == list(range(16)) and not snap.missing
    # each dump's last record (a pg_status, placed after the entries it follows) is its rank's last event
    n_events = dict(run.events().group_by("rank").len().collect().iter_rows())
    assert rows[12]["last_where"].endswith(f"_dump_12:{n_events[12]}") and rows[12]["last_event"] == "PG_STATUS"
    assert rows[12]["silent_s"] is not None


@pytest.mark.skipif(not FR.is_dir(), reason="needs ../shared/realdata")
def test_a_rank_whose_events_all_lack_a_time_still_logged(tmp_path: Path) -> None:
    """lock_gil_1st: rank 9's dump holds 13 pg_status records and no entry; it said "never logged"."""
    forensics.ingest([str(FR / "lock_gil_1st")], tmp_path / "l")
    run = open_store(tmp_path / "l")
    snap = tl.last_window(run, ranks=[9])
    row = snap.ranks.row(0, named=True)
    assert row["rank"] == 9 and row["last_where"].endswith("_dump_9:13") and row["last_event"] == "PG_STATUS"
    assert snap.missing == [] and snap.untimed == [9] and row["silent_s"] is None
    assert tl.last_window(run).untimed == [9, 14]


def test_untimed_lines_follow_the_timed_line_before_them(tmp_path: Path) -> None:
    t = lambda s: iso(T0 + dt.timedelta(seconds=s))  # noqa: E731
    run = store_of(tmp_path, {
        "rank_0.jsonl": [{"timestamp": t(s), "rank": 0, "level": "INFO", "event": "TRAIN_STEP", "message": f"step={s}",
                          "extra": {"step": s}} for s in range(5)],
        "rank_1.jsonl": [{"timestamp": t(0), "rank": 1, "level": "INFO", "event": "TRAIN_STEP", "message": "step=0",
                          "extra": {"step": 0}},
                         {"rank": 1, "level": "ERROR", "event": "CUDA_ERROR", "message": "no time on this line", "extra": {}}],
        "rank_2.jsonl": [{"rank": 2, "level": "INFO", "event": "HELLO", "message": f"line {i}", "extra": {}} for i in range(3)],
    })
    snap = tl.last_window(run, window_s=2.0)
    rows = {r["rank"]: r for r in snap.ranks.iter_rows(named=True)}
    assert snap.stop == T0 + dt.timedelta(seconds=4) and "without a time not placed" in snap.how
    assert rows[1]["last_event"] == "CUDA_ERROR" and rows[1]["silent_s"] == pytest.approx(4.0)   # placed at step 0
    assert rows[2]["last_where"].endswith("rank_2.jsonl:3") and rows[2]["silent_s"] is None
    assert snap.quiet == [1, 2] and snap.untimed == [2] and snap.missing == []


def test_ranks_the_run_does_not_have_are_named(tmp_path: Path) -> None:
    from forensics.query import filter_events

    run, _ = ingest(tmp_path, ranks=8, steps=2, skip_ranks=(5,))
    assert tl.check_ranks(run, None) is None and tl.check_ranks(run, [3, 1, 3]) == [1, 3]
    assert tl.check_ranks(run, [5]) == [5]          # within 0..world_size-1: a rank that never logged
    for call in (lambda: tl.check_ranks(run, [12]), lambda: filter_events(run, ranks=[12]),
                 lambda: tl.last_window(run, ranks=[2, 99])):
        with pytest.raises(ForensicsError) as e:
            call()
        assert e.value.code == "F300" and "the run has ranks 0-7" in e.value.reason
    with pytest.raises(ForensicsError) as e:
        tl.check_ranks(run, [-1])
    assert "cannot exist" in e.value.what


def test_first_silent_names_the_rank_that_stopped_well_before_the_others(tmp_path: Path) -> None:
    err = {"t": 60.0, "level": "ERROR", "event": "NCCL_TIMEOUT", "message": "rank=1 waiting on rank=3", "extra": {}}
    run, truth = ingest(tmp_path, ranks=4, steps=10, last_step={3: 5}, extra={1: [err]})
    s = tl.first_silent(run)
    assert s is not None and s["rank"] == 3 and s["step"] == 5
    assert s["source_file"].endswith("rank_3.jsonl") and s["line"] == truth.last_line[3]
    assert s["silent_s"] > 50 and s["errors_after"] == 1 and s["lag_steps"] == 1
    healthy, _ = ingest(tmp_path, name="ok", ranks=4, steps=10)
    assert tl.first_silent(healthy) is None       # ranks that end together: nobody went silent
    save = {"t": 60.0, "level": "INFO", "event": "CHECKPOINT", "message": "saved", "extra": {}}
    slow_save, _ = ingest(tmp_path, name="save", ranks=4, steps=10, extra={0: [save]})
    assert tl.first_silent(slow_save) is None     # rank 0 saving long after: no ERROR, nobody behind


def test_a_run_without_any_time_is_a_clear_error(tmp_path: Path) -> None:
    run = store_of(tmp_path, {"rank_0.jsonl": [{"rank": 0, "level": "ERROR", "event": "X", "message": "m", "extra": {}}]})
    with pytest.raises(ForensicsError) as e:
        tl.last_window(run)
    assert e.value.what == "no event of the run carries a time"


def test_offsets_of_named_hosts_leave_rows_without_a_host_at_the_default() -> None:
    """A row without a host is on its rank's own clock ("rank:N"): with offsets for named hosts
    only it gets the default, whichever way the offset is looked up."""
    from forensics.timeline.clocks import _offset_of

    df = pl.DataFrame({"host": ["a", None, "b", "c", None], "rank": [0, 1, 2, 3, None]})
    hosts = pl.DataFrame({"clock": ["a", "b"], "offset_ms": [5.0, -3.0]})
    assert df.select(_offset_of(hosts, 0.0)).to_series().to_list() == [5.0, 0.0, -3.0, 0.0, 0.0]
    assert df.select(_offset_of(hosts, None)).to_series().to_list() == [5.0, None, -3.0, None, None]
    with_rank = pl.DataFrame({"clock": ["a", "rank:1"], "offset_ms": [5.0, 7.0]})
    assert df.select(_offset_of(with_rank, 0.0)).to_series().to_list() == [5.0, 7.0, 0.0, 0.0, 0.0]
