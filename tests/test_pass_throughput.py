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
