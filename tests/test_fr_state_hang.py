"""Flight Recorder: every rank issued the collective the group is stuck in — who held it up?

Facts (torch/csrc/distributed/c10d FlightRecorder, ProcessGroupNCCL): an entry is `scheduled`
when the CPU enqueued it, `started` when its start event fired on the GPU (recorded only when
start events exist: TORCH_NCCL_ENABLE_TIMING, desync debug), `completed` when its end event did;
pg_status carries last_enqueued / last_started / last_completed_collective. A rank whose entry
for the stuck collective is still `scheduled` while its peers' `started` never reached the kernel
(its stream is busy with earlier work): the peers wait in the kernel for it. PyTorch's analyser
calls that COLLECTIVE_STATE_MISMATCH. When every entry is `scheduled` (timing off, the default)
the dumps cannot tell, and nobody is named.

Dumps built by tests/fr_dumps.py (the recorder's own format); world sizes and ranks varied.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from forensics import fr_table
from forensics.ingest import flight_recorder as fr
from forensics.passes import diagnose
from fr_dumps import make_dumps, write_set


def all_issued(world: int, n: int, states: dict[int, str]) -> dict[int, dict]:
    """Every rank issued #n of the world group and nobody completed it; rank r's entry for it is in
    state states.get(r, "started"), its pg_status saying the same (timing on: last_started)."""
    dumps = make_dumps(world, n)
    for r, d in dumps.items():
        st = states.get(r, "started")
        for e in d["entries"]:
            if e["process_group"][0] == "0" and e["collective_seq_id"] == n:
                e["state"], e["retired"], e["time_discovered_completed_ns"] = st, False, None
                e["time_discovered_started_ns"] = None if st == "scheduled" else e["time_created_ns"] + 1000
        d["pg_status"]["0"].update(last_completed_collective=n - 1,
                                   last_started_collective=n if st == "started" else n - 1)
    return dumps


@pytest.mark.parametrize("world,n,late", [(4, 9, 2), (8, 12, 5), (16, 30, 0), (16, 30, 15)])
def test_the_rank_that_never_started_the_stuck_collective_is_named(tmp_path: Path, world: int, n: int,
                                                                   late: int) -> None:
    dumps = all_issued(world, n, {late: "scheduled"})
    assert fr.missing_ranks(dumps) == {"0": [late]}
    write_set(tmp_path / "d", dumps)
    t = fr_table.build([str(tmp_path / "d")])
    head = t.first_stalled()
    assert head is not None and (head.pg, head.seq, head.problem, head.odd) == ("0", n, "state", [late])
    report = diagnose([str(tmp_path / "d")])
    [f] = [f for f in report.findings if f.rule == "pass.stuck_collective"]
    assert f.ranks == [late] and f.victims == [r for r in range(world) if r != late]
    assert f.basis == "never_joined" and "never started" in f.title
    rc = report.root_cause
    assert rc is not None and (rc.kind, rc.ranks) == ("hang", [late])


def test_the_least_advanced_state_is_behind_whatever_the_majority(tmp_path: Path) -> None:
    """Only rank 0's GPU reached the collective: ranks 1-3 never started it. The table's majority
    rule would have called rank 0 the odd one."""
    dumps = all_issued(4, 10, {1: "scheduled", 2: "scheduled", 3: "scheduled"})
    assert fr.missing_ranks(dumps) == {"0": [1, 2, 3]}
    write_set(tmp_path / "d", dumps)
    head = fr_table.build([str(tmp_path / "d")]).first_stalled()
    assert head is not None and head.problem == "state" and head.odd == [1, 2, 3]


def test_when_every_entry_is_scheduled_the_dumps_name_nobody(tmp_path: Path) -> None:
    """Timing off (the default): an entry goes from scheduled to completed, so every rank's entry
    for the stuck collective reads `scheduled` and nothing says whose GPU is behind."""
    dumps = all_issued(8, 12, {r: "scheduled" for r in range(8)})
    assert fr.missing_ranks(dumps) == {}
    assert fr.stuck_at({r: 12 for r in range(8)}, set(range(1, 12)), {12}, 11,
                       {r: {12: "scheduled"} for r in range(8)}) == (12, [])
    write_set(tmp_path / "d", dumps)
    assert fr_table.build([str(tmp_path / "d")]).first_stalled() is None
    assert not [f for f in diagnose([str(tmp_path / "d")]).findings if f.rule == "pass.stuck_collective"]


def test_a_rank_behind_in_number_is_still_named_before_any_state() -> None:
    """A member that never issued the collective is the culprit; the states of those who did are
    not weighed then (rank 3 behind; rank 1's entry scheduled among started ones)."""
    got = fr.stuck_at({0: 7, 1: 7, 2: 7, 3: 6}, set(range(1, 7)), {7}, 6,
                      {0: {7: "started"}, 1: {7: "scheduled"}, 2: {7: "started"}})
    assert got == (7, [3])
