"""How processes ended: torch elastic's ChildFailedError table, signals, the launcher's kills,
the kernel's OOM killer, srun's and Slurm's reports, DeepSpeed's exit codes, cancellations.
"""
from __future__ import annotations

import re
import signal as _signal

from .marks import EXIT_CODE, EXITS, PROCESS_NAME, STRSIGNAL, signal_named
from .row import _Row, _int, _small_int
from .timestamps import _ISO


_SIGNAL_RECEIVED = re.compile(r"Signal (\d+) \((SIG\w+)\) received by PID (\d+)")


_KILLING = re.compile(r"Killing subprocess (\d+)")


_KERNEL_OOM = re.compile(r"(?:Out of memory|Memory cgroup out of memory): Killed process (\d+) \(([^)]*)\)|oom-kill:|oom_reaper")


_BASH_KILLED = re.compile(r"\b(\d+) Killed\b")


_RECEIVED_SIG = re.compile(r"received (SIG[A-Z]+)")


# slurm src/srun/launch.c (_task_finish): "%s: %s %s: Exited with exit code %d", ": Out Of Memory",
# or the signal's strsignal(3) text with " (core dumped)" (marks.STRSIGNAL)
_SRUN = re.compile(r"srun: error: ([\w.\-]+): tasks? ([\d\-,]+): (Out Of Memory|Exited with exit code (\d+)|"
                   + "|".join(re.escape(t) for t in STRSIGNAL) + r")( \(core dumped\))?")


_SLURM_OOM = re.compile(r"Detected (\d+) oom[-_]kill events?(?:\(s\))?(?: in (?:StepId=)?(\S+?))?[.\s]")


# slurm's memory enforcement (jobacct_gather, src/plugins/jobacct_gather/common/common_jag.c
# _acct_kill_step: error("%ps exceeded memory limit (%"PRIu64" > %"PRIu64"), being killed"), "%ps"
# being "StepId=12.0" / "JobId=12" (older releases: "Job %u", "Step %u.%u"); then slurmd's job
# notification "Exceeded job memory limit" (src/slurmd/slurmd/slurmd.c) and the SIGKILL. Not the
# cgroup plugin's "Exceeded step memory limit at some point." (a notice: the step may live on).
_SLURM_MEMLIMIT = re.compile(r"(?:JobId=|StepId=|Job |Step )(\S+?) exceeded (virtual )?memory limit \((\d+) > (\d+)\), being killed"
                             r"|Exceeded (job|step) memory limit\s*$")


_SLURM_NODE_FAIL = re.compile(r"srun: error: Node failure on (\S+)")


_DS_EXIT = re.compile(r"exits with return code = (-?\d+)")


_LOCAL_RANK_ARG = re.compile(r"--local[_-]rank[= ]'?(\d+)")


_ELASTIC_FAILED = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: (\d+)\)")


_CANCELLED = re.compile(r"\*\*\* (JOB|STEP) (\S+) (?:ON (\S+) )?CANCELLED AT (\S+)(?: DUE TO ([^*]+?))? \*\*\*")


_SIGKILL = re.compile(r"SIGKILL|Signal 9\b|signal 9\b")


_CLOSING = re.compile(r"Sending process (\d+) closing signal (SIG\w+)")


# torch elastic ChildFailedError table
_CF_SECTION = re.compile(r"^\s*(Failures:|Root Cause \(first observed failure\):)\s*$")


_CF_RECORD = re.compile(r"^\[(\d+)\]:\s*$")


_CF_FIELD = re.compile(r"^\s+(time|host|rank|exitcode|error_file|traceback)\s*:\s*(.*?)\s*$")


_CF_RANK = re.compile(r"(-?\d+)(?: \(local_rank: (\d+)\))?")


_CF_EXIT = re.compile(r"(-?\d+)(?: \(pid: (\d+)\))?")


_CF_RULE = re.compile(r"^={20,}\s*$")


# torch.multiprocessing.spawn (ProcessContext.join): a process that raised is reported by the
# parent as ProcessRaisedException(msg) with msg = "\n\n-- Process %d terminated with the
# following error:\n" + the child's traceback (the spawned function's first argument: its rank)
_SPAWN_RAISED = re.compile(r"(?:^|\s)-- Process (\d{1,6}) terminated with the following error:\s*$")


def _task_list(s: str) -> list[int]:
    """Slurm task ranges `0-2,5` -> [0, 1, 2, 5]."""
    out: list[int] = []
    for part in s.split(","):
        a, _, b = part.partition("-")
        if _small_int(a) and (not b or _small_int(b)):
            # capped before the range is made: `tasks 0-99999999999` was a MemoryError
            out.extend(range(int(a), min(int(b or a), int(a) + 100_000 - len(out)) + 1))
            if len(out) >= 100_000:
                break
    return out[:100_000]


def _signal_name(n: int) -> str | None:
    try:
        return _signal.Signals(n).name
    except ValueError:
        return None


class _Exits:
    """The parser's reading of process ends: the ChildFailedError table, kills, exits, cancellations."""

    def _cf_open(self) -> bool:
        return self.cf_section is not None or any(p[0] is not None for p in self.parked.values())

    # -- torch elastic ChildFailedError table ---------------------------------------------------
    def _child_failed(self, body: str, r: _Row) -> bool:
        """Track the table; emit CHILD_FAILED on each record's exitcode line. True if handled."""
        if "ChildFailedError" in body:
            self.cf_section, self.cf = "table", {}
            return False
        if self.cf_section is None and "Failures:" not in body and "Root Cause" not in body:
            return False
        m = _CF_SECTION.match(body)
        if m:
            self.cf_section = "root" if m.group(1).startswith("Root") else "failures"
            self.cf = {}
            return False
        if self.cf_section is None:
            return False
        if _CF_RULE.match(body):
            if self.cf_section == "root" and self.cf.get("emitted") is not None:
                self.cf_section, self.cf = None, {}
            return False
        if _CF_RECORD.match(body):
            self.cf = {}
            return False
        m = _CF_FIELD.match(body)
        if not m:
            return False
        name, value = m.group(1), m.group(2)
        if name == "time":
            self.cf["time"] = value
            tm = _ISO.search(value)
            if tm:
                r.ts = f"{tm.group(1)}-{tm.group(2)}-{tm.group(3)}T{tm.group(4)}:{tm.group(5)}:{tm.group(6)}"
                self.cf["ts"] = r.ts
        elif name == "host":
            self.cf["host"] = value
        elif name == "rank":
            rm = _CF_RANK.match(value)
            if rm:
                self.cf["rank"] = int(rm.group(1))
                self.cf["local_rank"] = _int(rm.group(2))
        elif name == "exitcode":
            em = _CF_EXIT.match(value)
            code = int(em.group(1)) if em else None
            r.event = "CHILD_FAILED"
            r.level = "ERROR"
            rank = self.cf.get("rank")
            if rank is not None and rank >= 0:
                r.rank, r.rank_source = rank, "record"
            r.local_rank = self.cf.get("local_rank", r.local_rank)
            r.host = self.cf.get("host") or r.host
            r.ts = self.cf.get("ts", r.ts)
            r.put(exit_code=code)
            if rank is not None and rank >= 0 and r.local_rank is not None:
                # the agent reports its own node's workers: this node's local rank -> rank
                self._learn(self.node_key, r.local_rank, rank, "torch elastic's ChildFailedError record (rank, local_rank)")
            sig = _signal_name(-code) if code is not None and code < 0 else None
            r.x(pid=_int(em.group(2)) if em else None, signal=sig, first_observed=self.cf_section == "root")
            self.cf["emitted"] = r
            return True
        elif name in ("error_file", "traceback"):
            rec = self.cf.get("emitted")
            if isinstance(rec, _Row) and value and value != "<N/A>" and not value.startswith("To enable traceback"):
                rec.x(**{name: value})
            rank = self.cf.get("rank")
            if name == "traceback" and rank is not None and rank >= 0 and r.rank is None:
                r.rank, r.rank_source = rank, "record"
            return False
        return False

    def _exit_report(self, body: str, r: _Row) -> bool:
        """A launcher's report of a worker's end (marks.EXITS, and the two-line "Process name: /
        Exit code:" record of mpirun and horovodrun): CHILD_FAILED, with the rank where the
        launcher names the worker, the exit code, and the signal (-N, 128+N, strsignal text)."""
        if "Process name:" in body:
            m = PROCESS_NAME.search(body)
            if m:
                self.proc_name = (int(m.group(1) or m.group(2)), r.line)
            return False
        if "Exit code:" in body and self.proc_name is not None:
            m = EXIT_CODE.search(body)
            rank, at = self.proc_name
            if m and r.line - at <= 3:
                self.proc_name = None
                code = int(m.group(1))
                r.event, r.level = "CHILD_FAILED", "ERROR"
                if r.rank is None:
                    r.rank, r.rank_source = rank, "record"
                r.put(exit_code=code)
                r.x(signal=signal_named(code), by="launcher", first_observed=True, process_line=at)
                return True
            return False
        for rep in EXITS:
            if rep.trigger not in body:
                continue
            m = rep.pattern.search(body)
            if not m:
                continue
            g = m.groupdict()
            signum = _int(g.get("signum"))
            if signum is None and g.get("signame") in _signal.Signals.__members__:
                signum = _signal.Signals[g["signame"]].value
            code = _int(g.get("code"))
            sig = g.get("signame") or signal_named(code, signum, g.get("strsignal"))
            r.event, r.level = "CHILD_FAILED", "ERROR"
            if g.get("rank") is not None and r.rank is None:
                r.rank, r.rank_source = int(g["rank"]), "record"
            if g.get("host"):
                r.host = g["host"]
            # a death by signal N is exit code -N, as torch elastic and Python's subprocess write it
            r.put(exit_code=code if code is not None else (-signum if signum is not None else None))
            r.x(signal=sig, pid=_int(g.get("pid")), by=rep.by, report=rep.name)
            return True
        return False

    def _spawn_raised_line(self, body: str, r: _Row) -> bool:
        """mp.spawn's "-- Process N terminated with the following error:": the traceback right
        after it is rank N's (see _spawn_rank)."""
        m = _SPAWN_RAISED.search(body)
        if not m:
            return False
        self.spawn_raised = (int(m.group(1)), r.line)
        r.x(spawn_process=int(m.group(1)))
        return True

    def _spawn_rank(self, head: _Row) -> int | None:
        """The rank mp.spawn named for the traceback starting at `head` (the line after its
        "-- Process N terminated" line), set on the head; None otherwise."""
        if self.spawn_raised is None:
            return None
        n, at = self.spawn_raised
        self.spawn_raised = None
        if head.rank is not None or head.line - at > 2:
            return None
        head.rank, head.rank_source = n, "record"
        head.x(spawn_process=n)     # the index: the rank on one node only (failure_facts.spawn_node)
        return n

    def _killed(self, body: str, r: _Row) -> bool:
        if ("Exit code:" in body or "Process name:" in body or "noticed that" in body or "CalledProcessError" in body
                or "terminated with" in body or "exit with status code" in body) and self._exit_report(body, r):
            return True
        if "terminated with the following error" in body and self._spawn_raised_line(body, r):
            return True
        m = _CANCELLED.search(body) if "CANCELLED" in body else None
        if m and m.group(1) == "STEP" and not m.group(5) and self.task_failed:
            # srun (--kill-on-bad-exit, the default for a task's failure) ends the step itself once
            # a task failed: slurmstepd prints the step's CANCELLED line for srun's own teardown,
            # not for the scheduler's: the other tasks are killed as that failure's cascade
            r.event, r.level = "PROCESS_KILLED", "WARN"
            r.host = m.group(3) or r.host
            r.x(signal="SIGTERM", by="slurm", kind="step", job=m.group(2), after_task_failure=self.task_failed)
            return True
        if m:
            r.event, r.level = "JOB_CANCELLED", "ERROR"
            r.host = m.group(3) or r.host
            ts = _ISO.search(m.group(4))
            if ts:
                r.ts = f"{ts.group(1)}-{ts.group(2)}-{ts.group(3)}T{ts.group(4)}:{ts.group(5)}:{ts.group(6)}"
            r.x(kind=m.group(1).lower(), job=m.group(2), reason=m.group(5))
            return True
        m = _SRUN.search(body) if "srun: error" in body else None
        if m:
            r.host = m.group(1)
            tasks = m.group(2)
            if self.task_failed and self.task_failed < r.line:
                r.x(after_task_failure=self.task_failed)     # srun's teardown of the step's other tasks
            if m.group(4) != "0":
                # a task ended before any cancel line: srun's teardown follows (a scheduler's
                # cancel prints its CANCELLED line first, the tasks' kills after it)
                self.task_failed = self.task_failed or r.line
            if m.group(4) is not None:
                r.event, r.level = "CHILD_FAILED", "ERROR"
                r.put(exit_code=int(m.group(4)))
                r.x(by="slurm")
            elif m.group(3) == "Out Of Memory":
                # slurmstepd saw the cgroup's OOM killer end these tasks: host memory
                r.event, r.level = "PROCESS_KILLED", "ERROR"
                r.x(signal="SIGKILL", by="oom_killer", reported_by="slurm")
            elif m.group(3) in ("Killed", "Terminated"):
                r.event, r.level = "PROCESS_KILLED", "ERROR"
                r.x(signal="SIGKILL" if m.group(3) == "Killed" else "SIGTERM", by="slurm")
            else:
                # a task that died of its own signal (SIGSEGV, SIGABRT, SIGBUS, ...): its exit
                sig = STRSIGNAL[m.group(3)]
                r.event, r.level = "CHILD_FAILED", "ERROR"
                r.put(exit_code=-int(_signal.Signals[sig]))
                r.x(signal=sig, by="slurm", core_dumped=True if m.group(5) else None)
            r.x(tasks=tasks, task_list=_task_list(tasks))
            if self.srun and not self.srun_nodes and r.rank is None and _small_int(tasks):
                # the file's --label task ids are the ranks (srun started them): this task is that rank
                r.rank, r.rank_source = int(tasks), "record"
            return True
        m = _SLURM_OOM.search(body) if "oom" in body else None
        if m:
            r.event, r.level = "PROCESS_KILLED", "ERROR"
            r.x(signal="SIGKILL", by="oom_killer", reported_by="slurm", oom_kill_events=int(m.group(1)),
                slurm_step=m.group(2))
            return True
        m = _SLURM_MEMLIMIT.search(body) if "emory limit" in body else None
        if m:
            # the job's host memory went over its limit: slurm kills the step (host RAM, as the OOM killer)
            r.event, r.level = "PROCESS_KILLED", "ERROR"
            r.x(signal="SIGKILL", by="oom_killer", reported_by="slurm", how="slurm memory limit",
                slurm_step=m.group(1), virtual=True if m.group(2) else None,
                mem_used=_int(m.group(3)), mem_limit=_int(m.group(4)))
            return True
        m = _SLURM_NODE_FAIL.search(body) if "Node failure" in body else None
        if m:
            r.event, r.level = "JOB_CANCELLED", "ERROR"
            r.host = m.group(1)
            r.x(kind="step", reason="NODE FAILURE", by="slurm")
            return True
        m = _ELASTIC_FAILED.search(body) if "exitcode" in body else None
        if m:
            code = int(m.group(1))
            r.event, r.level = "CHILD_FAILED", "ERROR"
            r.local_rank = int(m.group(2))
            if r.rank is None:
                self._map_local(r)     # the agent names a local rank; its rendezvous said whose
            r.put(exit_code=code)
            r.x(pid=int(m.group(3)), signal=_signal_name(-code) if code < 0 else None)
            return True
        m = _DS_EXIT.search(body) if "return code" in body else None
        if m:
            code = int(m.group(1))
            r.event, r.level = "CHILD_FAILED", "ERROR"
            # DeepSpeed's launcher prints `cmd` of the LAST process it spawned, not of the one that
            # failed (sigkill_handler reuses the spawn loop's variable): the --local_rank in this
            # line names nobody, so it is kept as evidence only.
            lm = _LOCAL_RANK_ARG.search(body)
            r.put(exit_code=code)
            r.x(signal=_signal_name(-code) if code < 0 else None, by="deepspeed launcher",
                cmd_local_rank=int(lm.group(1)) if lm else None)
            return True
        m = _SIGNAL_RECEIVED.search(body) if "received by PID" in body else None
        if m:
            r.event, r.level = "PROCESS_KILLED", "ERROR"
            r.x(signal=m.group(2), pid=int(m.group(3)))
            return True
        m = _CLOSING.search(body) if "closing signal" in body else None
        if m:
            r.event = "PROCESS_KILLED"
            r.raise_level("WARN")
            r.x(pid=int(m.group(1)), signal=m.group(2), by="launcher")
            return True
        m = _KILLING.search(body) if "Killing" in body else None
        if m:
            r.event = "PROCESS_KILLED"
            r.raise_level("WARN")
            r.x(pid=int(m.group(1)), signal="SIGKILL", by="launcher")
            return True
        m = _KERNEL_OOM.search(body) if "ill" in body or "oom" in body else None
        if m:
            r.event, r.level = "PROCESS_KILLED", "ERROR"
            r.x(pid=_int(m.group(1)), process=m.group(2), signal="SIGKILL", by="oom_killer")
            return True
        m = _RECEIVED_SIG.search(body) if "received SIG" in body else None
        if m:
            r.event = "PROCESS_KILLED"
            r.raise_level("WARN")
            r.x(signal=m.group(1))
            return True
        m = _BASH_KILLED.search(body) if " Killed" in body else None
        if m or (("SIG" in body or "ignal 9" in body) and _SIGKILL.search(body)):
            r.event, r.level = "PROCESS_KILLED", "ERROR"
            r.x(pid=int(m.group(1)) if m else None, signal="SIGKILL")
            return True
        return False
