"""The comm-bound pass: > 40% of step time in collectives — slow network vs waiting for a straggler."""
from __future__ import annotations

from forensics.passes import comm_bound
from pass_helpers import sync_run


def test_slow_network_for_everyone_is_job_wide() -> None:
    ctx = sync_run(ranks=8, transfer=lambda s: 1100.0 if s >= 10 else 150.0).ctx()
    [f] = comm_bound.find(ctx)
    assert f.evidence["mode"] == "network"
    assert f.ranks == list(range(8)) and f.victims == []
    assert f.evidence["comm_share"] > 0.5 and f.evidence["first_step"] == 10


def test_waiting_for_a_straggler_names_the_rank_waited_for() -> None:
    ctx = sync_run(compute=lambda r, s: 2000.0 if r == 1 else 800.0).ctx()
    [f] = comm_bound.find(ctx)
    assert f.evidence["mode"] == "waiting"
    assert f.ranks == [1] and f.victims == [0, 2, 3]


def test_below_forty_percent_is_fine() -> None:
    assert comm_bound.find(sync_run(transfer=lambda s: 300.0).ctx()) == []


def test_isolated_heavy_steps_are_not_an_episode() -> None:
    # every 10th step one rank checkpoints and the others wait: single steps, not a regime
    ctx = sync_run(steps=60, compute=lambda r, s: 3000.0 if (r == 0 and s % 10 == 9) else 800.0).ctx()
    assert comm_bound.find(ctx) == []


def test_waiting_for_random_ranks_is_noise_not_a_fault() -> None:
    ctx = sync_run(steps=40, compute=lambda r, s: 2000.0 if r == s % 4 else 800.0).ctx()
    [f] = comm_bound.find(ctx)
    assert f.severity == "INFO" and f.ranks == [] and f.evidence["mode"] == "waiting"


def test_a_few_waiting_steps_shorter_than_a_window_are_not_comm_bound() -> None:
    from forensics.passes import comm_bound
    from pass_helpers import sync_run

    # one rank held up for a burst of 5 steps of 40 (window 5: 4 of them inside an episode)
    slow = lambda r, s: 2400.0 if (r == 1 and 10 <= s < 15) else 300.0  # noqa: E731
    assert [f for f in comm_bound.find(sync_run(steps=40, compute=slow).ctx()) if f.ranks] == []
