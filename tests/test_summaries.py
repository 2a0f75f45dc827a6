"""forensics.summaries: the per-(rank, step) and per-rank tables written at ingest are the tables
the events give, are read instead of the events, and are never stale."""
from __future__ import annotations

import json
import os
from pathlib import Path

import polars as pl
import pytest

import forensics
from forensics import summaries as S
from forensics import timeline as tl
from forensics.passes import context as C
from forensics.passes import diagnose
from forensics.store import open_store

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = sorted(p.name for p in (REPO / "sample_logs").iterdir() if (p / "expected.toml").is_file())


def _store(tmp_path: Path, *logs: Path, append: bool = False):
    forensics.ingest([str(p) for p in logs], tmp_path / "run.forensics", append=append)
    return open_store(tmp_path / "run.forensics")


def _files(run) -> list[str]:
    d = run.path / S.SUMMARIES_DIR
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_summaries_written_at_ingest_give_the_tables_the_events_give(tmp_path: Path, scenario: str) -> None:
    run = _store(tmp_path, REPO / "sample_logs" / scenario)
    assert _files(run) == [f"ranks-{S.key(run)}.parquet", f"steps-{S.key(run)}.parquet"]
    # the diagnosis' step table: from the summary == aggregated from the events (slices, or none)
    from_summary = C.step_table(run.events(), run)
    assert from_summary.equals(C.step_table(run.events(), run, summary=False))
    assert from_summary.equals(C.step_table(run.events()))
    assert tl.step_table(run, evidence=True).collect().equals(tl.step_table(run.events(), evidence=True).collect())
    # the per-rank table and the `ranks` command
    assert S.rank_table(run).equals(S.rank_rows(run.events()).collect())
    assert tl.rank_summary(run).equals(tl.rank_summary(run.events()))


def test_a_stored_summary_is_what_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = _store(tmp_path, REPO / "sample_logs" / "straggler")
    report = diagnose(run).to_json()

    def boom(_run):  # noqa: ANN001
        raise AssertionError("summary recomputed from the events")

    monkeypatch.setattr(S, "compute_step_groups", boom)
    monkeypatch.setattr(S, "compute_rank_table", boom)
    assert diagnose(open_store(run.path)).to_json() == report
    tl.rank_summary(run)


def test_an_appended_store_never_reads_the_summary_of_its_previous_version(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    src = sorted((REPO / "sample_logs" / "straggler").glob("*.jsonl"))
    assert len(src) >= 2
    (logs / src[0].name).write_bytes(src[0].read_bytes())
    first = _store(tmp_path, logs)
    before = S.rank_table(first)
    (logs / src[1].name).write_bytes(src[1].read_bytes())
    second = _store(tmp_path, logs, append=True)
    assert S.key(second) != S.key(first)
    after = S.rank_table(second)
    assert after.equals(S.rank_rows(second.events()).collect())
    assert after.height > before.height or after["events"].sum() > before["events"].sum()
    # only the current version's files are left
    assert _files(second) == [f"ranks-{S.key(second)}.parquet", f"steps-{S.key(second)}.parquet"]


def test_a_store_that_cannot_be_written_computes_its_summaries_in_memory(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORENSICS_SUMMARIES", "0")
    run = _store(tmp_path, REPO / "sample_logs" / "data_load_skew")
    assert _files(run) == []           # ingest wrote none
    st = C.Context.from_run(run).steps
    assert _files(run) == []           # nor did first use
    monkeypatch.delenv("FORENSICS_SUMMARIES")
    assert C.Context.from_run(open_store(run.path)).steps.equals(st)
    assert _files(run) == [f"ranks-{S.key(run)}.parquet", f"steps-{S.key(run)}.parquet"] or \
        _files(run) == [f"steps-{S.key(run)}.parquet"]


def test_a_damaged_summary_is_computed_again(tmp_path: Path) -> None:
    run = _store(tmp_path, REPO / "sample_logs" / "thermal_throttling")
    want = C.step_table(run.events(), run, summary=False)
    p = S.path_of(run, S.STEPS)
    p.write_bytes(p.read_bytes()[:100])   # cut short (a crash of another writer, a full disk)
    assert C.step_table(run.events(), run).equals(want)
    assert pl.read_parquet(p).height == S.compute_step_groups(run).height   # and written again whole


def test_summaries_are_keyed_by_the_event_parts(tmp_path: Path) -> None:
    run = _store(tmp_path, REPO / "sample_logs" / "healthy")
    k = S.key(run)
    manifest = json.loads((run.path / "manifest.json").read_text())
    manifest["sources"][0]["event_parts"] = [*manifest["sources"][0]["event_parts"], "events/part-other.parquet"]
    other = type(run)(path=run.path, manifest=manifest)
    assert S.key(other) != k
    assert os.path.basename(S.path_of(other, S.RANKS)) != os.path.basename(S.path_of(run, S.RANKS))
