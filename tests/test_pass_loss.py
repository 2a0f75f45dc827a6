"""The loss pass: divergence and plateau on raw and EMA loss, outside warmup (seed 003 case 1)."""
from __future__ import annotations

import math

from forensics.passes import loss
from pass_helpers import Rows, train_only


def warmup_loss(s: int) -> float:
    return 3.9 - 0.6 * s / 100 + 0.9 * math.sin(s / 3.7) if s < 100 else 2.98 - 0.004 * (s - 100)


def test_warmup_oscillation_with_stage_is_normal() -> None:
    ctx = train_only(steps=200, loss=warmup_loss, lr=lambda s: 2e-5 * min(1, (s + 1) / 100),
                     stage=lambda s: "warmup" if s < 100 else "stable").ctx()
    assert loss.find(ctx) == []


def test_warmup_oscillation_detected_from_the_lr_ramp_alone() -> None:
    ctx = train_only(steps=200, loss=warmup_loss, lr=lambda s: 2e-5 * min(1, (s + 1) / 100)).ctx()
    assert loss.find(ctx) == []


def test_the_same_oscillation_after_warmup_is_divergence() -> None:
    # no stage, flat lr: nothing says warmup, so rising stretches of 3.0 -> 5.0 are judged
    ctx = train_only(steps=120, loss=lambda s: 2.0 + (0.03 * (s - 60) if s > 60 else 0.0)).ctx()
    [f] = loss.find(ctx)
    assert f.kind == "loss_divergence" and f.ranks == [0, 1, 2, 3]
    assert 58 <= f.evidence["onset_step"] <= 66


def test_divergence_and_plateau_cite_the_lines_of_their_steps() -> None:
    rows = train_only(steps=120, loss=lambda s: 2.0 + (0.03 * (s - 60) if s > 60 else 0.0))
    plateau = train_only(steps=600, every=10, loss=lambda s: 2.8 - 0.0001 * s, noise=0.005,
                         lr=lambda s: 1e-4 * min(1, (s + 1) / 100))
    for r, kind in ((rows, "loss_divergence"), (plateau, "loss_plateau")):
        [f] = loss.find(r.ctx())
        assert f.kind == kind and f.lines, kind
        by_line = {(x["source_file"], x["line"]): x for x in r.rows}
        for ev in f.lines:
            row = by_line[(ev.source_file, ev.line)]     # a line of the run: the lowest rank's loss of that step
            assert row["rank"] == 0 and row["loss"] is not None and f"step {row['step']}:" in ev.text


def test_one_noisy_point_is_not_divergence() -> None:
    ctx = train_only(steps=120, loss=lambda s: 2.5 - 0.003 * s + (2.0 if s == 70 else 0.0)).ctx()
    assert [f.kind for f in loss.find(ctx)] == []


def test_plateau_over_100_steps() -> None:
    ctx = train_only(steps=600, every=10, loss=lambda s: 2.8 - 0.0001 * s, noise=0.005,
                     lr=lambda s: 1e-4 * min(1, (s + 1) / 100)).ctx()
    [f] = loss.find(ctx)
    assert f.kind == "loss_plateau" and f.evidence["first_step"] >= 100


def test_a_rising_loss_is_divergence_not_plateau() -> None:
    ctx = train_only(steps=400, every=2, loss=lambda s: 2.0 + (0.01 * (s - 200) if s > 200 else 0.0)).ctx()
    assert [f.kind for f in loss.find(ctx)] == ["loss_divergence"]


def test_nan_loss_names_the_ranks_that_logged_it() -> None:
    rows = train_only(steps=50, loss=lambda s: 2.0)
    rows.add(51.0, 2, "TRAIN_STEP", step=51, loss=float("nan"), lr=1e-4)
    [f] = loss.find(rows.ctx())
    assert f.kind == "loss_divergence" and f.severity == "ERROR" and f.ranks == [2]


def test_rankless_flat_lines_are_judged_too() -> None:
    ctx = train_only(ranks=1, rank_field=False, steps=120, loss=lambda s: 2.0 + (0.03 * (s - 60) if s > 60 else 0.0)).ctx()
    [f] = loss.find(ctx)
    assert f.kind == "loss_divergence" and f.ranks == []


def test_warmup_end() -> None:
    s = loss.loss_series(train_only(steps=30, loss=lambda s: 2.0, lr=lambda s: 1e-4 * min(1, (s + 1) / 10)).ctx().events)
    assert loss.warmup_end(s) == 9
    assert loss.warmup_end(loss.loss_series(Rows().ctx().events)) is None


def test_a_slow_steady_fall_on_a_long_run_is_progress_not_a_plateau() -> None:
    # 0.5% per 100 steps, but -60% over the run (the window grows to a tenth of the run)
    ctx = train_only(ranks=2, steps=20000, every=20, loss=lambda s: 2.9 * math.exp(-s / 20000), noise=0.005).ctx()
    assert loss.find(ctx) == []


def test_series_cites_the_lowest_ranks_first_loss_line_unranked_lines_first() -> None:
    """Each step of the loss series cites one line: the lowest rank's (an unranked line counts as
    below every rank), its first loss line of the step; the mean is over every loss line."""
    rows = Rows()
    rows.add(0.0, 2, "TRAIN_STEP", step=0, loss=3.0)
    rows.add(0.1, 1, "TRAIN_STEP", step=0, loss=1.0)
    rows.add(0.2, 1, "EVAL", step=0, loss=2.0)
    rows.add(1.0, 3, "TRAIN_STEP", step=1, loss=2.0)
    rows.add(1.1, None, "METRICS", step=1, loss=4.0)
    s = loss.loss_series(rows.ctx().events)
    assert s.select("step", "loss", "file", "line").rows() == [(0, 2.0, "rank_1.jsonl", 1), (1, 3.0, "logging.jsonl", 1)]


def test_judging_without_times_first_finds_what_the_full_series_finds() -> None:
    # find() judges the series without times and citations, and reads them only when that finds
    # something: on varied runs (warmup, divergence, plateau, NaN, rankless lines, gaps, ties,
    # rows out of order) it must say what judging the full series says
    import random

    rng = random.Random(7)
    kinds = []
    for i in range(40):
        shape = i % 5
        rise = rng.choice([0.0, 0.02, 0.04])
        lows = rng.uniform(1.5, 3.0)

        def curve(s: int, shape: int = shape, rise: float = rise, lows: float = lows) -> float:
            if shape == 0:
                return lows - 0.002 * s
            if shape == 1:
                return lows + (rise * (s - 80) if s > 80 else 0.0)
            if shape == 2:
                return lows - 0.0001 * s
            if shape == 3:
                return float("nan") if s == 90 else lows - 0.003 * s
            return warmup_loss(s)

        rows = train_only(ranks=rng.choice([1, 3]), steps=rng.choice([150, 400]), every=rng.choice([1, 2, 7]),
                          loss=curve, rank_field=i % 4 != 0, seed=i, noise=rng.choice([0.0, 0.01, 0.05]),
                          lr=lambda s: 1e-4 * min(1, (s + 1) / 50) if i % 3 else 1e-4,
                          stage=lambda s: ("warmup" if s < 50 else "stable") if i % 6 == 1 else None)
        if i % 7 == 3:   # a second line of one step (a tie for the citation) and a null loss
            rows.add(40.5, 0, "TRAIN_STEP", step=40, loss=2.2, lr=1e-4)
            rows.add(41.5, 0, "TRAIN_STEP", step=41, lr=1e-4)
        frame = rows.frame()
        ctx = loss.Context.from_frame(frame.sample(fraction=1.0, shuffle=True, seed=i) if i % 2 else frame)
        full = loss._judge(*loss._loss_frames(ctx.events, cited=True))
        assert loss.find(ctx) == full
        kinds.append(tuple(f.kind for f in full))
        assert all(f.first_seen is not None for f in full)
    assert set(kinds) >= {(), ("loss_divergence",), ("loss_plateau",)}


def test_a_loss_that_flattens_after_falling_is_a_note_not_a_fault() -> None:
    # issue 27 (proportion): 3.0 -> ~1.0 over 300 steps, then flat for 300: a run converging
    converged = train_only(steps=600, every=5, loss=lambda s: 1.0 + 2.0 * max(0.0, 1 - s / 300), noise=0.005)
    [f] = loss.find(converged.ctx())
    assert (f.kind, f.severity) == ("loss_plateau", "INFO") and f.evidence["converged"] is True
    # the same flat loss from the start never improved: the training is stuck, a warning
    stuck = train_only(steps=600, every=5, loss=lambda s: 2.0, noise=0.005)
    [g] = loss.find(stuck.ctx())
    assert (g.kind, g.severity) == ("loss_plateau", "WARN") and g.evidence["converged"] is False


def test_a_converged_plateau_alone_leaves_the_run_healthy() -> None:
    from forensics.passes import diagnose_context

    rows = train_only(steps=600, every=5, loss=lambda s: 1.0 + 2.0 * max(0.0, 1 - s / 300), noise=0.005)
    report = diagnose_context(rows.ctx())
    assert report.root_cause is None
    assert [f.severity for f in report.findings if f.kind == "loss_plateau"] == ["INFO"]
