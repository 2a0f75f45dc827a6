"""A scheduler cancel's cascade counted once per worker (issue 28 item 7: "34 worker processes
killed" where the log has 32). torch.distributed.launch's sigkill_handler prints "Killing
subprocess PID" for each worker and then "Main process received SIGTERM, exiting" (the launcher
itself); these lines carry no time and are often printed before slurmstepd's CANCELLED line."""
from __future__ import annotations

from pathlib import Path

from forensics.passes import diagnose

LOG = """\
[2021-05-23 08:20:00,000] [INFO] [logging.py:60:log_dist] [Rank 0] step=10, skipped=0, lr=[0.0001], mom=[(0.9, 0.999)]
Killing subprocess 101
Killing subprocess 102
slurmstepd: error: *** STEP 77.0 ON node1 CANCELLED AT 2021-05-23T08:29:53 ***
Killing subprocess 103
Main process received SIGTERM, exiting
Killing subprocess 104
Main process received SIGTERM, exiting
slurmstepd: error: *** JOB 77 ON node1 CANCELLED AT 2021-05-23T08:29:53 ***
"""


def test_cancel_counts_each_killed_worker_once_and_the_launchers_apart(tmp_path: Path) -> None:
    (tmp_path / "slurm-77.out").write_text(LOG)
    [f] = [f for f in diagnose([str(tmp_path)]).findings if f.kind == "job_cancelled"]
    assert "job 77" in f.title
    assert "the 4 worker processes killed" in f.title and "the 2 launcher processes that received its signal" in f.title
    assert f.evidence["cascade"] == {"killed_processes": 4, "slurm_tasks": 0, "launchers_signalled": 2}
    assert "sacct -j 77 " in (f.next or "")
