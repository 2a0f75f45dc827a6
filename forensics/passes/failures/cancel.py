"""The scheduler ended the job (scancel, time limit, node failure, preemption): the
`job_cancelled` finding, and the workers killed after it as its cascade.
"""
from __future__ import annotations

from typing import Any

from ...report.model import Finding
from ..evidence import cite, iso, pass_id
from .rows import _ev_row, _extra, _key, _processes


def _tasks(spec: str | None) -> set[int]:
    """Slurm task list "0-3,7" -> {0, 1, 2, 3, 7}."""
    out: set[int] = set()
    for part in (spec or "").split(","):
        a, _, b = part.partition("-")
        if a.strip().isdigit():
            out.update(range(int(a), int(b) + 1) if b.strip().isdigit() else [int(a)])
    return out


CANCEL_REASONS = {"TIME LIMIT": "its time limit", "NODE FAILURE": "a node failure", "PREEMPTION": "preemption"}


# A node failure is a fault; a cancellation, a time limit, a preemption end a run that may have
# been fine (WARN: the run did not finish, a person decides whether that is a problem).
CANCEL_ERRORS = {"NODE FAILURE"}


def _cancel_finding(cancels: list[dict[str, Any]], rows: list[dict[str, Any]], alone: bool = False) -> Finding:
    """The scheduler ended the job (scancel, time limit, node failure, preemption). Every worker
    it killed afterwards (srun "Killed"/"Terminated", the launcher's exits) is its cascade.
    `alone`: no failure of the job's own was found; then a kill line without a time of its own is
    the cancel's cascade wherever it sits (torch.distributed.launch's sigkill_handler prints
    "Killing subprocess PID" per worker, then "Main process received SIGTERM, exiting": those
    lines, untimed, are often printed before the slurmstepd line), and a process that received
    the signal without a pid is the launcher itself, not a worker."""
    first = cancels[0]
    xs = [_extra(c) for c in cancels]
    # Slurm prints the step's line ("STEP 12.0") and the job's ("JOB 12"); the job id is before the dot
    job = next((x.get("job") for x in xs if x.get("kind") == "job"), None) or (str(xs[0].get("job") or "").split(".")[0] or None)
    reason = next(((x.get("reason") or "").strip() for x in xs if (x.get("reason") or "").strip()), None)
    why = CANCEL_REASONS.get((reason or "").upper(), reason.lower() if reason else "a cancellation (scancel)")
    after = [r for r in rows if r["kind"] in ("kill", "exit")
             and (_key(r) >= _key(first) or r["by"] == "slurm" or (alone and not r["exact"]))]
    tasks: set[int] = set()
    for r in after:
        if r["by"] == "slurm":
            tasks |= _tasks(_extra(r).get("tasks"))
    signalled = [r for r in after if alone and r["kind"] == "kill" and r["by"] is None and r["pid"] is None]
    others = _processes([r for r in after if r["by"] != "slurm" and not any(r is x for x in signalled)])
    n = len(tasks) + len(others)
    host = f" on {first['host']}" if first.get("host") else ""
    title = (f"the scheduler ended job {job or '?'}{host} by {why}"
             + (f"; the {n} worker process{'es' if n != 1 else ''} killed after it" if n else "")
             + (f"{' and' if n else ';'} the {len(signalled)} launcher process{'es' if len(signalled) != 1 else ''} "
                "that received its signal" if signalled else "")
             + (" are its cascade, not faults of their own" if n or signalled else ""))
    return Finding(
        rule=pass_id("failures"), kind="job_cancelled", layer="resource",
        severity="ERROR" if (reason or "").upper() in CANCEL_ERRORS else "WARN", ranks=[], title=title,
        evidence={"job": job, "reason": reason, "host": first.get("host"), "cancellations": len(cancels),
                  "cascade": {"killed_processes": n, "slurm_tasks": len(tasks), "launchers_signalled": len(signalled)}
                  if n or signalled else None},
        lines=cite([_ev_row(first)] + [_ev_row(r) for r in after[:2]], text="text"),
        first_seen=iso(first["t_show"]), last_seen=iso(max((r["t_show"] for r in [*cancels, *after] if r["t_show"]),
                                                           default=first["t_show"])),
    )
