"""Kineto traces read streaming (forensics/traces/reader.py) and `trace-stats` (traces/stats.py).

The DLRM traces of ../shared/realdata are compared with HTA's own numbers, computed once by
bench/hta_expected.py into tests/data/hta_dlrm_expected.json (HTA is not needed here). The
small traces below are written in Kineto's layout (libkineto output_json.cpp: metadata, then
traceEvents, then baseTimeNanoseconds) with numbers worked out by hand.
"""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from forensics.cli import app
from forensics.traces.reader import category, read_trace
from forensics.traces.stats import trace_stats

from conftest import SHARED

DLRM = SHARED / "realdata" / "kineto" / "dlrm_8rank"
EXPECTED = Path(__file__).parent / "data" / "hta_dlrm_expected.json"


def _kernel(name, ts, dur, corr, stream=7, cat="kernel"):
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": stream, "correlation": corr, "External id": corr}}


def _launch(ts, corr, name="cudaLaunchKernel"):
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 9, "tid": 9, "ts": ts, "dur": 2,
            "args": {"correlation": corr, "External id": corr}}


def _step(n, ts, dur):
    return {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 9, "tid": 9, "ts": ts, "dur": dur}


def _write(path: Path, events, rank=None, base_ns=None, gz=False):
    """Kineto's layout: distributedInfo before traceEvents, baseTimeNanoseconds after it."""
    head = {"schemaVersion": 1}
    if rank is not None:
        head["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 2}
    text = json.dumps(head)[:-1] + ', "traceEvents": [\n' + ",\n".join(json.dumps(e) for e in events) + "\n]"
    text += ', "traceName": "t.json"'
    if base_ns is not None:
        text += f', "baseTimeNanoseconds": {base_ns}'
    text += "}"
    data = text.encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def test_category_follows_hta_names():
    assert category("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)") == "communication"
    assert category("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*)") == "communication"
    assert category("Memcpy HtoD (Pinned -> Device)") == "memcpy"
    assert category("Memset (Device)") == "memset"
    assert category("volta_sgemm_128x32_nt") == "compute"
    assert category("Event Sync") == "other"
    assert category("some name", "gpu_memset") == "memset"


def test_reader_relative_clock_graph_launch_steps_gzip(tmp_path):
    base = 1_700_000_000_000_000_000
    ev = [
        _step(1, 0, 100), _step(2, 100, 100),
        _launch(10, 1), _kernel("gemm_a", 20, 30, 1),
        # one cudaGraphLaunch runs three kernels sharing its correlation: all three are kept
        _launch(110, 2, "cudaGraphLaunch"),
        _kernel("graph_k1", 120, 5, 2), _kernel("graph_k2", 125, 5, 2), _kernel("graph_k3", 130, 5, 2),
        _launch(112, 3, "cudaMemsetAsync"), _kernel("Memset (Device)", 140, 1, 3, cat="gpu_memset"),
        # a kernel whose launch is not in the trace has no step
        _kernel("orphan", 300, 4, 99),
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 9, "tid": 9, "ts": 5, "dur": 40, "args": {}},
        {"ph": "i", "name": "Record Window End", "ts": 400},
    ]
    t = read_trace(_write(tmp_path / "w.pt.trace.json.gz", ev, rank=1, base_ns=base, gz=True))
    assert t.info.rank == 1 and t.info.world_size == 2 and t.info.rank_source == "record"
    assert t.info.base_ns == base and t.info.absolute and not t.info.problems
    k = pl.from_arrow(t.kernels).sort("start_ns")
    assert k["name"].to_list() == ["gemm_a", "graph_k1", "graph_k2", "graph_k3", "Memset (Device)", "orphan"]
    assert k["step"].to_list() == [1, 2, 2, 2, 2, None]
    assert k["launch"].to_list() == ["cudaLaunchKernel"] + ["cudaGraphLaunch"] * 3 + ["cudaMemsetAsync", None]
    assert k["category"].to_list() == ["compute"] * 4 + ["memset", "compute"]
    assert k["start_ns"][0] == base + 20_000 and k["dur_ns"][0] == 30_000
    assert k["launch_ns"][0] == base + 10_000
    assert k["line"][0] == 4                     # 1-based index in traceEvents, for citations
    assert pl.from_arrow(t.steps)["start_ns"].to_list() == [base, base + 100_000]


def test_reader_keeps_what_a_cut_trace_holds(tmp_path):
    ev = [_launch(i * 10, i) for i in range(1, 200)] + [_kernel("k", i * 10 + 1, 5, i) for i in range(1, 200)]
    p = _write(tmp_path / "rank3.json", ev)
    p.write_bytes(p.read_bytes()[: p.stat().st_size * 3 // 4])
    t = read_trace(p)
    assert t.info.problems and "after trace event" in t.info.problems[0]
    assert t.info.rank == 3 and t.info.rank_source == "path"
    assert 0 < t.kernels.num_rows < 199


def test_breakdown_idle_causes_overlap_by_hand(tmp_path):
    # stream 7: compute [0,10) [12,20) [100,110); stream 8: comm [5,40)
    # busy = [0,40) + [100,110) = 50; span = 110; idle = 60; compute union = 28; non-compute = 22
    # overlap of comm [5,40) with compute = [5,10) + [12,20) = 13 -> 13/35
    # stream 7 gaps: 2 (kernel 2 launched at 1 < 10: kernel wait, < 30), 80 (launched at 50 > 20: host wait)
    ev = [_step(1, 0, 200),
          _launch(0, 1), _kernel("k1", 0, 10, 1), _launch(1, 2), _kernel("k2", 12, 8, 2),
          _launch(50, 3), _kernel("k3", 100, 10, 3),
          _launch(2, 4), _kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 5, 35, 4, stream=8)]
    s = trace_stats([_write(tmp_path / "t.json", ev, rank=0, base_ns=1_700_000_000_000_000_000)])
    r = s.breakdown.filter(pl.col("step").is_null()).row(0, named=True)
    assert (r["span_us"], r["idle_us"], r["compute_us"], r["non_compute_us"]) == (110, 60, 28, 22)
    assert (r["host_wait_us"], r["kernel_wait_us"], r["other_wait_us"]) == (80, 2, 0)
    assert r["comm_us"] == 35 and r["overlap_us"] == 13 and r["overlap_pct"] == pytest.approx(100 * 13 / 35)
    assert s.breakdown.filter(pl.col("step") == 1).row(0, named=True)["span_us"] == 110
    top = s.top_kernels.row(0, named=True)
    assert top["name"].startswith("ncclKernel") and top["time_us"] == 35


def test_whole_trace_leaves_out_the_last_step_as_hta(tmp_path):
    ev = [_step(1, 0, 100), _step(2, 100, 100),
          _launch(1, 1), _kernel("a", 10, 10, 1), _launch(101, 2), _kernel("b", 110, 50, 2)]
    s = trace_stats([_write(tmp_path / "t.json", ev, rank=0)])
    whole = s.breakdown.filter(pl.col("step").is_null()).row(0, named=True)
    assert whole["kernels"] == 1 and whole["span_us"] == 10
    assert s.breakdown.filter(pl.col("step") == 2).row(0, named=True)["span_us"] == 50


def test_late_rank_at_communication_kernels(tmp_path):
    base = 1_700_000_000_000_000_000
    files = []
    for rank in range(4):
        late = 500 if rank == 2 else rank * 3     # rank 2 starts every collective 0.5 ms late
        ev = [_step(1, 0, 10_000)]
        for i in range(5):
            t0 = 1000 * (i + 1)
            ev += [_launch(t0 + late - 5, i + 1),
                   _kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", t0 + late, 700 - late, i + 1, stream=20)]
        files.append(_write(tmp_path / f"rank{rank}.json", ev, rank=rank, base_ns=base))
    s = trace_stats(files)
    assert s.arrivals.height == 5 and set(s.arrivals["late_rank"]) == {2}
    assert s.straggler and s.straggler["rank"] == 2 and s.straggler["times_last"] == 5
    assert s.straggler["evidence"][0]["file"].endswith("rank2.json")
    # without a late rank, nobody is named
    for f in files[2:3]:
        f.unlink()
    assert trace_stats(files[:2] + files[3:]).straggler is None


@pytest.mark.skipif(not DLRM.is_dir(), reason="shared realdata absent")
def test_agrees_with_hta_on_the_dlrm_traces():
    """Temporal breakdown and overlap within 1% of HTA 0.5.0 on every rank (bench/hta_expected.py)."""
    expected = json.loads(EXPECTED.read_text())["ranks"]
    s = trace_stats([DLRM])
    whole = {r["rank"]: r for r in s.breakdown.filter(pl.col("step").is_null()).iter_rows(named=True)}
    assert sorted(whole) == sorted(int(r) for r in expected)
    for rank, e in expected.items():
        r = whole[int(rank)]
        for ours, theirs in (("span_us", "kernel_span_us"), ("idle_us", "idle_us"),
                             ("compute_us", "compute_us"), ("non_compute_us", "non_compute_us")):
            assert r[ours] == pytest.approx(e[theirs], rel=0.01), (rank, ours)
        # HTA rounds the overlap to 0.01 %
        assert r["overlap_pct"] == pytest.approx(e["overlap_pct"], rel=0.01, abs=0.01), rank
        # idle causes: the total always; each cause where every kernel's launch is in the trace
        # (HTA joins a kernel without one to the trace's row 0 and compares that event's time)
        causes = e["idle_causes_us"]
        ours_total = r["host_wait_us"] + r["kernel_wait_us"] + r["other_wait_us"]
        assert ours_total == pytest.approx(sum(causes.values()), rel=0.01), rank
    launched = {int(r): v for r, v in expected.items()}
    k = pl.concat([pl.from_arrow(read_trace(f).kernels) for f in sorted(DLRM.glob("*.json.gz"))])
    complete = set(k.group_by("rank").agg(pl.col("launch").null_count().alias("n")).filter(pl.col("n") == 0)["rank"])
    assert complete, "no rank with every launch in the trace"
    for rank in complete:
        r, causes = whole[rank], launched[rank]["idle_causes_us"]
        assert r["host_wait_us"] == pytest.approx(causes["host_wait"], rel=0.01)
        assert r["kernel_wait_us"] == pytest.approx(causes["kernel_wait"], rel=0.01)


@pytest.mark.skipif(not DLRM.is_dir(), reason="shared realdata absent")
def test_cli_formats_on_dlrm():
    runner = CliRunner()
    res = runner.invoke(app, ["trace-stats", str(DLRM), "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert len(doc["traces"]) == 8 and doc["straggler"]["rank"] == 7
    res = runner.invoke(app, ["trace-stats", str(DLRM), "--format", "csv"])
    assert res.exit_code == 0 and res.stdout.splitlines()[0].startswith("rank,step,kernels,span_us")
    res = runner.invoke(app, ["trace-stats", str(DLRM)])
    assert res.exit_code == 0 and "overlap" in res.stdout and "rank 7 arrives last" in res.stdout


def test_cli_missing_path_is_an_error(tmp_path):
    res = subprocess.run([sys.executable, "-m", "forensics", "trace-stats", str(tmp_path / "none")],
                         capture_output=True, text=True, env={**os.environ, "COLUMNS": "120"})
    assert res.returncode == 1 and "error[" in res.stderr and "Traceback" not in res.stderr


def _comm_events(late_rank: int | None, n: int) -> pl.DataFrame:
    import datetime as dt

    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    rows = []
    for rank in range(4):
        for i in range(n):
            late = 0.8 if rank == late_rank else 0.01 * rank
            rows.append({"rank": rank, "event": "COMM_KERNEL", "collective": "AllReduce", "comm_ms": 1.0,
                         "timestamp": t0 + dt.timedelta(milliseconds=10 * i + late),
                         "source_file": f"rank{rank}.json", "line": i + 1})
    return pl.DataFrame(rows)


def test_diagnose_pass_names_the_late_rank_with_basis():
    from forensics.passes import trace_straggler
    from forensics.passes.context import Context

    (f,) = trace_straggler.find(Context.from_frame(_comm_events(3, 25)))
    assert f.kind == "straggler" and f.ranks == [3] and f.victims == [0, 1, 2]
    assert f.basis == "timing_within_group" and f.severity == "WARN" and not f.basis_weak
    assert f.lines[0].source_file == "rank3.json"
    (f,) = trace_straggler.find(Context.from_frame(_comm_events(3, 5)))   # a few collectives: a reading
    assert f.severity == "INFO" and f.basis_weak
    assert trace_straggler.find(Context.from_frame(_comm_events(None, 25))) == []


@pytest.mark.skipif(not DLRM.is_dir(), reason="shared realdata absent")
def test_diagnose_reports_the_dlrm_late_rank(tmp_path):
    from forensics.ingest import ingest
    from forensics.passes import diagnose
    from forensics.run import open_run

    ingest([str(DLRM)], str(tmp_path / "s"))
    report = diagnose(open_run([str(tmp_path / "s")]))
    (f,) = [f for f in report.findings if f.rule.endswith("trace_straggler")]
    assert f.ranks == [7] and f.basis == "timing_within_group" and f.lines[0].line == 1890


@pytest.mark.skipif(not DLRM.is_dir(), reason="shared realdata absent")
def test_store_keeps_every_gpu_activity_and_trace_stats_reads_it(tmp_path):
    from forensics.ingest import ingest
    from forensics.run import open_run

    ingest([str(DLRM)], str(tmp_path / "s"))
    run = open_run([str(tmp_path / "s")])
    k = run.kernels().collect()
    files = sorted(DLRM.glob("*.json.gz"))
    assert k.height == sum(read_trace(f).kernels.num_rows for f in files) == 2244
    assert {Path(p).resolve() for p in k["source_file"]} == {f.resolve() for f in files} and k["rank"].null_count() == 0
    from_files, from_store = trace_stats([DLRM]), trace_stats([tmp_path / "s"])
    cols = ["rank", "step", "span_us", "idle_us", "compute_us", "host_wait_us", "overlap_pct"]
    assert from_store.breakdown.select(cols).equals(from_files.breakdown.select(cols))
    assert from_store.straggler["rank"] == from_files.straggler["rank"] == 7
    # re-ingest with nothing new keeps the kernel parts
    ingest([str(DLRM)], str(tmp_path / "s"), append=True)
    assert open_run([str(tmp_path / "s")]).kernels().select(pl.len()).collect().item() == 2244


def test_reader_memory_does_not_grow_with_the_trace(tmp_path):
    """A 48 MB trace (gzip) of CPU ops and 20,000 kernels: the reader's peak RSS grows by far
    less than the trace (json.load would hold the text and several times it in objects)."""
    p = tmp_path / "rank0.pt.trace.json.gz"
    pad = "y" * 300
    with gzip.open(p, "wt", compresslevel=1) as f:
        f.write('{"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": [\n')
        f.write(json.dumps(_step(1, 0, 10**9)))
        for i in range(1, 120_001):
            f.write(f',\n{{"ph": "X", "cat": "cpu_op", "name": "aten::op{i % 50}", "pid": 1, "tid": 1, "ts": {i * 10}, '
                    f'"dur": 5, "args": {{"External id": {i}, "pad": "{pad}"}}}}')
            if i % 6 == 0:
                f.write(",\n" + json.dumps(_launch(i * 10 + 1, i)) + ",\n" + json.dumps(_kernel(f"k{i % 7}", i * 10 + 3, 4, i)))
        f.write("\n]}")
    size = len(gzip.decompress(p.read_bytes()))
    assert size > 45e6
    code = ("import resource, sys\nfrom forensics.traces.reader import read_trace\n"
            "base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            "t = read_trace(sys.argv[1])\n"
            "print(t.kernels.num_rows, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base)")
    out = subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True, text=True, check=True).stdout.split()
    assert int(out[0]) == 20_000
    grew_mb = int(out[1]) / 1024
    assert grew_mb < 16, f"peak RSS grew {grew_mb:.0f} MB reading a {size / 1e6:.0f} MB trace"


def test_reader_finds_metadata_written_after_the_events(tmp_path):
    """Another writer (json.dump of a dict) may put every key after traceEvents, nested lists too."""
    doc = {"traceEvents": [_launch(1, 1), _kernel("k", 5, 5, 1)],
           "distributedInfo": {"backend": "nccl", "rank": 5, "world_size": 8,
                               "pg_config": [{"pg_name": "0", "ranks": [0, 1]}]},
           "baseTimeNanoseconds": 1_700_000_000_000_000_000, "traceName": "x"}
    p = tmp_path / "trace.json"
    p.write_text(json.dumps(doc))
    t = read_trace(p)
    assert (t.info.rank, t.info.world_size, t.info.base_ns, t.info.rank_source) == (5, 8, 1_700_000_000_000_000_000, "record")
    assert t.kernels["start_ns"].to_pylist() == [1_700_000_000_000_005_000]


def test_table_leaves_out_thousands_of_step_rows(tmp_path):
    ev = []
    for s in range(70):
        ev += [_step(s, s * 100, 100), _launch(s * 100 + 1, s + 1), _kernel("k", s * 100 + 5, 10, s + 1)]
    p = _write(tmp_path / "rank0.json", ev, rank=0)
    res = CliRunner().invoke(app, ["trace-stats", str(p)])
    assert res.exit_code == 0 and "70 per-step rows are not shown" in res.stdout
    csv = CliRunner().invoke(app, ["trace-stats", str(p), "--format", "csv"]).stdout.splitlines()
    assert len(csv) == 1 + 1 + 70


def test_ingest_of_a_cut_gzip_trace_keeps_its_kernels_and_one_reject(tmp_path):
    from forensics.ingest import ingest
    from forensics.run import open_run

    ev = [_step(1, 0, 10**6)]
    for i in range(1, 3000):
        ev += [_launch(i * 10, i), _kernel(f"k{i % 5}", i * 10 + 2, 5, i)]
    (tmp_path / "logs").mkdir()
    p = _write(tmp_path / "logs" / "rank4.pt.trace.json.gz", ev, rank=4, gz=True)
    data = p.read_bytes()
    p.write_bytes(data[: len(data) * 2 // 3])
    s = ingest([str(tmp_path / "logs")], str(tmp_path / "s"))
    assert s.rejected == 1 and list(s.rejected_by_reason) == ["invalid JSON: trace ends before its last event"]
    assert s.problems and "truncated" in s.problems[0]["problem"]
    k = open_run([str(tmp_path / "s")]).kernels().collect()
    assert 0 < k.height < 2999 and set(k["rank"]) == {4}


@pytest.mark.skipif(not DLRM.is_dir(), reason="shared realdata absent")
def test_a_damaged_kernel_part_is_found_on_open(tmp_path):
    from forensics.errors import ForensicsError
    from forensics.ingest import ingest
    from forensics.store import open_store

    ingest([str(DLRM / "worker0_step_12.1694128201545.pt.trace.json.gz")], str(tmp_path / "s"))
    (part,) = open_store(tmp_path / "s").kernel_parts()
    Path(part).write_bytes(Path(part).read_bytes()[:100])
    with pytest.raises(ForensicsError) as e:
        open_store(tmp_path / "s")
    assert "kernels/" in str(e.value.render())
