"""Issue 5's diagnosis consequences, from console text as torchrun / NCCL / gloo print it.

Each test writes a small console log (modelled on real PyTorch >= 2.3 output: `[rankN]:`
prefixes, glog lines from ProcessGroupNCCL, torch elastic's ChildFailedError table), ingests it
through the console reader and diagnoses it: the culprit is the rank that caused the failure,
never the rank whose watchdog fired first.
"""
from __future__ import annotations

from pathlib import Path

from forensics.ingest import ingest
from forensics.passes import diagnose
from forensics.report.model import Report
from forensics.store import open_store

WATCHDOG = ("[rank{r}]:[E1218 {t} ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={n}, NumelOut={n}, Timeout(ms)=600000) ran for {ran} "
            "milliseconds before timing out.")
FAILURE = ("[rank{r}]:[E1218 {t} ProcessGroupNCCL.cpp:2271] [PG ID 0 PG GUID 0(default_pg) Rank {r}]  failure "
           "detected by watchdog at work sequence id: {seq} PG status: last enqueued work: {enq}, last completed work: {done}")
DUMP = ("[rank{r}]:[E1218 {t} ProcessGroupNCCL.cpp:1746] [PG ID 0 PG GUID 0(default_pg) Rank {r}] Received a dump "
        "signal due to a collective timeout from {src} and we will try our best to dump the debug info. Last enqueued "
        "NCCL work: {enq}, last completed NCCL work: {done}.This is most likely caused by incorrect usages of "
        "collectives, e.g., wrong sizes used across ranks, the order of collectives is not same for all ranks or the "
        "scheduled collective, for some reason, didn't run. Additionally, this can be caused by GIL deadlock or other "
        "reasons such as network errors or bugs in the communications library (e.g. NCCL), etc.")
PROGRESS = "[rank{r}]:[2024-12-18 {t},{ms:03d}] [INFO] [train.py:188] step {step} | loss 2.301 | 512.3 ms/step"
OOM = [
    "[rank{r}]: Traceback (most recent call last):",
    '[rank{r}]:   File "/workspace/train.py", line 212, in <module>',
    "[rank{r}]:     loss.backward()",
    '[rank{r}]:   File "/usr/local/lib/python3.11/site-packages/torch/_tensor.py", line 581, in backward',
    "[rank{r}]:     torch.autograd.backward(",
    "[rank{r}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU {r} has a total capacity "
    "of 79.15 GiB of which 1.12 GiB is free. Including non-PyTorch memory, this process has 78.02 GiB memory in use. "
    "Of the allocated memory 74.10 GiB is allocated by PyTorch, and 2.40 GiB is reserved by PyTorch but unallocated.",
]
NCCL_LOST = [
    "[rank{r}]: Traceback (most recent call last):",
    '[rank{r}]:   File "/workspace/train.py", line 214, in <module>',
    "[rank{r}]:     optimizer.step()",
    "[rank{r}]: torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/pytorch/torch/csrc/distributed/c10d/"
    "ProcessGroupNCCL.cpp:2027, remote process exited or there was a network error, NCCL version 2.21.5",
    "[rank{r}]: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
    "[rank{r}]: Last error:",
    "[rank{r}]: socketProgress: Connection closed by remote peer gpu-node-07<51894>",
]
GLOO_LOST = [
    "[rank{r}]: Traceback (most recent call last):",
    '[rank{r}]:   File "/workspace/train.py", line 214, in <module>',
    "[rank{r}]:     dist.all_reduce(grad)",
    "[rank{r}]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
    "[10.0.0.3]:44631",
]


def elastic_table(records: list[dict], first: dict, host: str = "gpu-node-07") -> list[str]:
    """torch elastic's ChildFailedError report (torch/distributed/elastic/multiprocessing/errors)."""
    def rec(i: int, x: dict) -> list[str]:
        sig = {-6: "Signal 6 (SIGABRT)", -9: "Signal 9 (SIGKILL)", -15: "Signal 15 (SIGTERM)"}.get(x["code"])
        return [f"[{i}]:", f"  time      : {x['time']}", f"  host      : {host}",
                f"  rank      : {x['rank']} (local_rank: {x['rank']})", f"  exitcode  : {x['code']} (pid: {x['pid']})",
                "  error_file: <N/A>",
                f"  traceback : {sig} received by PID {x['pid']}" if sig else
                "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"]
    lines = [
        "Traceback (most recent call last):",
        '  File "/usr/local/bin/torchrun", line 8, in <module>',
        "    sys.exit(main())",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "=" * 60, "train.py FAILED", "-" * 60, "Failures:",
    ]
    if records:
        for i, x in enumerate(records, start=1):
            lines += rec(i, x)
    else:
        lines.append("  <NO_OTHER_FAILURES>")
    lines += ["-" * 60, "Root Cause (first observed failure):", *rec(0, first), "=" * 60]
    return lines


def expand(block: list[str], **kw) -> list[str]:
    return [ln.format(**kw) for ln in block]


def progress(ranks: list[int], step: int = 87, t: str = "20:17:15") -> list[str]:
    return [PROGRESS.format(r=r, t=t, ms=2 + r, step=step) for r in ranks]


def diagnosed(tmp_path: Path, lines: list[str], name: str = "console.log", extra: dict[str, str] | None = None) -> Report:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / name).write_text("\n".join(lines) + "\n")
    for fname, text in (extra or {}).items():
        (logs / fname).write_text(text)
    store = tmp_path / "run.forensics"
    ingest([str(logs)], store)
    return diagnose(open_store(store))


def finding(report: Report, kind: str, rule: str = "pass.failures"):
    return next(f for f in report.findings if f.kind == kind and f.rule == rule)


def unexplained_errors(report: Report) -> list[str]:
    """ERROR findings the root cause neither is nor explains (the cascade must be explained)."""
    root = set(report.findings[0].explains) | {0}
    return [f.title for i, f in enumerate(report.findings) if f.severity == "ERROR" and i not in root]


# --- a collective that differs at the same SeqNum ---------------------------------------------------

def test_size_mismatch_at_the_same_seqnum_is_the_culprit_not_the_first_to_time_out(tmp_path: Path) -> None:
    lines = progress([0, 1, 2, 3])
    for r, t, n in ((0, "20:27:21.426417920", 1048576), (1, "20:27:21.431092113", 1048576),
                    (3, "20:27:21.502640031", 1048576), (2, "20:27:22.110054271", 524288)):
        lines.append(WATCHDOG.format(r=r, t=t, seq=41, op="ALLREDUCE", n=n, ran=600000 + r))
        lines.append(FAILURE.format(r=r, t=t, seq=41, enq=41, done=40))
    report = diagnosed(tmp_path, lines)
    rc = report.root_cause
    # rank 2 issued another collective (a desync), it did not fail to arrive: collective_mismatch,
    # established by its own timeout message; the others' timeouts are attributed to it
    assert (rc.kind, rc.ranks, rc.basis) == ("collective_mismatch", [2], "own_error")
    assert finding(report, "nccl_timeout").ranks == [2]
    f = report.findings[0]
    assert f.victims == [0, 1, 3] and f.evidence["first_timeout_rank"] == 0
    assert "NumelIn=524288" in f.evidence["how"] and "rank 0 timed out first" in f.title
    assert any(e.line == lines.index(next(ln for ln in lines if "NumelIn=524288" in ln)) + 1 for e in f.lines)


def test_another_optype_at_the_same_seqnum_is_the_culprit(tmp_path: Path) -> None:
    lines = progress([0, 1, 2, 3])
    for r, t, op in ((0, "20:27:21.426417920", "ALLREDUCE"), (3, "20:27:21.431092113", "BROADCAST"),
                     (1, "20:27:21.502640031", "ALLREDUCE"), (2, "20:27:22.110054271", "ALLREDUCE")):
        lines.append(WATCHDOG.format(r=r, t=t, seq=7, op=op, n=4096, ran=600000))
    rc = diagnosed(tmp_path, lines).root_cause
    assert (rc.kind, rc.ranks) == ("collective_mismatch", [3])


def test_two_ranks_with_different_sizes_name_nobody_as_the_odd_one(tmp_path: Path) -> None:
    # two ranks cannot out-vote each other: no majority, no culprit by mismatch
    lines = progress([0, 1])
    lines.append(WATCHDOG.format(r=0, t="20:27:21.426417920", seq=41, op="ALLREDUCE", n=1048576, ran=600000))
    lines.append(WATCHDOG.format(r=1, t="20:27:21.431092113", seq=41, op="ALLREDUCE", n=524288, ran=600000))
    f = finding(diagnosed(tmp_path, lines), "nccl_timeout")
    assert "NumelIn" not in (f.evidence["how"] or "")


# --- a rank whose sequence number lags ---------------------------------------------------------------

def test_rank_whose_last_enqueued_work_lags_is_the_culprit(tmp_path: Path) -> None:
    lines = progress([0, 1, 2, 3])
    lines += [
        WATCHDOG.format(r=0, t="20:27:21.426417920", seq=41, op="ALLREDUCE", n=1048576, ran=600012),
        FAILURE.format(r=0, t="20:27:21.426533331", seq=41, enq=41, done=40),
        DUMP.format(r=0, t="20:27:21.482119928", src="this local rank", enq=41, done=40),
        DUMP.format(r=2, t="20:27:21.530412211", src=" rank 0", enq=41, done=40),
        DUMP.format(r=1, t="20:27:21.530511309", src=" rank 0", enq=40, done=40),
        DUMP.format(r=3, t="20:27:21.530622871", src=" rank 0", enq=41, done=40),
        WATCHDOG.format(r=2, t="20:27:21.731048576", seq=41, op="ALLREDUCE", n=1048576, ran=600002),
        WATCHDOG.format(r=3, t="20:27:21.801734522", seq=41, op="ALLREDUCE", n=1048576, ran=600004),
    ]
    report = diagnosed(tmp_path, lines)
    assert (report.root_cause.kind, report.root_cause.ranks) == ("hang", [1])
    hang = report.findings[0]
    assert hang.victims == [0, 2, 3] and "#40" in hang.title and "#41" in hang.title
    assert unexplained_errors(report) == []


def test_smallest_last_completed_work_is_the_laggard(tmp_path: Path) -> None:
    lines = progress([0, 1, 2, 3])
    lines += [
        WATCHDOG.format(r=0, t="20:27:21.426417920", seq=161, op="ALLREDUCE", n=1048576, ran=600012),
        FAILURE.format(r=0, t="20:27:21.426533331", seq=161, enq=161, done=160),
        DUMP.format(r=1, t="20:27:21.530412211", src=" rank 0", enq=161, done=160),
        DUMP.format(r=2, t="20:27:21.530511309", src=" rank 0", enq=161, done=158),
        DUMP.format(r=3, t="20:27:21.530622871", src=" rank 0", enq=161, done=160),
    ]
    report = diagnosed(tmp_path, lines)
    assert report.root_cause.ranks == [2]
    assert "158" in report.findings[0].evidence["how"]


# --- an OOM followed by the others' connection errors ----------------------------------------------

def test_oom_then_remote_process_exited_is_that_ranks_oom(tmp_path: Path) -> None:
    lines = progress([0, 1, 2, 3]) + expand(OOM, r=2)
    for r in (0, 1, 3):
        lines += expand(NCCL_LOST, r=r)
    report = diagnosed(tmp_path, lines)
    assert (report.root_cause.kind, report.root_cause.ranks) == ("oom", [2])
    oom = report.findings[0]
    assert oom.victims == [0, 1, 3] and "2.00 GiB" in oom.title
    t = finding(report, "nccl_timeout")
    assert t.ranks == [2] and t.victims == [0, 1, 3]
    assert unexplained_errors(report) == []


def test_oom_then_gloo_connection_closed_by_peer_is_that_ranks_oom(tmp_path: Path) -> None:
    lines = progress([0, 1, 2, 3])
    for r in (0, 3):    # interleaved output: the victims' tracebacks may start printing first
        lines += expand(GLOO_LOST, r=r)[:2]
    lines += expand(OOM, r=1)
    for r in (0, 3):
        lines += expand(GLOO_LOST, r=r)[2:]
    lines += expand(GLOO_LOST, r=2)
    report = diagnosed(tmp_path, lines)
    assert (report.root_cause.kind, report.root_cause.ranks) == ("oom", [1])
    assert unexplained_errors(report) == []


def test_connection_errors_before_any_oom_do_not_blame_a_later_oom(tmp_path: Path) -> None:
    # rank 3's OOM comes after the others already lost rank 1: it is not their cause
    lines = progress([0, 1, 2, 3])
    for r in (0, 2):
        lines += expand(NCCL_LOST, r=r)
    lines += progress([3], step=88, t="20:18:30") + expand(OOM, r=3)
    report = diagnosed(tmp_path, lines)
    t = finding(report, "nccl_timeout")
    assert 3 not in t.ranks
    assert finding(report, "oom").victims == []
    assert report.root_cause.kind != "oom"     # not even through the cuda_oom rule's undated finding


# --- torch elastic's "first observed failure" ---------------------------------------------------------

def oom_then_watchdog_abort(first_observed_rank: int) -> list[str]:
    """Rank 1 OOMs and hangs in teardown; ranks 0,2,3 time out after 10 minutes and abort (-6)."""
    lines = progress([0, 1, 2, 3], t="10:00:00") + expand(OOM, r=1)
    for r, t in ((0, "10:10:05.102331020"), (2, "10:10:05.118730001"), (3, "10:10:05.230011876")):
        lines.append(WATCHDOG.format(r=r, t=t, seq=88, op="ALLREDUCE", n=1048576, ran=600003))
    lines += [
        "W1218 10:10:08.991000 140233 torch/distributed/elastic/multiprocessing/api.py:897] "
        "Sending process 5102 closing signal SIGTERM",
        "E1218 10:10:09.120000 140233 torch/distributed/elastic/multiprocessing/api.py:869] "
        f"failed (exitcode: -6) local_rank: {first_observed_rank} (pid: 510{first_observed_rank + 1}) of binary: /usr/bin/python",
    ]
    others = [{"time": "2024-12-18_10:10:09", "rank": r, "code": -6, "pid": 5101 + r} for r in (0, 2, 3)
              if r != first_observed_rank]
    first = {"time": "2024-12-18_10:10:09", "rank": first_observed_rank, "code": -6 if first_observed_rank != 1 else 1,
             "pid": 5101 + first_observed_rank}
    return lines + elastic_table(others, first)


def test_first_observed_failure_is_not_the_root_when_an_earlier_oom_exists(tmp_path: Path) -> None:
    report = diagnosed(tmp_path, oom_then_watchdog_abort(first_observed_rank=0))
    assert (report.root_cause.kind, report.root_cause.ranks) == ("oom", [1])
    root = report.findings[0]
    fo = root.evidence["launcher_first_observed"]
    assert (fo["rank"], fo["exit_code"], fo["agrees"]) == (0, -6, False)
    assert "first observed failure" in root.title and "rank 0" in root.title
    assert "exit code -6 (SIGABRT)" in root.title          # the signal named (issue 27)
    assert any("ChildFailedError" in (e.text or "") for e in root.lines)
    assert unexplained_errors(report) == []


def test_first_observed_failure_that_agrees_is_not_contradicted(tmp_path: Path) -> None:
    report = diagnosed(tmp_path, oom_then_watchdog_abort(first_observed_rank=1))
    root = report.findings[0]
    assert report.root_cause.ranks == [1] and root.evidence["launcher_first_observed"]["agrees"] is True
    assert "first observed failure" not in root.title


# --- SIGKILL without a traceback: the host's OOM killer -----------------------------------------------

def sigkilled_rank_1(table: bool = True) -> list[str]:
    lines = progress([0, 1, 2, 3], t="20:30:40")
    for r in (0, 2, 3):
        lines += expand(NCCL_LOST, r=r)
    lines += [
        f"W1218 20:31:02.{n}000 140233 torch/distributed/elastic/multiprocessing/api.py:897] "
        f"Sending process {pid} closing signal SIGTERM" for n, pid in ((501, 5101), (502, 5103), (503, 5104))
    ]
    lines.append("E1218 20:31:02.712000 140233 torch/distributed/elastic/multiprocessing/api.py:869] "
                 "failed (exitcode: -9) local_rank: 1 (pid: 5102) of binary: /usr/bin/python")
    if table:
        lines += elastic_table([], {"time": "2024-12-18_20:31:02", "rank": 1, "code": -9, "pid": 5102})
    return lines


def test_sigkill_without_traceback_is_the_host_oom_killer(tmp_path: Path) -> None:
    report = diagnosed(tmp_path, sigkilled_rank_1())
    rc = report.root_cause
    # host RAM, not GPU memory: its own kind (issue 10), named by its own exit record
    assert (rc.kind, rc.layer, rc.ranks, rc.basis) == ("host_oom", "resource", [1], "own_error")
    f = report.findings[0]
    assert f.evidence["host_oom_killer"] is True and f.evidence["confirmed"] is False
    assert f.evidence["pid"] == 5102 and f.evidence["exit_code"] == -9 and f.victims == [0, 2, 3]
    assert "OOM killer" in f.title or "out-of-memory killer" in f.title
    assert finding(report, "nccl_timeout").ranks == [1]
    assert unexplained_errors(report) == []


def test_sigkill_rank_is_named_only_when_the_launcher_names_it(tmp_path: Path) -> None:
    # without the ChildFailedError table only the local rank is known: no global rank is guessed
    # while the log shows ranks beyond this agent's four workers (4..7: a second node)
    (tmp_path / "two").mkdir()
    (tmp_path / "one").mkdir()
    report = diagnosed(tmp_path / "two", progress([4, 5, 6, 7], t="20:30:40") + sigkilled_rank_1(table=False))
    f = next(f for f in report.findings if f.evidence.get("host_oom_killer"))
    assert f.ranks == [] and f.evidence["local_rank"] == 1 and "local rank 1" in f.title
    assert f.kind == "host_oom" and f.local_ranks == [{"host": None, "local_rank": 1}]
    # alone, the agent's pids (SIGTERM to 5101, 5103, 5104; 5102 failed as local rank 1) cover
    # local ranks 0..3 and ranks 0..3 are all the log shows: one node, local rank 1 is rank 1
    report = diagnosed(tmp_path / "one", sigkilled_rank_1(table=False))
    f = next(f for f in report.findings if f.evidence.get("host_oom_killer"))
    assert (f.ranks, f.basis, f.local_ranks) == ([1], "one_node", [])


def test_kernel_oom_killer_line_confirms_it(tmp_path: Path) -> None:
    dmesg = ("[Wed Dec 18 20:31:01 2024] Out of memory: Killed process 5102 (python) total-vm:183462112kB, "
             "anon-rss:161234560kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:322160kB oom_score_adj:0\n")
    report = diagnosed(tmp_path, sigkilled_rank_1(), extra={"dmesg.txt": dmesg})
    f = report.findings[0]
    assert report.root_cause.ranks == [1]
    assert f.evidence["host_oom_killer"] is True and f.evidence["confirmed"] is True
    assert any(e.source_file.endswith("dmesg.txt") for e in f.lines)


def test_launcher_sigkill_after_its_own_sigterm_is_not_the_oom_killer(tmp_path: Path) -> None:
    # torchrun tears the job down after rank 0's timeout: SIGTERM to pid 5102, which then dies -9
    lines = progress([0, 1, 2, 3], t="20:17:15")
    lines.append(WATCHDOG.format(r=0, t="20:27:21.426417920", seq=41, op="ALLREDUCE", n=1048576, ran=600012))
    lines += [
        "W1218 20:27:25.501000 140233 torch/distributed/elastic/multiprocessing/api.py:897] "
        "Sending process 5102 closing signal SIGTERM",
        "E1218 20:27:56.712000 140233 torch/distributed/elastic/multiprocessing/api.py:869] "
        "failed (exitcode: -9) local_rank: 1 (pid: 5102) of binary: /usr/bin/python",
    ]
    report = diagnosed(tmp_path, lines)
    assert not any(f.evidence.get("host_oom_killer") for f in report.findings)


def test_a_traceback_before_the_kill_means_it_died_of_its_error(tmp_path: Path) -> None:
    lines = progress([0, 1], t="20:17:15") + [
        "[rank1]: Traceback (most recent call last):",
        '[rank1]:   File "/workspace/data.py", line 41, in __getitem__',
        "[rank1]: FileNotFoundError: [Errno 2] No such file or directory: '/data/shard_00017.bin'",
        "E1218 20:17:30.712000 140233 torch/distributed/elastic/multiprocessing/api.py:869] "
        "failed (exitcode: -9) local_rank: 1 (pid: 5102) of binary: /usr/bin/python",
    ] + elastic_table([], {"time": "2024-12-18_20:17:30", "rank": 1, "code": -9, "pid": 5102})
    report = diagnosed(tmp_path, lines)
    assert not any(f.evidence.get("host_oom_killer") for f in report.findings)
    # the exception that killed it is the fault: a crash of rank 1, by its own traceback
    rc = report.root_cause
    assert (rc.kind, rc.ranks, rc.basis) == ("crash", [1], "own_error")
    assert "FileNotFoundError" in report.findings[0].title


def test_a_barrier_timeout_raised_as_an_exception_names_the_missing_rank(tmp_path: Path) -> None:
    """monitoredBarrier (ProcessGroupGloo.cpp) raises on rank 0 naming the ranks that never
    arrived. The traceback's exception line is typed BARRIER_TIMEOUT by the reader: it is a
    timeout naming rank 3, not a crash of rank 0."""
    lines = [f"2024-11-20 14:37:00,00{r} - INFO - [rank{r}]:step 10 loss 2.{r}" for r in range(4)]
    lines += ["2024-11-20 14:37:30,010 [rank0]: Traceback (most recent call last):",
              '2024-11-20 14:37:30,011 [rank0]:   File "train.py", line 40, in <module>',
              "2024-11-20 14:37:30,011 [rank0]:     dist.monitored_barrier(timeout=timedelta(seconds=30))",
              "2024-11-20 14:37:30,012 [rank0]: RuntimeError: [Rank 0]: Ranks 3 failed to pass monitoredBarrier in 30000 ms"]
    rc = diagnosed(tmp_path, lines).root_cause
    assert rc is not None and rc.kind == "hang" and rc.ranks == [3], rc
    assert rc.basis == "named_by_peers"


def test_a_worker_exit_with_an_error_code_is_a_crash_not_healthy(tmp_path: Path) -> None:
    """All that is left is the launcher's console: torch elastic saw local rank 2 of a single-node
    job exit with code 1 (its traceback went to its own stderr). That is a crash of rank 2, never
    "healthy"; an exit by SIGTERM (-15, a teardown) alone is not a crash."""
    agent = ("E1120 14:37:40.000000 100 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: {code}) "
             "local_rank: 2 (pid: 3122) of binary: /usr/bin/python3")
    first = {"time": "2024-11-20_14:37:40", "rank": 2, "code": 1, "pid": 3122}
    lines = [*progress([0, 1, 2, 3]), agent.format(code=1), *elastic_table([], first)]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    rc = diagnosed(tmp_path / "a", lines).root_cause
    assert rc is not None and rc.kind == "crash" and rc.ranks == [2] and rc.basis == "own_error", rc
    lines = [*progress([0, 1, 2, 3]), agent.format(code=-15), *elastic_table([], dict(first, code=-15))]
    report = diagnosed(tmp_path / "b", lines)
    assert not any(f.kind == "crash" for f in report.findings)


def test_the_rank_without_a_timeout_of_its_own_held_up_the_collective(tmp_path: Path) -> None:
    """Ranks 0, 1 and 3 time out in collective #6; rank 2 logged as long as they did but reports
    nothing: it never enqueued #6 (its watchdog had nothing to time out). Nothing else (no step
    numbers, no watchdog status) says how far each rank got."""
    lines = [f"2024-11-20 14:37:{2 * s:02d} [rank{r}]: loading shard {s}" for s in range(1, 6) for r in range(4)]
    lines += [WATCHDOG.format(r=r, t=f"14:47:1{r}.000000 311{r}", seq=6, op="ALLREDUCE", n=1000, ran=600001)
              for r in (0, 1, 3)]
    rc = diagnosed(tmp_path, lines).root_cause
    assert rc is not None and rc.kind == "hang" and rc.ranks == [2], rc
    assert rc.basis == "never_joined" and not rc.basis_weak


# --- TORCH_DISTRIBUTED_DEBUG=DETAIL: a collective whose dtype or size differs on one rank --------
# ProcessGroupWrapper.cpp (CollectiveFingerPrint::verify): each rank compares its fingerprint with
# every rank's, in rank order, and raises at the first that differs; operator<< of a fingerprint;
# compute_collective_diff appends what differs. Lines written here in that format.
FP = "CollectiveFingerPrint(SequenceNumber={seq}, OpType={op}, TensorShape=[{shape}], TensorDtypes={dt}, TensorDeviceTypes=cpu)"
MISMATCH = [
    "[rank{r}]: Traceback (most recent call last):",
    '[rank{r}]:   File "/workspace/train.py", line 120, in <module>',
    "[rank{r}]:     dist.all_reduce(grad)",
    "[rank{r}]: RuntimeError: Detected mismatch between collectives on ranks. Rank {r} is running collective: {mine}, "
    "but Rank {peer} is running collective: {theirs}.Collectives differ in the following aspects: {diff}",
]


def _mismatch_run(odd: int, odd_fp: dict, good_fp: dict, diff: str, world: int = 4) -> list[str]:
    lines = progress(list(range(world)))
    for r in range(world):
        # the first rank (in rank order) whose fingerprint differs from this rank's own
        peer = odd if r != odd else next(k for k in range(world) if k != odd)
        mine, theirs = (odd_fp, good_fp) if r == odd else (good_fp, odd_fp)
        lines += expand(MISMATCH, r=r, peer=peer, mine=FP.format(**mine), theirs=FP.format(**theirs), diff=diff)
    return lines


def test_a_dtype_mismatch_names_the_odd_rank_as_collective_mismatch(tmp_path: Path) -> None:
    good = {"seq": 40, "op": "ALLREDUCE", "shape": "1024", "dt": "Float"}
    lines = _mismatch_run(2, dict(good, dt="Half"), good, "  Tensor Tensor dtypes: Halfvs Float")
    report = diagnosed(tmp_path, lines)
    rc = report.root_cause
    assert rc is not None and (rc.kind, rc.ranks, rc.basis) == ("collective_mismatch", [2], "named_by_peers"), rc
    f = finding(report, "collective_mismatch")
    assert "tensor dtype Half where rank 0's has Float" in f.evidence["how"], f.evidence["how"]
    assert f.evidence["fingerprints"]["differ"] == ["dtypes"]


def test_a_size_mismatch_names_the_odd_rank_as_collective_mismatch(tmp_path: Path) -> None:
    good = {"seq": 7, "op": "BROADCAST", "shape": "16, 512", "dt": "Float"}
    lines = _mismatch_run(1, dict(good, shape="16, 256"), good, "  Tensor Tensor shapes: [16, 256]vs [16, 512]", world=3)
    report = diagnosed(tmp_path, lines)
    rc = report.root_cause
    assert rc is not None and (rc.kind, rc.ranks) == ("collective_mismatch", [1]), rc
    how = finding(report, "collective_mismatch").evidence["how"]
    assert "BROADCAST #7 has tensor shape [16, 256] where rank 0's has [16, 512]" in how, how


def test_each_ranks_own_fingerprint_log_line_is_not_an_error(tmp_path: Path) -> None:
    """runCollectiveChecks logs every rank's fingerprint at INFO before each collective: these are
    not mismatches (they were typed COLLECTIVE_MISMATCH / ERROR before)."""
    lines = progress([0, 1])
    lines += [f"[rank{r}]:[I1218 20:17:16.000000000 ProcessGroupWrapper.cpp:560] [Rank {r}] Running collective: "
              + FP.format(seq=s, op="ALLREDUCE", shape="8", dt="Float") for s in (1, 2) for r in (0, 1)]
    lines += progress([0, 1], step=88, t="20:17:17")
    report = diagnosed(tmp_path, lines)
    assert report.root_cause is None and not any(f.kind in ("collective_mismatch", "nccl_timeout") for f in report.findings)


# --- a hang where no line names a global rank ------------------------------------------------------
# journald short-iso lines of torchrun services on two nodes, --tee prefixes (local ranks only),
# no rendezvous result or launch configs printed; gloo's timeout (unbound_buffer.cc:
# GLOO_ERROR_MSG("Timed out waiting ", timeout.count(), "ms for recv operation to complete")).
JOURNAL = "2024-11-20T14:{m:02d}:{s:02d}+0000 {h} torchrun[42{n}]: [default{lr}]:"
GLOO_TIMEOUT = ["Traceback (most recent call last):", '  File "/srv/train.py", line 88, in <module>', "    dist.all_reduce(grad)",
                "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting "
                "60000ms for recv operation to complete"]


def _local_only_run(silent_times_out: bool) -> list[str]:
    lines = []
    for step in range(1, 7):
        for h, n in (("node-a", 1), ("node-b", 2)):
            for lr in (0, 1):
                if h == "node-b" and lr == 1 and step > 4:
                    continue        # local rank 1 of node-b stops after step 4
                lines.append(JOURNAL.format(m=37, s=step * 4 + 2 * n + lr, h=h, n=n, lr=lr)
                             + f"step {step} | loss 2.{step}{lr} | 500.0 ms/step")
    procs = [("node-a", 1, 0), ("node-a", 1, 1), ("node-b", 2, 0)] + ([("node-b", 2, 1)] if silent_times_out else [])
    for h, n, lr in procs:
        lines += [JOURNAL.format(m=38, s=40 + lr, h=h, n=n, lr=lr) + ln for ln in GLOO_TIMEOUT]
    return lines


def test_a_hang_known_only_by_local_rank_and_host_is_named_so(tmp_path: Path) -> None:
    report = diagnosed(tmp_path, _local_only_run(silent_times_out=False))
    rc = report.root_cause
    assert rc is not None and rc.kind == "hang", rc
    assert rc.ranks == [] and rc.local_ranks == [{"host": "node-b", "local_rank": 1}]
    assert rc.basis == "never_joined" and "local rank 1 on host node-b" in rc.summary
    f = finding(report, "hang")
    assert "after step 4" in f.title and "the logs do not say" in f.title
    assert "rank 1 " not in f.title.replace("local rank 1 ", "")      # never a guessed global rank


def test_a_local_only_hang_where_everyone_timed_out_names_who_stopped_first(tmp_path: Path) -> None:
    rc = diagnosed(tmp_path, _local_only_run(silent_times_out=True)).root_cause
    assert rc is not None and rc.kind == "hang" and rc.ranks == [], rc
    assert rc.local_ranks == [{"host": "node-b", "local_rank": 1}] and rc.basis == "last_to_log"


# --- SIGKILL after the others timed out: the hang's teardown, not the OOM killer ------------------------

def killed_after_timeouts(stuck: int = 2) -> list[str]:
    """Ranks other than `stuck` time out in collective #41; torch elastic then tears the job down
    and the stuck worker, deaf to SIGTERM inside its collective, dies of SIGKILL."""
    lines = progress([0, 1, 2, 3], t="20:17:15")
    for k, r in enumerate(x for x in range(4) if x != stuck):
        lines.append(WATCHDOG.format(r=r, t=f"20:27:21.4{k}0000000", seq=41, op="ALLREDUCE", n=1048576, ran=600012))
    lines.append("E1218 20:27:56.712000 140233 torch/distributed/elastic/multiprocessing/api.py:869] "
                 f"failed (exitcode: -9) local_rank: {stuck} (pid: {5101 + stuck}) of binary: /usr/bin/python")
    return lines + elastic_table([{"time": "2024-12-18_20:27:56", "rank": r, "code": -9, "pid": 5101 + r}
                                  for r in range(4) if r != stuck],
                                 {"time": "2024-12-18_20:27:56", "rank": stuck, "code": -9, "pid": 5101 + stuck})


def test_a_sigkill_after_the_collective_timeouts_is_the_teardown_not_host_oom(tmp_path: Path) -> None:
    report = diagnosed(tmp_path, killed_after_timeouts(stuck=2))
    assert not any(f.kind == "host_oom" for f in report.findings)
    assert (report.root_cause.kind, report.root_cause.ranks) == ("hang", [2])
    assert unexplained_errors(report) == []


def test_a_sigkill_after_the_timeouts_with_the_oom_killers_line_is_host_oom(tmp_path: Path) -> None:
    dmesg = ("[Wed Dec 18 20:27:50 2024] Out of memory: Killed process 5103 (python) total-vm:183462112kB, "
             "anon-rss:161234560kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:322160kB oom_score_adj:0\n")
    report = diagnosed(tmp_path, killed_after_timeouts(stuck=2), extra={"dmesg.txt": dmesg})
    f = next(f for f in report.findings if f.kind == "host_oom")
    assert f.ranks == [2] and f.evidence["confirmed"] is True


def test_ncclremoteerror_is_a_lost_peer_not_a_timeout(tmp_path: Path) -> None:
    """torch/csrc/distributed/c10d/NCCLUtils.cpp (getNcclErrorDetailStr): "ncclRemoteError: A call
    failed possibly due to a network error or a remote process exiting prematurely." The other
    side died: a SIGKILL after it is that death (host OOM suspected), not a teardown."""
    lines = progress([0, 1, 2, 3], t="20:30:40")
    for k, r in enumerate((0, 2, 3)):
        lines.append(f"[rank{r}]:[E1218 20:31:01.{k}00000000 ProcessGroupNCCL.cpp:1896] [PG ID 0 PG GUID 0(default_pg) "
                     f"Rank {r}] Process group watchdog thread terminated with exception: ncclRemoteError: A call failed "
                     "possibly due to a network error or a remote process exiting prematurely.")
    lines.append("E1218 20:31:02.712000 140233 torch/distributed/elastic/multiprocessing/api.py:869] "
                 "failed (exitcode: -9) local_rank: 1 (pid: 5102) of binary: /usr/bin/python")
    lines += elastic_table([], {"time": "2024-12-18_20:31:02", "rank": 1, "code": -9, "pid": 5102})
    report = diagnosed(tmp_path, lines)
    assert (report.root_cause.kind, report.root_cause.ranks) == ("host_oom", [1])
