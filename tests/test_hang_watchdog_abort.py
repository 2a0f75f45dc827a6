"""A rank that stops while its peers later time out is a hang; the SIGABRT that ends it is the
watchdog's teardown, not a crash of its own (issue 27).

Facts (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp): on a collective timeout the watchdog
logs "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=..)" and, with the default
async error handling, "To avoid data inconsistency, we are taking the entire process down." and
rethrows in its thread (uncaught: std::terminate, SIGABRT); every other rank's heartbeat monitor
sees the dump signal the timed-out rank set in the TCPStore ("Received a dump signal due to a
collective timeout from rank N ..."), dumps and calls terminateProcess (LOG(FATAL): std::abort).
So the rank that never joined the collective dies of SIGABRT too, after its peers' timeouts, and
torch elastic reports every worker with exitcode -6 (multiprocessing/api.py "failed (exitcode:
-6) local_rank: N", errors/ ChildFailedError "Signal 6 (SIGABRT) received by PID").

Lines written here in those formats, with world sizes, hosts and the hung rank varied.
"""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from forensics.ingest import ingest
from forensics.passes import diagnose
from forensics.passes import rootcause
from forensics.report.model import Finding, Report
from forensics.store import open_store

T0 = dt.datetime(2025, 3, 9, 7, 12, 0)
STEP_S = 0.45
TIMEOUT_MS = 600_000


def _glog(level: str, t: dt.datetime, pid: int, src: str, text: str) -> str:
    return f"{level}{t:%m%d %H:%M:%S}.{t.microsecond:06d} {pid} {src}] {text}"


def _watchdog(r: int, seq: int, ran: int) -> str:
    return (f"[PG ID 0 PG GUID 0(default_pg) Rank {r}] Watchdog caught collective operation timeout: "
            f"WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=8388608, NumelOut=8388608, Timeout(ms)={TIMEOUT_MS}) "
            f"ran for {ran} milliseconds before timing out.")


def _teardown(r: int) -> str:
    return f"[Rank {r}] To avoid data inconsistency, we are taking the entire process down."


def _dump_signal(r: int, src: int, enq: int) -> str:
    return (f"[PG ID 0 PG GUID 0(default_pg) Rank {r}] Received a dump signal due to a collective timeout from "
            f"rank {src} and we will try our best to dump the debug info. Last enqueued NCCL work: {enq}, last "
            f"completed NCCL work: {enq}.")


def _progress(r: int, step: int, t: dt.datetime) -> str:
    """Megatron's training_log line (megatron/training/training.py), behind torchrun's prefix."""
    return (f"[rank{r}]: [{t:%Y-%m-%d %H:%M:%S}] iteration {step:8d}/{1000:8d} | consumed samples: {step * 256:12d} | "
            f"elapsed time per iteration (ms): {STEP_S * 1000:.1f} | learning rate: 1.500000E-04 | global batch size: "
            f"  256 | lm loss: {3.1 - step / 1000:.6E} |")


def _elastic_table(host: str, records: list[tuple[int, int, int, int, dt.datetime]]) -> list[str]:
    """torch elastic's ChildFailedError report; records: (global rank, local rank, code, pid, time)."""
    def rec(i: int, x: tuple[int, int, int, int, dt.datetime]) -> list[str]:
        g, lr, code, pid, t = x
        return [f"[{i}]:", f"  time      : {t:%Y-%m-%d_%H:%M:%S}", f"  host      : {host}",
                f"  rank      : {g} (local_rank: {lr})", f"  exitcode  : {code} (pid: {pid})", "  error_file: <N/A>",
                f"  traceback : Signal {-code} ({'SIGABRT' if code == -6 else 'SIGSEGV'}) received by PID {pid}"]
    out = ["Traceback (most recent call last):", '  File "/opt/conda/bin/torchrun", line 33, in <module>',
           "    sys.exit(load_entry_point('torch', 'console_scripts', 'torchrun')())",
           "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
           "=" * 60, "pretrain.py FAILED", "-" * 60, "Failures:"]
    for i, x in enumerate(records[1:], start=1):
        out += rec(i, x)
    if len(records) == 1:
        out.append("  <NO_OTHER_FAILURES>")
    return out + ["-" * 60, "Root Cause (first observed failure):", *rec(0, records[0]), "=" * 60]


def hung_run(world: int, hosts: int, hung: int, *, abort_before: bool = False,
             code: int = -6) -> dict[str, str]:
    """One console file per host (torchrun --tee 3, `[rankN]:` prefixes). Rank `hung` stops after
    step 40; the others go on to step 60, block in the next all-reduce and time out 600 s later;
    then every worker exits with `code` (SIGABRT by default). abort_before: the hung rank's
    exit is recorded right after it stopped, before the others time out (its own abort)."""
    per = world // hosts
    last_step = {r: (40 if r == hung else 60) for r in range(world)}
    t_stop = T0 + dt.timedelta(seconds=60 * STEP_S)
    t_to = t_stop + dt.timedelta(milliseconds=TIMEOUT_MS + 1200)
    seq = 60 * 3 + 1
    files = {}
    for h in range(hosts):
        host = f"gpu-{h + 3:03d}"
        ranks = list(range(h * per, (h + 1) * per))
        lines = []
        for step in range(10, 61, 10):
            for r in ranks:
                if step <= last_step[r]:
                    lines.append(_progress(r, step, T0 + dt.timedelta(seconds=step * STEP_S, milliseconds=3 * r)))
        for r in ranks:
            t = t_to + dt.timedelta(milliseconds=17 * r)
            if r == hung:
                lines.append(f"[rank{r}]:" + _glog("E", t, 7100 + r, "ProcessGroupNCCL.cpp:1595",
                                                   _dump_signal(r, (hung + 1) % world, seq - 1)))
                continue
            lines.append(f"[rank{r}]:" + _glog("E", t, 7100 + r, "ProcessGroupNCCL.cpp:632",
                                               _watchdog(r, seq, TIMEOUT_MS + 17 * r)))
            lines.append(f"[rank{r}]:" + _glog("E", t, 7100 + r, "ProcessGroupNCCL.cpp:684", _teardown(r)))
        t_exit = t_to + dt.timedelta(seconds=3)
        t_hung = (T0 + dt.timedelta(seconds=41 * STEP_S)) if abort_before else t_exit
        recs = []
        for r in ranks:
            t = t_hung if r == hung else t_exit
            recs.append((r, r - h * per, code if r == hung else -6, 7100 + r, t))
        recs.sort(key=lambda x: (x[4], x[0]))
        first = recs[0]
        lines.append(_glog("E", first[4], 7001, "torch/distributed/elastic/multiprocessing/api.py:869",
                           f"failed (exitcode: {first[2]}) local_rank: {first[1]} (pid: {first[3]}) of binary: "
                           "/opt/conda/bin/python3.11"))
        lines += _elastic_table(host, recs)
        if abort_before and hung in ranks:
            lines.sort(key=lambda ln: 0 if "local_rank: " in ln and "failed" in ln else 1)
        files[f"{host}.log"] = "\n".join(lines) + "\n"
    return files


def diagnosed(tmp_path: Path, files: dict[str, str]) -> Report:
    logs = tmp_path / "logs"
    for name, text in files.items():
        p = logs / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    store = tmp_path / "run.forensics"
    ingest([str(logs)], store)
    return diagnose(open_store(store))


@pytest.mark.parametrize("world,hosts,hung", [(4, 1, 2), (16, 2, 11), (2, 1, 0), (24, 3, 17)])
def test_a_rank_that_stopped_before_its_peers_timed_out_is_a_hang_not_a_crash(tmp_path: Path, world: int, hosts: int,
                                                                              hung: int) -> None:
    report = diagnosed(tmp_path, hung_run(world, hosts, hung))
    rc = report.root_cause
    assert rc is not None and (rc.kind, rc.ranks) == ("hang", [hung]), rc
    # its SIGABRT is the watchdog's teardown: no crash of its own, and the lag is the hang's symptom
    assert not [f.title for f in report.findings if f.kind == "crash"]
    lag = [i for i, f in enumerate(report.findings) if f.kind == "rank_lag"]
    assert lag and all(i in report.findings[0].explains for i in lag)
    timeouts = [f for f in report.findings if f.kind == "nccl_timeout" and f.rule == "pass.failures"]
    assert timeouts and timeouts[0].ranks == [hung] and hung not in timeouts[0].victims


def test_an_abort_before_the_peers_timed_out_is_still_a_crash_of_its_own(tmp_path: Path) -> None:
    """The launcher saw rank 3 die of SIGABRT right after it stopped, ten minutes before the
    others' watchdogs fired: an abort of its own (a failed C++ check), the cause of their wait."""
    report = diagnosed(tmp_path, hung_run(8, 1, 3, abort_before=True))
    rc = report.root_cause
    assert rc is not None and (rc.kind, rc.ranks, rc.basis) == ("crash", [3], "own_error"), rc


def test_a_fault_signal_after_the_timeouts_is_not_taken_for_the_teardown(tmp_path: Path) -> None:
    """Only SIGABRT is the watchdog's: a SIGSEGV exit of the silent rank keeps its crash finding."""
    report = diagnosed(tmp_path, hung_run(4, 1, 1, code=-11))
    crash = [f for f in report.findings if f.kind == "crash"]
    assert crash and crash[0].ranks == [1] and "SIGSEGV" in crash[0].title


def test_a_peers_dump_signal_stands_for_the_timeout_no_line_shows(tmp_path: Path) -> None:
    """The rank whose watchdog fired wrote elsewhere: the others only log the heartbeat monitor's
    "Received a dump signal due to a collective timeout from rank 6". That is a collective timeout
    all the same: the SIGABRTs after it are its teardown, and the rank that stopped is the hang."""
    files = {}
    for name, text in hung_run(8, 1, 3).items():
        out = []
        for ln in text.splitlines():
            if "Watchdog caught" in ln:
                r = int(ln.split("]", 1)[0].removeprefix("[rank"))
                head = ln.split("ProcessGroupNCCL.cpp")[0]
                ln = head + "ProcessGroupNCCL.cpp:1595] " + _dump_signal(r, 6, 3 * 60 + 1)
            elif "taking the entire process down" in ln:
                continue
            out.append(ln)
        files[name] = "\n".join(out) + "\n"
    report = diagnosed(tmp_path, files)
    rc = report.root_cause
    assert rc is not None and (rc.kind, rc.ranks) == ("hang", [3]), rc
    assert not [f.title for f in report.findings if f.kind in ("crash", "unexplained_error")]


def test_only_the_hung_ranks_output_still_reads_as_a_hang(tmp_path: Path) -> None:
    """torchrun --tee/--local-ranks-filter 0: only rank 0's lines and the launcher's. Rank 0
    stopped, heard that rank 1's collective timed out, and every worker died of SIGABRT."""
    files = {name: "\n".join(ln for ln in text.splitlines() if not ln.startswith(("[rank1]", "[rank2]", "[rank3]"))) + "\n"
             for name, text in hung_run(4, 1, 0).items()}
    report = diagnosed(tmp_path, files)
    rc = report.root_cause
    assert rc is not None and (rc.kind, rc.ranks) == ("hang", [0]), rc
    assert not [f.title for f in report.findings if f.kind == "crash"]


def logdir_run(world: int, hung: int) -> dict[str, str]:
    """torchrun --log-dir: each worker's stdout/stderr in <run>/attempt_0/<local rank>/; the NCCL
    glog lines in stderr carry no year and the file has no full timestamp; the agent's console
    (Python logging, no time) holds the exits, all -6."""
    files = {}
    seq = 512
    t_to = T0 + dt.timedelta(seconds=70 * STEP_S, milliseconds=TIMEOUT_MS + 900)
    for r in range(world):
        last = 50 if r == hung else 70
        out = [f"Initialized process group: rank {r}, world size {world}"]
        out += [f"rank {r}: [{T0 + dt.timedelta(seconds=s * STEP_S):%Y-%m-%d %H:%M:%S}] iteration {s:>6}/ 1000 | "
                f"elapsed time per iteration (ms): {STEP_S * 1000:.1f} | lm loss: {3.0 - s / 500:.6E} |"
                for s in range(10, last + 1, 10)]
        err = [] if r == hung else [_glog("E", t_to + dt.timedelta(milliseconds=9 * r), 9300 + r,
                                          "ProcessGroupNCCL.cpp:632", _watchdog(r, seq, TIMEOUT_MS + 9 * r))]
        files[f"run_77/attempt_0/{r}/stdout.log"] = "\n".join(out) + "\n"
        files[f"run_77/attempt_0/{r}/stderr.log"] = "\n".join(err) + ("\n" if err else "")
    t_exit = t_to + dt.timedelta(seconds=2)
    con = ["INFO:torch.distributed.launcher.api:Starting elastic_operator with launch configs:",
           "  entrypoint       : pretrain.py", "  min_nodes        : 1", "  max_nodes        : 1",
           f"  nproc_per_node   : {world}", "  log_dir          : /scratch/torchelastic_q7"]
    con += [f"WARNING:torch.distributed.elastic.multiprocessing.api:Sending process {9300 + r} closing signal SIGTERM"
            for r in range(1, world)]
    con.append("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -6) local_rank: 0 (pid: 9300) "
               "of binary: /usr/bin/python3")
    con += _elastic_table("node-a", [(r, r, -6, 9300 + r, t_exit) for r in range(world)])
    files["console.log"] = "\n".join(con) + "\n"
    return files


@pytest.mark.parametrize("world,hung", [(4, 1), (8, 6)])
def test_logdir_hang_with_yearless_watchdog_lines_is_a_hang(tmp_path: Path, world: int, hung: int) -> None:
    report = diagnosed(tmp_path, logdir_run(world, hung))
    rc = report.root_cause
    assert rc is not None and (rc.kind, rc.ranks) == ("hang", [hung]), rc
    assert not [f.title for f in report.findings if f.kind == "crash"]


# --- the relation itself ---------------------------------------------------------------------------

def F(kind: str, layer: str, ranks: list[int], t: str, *, victims: list[int] | None = None, rule: str | None = None,
      last: str | None = None, sev: str = "ERROR") -> Finding:
    return Finding(rule=rule or "pass.failures", kind=kind, layer=layer, severity=sev, ranks=ranks, title=f"{kind} {ranks}",
                   victims=victims or [], first_seen=f"2025-03-09T07:{t}+00:00", last_seen=f"2025-03-09T07:{last or t}+00:00")


def test_timeouts_naming_the_lagging_rank_explain_its_lag() -> None:
    """The lag (rank 5's last step below its peers') is seen ten minutes before the timeouts that
    name rank 5: it is their culprit's stop, never the root cause."""
    fs = [F("rank_lag", "training", [5], "12:20", last="12:29", sev="WARN", rule="pass.rank_lag"),
          F("nccl_timeout", "communication", [5], "22:31", victims=[0, 1, 2, 3, 4, 6, 7])]
    rc, ordered = rootcause.assign(fs, list(range(8)))
    assert rc.kind == "nccl_timeout" and rc.ranks == [5] and ordered[0].explains == [1]
    # a failure on another rank does not explain it
    fs = [F("rank_lag", "training", [5], "12:20", last="12:29", sev="WARN", rule="pass.rank_lag"),
          F("nccl_timeout", "communication", [2], "22:31", victims=[0, 1, 3, 4, 5, 6, 7])]
    _, ordered = rootcause.assign(fs, list(range(8)))
    assert ordered[[f.kind for f in ordered].index("nccl_timeout")].explains == []


def test_findings_that_explain_each_other_in_a_cycle_are_not_all_explained_away() -> None:
    """A crash recorded after the timeouts it is blamed for, the pass's timeout report placed at
    its time and the rule's report of the same timeouts a second earlier explain each other round
    a cycle: one of them is the root, never a weaker finding outside the cycle."""
    fs = [F("throughput_drop", "training", [], "10:00", sev="WARN", rule="pass.throughput"),
          F("gradient_skew", "communication", [2], "05:00", last="06:00", sev="WARN", rule="pass.gradient_skew"),
          F("crash", "resource", [3], "22:33"),
          F("nccl_timeout", "communication", [3], "22:33", victims=[0, 1, 2]),
          F("nccl_timeout", "communication", [], "22:31", victims=[0, 1, 2], rule="nccl_timeout")]
    rc, _ = rootcause.assign(fs, [0, 1, 2, 3])
    assert rc is not None and (rc.kind, rc.ranks) == ("crash", [3]), rc
