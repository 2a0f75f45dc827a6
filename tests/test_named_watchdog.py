"""An event a job names "watchdog" is not, by its name alone, a collective's timeout.

A job's own WARN event called watchdog that says it is aborting, then the launcher's record of a
SIGABRT exit of that worker: the rank aborted (a crash), and its peers, stopped by the launcher
before any timeout, are not waiting on a rank that "went silent". Lines are ours: JSON lines of a
job, and torchrun's record of a failed worker (torch/distributed/elastic/multiprocessing/api.py).
"""
from __future__ import annotations

import json

from typer.testing import CliRunner

from forensics.cli import app


def _run(tmp_path, event: str, level: str) -> dict:
    for r in range(3):
        with open(tmp_path / f"rank_{r}.jsonl", "w") as f:
            for s in range(6):
                f.write(json.dumps({"timestamp": f"2026-12-06T10:00:0{s}.{r}10Z", "rank": r, "level": "INFO",
                                    "event": "TRAIN_STEP", "extra": {"step": s, "loss": 2.3, "step_time_ms": 300}}) + "\n")
            if r == 0:
                f.write(json.dumps({"timestamp": "2026-12-06T10:00:06.020Z", "rank": 0, "level": level, "event": event,
                                    "message": "internal state inconsistent, aborting", "extra": {"step": 6}}) + "\n")
    (tmp_path / "console.log").write_text(
        "W1206 10:00:06.300000 900 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 902 closing signal SIGTERM\n"
        "E1206 10:00:06.400000 900 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -6) "
        "local_rank: 0 (pid: 901) of binary: /usr/bin/python3\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        + "=" * 60 + "\ntrain.py FAILED\n" + "-" * 60 + "\nFailures:\n  <NO_OTHER_FAILURES>\n" + "-" * 60 + "\n"
        "Root Cause (first observed failure):\n[0]:\n  time      : 2026-12-06_10:00:06\n  host      : node-a\n"
        "  rank      : 0 (local_rank: 0)\n  exitcode  : -6 (pid: 901)\n  error_file: <N/A>\n"
        "  traceback : Signal 6 (SIGABRT) received by PID 901\n" + "=" * 60 + "\n")
    res = CliRunner().invoke(app, ["diagnose", str(tmp_path), "--format", "json"])
    return json.loads(res.stdout)


def test_a_warn_named_watchdog_that_aborts_is_the_ranks_crash(tmp_path) -> None:
    rc = _run(tmp_path, "watchdog", "WARN")["root_cause"]
    assert rc["kind"] in ("crash", "unexplained_error") and rc["ranks"] == [0], rc
