"""Ranks that die in different collectives: the odd one out is a collective mismatch.

gloo's errors carry no sequence number: when one rank calls all_gather while its peers call
all_reduce, each dies with a timeout or a lost peer, and only the torch.distributed call each
traceback died in (its distributed_c10d.py frame) shows who issued the other collective. The lines
here are ours, in the formats torchrun relays a worker's traceback ("[rankN]: " before each line,
torch/distributed/elastic) and gloo words its errors (gloo/transport/tcp/pair.cc, unbound_buffer.cc).
"""
from __future__ import annotations

import json

from typer.testing import CliRunner

from forensics.cli import app
from forensics.majority import minority

_C10D = "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"


def _traceback(rank: int, call: str, line: int, error: str) -> list[str]:
    return [f"[rank{rank}]: {t}" for t in [
        "Traceback (most recent call last):",
        '  File "/srv/train/loop.py", line 88, in <module>',
        f"    dist.{call}(buf, group=pg)",
        '  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 83, in wrapper',
        "    return func(*args, **kwargs)",
        f'  File "{_C10D}", line {line}, in {call}',
        "    work.wait()",
        f"RuntimeError: {error}",
    ]]


def _run(tmp_path, odd: int, world: int = 4) -> dict:
    lines: list[str] = []
    for r in range(world):
        if r == odd:
            lines += _traceback(r, "all_gather", 4287, "[../third_party/gloo/gloo/transport/tcp/pair.cc:553] "
                                "Connection closed by peer [10.0.0.5]:41213")
        else:
            lines += _traceback(r, "all_reduce", 3252, "[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] "
                                "Timed out waiting 5000ms for recv operation to complete")
    lines.append("E1206 10:12:27.860000 1204 torch/distributed/elastic/multiprocessing/api.py:1002] failed "
                 "(exitcode: 1) local_rank: 0 (pid: 1275) of binary: /opt/venv/bin/python")
    for r in range(world):
        with open(tmp_path / f"rank_{r}.jsonl", "w") as f:
            for s in range(4):
                f.write(json.dumps({"timestamp": f"2026-12-06T10:12:1{s}.{r}00Z", "rank": r, "level": "INFO",
                                    "event": "TRAIN_STEP", "extra": {"step": s, "loss": 2.3, "step_time_ms": 90}}) + "\n")
    (tmp_path / "console.log").write_text("\n".join(lines) + "\n")
    res = CliRunner().invoke(app, ["diagnose", str(tmp_path), "--format", "json"])
    return json.loads(res.stdout)


def test_the_rank_in_another_collective_is_the_mismatch(tmp_path) -> None:
    rep = _run(tmp_path, odd=2)
    rc = rep["root_cause"]
    assert rc["kind"] == "collective_mismatch" and rc["ranks"] == [2], rc
    assert "ALLGATHER" in rc["summary"] and "ALLREDUCE" in rc["summary"]


def test_the_odd_rank_is_found_wherever_it_is(tmp_path) -> None:
    rc = _run(tmp_path, odd=0, world=3)["root_cause"]
    assert rc["kind"] == "collective_mismatch" and rc["ranks"] == [0], rc


def test_all_in_one_collective_is_no_mismatch(tmp_path) -> None:
    rc = _run(tmp_path, odd=-1)["root_cause"]
    assert rc is None or rc["kind"] != "collective_mismatch", rc


def test_minority_is_judged_against_the_most_common_signature() -> None:
    assert minority(["a", "b", "a", "a"]) == ([1], 0, 3)
    assert minority([]) == ([], None, 0)
    assert minority(["x", "x"]) == ([], 0, 2)
    # a tie: judged against the first member's signature
    assert minority(["b", "a", "a", "b"]) == ([1, 2], 0, 2)
