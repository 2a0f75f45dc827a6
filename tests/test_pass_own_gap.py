"""The own-gap pass: the rank whose stalls made the others wait, judged by the total it caused,
and what it logged (any event name, any duration key) while they waited."""
from __future__ import annotations

import json

import pytest

from forensics.passes import data_load_skew, diagnose_context, own_gap, straggler
from pass_helpers import EVERY, T0, Rows, every, sync_run

STALLS = (12, 27)


def _run(log_it: bool = True, key: str = "elapsed_s", rank: int = 0, stalls=STALLS, ms: float = 8000.0) -> Rows:
    rows = Rows()
    sync_run(rows, steps=40, compute=lambda r, s: 800.0 + (ms if r == rank and s in stalls else 0.0))
    if log_it:
        for s in stalls:
            # the rank's own line at the end of its stall, just before its gradients are ready
            ready = [x for x in rows.rows if x["rank"] == rank and x["event"] == "GRAD_READY" and x["step"] == s][0]
            val = ms if key.endswith("_ms") else ms / 1000
            rows.add((ready["timestamp"] - T0).total_seconds() - 0.01, rank, "sample_generation", step=s,
                     message="generated 8 samples", extra=json.dumps({key: val}))
    return rows


def test_two_stalls_name_the_rank_and_what_it_was_doing() -> None:
    [f] = own_gap.find(_run().ctx())
    assert f.ranks == [0] and f.basis == "own_gap" and f.kind == "straggler"
    assert f.victims == [1, 2, 3]
    assert "8.0 s in sample_generation" in f.title and "ranks 1–3 waited" in f.title
    assert [s["step"] for s in f.evidence["stalls"]] == list(STALLS)
    assert all(s["event"] == "sample_generation" and s["key"] == "elapsed_s" for s in f.evidence["stalls"])
    assert f.evidence["caused_wait_ms"] > 15000 and f.evidence["share"] > 0.9
    assert any(x.text and "sample_generation" in x.text for x in f.lines)


def test_a_duration_in_milliseconds_is_read_as_such() -> None:
    [f] = own_gap.find(_run(key="took_ms").ctx())
    assert all(abs(s["duration_ms"] - 8000.0) < 1 for s in f.evidence["stalls"])


def test_a_silent_stall_is_reported_as_silence() -> None:
    [f] = own_gap.find(_run(log_it=False, rank=2).ctx())
    assert f.ranks == [2] and "logged nothing of its own" in f.title


def test_stalls_spread_over_every_rank_name_nobody() -> None:
    rows = Rows()
    sync_run(rows, steps=40, compute=lambda r, s: 800.0 + (3000.0 if s in (5, 15, 25, 35) and r == s % 4 else 0.0))
    assert own_gap.find(rows.ctx()) == []


def test_a_healthy_run_names_nobody() -> None:
    assert own_gap.find(sync_run(steps=40).ctx()) == []


def test_it_is_the_root_cause_with_its_cost() -> None:
    rep = diagnose_context(_run().ctx())
    assert rep.root_cause.kind == "straggler" and rep.root_cause.ranks == [0] and rep.root_cause.basis == "own_gap"
    assert rep.findings[0].cost["seconds"] > 15


def test_without_collective_times_the_step_times_name_the_rank() -> None:
    # only TRAIN_STEP lines: rank 2 evaluates for 6 s between steps 9/10 and 24/25; its peers'
    # next step holds the wait (they block in the all-reduce), its own does not
    rows = Rows()
    t = {r: 0.0 for r in range(4)}
    for s in range(40):
        stall = s in (10, 25)
        for r in range(4):
            if stall and r == 2:
                rows.add(t[r] + 6.0, r, "eval.run", step=s, message="eval done", extra=json.dumps({"secs": 6.0}))
            dur = 0.5 + (6.0 if stall else 0.0)
            t[r] += dur
            rows.add(t[r], r, "TRAIN_STEP", step=s, step_time_ms=(dur - (6.0 if stall and r == 2 else 0.0)) * 1000)
    [f] = own_gap.find(rows.ctx())
    assert f.ranks == [2] and "6.0 s in eval.run" in f.title


def test_stalls_of_a_few_step_times_count_too() -> None:
    """An evaluation of 2.5 s every few steps of 0.8 s (about three steps' time, twice) costs the
    job as much as one long stall: a stall is >= 1 s and >= STALL_STEPS median steps, not 5."""
    [f] = own_gap.find(_run(ms=2500.0, key="duration_ms").ctx())
    assert f.ranks == [0] and "2.5 s in sample_generation" in f.title


def test_a_rank_late_a_little_at_most_steps_is_judged_by_the_total_it_caused() -> None:
    # 100 ms more compute on 800 ms steps (under the straggler pass's 20%), at every step: no
    # stall of seconds, yet nearly all the run's waiting is for rank 1
    rows = Rows()
    sync_run(rows, steps=40, compute=lambda r, s: 800.0 + (100.0 if r == 1 else 0.0))
    assert straggler.find(rows.ctx()) == []
    [f] = own_gap.find(rows.ctx())
    assert f.kind == "straggler" and f.ranks == [1] and f.basis == "own_gap" and f.victims == [0, 2, 3]
    assert f.evidence["field"] == "compute_ms" and f.evidence["share"] > 0.9
    assert "computing per step" in f.title and "ranks 0,2,3" in f.title
    assert f.lines and f.lines[0].rank == 1


def test_a_rank_late_by_its_input_at_most_steps_is_data_load_skew() -> None:
    # 220 ms loading vs 100 ms (2.2x: under data_load_skew's 2.5x), at every step
    rows = Rows()
    sync_run(rows, steps=40, data=lambda r, s: 100.0 + (120.0 if r == 2 else 0.0))
    assert data_load_skew.find(rows.ctx()) == []
    [f] = own_gap.find(rows.ctx())
    assert f.kind == "data_load_skew" and f.ranks == [2] and f.evidence["field"] == "data_load_ms"
    assert "loading its input" in f.title


def test_lateness_that_moves_between_ranks_names_nobody() -> None:
    # every step another rank is the last by 100 ms: the waiting is spread
    rows = Rows()
    sync_run(rows, steps=40, compute=lambda r, s: 800.0 + (100.0 if r == (s * 7) % 4 else 0.0))
    assert own_gap.find(rows.ctx()) == []


def test_a_late_arrival_at_the_first_step_is_warm_up_not_a_stall() -> None:
    # rank 3 reaches the first collective 3 s after its peers (its start-up), then keeps pace
    rows = Rows()
    sync_run(rows, steps=40, compute=lambda r, s: 800.0 + (3000.0 if r == 3 and s == 0 else 0.0))
    assert own_gap.find(rows.ctx()) == []


def test_a_rank_the_straggler_pass_names_is_left_to_it() -> None:
    rows = Rows()
    sync_run(rows, steps=40, compute=lambda r, s: 800.0 + (600.0 if r == 1 else 0.0))
    assert [f.ranks for f in straggler.find(rows.ctx())] == [[1]]
    assert own_gap.find(rows.ctx()) == []


def test_a_stall_in_its_own_input_is_data_load_skew_and_in_its_compute_a_straggler() -> None:
    # one 7 s stall of rank 1's data loader (its own data_load_ms says so, nothing else logged)
    rows = Rows()
    sync_run(rows, steps=30, data=lambda r, s: 20.0 + (7000.0 if (r, s) == (1, 12) else 0.0))
    [f] = own_gap.find(rows.ctx())
    assert f.kind == "data_load_skew" and f.ranks == [1] and f.evidence["phase"] == "data_load_ms"
    assert "loading its input" in f.title and "step 12" in f.title
    # the same stall in its compute stays a straggler, with the phase said
    rows = Rows()
    sync_run(rows, steps=30, compute=lambda r, s: 800.0 + (7000.0 if (r, s) == (1, 12) else 0.0))
    [f] = own_gap.find(rows.ctx())
    assert f.kind == "straggler" and f.evidence["phase"] == "compute_ms" and "computing" in f.title


def test_a_weak_straggler_in_a_short_run_is_judged_by_its_share_of_the_run_not_seconds() -> None:
    # 35 ms more compute on ~300 ms steps (12%: under the straggler pass's 20%), 30 steps: it
    # causes about 1 s of waiting in all — under any fixed number of seconds — yet 10% of the run,
    # and it is the last to arrive at every step (no chance of that among four ranks)
    rows = Rows()
    sync_run(rows, steps=30, compute=lambda r, s: 250.0 + (35.0 if r == 1 else 0.0), transfer=lambda s: 20.0)
    assert straggler.find(rows.ctx()) == []
    [f] = own_gap.find(rows.ctx())
    assert f.kind == "straggler" and f.ranks == [1] and f.victims == [0, 2, 3]
    assert f.evidence["caused_wait_ms"] < 2000 and f.evidence["share_of_run"] > 0.05
    assert f.evidence["steps_waited_for"] == 29 and f.evidence["chance"] < 1e-10


def test_two_ranks_taking_turns_to_be_late_name_nobody() -> None:
    # of two ranks, rank 0 is the later one at two steps in three (by 40 ms), rank 1 at the
    # third (by 15 ms): rank 0 causes most of the waiting and 8% of the run, but being the later
    # of two at 19 of 29 steps is what chance does (p = 0.07 either way round)
    rows = Rows()
    sync_run(rows, ranks=2, steps=30, transfer=lambda s: 20.0,
             compute=lambda r, s: 250.0 + (40.0 if r == 0 and s % 3 else 15.0 if r == 1 and not s % 3 else 0.0))
    assert own_gap.find(rows.ctx()) == []
    per = own_gap.caused(rows.ctx().steps)
    per = per.filter(per["step"] > 0)
    mine = per.filter(per["rank"] == 0)["caused_ms"].sum()
    assert mine > own_gap.SPREAD_SHARE * per["caused_ms"].sum() and mine > own_gap.SPREAD_WALL * per["step_ms"].sum()


def test_the_chance_of_being_last_that_often() -> None:
    assert own_gap.last_by_chance(0, 10, 4) == 1.0
    assert abs(own_gap.last_by_chance(10, 10, 2) - 2 ** -10) < 1e-15
    assert abs(own_gap.last_by_chance(9, 10, 2) - 11 * 2 ** -10) < 1e-15
    assert 0 < own_gap.last_by_chance(20000, 30000, 2) < 1e-100 or own_gap.last_by_chance(20000, 30000, 2) == 0.0

def test_the_straggler_findings_it_defers_to_are_computed_once(monkeypatch) -> None:
    """own_gap reads straggler's and data_load_skew's findings from the Context (found_by): in a
    diagnosis, each of those passes runs once, not again inside own_gap."""
    rows = Rows()
    sync_run(rows, steps=40, compute=lambda r, s: 800.0 + (600.0 if r == 1 else 0.0))
    ctx = rows.ctx()
    calls: list[str] = []
    real_s, real_d = straggler.find, data_load_skew.find
    monkeypatch.setattr(straggler, "find", lambda c: calls.append("straggler") or real_s(c))
    monkeypatch.setattr(data_load_skew, "find", lambda c: calls.append("data_load_skew") or real_d(c))
    assert [f.ranks for f in ctx.found_by(straggler.find)] == [[1]]
    assert ctx.found_by(own_gap.find) == []
    assert calls.count("straggler") == 1 and calls.count("data_load_skew") <= 1


def test_found_by_computes_a_pass_once_whichever_thread_asks() -> None:
    import threading
    import time

    ctx = sync_run().ctx()
    calls: list[int] = []

    def slow(c):  # type: ignore[no-untyped-def]
        calls.append(1)
        time.sleep(0.05)
        return ["found"]

    got: list[list] = []
    threads = [threading.Thread(target=lambda: got.append(ctx.found_by(slow))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [1] and got == [["found"]] * 4

    def broken(c):  # type: ignore[no-untyped-def]
        raise RuntimeError("pass broke")

    for _ in range(2):      # the error, to every caller
        try:
            ctx.found_by(broken)
            raise AssertionError("no error")
        except RuntimeError as e:
            assert "pass broke" in str(e)


def _weak(slow: int, logs: dict[int, int], steps: int = 40, late: dict[int, int] | None = None):
    # 12% more compute on rank `slow` (under the straggler pass's 20%); `late`: step -> the rank
    # that is 100 ms late there instead (the lateness moves between ranks)
    def compute(r: int, s: int) -> float:
        if late is not None:
            return 800.0 + (100.0 if late[s] == r else 0.0)
        return 800.0 * (1.12 if r == slow else 1.0)
    return every(sync_run(steps=steps, compute=compute), logs).ctx()


def test_a_weak_straggler_is_named_when_the_ranks_log_different_steps() -> None:
    # ranks logging every 1, 2, 3, 5 steps: a rank can be the one waited for only at the steps it
    # logged; counted over all the steps it is last at too few (19 and 13 of 29) to be named
    for slow, n in ((1, 19), (2, 13)):
        ctx = _weak(slow, EVERY)
        assert straggler.find(ctx) == []
        [f] = own_gap.find(ctx)
        assert f.kind == "straggler" and f.ranks == [slow] and f.victims == [r for r in range(4) if r != slow]
        assert f.evidence["steps_judged"] == n and f.evidence["steps_waited_for"] == n
        assert f.evidence["chance"] < own_gap.SPREAD_CHANCE and "compared" in f.evidence
    # the sparsest logger (every 5th step) is named once it logged enough steps (15 of 80)
    [f] = own_gap.find(_weak(3, EVERY, steps=80))
    assert f.ranks == [3] and f.evidence["steps_judged"] == 15
    # ... and not on 7 steps (40): too few to tell from chance
    assert own_gap.find(_weak(3, EVERY)) == []


def test_ranks_logging_different_steps_without_a_slow_rank_name_nobody() -> None:
    import random

    assert own_gap.find(_weak(-1, EVERY, steps=80)) == []
    for seed in range(3):
        rng = random.Random(seed)
        assert own_gap.find(_weak(-1, EVERY, steps=80, late={s: rng.randrange(4) for s in range(80)})) == []


def test_ranks_logging_the_same_steps_are_judged_over_all_steps() -> None:
    for logs in ({r: 1 for r in range(4)}, {r: 2 for r in range(4)}):
        [f] = own_gap.find(_weak(2, logs))
        assert f.ranks == [2] and "compared" not in f.evidence
        assert f.evidence["steps_judged"] == 39 // logs[0]
    assert own_gap.last_by_chance_among(19, [4] * 29) == pytest.approx(own_gap.last_by_chance(19, 29, 4))
    assert own_gap.last_by_chance_among(3, [2, 3, 4]) == pytest.approx(1 / 24)
