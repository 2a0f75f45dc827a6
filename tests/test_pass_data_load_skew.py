"""The data-load-skew pass (seed 000 §4.4: rank 12 at 180 ms vs 20 ms, disk 40 MB/s vs 1.2 GB/s)."""
from __future__ import annotations

from forensics.passes import data_load_skew
from pass_helpers import EVERY, every, sync_run


def test_seed_rank12_case_scaled_down() -> None:
    ctx = sync_run(ranks=8, data=lambda r, s: 180.0 if r == 5 else 20.0,
                   disk=lambda r, s: 40.0 if r == 5 else 1200.0).ctx()
    [f] = data_load_skew.find(ctx)
    assert f.kind == "data_load_skew" and f.layer == "resource"
    assert f.ranks == [5] and f.victims == [0, 1, 2, 3, 4, 6, 7]
    assert 170 < f.evidence["data_load_ms"] < 190 and 19 < f.evidence["peer_data_load_ms"] < 21
    assert f.evidence["disk_read_mbps"] == 40 and f.evidence["peer_disk_read_mbps"] == 1200
    assert any(e.rank == 5 for e in f.lines)


def test_a_compute_straggler_is_not_data_skew() -> None:
    ctx = sync_run(compute=lambda r, s: 1400.0 if r == 2 else 800.0).ctx()
    assert data_load_skew.find(ctx) == []


def test_tiny_absolute_differences_do_not_count() -> None:
    # 0.6 ms vs 0.2 ms is 3x, but immaterial next to an 800 ms step
    ctx = sync_run(data=lambda r, s: 0.6 if r == 1 else 0.2).ctx()
    assert data_load_skew.find(ctx) == []


def test_late_onset_is_found_with_its_window() -> None:
    ctx = sync_run(steps=50, data=lambda r, s: 300.0 if (r == 3 and s >= 30) else 20.0).ctx()
    [f] = data_load_skew.find(ctx)
    assert f.ranks == [3] and f.evidence["skewed_steps"] == 20


def test_a_steady_slow_loader_is_named_when_ranks_log_different_steps() -> None:
    # ranks log every 1, 2, 3, 5 steps: a step logged by only two ranks has its median halfway
    # between them (never 2.5x below the slow one), so the slow rank's skewed steps are
    # scattered among its own rows and no episode forms; its median over its steps still is
    for r in (0, 1):
        ctx = every(sync_run(steps=40, data=lambda q, s, r=r: 420.0 if q == r else 20.0), EVERY).ctx()
        [f] = data_load_skew.find(ctx)
        assert f.ranks == [r] and f.victims == [q for q in range(4) if q != r]
        assert f.evidence["compared"].startswith("per-rank medians")
        assert 380 < f.evidence["excess_ms"] < 420 and 19 < f.evidence["peer_data_load_ms"] < 21
        assert {e.rank for e in f.lines} >= {r} and len({e.rank for e in f.lines}) == 3 and all(e.line > 0 for e in f.lines)


def test_ranks_logging_different_steps_without_a_slow_loader_have_no_skew() -> None:
    assert data_load_skew.find(every(sync_run(steps=40), EVERY).ctx()) == []
    # a compute straggler loads like the others
    assert data_load_skew.find(every(sync_run(steps=40, compute=lambda r, s: 1400.0 if r == 1 else 800.0),
                                     EVERY).ctx()) == []
    # scattered slow loads on random ranks (a loaded host) do not move a rank's median
    noise = lambda r, s: 420.0 if (s % 7 == 0 and r == (s // 7) % 4) else 20.0  # noqa: E731
    assert data_load_skew.find(every(sync_run(steps=60, data=noise), EVERY).ctx()) == []
    # a rank slow in a third of its steps: its median is its peers' (an episode is the per-step
    # comparison's to find)
    slow = lambda r, s: 420.0 if (r == 0 and s < 13) else 20.0  # noqa: E731
    assert all("compared" not in f.evidence for f in data_load_skew.find(every(sync_run(steps=40, data=slow), EVERY).ctx()))


def test_ranks_logging_the_same_steps_are_judged_per_step_only() -> None:
    for log in ({r: 1 for r in range(4)}, {r: 4 for r in range(4)}):
        ctx = every(sync_run(steps=40, data=lambda r, s: 420.0 if r == 1 else 20.0), log).ctx()
        [f] = data_load_skew.find(ctx)
        assert f.ranks == [1] and "compared" not in f.evidence
