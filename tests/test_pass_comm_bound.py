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


def test_per_step_shares_are_those_of_the_judged_rows_grouped_by_step() -> None:
    """comm_bound.per_step_shares masks the rows it does not judge inside the step table's step
    groups: the same per-step figures as filtering those rows out and grouping what is left by
    step (random tables: gaps, null ranks, comm and step times, zero step times, tied waits)."""
    import numpy as np
    import polars as pl

    from forensics.passes.context import PeerGroups

    for seed in range(8):
        rng = np.random.default_rng(seed)
        rows = [(r, s) for r in range(6) for s in range(50) if rng.random() > 0.15]
        n = len(rows)
        t0 = np.datetime64("2026-01-01T00:00:00", "us") + (rng.integers(0, 10**9, n)).astype("timedelta64[us]")

        def holes(x: np.ndarray, p: float) -> list:
            return [None if h else v for v, h in zip(x.tolist(), rng.random(n) < p)]

        steps = pl.DataFrame({
            "rank": holes(np.array([r for r, _ in rows]), 0.03), "step": [s for _, s in rows],
            "comm_ms": holes(rng.integers(0, 50, n) * 10.0, 0.1),
            "step_time_ms": holes(rng.choice([0.0, -5.0, 400.0, 650.0, 800.0], n), 0.1),
            "wait_est": holes(rng.integers(-2, 6, n) * 25.0, 0.1),
            "t_start": holes(t0, 0.05), "t_end": holes(t0 + np.timedelta64(500, "ms"), 0.05),
        }, schema_overrides={"rank": pl.Int32})
        per, df = comm_bound.per_step_shares(steps, PeerGroups(steps.get_column("step")))
        want = (
            df.filter("ok").group_by("step", maintain_order=True)
            .agg(pl.col("step").first().alias("_s"), pl.len().alias("n"),
                 *(pl.col(c).median() for c in ("share", "wshare", "comm_ms", "wait", "step_time_ms")),
                 pl.col("rank").sort_by("wait").first().alias("least"),
                 pl.col("t_start").min().alias("t0"), pl.col("t_end").max().alias("t1"))
            .drop("_s").sort("step")
        )
        assert per.equals(want), seed


def test_communication_that_dominates_from_the_start_without_rising_is_the_jobs_design() -> None:
    # a small model on many ranks: every transfer takes 1100 ms of a ~2 s step from step 0 on,
    # with a warm-up whose first steps compute longer (the share crosses 40% only after them)
    from forensics.passes import diagnose_context

    rows = sync_run(ranks=8, steps=40, transfer=lambda s: 1100.0, compute=lambda r, s: 800.0 + (3000.0 if s < 3 else 0.0))
    [f] = comm_bound.find(rows.ctx())
    assert f.evidence["mode"] == "network" and f.evidence["by_design"] is True and f.severity == "INFO"
    assert "did not rise" in f.title
    # no root cause by itself, nor the rule's job-wide finding of the same symptom
    assert diagnose_context(rows.ctx()).root_cause is None
    # the same share reached by a transfer that rose mid-run is the slow network
    [g] = comm_bound.find(sync_run(ranks=8, transfer=lambda s: 1100.0 if s >= 10 else 500.0).ctx())
    assert g.severity == "WARN" and "by_design" not in g.evidence


def test_a_transfer_rise_that_costs_the_run_little_is_a_note_not_a_root_cause() -> None:
    # a loaded host: the transfer wanders up from 420 to 800 ms for the last 10 of 40 steps (the
    # share crosses 40% there), the steps slower by 380 ms: 7% of the run's step time
    from forensics.passes import diagnose_context

    rows = sync_run(ranks=8, steps=40, transfer=lambda s: 800.0 if s >= 30 else 420.0)
    [f] = comm_bound.find(rows.ctx())
    assert f.evidence["mode"] == "network" and f.severity == "INFO" and f.evidence["within_noise"] is True
    assert f.evidence["rise_cost_share"] < comm_bound.MIN_COST and "not a fault" in f.title
    # no root cause, nor the rule's job-wide finding of the same steps
    assert diagnose_context(rows.ctx()).root_cause is None
    # the same rise held for 30 of the 40 steps costs the run 19%: the slow network
    [g] = comm_bound.find(sync_run(ranks=8, steps=40, transfer=lambda s: 800.0 if s >= 10 else 420.0).ctx())
    assert g.severity == "WARN" and g.ranks == list(range(8)) and "within_noise" not in g.evidence
    assert g.evidence["rise_cost_share"] >= comm_bound.MIN_COST


def test_communication_over_twice_the_rest_of_the_step_is_the_verdict_without_a_rise() -> None:
    # every rank moves far more than it computes from step 0 (2000 ms of transfer against 820 ms
    # of input and compute: 71% of the step), never rising: no balance of design, the bottleneck
    from forensics.passes import diagnose_context

    rows = sync_run(ranks=8, steps=40, transfer=lambda s: 2000.0)
    [f] = comm_bound.find(rows.ctx())
    assert f.severity == "WARN" and f.ranks == [] and f.evidence["comm_share"] > comm_bound.DOMINANT
    assert "by_design" not in f.evidence and "communication-bound by its own balance" in f.title
    rc = diagnose_context(rows.ctx()).root_cause
    assert rc is not None and rc.kind == "comm_bound" and rc.ranks == []


def test_a_rise_no_rule_can_blame_once_the_pass_calls_it_noise() -> None:
    # the rootcause side alone: with the pass's note flagged within_noise, the rule's job-wide
    # finding of the same steps (ranks []) is not a root cause either
    from forensics.passes import rootcause
    from forensics.report.model import Finding

    note = Finding(rule="pass.comm_bound", kind="comm_bound", layer="communication", severity="INFO",
                   ranks=[0, 1], title="t", evidence={"mode": "network", "within_noise": True})
    rule = Finding(rule="comm_share_high", kind="comm_bound", layer="communication", severity="WARN",
                   ranks=[], title="t")
    assert rootcause.select([note, rule], frozenset({0, 1}))[0] is None
    assert rootcause.select([rule], frozenset({0, 1}))[0] == 0


def test_random_waiting_leaves_the_rules_job_wide_finding_no_root_cause() -> None:
    # every rank waits for a different late rank each step (a loaded host): the pass calls it
    # jitter, and the rule that only sees "communication over 40%" on every rank does not make
    # it the verdict; a rank of the run's own (here a finding of another kind) still can be
    from forensics.passes import diagnose_context, rootcause
    from forensics.report.model import Finding

    rows = sync_run(steps=40, compute=lambda r, s: 2000.0 if r == s % 4 else 800.0)
    [f] = comm_bound.find(rows.ctx())
    assert f.severity == "INFO" and f.evidence["jitter"] is True
    assert diagnose_context(rows.ctx()).root_cause is None
    rule = Finding(rule="comm_share_high", kind="comm_bound", layer="communication", severity="WARN",
                   ranks=[], title="t")
    other = Finding(rule="pass.grad_norm_rank", kind="grad_norm_spike", layer="training", severity="WARN",
                    ranks=[2], title="t")
    idx, _ = rootcause.select([rule, f, other], frozenset(range(4)))
    assert idx == 2
    # a rank the waiting points at keeps the finding a fault (no jitter flag)
    [g] = comm_bound.find(sync_run(compute=lambda r, s: 2000.0 if r == 1 else 800.0).ctx())
    assert g.severity == "WARN" and "jitter" not in g.evidence


def test_ranks_logging_different_steps_do_not_make_a_victim_the_rank_waited_for() -> None:
    # rank r computes 2000 ms against its peers' 800 and the ranks log every 1, 2, 3, 5 steps:
    # at a step the late rank did not log, the least-waiting rank of those that did is a victim;
    # the rank waited for is judged at the steps every rank logged, or not named at all
    from pass_helpers import EVERY, Rows, every

    for slow in range(4):
        rows = every(sync_run(Rows(), steps=90, compute=lambda r, s, slow=slow: 2000.0 if r == slow else 800.0), EVERY)
        found = comm_bound.find(rows.ctx())
        named = {r for f in found for r in f.ranks}
        assert named <= {slow}, (slow, [(f.severity, f.ranks, f.title) for f in found])
        # not knowing who is waited for is not noise: the rules' job-wide finding may stand
        assert not any(f.evidence.get("jitter") for f in found), slow


def test_steps_every_rank_logged_still_judge_the_waiting_when_there_are_enough() -> None:
    # ranks log every 1 or 2 steps: every 2nd step has all four — enough to judge on them alone
    from pass_helpers import Rows, every

    half = {0: 1, 1: 2, 2: 1, 3: 2}
    rows = every(sync_run(Rows(), steps=40, compute=lambda r, s: 2000.0 if r == 3 else 800.0), half)
    [f] = comm_bound.find(rows.ctx())
    assert f.ranks == [3] and f.severity == "WARN"
    # a late rank at random on those steps is the host's noise, as when every rank logs every step
    rows = every(sync_run(Rows(), steps=40, compute=lambda r, s: 2000.0 if r == (s // 2) % 4 else 800.0), half)
    [g] = comm_bound.find(rows.ctx())
    assert g.severity == "INFO" and g.ranks == [] and g.evidence.get("jitter") is True
