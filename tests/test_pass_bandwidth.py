"""The bandwidth pass: one rank's PCIe/NVLink below 30% of its peers'."""
from __future__ import annotations

from forensics.passes import bandwidth
from pass_helpers import Rows


def link_run(slow: dict[int, float], ranks: int = 8) -> Rows:
    rows = Rows()
    for i in range(10):
        for r in range(ranks):
            rows.add(5.0 * i, r, "GPU_STATS", pcie_mbps=slow.get(r, 24000.0))
    return rows


def test_degraded_link_on_one_rank() -> None:
    [f] = bandwidth.find(link_run({4: 5000.0}).ctx())
    assert f.kind == "low_bandwidth" and f.layer == "physical" and f.ranks == [4]
    assert f.evidence["link"] == "PCIe" and f.evidence["mbps"] == 5000


def test_half_of_the_job_low_is_not_one_link() -> None:
    assert bandwidth.find(link_run({r: 5000.0 for r in range(4)}).ctx()) == []
