"""A job stopped from outside (a SIGTERM to torchrun) while every rank still trained: the job's
end, not a hang of the rank that happened to be a step behind when the signal came. Lines
written here in the formats of torch 2.x's elastic agent (agent/server/api.py "Received %s death
signal, shutting down workers", multiprocessing/api.py "Sending process %s closing signal %s" and
SignalException "Process %d got signal: %d", glog-style prefixes without a year) and the seed
schema for the ranks."""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from forensics.passes import diagnose

T0 = dt.datetime(2026, 3, 9, 14, 2, 0, tzinfo=dt.timezone.utc)
STEP_S = 0.16


def _run(tmp: Path, last: dict[int, int], stop_after_s: float, world: int = 4) -> Path:
    """`world` ranks; rank r logs steps 0..last[r] (default 60), one step every STEP_S; the
    launcher is SIGTERMed `stop_after_s` after the last step any rank logged."""
    end = 0.0
    for r in range(world):
        lines = []
        for s in range(last.get(r, 60) + 1):
            t = T0 + dt.timedelta(seconds=1 + s * STEP_S + r * 0.001)
            end = max(end, (t - T0).total_seconds())
            lines.append(json.dumps({"timestamp": t.isoformat().replace("+00:00", "Z"), "rank": r, "level": "INFO",
                                     "event": "TRAIN_STEP", "message": f"step {s}",
                                     "extra": {"step": s, "loss": 2.0 - s * 0.01, "step_time_ms": STEP_S * 1000}}))
        (tmp / f"rank_{r}.jsonl").write_text("\n".join(lines) + "\n")
    t = T0 + dt.timedelta(seconds=end + stop_after_s)
    g = t.strftime("%m%d %H:%M:%S.%f")
    con = [f"W{g} 4242 torch/distributed/elastic/agent/server/api.py:753] Received 15 death signal, shutting down workers"]
    con += [f"W{g} 4242 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process {4300 + r} closing signal SIGTERM"
            for r in range(world)]
    con += ["Traceback (most recent call last):",
            '  File "/usr/lib/python3/site-packages/torch/distributed/elastic/agent/server/api.py", line 923, in _invoke_run',
            "    time.sleep(monitor_interval)",
            '  File "/usr/lib/python3/site-packages/torch/distributed/elastic/multiprocessing/api.py", line 86, in _terminate_process_handler',
            '    raise SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)',
            "torch.distributed.elastic.multiprocessing.api.SignalException: Process 4242 got signal: 15"]
    (tmp / "console.log").write_text("\n".join(con) + "\n")
    return tmp


def test_a_sigterm_while_every_rank_trains_ends_the_job_and_names_no_rank(tmp_path: Path) -> None:
    # rank 3 logged step 59 when the others logged 60: the signal came 0.1 s later
    rep = diagnose([str(_run(tmp_path, {3: 59}, 0.1))])
    rc = rep.root_cause
    assert rc is not None and rc.kind == "job_cancelled" and rc.ranks == []
    assert "SIGTERM" in rc.summary
    assert not any(f.kind == "hang" for f in rep.findings)


def test_a_rank_stuck_long_before_the_signal_is_still_the_hang(tmp_path: Path) -> None:
    # rank 3 stopped at step 40; the others reached 41 and waited 60 s until the SIGTERM
    rep = diagnose([str(_run(tmp_path, {0: 41, 1: 41, 2: 41, 3: 40}, 60.0))])
    rc = rep.root_cause
    assert rc is not None and rc.kind == "hang" and rc.ranks == [3]


def test_a_glog_line_in_a_file_without_a_year_is_timed_from_the_run(tmp_path: Path) -> None:
    from forensics.passes.context import Context
    from forensics.passes.failures import _candidates, _placed
    from forensics.passes.failures.classify import _classify
    from forensics.run import open_run

    ctx = Context.from_run(open_run(str(_run(tmp_path, {}, 2.0))))
    rows = _placed(ctx, _classify(_candidates(ctx).collect()))
    kills = rows.filter(rows["kind"] == "kill")
    assert kills.height == 4 and kills["exact"].all()
    assert kills["t_show"].min().year == 2026 and kills["t_show"].min() > T0


def test_a_stop_whose_clock_disagrees_with_the_ranks_judges_nothing_by_it(tmp_path: Path) -> None:
    # the launcher's glog time 5 h before the ranks' own (a console in local time): its time is
    # no evidence that nobody waited; the rank that stopped first stays the hang
    rep = diagnose([str(_run(tmp_path, {0: 41, 1: 41, 2: 41, 3: 40}, -5 * 3600.0))])
    rc = rep.root_cause
    assert rc is not None and rc.kind == "hang" and rc.ranks == [3]


def _ahead(tmp: Path, rank: int | list[int], stop_after_s: float, world: int = 6, step: int | None = 41) -> Path:
    """Every rank logs steps 0..40; `rank` then logs a line of its own at step 41 ("waiting for
    all ranks before saving a checkpoint") and nothing more; the SIGTERM comes `stop_after_s`
    after the last step."""
    _run(tmp, {r: 40 for r in range(world)}, stop_after_s, world)
    t = T0 + dt.timedelta(seconds=1 + 40 * STEP_S + 0.05)
    for k in rank if isinstance(rank, list) else [rank]:
        with open(tmp / f"rank_{k}.jsonl", "a") as f:
            f.write(json.dumps({"timestamp": t.isoformat().replace("+00:00", "Z"), "rank": k, "level": "INFO",
                                "event": "CHECKPOINT", "message": "waiting for all ranks before saving a checkpoint",
                                "extra": {} if step is None else {"step": step}}) + "\n")
    return tmp


def test_a_rank_that_logged_a_step_nobody_else_reached_then_the_job_stalled_is_the_hang(tmp_path: Path) -> None:
    # every rank silent 20 s before the SIGTERM; rank 4 alone logged step 41
    rep = diagnose([str(_ahead(tmp_path, 4, 20.0))])
    rc = rep.root_cause
    assert rc is not None and rc.kind == "hang" and rc.ranks == [4], rc
    assert "never reached" in rc.summary


def test_a_rank_a_step_ahead_when_the_signal_came_mid_training_is_nobody(tmp_path: Path) -> None:
    # the SIGTERM 0.1 s after the last step: ranks finish a step at slightly different times
    rep = diagnose([str(_ahead(tmp_path, 4, 0.1))])
    rc = rep.root_cause
    assert rc is not None and rc.kind == "job_cancelled" and rc.ranks == []
    assert "still making progress" in rc.summary


def test_a_job_every_rank_stopped_in_long_before_the_signal_is_not_said_to_progress(tmp_path: Path) -> None:
    # nobody ahead or behind, every rank silent 30 s: the stop ended a hung job
    rep = diagnose([str(_run(tmp_path, {}, 30.0))])
    rc = rep.root_cause
    assert rc is not None and "still making progress" not in rc.summary and "hung job" in rc.summary, rc.summary


def test_a_job_stopped_while_starting_up_is_cancelled_not_an_unexplained_error(tmp_path: Path) -> None:
    # the SIGTERM came before any rank wrote a line: the rank files are empty
    _run(tmp_path, {}, 1.0)
    for f in tmp_path.glob("rank_*.jsonl"):
        f.write_text("")
    rep = diagnose([str(tmp_path)])
    rc = rep.root_cause
    assert rc is not None and rc.kind == "job_cancelled" and rc.ranks == [], rc
    assert "starting up" in rc.summary
    assert not any(f.kind == "unexplained_error" for f in rep.findings)


def test_a_rank_that_logged_a_line_of_its_own_after_its_last_step_then_the_job_stalled_is_the_hang(tmp_path: Path) -> None:
    # the line carries no step: rank 2 alone wrote something after its step line, then nothing
    rep = diagnose([str(_ahead(tmp_path, 2, 20.0, step=None))])
    rc = rep.root_cause
    assert rc is not None and rc.kind == "hang" and rc.ranks == [2], rc
    assert "waiting for all ranks" in rc.summary


def test_a_line_every_rank_logs_after_its_last_step_names_nobody(tmp_path: Path) -> None:
    rep = diagnose([str(_ahead(tmp_path, list(range(6)), 20.0, step=None))])
    rc = rep.root_cause
    assert rc is not None and rc.kind == "job_cancelled" and rc.ranks == [] and "hung job" in rc.summary
