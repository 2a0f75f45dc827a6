"""The thermal pass: HW_THERMAL is 0x40; heat alone, or a power cap, is not thermal throttling."""
from __future__ import annotations

from forensics.passes import thermal
from pass_helpers import Rows


def gpu_run(hot: dict[int, dict] | None = None, samples: int = 20, ranks: int = 4) -> Rows:
    rows = Rows()
    for i in range(samples):
        for r in range(ranks):
            g = {"gpu_util": 97.0, "temp_c": 65.0, "sm_clock_mhz": 1980.0, "throttle_reasons": 0}
            if hot and r in hot and i >= 10:
                g.update(hot[r])
            rows.add(5.0 * i, r, "GPU_STATS", **g)
    return rows


def test_hw_thermal_bit_with_clock_drop_and_util_effect() -> None:
    ctx = gpu_run({6 % 4: {"temp_c": 92.0, "sm_clock_mhz": 1200.0, "throttle_reasons": 0x40, "gpu_util": 45.0}}).ctx()
    [f] = thermal.find(ctx)
    assert f.kind == "thermal_throttling" and f.layer == "physical" and f.ranks == [2]
    assert f.evidence["throttle_reasons"] == ["HW_THERMAL"]
    assert f.evidence["sm_clock_mhz"] == 1200 and f.evidence["peer_sm_clock_mhz"] == 1980
    assert f.evidence["gpu_util"] == 45 and f.evidence["peer_gpu_util"] == 97
    assert f.evidence["throttled_samples"] == 10


def test_power_cap_bit_0x4_is_not_thermal() -> None:
    ctx = gpu_run({1: {"throttle_reasons": 0x4, "sm_clock_mhz": 1700.0}}).ctx()
    assert thermal.find(ctx) == []


def test_hot_at_full_clock_is_not_throttling_yet() -> None:
    ctx = gpu_run({1: {"temp_c": 88.0}}).ctx()
    assert thermal.find(ctx) == []


def test_hot_with_clock_drop_counts_without_reason_bits() -> None:
    ctx = gpu_run({3: {"temp_c": 91.0, "sm_clock_mhz": 1300.0}}).ctx()
    [f] = thermal.find(ctx)
    assert f.ranks == [3] and f.evidence["throttle_reasons"] == []


def test_decode_reasons() -> None:
    assert thermal.decode_reasons(0x40 | 0x4) == ["SW_POWER_CAP", "HW_THERMAL"]
    assert thermal.decode_reasons(None) == []
