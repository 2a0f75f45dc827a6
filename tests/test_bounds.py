"""Values a store cannot hold (forensics/ingest/bounds.py) and the commands one odd value used to
abort: each became a traceback that lost the whole ingest or output. Each test failed before."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

import forensics
from forensics.cli import app
from forensics.errors import ForensicsError
from forensics.export import export_perfetto, parse_ranks
from forensics.store import open_store

GOOD = {"timestamp": "2025-06-12T14:03:21.123Z", "rank": 0, "level": "INFO", "event": "TRAIN_STEP",
        "message": "step=1 loss=2.3"}


def _run(d: Path, odd: object, name: str = "rank_0.jsonl") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    rows = [GOOD, {**GOOD, "timestamp": odd, "message": "step=2 loss=2.2"}, {**GOOD, "message": "step=3 loss=2.1"}]
    (d / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


@pytest.mark.parametrize("native", ["1", "0"])
@pytest.mark.parametrize("odd", ["0000-01-01T00:00:00Z", "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00",
                                 -62135596801])
def test_a_time_outside_the_datetime_range_is_a_reject_and_the_rest_is_kept(tmp_path: Path, monkeypatch, odd, native) -> None:
    monkeypatch.setenv("FORENSICS_NATIVE", native)
    st = tmp_path / "st"
    forensics.ingest([str(_run(tmp_path / "logs", odd))], st)
    s = open_store(st)
    assert s.events().collect()["line"].to_list() == [1, 3]
    rej = s.rejects().collect()
    assert rej["line"].to_list() == [2] and rej["reason"][0].startswith("timestamp out of range")
    assert b"step=2" in rej["raw"][0]


def test_a_file_read_by_its_reader_rejects_the_line_too(tmp_path: Path) -> None:
    """Not the many-small-files path: a gzip file, whose line is read again from the stream."""
    d = _run(tmp_path / "logs", "0000-01-01T00:00:00Z")
    (d / "rank_0.jsonl.gz").write_bytes(gzip.compress((d / "rank_0.jsonl").read_bytes()))
    (d / "rank_0.jsonl").unlink()
    st = tmp_path / "st"
    forensics.ingest([str(d)], st)
    s = open_store(st)
    assert s.events().collect()["line"].to_list() == [1, 3]
    rej = s.rejects().collect()
    assert rej["line"].to_list() == [2] and rej["reason"][0].startswith("timestamp out of range")
    assert json.loads(rej["raw"][0])["message"] == "step=2 loss=2.2" and rej["raw_len"][0] == len(rej["raw"][0])


def test_an_nvidia_smi_row_dated_year_0_is_a_reject(tmp_path: Path) -> None:
    d = tmp_path / "smi"
    d.mkdir()
    (d / "gpu.csv").write_text("timestamp, index, temperature.gpu, utilization.gpu [%]\n"
                               "2025/06/12 14:03:21.123, 0, 60, 99 %\n0000/01/01 00:00:00.000, 0, 61, 98 %\n"
                               "2025/06/12 14:03:22.123, 0, 60, 99 %\n")
    st = tmp_path / "st"
    forensics.ingest([str(d)], st)
    rej = open_store(st).rejects().collect()
    assert rej["line"].to_list() == [3] and rej["reason"][0].startswith("timestamp out of range")
    assert rej["raw"][0].startswith(b"0000/01/01")


def test_perfetto_exports_a_run_dated_year_1(tmp_path: Path) -> None:
    st = tmp_path / "st"
    forensics.ingest([str(_run(tmp_path / "logs", "0001-01-01T00:00:00Z"))], st)
    out = export_perfetto(open_store(st), tmp_path / "t.json")
    assert out.events > 0 and json.loads((tmp_path / "t.json").read_text())["traceEvents"]


def test_a_rank_range_of_every_number_is_an_error_not_a_memory_error() -> None:
    with pytest.raises(ForensicsError) as e:
        parse_ranks("0-99999999999")
    assert "more than" in e.value.reason
    assert parse_ranks("99999999999") == [99999999999]


# --- commands ------------------------------------------------------------------------------------

def _store(tmp_path: Path, extra: bytes = b"") -> Path:
    d = _run(tmp_path / "logs", "2025-06-12T14:03:22.123Z")
    with open(d / "rank_0.jsonl", "ab") as f:
        f.write(extra)
    forensics.ingest([str(d)], tmp_path / "st")
    return tmp_path / "st"


def test_sql_stops_a_query_past_its_time_limit(tmp_path: Path) -> None:
    from forensics.query import sql

    with pytest.raises(ForensicsError) as e:
        sql(open_store(_store(tmp_path)), "SELECT count(*) FROM range(1000000000000::BIGINT)", timeout=0.5)
    assert "ran too long" in e.value.what and "--timeout" in e.value.help
    r = CliRunner().invoke(app, ["sql", str(tmp_path / "st"), "SELECT count(*) FROM range(1000000000000::BIGINT)",
                                 "--timeout", "0.5"])
    assert r.exit_code == 1 and isinstance(r.exception, ForensicsError) and "time limit of 0.5 s" in r.exception.reason


@pytest.mark.parametrize("fmt", ["csv", "json", "jsonl", "table"])
def test_sql_results_of_any_type_print_in_every_format(tmp_path: Path, fmt: str) -> None:
    st = _store(tmp_path, b"\x00\x01 garbage \xff\xfe line\n")   # control bytes: a reject, not console text
    q = ("SELECT 'a'::BLOB AS b, INTERVAL 1 DAY AS i, union_value(k := 1) AS u, MAP {'a': 1} AS m, {'a': 1} AS s, "
         "[{'b': 2}] AS l, (SELECT raw FROM rejects LIMIT 1) AS raw, (SELECT typed_value FROM duckdb_settings() LIMIT 1) AS v")
    r = CliRunner().invoke(app, ["sql", str(st), q, "--format", fmt])
    assert r.exit_code == 0, r.output
    assert "1 day" in r.output and "garbage" in r.output


def test_a_count_beyond_any_integer_is_a_usage_error(tmp_path: Path) -> None:
    st = _store(tmp_path)
    for cmd in (["events", str(st)], ["rejects", str(st)]):
        r = CliRunner().invoke(app, [*cmd, "--limit", "99999999999999999999"])
        assert r.exit_code == 2 and "--limit" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(app, ["events", str(st), "--limit", str((1 << 31) - 1), "--format", "jsonl"])
    assert r.exit_code == 0 and len(r.output.splitlines()) == 3


def test_lint_reads_a_rejected_line_that_is_not_utf8(tmp_path: Path) -> None:
    st = _store(tmp_path, b"\x00\x01 garbage \xff\xfe line\n\x00Traceback (most recent call last) \xff\n")
    r = CliRunner().invoke(app, ["lint", str(st)])
    assert r.exit_code in (0, 3) and "traceback (rejected line)" in r.output, r.output


# --- Flight Recorder dumps of plain data with an odd field ----------------------------------------

def _odd_dump(tmp_path: Path, change) -> Path:
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from fr_dumps import make_dumps, write_set

    d = make_dumps(world=4, n=8)
    change(d)
    write_set(tmp_path / "dumps", d)
    return tmp_path / "dumps"


ODD_ENTRIES = {
    "input_sizes not numbers": lambda d: d[1]["entries"][3].__setitem__("input_sizes", [["abc"]]),
    "input_sizes infinite": lambda d: d[1]["entries"][3].__setitem__("input_sizes", [[float("inf")]]),
    "timeout_ms of 401 digits": lambda d: d[1]["entries"][3].__setitem__("timeout_ms", 10**400),
    "seq beyond 64 bits": lambda d: d[1]["entries"][3].__setitem__("collective_seq_id", 2**70),
}


@pytest.mark.parametrize("case", sorted(ODD_ENTRIES))
def test_an_odd_entry_field_is_flagged_and_the_dump_kept(tmp_path: Path, case: str) -> None:
    st = tmp_path / "st"
    forensics.ingest([str(_odd_dump(tmp_path, ODD_ENTRIES[case]))], st)
    ev = open_store(st).events().collect()
    assert ev.height == 48            # 4 ranks x (8 world + 2 tp collectives + 2 pg_status rows)
    odd = ev.filter(pl.col("extra").str.contains("odd_fields"))
    assert odd.select("rank", "line").rows() == [(1, 4)]


@pytest.mark.parametrize("ranks", [["²"], "[" + "9" * 5000 + "]", [2**64], "[0, 1, 99999999999]"])
def test_pg_config_ranks_that_are_no_rank_do_not_stop_fr_table_or_diagnose(tmp_path: Path, ranks) -> None:
    from forensics.fr_table import build

    def change(d):
        for r in d:
            for spec in d[r]["pg_config"].values():
                spec["ranks"] = ranks
        d[1]["rank"] = 2**64     # no rank either: the path's is used

    logs = _odd_dump(tmp_path, change)
    assert build([str(logs)]).dumps
    st = tmp_path / "st"
    forensics.ingest([str(logs)], st)
    assert sorted(open_store(st).events().collect()["rank"].unique().to_list()) == [0, 1, 2, 3]
    forensics.diagnose(open_store(st))


# --- telemetry: a table of thousands of columns ---------------------------------------------------

def test_a_telemetry_header_of_1000_columns_is_read_in_bounded_time(tmp_path: Path) -> None:
    """The first MAX_COLUMNS columns are read; the header event says how many were not. Before,
    every column became expressions of one select: 500 columns 3.7 s, 4,000 columns 61 s and 4 GB."""
    import io
    import time

    from forensics.ingest.formats import ReaderContext
    from forensics.ingest.telemetry import MAX_COLUMNS, read_nvidia_smi

    n = 1000
    head = "timestamp, index, temperature.gpu, utilization.gpu [%], " + ", ".join(f"c{i}" for i in range(n))
    row = "2025/06/12 14:03:21.123, 0, 60, 99 %, " + ", ".join("1" for _ in range(n))
    data = f"{head}\n{row}\n{row.replace('21.123', '22.123')}\n".encode()
    t = time.process_time()
    blocks = list(read_nvidia_smi("gpu.csv", io.BytesIO(data), ReaderContext(path="gpu.csv", rank_hint=None, host_hint=None)))
    assert time.process_time() - t < 10   # measured 0.1-0.3 s CPU
    ev = pl.concat([b.events for b in blocks], how="diagonal_relaxed")
    head_ev = ev.filter(pl.col("event") == "TELEMETRY_HEADER")
    assert json.loads(head_ev["extra"][0])["columns_not_read"] == n + 4 - MAX_COLUMNS
    assert ev.filter(pl.col("event") == "GPU_STATS")["temp_c"].to_list() == [60.0, 60.0]


def test_a_dcgm_gpu_label_that_is_no_number_is_left_out(tmp_path: Path) -> None:
    d = tmp_path / "dcgm"
    d.mkdir()
    (d / "dcgm.prom").write_text('DCGM_FI_DEV_GPU_TEMP{gpu="²",Hostname="h"} 65\n'
                                 'DCGM_FI_DEV_GPU_TEMP{gpu="' + "9" * 5000 + '",Hostname="h"} 66\n'
                                 'DCGM_FI_DEV_GPU_TEMP{gpu="1",Hostname="h"} 67\n')
    st = tmp_path / "st"
    forensics.ingest([str(d)], st)
    ev = open_store(st).events().collect()
    assert ev.height == 3 and ev["local_rank"].to_list() == [None, None, 1]


# --- profiler traces: nesting and times ------------------------------------------------------------

DEEP = 100_000


def _trace(d: Path, deep_at: str) -> Path:
    """A 200 KB trace: one kernel `k2`, and a value nested DEEP levels at `deep_at`."""
    nest = "[" * DEEP + "]" * DEEP
    k2 = '{"ph": "X", "cat": "kernel", "name": "k2", "ts": 5, "dur": 2, "args": {"stream": 7}}'
    deep_ev = '{"ph": "X", "cat": "cpu_op", "name": "op", "ts": 1, "dur": 2, "args": {"x": ' + nest + "}}"
    body = {"args": '{"traceEvents": [' + k2 + ", " + deep_ev + "]}",
            "top": '{"deviceProperties": ' + nest + ', "traceEvents": [' + k2 + "]}"}[deep_at]
    d.mkdir(parents=True, exist_ok=True)
    (d / "rank0.pt.trace.json").write_text(body)
    return d


@pytest.mark.parametrize("deep_at", ["args", "top"])
@pytest.mark.parametrize("cmd", ["trace-stats", "ingest"])
def test_a_trace_nested_100000_deep_is_read_in_bounded_memory(tmp_path: Path, deep_at: str, cmd: str) -> None:
    """Run under a 1.5 GB address-space limit: before, RecursionError (args) or MemoryError (a
    deep top-level key: ijson's prefixes, 24 GB without a limit)."""
    import os
    import resource
    import subprocess
    import sys

    logs = _trace(tmp_path / "t", deep_at)
    args = ["trace-stats", str(logs)] if cmd == "trace-stats" else ["ingest", str(logs), "-o", str(tmp_path / "st")]
    cap = 1536 << 20
    r = subprocess.run([sys.executable, "-m", "forensics", *args], capture_output=True, text=True, timeout=300,
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (cap, cap)),
                       env={**os.environ, "COLUMNS": "200"})
    assert r.returncode == 0, r.stderr[-2000:]
    if cmd == "trace-stats":
        assert "k2" in r.stdout


def test_a_trace_time_beyond_any_clock_is_skipped_and_said(tmp_path: Path) -> None:
    from forensics.traces.reader import read_trace

    d = tmp_path / "t"
    d.mkdir()
    evs = [{"ph": "X", "cat": "kernel", "name": n, "ts": ts, "dur": dur, "args": {"stream": 7}}
           for n, ts, dur in [("k", 1e308, 2), ("k0", 10**20, 2), ("k1", 7, 1e300), ("k2", 5, 2)]]
    (d / "rank0.pt.trace.json").write_text(json.dumps({"traceEvents": evs}))
    t = read_trace(d / "rank0.pt.trace.json")
    assert t.kernels.num_rows == 1 and any("3 trace event(s) with a time beyond" in p for p in t.info.problems)


def test_a_dump_whose_shared_string_expands_past_the_byte_bound_is_one_reject(tmp_path: Path) -> None:
    """A 0.5 MB string shared by 300 entries: a 0.5 MB file, 150 MB of text as a tree. The value
    cap counted values, not bytes: 20 entries sharing 40 MB took a 2.7 GB peak, 400 a MemoryError."""
    import pickle
    import sys

    from forensics.ingest.flight_recorder import MAX_TREE_BYTES

    sys.path.insert(0, str(Path(__file__).parent))
    from fr_dumps import make_dumps

    d = make_dumps(world=2, n=300)[0]
    big = "x" * (512 << 10)
    for e in d["entries"][:300]:
        e["thread_name"] = big
    assert 300 * len(big) > MAX_TREE_BYTES
    (tmp_path / "dumps").mkdir()
    (tmp_path / "dumps" / "nccl_trace_rank_0").write_bytes(pickle.dumps(d, protocol=4))
    st = tmp_path / "st"
    forensics.ingest([str(tmp_path / "dumps")], st)
    rej = open_store(st).rejects().collect()
    assert rej.height == 1 and "MiB of text" in rej["reason"][0]


# --- console lines with numbers no column holds ---------------------------------------------------

@pytest.mark.parametrize("line", [
    '[rank0]:   File "/x/module.py", line 1789, in _call_impl'.replace("0", "9" * 5000),   # past int()'s 4,300 digits
    "[rank99999999999]: hello",                                                          # no Int32 rank
    "Signal 15 (SIGTERM) received by PID " + "9" * 30,                                   # an int JSON cannot hold
    "srun: error: node1: tasks 0-99999999999: Exited with exit code 1",                  # a task range of every number
])
def test_a_console_line_with_an_odd_number_keeps_the_others(tmp_path: Path, line: str) -> None:
    import io

    from forensics.ingest.console import read_console
    from forensics.ingest.formats import ReaderContext

    data = f"[rank1]: before\n{line}\n[rank1]: after\n".encode()
    blocks = list(read_console("x.log", io.BytesIO(data), ReaderContext(path="x.log", rank_hint=None, host_hint=None)))
    ev = pl.concat([b.events for b in blocks], how="diagonal_relaxed")
    rej = pl.concat([b.rejects for b in blocks])
    assert ev.height + rej.height == 3 and ev.filter(pl.col("rank") == 1).height == 2
