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


def test_a_phase_where_every_gpu_idles_together_blames_no_rank() -> None:
    """nvidia-smi logs of a real node: all 8 GPUs idle at start-up and shutdown, busy between.
    Against the run-wide median every rank looked under-utilised in those minutes."""
    rows = Rows()
    for i in range(60):
        busy = 10 <= i < 50
        for r in range(8):
            rows.add(5.0 * i, r, "GPU_STATS", gpu_util=(97.0 if busy else 0.0) + r * 0.1)
    assert utilization.find(rows.ctx()) == []


def test_one_rank_idle_while_peers_work_at_the_same_time_is_found() -> None:
    rows = Rows()
    for i in range(60):
        busy = 10 <= i < 50
        for r in range(8):
            idle = not busy or (r == 3 and 20 <= i < 40)
            rows.add(5.0 * i, r, "GPU_STATS", gpu_util=2.0 if idle else 97.0)
    [f] = utilization.find(rows.ctx())
    assert f.ranks == [3] and f.evidence["low_samples"] == 20
