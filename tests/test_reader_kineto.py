"""Kineto (PyTorch profiler) traces -> COMM_KERNEL + PROFILE_SUMMARY."""
from __future__ import annotations

import gzip
import io
import json
import pathlib

import polars as pl
import pytest

from forensics import schema
from forensics.ingest import formats
from forensics.ingest.formats import ReaderContext, sniff
from forensics.ingest.kineto import read_kineto

REAL = pathlib.Path(__file__).resolve().parents[2] / "shared" / "realdata" / "kineto" / "dlrm_8rank"


def _read(data: bytes, path: str = "/t/worker3_step_1.pt.trace.json"):
    ctx = ReaderContext(path=path, rank_hint=None, host_hint=None)
    blocks = list(read_kineto(path, io.BytesIO(data), ctx))
    assert len(blocks) == 1
    b = blocks[0]
    assert b.lines == b.events.height + b.rejects.height
    schema.conform(b.events)
    return b


def test_registered_and_sniffed():
    assert formats.reader_for("kineto") is read_kineto
    assert sniff(b'{\n  "schemaVersion": 1,\n  "traceEvents": []}', "x.json") == "kineto"


def test_real_dlrm_traces():
    files = sorted(REAL.glob("worker*.pt.trace.json.gz"))
    if not files:
        pytest.skip("realdata absent")
    seen = set()
    for p in files:
        raw = json.loads(gzip.decompress(p.read_bytes()))
        b = _read(gzip.decompress(p.read_bytes()), str(p))
        ev = b.events
        kernels = [e for e in raw["traceEvents"] if e.get("cat") == "kernel" and "nccl" in e.get("name", "").lower()]
        comm = ev.filter(pl.col("event") == "COMM_KERNEL")
        assert comm.height == len(kernels) > 0
        assert comm["comm_ms"].to_list() == [k["dur"] / 1000 for k in kernels]
        assert set(comm["collective"].to_list()) <= {"AllReduce", "SendRecv", "AllGather", "ReduceScatter"}
        rank = raw["distributedInfo"]["rank"]
        assert (ev["rank"] == rank).all() and (ev["rank_source"] == "record").all()
        seen.add(rank)
        summary = ev.filter(pl.col("event") == "PROFILE_SUMMARY").row(0, named=True)
        assert summary["comm_ms"] == pytest.approx(sum(k["dur"] for k in kernels) / 1000)
        assert json.loads(summary["extra"])["world_size"] == 8
        assert comm["timestamp"].null_count() == 0 and comm["timestamp"].min().year == 2023
    assert seen == set(range(8))


def test_relative_clock_rank_from_name_and_gloo():
    trace = {
        "baseTimeNanoseconds": 1_700_000_000_000_000_000,
        "traceEvents": [
            {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllGather_RING_LL(ncclDevComm*)", "ts": 10, "dur": 2500,
             "args": {"device": 3, "stream": 7}},
            {"ph": "X", "cat": "cpu_op", "name": "gloo:all_reduce", "ts": 20, "dur": 1000},
            {"ph": "X", "cat": "kernel", "name": "sgemm", "ts": 30, "dur": 500},
            {"ph": "X", "cat": "cpu_op", "name": "nccl:all_reduce", "ts": 40, "dur": 5},
        ],
    }
    ev = _read(json.dumps(trace).encode()).events.sort("line")
    assert ev["event"].to_list() == ["COMM_KERNEL", "COMM_KERNEL", "PROFILE_SUMMARY"]
    assert ev["collective"].to_list()[:2] == ["AllGather", "all_reduce"] and ev["comm_ms"].to_list()[:2] == [2.5, 1.0]
    assert ev["local_rank"][0] == 3 and (ev["rank"] == 3).all() and (ev["rank_source"] == "path").all()
    assert str(ev["timestamp"][0]) == "2023-11-14 22:13:20.000010+00:00"
    assert ev["line"].to_list() == [1, 2, 5]


def test_truncated_trace_is_one_reject():
    b = _read(b'{"traceEvents": [{"ph": "X"')
    assert b.lines == 1 and b.events.height == 0 and b.rejects["reason"][0].startswith("invalid JSON")


def test_batches_as_dictionary_codes_hold_the_same_table():
    # the workers' form (names as codes, a subset of columns, small batches) decodes to the
    # rows read_trace gives, nulls included (a kernel with no collective, one with no launch)
    import pyarrow as pa

    from forensics.traces.reader import DICT_SCHEMA, KERNEL_SCHEMA, iter_kernel_batches, read_trace

    files = sorted(REAL.glob("worker*.pt.trace.json.gz"))
    if not files:
        pytest.skip("realdata absent")
    whole = read_trace(files[0]).kernels
    assert whole.num_rows > 3 and whole["collective"].null_count > 0
    coded = pa.Table.from_batches(list(iter_kernel_batches(files[0], batch_rows=7, dictionary=True)), schema=DICT_SCHEMA)
    assert coded.schema.field("name").type == pa.dictionary(pa.int32(), pa.large_string())
    assert coded["collective"].null_count == whole["collective"].null_count
    assert coded.cast(KERNEL_SCHEMA).equals(whole)
    cols = ["name", "start_ns", "collective"]
    part = pa.Table.from_batches(list(iter_kernel_batches(files[0], batch_rows=5, columns=cols)))
    assert part.column_names == cols and part.equals(whole.select(cols))
