"""Issue 27: a report says "Healthy" only when nothing in the input contradicts it.

passes/no_data.py (no usable event is an ERROR that fails CI by default) and passes/unexplained.py
(every ERROR line is cited by, or explained under, a finding, or becomes an unexplained_error
finding). The logs are written here in the formats of their upstream writers: torchrun's tee
prefix (`[default1]:`, torch/distributed/elastic/agent/server/local_elastic_agent.py), the
elastic agent's worker failure and signal lines (torch/distributed/elastic/multiprocessing/api.py:
`failed (exitcode: %s) local_rank: %s (pid: %s) of binary: %s`, `Sending process %s closing
signal %s`) and ChildFailedError's table (torch/distributed/elastic/multiprocessing/errors/__init__.py),
as forensics/ingest/templates.py lists them.
"""
from __future__ import annotations

import base64
import json
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from forensics.cli import app
from forensics.ingest import ingest
from forensics.passes import diagnose
from forensics.report import render
from forensics.store import open_store

from error_accounting import error_lines, unaccounted

runner = CliRunner()

# a worker (local rank 1) dies by SIGSEGV, without a Python traceback of its own; the launcher
# stops the other worker and raises ChildFailedError
SIGSEGV_CONSOLE = """\
[default0]:step 10 | loss 2.301 | 512.3 ms/step
[default1]:step 10 | loss 2.305 | 511.9 ms/step
WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 3305 closing signal SIGTERM
ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -11) local_rank: 1 (pid: 3306) of binary: /usr/bin/python3
Traceback (most recent call last):
  File "/usr/bin/torchrun", line 8, in <module>
    sys.exit(main())
  File "/usr/lib/python3/dist-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py", line 355, in wrapper
    return f(*args, **kwargs)
  File "/usr/lib/python3/dist-packages/torch/distributed/run.py", line 919, in main
    run(args)
  File "/usr/lib/python3/dist-packages/torch/distributed/launcher/api.py", line 269, in launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-11-20_14:37:16
  host      : gpu-node4
  rank      : 1 (local_rank: 1)
  exitcode  : -11 (pid: 3306)
  error_file: <N/A>
  traceback : Signal 11 (SIGSEGV) received by PID 3306
============================================================
"""


def _store(tmp_path: Path, logs: Path):
    out = tmp_path / "run.forensics"
    ingest([str(logs)], out)
    return open_store(out)


def _jsonl_run(d: Path, ranks: int = 8, steps: int = 40, extra: dict[int, list[dict]] | None = None,
               stop: dict[int, int] | None = None) -> Path:
    """Seed-schema JSON lines: one TRAIN_STEP per second per rank; `stop[r]`: rank r's last step;
    `extra[r]`: more records of rank r, placed by their timestamp."""
    d.mkdir(parents=True, exist_ok=True)
    for r in range(ranks):
        recs = [{"timestamp": f"2025-06-12T14:00:{s:02d}.000Z", "rank": r, "level": "INFO", "event": "TRAIN_STEP",
                 "message": "step", "extra": {"step": s, "loss": 2.0 - 0.01 * s, "step_time_ms": 1000}}
                for s in range(steps) if s <= (stop or {}).get(r, steps)]
        recs = sorted(recs + (extra or {}).get(r, []), key=lambda x: x["timestamp"])
        (d / f"rank_{r}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in recs))
    return d


# --- no_data -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("content", [b"", random.Random(7).randbytes(4000)],
                         ids=["empty_file", "garbage_file"])
def test_no_usable_event_is_an_error_never_healthy(tmp_path: Path, content: bytes) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "rank_0.log").write_bytes(content)
    run = _store(tmp_path, logs)
    report = diagnose(run)
    [f] = report.findings
    assert (f.kind, f.severity) == ("no_data", "ERROR")
    assert report.root_cause is not None and report.root_cause.kind == "no_data"
    assert f.evidence["files"] == 1 and f.evidence["events"] == 0
    assert f.evidence["lines_read"] == run.totals["lines_read"] and f.evidence["rejected"] == run.totals["rejected"]
    assert f.lines and f.lines[0].source_file.endswith("rank_0.log")
    if content:
        assert f.evidence["rejected"] > 0 and f.lines[0].line >= 1   # the first rejected line is cited
    text = render(report, "text")
    assert "Healthy" not in text and "No usable data" in text


@pytest.mark.parametrize("name, content", [
    ("console.log", base64.b64encode(random.Random(3).randbytes(30000))),                  # text lines, no sense
    ("out.txt", "\n".join("".join(chr(random.Random(i).randint(32, 126)) for _ in range(80))
                           for i in range(300)).encode()),
    ("rank_0.log", random.Random(5).randbytes(20000) + b"\ncore dumped here\n" + random.Random(6).randbytes(20000)),
    # binary: a line or two decode as text, the rest is rejected
], ids=["base64_text", "printable_noise", "binary_rank_file"])
def test_events_that_carry_nothing_readable_are_no_data(tmp_path: Path, name: str, content: bytes) -> None:
    # the console reader keeps any line of text as an event: events with no time, step, metric or
    # WARN/ERROR level give a diagnosis nothing to read, and "nothing wrong found" in them is no claim
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / name).write_bytes(content)
    run = _store(tmp_path, logs)
    assert run.totals["events"] > 0
    report = diagnose(run)
    assert report.root_cause is not None and report.root_cause.kind == "no_data"
    [f] = [f for f in report.findings if f.kind == "no_data"]
    assert f.severity == "ERROR" and f.evidence["events"] == run.totals["events"]
    assert "Healthy" not in render(report, "text")
    assert runner.invoke(app, ["diagnose", str(logs), "--fail-on", "WARN"]).exit_code == 3
    # one line of the same text with a time is something to read: no no_data finding
    (logs / name).write_bytes(content + b"\n2025-06-12 14:00:01,000 INFO trainer: step 1 loss 2.5\n")
    assert not [f for f in diagnose(_store(tmp_path / "again", logs)).findings if f.kind == "no_data"]


def test_cli_fails_on_no_data_without_fail_on_and_junit_fails(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "rank_0.jsonl").write_bytes(b"")
    res = runner.invoke(app, ["diagnose", str(logs)])
    assert res.exit_code == 3, res.output
    res = runner.invoke(app, ["diagnose", str(logs), "--fail-on", "WARN", "--format", "junit"])
    assert res.exit_code == 3
    assert 'failures="1"' in res.output and '<testcase name="no_data" classname="forensics.passes"' in res.output
    summary = tmp_path / "summary.md"
    assert runner.invoke(app, ["diagnose", str(logs), "--summary", str(summary)]).exit_code == 3
    assert "CI: **failed** (no_data)" in summary.read_text()
    # a policy limited to other kinds still fails on it; only naming it with a minus lets it pass
    assert runner.invoke(app, ["diagnose", str(logs), "--fail-on", "WARN:straggler"]).exit_code == 3
    assert runner.invoke(app, ["diagnose", str(logs), "--fail-on", "ERROR:-no_data"]).exit_code == 0


def test_folder_without_files_is_no_data(tmp_path: Path) -> None:
    empty = tmp_path / "empty_dir"
    empty.mkdir()
    res = runner.invoke(app, ["diagnose", str(empty), "--format", "json"])
    assert res.exit_code == 3
    d = json.loads(res.output)
    assert d["root_cause"]["kind"] == "no_data" and d["findings"][0]["evidence"]["lines"][0]["source_file"] == str(empty)
    # a path that does not exist stays a user error (a typo), not a report
    assert runner.invoke(app, ["diagnose", str(tmp_path / "nope")]).exit_code == 1


def test_lint_and_compare_on_empty_input_are_not_green(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "rank_0.log").write_bytes(random.Random(3).randbytes(3000))
    res = runner.invoke(app, ["lint", str(logs)])
    assert res.exit_code == 3 and "no_data" in res.output
    good = _jsonl_run(tmp_path / "good", ranks=2, steps=30)
    # compare: NOT COMPARABLE (exit 4, README), its usable-data check failed: never green
    res = runner.invoke(app, ["compare", str(good), str(logs)])
    assert res.exit_code == 4 and "candidate holds no usable event" in res.output
    res = runner.invoke(app, ["compare", str(logs), str(logs)])
    assert res.exit_code == 4 and res.output.count("no usable event") >= 2


# --- unexplained_error -----------------------------------------------------------------------------------

def test_worker_killed_by_signal_plus_launcher_traceback_is_not_healthy(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "console.log").write_text(SIGSEGV_CONSOLE)
    run = _store(tmp_path, logs)
    report = diagnose(run)
    rc = report.root_cause
    assert rc is not None and rc.kind in ("unexplained_error", "crash")   # crash: once the signal is read as one
    assert "Healthy" not in render(report, "text")
    assert unaccounted(run.events(), report, run.totals.get("ranks") or []) == []
    assert report.run.error_lines == len(error_lines(run.events())) > 0
    if rc.kind == "unexplained_error":     # until the failures pass reads the signal (issue 27 item 2)
        root = report.findings[0]
        assert root.local_ranks == [{"host": None, "local_rank": 1}] or root.ranks == [1]
        assert "exitcode: -11" in root.title and root.lines[0].line == 4


def test_error_under_an_unknown_event_name_surfaces_with_its_rank_and_line(tmp_path: Path) -> None:
    err = {"timestamp": "2025-06-12T14:00:30.500Z", "rank": 6, "level": "CRITICAL", "event": "shard_loader_gave_up",
           "message": "ValueError: shard 17 has 0 samples", "extra": {"exc_type": "ValueError"}}
    logs = _jsonl_run(tmp_path / "logs", stop={6: 30}, extra={6: [err]})
    run = _store(tmp_path, logs)
    report = diagnose(run)
    # an ERROR event of any name carrying an exception is the rank's own error: a crash once the
    # failures pass reads it as one (ingest/failure facts), else an unexplained error — never silence
    rc = report.root_cause
    assert rc is not None and (rc.ranks, rc.basis) == ([6], "own_error") and rc.kind in ("crash", "unexplained_error")
    f = report.findings[0]
    assert f.kind == rc.kind and f.severity == "ERROR"
    assert (Path(f.lines[0].source_file).name, f.lines[0].line) == ("rank_6.jsonl", 32)
    assert "ValueError" in f.title and "shard 17 has 0 samples" in f.title
    # the verdict, and the lag it caused is explained by it
    assert any(report.findings[i].kind == "rank_lag" for i in f.explains)
    assert report.run.error_lines == 1 and unaccounted(run.events(), report, run.totals["ranks"]) == []
    text = " ".join(render(report, "text").split())
    assert "Healthy" not in text and "of 1 ERROR line" in text


def test_a_recognised_failure_stays_the_root_over_an_earlier_unexplained_error(tmp_path: Path) -> None:
    early = {"timestamp": "2025-06-12T14:00:05.500Z", "rank": 0, "level": "ERROR", "event": "ckpt_upload",
             "message": "upload of checkpoint shard failed, will retry"}
    oom = {"timestamp": "2025-06-12T14:00:30.200Z", "rank": 3, "level": "ERROR", "event": "CUDA_OOM",
           "message": "CUDA out of memory. Tried to allocate 2.00 GiB"}
    tos = {r: [{"timestamp": "2025-06-12T14:00:35.100Z", "rank": r, "level": "ERROR", "event": "NCCL_TIMEOUT",
                "message": f"rank={r} allreduce seq=31 timed out waiting on rank=3", "extra": {"seq": 31}}]
           for r in (0, 1, 2)}
    tos[0].append(early)
    tos[3] = [oom]
    logs = _jsonl_run(tmp_path / "logs", ranks=4, stop={0: 30, 1: 30, 2: 30, 3: 30}, extra=tos)
    run = _store(tmp_path, logs)
    report = diagnose(run)
    rc = report.root_cause
    assert rc is not None and (rc.kind, rc.ranks) == ("oom", [3])
    [u] = [f for f in report.findings if f.kind == "unexplained_error"]
    assert u.ranks == [0] and "upload of checkpoint shard failed" in u.title
    assert unaccounted(run.events(), report, run.totals["ranks"]) == []
    assert report.run.error_lines == 5 and report.run.error_lines_accounted == 4


def test_the_reference_check_catches_a_report_that_drops_an_error(tmp_path: Path) -> None:
    err = {"timestamp": "2025-06-12T14:00:10.000Z", "rank": 2, "level": "FATAL", "event": "my_thing",
           "message": "RuntimeError: boom"}
    logs = _jsonl_run(tmp_path / "logs", ranks=4, steps=20, extra={2: [err]})
    run = _store(tmp_path, logs)
    report = diagnose(run)
    assert unaccounted(run.events(), report, run.totals["ranks"]) == []
    report.findings = [f for f in report.findings if f.kind != "unexplained_error"]
    [left] = unaccounted(run.events(), report, run.totals["ranks"])
    assert "rank_2.jsonl:12 rank 2 " in left and "RuntimeError: boom" in left


def test_a_healthy_run_says_it_has_no_error_lines(tmp_path: Path) -> None:
    logs = _jsonl_run(tmp_path / "logs", ranks=2, steps=30)
    report = diagnose(_store(tmp_path, logs))
    assert report.root_cause is None and (report.run.error_lines, report.run.error_lines_accounted) == (0, 0)
    assert "Healthy" in render(report, "text") and "No ERROR line in the input." in render(report, "md")
    assert json.loads(render(report, "json"))["run"]["error_lines"] == 0


def test_a_traceback_nobody_recognises_is_never_healthy(tmp_path: Path) -> None:
    # Megatron's training_log lines, then the assertion of megatron/core/distributed/
    # param_and_grad_buffer.py (f"Rank {global_rank}: found NaN in local grad norm in backward pass
    # before data-parallel communication collective. Device: {device}, node: {host}"), no rank prefix
    it = (" iteration {i:>8}/  500000 | consumed samples: {n:>12} | elapsed time per iteration (ms): 1843.2 | "
          "learning rate: 1.500E-04 | global batch size:   256 | lm loss: 6.712345E+00 | loss scale: 1.0 | "
          "grad norm: 1.234 | number of skipped iterations:   0 | number of nan iterations:   0 |")
    lines = [it.format(i=i, n=256 * i) for i in (100, 110)] + [
        "Traceback (most recent call last):",
        '  File "/srv/megatron/pretrain_gpt.py", line 240, in <module>',
        "    pretrain(train_valid_test_datasets_provider,",
        '  File "/srv/megatron/megatron/core/distributed/param_and_grad_buffer.py", line 151, in start_grad_sync',
        "    assert not norm.isnan(), (",
        "AssertionError: Rank 5: found NaN in local grad norm in backward pass before data-parallel communication "
        "collective. Device: 5, node: trn-17",
    ]
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "train.out").write_text("\n".join(lines) + "\n")
    run = _store(tmp_path, logs)
    report = diagnose(run)
    assert report.root_cause is not None
    text = " ".join(render(report, "text").split())
    assert "Healthy" not in text and "found NaN in local grad norm" in text
    assert unaccounted(run.events(), report, run.totals.get("ranks") or []) == []
    assert report.run.error_lines == len(error_lines(run.events())) > 0


def test_a_silent_ranks_own_error_is_not_explained_by_its_silence(tmp_path: Path) -> None:
    # rank 6 logs an ERROR under a name of its own and stops; the others time out in gloo's recv
    # (gloo/transport/tcp/unbound_buffer.cc: "Timed out waiting %dms for recv operation to complete").
    # The hang pass names rank 6 by its silence ("without an error of its own"); the error it
    # did log is the cause, and explains the hang
    err = {"timestamp": "2025-06-12T14:00:30.500Z", "rank": 6, "level": "ERROR", "event": "worker_abort",
           "message": "RuntimeError: expected scalar type Float but found Half", "extra": {"exc_type": "RuntimeError"}}
    extra = {r: [{"timestamp": "2025-06-12T14:00:36.100Z", "rank": r, "level": "ERROR", "event": "COLLECTIVE_ERROR",
                  "message": "[/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting "
                             "5000ms for recv operation to complete", "extra": {"step": 31}}]
             for r in range(8) if r != 6}
    extra[6] = [err]
    logs = _jsonl_run(tmp_path / "logs", stop={r: 30 for r in range(8)}, extra=extra)
    run = _store(tmp_path, logs)
    report = diagnose(run)
    rc = report.root_cause
    assert rc is not None and (rc.ranks, rc.basis) == ([6], "own_error") and rc.kind in ("crash", "unexplained_error")
    hang = [i for i, f in enumerate(report.findings) if f.kind in ("hang", "nccl_timeout")]
    assert hang and set(hang) <= set(report.findings[0].explains)      # its peers' wait follows from it
    assert report.run.error_lines == 8
    assert unaccounted(run.events(), report, run.totals["ranks"]) == []


def _heartbeats(d: Path, last: dict[int, float], ranks: int = 4) -> Path:
    """Lines with a time and no step (a heartbeat every second); rank r's last at `last[r]` s."""
    d.mkdir(parents=True, exist_ok=True)
    for r in range(ranks):
        end = last.get(r, 59.0)
        recs = [{"timestamp": f"2025-06-12T14:00:{s:06.3f}Z", "rank": r, "level": "INFO", "event": "HEARTBEAT",
                 "message": "alive"} for s in [float(x) for x in range(int(end) + 1)] + ([end] if end % 1 else [])]
        (d / f"rank_{r}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in recs))
    return d


def test_a_rank_that_stops_logging_early_without_a_finding_is_a_warning(tmp_path: Path) -> None:
    run = _store(tmp_path, _heartbeats(tmp_path / "logs", {2: 19.0}))
    report = diagnose(run)
    [f] = [f for f in report.findings if f.rule == "pass.silent_rank"]
    assert (f.kind, f.severity, f.ranks, f.basis) == ("rank_lag", "WARN", [2], "last_to_log")
    assert f.evidence["gap_s"] == 40.0 and (Path(f.lines[0].source_file).name, f.lines[0].line) == ("rank_2.jsonl", 20)
    assert report.root_cause is not None and report.root_cause.ranks == [2]
    # ranks that end within a second of each other: nothing
    quiet = _store(tmp_path / "b", _heartbeats(tmp_path / "b" / "logs", {2: 58.5}))
    assert [f for f in diagnose(quiet).findings if f.rule == "pass.silent_rank"] == []


def test_a_rank_a_finding_already_names_is_not_flagged_again(tmp_path: Path) -> None:
    err = {"timestamp": "2025-06-12T14:00:30.500Z", "rank": 6, "level": "CRITICAL", "event": "shard_loader_gave_up",
           "message": "ValueError: shard 17 has 0 samples"}
    report = diagnose(_store(tmp_path, _jsonl_run(tmp_path / "logs", stop={6: 30}, extra={6: [err]})))
    assert [f for f in report.findings if f.rule == "pass.silent_rank"] == []


def test_the_same_error_on_every_rank_is_one_finding_naming_them_all(tmp_path: Path) -> None:
    # every rank opens its own shard of a dataset that is not there: one fault, not 16
    extra = {r: [{"timestamp": "2025-06-12T14:00:05.500Z", "rank": r, "level": "ERROR", "event": "data_open",
                  "message": f"FileNotFoundError: [Errno 2] No such file or directory: '/data/shard_{r:05d}.bin'"}]
             for r in range(16)}
    extra[3].append({"timestamp": "2025-06-12T14:00:06.000Z", "rank": 3, "level": "ERROR", "event": "ckpt",
                     "message": "OSError: checkpoint directory is read-only"})
    run = _store(tmp_path, _jsonl_run(tmp_path / "logs", ranks=16, steps=20, extra=extra))
    report = diagnose(run)
    found = [f for f in report.findings if f.kind == "unexplained_error"]
    assert [f.ranks for f in found] == [list(range(16))]       # rank 3's second error is its own consequence
    assert found[0].evidence["error_lines"] == 17 and "ranks 0–15" in found[0].title
    assert unaccounted(run.events(), report, run.totals["ranks"]) == []
