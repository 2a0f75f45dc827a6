"""The lone-message pass: a rank that alone says something after the last common step, then
goes silent, before its peers fail, is the one they waited for (basis lone_message)."""
from __future__ import annotations

from forensics.passes import lone_message
from pass_helpers import T0, Rows, sync_run

TIMEOUT = "[gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 5000ms for recv operation to complete"


def _run(lone_rank: int | None = 2, others_say_it: bool = False, keeps_logging: bool = False,
         fail: bool = True) -> Rows:
    rows = Rows()
    sync_run(rows, ranks=4, steps=20)
    end = max((x["timestamp"] - T0).total_seconds() for x in rows.rows)
    if lone_rank is not None:
        rows.add(end + 0.3, lone_rank, "prefetch", message=f"waiting for prefetch worker 3 at step 20")
    if others_say_it:
        for r in (0, 1, 3):
            rows.add(end + 0.2, r, "prefetch", message=f"waiting for prefetch worker {r} at step 20")
    if fail:
        for r in (0, 1, 3):
            if r != lone_rank:
                rows.add(end + 5.4 + r * 0.01, r, "RuntimeError", level="ERROR", message=TIMEOUT)
    if keeps_logging and lone_rank is not None:
        rows.add(end + 6.0, lone_rank, "prefetch", message="prefetch worker answered")
    return rows


def test_the_rank_that_alone_said_something_then_went_silent_is_named() -> None:
    [f] = lone_message.find(_run().ctx())
    assert f.kind == "hang" and f.ranks == [2] and f.victims == [0, 1, 3] and f.basis == "own_gap"
    assert "waiting for prefetch worker" in f.title and "ranks 0,1,3 failed" in f.title
    assert f.evidence["template"] == "waiting for prefetch worker <N> at step <N>"
    assert f.lines[0].rank == 2 and f.lines[0].source_file == "rank_2.jsonl"


def test_a_statement_every_rank_makes_names_nobody() -> None:
    assert lone_message.find(_run(others_say_it=True).ctx()) == []


def test_a_rank_that_went_on_logging_through_the_failure_is_not_named() -> None:
    assert lone_message.find(_run(keeps_logging=True).ctx()) == []


def test_without_a_failure_a_lone_statement_is_no_evidence() -> None:
    assert lone_message.find(_run(fail=False).ctx()) == []


def test_in_the_full_diagnosis_it_stands_beside_the_hang_it_explains() -> None:
    rep = _run().report()
    assert rep.root_cause is not None and rep.root_cause.kind == "hang" and rep.root_cause.ranks == [2]
    assert any(f.rule == "pass.lone_message" and f.ranks == [2] for f in rep.findings)
