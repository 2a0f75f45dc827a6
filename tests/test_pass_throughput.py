"""The throughput pass: a drop the loss curve hides (seed 000 §4.3: 1200 -> 800 samples/s)."""
from __future__ import annotations

from forensics.passes import throughput
from pass_helpers import sync_run


def test_drop_while_the_loss_still_falls() -> None:
    ctx = sync_run(steps=50, transfer=lambda s: 650.0 if s >= 25 else 150.0).ctx()
    [f] = throughput.find(ctx)
    assert f.kind == "throughput_drop" and f.layer == "training" and f.ranks == []
    assert 0.3 < f.evidence["drop"] < 0.45 and f.evidence["loss_still_falling"] is True
    assert f.evidence["first_step"] >= 25


def test_steady_run_and_single_slow_steps_are_not_a_drop() -> None:
    assert throughput.find(sync_run(steps=50).ctx()) == []
    ctx = sync_run(steps=50, compute=lambda r, s: 4000.0 if s in (20, 40) else 800.0).ctx()
    assert throughput.find(ctx) == []


def test_steps_per_second_when_samples_are_not_logged() -> None:
    ctx = sync_run(steps=50, samples=False, compute=lambda r, s: 1600.0 if s >= 25 else 800.0).ctx()
    [f] = throughput.find(ctx)
    assert f.evidence["unit"] == "steps/s"


def test_judging_the_throughput_alone_first_finds_what_the_full_series_finds() -> None:
    # _find judges the per-step throughput without the loss, times and lines, and builds them
    # only when that finds a drop: on varied step tables (drops of several lengths and depths,
    # samples/s or only step times, null ranks and values, gaps, rows out of order) it must
    # say what judging the full series says
    import datetime as dt
    import random

    import polars as pl

    rng = random.Random(9)
    t0 = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
    found = []
    for i in range(60):
        n, start, length, depth = rng.randint(5, 120), rng.randint(0, 80), rng.randint(0, 60), rng.choice([0.3, 0.6, 0.9])
        rows = []
        for s in range(n):
            if rng.random() < 0.05:
                continue
            slow = depth if start <= s < start + length else 1.0
            for r in range(rng.randint(1, 3)):
                sps = 1000.0 * slow * rng.uniform(0.97, 1.03)
                rows.append({"rank": r if rng.random() > 0.03 else None, "step": s,
                             "samples_per_s": None if i % 4 == 0 or rng.random() < 0.02 else sps,
                             "step_time_ms": rng.choice([None, 1000.0 / slow]), "loss": rng.choice([None, 3.0 - 0.01 * s]),
                             "t_start": t0 + dt.timedelta(seconds=s), "t_end": t0 + dt.timedelta(seconds=s + 1),
                             "file": f"rank_{r}.jsonl", "train_line": s})
        steps = pl.DataFrame(rows, schema_overrides={"file": pl.Categorical}).sample(fraction=1.0, shuffle=True, seed=i)
        full = throughput._judge(*throughput.series(steps))
        assert throughput._find(steps) == full, i
        found.append(bool(full))
    assert any(found) and not all(found)
