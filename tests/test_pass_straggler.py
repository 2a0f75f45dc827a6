"""The straggler pass: the slow rank computes longest and waits least; the waiters are victims."""
from __future__ import annotations

from forensics.passes import straggler
from pass_helpers import EVERY, every, sync_run


def test_names_the_slow_rank_not_the_ranks_that_wait() -> None:
    ctx = sync_run(compute=lambda r, s: 1200.0 if (r == 2 and s >= 5) else 800.0).ctx()
    [f] = straggler.find(ctx)
    assert f.kind == "straggler" and f.ranks == [2]
    assert f.victims == [0, 1, 3]
    # the victims' waits (~400 ms) are the symptom; the straggler itself barely waits
    assert f.evidence["victim_wait_ms"] > 350 and f.evidence["wait_ms"] < 5
    assert f.evidence["first_step"] == 5
    assert all(e.source_file.startswith("rank_") and e.line > 0 for e in f.lines)


def test_slow_data_loading_is_not_a_straggler() -> None:
    # rank 1 arrives late because of its input pipeline: its compute is normal
    ctx = sync_run(data=lambda r, s: 420.0 if r == 1 else 20.0).ctx()
    assert straggler.find(ctx) == []


def test_scattered_slow_steps_on_random_ranks_are_noise() -> None:
    # a loaded host preempts a different rank now and then: no rank is slow for an episode
    ctx = sync_run(steps=60, compute=lambda r, s: 1300.0 if (s % 7 == 0 and r == (s // 7) % 4) else 800.0).ctx()
    assert straggler.find(ctx) == []


def test_without_waiting_peers_there_is_no_straggler() -> None:
    # overlapped reduction: nobody waits for the late rank (that is gradient skew's question)
    ctx = sync_run(overlap=True, compute=lambda r, s: 1200.0 if r == 3 else 800.0).ctx()
    assert straggler.find(ctx) == []


def test_wait_estimated_from_comm_when_wait_is_not_logged() -> None:
    ctx = sync_run(log_wait=False, compute=lambda r, s: 1300.0 if r == 0 else 800.0).ctx()
    [f] = straggler.find(ctx)
    assert f.ranks == [0] and f.victims == [1, 2, 3]


def test_healthy_run_has_no_straggler() -> None:
    assert straggler.find(sync_run().ctx()) == []


def test_a_few_slow_steps_shorter_than_a_window_are_not_a_straggler() -> None:
    # a real healthy 5-rank run on 2 shared cores had one rank slow for a burst of steps: a burst
    # of 5 of 40 (window 5) leaves only 4 steps inside an episode (>= 75% of a window)
    slow = lambda r, s: 1400.0 if (r == 1 and 10 <= s < 15) else 800.0  # noqa: E731
    assert straggler.find(sync_run(steps=40, compute=slow).ctx()) == []
    # a rank slow long enough for an episode of a whole window is a straggler
    slow = lambda r, s: 1400.0 if (r == 1 and 10 <= s < 16) else 800.0  # noqa: E731
    assert [f.ranks for f in straggler.find(sync_run(steps=40, compute=slow).ctx())] == [[1]]


def test_a_steady_straggler_is_named_when_ranks_log_different_steps() -> None:
    # rank 3 logs every 5th step and computes 35% longer throughout; steps logged by all four
    # ranks are 0 and 30 only, so the per-step comparison has nothing to judge over a window
    ctx = every(sync_run(steps=40, compute=lambda r, s: 1080.0 if r == 3 else 800.0), EVERY).ctx()
    [f] = straggler.find(ctx)
    assert f.ranks == [3] and f.victims == [0, 1, 2]
    assert f.evidence["compared"].startswith("per-rank medians")
    assert 250 < f.evidence["excess_ms"] < 300 and f.evidence["wait_ms"] < 5
    assert {e.rank for e in f.lines} >= {3, 0} and all(e.line > 0 for e in f.lines)


def test_ranks_logging_different_steps_without_a_slow_rank_have_no_straggler() -> None:
    assert straggler.find(every(sync_run(steps=40), EVERY).ctx()) == []
    # scattered slow steps on random ranks (a loaded host) do not move a rank's median
    noise = lambda r, s: 1300.0 if (s % 7 == 0 and r == (s // 7) % 4) else 800.0  # noqa: E731
    assert straggler.find(every(sync_run(steps=60, compute=noise), EVERY).ctx()) == []
    # a rank slow in its input pipeline computes like the others
    assert straggler.find(every(sync_run(steps=40, data=lambda r, s: 420.0 if r == 2 else 20.0), EVERY).ctx()) == []


def test_a_rank_slow_in_a_third_of_its_steps_is_not_steady() -> None:
    # the per-rank medians judge a rank slow only when most of its logged steps are; a shorter
    # episode is the per-step comparison's to find (a window of steps logged by >= 2 ranks)
    slow = lambda r, s: 1200.0 if (r == 2 and s < 13) else 800.0  # noqa: E731
    assert straggler.steady_ranks(_steps(every(sync_run(steps=40, compute=slow), EVERY).ctx())) \
        .filter("slow").is_empty()


def test_ranks_logging_the_same_steps_are_left_to_the_per_step_comparison() -> None:
    ctx = sync_run(steps=40, compute=lambda r, s: 1080.0 if r == 3 else 800.0).ctx()
    assert straggler.steady_ranks(_steps(ctx)).is_empty()
    ctx = every(sync_run(steps=40, compute=lambda r, s: 1080.0 if r == 3 else 800.0), {r: 4 for r in range(4)}).ctx()
    assert straggler.steady_ranks(_steps(ctx)).is_empty()


def _steps(ctx):
    return ctx.with_groups(ctx.steps.select("rank", "step", "compute_ms", "wait_est"))
