"""An error line with no rank at all (a worker's traceback through the launcher's console, no
rank prefix) is the worker's the launcher saw fail, when that is the only reading: one failed
worker in that output, one such error before its record, and an exit the error explains
(passes/failures/records.join_unowned). Otherwise the rank stays unnamed.

Lines are ours, in upstream formats: Python tracebacks; CUDA OOM (c10/cuda/CUDACachingAllocator.cpp);
the CUDA runtime's error text; torch elastic's agent line "failed (exitcode: %s) local_rank: %s
(pid: %s) of binary: %s" and its ChildFailedError table (torch/distributed/elastic/multiprocessing
/api.py, errors/__init__.py), "Sending process %s closing signal %s".
"""
from __future__ import annotations

from pathlib import Path

from test_failures_console import diagnosed

DAY = "2025-01-09"


def progress(n: int, t: str = "11:02:10") -> list[str]:
    return [f"{DAY} {t},{100 + i:03d} - INFO - trainer - step=400 loss=1.91 step_time_ms=402.0" for i in range(n)]


def traceback(exc: str, where: str = "/opt/job/model.py") -> list[str]:
    return ["Traceback (most recent call last):", '  File "/opt/job/run.py", line 52, in <module>', "    fit()",
            f'  File "{where}", line 97, in forward', "    h = self.mlp(x)", exc]


OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB. GPU 0 has a total capacity of 79.15 GiB "
       "of which 812.00 MiB is free. Including non-PyTorch memory, this process has 78.31 GiB memory in use.")


def agent(failed: list[tuple[int, int, int, int]], killed: list[int], host: str) -> list[str]:
    """failed: (global rank, local rank, exit code, pid) in the order the agent saw them."""
    out = [f"W0109 11:02:31.{400 + i}000 3311 torch/distributed/elastic/multiprocessing/api.py:897] "
           f"Sending process {pid} closing signal SIGTERM" for i, pid in enumerate(killed)]
    r0, l0, c0, p0 = failed[0]
    out.append(f"E0109 11:02:31.900000 3311 torch/distributed/elastic/multiprocessing/api.py:869] "
               f"failed (exitcode: {c0}) local_rank: {l0} (pid: {p0}) of binary: /usr/bin/python3")
    out += ["Traceback (most recent call last):", '  File "/usr/bin/torchrun", line 8, in <module>', "    sys.exit(main())",
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "=" * 60, "run.py FAILED", "-" * 60,
            "Failures:"]

    def rec(i: int, g: int, lr: int, code: int, pid: int) -> list[str]:
        sig = {-6: "Signal 6 (SIGABRT)", -11: "Signal 11 (SIGSEGV)"}.get(code)
        return [f"[{i}]:", "  time      : 2025-01-09_11:02:31", f"  host      : {host}", f"  rank      : {g} (local_rank: {lr})",
                f"  exitcode  : {code} (pid: {pid})", "  error_file: <N/A>",
                f"  traceback : {sig} received by PID {pid}" if sig else
                "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"]
    if len(failed) > 1:
        for i, f in enumerate(failed[1:], start=1):
            out += rec(i, *f)
    else:
        out.append("  <NO_OTHER_FAILURES>")
    return out + ["-" * 60, "Root Cause (first observed failure):", *rec(0, *failed[0]), "=" * 60]


def test_an_unranked_oom_is_the_rank_of_the_only_worker_the_launcher_saw_fail(tmp_path: Path) -> None:
    # node 2 of a 3-node run, 4 workers each: its launcher's record names global rank 9 (local 1)
    lines = progress(4) + traceback(OOM) + agent([(9, 1, 1, 6102)], [6101, 6103, 6104], "trn-node-2")
    rc = diagnosed(tmp_path, lines, name="trn-node-2.log").root_cause
    assert (rc.kind, rc.ranks, rc.basis) == ("oom", [9], "own_error")
    assert "launcher's record" in rc.summary


def test_a_gpu_error_whose_worker_aborted_is_named_from_the_record(tmp_path: Path) -> None:
    # a sticky CUDA error often ends the process by SIGABRT in teardown, not by exit 1
    lines = progress(2) + traceback("RuntimeError: CUDA error: an illegal memory access was encountered") \
        + agent([(1, 1, -6, 7002)], [7001], "box-a")
    rc = diagnosed(tmp_path, lines).root_cause
    assert (rc.kind, rc.ranks) == ("gpu_error", [1])


def test_two_failed_workers_leave_the_unranked_error_unnamed(tmp_path: Path) -> None:
    lines = progress(4) + traceback(OOM) + agent([(2, 2, 1, 6102), (3, 3, 1, 6103)], [6100, 6101], "box-a")
    rc = diagnosed(tmp_path, lines).root_cause
    assert rc.kind == "oom" and rc.ranks == []


def test_an_exit_the_error_does_not_explain_leaves_it_unnamed(tmp_path: Path) -> None:
    # a Python exception ends its process with status 1; a SIGSEGV exit is some other death
    lines = progress(4) + traceback("ValueError: too many values to unpack (expected 2)") \
        + agent([(3, 3, -11, 6103)], [6100, 6101, 6102], "box-a")
    report = diagnosed(tmp_path, lines)
    rc, f = report.root_cause, report.findings[0]
    # the worker's own death is its SIGSEGV record; the exception is said to name no rank
    assert (rc.kind, rc.ranks) == ("crash", [3]) and f.evidence["signal"] == "SIGSEGV"
    assert "names no rank: ValueError" in f.title
    assert not any(g.evidence.get("launcher_record") for g in report.findings)


def test_two_unranked_errors_before_one_record_leave_both_unnamed(tmp_path: Path) -> None:
    lines = progress(4) + traceback(OOM) + traceback("KeyError: 'labels'", "/opt/job/data.py") \
        + agent([(0, 0, 1, 6100)], [6101, 6102, 6103], "box-a")
    report = diagnosed(tmp_path, lines)
    assert not any(f.evidence.get("launcher_record") for f in report.findings)
