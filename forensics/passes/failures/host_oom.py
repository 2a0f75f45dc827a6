"""Processes killed by SIGKILL that nobody in the logs killed on purpose (the host's OOM
killer, suspected or confirmed by the kernel's line), and their `host_oom` finding.
"""
from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import Any

from ... import failure_facts as facts
from ...report.model import Finding, local_ranks_phrase
from ..evidence import cite, iso, pass_id, ranks_phrase
from .rows import LAUNCHERS, _ev_row, _exit_key, _extra, _key, _local, _owner
from . import records


def _killed_without_traceback(rows: list[dict[str, Any]], t_timeout: dt.datetime | None = None,
                              own: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Processes that died of SIGKILL (exit code -9, "Signal 9 (SIGKILL) received", "Killed",
    the kernel's OOM-killer line) that nobody in the logs killed on purpose: not the launcher
    (it signals the pid first), not the scheduler (job cancelled first), and, where the rank is
    known, without a Python error of that rank before it. One entry per process.

    `t_timeout`: when the first collective timed out (not a lost peer: deaths.first_timeout_time).
    A SIGKILL at or after it, with no sign of memory anywhere (no OOM-killer line, no host-memory
    message: failure_messages.py's host_oom families), is the hang's teardown — torch elastic's
    SIGTERM, then SIGKILL to a worker stuck in a collective that does not exit
    (torch/distributed/elastic/multiprocessing/api.py: _close) — not the host's OOM killer: a
    process the OOM killer takes dies at once, and its peers lose it (a lost peer) rather than
    wait out a timeout. So is one after another process's own death (`own`: its OOM, crash, GPU
    error, an exit with a code of its own): the launcher stops the survivors of a failed worker
    (SIGTERM, then SIGKILL to one that does not exit in time)."""
    launcher_pids = {r["pid"]: r for r in rows if r["kind"] == "kill" and r["by"] in LAUNCHERS and r["pid"] is not None}
    launcher_any = [r for r in rows if r["kind"] == "kill" and r["by"] in LAUNCHERS]
    cancels = [r for r in rows if r["kind"] == "cancel"]
    groups: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        # a launcher's kills are its teardown; its exit record is the worker's own end (DeepSpeed's
        # "exits with return code = -9" reports the process that failed)
        if r["kind"] not in ("exit", "kill") or (r["by"] in LAUNCHERS and r["kind"] == "kill"):
            continue
        sigkill = facts.signal_of(r["exit_code"], r["signal"]) == "SIGKILL" or r["by"] == "oom_killer"
        if sigkill:
            groups[r["pid"] if r["pid"] is not None else ("line", r["source_file"], r["line"])].append(r)
    memory = any(r.get("meaning") == "host_oom" or r["by"] == "oom_killer" for r in rows)
    out = []
    for key, grp in groups.items():
        grp.sort(key=_key)
        first = grp[0]
        rank = next((int(r["rank"]) for r in grp if r["rank"] is not None), None)
        confirmed = any(r["by"] == "oom_killer" for r in grp)
        pid = first["pid"]
        if not confirmed:
            sent = launcher_pids.get(pid) if pid is not None else next((k for k in launcher_any if k["pid"] is None), None)
            if sent is not None and _key(sent) <= _key(first):
                continue            # the launcher's own teardown
            if any(_key(c) <= _key(first) for c in cancels) or (cancels and any(r["by"] == "slurm" for r in grp)):
                # the scheduler cancelled the job (srun reports the tasks it killed, often printed
                # before slurmstepd's CANCELLED line, and without a time of its own)
                continue
            if any(_extra(r).get("after_task_failure") for r in grp):
                continue            # srun killed the step's other tasks after one task failed
            if not memory and first["timestamp"] is not None and (
                    (t_timeout is not None and first["timestamp"] >= t_timeout)
                    or any(_owner(o) != _owner(first) and (pid is None or o["pid"] != pid) and o["timestamp"] is not None
                           and o["timestamp"] < first["timestamp"] for o in own or [])):
                continue            # a teardown (above)
            if rank is not None and any(r["rank"] == rank and r["kind"] in ("oom", "gpu", "traceback", "timeout")
                                        and _key(r) <= _key(first) for r in rows):
                continue            # it died of its own error (or was torn down after it)
        local = next((r["local_rank"] for r in grp if r["local_rank"] is not None), None)
        host = next((r["host"] for r in grp if r["host"] is not None), None)
        # one srun report of several tasks (`tasks 1-3: Out Of Memory`) is one row per task (rows.py)
        ranks = sorted({int(r["rank"]) for r in grp if r["rank"] is not None})
        out.append({"rank": rank, "ranks": ranks, "pid": pid, "local_rank": local, "host": host, "confirmed": confirmed,
                    "basis": next((r.get("rank_basis") for r in grp if r["rank"] is not None), None),
                    "one_node": next((r["one_node"] for r in grp if r.get("one_node")), None),
                    "exit_code": next((r["exit_code"] for r in grp if r["exit_code"] is not None), None),
                    "rows": grp, "timestamp": first["t_show"]})
    out.sort(key=lambda d: min(_exit_key(r) for r in d["rows"]))
    # a job-level report of the OOM killer (Slurm's "Detected N oom-kill event(s) in StepId=..":
    # no pid, no rank, no local rank — failure_messages.slurm_oom_kill) says which processes the
    # SIGKILLs of that job were: it confirms them, and is not another process of its own
    job = [d for d in out if d["confirmed"] and d["pid"] is None and d["rank"] is None and d["local_rank"] is None]
    named = [d for d in out if d not in job]
    if job and named:
        for d in named:
            d["confirmed"] = True
            d["rows"] = sorted(d["rows"] + [r for j in job for r in j["rows"]], key=_key)
        out = named
    return out


def _host_oom_finding(d: dict[str, Any], t_first: dt.datetime | None, victims: list[int]) -> Finding:
    who = (ranks_phrase(d["ranks"]) if len(d.get("ranks") or []) > 1 else f"rank {d['rank']}" if d["rank"] is not None
           else local_ranks_phrase(_local(d)) if d["local_rank"] is not None else "a worker process")
    on_host = f" on {d['host']}" if d["host"] and not (d["rank"] is None and d["local_rank"] is not None) else ""
    pid = f" (pid {d['pid']}{on_host})" if d["pid"] is not None else ""
    code = (f"exit code {d['exit_code']}" + (" = 128+9, a shell's" if (d["exit_code"] or 0) > 128 else "")
            if d["exit_code"] is not None else "SIGKILL")
    was = "were" if len(d.get("ranks") or []) > 1 else "was"
    limit = next((x for x in (_extra(r) for r in d["rows"]) if x.get("how") == "slurm memory limit"), None)
    if limit is not None:
        used = (f" ({limit['mem_used']} > {limit['mem_limit']})"
                if limit.get("mem_used") is not None and limit.get("mem_limit") is not None else "")
        title = (f"{who}{pid} {was} killed by Slurm for going over the job's memory limit{used} "
                 "(host RAM, not GPU memory)")
    elif d["confirmed"]:
        title = f"{who}{pid} {was} killed by the kernel's out-of-memory killer (host RAM, not GPU memory)"
    else:
        title = (f"{who}{pid} {was} killed by SIGKILL ({code}) without a Python traceback: the host's "
                 f"out-of-memory killer is suspected (check `dmesg -T | grep -i 'killed process'`"
                 + (f" on {d['host']})" if d["host"] else ")"))
    if victims:
        title += f"; {ranks_phrase(victims)} then lost it in their collectives"
    t = d["timestamp"]
    if t_first is not None and (t is None or t_first < t):
        t = t_first     # it died before the others noticed; the launcher reports it later
    return Finding(
        rule=pass_id("failures"), kind="host_oom", layer="resource", severity="ERROR",
        ranks=[] if d["rank"] is None else (d.get("ranks") or [d["rank"]]), victims=victims, title=title,
        basis=d.get("basis") or "own_error" if d["rank"] is not None or d["local_rank"] is not None else None,
        local_ranks=_local(d) if d["rank"] is None else [],
        evidence={"host_oom_killer": True, "confirmed": d["confirmed"], "signal": "SIGKILL", "exit_code": d["exit_code"],
                  "pid": d["pid"], "local_rank": d["local_rank"], "host": d["host"], "python_traceback": False,
                  "victims": victims,
                  "srun_tasks": d.get("ranks") if any(r.get("srun_task") for r in d["rows"]) else None,
                  **({"one_node": d["one_node"]} if d.get("one_node") else {}),
                  # how its rank is known where a record says (mp.spawn's index on one node of several)
                  **records.evidence(next((r for r in d["rows"] if r.get("record")), {}))},
        lines=cite([_ev_row(r) for r in d["rows"]], text="text"),
        first_seen=iso(t), last_seen=iso(d["timestamp"]),
    )
