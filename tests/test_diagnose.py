"""forensics.passes.diagnose: the pass list, the report it builds, and that passes only read."""
from __future__ import annotations

import importlib
import json
from pathlib import Path

from typer.testing import CliRunner

import forensics
from forensics.cli import app
from forensics.passes import PASSES, diagnose, diagnose_context, pass_name
from forensics.store import open_store
from pass_helpers import sync_run

REPO = Path(__file__).resolve().parent.parent


def test_every_pass_states_its_question_and_domain_fact() -> None:
    names = [pass_name(p) for p in PASSES]
    assert len(names) == len(set(names))
    for p in PASSES:
        doc = importlib.import_module(p.__module__).__doc__ or ""
        assert "Question" in doc and "Domain fact" in doc and "Must not" in doc, p.__module__


def test_passes_only_read_the_context() -> None:
    ctx = sync_run(compute=lambda r, s: 1300.0 if r == 1 else 800.0).ctx()
    steps_before = ctx.steps.clone()
    first = [[f.to_json() for f in p(ctx)] for p in PASSES]
    again = [[f.to_json() for f in p(ctx)] for p in PASSES]
    assert first == again
    assert ctx.steps.equals(steps_before)


def test_report_of_a_store(tmp_path: Path) -> None:
    store = tmp_path / "s.forensics"
    forensics.ingest([str(REPO / "sample_logs" / "oom_cascade")], store)
    run = open_store(store)
    report = diagnose(run)
    doc = json.loads(json.dumps(report.to_json()))
    assert doc["root_cause"]["kind"] == "oom" and doc["root_cause"]["ranks"] == [3]
    assert doc["run"]["ranks"] == 4 and doc["run"]["crashed"] is True
    assert doc["run"]["rejected_lines"] == run.totals["rejected"] > 0   # the traceback and the cut line
    assert [r["rank"] for r in doc["per_rank"]] == [0, 1, 2, 3]
    assert doc["findings"][0]["evidence"]["lines"][0]["source_file"].endswith("rank_3.jsonl")
    # the same through the library's front door, from a store path
    assert forensics.diagnose(str(store)).root_cause.kind == "oom"


def test_healthy_report_says_so() -> None:
    report = diagnose_context(sync_run().ctx())
    assert report.root_cause is None and report.run.crashed is False
    assert all(f.severity == "INFO" or f.kind == "log_hygiene" for f in report.findings)


def test_cli_diagnose_json_on_a_sample(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("FORENSICS_CACHE", str(tmp_path / "cache"))
    res = CliRunner().invoke(app, ["diagnose", str(REPO / "sample_logs" / "straggler"), "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["root_cause"]["kind"] == "straggler" and doc["root_cause"]["ranks"] == [2]
    straggler = doc["findings"][0]
    assert straggler["victims"] == [0, 1, 3]


def test_real_deepspeed_oom_console_log(tmp_path: Path, monkeypatch) -> None:
    """../shared/realdata: a 2-rank DeepSpeed run whose rank 0 dies of CUDA OOM (three times)."""
    log = REPO.parent / "shared" / "realdata" / "console" / "deepspeed_2rank_oom.log"
    if not log.is_file():
        import pytest

        pytest.skip("../shared/realdata is not available")
    monkeypatch.setenv("FORENSICS_CACHE", str(tmp_path))
    rc = diagnose([str(log)]).root_cause
    assert rc.kind == "oom" and rc.ranks == [0]


def test_the_raw_log_cache_is_keyed_on_the_reading_code(tmp_path: Path, monkeypatch) -> None:
    """An upgrade that reads the same logs differently never serves the old store from the cache."""
    from forensics import run as run_mod

    monkeypatch.setenv("FORENSICS_CACHE", str(tmp_path / "cache"))
    logs = [str(REPO / "sample_logs" / "healthy")]
    first = run_mod.open_run(logs).path
    assert run_mod.open_run(logs).path == first            # the same code: the same entry
    monkeypatch.setattr(run_mod, "_reader_digest", lambda: b"code another-reader\n")
    assert run_mod.open_run(logs).path != first            # other reading code: another entry


def test_the_cache_key_covers_every_module_of_the_readers_subpackages(monkeypatch) -> None:
    """The console reader is a package (ingest/console/): a change in any of its modules is
    another cache entry, as a change in a module of ingest/ itself."""
    from forensics import run as run_mod

    ingest = REPO / "forensics" / "ingest"
    covered = set(run_mod._reader_files())
    assert {p.resolve() for p in ingest.rglob("*.py")} <= covered
    assert (ingest / "console" / "typed.py").resolve() in covered
    before = run_mod._reader_digest.__wrapped__()
    target = (ingest / "console" / "typed.py").resolve()
    real = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: real(self) + b"# changed\n" if self == target else real(self))
    assert run_mod._reader_digest.__wrapped__() != before


def test_the_cache_key_reads_many_files_on_several_threads(tmp_path: Path, monkeypatch) -> None:
    """The identities of many log files (the cache key: size, time, content fingerprint) are read
    on more than one thread when there are cores for it, in the files' order: the key is the one a
    single thread gives, and a file changed in place is another key."""
    import threading
    import time

    from forensics import run as run_mod
    from forensics.ingest import sources

    logs = tmp_path / "logs"
    logs.mkdir()
    for r in range(3 * run_mod.IDENTITY_CHUNK):
        (logs / f"rank_{r:04d}.jsonl").write_text(json.dumps({"ts": "2026-01-01T00:00:00Z", "rank": r, "msg": "hi"}) + "\n")
    monkeypatch.setenv("FORENSICS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(run_mod.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    threads: set[str] = set()
    real = sources.file_info

    def info(p):  # type: ignore[no-untyped-def]
        threads.add(threading.current_thread().name)
        time.sleep(0.001)       # each thread has work while the other reads
        return real(p)

    files = sorted(sources.expand([str(logs)]), key=str)
    assert run_mod._identities(files, info) == [real(f) for f in files]
    assert len(threads) >= 2
    first = run_mod.open_run([str(logs)]).path
    (logs / "rank_0200.jsonl").write_text(json.dumps({"ts": "2026-01-01T00:00:00Z", "rank": 200, "msg": "ho"}) + "\n")
    assert run_mod.open_run([str(logs)]).path != first
