"""The rank-lag pass (seed 003 case 2: "[Rank 3] Step 2339" while the others are at 2340)."""
from __future__ import annotations

from forensics.passes import rank_lag
from pass_helpers import Rows


def steps(last: dict[int, int], first: int = 2330, drop_last_train: int | None = None) -> Rows:
    rows = Rows()
    for r, end in last.items():
        for s in range(first, end + 1):
            rows.add(float(s - first), r, "DATA_LOAD_TIME", step=s, data_load_ms=20.0)
            if not (r == drop_last_train and s == end):
                rows.add(float(s - first) + 0.9, r, "TRAIN_STEP", step=s, loss=2.0, step_time_ms=1000.0)
    return rows


def test_seed_case_rank3_one_step_behind() -> None:
    [f] = rank_lag.find(steps({0: 2340, 1: 2340, 2: 2340, 3: 2339}).ctx())
    assert f.kind == "rank_lag" and f.ranks == [3]
    assert f.evidence["last_step"]["3"] == 2339 and f.evidence["max_lag_steps"] == 1
    assert any(e.rank == 3 for e in f.lines)


def test_a_lost_last_line_does_not_fake_a_lag() -> None:
    # rank 1's final TRAIN_STEP line was cut off, but its DATA_LOAD_TIME for that step is there
    assert rank_lag.find(steps({0: 2340, 1: 2340, 2: 2340}, drop_last_train=1).ctx()) == []


def test_ranks_in_step_have_no_lag() -> None:
    assert rank_lag.find(steps({0: 2340, 1: 2340}).ctx()) == []
