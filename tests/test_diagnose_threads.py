"""diagnose_context's two threads: the rules beside the step table, then the passes as a thread
frees up. The report must be the one the plain, one-thread loop gives."""
from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

import forensics
import forensics.passes as passes_mod
import forensics.rules as rules_mod
from forensics.passes import PASSES, Context, diagnose_context
from forensics.store import open_store
from pass_helpers import sync_run

REPO = Path(__file__).resolve().parent.parent
SAMPLES = sorted(p.name for p in (REPO / "sample_logs").iterdir() if p.is_dir())


def _report(store: Path, cores: int, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(passes_mod, "_cores", lambda: cores)
    return json.dumps(diagnose_context(Context.from_run(open_store(store))).to_json(), sort_keys=True)


@pytest.mark.parametrize("sample", SAMPLES)
def test_two_threads_give_the_one_thread_report(sample: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "s.forensics"
    forensics.ingest([str(REPO / "sample_logs" / sample)], store)
    one = _report(store, 1, monkeypatch)
    assert json.loads(one)["per_rank"]
    assert _report(store, 2, monkeypatch) == one
    assert _report(store, 8, monkeypatch) == one


def _released_while_passes_run(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> list[bool]:
    """With two cores, diagnose with one pass that waits for `module.name` to be called: [True]
    when it was called while the pass ran (one after the other, it waits out its timeout)."""
    started = threading.Event()
    real = getattr(module, name)

    def called(*args):  # type: ignore[no-untyped-def]
        started.set()
        return real(*args)

    seen: list[bool] = []

    def waiting_pass(ctx: Context) -> list:
        seen.append(started.wait(timeout=20))
        return []

    monkeypatch.setattr(module, name, called)
    monkeypatch.setattr(passes_mod, "_cores", lambda: 2)
    assert diagnose_context(sync_run().ctx(), passes=[waiting_pass]).per_rank
    return seen


def test_rules_run_beside_the_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """With two cores the rules are evaluated while the passes run: a pass waiting for the rules
    to start is released (one after the other, it would wait out its timeout)."""
    assert _released_while_passes_run(monkeypatch, rules_mod, "evaluate") == [True]


def test_one_core_runs_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[str] = []
    real = rules_mod.evaluate
    monkeypatch.setattr(rules_mod, "evaluate", lambda ev, rules: order.append("rules") or real(ev, rules))
    monkeypatch.setattr(passes_mod, "_cores", lambda: 1)
    mine = [lambda ctx, i=i: order.append(f"pass {i}") or [] for i in range(3)]
    diagnose_context(sync_run().ctx(), passes=mine)
    assert order == ["pass 0", "pass 1", "pass 2", "rules"]


def test_a_failing_pass_fails_the_diagnosis(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(ctx: Context) -> list:
        raise RuntimeError("pass broke")

    monkeypatch.setattr(passes_mod, "_cores", lambda: 2)
    with pytest.raises(RuntimeError, match="pass broke"):
        diagnose_context(sync_run().ctx(), passes=[PASSES[0], broken, *PASSES[1:]])


def test_per_rank_table_is_built_beside_the_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """With two cores the per-rank table (which needs no finding) is built on the passes'
    threads, not after the last pass: a pass waiting for it to start is released."""
    assert _released_while_passes_run(monkeypatch, passes_mod, "_per_rank") == [True]


def test_report_rows_convert_each_value_as_one_at_a_time() -> None:
    """The per-rank rows, converted a column at a time, hold what `_report_value` makes of each
    value: times as ISO text, floats rounded (NaN: null), everything else as it is."""
    import datetime as dt

    import polars as pl

    t = dt.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=dt.timezone.utc)
    df = pl.DataFrame({
        "rank": [0, 1, None], "f": [1.23456, float("nan"), None], "big": [123456.789, -0.000123456, float("inf")],
        "ts": [t, None, t], "naive": [t.replace(tzinfo=None), None, None], "day": [t.date(), None, t.date()],
        "took": [dt.timedelta(seconds=1.5), None, dt.timedelta(0)], "host": ["a", None, "b"], "ok": [True, None, False],
        "hosts": [["a"], [], None], "n32": pl.Series([1, 2, 3], dtype=pl.Int32), "f32": pl.Series([0.1, None, 2.5], dtype=pl.Float32),
    })
    rows = passes_mod.report_rows(df)
    assert rows == [{k: passes_mod._report_value(v) for k, v in r.items()} for r in df.iter_rows(named=True)]
    assert rows[0]["ts"] == t.isoformat() and rows[1]["f"] is None and rows[0]["f"] == 1.23
    assert passes_mod.report_rows(df.clear()) == []


def test_rules_are_loaded_on_their_own_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """With two cores the rule files are loaded (their engine imported) on the rules' thread,
    beside the step table, not before it on the caller's; one core loads them in line."""
    where: list[bool] = []
    real = passes_mod._rule_set

    def rule_set(rule_dirs, config):  # type: ignore[no-untyped-def]
        where.append(threading.current_thread() is threading.main_thread())
        return real(rule_dirs, config)

    monkeypatch.setattr(passes_mod, "_rule_set", rule_set)
    for cores in (2, 1):
        monkeypatch.setattr(passes_mod, "_cores", lambda cores=cores: cores)
        report = diagnose_context(sync_run().ctx(), passes=[])
        assert report.per_rank
    assert where == [False, True]


def test_a_broken_rule_set_fails_before_any_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rule file's error loaded on the rules' thread is raised before any pass runs."""
    def rule_set(rule_dirs, config):  # type: ignore[no-untyped-def]
        raise ValueError("bad rule file")

    ran: list[str] = []
    monkeypatch.setattr(passes_mod, "_rule_set", rule_set)
    monkeypatch.setattr(passes_mod, "_cores", lambda: 2)
    with pytest.raises(ValueError, match="bad rule file"):
        diagnose_context(sync_run().ctx(), passes=[lambda ctx: ran.append("pass") or []])
    assert ran == []
