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
