"""A launch command pasted into the log shows a one-node launch when it names no node count:
torchrun's and torch.distributed.launch's --nnodes defaults to 1 (torch/distributed/run.py,
get_args_parser: "--nnodes", default="1:1"), --standalone is one node. Then the agent's
`failed (exitcode: N) local_rank: L (pid: P) of binary: B` (torch/distributed/elastic/
multiprocessing/api.py) names global rank L (basis one_node). A command with --nnodes 2 does not.

Every line here is ours, in those formats.
"""
from __future__ import annotations

import json

import pytest


def _diagnose(tmp_path, text: str) -> dict:
    from typer.testing import CliRunner

    from forensics.cli import app

    (tmp_path / "train.log").write_text(text)
    res = CliRunner().invoke(app, ["diagnose", str(tmp_path), "--format", "json"])
    return json.loads(res.stdout)


def _log(cmd: str, local: int, code: int, workers: int) -> str:
    pids = [41000 + i for i in range(workers)]
    lines = [f"user@box:~/proj$ {cmd}", "epoch 0 step 10 loss 3.91"]
    lines += [f"WARNING:torch.distributed.elastic.multiprocessing.api:Sending process {p} closing signal SIGTERM"
              for i, p in enumerate(pids) if i != local]
    lines.append(f"ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: {code}) local_rank: {local} "
                 f"(pid: {pids[local]}) of binary: /opt/venv/bin/python3")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("cmd,local,code,kind", [
    ("torchrun --nproc_per_node 4 train.py --lr 3e-4", 2, -9, "host_oom"),
    ("torchrun --standalone --nproc-per-node=8 pretrain.py", 5, -11, "crash"),
    ("python -m torch.distributed.launch --nproc_per_node=2 main.py --bs 16", 1, -9, "host_oom"),
])
def test_a_command_without_a_node_count_is_one_node(tmp_path, cmd, local, code, kind):
    rc = _diagnose(tmp_path, _log(cmd, local, code, 8 if "8" in cmd else 4))["root_cause"]
    assert rc["kind"] == kind and rc["ranks"] == [local] and rc["basis"] == "one_node"


@pytest.mark.parametrize("cmd", ["torchrun --nnodes 2 --nproc_per_node 4 train.py",
                                 "torchrun --nnodes=2 --node_rank=0 --nproc_per_node=4 train.py"])
def test_a_command_with_two_nodes_keeps_the_local_rank(tmp_path, cmd):
    rc = _diagnose(tmp_path, _log(cmd, 3, -9, 4))["root_cause"]
    assert rc["kind"] == "host_oom" and rc["ranks"] == [] and rc["local_ranks"][0]["local_rank"] == 3


def test_a_traceback_through_the_torchrun_script_is_no_command(tmp_path):
    # the agent's own traceback names the torchrun script's path: no command line, no node count.
    # Alone (the failed worker's line, no other pid of the agent's) it shows no node at all
    tb = ('Traceback (most recent call last):\n'
          '  File "/opt/venv/bin/torchrun", line 8, in <module>\n')
    lone = "\n".join(ln for ln in _log("python train.py", 1, -9, 2).splitlines() if "closing signal" not in ln) + "\n"
    rc = _diagnose(tmp_path, lone + tb)["root_cause"]
    assert rc["ranks"] == []
    # with the agent's closing signal to the other worker, its pids cover local ranks 0..1: one
    # node by the agent's pids (tests/test_one_node_agent.py), still not by a command
    rep = _diagnose(tmp_path, _log("python train.py", 1, -9, 2) + tb)
    assert rep["root_cause"]["ranks"] == [1] and rep["root_cause"]["basis"] == "one_node"
    why = json.dumps([f["evidence"].get("one_node") for f in rep["findings"]])
    assert "worker pids" in why and "default --nnodes" not in why
