"""One rank's own (pre-all-reduce) gradient norm apart from its peers' at every step: a rank that
computes another gradient. Noise between ranks, a one-step spike, or norms logged after the
all-reduce (equal everywhere) are not it."""
from __future__ import annotations

import random

from forensics.passes import grad_norm_rank
from pass_helpers import Rows


def _rows(scale: dict[int, float], steps: int = 20, ranks: int = 4, noise: float = 0.25) -> Rows:
    rng = random.Random(7)
    rows = Rows()
    for s in range(steps):
        for r in range(ranks):
            g = 0.6 * (1 + noise * (rng.random() - 0.5)) * scale.get(r, 1.0)
            rows.add(float(s) + r / 100, r, "TRAIN_STEP", step=s, loss=2.3 - 0.01 * s, grad_norm=g, step_time_ms=200.0)
    return rows


def test_a_rank_whose_gradient_norm_is_eight_times_its_peers_every_step_is_named() -> None:
    [f] = grad_norm_rank.find(_rows({1: 8.0}).ctx())
    assert f.ranks == [1] and f.basis == "outlier" and f.evidence["ratio"] > 6
    assert f.evidence["steps"] == 20


def test_a_rank_whose_gradients_vanish_against_its_peers_is_named_too() -> None:
    [f] = grad_norm_rank.find(_rows({3: 0.1}, ranks=6).ctx())
    assert f.ranks == [3] and f.evidence["ratio"] < 0.2


def test_noise_between_ranks_a_one_step_spike_or_two_of_three_apart_is_nothing() -> None:
    assert grad_norm_rank.find(_rows({}, noise=0.6).ctx()) == []
    rows = _rows({})
    rows.add(5.5, 2, "TRAIN_STEP", step=5, grad_norm=50.0)    # one step: grad_norm.py's question
    assert grad_norm_rank.find(rows.ctx()) == []
    assert grad_norm_rank.find(_rows({1: 8.0}, ranks=2).ctx()) == []   # two ranks: which one is apart?


def test_it_is_the_root_cause_of_an_otherwise_quiet_run() -> None:
    rc = _rows({2: 8.0}).report().root_cause
    assert rc is not None and rc.kind == "grad_norm_spike" and rc.ranks == [2]
    assert _rows({}).report().root_cause is None
