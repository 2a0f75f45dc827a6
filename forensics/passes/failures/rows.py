"""One failure row: whose it is (rank, or host + local rank), how it is ordered and cited.

The helpers every part of the failures pass shares (forensics/passes/failures/__init__.py holds
the pass and its domain facts).
"""
from __future__ import annotations

import datetime as dt
import re
from typing import Any

import orjson

from ... import failure_facts as facts
from ...report.model import local_ranks_phrase
from ..context import Context
from ..evidence import shorten
from . import records


# Exceptions raised by a teardown, not by the program: not a crash of their own.
TEARDOWN_RE = r"SignalException|KeyboardInterrupt|SystemExit|got signal|ChildFailedError"


LAUNCHERS = ("launcher", "deepspeed launcher")


# Launchers whose exit record names no rank (DeepSpeed's line quotes the LAST spawned command;
# srun names a task): the exit is still a worker's, reported as "a rank the log does not name".
REPORTERS = ("deepspeed launcher", "slurm")


def _ev_row(r: dict[str, Any], text: str | None = None) -> dict[str, Any]:
    # a citation says the rank the line itself carries (`logged_rank`): one mapped from a
    # one-node launch or named in the text is the finding's, not the line's
    return {"source_file": r["source_file"], "line": r["line"], "rank": r.get("logged_rank", r["rank"]),
            "timestamp": r.get("logged_ts", r["timestamp"]), "text": text or shorten(r.get("message") or r.get("event"), 140)}


def _key(r: dict[str, Any]) -> tuple:
    """Order of failure rows: time on the common clock (placed), then file order."""
    t = r["timestamp"]
    return (t is None, t or dt.datetime.min.replace(tzinfo=dt.timezone.utc), r["source_file"] or "", r["line"] or 0)


def _exit_key(r: dict[str, Any]) -> tuple:
    """Order of exit records: time on the common clock, then torch elastic's "Root Cause (first
    observed failure)" record before other records of the same time (its ChildFailedError table
    lists the other failures first, all to the second), then file order."""
    k = _key(r)
    return (k[0], k[1], not r.get("first_observed"), *k[2:])


def teardown(r: dict[str, Any]) -> bool:
    """A death the job's end dealt, not the process's own: an exception a teardown raised
    (TEARDOWN_RE: SignalException, SystemExit, ...), an exit or kill by a teardown signal or
    SIGKILL (a launcher's, a watchdog's), a launcher's kill record."""
    if r["kind"] in ("exit", "kill"):
        return (r["kind"] == "kill" and r.get("by") in LAUNCHERS) or \
            facts.signal_of(r["exit_code"], r["signal"]) in ("SIGKILL", *facts.TEARDOWN_SIGNALS)
    return bool(re.search(TEARDOWN_RE, r.get("message") or ""))


def death_key(r: dict[str, Any]) -> tuple:
    """Order of ranks' deaths that compete to be the first failure: a rank's own death before a
    teardown, then the earliest (on the common clock), then — at one time, in different files,
    where file order says nothing — torch elastic's "Root Cause (first observed failure)" record
    (its ChildFailedError table lists the other failures first, all to the second), then the lowest
    rank; then file order."""
    k = _exit_key(r)
    rank = _owner(r)
    return (teardown(r), *k[:3], rank if isinstance(rank, int) else 1 << 40, *k[3:])


def _processes(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per process: the agent's line, the table record and the signal of one exit name the
    same pid (rows without a pid count each)."""
    seen: set[int] = set()
    out = []
    for r in rows:
        if r["pid"] is not None:
            if r["pid"] in seen:
                continue
            seen.add(r["pid"])
        out.append(r)
    return out


def _first(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The first of one rank's reports of a failure: the earliest that carried its own time,
    else the earliest placed one (a placed time is only a bound)."""
    exact = [r for r in rows if r["exact"]]
    return min(exact or rows, key=_key)


def _local(r: dict[str, Any]) -> list[dict[str, Any]]:
    """[{"host", "local_rank"}] for a row known only by its local rank (spec/report.md)."""
    if r.get("rank") is None and r.get("local_rank") is not None:
        return [{"host": r.get("host"), "local_rank": int(r["local_rank"])}]
    return []


def _who(rank: int | None, row: dict[str, Any]) -> str:
    if rank is not None:
        how = (row.get("record") or {}).get("how")
        return f"rank {rank} ({how})" if how else f"rank {rank}"
    loc = _local(row)
    return local_ranks_phrase(loc) if loc else "a rank the log does not name"


def _owner(r: dict[str, Any]) -> Any:
    """One process's identity for grouping its errors: the rank, else (host, local rank)."""
    if r["rank"] is not None:
        return int(r["rank"])
    if r.get("local_rank") is not None:
        return ("local", r.get("host"), int(r["local_rank"]))
    return None


def _extra(r: dict[str, Any]) -> dict[str, Any]:
    if not r.get("extra"):
        return {}
    try:
        x = orjson.loads(r["extra"])
    except orjson.JSONDecodeError:
        return {}
    return x if isinstance(x, dict) else {}


# the rows a rank named in their own text may be attributed to: a rank's own errors, never a
# timeout or a status line (their text names the peer they wait on)
_OWN_KINDS = ("oom", "gpu", "traceback", "stuck")


# the rows a one-node launch maps to a global rank: a process's own end (its error, its exit or
# kill). Timeouts known by local rank stay so: a hang among them is judged by (host, local rank)
# (_local_hang), from progress lines that carry no global rank either.
_DEATH_KINDS = (*_OWN_KINDS, "exit", "kill")


def _whose(ctx: Context, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each row's rank where the line gave none (failure_facts): the rank its own text names
    (`rank_basis` named_in_text; also over an srun task id that cannot be a rank,
    failure_facts.text_over_task), else, when the log shows a one-node launch, its local rank
    (one_node), else the launcher's exit record for its (host, local rank) (launcher_record,
    records.py). `logged_rank` keeps the rank as stored (what the events table is matched by)."""
    node: dict[str, Any] | None | bool = False
    single_worker: bool | None = None
    tasks = facts.SrunTasks(ctx.events)
    spawns: dict[Any, dict[str, Any] | None] = {}
    for r in rows:
        r["logged_rank"], r["rank_basis"] = r["rank"], None
        if r["rank"] is not None and r["kind"] in _DEATH_KINDS and (i := _spawn_index(r)) is not None:
            if r["source_file"] not in spawns:
                spawns[r["source_file"]] = facts.spawn_node(ctx.events, r["source_file"])
            if spawns[r["source_file"]]:
                _spawn_on_a_node(r, i, spawns[r["source_file"]])
                if r["rank"] is None:
                    continue
        if r["rank"] is not None:
            if r.get("rank_source") == "text":
                r["rank_basis"] = "named_in_text"     # a tag at the start of its own text ("(rank 3/8) ")
            elif r["kind"] in _OWN_KINDS and (named := facts.text_over_task(r, tasks)) is not None:
                r["rank"], r["rank_basis"] = named, "named_in_text"   # an srun task id that is no rank
            continue
        if r["kind"] in _OWN_KINDS and r.get("local_rank") is None:
            named = r["text_rank"] if r.get("text_rank") is not None else facts.rank_in_text(r.get("message"))
            if named is not None:
                r["rank"], r["rank_basis"] = named, "named_in_text"
                continue
        single = None
        if r["kind"] == "exit" and r.get("by") == "deepspeed launcher" and r.get("local_rank") is None:
            # the launcher's exit line quotes its LAST worker's command: the failed one's only when
            # it started one worker (failure_facts.launcher_single_worker)
            if single_worker is None:
                single_worker = facts.launcher_single_worker(ctx.events)
            if single_worker:
                single = _extra(r).get("cmd_local_rank") or 0
                r["local_rank"] = single
        if r.get("local_rank") is not None and r["kind"] in _DEATH_KINDS:
            if single is not None:
                node = facts.one_node(ctx.events, local=single)
            elif node is False:
                node = facts.one_node(ctx.events)
            if node:
                r["rank"], r["rank_basis"] = int(r["local_rank"]), "one_node"
                r["one_node"] = node
    records.join(ctx, rows, _DEATH_KINDS)
    rows = _srun_tasks(ctx, rows)
    records.join_unowned(rows, _OWN_KINDS, own_exit, TEARDOWN_RE)
    return rows


def _spawn_index(r: dict[str, Any]) -> int | None:
    """mp.spawn's index of the process a row is (its exit report, or the traceback it forwarded),
    or None when the row is not mp.spawn's."""
    x = _extra(r)
    if x.get("spawn_process") is not None:
        return int(x["spawn_process"])
    return int(r["rank"]) if r.get("by") == "mp.spawn" and r["rank"] is not None else None


def _spawn_on_a_node(r: dict[str, Any], i: int, node: dict[str, Any]) -> None:
    """mp.spawn's process i on one node of several (failure_facts.spawn_node): its rank is
    node_rank * nprocs + i where the log states both, else it is known as local rank i on its
    host (in place; `record` says how)."""
    n, p = node["node_rank"], node["nprocs"]
    if n is not None and p is not None and i < p:
        rank: int | None = n * p + i
        how = f"mp.spawn's process {i} on node rank {n}, {p} processes per node ({node['why']})"
    else:
        rank, how = None, f"mp.spawn's process {i} is its local rank: the log shows more than one node ({node['why']})"
        r["logged_host"], r["logged_local_rank"] = r.get("host"), r.get("local_rank")   # as the events table has them
        r["local_rank"], r["host"] = i, r.get("host") or node["host"]
    r["rank"], r["rank_basis"] = rank, None
    r["record"] = {"host": r.get("host") or node["host"], "local_rank": i, "rank": rank, "how": how}


def _srun_tasks(ctx: Context, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """srun's report of tasks that died (`task 4: Out Of Memory`, `tasks 1-3: Bus error`) names
    their ranks where srun started the ranks (failure_facts.srun_task_ranks): one row per task,
    each that task's rank (basis own_error: the launcher's record of its own end)."""
    srun = facts.SrunRanks(ctx.events)
    out: list[dict[str, Any]] = []
    for r in rows:
        tasks = facts.srun_task_ranks(r, srun) if r["kind"] in _DEATH_KINDS else []
        if not tasks:
            out.append(r)
            continue
        for t in tasks:
            out.append({**r, "rank": t, "srun_task": True})
    return out


def own_exit(r: dict[str, Any]) -> bool:
    """A launcher's exit record with a code of the worker's own: a fault signal (SIGSEGV ...) or
    a positive code; not SIGKILL (a kill: host_oom) nor a teardown signal (the launcher's SIGTERM)."""
    if r["kind"] != "exit" or r["exit_code"] is None:
        return False
    sig = facts.signal_of(r["exit_code"], r["signal"])
    return sig in facts.FAULT_SIGNALS or (r["exit_code"] > 0 and sig not in ("SIGKILL", *facts.TEARDOWN_SIGNALS))


def _basis(r: dict[str, Any], default: str | None = "own_error") -> str | None:
    """How a row's rank is known: named in its text, a one-node launch's local rank, else `default`."""
    return r.get("rank_basis") or default
