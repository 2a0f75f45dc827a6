"""The grad-norm pass: spikes (logged threshold or 10x the recent median) and vanishing adapters."""
from __future__ import annotations

from forensics.passes import grad_norm
from pass_helpers import Rows, train_only


def test_spike_above_the_logged_threshold() -> None:
    rows = train_only(steps=100, loss=lambda s: 2.0, grad_norm=lambda s: 45.6 if s == 70 else 1.2)
    for r in range(4):
        rows.add(70.5, r, "GRAD_NORM", level="WARN", step=70, grad_norm=45.6, threshold=10.0)
    [f] = grad_norm.find(rows.ctx())
    assert f.kind == "grad_norm_spike" and f.evidence["spike_steps"] == [70]
    assert f.evidence["threshold"] == 10 and f.evidence["max_grad_norm"] == 45.6
    assert f.ranks == [0, 1, 2, 3]


def test_relative_spike_without_threshold_on_one_rank() -> None:
    rows = Rows()
    for s in range(60):
        for r in range(4):
            rows.add(float(s), r, "TRAIN_STEP", step=s, grad_norm=30.0 if (r == 1 and s == 40) else 1.0 + 0.01 * r)
    [f] = grad_norm.find(rows.ctx())
    assert f.ranks == [1] and f.evidence["spike_steps"] == [40] and f.evidence["threshold"] is None


def test_only_non_finite_norms_are_a_finding_not_a_crash() -> None:
    # every norm of the spiking step is NaN: the step has no largest finite norm to quote
    rows = train_only(steps=60, loss=lambda s: 2.0, grad_norm=lambda s: float("nan") if s == 40 else 1.0)
    [f] = grad_norm.find(rows.ctx())
    assert f.evidence["spike_steps"] == [40] and f.evidence["nonfinite"] is True
    assert f.title.startswith("gradient norm is not finite at step(s) 40") and f.lines


def test_large_first_norms_have_no_baseline_and_are_not_spikes() -> None:
    ctx = train_only(steps=60, loss=lambda s: 2.0, grad_norm=lambda s: 50.0 if s < 3 else 1.0).ctx()
    assert grad_norm.find(ctx) == []


def test_vanishing_adapter_gradients_seed_case3() -> None:
    ctx = train_only(ranks=1, rank_field=False, steps=2000, every=10, loss=lambda s: 2.8 - 0.0001 * s,
                     grad_norm_adapter=lambda s: 1.2e-6, grad_norm_backbone=lambda s: 0.0).ctx()
    [f] = [x for x in grad_norm.find(ctx) if x.kind == "vanishing_grad"]
    assert f.evidence["grad_norm_adapter_median"] == 1.2e-6 and f.evidence["grad_norm_backbone_median"] == 0.0
    assert "frozen" in f.title


def test_healthy_adapter_and_zero_init_start_are_not_vanishing() -> None:
    # LoRA B starts at zero: the first steps have tiny adapter gradients by design
    ctx = train_only(steps=200, loss=lambda s: 2.0, grad_norm_adapter=lambda s: 1e-7 if s < 10 else 2e-2,
                     grad_norm_backbone=lambda s: 0.0).ctx()
    assert grad_norm.find(ctx) == []


def test_spikes_are_decided_by_the_narrow_scan_as_by_the_full_one() -> None:
    # _spikes reads the times and lines only when the narrow per-step table (step, grad_norm,
    # threshold) has a spike: on varied rows (nulls, NaN/inf, thresholds, ties, gaps, unsorted)
    # the narrow table must flag the same steps as the one built with every column
    import random

    import polars as pl

    from forensics.passes.context import Context

    rng = random.Random(3)
    found = []
    for i in range(60):
        rows = Rows()
        for s in sorted(rng.sample(range(200), rng.randint(0, 80))):
            for r in range(rng.randint(1, 4)):
                g = rng.choice([1.0, 1.1, 0.9, None, 1.0 * rng.randint(1, 3)])
                if rng.random() < 0.03:
                    g = rng.choice([float("nan"), float("inf"), 40.0])
                thr = rng.choice([None, None, 5.0]) if i % 3 == 0 else None
                rows.add(float(s) + rng.random(), r if i % 5 else None, "TRAIN_STEP", step=s if rng.random() > 0.02 else None,
                         grad_norm=g, threshold=thr)
        frame = rows.frame()
        if frame.is_empty():
            continue
        ctx = Context.from_frame(frame.sample(fraction=1.0, shuffle=True, seed=i) if i % 2 else frame)
        narrow = grad_norm._per_step(ctx.events)[1].filter(pl.col("spike")).collect()
        full = grad_norm._per_step(ctx.events, "rank", "timestamp", "source_file", "line")[1].filter(pl.col("spike")).collect()
        assert narrow.equals(full.drop("t"))
        if full.is_empty():
            assert grad_norm._spikes(ctx) == []
        found.append(full.height > 0)
    assert any(found) and not all(found)
