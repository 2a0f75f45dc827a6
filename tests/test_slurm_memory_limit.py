"""Slurm's memory enforcement kills a job over its memory limit: host memory, not a cancellation.

Lines here are ours, in the formats slurm writes: jobacct_gather's
`error("%ps exceeded memory limit (%"PRIu64" > %"PRIu64"), being killed")`
(src/plugins/jobacct_gather/common/common_jag.c, _acct_kill_step; older releases print "Job %u"),
slurmd's notification "Exceeded job memory limit", then slurmstepd's CANCELLED line with no reason.
"""
from __future__ import annotations

import json

import pytest


def _diagnose(tmp_path, text: str) -> dict:
    from typer.testing import CliRunner

    from forensics.cli import app

    (tmp_path / "slurm-99.out").write_text(text)
    res = CliRunner().invoke(app, ["diagnose", str(tmp_path), "--format", "json"])
    return json.loads(res.stdout)


@pytest.mark.parametrize("who,job,node", [("Job 8123", "8123", "cn07"), ("StepId=4410.0", "4410", "gpu-a3"),
                                          ("JobId=77", "77", "node-12")])
def test_a_job_over_its_memory_limit_is_host_oom_not_a_cancellation(tmp_path, who, job, node):
    text = (f"step 120 loss 1.84\nstep 130 loss 1.80\n"
            f"slurmstepd: error: {who} exceeded memory limit (41943040 > 33554432), being killed\n"
            "slurmstepd: error: Exceeded job memory limit\n"
            f"slurmstepd: error: *** JOB {job} ON {node} CANCELLED AT 2025-01-09T03:12:45 ***\n")
    rep = _diagnose(tmp_path, text)
    rc = rep["root_cause"]
    assert rc["kind"] == "host_oom" and rc["ranks"] == []
    assert "memory limit" in json.dumps(rc)


def test_the_killed_task_is_named_where_srun_started_the_ranks(tmp_path):
    text = ("slurmstepd: error: StepId=31.0 exceeded memory limit (9000000 > 8388608), being killed\n"
            "srun: error: hpc-b2: task 5: Killed\n"
            "slurmstepd: error: *** STEP 31.0 ON hpc-b2 CANCELLED AT 2025-01-09T03:12:45 ***\n")
    rc = _diagnose(tmp_path, text)["root_cause"]
    assert rc["kind"] == "host_oom" and rc["ranks"] == [5]


def test_a_notice_that_the_step_touched_its_limit_is_no_kill(tmp_path):
    # task/cgroup's notice: the step may have swapped and lived on; the job then ran to its end
    text = ("step 10 loss 2.0\nslurmstepd: error: Exceeded step memory limit at some point.\nstep 20 loss 1.9\n")
    rc = _diagnose(tmp_path, text)["root_cause"]
    assert rc is None or rc["kind"] != "host_oom"
