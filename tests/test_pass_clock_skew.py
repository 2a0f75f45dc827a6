"""The clock-skew pass: host clock offsets measured from collective return times."""
from __future__ import annotations

from forensics.passes import clock_skew
from pass_helpers import Rows, sync_run


def test_clock_skew_is_reported() -> None:
    rows = sync_run(Rows(host=lambda r: f"node{r // 2}", skew=lambda r: 0.25 if r >= 2 else 0.0), steps=20)
    [f] = clock_skew.find(rows.ctx())
    assert f.kind == "clock_skew" and f.severity == "INFO"
    assert f.evidence["offsets_ms"] == {"node0": -125.0, "node1": 125.0}
    assert clock_skew.find(sync_run(steps=20).ctx()) == []
