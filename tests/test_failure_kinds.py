"""Issue 10, items 3-5: failure facts read right, why a rank is blamed, the new kinds.

Events are built directly (pass_helpers.Rows), in the shape the console reader gives them, so
these tests do not depend on the reader: CUDA_OOM with the allocator's process list in extra,
TRACEBACK with the exception line as message, CUDA_ERROR / GPU_XID, JOB_CANCELLED and srun's
PROCESS_KILLED, CHILD_FAILED with exit code and pid, and the keys a newer reader adds
(`missing_ranks`, BARRIER_TIMEOUT, HOST_OOM_KILL).
"""
from __future__ import annotations

import json

import pytest

from forensics.passes import diagnose_context, failures
from forensics.report import render
from forensics.report import model
from pass_helpers import Rows

LOST = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.3]:44631"


def progress(rows: Rows, ranks: list[int], steps: int, skip: dict[int, int] | None = None) -> None:
    for s in range(steps):
        for r in ranks:
            if skip and r in skip and s > skip[r]:
                continue
            rows.add(float(s), r, "TRAIN_STEP", step=s, seq=s + 1, loss=3.0 - 0.01 * s)


def lost_peers(rows: Rows, t: float, ranks: list[int]) -> None:
    for i, r in enumerate(ranks):
        rows.add(t + 0.01 * i, r, "NCCL_TIMEOUT", level="ERROR", message=LOST)


def kinds(fs) -> dict:
    """The failures pass's findings by kind (a rule may report the same kind too)."""
    return {f.kind: f for f in fs if f.rule.startswith("pass.")}


def oom_extra(listed: list[tuple[int, float]], this_mb: float | None, device: int = 0) -> str:
    x = {"tried_mb": 2048.0, "total_mb": 81050.0, "device": device,
         "other_processes": [{"pid": p, "mb": mb} for p, mb in listed] or None}
    if this_mb is not None:
        x["process_mb"] = this_mb
    return json.dumps(x)


def oom_message(listed: list[tuple[int, float]], this_mb: float | None) -> str:
    procs = " ".join(f"Process {p} has {mb / 1024:.2f} GiB memory in use." for p, mb in listed)
    this = f" Including non-PyTorch memory, this process has {this_mb / 1024:.2f} GiB memory in use." if this_mb else ""
    return ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
            f"79.15 GiB of which 1.12 GiB is free. {procs}{this} Of the allocated memory 74.10 GiB is allocated by PyTorch")


def oom_run(listed: list[tuple[int, float]], this_mb: float | None, exit_pid: int | None = None) -> Rows:
    rows = Rows()
    progress(rows, [0, 1, 2, 3], 10)
    rows.add(10.2, 2, "CUDA_OOM", level="ERROR", message=oom_message(listed, this_mb), extra=oom_extra(listed, this_mb))
    lost_peers(rows, 10.6, [0, 1, 3])
    if exit_pid is not None:
        rows.add(11.0, 2, "CHILD_FAILED", level="ERROR", exit_code=1, file="launcher.log",
                 extra=json.dumps({"pid": exit_pid}))
    return rows


# --- OOM: the failing process vs the other holders of the GPU ------------------------------------------

def test_oom_with_this_process_line_names_the_other_holders_as_sharing() -> None:
    f = kinds(failures.find(oom_run([(111, 20357.0), (222, 4833.0)], 79892.0).ctx()))["oom"]
    assert f.evidence["shared_gpu"] is True and f.evidence["other_processes"] == 2
    assert f.evidence["other_processes_mb"] == pytest.approx(20357.0 + 4833.0)
    assert "is shared: 2 other processes" in f.title
    assert (f.ranks, f.basis) == ([2], "own_error")


def test_oom_in_a_container_lists_only_itself_and_is_not_called_shared() -> None:
    # PID namespace: NVML's pid != getpid(), so the failing process is printed as "Process N"
    f = kinds(failures.find(oom_run([(414660, 79892.0)], None).ctx()))["oom"]
    assert f.evidence["shared_gpu"] is None and f.evidence["failing_process_identified"] is False
    assert "shared" not in f.title.replace("shared the GPU", "")
    assert "own pid is not in the log" in f.title and "pid 414660" in f.title


def test_oom_with_several_processes_and_no_known_pid_does_not_claim_sharing() -> None:
    f = kinds(failures.find(oom_run([(414660, 60000.0), (414661, 19000.0)], None).ctx()))["oom"]
    assert f.evidence["shared_gpu"] is None and f.evidence["other_processes"] is None
    assert "is shared" not in f.title and "whether another job shared the GPU is not known" in f.title


def test_oom_failing_pid_from_the_launcher_separates_itself_from_the_others() -> None:
    alone = kinds(failures.find(oom_run([(5102, 79892.0)], None, exit_pid=5102).ctx()))["oom"]
    assert alone.evidence["shared_gpu"] is False and alone.evidence["failing_pid"] == 5102
    assert "shared" not in alone.title
    two = kinds(failures.find(oom_run([(5102, 60000.0), (999, 19000.0)], None, exit_pid=5102).ctx()))["oom"]
    assert two.evidence["shared_gpu"] is True and two.evidence["other_processes"] == 1
    assert two.evidence["other_processes_mb"] == pytest.approx(19000.0) and "1 other process holds" in two.title


# --- host memory: the kernel's OOM killer is its own kind ------------------------------------------

def sigkill_run(rank: int | None = 1, host: str | None = "node7", event: str = "CHILD_FAILED") -> Rows:
    rows = Rows()
    progress(rows, [0, 1, 2, 3], 10)
    lost_peers(rows, 10.5, [0, 2, 3])
    row = rows.add(10.4, None, event, level="ERROR", file="launcher.log", exit_code=-9,
                   extra=json.dumps({"pid": 5102, "signal": "SIGKILL"}))
    row.update(rank=rank, local_rank=1, host=host)
    return rows


def test_sigkill_without_error_is_host_oom_not_oom() -> None:
    rep = sigkill_run().report()
    rc = rep.root_cause
    assert (rc.kind, rc.layer, rc.ranks, rc.basis) == ("host_oom", "resource", [1], "own_error")
    f = rep.findings[0]
    assert f.kind == "host_oom" and f.evidence["host_oom_killer"] is True and f.victims == [0, 2, 3]
    assert not any(x.kind == "oom" for x in rep.findings)
    assert kinds(rep.findings)["nccl_timeout"].ranks == [1]


def test_host_oom_kill_event_is_confirmed() -> None:
    rows = sigkill_run()
    rows.add(10.3, None, "HOST_OOM_KILL", level="ERROR", file="dmesg.txt",
             message="Out of memory: Killed process 5102 (python)", extra=json.dumps({"pid": 5102}))
    f = kinds(failures.find(rows.ctx()))["host_oom"]
    assert f.evidence["confirmed"] is True and "out-of-memory killer" in f.title


def test_a_kill_known_only_by_local_rank_says_so_and_names_no_global_rank() -> None:
    rep = sigkill_run(rank=None).report()
    rc = rep.root_cause
    assert rc.kind == "host_oom" and rc.ranks == []
    assert rc.local_ranks == [{"host": "node7", "local_rank": 1}]
    assert "local rank 1 on host node7" in rc.summary
    text = render(rep, "text", width=120)
    assert "local rank 1 on host node7" in text.split("\n")[3]          # the verdict line
    assert json.loads(render(rep, "json"))["root_cause"]["local_ranks"] == [{"host": "node7", "local_rank": 1}]


# --- crash: a plain Python exception kills a rank ------------------------------------------------

def crash_run(exc: str = "ValueError: shape mismatch in collate_fn", keep_training: bool = False) -> Rows:
    rows = Rows()
    progress(rows, [0, 1, 2, 3], 10, skip=None if keep_training else {2: 9})
    rows.add(9.5, 2, "TRACEBACK", level="ERROR", message=exc,
             extra=json.dumps({"frames": ["/workspace/data.py:41 in __getitem__"], "exception": exc.split(":")[0]}))
    if keep_training:
        for s in range(10, 14):
            rows.add(float(s), 2, "TRAIN_STEP", step=s, seq=s + 1)
    else:
        lost_peers(rows, 10.2, [0, 1, 3])
    return rows


def test_python_exception_that_kills_a_rank_is_a_crash_on_that_rank() -> None:
    rep = crash_run().report()
    rc = rep.root_cause
    assert (rc.kind, rc.layer, rc.ranks, rc.basis) == ("crash", "resource", [2], "own_error")
    f = rep.findings[0]
    assert f.victims == [0, 1, 3] and "ValueError" in f.title and "data.py:41" in f.title
    assert kinds(rep.findings)["nccl_timeout"].ranks == [2]
    assert not any(x.kind == "hang" for x in rep.findings)


def test_an_exception_the_rank_survives_is_not_a_crash() -> None:
    assert "crash" not in kinds(failures.find(crash_run(keep_training=True).ctx()))


def test_a_teardown_signal_is_not_a_crash() -> None:
    exc = "torch.distributed.elastic.multiprocessing.api.SignalException: Process 5102 got signal: 15"
    assert "crash" not in kinds(failures.find(crash_run(exc).ctx()))


# --- device failures ------------------------------------------------------------------------------

def test_illegal_memory_access_is_a_gpu_error_on_the_rank_that_reports_it() -> None:
    rows = Rows()
    progress(rows, [0, 1, 2, 3], 10, skip={3: 9})
    rows.add(9.7, 3, "CUDA_ERROR", level="ERROR", message="RuntimeError: CUDA error: an illegal memory access was encountered",
             extra=json.dumps({"cuda_error": "an illegal memory access was encountered"}))
    lost_peers(rows, 10.4, [0, 1, 2])
    rep = rows.report()
    rc = rep.root_cause
    assert (rc.kind, rc.layer, rc.ranks, rc.basis) == ("gpu_error", "physical", [3], "own_error")
    assert rep.findings[0].victims == [0, 1, 2]
    assert not any(x.kind == "crash" for x in rep.findings)


def test_nccl_unhandled_cuda_error_is_that_ranks_gpu_error_but_a_remote_error_is_a_victims() -> None:
    rows = Rows()
    progress(rows, [0, 1, 2], 10)
    rows.add(10.1, 1, "NCCL_ERROR", level="ERROR", message="torch.distributed.DistBackendError: NCCL error in: "
             "ProcessGroupNCCL.cpp:1970, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5")
    for r in (0, 2):
        rows.add(10.4 + r * 0.01, r, "NCCL_ERROR", level="ERROR", message="torch.distributed.DistBackendError: NCCL error "
                 "in: ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error, NCCL version 2.21.5")
    f = kinds(failures.find(rows.ctx()))
    assert f["gpu_error"].ranks == [1] and f["gpu_error"].victims == [0, 2] and f["nccl_timeout"].ranks == [1]


def test_xid_from_the_kernel_log_is_a_gpu_error_without_a_guessed_rank() -> None:
    rows = Rows()
    progress(rows, [0, 1], 5)
    r = rows.add(5.0, None, "GPU_XID", level="ERROR", file="dmesg.txt",
                 message="NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.")
    r["host"] = "node3"
    f = kinds(failures.find(rows.ctx()))["gpu_error"]
    assert f.ranks == [] and f.layer == "physical" and "node3" in f.title and f.basis is None


# --- the scheduler ended the job ---------------------------------------------------------------------

def cancelled_run(reason: str | None = None, hang_first: bool = False) -> Rows:
    rows = Rows()
    progress(rows, [0, 1, 2, 3], 20, skip={1: 12} if hang_first else None)
    due = f" DUE TO {reason}" if reason else ""
    c = rows.add(30.0, None, "JOB_CANCELLED", level="ERROR", file="slurm.out",
                 message=f"slurmstepd: error: *** JOB 4242 ON node7 CANCELLED AT 2025-06-12T14:00:30{due} ***",
                 extra=json.dumps({"kind": "job", "job": "4242", "reason": reason}))
    c["host"] = "node7"
    for i in range(4):      # srun reports 10 tasks per node: 40 killed processes
        k = rows.add(30.5, None, "PROCESS_KILLED", level="ERROR", file="slurm.out",
                     message=f"srun: error: node{i}: tasks {i * 10}-{i * 10 + 9}: Killed",
                     extra=json.dumps({"signal": "SIGKILL", "tasks": f"{i * 10}-{i * 10 + 9}", "by": "slurm"}))
        k["host"] = f"node{i}"
    return rows


def test_a_cancelled_job_is_never_healthy_and_its_kills_are_its_cascade() -> None:
    rep = cancelled_run().report()
    rc = rep.root_cause
    assert rc is not None and (rc.kind, rc.layer, rc.ranks) == ("job_cancelled", "resource", [])
    f = rep.findings[0]
    assert f.evidence["job"] == "4242" and f.evidence["cascade"]["killed_processes"] == 40
    assert "40 worker processes" in f.title and f.severity == "WARN"
    # 40 SIGKILLs after the cancel are not 40 suspected host OOM kills
    assert not any(x.kind in ("host_oom", "oom") for x in rep.findings)
    assert "Healthy" not in render(rep, "text")


def test_srun_kills_printed_before_the_cancel_line_are_still_its_cascade() -> None:
    rows = Rows()
    progress(rows, [0, 1], 10)
    k = rows.add(29.9, None, "PROCESS_KILLED", level="ERROR", file="slurm.out", message="srun: error: node0: tasks 0-1: Killed",
                 extra=json.dumps({"signal": "SIGKILL", "tasks": "0-1", "by": "slurm"}))
    k["host"] = "node0"
    rows.add(30.0, None, "JOB_CANCELLED", level="ERROR", file="slurm.out",
             message="slurmstepd: error: *** JOB 7 ON node0 CANCELLED AT 2025-06-12T14:00:30 ***",
             extra=json.dumps({"kind": "job", "job": "7"}))
    f = kinds(failures.find(rows.ctx()))
    assert "host_oom" not in f and f["job_cancelled"].evidence["cascade"]["killed_processes"] == 2


def test_node_failure_is_an_error_and_time_limit_is_named() -> None:
    assert kinds(failures.find(cancelled_run("NODE FAILURE").ctx()))["job_cancelled"].severity == "ERROR"
    f = kinds(failures.find(cancelled_run("TIME LIMIT").ctx()))["job_cancelled"]
    assert "time limit" in f.title and f.evidence["reason"] == "TIME LIMIT"


def test_a_hang_before_the_cancellation_is_the_root_cause() -> None:
    rows = cancelled_run(hang_first=True)
    for r in (0, 2, 3):
        rows.add(25.0 + r * 0.01, r, "NCCL_TIMEOUT", level="ERROR", seq=14,
                 message="Watchdog caught collective operation timeout: WorkNCCL(SeqNum=14, OpType=ALLREDUCE)")
    rep = rows.report()
    assert (rep.root_cause.kind, rep.root_cause.ranks) == ("hang", [1])
    cancel = next(i for i, f in enumerate(rep.findings) if f.kind == "job_cancelled")
    assert cancel in rep.findings[0].explains


# --- collective mismatch vs hang ------------------------------------------------------------------------

WATCHDOG = ("[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, "
            "NumelIn=1024, NumelOut=1024, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.")


def test_a_rank_waiting_in_another_collective_is_a_mismatch_not_a_hang() -> None:
    rows = Rows()
    progress(rows, [0, 1, 2, 3], 40)
    for r in (0, 2, 3):
        rows.add(700.0 + r * 0.01, r, "NCCL_TIMEOUT", level="ERROR", seq=41, message=WATCHDOG.format(r=r, seq=41))
    rows.add(700.5, 1, "NCCL_TIMEOUT", level="ERROR", seq=40, message=WATCHDOG.format(r=1, seq=40))
    f = kinds(failures.find(rows.ctx()))
    assert f["collective_mismatch"].ranks == [1] and f["collective_mismatch"].victims == [0, 2, 3]
    assert f["collective_mismatch"].basis == "own_error"
    assert "hang" not in f and f["nccl_timeout"].ranks == [1]


def test_a_rank_that_never_enqueued_the_collective_stays_a_hang() -> None:
    rows = Rows()
    progress(rows, [0, 1, 2, 3], 40)
    for r in (0, 2, 3):
        rows.add(700.0 + r * 0.01, r, "NCCL_TIMEOUT", level="ERROR", seq=41, message=WATCHDOG.format(r=r, seq=41))
    for r, enq in ((0, 41), (1, 40), (2, 41), (3, 41)):
        rows.add(700.2 + r * 0.01, r, "NCCL_DUMP_SIGNAL", level="ERROR",
                 extra=json.dumps({"last_enqueued": enq, "last_completed": 40}))
    f = kinds(failures.find(rows.ctx()))
    assert f["hang"].ranks == [1] and f["hang"].basis == "never_joined" and "collective_mismatch" not in f


def test_fingerprint_mismatch_is_a_collective_mismatch_named_by_peers() -> None:
    rows = Rows()
    progress(rows, [0, 1, 2, 3], 5)
    for me, other in ((0, 3), (1, 3), (2, 3), (3, 0)):
        rows.add(6.0 + me * 0.01, me, "COLLECTIVE_MISMATCH", level="ERROR",
                 message=f"Detected mismatch between collectives on ranks. Rank {me} is running collective: "
                         f"CollectiveFingerPrint(SequenceNumber=6, OpType=ALLREDUCE), but Rank {other} is running "
                         f"collective: CollectiveFingerPrint(SequenceNumber=6, OpType=BROADCAST).")
    rep = rows.report()
    assert (rep.root_cause.kind, rep.root_cause.ranks, rep.root_cause.basis) == ("collective_mismatch", [3], "named_by_peers")
    assert rep.root_cause.basis_weak is False


# --- the basis: who named the rank, and how strongly ------------------------------------------------

def test_missing_ranks_from_one_barrier_error_are_named_by_a_single_peer_weakly() -> None:
    rows = Rows()
    progress(rows, [0, 1, 2, 3], 10, skip={2: 8, 3: 8})
    rows.add(20.0, 0, "BARRIER_TIMEOUT", level="ERROR",
             message="Rank 0 timed out in monitoredBarrier: ranks 2, 3 failed to pass", extra=json.dumps({"missing_ranks": [2, 3]}))
    rows.add(20.1, 1, "NCCL_TIMEOUT", level="ERROR", message=WATCHDOG.format(r=1, seq=10))
    f = kinds(failures.find(rows.ctx()))
    assert f["hang"].ranks == [2, 3] and f["hang"].basis == "named_by_peers" and f["hang"].basis_weak is True


def test_the_peer_every_timeout_waits_on_is_named_by_peers() -> None:
    rows = Rows()
    progress(rows, [0, 1, 2, 3], 10, skip={2: 8})
    for r in (0, 1, 3):
        rows.add(20.0 + r * 0.01, r, "NCCL_TIMEOUT", level="ERROR", message=f"rank={r} waiting on rank=2 for 1800s")
    f = kinds(failures.find(rows.ctx()))
    assert f["hang"].ranks == [2] and (f["hang"].basis, f["hang"].basis_weak) == ("named_by_peers", False)


@pytest.mark.parametrize("margin, weak", [(0.4, True), (5.0, False)])
def test_a_rank_that_went_silent_first_is_last_to_log_and_weak_when_close(margin: float, weak: bool) -> None:
    rows = Rows()
    progress(rows, [0, 1, 2, 3], 10)
    for r in (0, 1, 2):     # the others log one more line, `margin` s after rank 3's last
        rows.add(9.0 + margin, r, "TRAIN_STEP", step=10)
    for r in (0, 1, 2):
        rows.add(600.0 + r, r, "NCCL_TIMEOUT", level="ERROR", message="Watchdog caught collective operation timeout")
    f = kinds(failures.find(rows.ctx()))
    assert f["hang"].ranks == [3] and f["hang"].basis == "last_to_log"
    assert f["hang"].basis_weak is weak and f["hang"].evidence["silent_margin_s"] == pytest.approx(margin)


def test_passes_that_do_not_say_get_their_kinds_basis_and_json_carries_it() -> None:
    from pass_helpers import sync_run
    rep = sync_run(compute=lambda r, s: 1400.0 if r == 2 and s >= 10 else 800.0).report()
    assert rep.root_cause.kind == "straggler" and rep.root_cause.basis == "timing_within_group"
    d = json.loads(render(rep, "json"))
    assert d["root_cause"]["basis"] == "timing_within_group" and d["root_cause"]["basis_weak"] is False
    assert all(set(model.BASES) >= {f["basis"]} for f in d["findings"] if f["basis"])
    assert "timing within its group" in render(rep, "text", width=120)
    assert "timing within its group" in render(rep, "md")
    assert "timing within its group" in render(rep, "html")


def test_new_kinds_are_in_the_vocabulary_and_the_readme() -> None:
    from pathlib import Path
    readme = (Path(__file__).resolve().parents[1] / "docs" / "diagnose.md").read_text()
    for k in ("crash", "host_oom", "collective_mismatch", "job_cancelled", "gpu_error"):
        assert k in model.KINDS and f"`{k}`" in readme
    # stable identifiers: the first ones keep their order, the bases added for issue 27 follow
    assert list(model.BASES)[:6] == ["own_error", "named_by_peers", "never_joined", "last_to_log", "timing_within_group", "telemetry"]
    assert {"outlier", "own_gap"} <= set(model.BASES) and all(f"`{b}`" in readme for b in ("outlier", "own_gap"))
    assert {"named_in_text", "one_node"} <= set(model.BASES) and "non_finite" in model.KINDS and "`non_finite`" in readme


def test_diagnose_context_runs_on_the_new_kinds_without_a_root_from_hygiene() -> None:
    rep = diagnose_context(crash_run().ctx())
    assert rep.run.crashed and rep.root_cause.kind == "crash"


def test_a_finding_about_every_rank_singles_nobody_out() -> None:
    from pathlib import Path

    from forensics.passes import diagnose
    rep = diagnose([str(Path(__file__).resolve().parents[1] / "sample_logs" / "comm_bound")])
    assert rep.root_cause.kind == "comm_bound" and rep.root_cause.ranks == list(range(8))
    assert rep.root_cause.basis is None and "Why this rank" not in render(rep, "text")


def test_a_traceback_that_is_the_last_line_of_a_single_process_run_is_a_crash() -> None:
    rows = Rows()
    progress(rows, [0], 10)
    rows.add(9.5, 0, "TRACEBACK", level="ERROR", message="KeyError: 'input_ids'")
    rep = rows.report()
    assert (rep.root_cause.kind, rep.root_cause.ranks) == ("crash", [0]) and rep.run.crashed


def test_a_traceback_followed_by_more_output_and_no_failure_is_not_a_crash() -> None:
    # e.g. an optional import that failed at the end of training, logged, and the program went on
    rows = Rows()
    progress(rows, [0, 1], 10)
    rows.add(9.5, 0, "TRACEBACK", level="ERROR", message="ModuleNotFoundError: No module named 'wandb'")
    rows.add(9.6, 0, "LOG", message="saving checkpoint to /ckpt/final")
    assert "crash" not in kinds(failures.find(rows.ctx()))
