"""`last-10s` finds the quiet ranks' last events from the step summary and the events after a
bound (timeline.windows._quiet_back) instead of grouping every event of those ranks: the
snapshot is the same as the full grouping's, on every sample run and on hand-made edge cases."""
from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from polars.testing import assert_frame_equal

import forensics
from forensics import timeline as tl
from forensics.store import open_store
from forensics.timeline import windows
from test_timeline import store_of

REPO = Path(__file__).resolve().parent.parent
SAMPLES = sorted(p.name for p in (REPO / "sample_logs").iterdir() if p.is_dir())


def _both(run: Any, monkeypatch: pytest.MonkeyPatch, **kw: Any) -> tuple[Any, Any, int]:
    """The snapshot as last_window makes it, the one with the full grouping, and how many times
    the bounded path answered."""
    used = []
    real = windows._quiet_back

    def spy(*a: Any) -> Any:
        out = real(*a)
        used.append(out is not None)
        return out

    monkeypatch.setattr(windows, "_quiet_back", spy)
    fast = tl.last_window(run, **kw)
    monkeypatch.setattr(windows, "_quiet_back", lambda *a: None)
    full = tl.last_window(run, **kw)
    return fast, full, sum(used)


def _same(a: Any, b: Any) -> None:
    assert_frame_equal(a.ranks, b.ranks)
    assert_frame_equal(a.events, b.events)
    assert (a.stop, a.quiet, a.missing, a.untimed) == (b.stop, b.quiet, b.missing, b.untimed)


@pytest.mark.parametrize("name", SAMPLES)
def test_sample_runs_give_the_same_snapshot(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    forensics.ingest([str(REPO / "sample_logs" / name)], tmp_path / "st")
    run = open_store(tmp_path / "st")
    ranked = tl.known_ranks(run)
    for kw in ({"window_s": 10.0}, {"window_s": 0.5}, {"window_s": 60.0, "limit": 3},
               *([{"window_s": 2.0, "ranks": ranked[:1]}] if ranked else [])):
        fast, full, _ = _both(run, monkeypatch, **kw)
        _same(fast, full)


T0 = dt.datetime(2025, 6, 12, 2, 0, 0, tzinfo=dt.timezone.utc)


def _ev(rank: int, s: float, event: str, step: int | None = None, level: str = "INFO", msg: str = "") -> dict[str, Any]:
    r: dict[str, Any] = {"ts": (T0 + dt.timedelta(seconds=s)).isoformat().replace("+00:00", "Z"), "rank": rank,
                         "level": level, "event": event, "msg": msg or event}
    if step is not None:
        r["step"] = step
    return r


def test_a_quiet_rank_whose_last_event_has_no_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # rank 1 stops stepping at step 3, then logs a WARN without a step (its last event before
    # the window), then an event after the stop; rank 0 runs to the end and errors fatally
    recs = {"rank_0.jsonl": [_ev(0, i, "TRAIN_STEP", i) for i in range(20)]
            + [_ev(0, 20, "NCCL_TIMEOUT", level="ERROR")],
            "rank_1.jsonl": [_ev(1, 0, "INIT")] + [_ev(1, i, "TRAIN_STEP", i) for i in range(4)]
            + [_ev(1, 4.5, "SLOW_DISK", level="WARN", msg="disk is slow"), _ev(1, 30, "NCCL_TIMEOUT", level="ERROR")],
            "rank_2.jsonl": [_ev(2, i, "TRAIN_STEP", i) for i in range(8)] + [_ev(2, 19.5, "HEARTBEAT")]}
    run = store_of(tmp_path, recs)
    fast, full, used = _both(run, monkeypatch, window_s=2.0)
    _same(fast, full)
    assert used == 1 and fast.quiet == [1]
    r = fast.ranks.row(1, named=True)
    assert r["last_event"] == "SLOW_DISK" and r["step"] == 3 and r["after_stop"] == 1


def test_a_rank_quiet_from_the_start_and_a_window_before_everything(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    recs = {"rank_0.jsonl": [_ev(0, i, "TRAIN_STEP", i) for i in range(10)],
            "rank_1.jsonl": [_ev(1, 50, "LATE_START", 0)],          # logs only after the stop given below
            "rank_2.jsonl": [_ev(2, i, "TRAIN_STEP", i) for i in range(3)]}
    run = store_of(tmp_path, recs)
    for at in (T0 + dt.timedelta(seconds=9), T0 + dt.timedelta(seconds=0.5), T0 + dt.timedelta(seconds=60)):
        fast, full, _ = _both(run, monkeypatch, window_s=1.0, at=at)
        _same(fast, full)
