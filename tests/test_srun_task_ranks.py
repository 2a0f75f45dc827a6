"""srun's task ids are the ranks where srun started the ranks (failure_facts.SrunRanks,
passes/failures/rows.py _srun_tasks): `srun: error: <node>: task(s) <list>: <state>` names the
processes that died, by SLURM_PROCID. Under a per-node launcher (torchrun) a task is a node.

Every line here is ours, in the format slurm's srun writes (src/srun/libsrun/launch.c,
_task_finish: "%s: task(s) %s: Out Of Memory" / ": Exited with exit code %d" / the signal's
strsignal text) and slurmstepd's oom-kill notice.
"""
from __future__ import annotations

import json

import pytest


def _diagnose(tmp_path, text: str) -> dict:
    from typer.testing import CliRunner

    from forensics.cli import app

    (tmp_path / "slurm-4242.out").write_text(text)
    res = CliRunner().invoke(app, ["diagnose", str(tmp_path), "--format", "json"])
    return json.loads(res.stdout)


@pytest.mark.parametrize("node,task,step", [("cn-017", 6, "90211.0"), ("gpu-b12", 0, "5120.2"), ("n3", 13, "77.0")])
def test_a_task_the_oom_killer_ended_is_that_rank(tmp_path, node, task, step):
    text = (f"epoch 1 step 40 loss 2.91\n"
            f"slurmstepd: error: Detected 1 oom_kill event in StepId={step}. Some of the step tasks have been OOM Killed.\n"
            f"srun: error: {node}: task {task}: Out Of Memory\n"
            f"srun: Terminating StepId={step}\n")
    rc = _diagnose(tmp_path, text)["root_cause"]
    assert rc["kind"] == "host_oom" and rc["ranks"] == [task]


def test_a_task_range_names_each_rank(tmp_path):
    text = ("slurmstepd: error: Detected 2 oom_kill events in StepId=881.0. Some of the step tasks have been OOM Killed.\n"
            "srun: error: hpc-a04: tasks 9-10,12: Out Of Memory\n")
    rc = _diagnose(tmp_path, text)["root_cause"]
    assert rc["kind"] == "host_oom" and rc["ranks"] == [9, 10, 12]
    assert "were killed" in rc["summary"] or "were killed" in json.dumps(rc)


@pytest.mark.parametrize("sig,task", [("Segmentation fault", 21), ("Bus error", 5)])
def test_a_task_that_died_of_its_own_signal_is_that_ranks_crash(tmp_path, sig, task):
    text = (f"srun: error: node-{task}: task {task}: {sig} (core dumped)\n"
            "srun: Terminating StepId=3001.0\n")
    rc = _diagnose(tmp_path, text)["root_cause"]
    assert rc["kind"] == "crash" and rc["ranks"] == [task]


def test_under_torchrun_a_task_is_a_node_not_a_rank(tmp_path):
    # srun started one torchrun agent per node: task 1 is the second node, its workers are ranks 4..7
    text = ("[2024-06-01 10:00:00,000] torch.distributed.run: [WARNING] Setting OMP_NUM_THREADS environment variable\n"
            "slurmstepd: error: Detected 1 oom_kill event in StepId=12.0. Some of the step tasks have been OOM Killed.\n"
            "srun: error: gpu-n2: task 1: Out Of Memory\n")
    rc = _diagnose(tmp_path, text)["root_cause"]
    assert rc["kind"] == "host_oom" and rc["ranks"] == []
