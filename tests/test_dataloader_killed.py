"""A rank whose DataLoader worker was killed by a signal (torch/csrc/DataLoader.cpp,
_error_if_any_worker_fails: "DataLoader worker (pid %d) is killed by signal: %s. ", strsignal's
text). spec/report.md's host_oom is host memory, "SIGKILL / exit -9 without a CUDA error": the kind
stays host_oom, but the finding says what the logs show — SIGKILL is often the OOM killer, and
without a memory line (the kernel's or cgroup's OOM killer, Slurm's oom-kill, a failed host
allocation) it says "no memory evidence in the logs"; SIGBUS is /dev/shm running out.

Every line here is ours, in those formats.
"""
from __future__ import annotations

import json

import pytest


def _rank1(tail: str) -> str:
    return "\n".join([
        "[rank0]: step 10 loss 2.31",
        "[rank1]: step 10 loss 2.30",
        "[rank1]: Traceback (most recent call last):",
        '[rank1]:   File "/usr/lib/python3.10/site-packages/torch/utils/data/_utils/signal_handling.py", line 67, in handler',
        "[rank1]:     _error_if_any_worker_fails()",
        f"[rank1]: RuntimeError: DataLoader worker (pid 51234) is killed by signal: {tail}",
    ]) + "\n"


def _diagnose(tmp_path, files: dict[str, str]) -> dict:
    from typer.testing import CliRunner

    from forensics.cli import app

    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return json.loads(CliRunner().invoke(app, ["diagnose", str(tmp_path), "--format", "json"]).stdout)


def test_sigkill_without_memory_evidence_says_so(tmp_path):
    rc = _diagnose(tmp_path, {"train.log": _rank1("Killed. ")})["root_cause"]
    assert (rc["kind"], rc["ranks"]) == ("host_oom", [1])
    assert "killed by SIGKILL (often the host's OOM killer; no memory evidence in the logs)" in rc["summary"]
    assert "ran out of host memory" not in rc["summary"]


@pytest.mark.parametrize("memory", [
    "[Thu Dec  5 11:24:40 2024] Out of memory: Killed process 51234 (pt_data_worker) total-vm:48213344kB, anon-rss:40123456kB",
    "slurmstepd: error: Detected 1 oom_kill event in StepId=4242.0. Some of the step tasks have been OOM Killed.",
])
def test_sigkill_with_memory_evidence_cites_it(tmp_path, memory):
    rep = _diagnose(tmp_path, {"train.log": _rank1("Killed. "), "node.log": memory + "\n"})
    rc = rep["root_cause"]
    assert (rc["kind"], rc["ranks"]) == ("host_oom", [1])
    assert "the host's memory ran out (node.log:1" in rc["summary"] and "no memory evidence" not in rc["summary"]
    f = next(f for f in rep["findings"] if f["kind"] == "host_oom" and f["ranks"] == [1])
    assert f["evidence"]["confirmed"] is True and f["evidence"]["dataloader_worker"]["signal"] == "SIGKILL"


def test_sigbus_names_shared_memory(tmp_path):
    rc = _diagnose(tmp_path, {"train.log": _rank1("Bus error. It is possible that dataloader's workers are out of shared memory. "
                                                  "Please try to raise your shared memory limit.")})["root_cause"]
    assert (rc["kind"], rc["ranks"]) == ("host_oom", [1])
    assert "killed by SIGBUS (its shared memory, /dev/shm, ran out" in rc["summary"]


def _chained(signal_text: str) -> str:
    # dataloader.py raises "exited unexpectedly" from the SIGCHLD handler's error: CPython prints
    # the cause's traceback, the "direct cause" line, then the fatal one
    return _rank1(f"{signal_text}. ") + "\n".join([
        "[rank1]: ",
        "[rank1]: The above exception was the direct cause of the following exception:",
        "[rank1]: ",
        "[rank1]: Traceback (most recent call last):",
        '[rank1]:   File "/srv/train.py", line 77, in <module>',
        "[rank1]:     for batch in loader:",
        '[rank1]:   File "/usr/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line 1133, in _try_get_data',
        '[rank1]:     raise RuntimeError(f"DataLoader worker (pid(s) {pids_str}) exited unexpectedly") from e',
        "[rank1]: RuntimeError: DataLoader worker (pid(s) 51234) exited unexpectedly",
    ]) + "\n"


@pytest.mark.parametrize("signal_text,kind,words", [
    ("Killed", "host_oom", "killed by SIGKILL (often the host's OOM killer; no memory evidence in the logs)"),
    ("Segmentation fault", "crash", "crashed with a Python exception"),      # a fault of the worker's own
])
def test_exited_unexpectedly_is_read_as_the_kill_it_was_raised_from(tmp_path, signal_text, kind, words):
    rc = _diagnose(tmp_path, {"train.log": _chained(signal_text)})["root_cause"]
    assert (rc["kind"], rc["ranks"]) == (kind, [1]) and words in rc["summary"]
