"""The hot-GPU pass: one GPU clearly hotter than its peers under load, not throttled — an INFO
note in the physical layer, never a root cause."""
from __future__ import annotations

from forensics.passes import diagnose_context, hot_gpu
from pass_helpers import Rows


def gpus(temps: dict[int, float], samples: int = 20, idle: dict[int, float] | None = None, **per_rank: dict) -> Rows:
    """GPU_STATS of each rank every 5 s at `temps[r]` while busy; `idle` ranks' extra idle samples."""
    rows = Rows()
    for i in range(samples):
        for r, t in temps.items():
            g = {"gpu_util": 97.0, "temp_c": t, "sm_clock_mhz": 1980.0, "throttle_reasons": 0}
            g.update(per_rank.get(f"r{r}", {}))
            rows.add(5.0 * i, r, "GPU_STATS", **g)
    for r, t in (idle or {}).items():
        for i in range(samples):
            rows.add(200.0 + 5.0 * i, r, "GPU_STATS", gpu_util=0.0, temp_c=t, sm_clock_mhz=210.0, throttle_reasons=1)
    return rows


def test_the_clearly_hotter_gpu_gets_a_note() -> None:
    [f] = hot_gpu.find(gpus({0: 62.0, 1: 72.0, 2: 63.0, 3: 61.0, 4: 64.0}).ctx())
    assert (f.kind, f.layer, f.severity, f.ranks) == ("thermal_throttling", "physical", "INFO", [1])
    assert f.evidence["throttled"] is False and f.evidence["temp_c_median"] == 72 and f.evidence["margin_c"] == 9
    assert f.evidence["temp_c_median_per_rank"]["3"] == 61 and f.lines
    assert "not throttled" in f.title


def test_a_few_degrees_is_the_spread_of_a_node() -> None:
    assert hot_gpu.find(gpus({0: 62.0, 1: 66.0, 2: 63.0, 3: 61.0}).ctx()) == []


def test_idle_samples_do_not_make_a_gpu_cool() -> None:
    # rank 0 idles at 35 °C for a while after the others stopped: under load it is as warm as they are
    assert hot_gpu.find(gpus({0: 64.0, 1: 65.0, 2: 63.0}, idle={1: 35.0, 2: 34.0}).ctx()) == []


def test_a_throttled_gpu_is_left_to_the_thermal_pass() -> None:
    rows = gpus({0: 64.0, 1: 88.0, 2: 63.0, 3: 65.0}, r1={"sm_clock_mhz": 1300.0, "throttle_reasons": 0x40})
    assert hot_gpu.find(rows.ctx()) == []


def test_two_gpus_have_no_median_to_compare_with() -> None:
    assert hot_gpu.find(gpus({0: 60.0, 1: 75.0}).ctx()) == []


def test_a_note_is_never_the_root_cause() -> None:
    report = diagnose_context(gpus({0: 62.0, 1: 74.0, 2: 63.0, 3: 61.0}).ctx())
    assert report.root_cause is None
    assert [f.rule for f in report.findings if f.layer == "physical"] == ["pass.hot_gpu"]
