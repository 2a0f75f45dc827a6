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


def test_on_many_hosts_the_title_names_the_farthest_and_counts_the_rest() -> None:
    # 16 hosts, each 20 ms further ahead than the one before: offsets from -150 to +150 ms
    rows = sync_run(Rows(host=lambda r: f"node{r // 2}", skew=lambda r: 0.02 * (r // 2)), ranks=32, steps=20)
    [f] = clock_skew.find(rows.ctx())
    off = f.evidence["offsets_ms"]
    assert len(off) > clock_skew.TITLE_HOSTS           # every host stays in the evidence
    far = sorted(off, key=lambda h: -abs(off[h]))[:clock_skew.TITLE_HOSTS]
    named = [h for h in off if f"{h} " in f.title]
    assert sorted(named) == sorted(far)                # the farthest by |offset|, whatever their sign
    rest = len(off) - clock_skew.TITLE_HOSTS
    nearest_left = max(abs(off[h]) for h in off if h not in far)
    assert f"and {rest} more hosts within ±{nearest_left:.0f} ms" in f.title
