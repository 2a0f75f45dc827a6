"""The stuck-collective pass: ranks behind in a process group's collective_seq_id (Flight Recorder)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from forensics.passes import diagnose, stuck_collective
from pass_helpers import Rows

REALDATA = Path(__file__).resolve().parents[2] / "shared" / "realdata" / "flight_recorder"


def fr_rows(last: dict[int, int], members: list[int], state: str = "scheduled", op: str = "nccl:all_to_all") -> Rows:
    rows = Rows()
    for r in members:
        if r in last:
            for seq in range(last[r] - 2, last[r] + 1):
                rows.add(float(seq), r, "COLLECTIVE", level="WARN", file=f"_dump_{r}", process_group="74", seq=seq,
                         collective=op,
                         extra=json.dumps({"state": state if seq == last[r] else "completed", "is_p2p": False}))
        rows.add(100.0, r, "PG_STATUS", file=f"_dump_{r}", process_group="74", seq=last.get(r),
                 extra=json.dumps({"pg_ranks": members}))
    return rows


def test_rank_behind_in_the_stuck_group() -> None:
    [f] = stuck_collective.find(fr_rows({8: 20538, 9: 20538, 10: 20536, 11: 20538}, [8, 9, 10, 11]).ctx())
    assert f.kind == "hang" and f.ranks == [10] and f.victims == [8, 9, 11]
    assert f.evidence["groups"] == {"74": {"missing": [10], "seq": 20538}}


def test_a_member_with_no_entry_in_the_group_is_behind() -> None:
    [f] = stuck_collective.find(fr_rows({8: 45267, 10: 45267}, [8, 9, 10]).ctx())
    assert f.ranks == [9]


def test_completed_groups_hold_nobody() -> None:
    assert stuck_collective.find(fr_rows({8: 10, 9: 12}, [8, 9], state="completed").ctx()) == []


@pytest.mark.parametrize("case, missing", [("gpu_error_1st", [12]), ("lock_gil_1st", [9, 14])])
def test_real_flight_recorder_dumps(case: str, missing: list[int], tmp_path: Path, monkeypatch) -> None:
    """../shared/realdata: 16-rank fault injections; reference_output.txt names the missing ranks."""
    d = REALDATA / case
    if not d.is_dir():
        pytest.skip("../shared/realdata is not available")
    monkeypatch.setenv("FORENSICS_CACHE", str(tmp_path))
    report = diagnose(sorted(str(p) for p in d.glob("_dump_*")))   # not the truth files beside them
    assert report.root_cause.kind == "hang" and report.root_cause.ranks == missing


def sized(rows: Rows, odd: int, seq: int) -> Rows:
    for row in rows.rows:
        if row["event"] == "COLLECTIVE":
            row["tensor_size_mb"] = 80.0 if (row["rank"] == odd and row["seq"] == seq) else 40.0
    return rows


def test_same_number_different_allreduce_size_is_the_odd_rank() -> None:
    rows = sized(fr_rows({8: 500, 9: 500, 10: 500, 11: 500}, [8, 9, 10, 11], op="nccl:all_reduce"), 9, 500)
    [f] = stuck_collective.find(rows.ctx())
    assert f.ranks == [9] and f.victims == [8, 10, 11]


def test_all_to_all_sizes_differ_by_design() -> None:
    rows = sized(fr_rows({8: 500, 9: 500, 10: 500, 11: 500}, [8, 9, 10, 11]), 9, 500)
    assert stuck_collective.find(rows.ctx()) == []
