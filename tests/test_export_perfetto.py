"""The Perfetto / chrome://tracing export: Trace Event Format structure, phases, filters, the cut."""
from __future__ import annotations

import gzip
import json
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from synthetic_run import SECRET, ingest_scenario, make_store, sample_scenarios  # noqa: E402

from forensics.cli import app  # noqa: E402
from forensics.errors import ForensicsError  # noqa: E402
from forensics.export import export_perfetto, parse_ranks, parse_steps, trace_events  # noqa: E402
from forensics.store import open_store  # noqa: E402


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    return make_store(tmp_path_factory.mktemp("perfetto"))


def validate(trace: dict) -> list[dict]:
    """The structural rules a trace viewer relies on; returns the events."""
    evs = trace["traceEvents"]
    assert evs, "empty trace"
    names: dict[tuple, str] = {}
    for e in evs:
        for k in ("ph", "ts", "pid", "tid"):
            assert k in e, (k, e)
        assert isinstance(e["ts"], (int, float)) and isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "thread_name", "process_sort_index", "thread_sort_index")
            if e["name"] == "process_name":
                names[(e["pid"],)] = e["args"]["name"]
            if e["name"] == "thread_name":
                names[(e["pid"], e["tid"])] = e["args"]["name"]
    tracks: dict[tuple, list[dict]] = defaultdict(list)
    for e in evs:
        if e["ph"] == "M":
            continue
        assert (e["pid"],) in names, f"no process_name for pid {e['pid']}"
        if e["ph"] in ("X", "i"):
            assert (e["pid"], e["tid"]) in names, f"no thread_name for {e['pid']}/{e['tid']}"
        if e["ph"] == "X":
            assert e["dur"] >= 0
            tracks[(e["pid"], e["tid"])].append(e)
        if e["ph"] == "C":
            assert all(isinstance(v, (int, float)) for v in e["args"].values())
    for key, xs in tracks.items():
        ts = [e["ts"] for e in xs]
        assert ts == sorted(ts), f"X events out of order on {key}"
        # slices nest: each one lies inside the enclosing open slice or after it
        stack: list[int] = []
        for e in xs:
            while stack and stack[-1] <= e["ts"]:
                stack.pop()
            if stack:
                assert e["ts"] + e["dur"] <= stack[-1], f"slice overlaps its parent on {key}: {e}"
            stack.append(e["ts"] + e["dur"])
    return evs


def test_tracks_per_rank_grouped_by_host(store: Path) -> None:
    trace, cut = trace_events(open_store(store))
    assert cut is None
    evs = validate(trace)
    procs = {e["pid"]: e["args"]["name"] for e in evs if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in evs if e["ph"] == "M" and e["name"] == "thread_name"}
    by_host = defaultdict(list)
    for (pid, tid), name in threads.items():
        by_host[procs[pid]].append(tid)
    assert {h: sorted(t) for h, t in by_host.items() if h.startswith("node")} == {"node-a": [0, 1, 2, 3], "node-b": [4, 5, 6, 7]}
    assert threads[(next(p for p, n in procs.items() if n == "node-b"), 5)] == "rank 5"


def test_phases_show_the_straggler_waiting_least(store: Path) -> None:
    evs = trace_events(open_store(store))[0]["traceEvents"]
    names = {e["name"] for e in evs if e["ph"] == "X"}
    assert {"step 0", "data load", "compute", "communication", "waiting for peers"} <= names
    wait = defaultdict(float)
    compute = defaultdict(float)
    for e in evs:
        if e["ph"] == "X" and e["args"].get("step", 0) >= 30:
            if e["name"] == "waiting for peers":
                wait[e["tid"]] += e["dur"]
            if e["name"] == "compute":
                compute[e["tid"]] += e["dur"]
    assert min(wait.get(r, 0.0) for r in range(8)) == wait.get(5, 0.0)
    assert max(compute, key=compute.get) == 5
    # a step slice contains its phases; its duration is the logged step time
    step = next(e for e in evs if e["ph"] == "X" and e["name"] == "step 40" and e["tid"] == 0)
    assert abs(step["dur"] / 1000 - step["args"]["step_time_ms"]) < 1.0


def test_warn_error_instants_cite_their_line_and_are_redacted(store: Path) -> None:
    evs = trace_events(open_store(store))[0]["traceEvents"]
    inst = [e for e in evs if e["ph"] == "i"]
    assert {e["args"]["level"] for e in inst} == {"WARN", "ERROR"}
    err = next(e for e in inst if e["name"] == "ERROR DATA_LOAD_ERROR")
    path, line = err["args"]["where"].rsplit(":", 1)
    logged = json.loads(Path(path).read_text().splitlines()[int(line) - 1])
    assert logged["event"] == "DATA_LOAD_ERROR" and err["tid"] == logged["rank"] == 1
    assert SECRET not in json.dumps(evs) and "***" in err["args"]["message"]
    raw = trace_events(open_store(store), redact=False)[0]["traceEvents"]
    assert SECRET in json.dumps(raw)


def test_counters_for_gpu_and_loss(store: Path) -> None:
    evs = trace_events(open_store(store))[0]["traceEvents"]
    c = defaultdict(list)
    for e in evs:
        if e["ph"] == "C":
            c[e["name"]].append(e["args"]["value"])
    assert {f"rank {r} {m}" for r in range(8) for m in ("temp_c", "gpu_util", "sm_clock_mhz", "loss")} <= set(c)
    assert max(c["rank 5 temp_c"]) == 92.0 and max(c["rank 0 temp_c"]) < 70


def test_steps_and_ranks_filters(store: Path) -> None:
    trace, _ = trace_events(open_store(store), steps=(10, 19), ranks=[0, 3, 5])
    evs = validate(trace)
    steps = {e["args"]["step"] for e in evs if e["ph"] == "X"}
    assert steps == set(range(10, 20))
    assert {e["tid"] for e in evs if e["ph"] in ("X", "C")} == {0, 3, 5}
    assert trace["otherData"]["steps"] == [10, 19]


def test_big_runs_are_cut_by_steps_with_a_message(store: Path) -> None:
    full, _ = trace_events(open_store(store))
    n = len(full["traceEvents"])
    trace, cut = trace_events(open_store(store), max_events=n // 4)
    evs = validate(trace)
    assert len(evs) <= n // 4
    assert cut is not None and cut["step_stride"] >= 4
    steps_by_rank = defaultdict(set)
    for e in evs:
        if e["ph"] == "X":
            steps_by_rank[e["tid"]].add(e["args"]["step"])
    kept = set.union(*steps_by_rank.values())
    assert all(s == kept for s in steps_by_rank.values())        # the same steps on every rank
    assert len(kept) == cut["steps_kept"] < cut["steps_total"] == 60


def test_file_gz_or_plain(store: Path, tmp_path: Path) -> None:
    s = export_perfetto(open_store(store), tmp_path / "t.json.gz")
    assert s.cut is None and s.message is None
    validate(json.loads(gzip.decompress((tmp_path / "t.json.gz").read_bytes())))
    export_perfetto(open_store(store), tmp_path / "t.json")
    validate(json.loads((tmp_path / "t.json").read_text()))


def test_parse_arguments() -> None:
    assert parse_ranks("0,3,5-7") == [0, 3, 5, 6, 7]
    assert parse_steps("100:200") == (100, 200) and parse_steps("100:") == (100, None) and parse_steps("7") == (7, 7)
    for bad in ("x", "3-1", "1,,2"):
        with pytest.raises(ForensicsError):
            parse_ranks(bad)
    for bad in ("a:b", "200:100"):
        with pytest.raises(ForensicsError):
            parse_steps(bad)


def test_cli(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "trace.json.gz"
    r = CliRunner().invoke(app, ["export", "perfetto", str(store), "-o", str(out), "--steps", "5:9", "--ranks", "0-1"])
    assert r.exit_code == 0, r.output
    assert "wrote" in r.stderr and "2 ranks" in r.stderr and "note:" not in r.stderr
    validate(json.loads(gzip.decompress(out.read_bytes())))
    r = CliRunner().invoke(app, ["export", "perfetto", str(store), "-o", str(out), "--max-events", "500"])
    assert r.exit_code == 0 and "note: trace cut to fit --max-events 500" in r.stderr
    r = CliRunner().invoke(app, ["export", "perfetto", str(store), "-o", str(out), "--ranks", "x"])
    assert r.exit_code != 0 and isinstance(r.exception, ForensicsError)


@pytest.mark.parametrize("scenario", sample_scenarios(), ids=lambda d: d.name)
def test_every_sample_scenario_exports_a_valid_trace(scenario: Path, tmp_path: Path) -> None:
    trace, _ = trace_events(open_store(ingest_scenario(scenario, tmp_path / "s.forensics")))
    evs = validate(trace)
    assert any(e["ph"] in ("X", "C") for e in evs)


@pytest.mark.parametrize("scenario", sample_scenarios(), ids=lambda p: p.name)
def test_the_rank_that_went_silent_first_gets_a_marker_at_its_last_event(scenario: Path, tmp_path: Path) -> None:
    """A hang's silent rank (expected.toml: root cause `hang`, its ranks) is marked on its own
    track at its last logged line; runs whose ranks stopped together get no marker."""
    import tomllib

    import polars as pl

    expect = tomllib.loads((scenario / "expected.toml").read_text())["expect"]
    run = open_store(ingest_scenario(scenario, tmp_path / "st"))
    trace, _ = trace_events(run)
    evs = validate(trace)
    marks = [e for e in evs if e.get("name") == "went silent here"]
    if expect.get("root_cause") != "hang":
        assert marks == []
        return
    assert len(marks) == 1 and marks[0]["tid"] in expect["ranks"]
    m = marks[0]
    r = m["tid"]
    last_line = run.events().filter(pl.col("rank") == r).select(pl.col("line").max()).collect().item()
    assert m["args"]["where"].endswith(f"rank_{r}.jsonl:{last_line}") and m["args"]["rank"] == r
    assert m["args"]["silent before the run's last event (s)"] > 60     # the watchdog fired long after
    assert m["args"]["ERRORs of other ranks after it"] >= 1
    # on its own track, after its last step began
    steps = [e for e in evs if e["ph"] == "X" and e["tid"] == r and e["cat"] == "step"]
    assert steps and m["ts"] >= max(e["ts"] for e in steps)


def test_ranks_without_a_host_are_named_for_what_they_are(tmp_path: Path) -> None:
    scenario = next((p for p in sample_scenarios() if p.name == "hang"), None)
    if scenario is None:
        pytest.skip("needs sample_logs")
    trace, _ = trace_events(open_store(ingest_scenario(scenario, tmp_path / "st")))
    names = [e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"]
    assert "host not logged" in names and not any("?" in n for n in names)


def test_ranks_the_run_does_not_have_are_named(store: Path) -> None:
    with pytest.raises(ForensicsError) as e:
        trace_events(open_store(store), ranks=[3, 99])
    assert e.value.code == "F300" and "rank 99" in e.value.what and "the run has ranks 0-7" in e.value.reason
