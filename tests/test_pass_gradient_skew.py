"""The gradient-skew pass (seed 000 误区三): spread of per-rank gradient-ready times per step."""
from __future__ import annotations

from forensics.passes import gradient_skew
from pass_helpers import sync_run


def test_one_rank_late_without_anyone_waiting_is_gradient_skew() -> None:
    ctx = sync_run(overlap=True, late=lambda r, s: 300.0 if (r == 1 and s >= 10) else 0.0).ctx()
    [f] = gradient_skew.find(ctx)
    assert f.severity == "WARN" and f.ranks == [1]
    assert f.evidence["spread_ms_median"] > 250
    assert "stale" in f.title


def test_jitter_without_a_consistent_late_rank_names_nobody() -> None:
    ctx = sync_run(overlap=True, late=lambda r, s: 300.0 if r == s % 4 else 0.0).ctx()
    [f] = gradient_skew.find(ctx)
    assert f.severity == "INFO" and f.ranks == []


def test_small_spread_is_not_skew() -> None:
    assert gradient_skew.find(sync_run(late=lambda r, s: 5.0 if r == 1 else 0.0).ctx()) == []
