"""Failure facts from any text, whatever the names: a rank's own error, the rank a text names,
the signal an exit code means, and whether the log shows a one-node launch.

Question: what does a failure line say, when the event names and fields are not the ones the
readers type? Used by passes/failures/ (and passes/non_finite.py) on their candidate rows.

Domain facts relied on:
- An event of any name at level ERROR (CRITICAL, FATAL), or carrying an exception (fields such as
  exc_type, exc_info, error, exception, traceback, stack, stack_trace: what structlog, loguru,
  python-json-logger and hand-written loggers put there), is its rank's own error.
- A line that carries no rank may name one in its own text: Megatron's
  `Rank {global_rank}: found NaN in local grad norm ...`, c10d's `[Rank 3]`, Lightning's
  `[rank: 3]` (rank_prefixed_message), "on rank 3",
  "global rank 5", `RANK=2`, `rank=7`. That rank is used, with basis `named_in_text`; a rank the
  text names as someone else (waiting on / for rank, from / to rank, peer rank, local rank) is
  not the line's.
- Exit codes: a negative code is death by the signal -code (torch elastic, DeepSpeed's launcher:
  -9 SIGKILL, -11 SIGSEGV, -7 SIGBUS, -6 SIGABRT); a shell (srun, bash) reports death by signal N
  as 128+N (137 = SIGKILL, 139 = SIGSEGV, 134 = SIGABRT, 135 = SIGBUS).
- srun's task ids are SLURM_PROCID, each process's rank in the step (slurm
  src/srun/libsrun/launch.c, _task_finish: "%s: task %s: Exited with exit code %d" / ": Out Of
  Memory" / the signal's text, over a task range list `1-3,7`). They are the training ranks where
  srun started the ranks itself: the log shows no per-node launcher (torchrun / torch elastic
  agent, DeepSpeed's or Accelerate's launcher, mpirun) whose tasks would be nodes, not ranks.
- mp.spawn's process index (its exit report, the traceback it forwards) is the rank on one node;
  where the log shows a second node it is the local rank, the rank node_rank * nprocs + index
  when the log states both (spawn_node).
- A one-node launch is a fact the log can show: one host (a loopback name beside it is that
  host: forensics/host_names.py) (or the launcher saying nnodes 1 /
  group_world_size 1), no node rank above 0, no global rank or world size beyond the node's
  workers. Then local rank N is global rank N (basis `one_node`).
"""
from __future__ import annotations

import re
import signal as _signal
from typing import Any

import orjson
import polars as pl

from . import host_names

# Keys that carry an exception (case-insensitive, in `extra` or in top-level `fields`).
EXC_KEYS = ("exc_type", "exception_type", "error_type", "exc_info", "exc_text", "exception", "error",
            "traceback", "stack", "stack_trace", "stacktrace", "exc")
# The same as a polars regex over the JSON text: the key (or a flattened path ending in it,
# `extra.exc_type`) with a non-empty string, object or list.
EXC_FIELD_RE = r'(?i)"(?:[\w\-]+\.)*(?:' + "|".join(EXC_KEYS) + r')"\s*:\s*(?:"[^"]|\{|\[)'
_TYPE_KEYS = ("exc_type", "exception_type", "error_type")
# The exception line of a Python traceback: `ValueError: bad shape`, `torch.OutOfMemoryError: ...`
_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Failure|Fault|Warning)|AssertionError)(?::\s*(.*))?$")

# Faults a signal names (the process died of it; not a teardown, not the OOM killer's SIGKILL).
FAULT_SIGNALS = {
    "SIGSEGV": "a segmentation fault in native code (a CUDA/NCCL library, a C++ extension)",
    "SIGBUS": "a bus error (often /dev/shm exhausted by DataLoader workers' shared memory)",
    "SIGABRT": "an abort (a failed C++ check, std::terminate, a CUDA/NCCL abort)",
    "SIGILL": "an illegal instruction",
    "SIGFPE": "an arithmetic fault",
}
# Signals a launcher or a scheduler sends to stop workers: a teardown, never a crash of their own.
TEARDOWN_SIGNALS = {"SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGPIPE"}


# Keys a record may carry its text under when it has no `message` (loguru/structlog/ECS spellings).
TEXT_KEYS = ("text", "msg", "message", "log", "error", "err", "exception", "reason", "description", "detail")


def text_of(col: str) -> list[pl.Expr]:
    """The string values of TEXT_KEYS in a JSON-object column, in that order (for pl.coalesce)."""
    return [pl.col(col).str.json_path_match(f"$.{k}") for k in TEXT_KEYS]


def signal_name(n: int) -> str | None:
    try:
        return _signal.Signals(n).name
    except ValueError:
        return None


def signal_of(code: int | None, sig: str | None = None) -> str | None:
    """The signal an exit means: the one a line named, else -code, else code-128 (a shell's)."""
    if sig:
        return str(sig)
    if code is None:
        return None
    if code < 0:
        return signal_name(-code)
    if 128 < code <= 128 + 64:
        return signal_name(code - 128)
    return None


def code_phrase(code: int | None, sig: str | None) -> str:
    """ "exit code -11 (SIGSEGV)", "exit code 137 (128+9: SIGKILL)", "SIGSEGV"."""
    s = signal_of(code, sig)
    if code is None:
        return s or "an unknown exit"
    if s is None:
        return f"exit code {code}"
    return f"exit code {code} ({s})" if code < 0 else f"exit code {code} (128+{code - 128}: {s})"


def _json(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        x = orjson.loads(text)
    except orjson.JSONDecodeError:
        return {}
    return x if isinstance(x, dict) else {}


def exception_of(row: dict[str, Any]) -> tuple[str | None, str | None]:
    """(exception type, its message) a row carries: a typed field (exc_type), an exception
    object ({"type": .., "message": ..}), or the exception line at the end of a traceback text
    (exc_info, traceback, stack, ...); else the reader's (extra.exception) or the row's message
    when it is an exception line itself."""
    found: dict[str, Any] = {}
    for src in (_json(row.get("extra")), _json(row.get("fields"))):
        for k, v in src.items():
            name = k.lower().rsplit(".", 1)[-1] if isinstance(k, str) else None   # `extra.exc_type`: flattened
            if name in EXC_KEYS and v not in (None, "", [], {}):
                found.setdefault(name, v)
    etype: str | None = next((str(found[k]) for k in _TYPE_KEYS if isinstance(found.get(k), str)), None)
    emsg: str | None = None
    for k in ("exception", "error", "exc", "exc_info", "exc_text", "traceback", "stack_trace", "stacktrace", "stack"):
        v = found.get(k)
        if isinstance(v, dict):
            etype = etype or next((str(v[x]) for x in ("type", "exc_type", "name", "class") if v.get(x)), None)
            emsg = emsg or next((str(v[x]) for x in ("message", "msg", "value", "args") if v.get(x)), None)
            v = v.get("traceback") or v.get("stack") or v.get("stacktrace")
        if isinstance(v, list):
            v = "\n".join(map(str, v))
        if isinstance(v, str):
            last = next((ln.strip() for ln in reversed(v.strip().splitlines()) if ln.strip()), "")
            m = _EXC_LINE.match(last)
            if m:
                etype = etype or m.group(1)
                emsg = emsg or (m.group(2) or None)
            elif k in ("exception", "error", "exc") and "\n" not in v.strip():
                emsg = emsg or v.strip()
    if etype is None:
        x = _json(row.get("extra"))
        if isinstance(x.get("exception"), str) and "\n" not in x["exception"]:
            etype = x["exception"]
        m = _EXC_LINE.match((row.get("message") or "").strip())
        if m:
            etype = etype or m.group(1)
            emsg = emsg or m.group(2)
    return etype, emsg


# -- a rank named in the line's own text ---------------------------------------------------------
_RANK_TEXT = [
    re.compile(r"\[\s*Rank\s+(\d+)\s*\]", re.I),                  # c10d / DeepSpeed `[Rank 3]`
    re.compile(r"\[rank: (\d+)\]"),                              # Lightning's rank_prefixed_message
    re.compile(r"\bglobal[ _]rank\s*[=:]?\s*(\d+)", re.I),         # "global rank 5"
    re.compile(r"(?<![\w.])Rank\s+(\d+)\s*:", re.I),                # Megatron `Rank 11: found NaN ...`
    re.compile(r"(?<![\w.])rank\s*=\s*(\d+)", re.I),                # RANK=2, rank=7
    re.compile(r"\bon rank\s+(\d+)\b", re.I),                      # "... on rank 3"
]
# what in front of "rank N" makes it somebody else's rank, not the line's
_OTHERS = re.compile(r"(?i)(?:local|waiting(?: (?:on|for))?|wait(?:s|ed)?(?: (?:on|for))?|from|to|peer|src|dst|source|"
                     r"destination|remote|with|and|than|by)[ _]*\[?\s*(?:global[ _])?$")


def rank_in_text(text: str | None) -> int | None:
    """The rank a line names as its own ("Rank 11: ...", "[Rank 3]", "on rank 3", "global rank 5",
    "RANK=2"), or None — also when it names several different ranks."""
    if not text:
        return None
    text = text[:2000]
    for pat in _RANK_TEXT:
        got = set()
        for m in pat.finditer(text):
            if _OTHERS.search(text[max(0, m.start() - 24):m.start()]):
                continue
            got.add(int(m.group(1)))
        if len(got) == 1:
            return got.pop()
        if got:
            return None
    return None


class SrunTasks:
    """How many srun --label task ids the log's lines carry (0: none), counted when first asked."""

    def __init__(self, events: pl.LazyFrame) -> None:
        self.events, self.n = events, None

    def __call__(self) -> int:
        if self.n is None:
            task = pl.col("extra").str.extract(r'"srun_task":\s*(\d+)', 1)
            self.n = int(self.events.select(task.drop_nulls().n_unique()).collect().item())
        return self.n


def text_over_task(r: dict[str, Any], tasks: SrunTasks) -> int | None:
    """The rank a row's own text names in place of the srun task id its line was given as its rank,
    or None. Only where the task ids cannot be the ranks: the text names a rank no task id of this
    log reaches (rank >= the number of tasks; `tasks()` gives that number). A text rank below it
    leaves the task id (a task id is SLURM_PROCID, the rank, where srun started the ranks)."""
    if r.get("rank") is None or str(r.get("rank_source")) != "prefix" or not r.get("extra"):
        return None
    if _json(r["extra"]).get("srun_task") != r["rank"]:
        return None
    named = rank_in_text(r.get("message"))
    if named is None or named == r["rank"] or named < tasks():
        return None
    return named


# -- srun started the ranks --------------------------------------------------------------------
# a launcher that runs on each node and starts that node's workers: under it, an srun task is a node
_PER_NODE_LAUNCHER = (r"(?i)torch\.distributed\.(?:elastic|run|launch)|\btorchrun\b|deepspeed\.launcher|"
                      r"\[launch\.py:\d+:|\baccelerate launch\b|\bnproc[_-]per[_-]node\b|\bnum_local_procs\b|"
                      r"\blocal_world_size\b|\bmpirun\b|\bmpiexec\b|\bhorovodrun\b|\bWORLD INFO DICT\b")


class SrunRanks:
    """Whether srun's task ids in this log are the ranks (srun started the ranks: no per-node
    launcher shows anywhere in the log), asked once per diagnosis."""

    def __init__(self, events: pl.LazyFrame) -> None:
        self.events, self.v = events, None

    def __call__(self) -> bool:
        if self.v is None:
            names = self.events.collect_schema().names()
            hit = [pl.col(c).cast(pl.Utf8).str.contains(_PER_NODE_LAUNCHER).fill_null(False)
                   for c in ("message", "extra", "fields") if c in names]
            self.v = not hit or not bool(self.events.select(pl.any_horizontal(hit).any()).collect().item())
        return self.v


def srun_task_ranks(r: dict[str, Any], srun: SrunRanks) -> list[int]:
    """The ranks srun's task report on this row names (its `task_list`), where they are ranks
    (SrunRanks); [] otherwise or when the row is not srun's."""
    if r.get("rank") is not None or r.get("local_rank") is not None or not r.get("extra"):
        return []
    x = _json(r["extra"])
    tasks = x.get("task_list")
    if x.get("by") != "slurm" and x.get("reported_by") != "slurm" or not isinstance(tasks, list) or not tasks:
        return []
    return [int(t) for t in tasks] if srun() else []


# -- one node ----------------------------------------------------------------------------------
# "name=N", "name: N", or a command line's "--name N"
_NODE_RANK = r"(?i)\b(?:node_rank|group_rank|NODE_RANK|GROUP_RANK)(?:\s*[=:]\s*|\s+)(\d+)"
_NNODES = r"(?i)\b(?:nnodes|num_nodes|max_nodes|group_world_size)(?:\s*[=:]\s*|\s+)(\d+)(?:\s*:\s*(\d+))?"
_WORLD = r"(?i)\b(?:global_world_size|dist_world_size|world_size|WORLD_SIZE)\s*[=:]\s*(\d+)"
_NPROC = r"(?i)\b(?:nproc_per_node|num_local_procs|local_world_size|LOCAL_WORLD_SIZE)(?:\s*[=:]\s*|\s+)(\d+)"
# a launch command in the log (a pasted shell line): torchrun / python -m torch.distributed.run or
# .launch. Their --nnodes defaults to 1 (torch/distributed/run.py get_args_parser: "--nnodes",
# default="1:1"; launch.py the same parser); --standalone is one node by definition.
_LAUNCH_CMD = r"(?:^|[\s>$#])torchrun\s+(?:-|\S+\.py\b)|-m\s+torch\.distributed\.(?:run|launch)\s"
_NODE_WORDS = r"(?i)nnodes|num[_-]nodes|max[_-]nodes|node[_-]rank|group[_-]rank|group_world_size"


# -- mp.spawn's process index -------------------------------------------------------------------
# torch.multiprocessing.spawn (spawn.py) calls fn(i, *args) for i in range(nprocs) on the machine
# it runs on, and its parent names the failed one by that index ("process %d terminated with
# signal %s", "-- Process %d terminated with the following error:"). On one node the index is
# the rank; a multi-node mp.spawn job (each node runs its own mp.spawn) makes it the local rank,
# its rank node_rank * nprocs + i (the common `rank = node_rank * ngpus_per_node + gpu`).
_SPAWN_NPROCS = r"(?i)\b(?:nprocs|n?gpus_per_node|nproc_per_node|num_local_procs|local_world_size)(?:\s*[=:]\s*|\s+)(\d+)"


def spawn_node(events: pl.LazyFrame, source_file: str | None) -> dict[str, Any] | None:
    """What the log shows of the node an mp.spawn parent in `source_file` ran on, when it shows
    more than one node: a node rank above 0, nnodes above 1, two named hosts (host_names), or a
    world size beyond mp.spawn's nprocs. None when it shows none (the process index is the rank).
    Else {"node_rank": the one node rank `source_file`'s text states (or None), "nprocs": the one
    count of processes per node the log states (or None), "host": the file's one named host (or
    None), "why": what shows the second node}."""
    msg = pl.col("message")
    mine = pl.col("source_file") == source_file if source_file is not None else pl.lit(False)
    f = events.select(
        pl.col("host").drop_nulls().unique().implode().alias("hosts"),
        pl.col("host").filter(mine).drop_nulls().unique().implode().alias("file_hosts"),
        msg.str.extract(_NODE_RANK, 1).cast(pl.Int64, strict=False).max().alias("max_node_rank"),
        msg.filter(mine).str.extract(_NODE_RANK, 1).cast(pl.Int64, strict=False).drop_nulls().unique()
        .implode().alias("node_ranks"),
        pl.max_horizontal(msg.str.extract(_NNODES, 1).cast(pl.Int64, strict=False),
                          msg.str.extract(_NNODES, 2).cast(pl.Int64, strict=False)).max().alias("nnodes"),
        msg.str.extract(_WORLD, 1).cast(pl.Int64, strict=False).max().alias("world"),
        msg.str.extract(_SPAWN_NPROCS, 1).cast(pl.Int64, strict=False).drop_nulls().unique().implode().alias("nprocs"),
    ).collect().row(0, named=True)
    hosts = host_names.distinct(f["hosts"] or [])
    nprocs = f["nprocs"][0] if len(f["nprocs"] or []) == 1 else None
    why = []
    if (f["max_node_rank"] or 0) > 0:
        why.append(f"node rank {f['max_node_rank']}")
    if (f["nnodes"] or 1) > 1:
        why.append(f"nnodes {f['nnodes']}")
    if len(hosts) > 1:
        why.append(f"{len(hosts)} hosts ({', '.join(hosts[:3])}{', ...' if len(hosts) > 3 else ''})")
    if f["world"] is not None and nprocs is not None and f["world"] > nprocs:
        why.append(f"world size {f['world']} > nprocs {nprocs}")
    if not why:
        return None
    own = host_names.distinct(f["file_hosts"] or [])
    return {"node_rank": f["node_ranks"][0] if len(f["node_ranks"] or []) == 1 else None, "nprocs": nprocs,
            "host": own[0] if len(own) == 1 else None, "why": ", ".join(why)}


# DeepSpeed's launcher (deepspeed/launcher/launch.py, sigkill_handler) and torch.distributed.launch
# before torchrun print "Killing subprocess {pid}" once per worker they started on this node,
# then the command of the LAST one spawned with its exit code: with one worker, that is the
# failed one, and its --local_rank is the failed worker's.
_KILLING = r"Killing subprocess (\d+)"


def launcher_single_worker(events: pl.LazyFrame) -> bool:
    """The log's DeepSpeed-style launcher started exactly one worker: one "Killing subprocess"
    pid in the whole log, or its num_local_procs is 1 (and no other count)."""
    msg = pl.col("message")
    f = events.select(
        msg.str.extract(_KILLING, 1).drop_nulls().n_unique().alias("killed"),
        msg.str.extract(r"\bnum_local_procs=(\d+)", 1).drop_nulls().cast(pl.Int64, strict=False).unique()
        .implode().alias("procs"),
    ).collect().row(0, named=True)
    procs = [p for p in (f["procs"] or []) if p is not None]
    if procs:
        return procs == [1]
    return f["killed"] == 1


# torch elastic's agent (torch/distributed/elastic/multiprocessing/api.py): on a worker's failure
# it logs "failed (exitcode: %s) local_rank: %s (pid: %s) of binary: %s" for the failed worker and
# "Sending process %s closing signal %s" for each worker it tears down: the pids of its workers
_AGENT_FAILED = r"failed \(exitcode: -?\d+\) local_rank: (\d+) \(pid: (\d+)\)"
_AGENT_CLOSING = r"Sending process (\d+) closing signal SIG"


# torch elastic's agent (torch/distributed/elastic/agent/server/api.py, _invoke_run) before it
# restarts its workers: "[%s] Worker group %s. %s/%s attempts left; will restart worker group"
_AGENT_RESTART = r"attempts left; will restart worker group"


def agent_workers(lines: list[tuple[str, int | None, int]], restarted: bool = False) -> int | None:
    """How many workers one torch elastic agent shows it started, when the pids it names cover its
    local ranks 0..N-1. `lines`: its lines in file order, (file, local rank, pid) for a failed
    worker, (file, None, pid) for a worker it sent a closing signal. On a failure the agent
    (multiprocessing/api.py _poll) closes the workers still running, then logs the first failed
    one: one round = the closing pids before a failed line, and that line. A round covers local
    ranks 0..N-1 when its N >= 2 distinct pids hold the failed worker's (its local rank below N,
    its pid not among those closed). The pids' order says nothing (workers start in local-rank
    order, but their pids need not rise with it). None when the lines do not show one agent's
    workers: a lone failed worker (a high local rank alone shows no node), several rounds unless
    the agent said it restarts its workers (then each round the same N, no pid twice), rounds in
    several files (each file a node's console), closing signals after a whole round (workers no
    failure of this agent covers: another agent's)."""
    rounds: list[tuple[str, set[int], list[tuple[int, int]]]] = []
    closing: list[int] = []
    for file, lr, pid in lines:
        if lr is None:
            closing.append(pid)
            continue
        if rounds and rounds[-1][0] == file and not closing and rounds[-1][2][-1] == (lr, pid):
            continue                       # the same failure logged twice (a tee'd console)
        rounds.append((file, set(closing), [(lr, pid)]))
        closing = []
    if not rounds:
        return None
    if closing:
        if rounds[-1][1]:
            return None                    # closing signals after a whole round: another agent's workers
        rounds[-1][1].update(closing)      # a log whose closing lines all follow the failure (reordered)
    if len(rounds) > 1 and (not restarted or len({f for f, _, _ in rounds}) > 1):
        return None
    sizes, seen = set(), set()
    for _, closed, failed in rounds:
        (lr, pid), = failed
        pids = closed | {pid}
        if pid in closed or len(pids) < 2 or lr >= len(pids) or pids & seen:
            return None
        seen |= pids
        sizes.add(len(pids))
    return sizes.pop() if len(sizes) == 1 else None


def one_node(events: pl.LazyFrame, local: int | None = None) -> dict[str, Any] | None:
    """The facts that show a one-node launch, or None when the log does not show one: at most one
    host and a positive sign (that one host, nnodes / group_world_size 1, or one agent whose
    worker pids cover local ranks 0..N-1, whatever their order: agent_workers), no node rank above 0, no global rank or
    world size beyond the node's workers (local ranks 0..N-1, or the launcher's nproc_per_node)."""
    msg = pl.col("message")
    f = events.select(
        pl.col("host").drop_nulls().unique().implode().alias("host_names"),
        pl.col("local_rank").max().alias("max_local"),
        pl.col("rank").max().alias("max_rank"),
        msg.str.extract(_NODE_RANK, 1).cast(pl.Int64, strict=False).max().alias("node_rank"),
        pl.max_horizontal(msg.str.extract(_NNODES, 1).cast(pl.Int64, strict=False),
                          msg.str.extract(_NNODES, 2).cast(pl.Int64, strict=False)).max().alias("nnodes"),
        msg.str.extract(_WORLD, 1).cast(pl.Int64, strict=False).max().alias("world"),
        msg.str.extract(_NPROC, 1).cast(pl.Int64, strict=False).max().alias("nproc"),
        msg.str.contains(_LAUNCH_CMD).fill_null(False).any().alias("cmd"),
        msg.str.contains(r"--standalone\b").fill_null(False).any().alias("standalone"),
        msg.str.contains(_NODE_WORDS).fill_null(False).any().alias("node_words"),
    ).collect().row(0, named=True)
    named = host_names.distinct(f.pop("host_names") or [])     # a loopback name is no second host
    f["hosts"], f["host"] = len(named), (named[0] if named else None)
    if local is not None:
        # a local rank the rows know that no event carries (the launcher's single worker)
        f["max_local"] = max(local, f["max_local"] if f["max_local"] is not None else local)
    default = None
    if f["nnodes"] is None and (f["standalone"] or f["cmd"] and not f["node_words"]):
        # the launch command names no node count: torchrun's default, one node
        f["nnodes"], default = 1, "--standalone" if f["standalone"] else "torchrun's default --nnodes 1"
    if f["max_local"] is None or f["hosts"] > 1:
        return None
    if (f["node_rank"] or 0) > 0 or (f["nnodes"] or 1) > 1:
        return None
    workers = max(int(f["max_local"]) + 1, f["nproc"] or 0)
    # (read only where the facts above leave one node possible: a second scan of the messages)
    names = events.collect_schema().names()
    where = [pl.col(c) for c in ("source_file", "line") if c in names]
    agent = events.select(
        *where,
        msg.str.extract_groups(_AGENT_FAILED).alias("failed"),
        msg.str.extract(_AGENT_CLOSING, 1).cast(pl.Int64, strict=False).alias("closing"),
        msg.str.contains(_AGENT_RESTART).fill_null(False).alias("restart"),
    ).filter(pl.col("failed").struct.field("1").is_not_null() | pl.col("closing").is_not_null() | pl.col("restart"))
    agent = (agent.sort(where, maintain_order=True) if where else agent).collect()
    restarted = bool(agent["restart"].any())
    files = agent["source_file"].to_list() if "source_file" in agent.columns else [""] * agent.height
    lines = [(f or "", int(d["1"]), int(d["2"])) if d and d.get("1") is not None else (f or "", None, int(c))
             for f, d, c in zip(files, agent["failed"].to_list(), agent["closing"].to_list())
             if (d and d.get("1") is not None) or c is not None]
    agent_n = agent_workers(lines, restarted)
    if agent_n is not None and (agent_n < workers or f["nproc"] not in (None, agent_n)):
        agent_n = None      # workers beyond the agent's pids: they do not cover the node
    workers = max(workers, agent_n or 0)
    if f["world"] is not None and f["world"] != workers and f["nproc"] is not None:
        return None
    if f["world"] is not None and f["world"] > workers:
        return None
    if f["max_rank"] is not None and f["max_rank"] >= workers:
        return None
    if f["hosts"] == 0 and f["nnodes"] != 1 and agent_n is None:
        return None     # nothing shows where the workers ran
    why = [f"one host ({f['host']})" if f["host"] else
           (default or "the launcher's nnodes 1") if f["nnodes"] == 1 else
           f"one torch elastic agent whose {agent_n} worker pids cover local ranks 0..{agent_n - 1}",
           f"local ranks 0..{workers - 1}"]
    if f["world"] is not None:
        why.append(f"world size {f['world']}")
    return {"host": f["host"], "workers": workers, "world_size": f["world"], "why": ", ".join(why)}
