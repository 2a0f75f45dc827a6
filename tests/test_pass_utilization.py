"""The utilization pass: one rank's GPU idle while its peers are busy (rank 12 at 55% vs 95%)."""
from __future__ import annotations

from forensics.passes import utilization
from pass_helpers import Rows


def util_run(low: dict[int, float], ranks: int = 8, samples: int = 20, base: float = 96.0) -> Rows:
    rows = Rows()
    for i in range(samples):
        for r in range(ranks):
            rows.add(5.0 * i, r, "GPU_STATS", gpu_util=low.get(r, base))
    return rows


def test_one_rank_low_against_busy_peers() -> None:
    [f] = utilization.find(util_run({5: 55.0}).ctx())
    assert f.kind == "gpu_underutilized" and f.ranks == [5]
    assert f.evidence["gpu_util"] == 55 and f.evidence["peer_gpu_util"] == 96


def test_everyone_low_is_not_one_ranks_fault() -> None:
    assert utilization.find(util_run({}, base=42.0).ctx()) == []


def test_slightly_lower_rank_is_fine() -> None:
    assert utilization.find(util_run({2: 85.0}).ctx()) == []
