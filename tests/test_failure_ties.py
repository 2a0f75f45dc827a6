"""Ranks' deaths that compete to be the first failure (passes/failures, rows.death_key; the root
cause's order, passes/rootcause._key): a rank's own death before a teardown (a launcher's or a
watchdog's kill after another process failed), then the earliest, then the lowest rank — never the
order of file names ("rank10.log" sorts before "rank2.log").

Lines are ours: a plain Python logging format per rank file, torch elastic's agent line
(torch/distributed/elastic/agent/server/api.py: "failed (exitcode: C) local_rank: N (pid: P) of
binary: ...") in the launcher's glog format.
"""
from __future__ import annotations

from pathlib import Path

from forensics.ingest import ingest
from forensics.passes import diagnose
from forensics.report.model import Report
from forensics.store import open_store

from test_failures_console import diagnosed, progress


def per_rank_run(tmp_path: Path, failing: list[int], world: int = 12) -> Report:
    """Every rank logs five steps; `failing` ranks log an error and a traceback at the same second."""
    logs = tmp_path / "logs"
    logs.mkdir()
    for r in range(world):
        lines = [f"2024-12-18 10:00:{s:02d},000 INFO rank={r} step {s} loss 2.3" for s in range(1, 6)]
        if r in failing:
            lines += [f"2024-12-18 10:00:06,000 ERROR rank={r} worker failed", "Traceback (most recent call last):",
                      '  File "/srv/job/main.py", line 9, in <module>', "    step()", "ValueError: bad batch"]
        else:
            lines.append(f"2024-12-18 10:00:06,500 INFO rank={r} step 6 loss 2.3")
        (logs / f"rank{r}.log").write_text("\n".join(lines) + "\n")
    ingest([str(logs)], tmp_path / "run.forensics")
    return diagnose(open_store(tmp_path / "run.forensics"))


def test_deaths_at_one_time_lead_with_the_lowest_rank_not_the_first_file_name(tmp_path: Path) -> None:
    rep = per_rank_run(tmp_path, [2, 10])
    assert (rep.root_cause.kind, rep.root_cause.ranks) == ("crash", [2, 10])
    assert rep.findings[0].title.startswith("rank 2 crashed")
    assert rep.findings[0].evidence["independent"][0]["rank"] == 10


def agent_exits(*exits: tuple[str, int, int]) -> list[str]:
    """torch elastic's agent lines for (time, exit code, local rank), after four ranks' progress."""
    return progress([0, 1, 2, 3], t="10:00:00") + [
        f"E1218 {t} 140233 torch/distributed/elastic/multiprocessing/api.py:869] "
        f"failed (exitcode: {code}) local_rank: {lr} (pid: {5101 + lr}) of binary: /usr/bin/python" for t, code, lr in exits]


def test_an_own_exit_beats_a_later_sigkill_of_the_teardown(tmp_path: Path) -> None:
    # local rank 3 exits 1; 31 s later the agent's SIGKILL of local rank 0 that ignored its SIGTERM
    # (api.py _close: SIGTERM, then SIGKILL after the timeout) — no OOM-killer line, no memory message
    rep = diagnosed(tmp_path, agent_exits(("10:00:05.100000", 1, 3), ("10:00:36.300000", -9, 0)))
    assert rep.root_cause.kind == "crash"
    assert [x["local_rank"] for x in rep.findings[0].local_ranks] == [3]
    assert not any(f.kind == "host_oom" for f in rep.findings)


def test_a_sigkill_before_any_other_death_is_still_the_suspected_oom_killer(tmp_path: Path) -> None:
    rep = diagnosed(tmp_path, agent_exits(("10:00:05.100000", -9, 0), ("10:00:36.300000", 1, 3)))
    assert rep.root_cause.kind == "host_oom"
    assert [x["local_rank"] for x in rep.findings[0].local_ranks] == [0]
