"""ProcessGroupNCCL's heartbeat monitor (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp,
HeartbeatMonitor::runLoop) logs, on the rank whose watchdog thread made no progress,
"Heartbeat monitor timed out! Process will be terminated after dumping debug info." (LOG(ERROR))
and "ProcessGroupNCCL's watchdog got stuck for N seconds without making progress in monitoring
enqueued collectives. ..." (LOG(FATAL)). When only some ranks say so they are hung; when every
rank says so, alike, the messages name no rank: a hang of the job with no culprit, not a crash
of whichever rank printed first, and every rank's lines are that hang's.

Every line here is ours, in that format.
"""
from __future__ import annotations

import json


def _stuck(rank: int, t: str) -> list[str]:
    pg = f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}]"
    return [
        f"[rank{rank}]:[E1107 04:{t}.{rank}11000000 ProcessGroupNCCL.cpp:1402] {pg} Heartbeat monitor timed out! "
        "Process will be terminated after dumping debug info. workMetaList_.size()=2",
        f"[rank{rank}]:[F1107 04:{t}.{rank}22000000 ProcessGroupNCCL.cpp:1550] {pg} {pg} ProcessGroupNCCL's watchdog got stuck "
        "for 480 seconds without making progress in monitoring enqueued collectives. This typically indicates a NCCL/CUDA "
        "API hang blocking the watchdog.",
    ]


def _diagnose(tmp_path, lines: list[str]) -> dict:
    from typer.testing import CliRunner

    from forensics.cli import app

    (tmp_path / "train.log").write_text("\n".join(lines) + "\n")
    res = CliRunner().invoke(app, ["diagnose", str(tmp_path), "--format", "json"])
    return json.loads(res.stdout)


def test_every_rank_stuck_is_a_hang_with_no_culprit(tmp_path):
    lines = [f"[rank{r}]:step 300 loss 1.93" for r in range(4)]
    for r in (2, 0, 3, 1):
        lines += _stuck(r, "31:05")
    rep = _diagnose(tmp_path, lines)
    rc = rep["root_cause"]
    assert (rc["kind"], rc["ranks"]) == ("hang", [])
    assert not [f for f in rep["findings"] if f["kind"] == "unexplained_error"]


def test_some_ranks_stuck_are_the_hangs_culprits(tmp_path):
    lines = [f"[rank{r}]:step 300 loss 1.93" for r in range(4)]
    lines += _stuck(2, "31:05")
    rc = _diagnose(tmp_path, lines)["root_cause"]
    assert (rc["kind"], rc["ranks"]) == ("hang", [2])


def test_one_rank_alone_stuck_is_its_hang(tmp_path):
    # a paste of one rank's output: its own watchdog is stuck, nothing says the others' were
    rc = _diagnose(tmp_path, _stuck(6, "31:05"))["root_cause"]
    assert (rc["kind"], rc["ranks"]) == ("hang", [6])
