"""Ranks that stop together are named together: a whole node that leaves (its workers exit
cleanly at the same step) while the other node's ranks time out waiting for it.

Which of two ranks that fell silent a millisecond apart went first no log can show; naming one of
them (the earliest last line) blamed half a node. Lines are ours: JSON lines of a job, and the gloo
timeouts torchrun relays from the waiting ranks ("[rankN]: " before each traceback line).
"""
from __future__ import annotations

import json

from typer.testing import CliRunner

from forensics.cli import app


def _run(tmp_path, stop_ms: dict[int, int]) -> dict:
    for r in range(4):
        with open(tmp_path / f"rank_{r}.jsonl", "w") as f:
            last = 5 if r in stop_ms else 8
            for s in range(last):
                ms = stop_ms.get(r, 10 * r) if s == last - 1 and r in stop_ms else 10 * r
                f.write(json.dumps({"timestamp": f"2026-12-06T10:00:{s * 0.2 + 10 + ms / 1000:06.3f}Z", "rank": r,
                                    "level": "INFO", "event": "TRAIN_STEP",
                                    "extra": {"step": s, "loss": 2.3, "step_time_ms": 200}}) + "\n")
    tb = []
    for r in (0, 1):
        tb += [f"[rank{r}]: Traceback (most recent call last):",
               f'[rank{r}]:   File "/srv/train.py", line 90, in <module>',
               f"[rank{r}]:     dist.all_reduce(flat, group=pg)",
               f"[rank{r}]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] "
               "Timed out waiting 5000ms for recv operation to complete"]
    (tmp_path / "console.log").write_text("\n".join(tb) + "\n")
    res = CliRunner().invoke(app, ["diagnose", str(tmp_path), "--format", "json"])
    return json.loads(res.stdout)


def test_two_ranks_that_stop_a_millisecond_apart_are_both_named(tmp_path) -> None:
    rc = _run(tmp_path, {2: 20, 3: 21})["root_cause"]
    assert rc["ranks"] == [2, 3], rc


def test_a_rank_that_stopped_a_step_before_another_is_named_alone(tmp_path) -> None:
    rc = _run(tmp_path, {2: 20, 3: 190})["root_cause"]
    assert rc["ranks"] == [2], rc


def _failure(i: int, rank: int, code: int, sig: str) -> list[str]:
    # torchrun's ChildFailedError summary (torch/distributed/elastic/multiprocessing/errors)
    return [f"[{i}]:", "  time      : 2026-12-06_10:00:20", "  host      : node-a",
            f"  rank      : {rank} (local_rank: {rank})", f"  exitcode  : {code} (pid: {900 + rank})  {sig}".rstrip(),
            "  error_file: <N/A>", "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"]


def test_of_ranks_silent_together_the_launcher_stopped_some_the_one_it_did_not_had_left(tmp_path) -> None:
    for r in range(4):
        with open(tmp_path / f"rank_{r}.jsonl", "w") as f:
            for s in range(6):
                f.write(json.dumps({"timestamp": f"2026-12-06T10:00:{s * 0.2 + 10 + r / 1000:06.3f}Z", "rank": r,
                                    "level": "INFO", "event": "TRAIN_STEP",
                                    "extra": {"step": s, "loss": 2.3, "step_time_ms": 200}}) + "\n")
    lines = ["[rank2]: Traceback (most recent call last):",
             '[rank2]:   File "/srv/train.py", line 90, in <module>',
             "[rank2]:     dist.all_reduce(flat, group=pg)",
             "[rank2]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] "
             "Timed out waiting 5000ms for recv operation to complete",
             "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "=" * 56, "train.py FAILED",
             "-" * 56, "Failures:"]
    lines += _failure(1, 0, -15, "(SIGTERM)") + _failure(2, 1, -15, "(SIGTERM)")
    lines += ["-" * 56, "Root Cause (first observed failure):"] + _failure(0, 2, 1, "") + ["=" * 56]
    (tmp_path / "console.log").write_text("\n".join(lines) + "\n")
    res = CliRunner().invoke(app, ["diagnose", str(tmp_path), "--format", "json"])
    rc = json.loads(res.stdout)["root_cause"]
    assert rc["ranks"] == [3], rc
    assert "left by itself" in rc["summary"], rc["summary"]


def test_a_rank_that_left_with_exit_0_is_the_hang_its_peers_lost_connections_report(tmp_path) -> None:
    """Rank 5 leaves cleanly after step 7 (exit 0: not in the launcher's failures); ranks 2-4's
    gloo connections to it reset, their tracebacks written (stderr into their JSON-lines files)
    after their own last timed lines — which came a few ms before rank 5's. An untimed error is
    only known to come after the line above it: it must not date the victims' failure before the
    silence that caused it (that read as an 'NCCL timeout' root cause, the hang its cascade)."""
    for r in range(6):
        with open(tmp_path / f"rank_{r}.jsonl", "w") as f:
            for s in range(8):
                f.write(json.dumps({"timestamp": f"2026-12-06T10:00:{s * 0.2 + 10 + (5 if r == 5 else r) / 1000:06.3f}Z",
                                    "rank": r, "level": "INFO", "event": "TRAIN_STEP",
                                    "extra": {"step": s, "loss": 2.3, "step_time_ms": 200}}) + "\n")
            if r in (2, 3, 4):
                f.write("\n".join([f"[rank{r}]: Traceback (most recent call last):",
                                   f'[rank{r}]:   File "/srv/train.py", line 90, in <module>',
                                   f"[rank{r}]:     dist.all_reduce(flat, group=pg)",
                                   f"[rank{r}]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:537] "
                                   "Read error [127.0.0.1]:41000: Connection reset by peer"]) + "\n")
    lines = [f"W1206 10:00:12.100000 700 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process {900 + r} "
             "closing signal SIGTERM" for r in range(4)]
    lines += ["E1206 10:00:12.200000 700 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) "
              "local_rank: 4 (pid: 904) of binary: /usr/bin/python",
              "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "=" * 56, "train.py FAILED",
              "-" * 56, "Failures:"]
    for i, r in enumerate(range(4)):
        lines += _failure(i + 1, r, -15, "(SIGTERM)")
    lines += ["-" * 56, "Root Cause (first observed failure):"] + _failure(0, 4, 1, "") + ["=" * 56]
    (tmp_path / "console.log").write_text("\n".join(lines) + "\n")
    res = CliRunner().invoke(app, ["diagnose", str(tmp_path), "--format", "json"])
    rep = json.loads(res.stdout)
    rc = rep["root_cause"]
    assert rc["kind"] == "hang" and rc["ranks"] == [5], rc
    # the launcher stopped ranks 0 and 1 (its teardown): rank 5, not among them, had left by itself
    assert "left by itself" in rc["summary"] and "stopped ranks 0,1 (SIGTERM)" in rc["summary"], rc["summary"]
    hang = next(f for f in rep["findings"] if f["kind"] == "hang")
    timeout = next(f for f in rep["findings"] if f["kind"] == "nccl_timeout")
    assert timeout["ranks"] == [5] and timeout["first_seen"] >= hang["first_seen"] == "2026-12-06T10:00:11.405000+00:00"
