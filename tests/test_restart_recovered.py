"""A run torchrun restarted (--max-restarts) after one rank crashed, and that trained on: the
crash is still the root cause, but the verdict says the job restarted, and the run did not end in
it. Lines are ours: JSON lines of a job whose workers append to the same files after the restart,
and the console torchrun relays (the crashed rank's traceback, the agent's failure line)."""
from __future__ import annotations

import json

from typer.testing import CliRunner

from forensics.cli import app


def _steps(f, r: int, t0: float, n: int) -> None:
    for s in range(n):
        f.write(json.dumps({"timestamp": f"2026-12-06T10:00:{t0 + s * 0.2 + r / 1000:06.3f}Z", "rank": r,
                            "level": "INFO", "event": "TRAIN_STEP",
                            "extra": {"step": s, "loss": 2.3 - s * 0.01, "step_time_ms": 200}}) + "\n")


def _run(tmp_path, restarted: bool) -> tuple[dict, str]:
    for r in range(3):
        with open(tmp_path / f"rank_{r}.jsonl", "w") as f:
            _steps(f, r, 10.0, 5 if r == 1 else 6)
            if restarted:            # the new processes of the same ranks, from step 0
                _steps(f, r, 30.0, 8)
    lines = ["[rank1]: Traceback (most recent call last):",
             '[rank1]:   File "/srv/train.py", line 77, in <module>',
             "[rank1]:     batch = decode(raw)",
             "[rank1]: ValueError: bad record 17 in shard 3"]
    for r in (0, 2):
        lines += [f"[rank{r}]: Traceback (most recent call last):",
                  f'[rank{r}]:   File "/srv/train.py", line 90, in <module>',
                  f"[rank{r}]:     dist.all_reduce(flat, group=pg)",
                  f"[rank{r}]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
                  "[127.0.0.1]:4242"]
    lines += ["W1206 10:00:12.100000 4000 torch/distributed/elastic/multiprocessing/api.py:900] Sending process 900 "
              "closing signal SIGTERM",
              "E1206 10:00:12.400000 4000 torch/distributed/elastic/multiprocessing/api.py:874] failed (exitcode: 1) "
              "local_rank: 1 (pid: 901) of binary: /usr/bin/python3"]
    (tmp_path / "console.log").write_text("\n".join(lines) + "\n")
    rep = json.loads(CliRunner().invoke(app, ["diagnose", str(tmp_path), "--format", "json"]).stdout)
    text = CliRunner().invoke(app, ["diagnose", str(tmp_path)]).stdout
    return rep, text


def test_a_crash_the_job_restarted_after_is_the_root_cause_and_says_so(tmp_path) -> None:
    rep, text = _run(tmp_path, restarted=True)
    rc = rep["root_cause"]
    assert rc["kind"] == "crash" and rc["ranks"] == [1], rc
    assert "restarted" in rc["summary"], rc["summary"]
    assert rep["run"]["crashed"] is False
    assert "restarted after a failure" in text and "ended in a crash" not in text


def test_a_crash_nobody_trained_after_ended_the_run(tmp_path) -> None:
    rep, text = _run(tmp_path, restarted=False)
    rc = rep["root_cause"]
    assert rc["kind"] == "crash" and rc["ranks"] == [1], rc
    assert "restarted" not in rc["summary"]
    assert rep["run"]["crashed"] is True and "ended in a crash" in text
