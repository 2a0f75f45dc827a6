"""After a rank died, did the launcher start the workers again and the job train on?

Question: a finding says a process died (crash, OOM, host OOM, GPU error); did the same rank log
training progress after that death — so its process was started again — and how far did the job
get after it?

Domain facts relied on:
- torch elastic (torchrun --max-restarts N, torch/distributed/elastic/agent/server/api.py
  `_invoke_run`: "Worker group failed; %s restarts remaining" then `_restart_workers`) stops every
  worker of the group when one fails and starts them all again — new processes with the same
  ranks, writing to the same log paths — up to N times; the job resumes from its checkpoint or
  from step 0. The agent logs this at INFO, which torchrun's console does not show by default:
  the logs often hold no word of the restart.
- A process that died writes nothing more. So a rank whose own death a finding reports and that
  logs training progress (step-carrying, non-ERROR lines) after the last record of that failure
  (its death, the launcher's teardown of the others) is a new process: the job was restarted.
- The failure stays the run's root cause (the steps since the checkpoint and the restart's time
  are lost, and it may come back), but the run did not end in it: the finding says the job
  restarted, from which step, and whether every rank ran on to the end of the logs.

Must not: decide the root cause; change which rank a finding names.
"""
from __future__ import annotations

import datetime as dt

import polars as pl

from ...report.model import Finding
from ..context import Context
from ..evidence import iso, parse_iso
from .progress import _progress_rows

# Kinds of finding that report a process's own death.
DEATHS = {"crash", "oom", "host_oom", "gpu_error"}
# A line written within this long after the failure's last record may still be the dying
# process's (a flush, hosts' clocks after alignment): only later progress is a new process's.
SLACK = dt.timedelta(seconds=1)


def mark(ctx: Context, findings: list[Finding]) -> None:
    """Add to each death finding whose rank trained again after it what the restart shows
    (title and evidence `restarted`)."""
    deaths = [f for f in findings if f.kind in DEATHS and f.ranks]
    if not deaths:
        return
    # the end of every failure record: the death, the teardown of the others, their exits
    ends = [t for f in findings for t in (parse_iso(f.last_seen), parse_iso(f.first_seen)) if t is not None]
    if not ends:
        return
    t_end = max(ends) + SLACK
    after = (
        ctx.events.select("rank", "timestamp", "level", "step")
        .filter(_progress_rows() & (pl.col("timestamp") > t_end))
        .group_by("rank")
        .agg(pl.col("timestamp").min().alias("t0"), pl.col("timestamp").max().alias("t1"),
             pl.col("step").min().alias("s0"), pl.col("step").max().alias("s1"))
        .collect()
    )
    if after.is_empty():
        return
    resumed = {int(r["rank"]): r for r in after.iter_rows(named=True)}
    everyone = set(ctx.ranks) <= set(resumed)
    for f in deaths:
        mine = [resumed[r] for r in f.ranks if r in resumed]
        if not mine:
            continue
        t0 = min(r["t0"] for r in resumed.values())
        t1 = max(r["t1"] for r in resumed.values())
        s0 = min(r["s0"] for r in mine)
        s1 = max(r["s1"] for r in mine)
        who = "every rank" if everyone else f"{len(resumed)} of {len(ctx.ranks)} ranks"
        f.title += (f"; the job restarted after it: {who} trained again from {t0:%H:%M:%S} (rank {f.ranks[0]}: "
                    f"steps {s0}–{s1}) until {t1:%H:%M:%S}")
        f.evidence["restarted"] = {"from": iso(t0), "until": iso(t1), "ranks": len(resumed),
                                   "every_rank": everyone, "steps": [s0, s1]}
