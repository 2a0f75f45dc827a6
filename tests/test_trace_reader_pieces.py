"""The trace reader's fast path (the event list cut into pieces decoded by msgspec) gives what a
plain ijson reading of the same bytes gives: the same kernels, steps, metadata and, on damaged
or cut text, the same problem after the same trace event.

Pieces are made tiny here (a few hundred bytes) so that every kind of awkward text sits on or
next to a cut: `}, {` inside strings and inside nested lists of objects, items that are not
objects, args that are not an object, large integers, a `"traceEvents": [` inside a
string before the real key, keys with brackets after the list.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from forensics.traces import reader


def _kernel(name, ts, dur, corr, stream=7, cat="kernel", **extra):
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": stream, "correlation": corr, **extra}}


def _launch(ts, corr):
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 9, "tid": 9, "ts": ts, "dur": 2,
            "args": {"correlation": corr}}


def _awkward_events() -> list:
    ev: list = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 9, "tid": 9, "ts": 0, "dur": 10**6}]
    for i in range(1, 120):
        ev.append(_launch(i * 100, i))
        odd = i % 6
        if odd == 0:     # a string holding the separator the cutter looks for
            ev.append(_kernel("k}, {\"ph\": \"X\"}, {", i * 100 + 5, 20.5, i, note="}, {"))
        elif odd == 1:   # a nested list of objects: `}, {` between them is not between events
            ev.append(_kernel("nested", i * 100 + 5, 20, i, shapes=[{"a": 1}, {"b": [2, {"c": 3}]}]))
        elif odd == 2:   # float times, unicode
            ev.append(_kernel("ядро_σ", i * 100 + 5.123, 19.999, i))
        elif odd == 3:   # not an object / args not an object
            ev += [17, ["x", {"y": 1}], "s", {"ph": "X", "cat": "cpu_op", "name": "a", "ts": i, "dur": 1, "args": [1, 2]}]
            ev.append(_kernel("after", i * 100 + 5, 20, i, stream=20))
        elif odd == 4:   # a large integer in args
            ev.append(_kernel("big", i * 100 + 5, 20, i, huge=2**62))
        else:
            ev.append({"ph": "X", "cat": "cpu_op", "name": "gloo:all_reduce", "pid": 9, "tid": 9, "ts": i * 100 + 1,
                       "dur": 4, "args": {}})
            ev.append(_kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", i * 100 + 5, 20, i, stream=20))
    return ev


def _doc(events, gz=False, trailer=True) -> bytes:
    head = '{"schemaVersion": 1, "note": "\\"traceEvents\\": [ not here", "distributedInfo": {"rank": 2, "world_size": 4},'
    text = head + ' "traceEvents": [\n' + ",\n  ".join(json.dumps(e, ensure_ascii=False) for e in events) + "\n],"
    text += ' "deviceProperties": [{"id": 0, "name": "GPU ]["}], "traceName": "t"'
    text += ', "baseTimeNanoseconds": 1700000000000000000}' if trailer else "}"
    data = text.encode()
    return gzip.compress(data) if gz else data


def _read(path: Path, monkeypatch, fast: bool, chunk: int = 300):
    with monkeypatch.context() as m:
        m.setattr(reader, "CHUNK", chunk)
        m.setattr(reader, "READ", 64)
        if not fast:
            m.setattr(reader, "_iter_events", reader._ijson_events)
        return reader.read_trace(path)


def _same(a, b, tail: bool = True) -> None:
    """tail=False: a trace damaged in the middle; how far past the damage each way has read
    (the keys after the list, the last bytes kept) depends on its read sizes."""
    assert a.kernels.equals(b.kernels)
    assert a.steps.equals(b.steps)
    skip = set() if tail else {"last_bytes", "trace_name", "device_name"}
    assert {k: v for k, v in a.info.__dict__.items() if k not in skip} == {k: v for k, v in b.info.__dict__.items() if k not in skip}


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("chunk", [1, 300, 4096, 1 << 20])
def test_pieces_read_as_ijson_reads(tmp_path, monkeypatch, gz, chunk):
    p = tmp_path / ("rank2.json.gz" if gz else "rank2.json")
    p.write_bytes(_doc(_awkward_events(), gz))
    fast, slow = _read(p, monkeypatch, True, chunk), _read(p, monkeypatch, False, chunk)
    _same(fast, slow)
    assert fast.kernels.num_rows == 119 and not fast.info.problems
    assert fast.info.rank == 2 and fast.info.base_ns == 1700000000000000000
    assert len(fast.info.cpu_collectives) == 20 and fast.steps.num_rows == 1


def test_a_clean_trace_never_goes_through_ijson(tmp_path, monkeypatch):
    """... and an integer beyond 64 bits in a field the reader does not use (yajl stops there with
    'integer overflow': the old reader lost the rest of the trace) is skipped."""
    events = [_launch(i * 10, i) for i in range(1, 500)] + [_kernel("k", i * 10 + 1, 5, i, huge=2**70) for i in range(1, 500)]
    p = tmp_path / "rank0.json"
    p.write_bytes(_doc(events))

    def no(*_a, **_k):
        raise AssertionError("ijson used on a clean trace")

    monkeypatch.setattr(reader, "_ijson_events", no)
    monkeypatch.setattr(reader, "CHUNK", 2048)
    t = reader.read_trace(p)
    assert t.kernels.num_rows == 499 and t.info.events == 998


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("frac", [0.13, 0.5, 0.77, 0.999])
def test_cut_and_damaged_traces_fail_after_the_same_event(tmp_path, monkeypatch, gz, frac):
    data = _doc(_awkward_events())
    p = tmp_path / ("rank2.json.gz" if gz else "rank2.json")
    cut = data[: int(len(data) * frac)]
    p.write_bytes(gzip.compress(cut) if gz else cut)
    fast, slow = _read(p, monkeypatch, True), _read(p, monkeypatch, False)
    _same(fast, slow)
    assert fast.info.problems and "after trace event" in fast.info.problems[0]
    # damage in the middle (a byte that is not JSON), the rest of the trace intact
    data = _doc(_awkward_events(), trailer=False)
    at = int(len(data) * frac)
    bad = data[:at] + b"\x01garbage" + data[at:]
    p.write_bytes(gzip.compress(bad) if gz else bad)
    fast, slow = _read(p, monkeypatch, True), _read(p, monkeypatch, False)
    _same(fast, slow, tail=False)
    assert fast.info.problems and 0 < fast.kernels.num_rows <= 119
