"""Two held-out real gloo runs (tools/heldout, batch 3) kept as fixtures: what each fix of
issue 27's held-out work reads in them, beyond the verdict test_scenarios checks."""
from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from forensics.ingest import ingest
from forensics.passes import diagnose
from forensics.store import open_store

HERE = Path(__file__).resolve().parent / "fixtures" / "realrun_heldout"


@pytest.fixture(scope="module")
def hang(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("hang") / "store"
    ingest([str(HERE / "hang_lone_message")], str(out))
    return open_store(str(out))


def test_prefixed_tracebacks_inside_json_lines_are_the_ranks_console_text(hang) -> None:
    # ranks 0, 1 and 3 wrote their '[rankN]: Traceback ...' into their own JSON-lines files:
    # every line is an event, and each traceback is its rank's
    assert hang.totals["rejected"] == 0
    tb = hang.events().filter((pl.col("event") == "TRACEBACK") & pl.col("source_file").str.contains("rank_")).collect()
    assert sorted(tb["rank"].to_list()) == [0, 1, 3]
    assert all(f.endswith(f"rank_{r}.jsonl.gz") for f, r in zip(tb["source_file"], tb["rank"]))
    assert all("gloo" in m or "Timed out" in m for m in tb["message"])


def test_the_rank_that_alone_said_what_it_waited_for_is_the_hang(hang) -> None:
    rep = diagnose(hang)
    assert rep.root_cause.kind == "hang" and rep.root_cause.ranks == [2]
    [lone] = [f for f in rep.findings if f.rule == "pass.lone_message"]
    assert lone.ranks == [2] and lone.victims == [0, 1, 3] and lone.basis == "own_gap"
    assert "waiting for prefetch worker" in lone.title
    assert lone.lines[0].source_file.endswith("rank_2.jsonl.gz")


def test_a_segfault_the_launcher_recorded_is_the_cause_of_the_lost_connections(tmp_path: Path) -> None:
    rep = diagnose([str(HERE / "segv_lost_peer")])
    assert rep.root_cause.kind == "crash" and rep.root_cause.ranks == [5]
    assert "SIGSEGV" in rep.root_cause.summary
    lost = [f for f in rep.findings if f.kind == "nccl_timeout"]
    assert lost and lost[0].ranks == [5] and set(lost[0].victims) == {4, 6} and lost[0].basis == "own_error"
    assert not any(f.kind == "hang" for f in rep.findings)
