"""Flight Recorder dumps: safe loading, COLLECTIVE/PG_STATUS events, missing ranks."""
from __future__ import annotations

import io
import json
import os
import pathlib
import pickle

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forensics import schema
from forensics.errors import ForensicsError
from forensics.ingest import flight_recorder as fr
from forensics.ingest import formats
from forensics.ingest.formats import ReaderContext, sniff
from forensics.ingest.sources import rank_from_path

REAL = pathlib.Path(__file__).resolve().parents[2] / "shared" / "realdata" / "flight_recorder"
SCENARIOS = ["gpu_error_1st", "lock_gil_1st"]


def _scenario(name: str) -> pathlib.Path:
    d = REAL / name
    if not d.exists():
        pytest.skip(f"realdata absent: {d}")
    return d


def _dumps(d: pathlib.Path) -> dict[int, dict]:
    out = {}
    for p in d.glob("_dump_*"):
        with open(p, "rb") as f:
            out[rank_from_path(str(p))] = fr.load_dump(f, str(p))
    return out


def _reference(d: pathlib.Path) -> dict[str, list[int]]:
    """reference_output.txt: `PGID | desc | op | size | dtype | missing ranks` rows."""
    ref = {}
    for line in (d / "reference_output.txt").read_text().splitlines()[1:]:
        cells = [c.strip() for c in line.split("|")]
        if len(cells) >= 6 and cells[0].isdigit():
            ref[cells[0]] = sorted(int(r) for r in cells[-1].split(","))
    return ref


def test_registered_and_sniffed():
    assert formats.reader_for("flight_recorder") is fr.read_flight_recorder
    assert sniff(pickle.dumps({"entries": []}, protocol=4)[:64], "_dump_0") == "flight_recorder"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_missing_ranks_reproduce_reference_output(scenario):
    d = _scenario(scenario)
    dumps = _dumps(d)
    assert sorted(dumps) == list(range(16))
    ref = _reference(d)
    assert ref, "reference_output.txt has no rows"
    got = fr.missing_ranks(dumps)
    for pg, ranks in ref.items():
        assert got.get(pg) == ranks, (pg, got)
    # every group we blame names only ranks the reference blames
    assert set().union(*got.values()) == set().union(*ref.values())
    # and the injected faults are where the blame comes from
    injected = (d / "fault_injection.log").read_text()
    assert all(f"Rank {r}," in injected for r in set().union(*ref.values()))


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_read_every_dump(scenario):
    d = _scenario(scenario)
    for p in sorted(d.glob("_dump_*")):
        ctx = ReaderContext(path=str(p), rank_hint=rank_from_path(str(p)), host_hint=None)
        with open(p, "rb") as f:
            blocks = list(fr.read_flight_recorder(str(p), f, ctx))
        with open(p, "rb") as f:
            dump = fr.load_dump(f)
        assert len(blocks) == 1
        b = blocks[0]
        assert b.lines == b.events.height + b.rejects.height == len(dump["entries"]) + len(dump["pg_status"])
        schema.conform(b.events)
        ev = b.events
        assert (ev["rank"] == ctx.rank_hint).all() and (ev["rank_source"] == "path").all()
        coll = ev.filter(pl.col("event") == "COLLECTIVE").sort("line")
        assert coll["line"].to_list() == list(range(1, len(dump["entries"]) + 1))
        coll = coll.with_columns(pl.col("timestamp").dt.epoch("us").alias("ts_us"))
        for row, e in zip(coll.iter_rows(named=True), dump["entries"]):
            assert (row["seq"], row["collective"], row["process_group"]) == (
                e["collective_seq_id"], e["profiling_name"], e["process_group"][0])
            assert row["ts_us"] == e["time_created_ns"] // 1000
            assert row["timeout_s"] == e["timeout_ms"] / 1000
            assert json.loads(row["extra"])["state"] == e["state"]
        st_rows = ev.filter(pl.col("event") == "PG_STATUS")
        assert st_rows.height == len(dump["pg_status"])


def test_tensor_size_from_shapes_and_dtypes():
    d = _scenario("gpu_error_1st")
    p = d / "_dump_0"
    with open(p, "rb") as f:
        b = next(fr.read_flight_recorder(str(p), f, ReaderContext(path=str(p), rank_hint=0, host_hint=None)))
    row = b.events.filter(pl.col("line") == 1).row(0, named=True)
    # entry 1 of rank 0 is a send of [4096, 1, 5120] BFloat16 (2 bytes each)
    assert row["tensor_size_mb"] == pytest.approx(4096 * 5120 * 2 / 2**20)


# --- safety --------------------------------------------------------------------------------------

class _Evil:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_a_pickle_that_would_run_code_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    data = pickle.dumps({"entries": [_Evil(str(marker))]})
    with pytest.raises(ForensicsError) as e:
        fr.loads_dump(data, "evil")
    msg = str(e.value)
    assert "refused global" in msg and "mkdir" in msg
    assert not marker.exists()
    ctx = ReaderContext(path="evil", rank_hint=0, host_hint=None)
    # the reader makes it a reject of the file (the ingest goes on), still without running it
    (b,) = list(fr.read_flight_recorder("evil", io.BytesIO(data), ctx))
    assert b.events.height == 0 and b.lines == 1 and "refused global" in b.rejects["reason"][0]
    assert not marker.exists()


@pytest.mark.parametrize("value", [{1, 2}, frozenset({1}), bytearray(b"x"), complex(1, 2)])
def test_types_outside_plain_data_are_refused(value):
    with pytest.raises(ForensicsError):
        fr.loads_dump(pickle.dumps({"entries": [value]}, protocol=5))


def test_truncated_oversized_and_non_dict_dumps(monkeypatch):
    good = pickle.dumps({"entries": [], "pg_status": {}})
    with pytest.raises(ForensicsError, match="cannot read"):
        fr.loads_dump(good[:-5])
    with pytest.raises(ForensicsError, match="not a dict"):
        fr.loads_dump(pickle.dumps([1, 2]))
    monkeypatch.setattr(fr, "MAX_DUMP_BYTES", 10)
    with pytest.raises(ForensicsError, match="larger than"):
        fr.load_dump(io.BytesIO(good))


@given(st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text() | st.binary(),
    lambda kids: st.lists(kids, max_size=4) | st.tuples(kids, kids) | st.dictionaries(st.text(max_size=5), kids, max_size=4),
    max_leaves=20,
), st.integers(3, 5))
@settings(max_examples=150, deadline=None)
def test_property_plain_data_round_trips(value, protocol):
    assert fr.loads_dump(pickle.dumps({"v": value}, protocol=protocol)) == {"v": value}


def test_protocol_2_needs_a_global_for_bytes_and_is_refused_only_then():
    assert fr.loads_dump(pickle.dumps({"v": [1, "a", (2.5, None)]}, protocol=2)) == {"v": [1, "a", (2.5, None)]}
    with pytest.raises(ForensicsError, match="refused global"):
        fr.loads_dump(pickle.dumps({"v": b"x"}, protocol=2))


# --- the reader on synthetic dumps ----------------------------------------------------------------

def _entry(seq, pg="7", desc="DP", state="scheduled", p2p=False, t_ns=1_700_000_000_000_000_000, pg_id=1):
    return {"collective_seq_id": seq, "profiling_name": "nccl:all_reduce", "process_group": (pg, desc),
            "state": state, "is_p2p": p2p, "pg_id": pg_id, "time_created_ns": t_ns, "timeout_ms": 600000,
            "input_sizes": [[1024]], "input_dtypes": ["Float"], "output_sizes": [[1024]], "output_dtypes": ["Float"]}


def _dump(entries, status=None, ranks=(0, 1, 2, 3), pg="7", **top):
    return {"entries": entries, "pg_config": {pg: {"desc": "DP", "ranks": str(list(ranks))}},
            "pg_status": status or {}, "version": "2.9", **top}


def test_dump_rank_field_wins_over_the_path():
    data = pickle.dumps(_dump([_entry(5)], rank=9))
    b = next(fr.read_flight_recorder("_dump_3", io.BytesIO(data), ReaderContext(path="_dump_3", rank_hint=3, host_hint="h")))
    assert b.events["rank"].to_list() == [9] and b.events["rank_source"].to_list() == ["record"]
    # a scheduled entry is not a warning by itself (it was WARN: 12-26 warnings per rank of noise)
    assert b.events["host"].to_list() == ["h"] and b.events["level"].to_list() == ["INFO"]
    assert str(b.events["timestamp"][0]) == "2023-11-14 22:13:20+00:00"


def test_malformed_entries_are_rejected_not_fatal():
    data = pickle.dumps(_dump([_entry(1), "junk", _entry(2)], status={"1": {"last_enqueued_collective": 2,
                                                                         "last_completed_collective": 1}}))
    b = next(fr.read_flight_recorder("d", io.BytesIO(data), ReaderContext(path="d", rank_hint=None, host_hint=None)))
    assert b.lines == 4 and b.rejects["line"].to_list() == [2]
    assert b.events["line"].to_list() == [1, 3, 4] and b.events["rank_source"].to_list() == ["none"] * 3
    status = b.events.filter(pl.col("event") == "PG_STATUS").row(0, named=True)
    x = json.loads(status["extra"])
    assert (status["process_group"], status["seq"], x["last_completed"], x["pg_ranks"]) == ("7", 2, 1, [0, 1, 2, 3])
    assert x["dump"]["version"] == "2.9"


def test_missing_ranks_rules():
    # every rank completed #9 and waits in #10
    level = {r: _dump([_entry(9, state="completed"), _entry(10)]) for r in range(4)}
    assert fr.missing_ranks(level) == {}
    behind = dict(level)
    behind[2] = _dump([_entry(9, state="completed")])      # never issued #10
    assert fr.missing_ranks(behind) == {"7": [2]}
    silent = dict(level)
    silent[3] = _dump([])          # enqueued nothing in the group the others wait in
    assert fr.missing_ranks(silent) == {"7": [3]}
    # pg_status (mapped through the rank's own entries) counts as having joined
    caught_up = dict(behind)
    caught_up[2] = _dump([_entry(9, pg_id=4, state="completed")], status={"4": {"last_enqueued_collective": 10}})
    assert fr.missing_ranks(caught_up) == {}
    # a group whose collectives all completed holds nobody
    done = {r: _dump([_entry(10 if r else 9, state="completed")]) for r in range(4)}
    assert fr.missing_ranks(done) == {}
    # p2p entries do not advance collective_seq_id and are not judged
    p2p = dict(level)
    p2p[1] = _dump([_entry(9, state="completed"), _entry(10), _entry(11, p2p=True)])
    assert fr.missing_ranks(p2p) == {}
    # ranks without a dump are not judged
    partial = {0: level[0], 1: level[1], 2: behind[2]}
    assert fr.missing_ranks(partial) == {"7": [2]}


def test_missing_ranks_a_rank_that_issued_the_first_pending_collective_is_a_victim():
    """Ranks 0, 1, 3 went on to #11 (NCCL enqueues asynchronously); rank 2 issued #10, the group's
    first pending collective, and stopped there: it waits in #10 like them, nobody is behind.
    Rank 3 never issuing #10 is what makes a culprit (the old rule, below the highest, named 2)."""
    waits = {r: _dump([_entry(9, state="completed"), _entry(10), _entry(11)]) for r in range(4)}
    waits[2] = _dump([_entry(9, state="completed"), _entry(10)])
    assert fr.missing_ranks(waits) == {}
    waits[3] = _dump([_entry(9, state="completed")])
    assert fr.missing_ranks(waits) == {"7": [3]}
    # the rule itself: stuck at the lowest number nobody completed, above pg_status last_completed
    assert fr.stuck_at({0: 11, 1: 11, 2: 10, 3: 9}, {9}, {10, 11}) == (10, [3])
    assert fr.stuck_at({0: 11, 1: 11, 2: 10}, set(), {10, 11}, done_upto=10) == (11, [2])
    assert fr.stuck_at({0: 11, 1: 9}, {9, 11}, set()) is None


def _bomb(levels: int = 60) -> bytes:
    """Plain data only: one tuple shared `levels` deep through the pickle memo (2**levels leaves
    when walked as a tree, a few hundred bytes on disk)."""
    t: object = ("x",)
    for _ in range(levels):
        t = (t, t)
    return pickle.dumps({"entries": [_entry(1)], "version": "2.9", "pg_status": {"1": {"last_enqueued_collective": t}}},
                        protocol=4)


def test_memo_bomb_is_refused_fast():
    import time

    data = _bomb()
    assert len(data) < 2000
    t = time.perf_counter()
    with pytest.raises(ForensicsError, match="expands to more than"):
        fr.loads_dump(data)
    assert time.perf_counter() - t < 5


def test_deep_and_self_containing_values_are_refused():
    deep: object = []
    for _ in range(fr.MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(ForensicsError, match="deeper than"):
        fr.loads_dump(pickle.dumps({"entries": deep}))
    loop: list = []
    loop.append(loop)
    with pytest.raises(ForensicsError, match="contains itself"):
        fr.loads_dump(pickle.dumps({"entries": loop}))


def test_bad_dumps_are_rejects_of_their_file_and_the_ingest_goes_on(tmp_path):
    """One good dump, a memo bomb, a dump with a global, a truncated dump: the ingest keeps the
    good one's events and stores one reject per bad file with its reason (was: error[F101], no
    store; the bomb ran for minutes at 1.4 GB+)."""
    import forensics
    from forensics.store import open_store

    good = pickle.dumps(_dump([_entry(1), _entry(2, state="completed")], rank=0))
    (tmp_path / "_dump_0").write_bytes(good)
    (tmp_path / "_dump_1").write_bytes(_bomb())
    (tmp_path / "_dump_2").write_bytes(b"\x80\x04cos\nsystem\n(S'true'\ntR.")
    (tmp_path / "_dump_3").write_bytes(good[: len(good) // 2])
    s = forensics.ingest([str(tmp_path)], tmp_path.parent / (tmp_path.name + ".st"))
    assert s.events >= 2 and s.rejected == 3 and s.lines_read == s.events + s.rejected
    rj = open_store(tmp_path.parent / (tmp_path.name + ".st")).rejects().collect().sort("source_file")
    reasons = rj["reason"].to_list()
    assert all(r.startswith("flight recorder dump not read") for r in reasons)
    assert "expands to more than" in reasons[0] and "refused global os.system" in reasons[1]
    assert rj["raw_len"].to_list()[0] == len(_bomb()) and rj["line"].to_list() == [1, 1, 1]
