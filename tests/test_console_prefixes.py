"""Launcher prefixes and exit reports (forensics/ingest/console/marks.py) read by the console reader,
and the failure pass's verdict on a job stopped from outside (passes/failures/stopped.py).

Every line here is ours, in the format the upstream source named in marks.py writes.
"""
from __future__ import annotations

import io
import json

import polars as pl
import pytest

from forensics.ingest.console import read_console
from forensics.ingest.console.marks import EXITS, PREFIXES, mark_at, signal_named
from forensics.ingest.formats import ReaderContext


def _events(*lines: str) -> pl.DataFrame:
    data = ("\n".join(lines) + "\n").encode()
    blocks = list(read_console("c.log", io.BytesIO(data), ReaderContext("c.log", None, None)))
    return pl.concat([b.events for b in blocks], how="diagonal_relaxed")


def _x(row: dict) -> dict:
    return json.loads(row["extra"]) if row["extra"] else {}


@pytest.mark.parametrize("mark", PREFIXES, ids=lambda m: m.name)
def test_each_mark_reads_its_own_sample(mark):
    hit = mark_at(mark.sample)
    assert hit is not None and hit[0] is mark
    assert mark.sample[hit[1].end():].strip()      # the line's text is left behind the mark


@pytest.mark.parametrize("rep", EXITS, ids=lambda r: r.name)
def test_each_exit_report_reads_its_own_sample(rep):
    assert rep.trigger in rep.sample and rep.pattern.search(rep.sample)
    ev = _events(rep.sample).row(0, named=True)
    assert ev["event"] == "CHILD_FAILED" and ev["exit_code"] is not None


def test_horovod_tag_gives_the_rank_stream_and_asctime():
    ev = _events("Sat Oct  5 12:56:20 2024[3]<stderr>:Traceback (most recent call last):",
                 'Sat Oct  5 12:56:20 2024[3]<stderr>:  File "train.py", line 9, in <module>',
                 "Sat Oct  5 12:56:21 2024[3]<stderr>:ValueError: corrupt record",
                 "[12]<stdout>:step 40 | loss 2.1")
    head = ev.row(0, named=True)
    assert (head["event"], head["rank"], head["rank_source"]) == ("TRACEBACK", 3, "prefix")
    assert head["message"] == "ValueError: corrupt record"
    assert str(head["timestamp"]).startswith("2024-10-05 12:56:20")
    assert ev.row(3, named=True)["rank"] == 12 and ev.row(3, named=True)["step"] == 40


def test_lightning_rank_prefix_is_the_global_rank():
    row = _events("[rank: 5] Seed set to 1234").row(0, named=True)
    assert (row["rank"], row["rank_source"], row["message"]) == (5, "prefix", "Seed set to 1234")


def test_kubectl_prefix_gives_the_pod_as_host_and_keeps_the_tee_local_rank():
    row = _events("[pod/llm-ft-worker-1/pytorch] [default2]:step 40 loss 2.1").row(0, named=True)
    assert row["host"] == "llm-ft-worker-1" and row["local_rank"] == 2 and row["rank"] is None
    assert _x(row)["container"] == "pytorch"


def test_a_bracketed_word_is_not_a_mark():
    row = _events("[pod] step 3 loss 2.0", ).row(0, named=True)
    assert row["rank"] is None and row["host"] is None


def test_mpirun_signal_report_names_rank_host_and_signal():
    row = _events("mpirun noticed that process rank 6 with PID 4242 on node gpu-b exited on signal 11 "
                  "(Segmentation fault).").row(0, named=True)
    assert (row["event"], row["rank"], row["rank_source"], row["host"], row["exit_code"]) == ("CHILD_FAILED", 6, "record", "gpu-b", -11)
    assert _x(row)["signal"] == "SIGSEGV" and _x(row)["pid"] == 4242


def test_first_failure_record_of_mpirun_and_horovod():
    ev = _events("  Process name: [[4321,1],3]", "  Exit code:    1", "Process name: 7", "Exit code: 137")
    mpi, hvd = ev.row(1, named=True), ev.row(3, named=True)
    assert (mpi["event"], mpi["rank"], mpi["exit_code"]) == ("CHILD_FAILED", 3, 1)
    assert (hvd["rank"], hvd["exit_code"], _x(hvd)["signal"]) == (7, 137, "SIGKILL")   # 128+9


def test_an_exit_code_line_far_from_a_process_name_is_not_a_record():
    ev = _events("Process name: 7", "a", "b", "c", "d", "Exit code: 1")
    assert ev.row(5, named=True)["event"] != "CHILD_FAILED"


def test_called_process_error_names_no_rank():
    # torch.distributed.launch raises with the LAST command it spawned, whoever failed
    row = _events("subprocess.CalledProcessError: Command '['/usr/bin/python3', '-u', 'train.py', '--local_rank=3']' "
                  "died with <Signals.SIGKILL: 9>.").row(0, named=True)
    assert (row["event"], row["exit_code"], row["rank"], row["local_rank"]) == ("CHILD_FAILED", -9, None, None)


def test_srun_task_death_by_signal_and_its_rank():
    ev = _events("0: step 1 loss 2.0", "1: step 1 loss 2.0", "0: step 2 loss 1.9", "1: step 2 loss 1.9",
                 "srun: error: node-01: task 1: Segmentation fault (core dumped)",
                 "srun: error: node-01: task 0: Killed")
    seg, kill = ev.row(4, named=True), ev.row(5, named=True)
    assert (seg["event"], seg["exit_code"], seg["rank"], _x(seg)["signal"]) == ("CHILD_FAILED", -11, 1, "SIGSEGV")
    assert (kill["event"], kill["rank"], _x(kill)["signal"]) == ("PROCESS_KILLED", 0, "SIGKILL")


def test_srun_task_is_not_a_rank_when_the_tasks_are_launchers():
    ev = _events("0: [default0]:step 1 loss 2.0", "1: [default0]:step 1 loss 2.0", "0: [default1]:step 1 loss 2.0",
                 "srun: error: node-02: task 1: Exited with exit code 1")
    assert ev.row(3, named=True)["rank"] is None


@pytest.mark.parametrize("code, signum, text, want", [
    (-9, None, None, "SIGKILL"), (137, None, None, "SIGKILL"), (139, None, None, "SIGSEGV"), (-6, None, None, "SIGABRT"),
    (1, None, None, None), (None, 7, None, "SIGBUS"), (None, None, "Segmentation fault (core dumped)", "SIGSEGV"),
    (None, None, "Bus error", "SIGBUS"), (200, None, None, None),
])
def test_signals_are_named(code, signum, text, want):
    assert signal_named(code, signum, text) == want


# -- the verdict: a job stopped from outside ---------------------------------------------------

def _diagnose(tmp_path, text: str) -> dict:
    from typer.testing import CliRunner

    from forensics.cli import app

    (tmp_path / "slurm-7.out").write_text(text)
    res = CliRunner().invoke(app, ["diagnose", str(tmp_path), "--format", "json"])
    return json.loads(res.stdout)


def _srun_run(stuck: int | None, stop: str, ranks: int = 4, steps: int = 12) -> str:
    out = []
    for s in range(1, steps + 1):
        for r in range(ranks):
            if stuck is not None and r == stuck and s > steps - 2:
                continue
            out.append(f"{r}: 2024-11-20 14:{s // 60:02d}:{s % 60:02d},{r:03d} - INFO - step={s * 10} loss={2.0 - s / 100:.3f}")
    return "\n".join(out + [stop]) + "\n"


_TIME_LIMIT = "slurmstepd: error: *** JOB 7 ON gpu-a CANCELLED AT 2024-11-20T15:30:00 DUE TO TIME LIMIT ***"


def test_a_time_limit_on_a_stuck_rank_is_a_hang_on_that_rank(tmp_path):
    rc = _diagnose(tmp_path, _srun_run(2, _TIME_LIMIT))["root_cause"]
    assert rc["kind"] == "hang" and rc["ranks"] == [2] and rc["basis"] == "last_to_log"


def test_a_time_limit_on_ranks_at_one_step_is_no_hang(tmp_path):
    rc = _diagnose(tmp_path, _srun_run(None, _TIME_LIMIT))["root_cause"]
    assert rc["kind"] == "job_cancelled" and rc["ranks"] == []


def test_a_signal_to_the_launcher_on_a_stuck_rank_is_a_hang(tmp_path):
    stop = ("Traceback (most recent call last):\n  File \"/usr/local/bin/torchrun\", line 8, in <module>\n"
            "torch.distributed.elastic.multiprocessing.api.SignalException: Process 4242 got signal: 15")
    rc = _diagnose(tmp_path, _srun_run(1, stop))["root_cause"]
    assert rc["kind"] == "hang" and rc["ranks"] == [1]


def test_a_log_that_just_ends_is_not_called_a_stopped_hang(tmp_path):
    fs = _diagnose(tmp_path, _srun_run(1, "0: done"))["findings"]
    assert not any(f["kind"] == "hang" and "stopped from outside" in f.get("title", "") for f in fs)
    assert not any("until the scheduler" in f.get("title", "") or "launcher received a signal" in f.get("title", "") for f in fs)


def test_a_collectors_rfc3339_time_on_every_line_is_read_and_taken_off():
    ev = _events("2024-11-20T14:37:16.123456789Z [rank2]:Traceback (most recent call last):",
                 '2024-11-20T14:37:16.123456789Z [rank2]:  File "train.py", line 9, in <module>',
                 "2024-11-20T14:37:16.223456789Z [rank2]:KeyError: 'input_ids'",
                 "2024-11-20T14:37:17.000000000Z Traceback (most recent call last):",
                 '2024-11-20T14:37:17.000000000Z   File "/usr/local/bin/torchrun", line 8, in <module>',
                 "2024-11-20T14:37:17.000000000Z torch.distributed.elastic.multiprocessing.api.SignalException: Process 9 got signal: 15")
    head, agent = ev.row(0, named=True), ev.row(3, named=True)
    assert head["rank"] == 2 and head["message"] == "KeyError: 'input_ids'"
    assert agent["event"] == "TRACEBACK" and agent["message"].startswith("torch.distributed.elastic")
    assert str(agent["timestamp"]).startswith("2024-11-20 14:37:17")


def test_a_program_that_timestamps_some_lines_keeps_them_whole():
    ev = _events("2024-11-20T14:37:16Z starting", "loading data", "model ready", "2024-11-20T14:37:20Z step 1 loss 2.0")
    assert ev.row(0, named=True)["message"] == "2024-11-20T14:37:16Z starting"


def test_a_scripts_own_rank_tag_at_line_start():
    row = _events("rank 3: step=40 loss=nan").row(0, named=True)
    assert (row["rank"], row["step"]) == (3, 40)
    assert _events("ranking 3: done").row(0, named=True)["rank"] is None


def test_torchrun_log_dir_files_give_the_local_rank(tmp_path):
    d = tmp_path / "logs" / "123_ab" / "attempt_0" / "3"
    d.mkdir(parents=True)
    p = d / "stderr.log"
    p.write_text("step 5 loss 2.0\n")
    with open(p, "rb") as s:
        ev = pl.concat([b.events for b in read_console(str(p), s, ReaderContext(str(p), None, None))])
    row = ev.row(0, named=True)
    assert (row["local_rank"], row["rank"]) == (3, None)      # the folder is the LOCAL rank


def test_srun_teardown_after_a_task_failed_is_not_a_cancel(tmp_path):
    text = _srun_run(None, "\n".join([
        "srun: error: gpu-a: task 2: Exited with exit code 1",
        "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
        "slurmstepd: error: *** STEP 7.0 ON gpu-a CANCELLED AT 2024-11-20T15:30:00 ***",
        "srun: error: gpu-a: tasks 0-1,3: Killed"]))
    rep = _diagnose(tmp_path, text)
    assert rep["root_cause"]["kind"] == "crash" and rep["root_cause"]["ranks"] == [2]
    assert not any(f["kind"] in ("job_cancelled", "host_oom") for f in rep["findings"])


def test_a_scheduler_cancel_before_the_kills_stays_a_cancel(tmp_path):
    text = _srun_run(None, "\n".join([
        "slurmstepd: error: *** STEP 7.0 ON gpu-a CANCELLED AT 2024-11-20T15:30:00 ***",
        "srun: error: gpu-a: tasks 0-3: Terminated"]))
    assert _diagnose(tmp_path, text)["root_cause"]["kind"] == "job_cancelled"


def test_a_stopped_hang_judged_by_hf_epochs(tmp_path):
    lines = []
    for i in range(1, 11):
        for r in range(4):
            if r == 1 and i > 8:
                continue
            lines.append(f"{r}: {{'loss': {2 - i / 20:.3f}, 'learning_rate': 0.0003, 'epoch': {i / 10:.2f}}}")
    rc = _diagnose(tmp_path, "\n".join(lines + [_TIME_LIMIT]) + "\n")["root_cause"]
    assert rc["kind"] == "hang" and rc["ranks"] == [1]


def test_a_rank_tag_at_the_start_of_the_text_names_the_lines_rank():
    ev = _events("(rank 3/8) step=40 loss=2.1", "RANK=2 step=5 loss=1.0", "(ranking 3/8) step=1",
                 "rank=2 step=5 loss=1.0", "[rank1]: (rank 5/8) step=2", "(Rank 6/8): step=3")
    got = [(r["rank"], str(r["rank_source"])) for r in ev.iter_rows(named=True)]
    assert got == [(3, "text"), (2, "text"), (None, "none"), (None, "none"), (1, "prefix"), (6, "text")]
    assert ev.row(0, named=True)["message"] == "(rank 3/8) step=40 loss=2.1"     # the text is kept whole


def test_an_error_whose_rank_is_tagged_in_its_text_says_so(tmp_path):
    lines = [f"(rank {r}/4) step={s} loss={2.0 - s * 0.1:.2f}" for s in range(1, 9) for r in range(4)]
    lines.append("(rank 2/4) RuntimeError: CUDA error: an illegal memory access was encountered")
    rc = _diagnose(tmp_path, "\n".join(lines) + "\n")["root_cause"]
    assert (rc["kind"], rc["ranks"], rc["basis"]) == ("gpu_error", [2], "named_in_text")


def _srun_gpu_error(tasks: int, named: int) -> str:
    out = [f"{t}: step {s} loss {2.0 - s * 0.1:.2f}" for s in range(1, 7) for t in range(tasks)]
    out.append(f"1: ERROR Rank {named}: RuntimeError: CUDA error: an illegal memory access was encountered")
    return "\n".join(out) + "\n"


def test_a_rank_named_in_the_text_beyond_the_srun_tasks_is_the_errors_rank(tmp_path):
    # two srun tasks whose text names rank 7: the task ids are not the ranks
    rc = _diagnose(tmp_path, _srun_gpu_error(2, 7))["root_cause"]
    assert (rc["ranks"], rc["basis"]) == ([7], "named_in_text")


def test_a_rank_named_in_the_text_within_the_srun_tasks_leaves_the_task(tmp_path):
    # eight tasks: the task id may be the rank (SLURM_PROCID), the text does not override it
    rc = _diagnose(tmp_path, _srun_gpu_error(8, 5))["root_cause"]
    assert rc["ranks"] == [1] and rc["basis"] != "named_in_text"


@pytest.mark.parametrize("rank,local,host", [(3, 3, "node-a7"), (6, 2, "gpu-host-12.lab")])
def test_hf_tee_labels_hide_nothing_of_the_launchers_failure_table(tmp_path, rank, local, host):
    # accelerate's test runner echoes the child's stderr as "stderr: <line>" (tee: print(label, line))
    table = ["torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
             "============================================================",
             "train_lm.py FAILED",
             "------------------------------------------------------------",
             "Failures:",
             "  <NO_OTHER_FAILURES>",
             "------------------------------------------------------------",
             "Root Cause (first observed failure):",
             "[0]:",
             "  time      : 2024-02-11_09:14:52",
             f"  host      : {host}",
             f"  rank      : {rank} (local_rank: {local})",
             "  exitcode  : 1 (pid: 40417)",
             "  error_file: <N/A>",
             "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
             "============================================================"]
    text = "stdout: step 10 loss 3.2\n" + "".join(f"stderr: {ln}\n" for ln in table)
    rc = _diagnose(tmp_path, text)["root_cause"]
    assert rc["kind"] == "crash" and rc["ranks"] == [rank]
    ev = _events(*(f"stderr: {ln}" for ln in table)).filter(pl.col("event") == "CHILD_FAILED").row(0, named=True)
    assert (ev["rank"], ev["local_rank"], ev["host"]) == (rank, local, host)
