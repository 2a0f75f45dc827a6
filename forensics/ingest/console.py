"""The console reader: torchrun / DeepSpeed / Megatron / NCCL / HF console text -> events.

Owns: rank attribution from console prefixes, timestamps written in the line (ISO, DeepSpeed,
HF, glog, torch elastic, syslog), levels, and the typed events that post-mortems hinge on:
NCCL_TIMEOUT, NCCL_WATCHDOG, NCCL_DUMP_SIGNAL, NCCL_DESYNC, COLLECTIVE_MISMATCH, NCCL_ERROR,
BARRIER_TIMEOUT, CUDA_OOM, CUDA_ERROR, GPU_XID, TRACEBACK (+ TRACEBACK_CONT), CHILD_FAILED,
PROCESS_KILLED, JOB_CANCELLED, TRAIN_STEP, EVAL, TRAIN_SUMMARY, GPU_MEMORY, STEP_TIMERS. Every
other non-blank line is kept as event LOG. Must not write files, guess a rank, or drop a line:
every physical line is exactly one event or one reject (blank lines and binary garbage, see
forensics/ingest/binary.py, are rejected). The forms it reads are listed, with their upstream
sources and samples, in forensics/ingest/templates.py.

What collectors put in front of a line is consumed first: Kubernetes CRI (`<ts> stderr F`),
Docker json-file (`{"log": ..}` per line, unwrapped in `_unwrap_docker`), syslog and journald
headers (short, short-precise, short-iso, short-iso-precise; they give the host), and a
shipper's ISO timestamp / Python logging `- LEVEL -` when a routing prefix follows, or the later
line of a launcher's block (consumed with one separator, so the block's indentation is kept).
Launcher blocks (rendezvous result, launch configs, ChildFailedError table) are tracked per node
(host): another node's lines and workers' own lines (a rank or local-rank prefix) between a
block's lines neither continue nor end it.

Rank attribution, first match wins (rank_source in parentheses):
- `[rank3]:` (PyTorch >= 2.3 prefixes every line of a failing rank with its GLOBAL rank),
  `[3]:` (torchrun with log_line_prefix_template "[${rank}]:") and mpirun --tag-output
  `[1,3]<stderr>:`                                                           -> rank 3 (prefix)
- `[Rank 3]` / `[PG ID 0 PG GUID 0(default_pg) Rank 3]` inside the text (c10d, DeepSpeed
  log_dist, Megatron memory report)                                         -> rank 3 (prefix);
  for a PG other than the default one that number is the rank inside the group: it goes to
  extra.pg_rank, not to rank (the PG goes to process_group and extra.pg).
- srun --label `03: ` (only in a file where most lines carry it): the task id is the rank
  (prefix), unless the tasks are launchers (their lines carry torchrun prefixes): then it is
  extra.srun_task, a node.
- `[default3]:` / `[trainer3]:` torchrun --tee: the number is the LOCAL rank (local_rank always
  set). ctx.gpu_map[(host, 3)] wins when given (gpu_map); else what the log printed for this
  node maps it (mapped, extra.mapped_by says what): torchrun's "Rendezvous complete"
  local_ranks/global_ranks, a single-node launch config, DeepSpeed's global_rank_mapping, a line
  carrying both `[default3]:` and `[rank11]:`, the agent's ChildFailedError record "rank 11
  (local_rank: 3)" (these two also map the earlier lines of the same block); else rank stays
  null: never local = global by assumption.
- `host:pid:tid [3] NCCL INFO`: the number is NCCL's cudaDev, a device index: local_rank 3 and
  host; rank only through ctx.gpu_map or the printed topology.
- `hostname: ` (pdsh, DeepSpeed multi-node) and Ray's `(RayTrainWorker pid=.., ip=..)` give host
  (and extra.pid); they never give a rank.
- nothing: rank = ctx.rank_hint (path) for a per-rank file, else null with rank_source "none"
  (the launcher, or a worker nobody named). Never rank 0 by default.

Lines that name OTHER ranks keep them in extra: missing_ranks (monitoredBarrier, desync report),
passed_ranks, named_ranks / seq_by_rank (fingerprint mismatch), signal_from (dump signal).

Multi-line Python tracebacks (per prefix stream, so interleaved ranks do not mix) are folded:
the `Traceback (most recent call last):` line becomes one TRACEBACK event whose message is the
exception line and whose extra carries frames, exception and line_count; each later line of the
traceback is its own event TRACEBACK_CONT (extra.head = line of the TRACEBACK) unless it is
itself typed (the exception line of a CUDA OOM is a CUDA_OOM event with extra.traceback).
A traceback still open at the end of a block is carried, with its later lines, into the next
block so its head can be completed (bounded by _MAX_PENDING lines).

glog lines (`E1218 20:27:21.426 ...`) carry no year: it is taken from the nearest full
timestamp in the file (the last one seen, or the first one in the first block); without any,
the timestamp stays null. Naive times are UTC, as everywhere in forensics.
"""
from __future__ import annotations

import gc
import re
import signal as _signal
from typing import Any, BinaryIO, Iterator

import orjson
import polars as pl

from ..schema import Level, RankSource
from .binary import BINARY, SUSPECT, binary_runs, is_binary_text
from .formats import ReaderContext
from .jsonl import Block, rejects_frame
from .normalize import parse_timestamp
from .sources import iter_chunks
from .templates import DESYNC_SEQ, DESYNC_TIMEOUT_AT, FINGERPRINT, RUNNING_COLLECTIVE, desync_ranks, fingerprint, fingerprint_diff, mismatch_pairs

# A traceback longer than this (or left open this many lines) is emitted as it stands.
_MAX_PENDING = 20_000
_MAX_MESSAGE = 65_536
_MAX_FRAMES = 200

# ---------------------------------------------------------------------------------------------
# Prefixes
# ---------------------------------------------------------------------------------------------
_TORCHRUN = re.compile(r"\[(rank|[A-Za-z_][A-Za-z_\-]*?|)(\d+)\]:")
_RAY = re.compile(r"\(([\w.\-]+) pid=(\d+)(?:, ip=([\d.a-fA-F:]+))?\)\s?")
_NCCL = re.compile(r"(?<![\w.\-])([\w.\-]++):(\d++):(\d++) \[(\d++)\] ")
_PDSH = re.compile(r"(?<![A-Za-z0-9_.\-])([A-Za-z0-9][A-Za-z0-9_.\-]{0,62}+): ")
_GLOG = re.compile(
    r"\[?([IWEF])(?:(\d\d)(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d+))?)?(?:\s+\d+)?\s+([\w.\-/]+:\d+)\]\s?"
)
_RANK_INLINE = re.compile(
    r"\[(?:PG (?:ID )?(\S+?)(?: PG GUID (\S+?))?(?:\s*\(([^)]*)\))? )?Rank (\d+)\]"
)
# What collectors and launchers put in front of a line (see forensics/ingest/templates.py).
# Kubernetes CRI (kubelet's container log files): `<RFC3339Nano> <stream> <F|P> <line>`.
_CRI = re.compile(r"((?:19|20)\d\d-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)) (stdout|stderr) ([FP]) ?")
# A collector's timestamp (ISO, bracketed or not), optionally Python logging's ` - LEVEL - `:
# consumed only when a routing prefix follows it, so plain timestamped lines keep their text.
_LEAD_TS = re.compile(
    r"\[?((?:19|20)\d\d-\d\d-\d\d[ T_]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?)\]?"
    r"(?:\s+-\s+(?:[\w.\-]+\s+-\s+)?(DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+-\s+"
    r"|\s+\[?(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\]?:?\s+|\s*[|:]\s*|\s+)"
)
# Behind a collector's timestamp, the later lines of a launcher's multi-line block (their
# indentation is what marks them, so the timestamp is consumed with exactly one separator):
# rendezvous result `  group_rank=1`, launch configs `  nproc_per_node : 4`, ChildFailedError
# table `Failures:` / `Root Cause (first observed failure):` / `  rank : 3 (local_rank: 3)` / rules.
_LEAD_TS_BLOCK = re.compile(
    r"\[?((?:19|20)\d\d-\d\d-\d\d[ T_]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?)\]?"
    r"(?: - (?:[\w.\-]+ - )?(DEBUG|INFO|WARNING|ERROR|CRITICAL) - | )"
)
_BLOCK_BODY = re.compile(
    r"(?:[ \t]{1,64}+(?:\w++\s*+[=:]|<NO_OTHER_FAILURES>)|(?:Failures:|Root Cause \(first observed failure\):)\s*+$"
    r"|(?<![=\-])[=\-]{20,}+\s*+$)"
)
_ROUTING = re.compile(
    r"\[(?:rank|[A-Za-z_][A-Za-z_\-]*?|)\d+\]:|\[\d+,\d+\]<\w+>:|\[?[IWEF]\d{4} \d\d:|(?<![\w.\-])[\w.\-]++:\d++:\d++ \[\d++\] "
    r"|\(\w+ pid=\d+"
)
# Syslog / journald short and short-precise (`journalctl -o short-precise`, microseconds):
# `Mon DD HH:MM:SS[.ffffff] host tag[pid]: ` (the host is the machine's).
_SYSLOG_HDR = re.compile(
    r"(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(\d{1,2}) (\d\d):(\d\d):(\d\d)(\.\d+)? "
    r"([A-Za-z0-9][\w.\-]*) ([\w.\-/@]+)(?:\[(\d+)\])?: "
)
# journald `journalctl -o short-iso` / `short-iso-precise` (systemd logs-show.c: strftime
# "%Y-%m-%dT%H:%M:%S", ".%06u" when precise, the UTC offset as "%z" (+0000) in older systemd and
# "+00:00" in newer), then ` host identifier[pid]: `. Only with a [pid] (or the kernel's lines),
# so a timestamped program line `<ts> step 5: ...` is not taken for a journal header.
_JOURNAL_ISO = re.compile(
    r"((?:19|20)\d\d-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:[+-]\d\d:?\d\d|Z)) "
    r"([A-Za-z0-9][\w.\-]*) ([\w.\-/@]+)(?:\[(\d+)\])?: "
)
# srun --label: `%0*d: ` (task id, zero-padded to the width of the largest); recognised only in a
# file where most lines carry it (a numbered list in a program's output is not a label).
_SRUN_LABEL = re.compile(r" {0,8}+(\d{1,6}): ")
# mpirun --tag-output (Open MPI / PRRTE): `[jobid,rank]<stdout>:`.
_MPI_TAG = re.compile(r"\[(\d+),(\d+)\]<(stdout|stderr|stddiag)>:")
_TEE_LOCAL = re.compile(r"\[(?!rank\d)[A-Za-z_][A-Za-z_\-]*\d+\]:")
_NOT_HOSTS = frozenset({"python", "python3", "localhost6"})
_HOST_SUFFIX_WORDS = ("Error", "Exception", "Warning", "error", "warning")

# ---------------------------------------------------------------------------------------------
# Timestamps and levels
# ---------------------------------------------------------------------------------------------
_ISO = re.compile(
    r"((?:19|20)\d\d)-(\d\d)-(\d\d)[ T_](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?(Z|[+-]\d\d:?\d\d)?(?!\d)"
)
_US_DATE = re.compile(r"^(\d\d)/(\d\d)/((?:19|20)\d\d) (\d\d):(\d\d):(\d\d)")
_SYSLOG = re.compile(r"^(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(\d{1,2}) (\d\d):(\d\d):(\d\d)")
_MONTHS = {m: i + 1 for i, m in enumerate("Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split())}
_LEVEL_MAP = {
    "DEBUG": "DEBUG", "TRACE": "DEBUG", "INFO": "INFO", "WARNING": "WARN", "WARN": "WARN",
    "ERROR": "ERROR", "CRITICAL": "ERROR", "FATAL": "ERROR",
}
_GLOG_LEVEL = {"I": "INFO", "W": "WARN", "E": "ERROR", "F": "ERROR"}

# ---------------------------------------------------------------------------------------------
# Typed events
# ---------------------------------------------------------------------------------------------
# The same gate and the per-line searches, run once per block in polars (Rust regex and
# Aho-Corasick) instead of once per line in Python: they are most of the cost of a console log.
_TRIGGER_WORDS = [
    "monitoredBarrier", "store based barrier", "processed ranks", "joined but didn't finish", "didn't join", "Timeout at collective",
    "flight recorder", "flight-recorder", "oom_kill", "oom-kill", "Out Of Memory", "Node failure", "mismatch between",
    "WorkNCCL", "watchdog", "Watchdog", "lagging", "desync", "dump signal", "CollectiveFingerPrint", "NCCL", "nccl",
    "out of memory", "OutOfMemory", "CUDA error", "Xid", "exitcode", "exit code", "return code", "SIG",
    "Signal ", "Killed", "Killing", "killed", "CANCELLED", "iteration", "(MB)", "time (ms)", "step=", "{'", "loss",
]
# Lines that start a launcher's topology block (see _Parser._topology).
_TOPOLOGY_WORDS = ["Rendezvous complete", "launch configs:", "global_rank_mapping=", "num_local_procs=", "dist_world_size="]
_ERROR_WORDS = ["Error", "ERROR", "FATAL", "Traceback", "error:"]
_WARN_WORDS = ["Warning", "WARN", "warning:"]
# `[INFO]`, `[INFO|file.py:1]`, ` - INFO - `, `NCCL WARN`: one pattern, one pass per block.
_LEVEL_VEC = r"(?:\[|NCCL | - )(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL|TRACE)(?:[\]|]| - |\s|$)"
_LEVEL_START = re.compile(r"(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)[:\s]")
_ISO_VEC = (
    r"(?:^|[^\d])((?:19|20)\d\d-\d\d-\d\d[ T_]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?)(?:$|[^\d])"
)


class _Hints:
    """Per-line results of the block-wide scan, as Python lists indexed like the lines."""

    __slots__ = ("trig", "err", "warn", "lvl", "ts", "year", "month", "binary", "topo")

    def __init__(self, lines: list[str], before_binary: bool | None = None) -> None:
        line = pl.col("l")
        head = line.str.slice(0, 600)
        out = pl.DataFrame({"l": lines}, schema={"l": pl.String}).select(
            line.str.contains_any(_TRIGGER_WORDS).alias("trig"),
            head.str.contains_any(_ERROR_WORDS).alias("err"),
            head.str.contains_any(_WARN_WORDS).alias("warn"),
            line.str.slice(0, 200).str.extract(_LEVEL_VEC, 1).alias("lvl"),
            head.str.extract(_ISO_VEC, 1).str.replace(r"^(.{10})[ _]", "${1}T")
            .str.replace(",", ".", literal=True).alias("ts"),
            line.str.contains(SUSPECT).alias("suspect"),
            line.str.contains_any(_TOPOLOGY_WORDS).alias("topo"),
        )
        ts = out["ts"]
        self.trig: list[bool] = out["trig"].to_list()
        self.topo: list[bool] = out["topo"].to_list()
        self.err: list[bool] = out["err"].to_list()
        self.warn: list[bool] = out["warn"].to_list()
        self.lvl: list[str | None] = out["lvl"].to_list()
        self.ts: list[str | None] = ts.to_list()
        self.year: list[int | None] = ts.str.slice(0, 4).cast(pl.Int32).to_list()
        self.month: list[int | None] = ts.str.slice(5, 2).cast(pl.Int32).to_list()
        # the exact rule runs only on lines holding a suspect character (few in a text log)
        flags = [bool(s) and is_binary_text(ln) for s, ln in zip(out["suspect"].to_list(), lines)]
        self.binary: list[bool] = binary_runs(lines, flags, before_binary) if any(flags) else flags


_WORK = re.compile(
    r"WorkNCCL\(SeqNum=(\d+),\s*OpType=(\w+)(?:,\s*NumelIn=(-?\d+))?(?:,\s*NumelOut=(-?\d+))?"
    r"(?:,\s*Timeout\(ms\)=(\d+))?\)(?:\s*ran for (\d+) milliseconds)?"
)
_WATCHDOG_FAIL = re.compile(
    r"failure detected by watchdog at work sequence id: (\d+)"
    r"(?:.*?last enqueued work: (-?\d+),\s*last completed work: (-?\d+))?"
)
_TIMEOUT_AT = re.compile(
    r"Timeout at NCCL work: (\d+), last enqueued NCCL work: (-?\d+), last completed NCCL work: (-?\d+)"
)
# ProcessGroupNCCL (torch >= 2.3) on every rank once one rank's watchdog fires: "Received a dump
# signal due to a collective timeout from rank 0 ... Last enqueued NCCL work: 40, last completed
# NCCL work: 40." The numbers are THIS rank's: a rank whose last enqueued work is below the
# sequence number the others time out on never issued that collective (it lags).
# "last enqueued NCCL work: 40, last completed NCCL work: 39" (the backend name varies: NCCL, Gloo)
_LAST_WORK = r"[Ll]ast enqueued (?:\w+ )?work: (-?\d+), last completed (?:\w+ )?work: (-?\d+)"
_DUMP_SIGNAL = re.compile(
    r"Received a (?:global )?dump signal (?:due to a collective timeout )?from\s+(this local rank|rank\s*(\d+))"
    r"(?:.*?" + _LAST_WORK + ")?"
)
# ProcessGroupNCCL watchdog (torch >= 2.3 / >= 2.6 wordings)
_WATCHDOG_AT = re.compile(
    r"(Exception \(either an error or timeout\)|NCCL error is|Work timeout is) detected by watchdog at work: (\d+)"
    r"(?:, " + _LAST_WORK + ")?"
)
_WORK_STATUS = re.compile(r"Work update periodically: " + _LAST_WORK)
_ASYNC_EXC = re.compile(r"raised the following async exception: (.*)")
_WATCHDOG_STUCK = re.compile(r"watchdog got stuck for (\d+) seconds")
_FR_DUMP = re.compile(r"(?:dumping nccl trace to|Finished writing NCCLPG debug info to) (\S+)")
_NCCL_COMM = re.compile(
    r"comm (0x[0-9a-fA-F]+) rank (\d+) nr?[Rr]anks (\d+)(?: nNodes (\d+) localRanks (\d+) localRank (\d+))?"
)
# monitoredBarrier (ProcessGroupGloo / ProcessGroupWrapper), store-based barrier (distributed_c10d)
_MB_FAILED = re.compile(r"Ranks? (\d+(?:, \d+)*) failed to pass monitoredBarrier in (\d+) ms")
_MB_TIMED_OUT = re.compile(
    r"Rank (\d+) timed out in monitoredBarrier after (\d+) ms\.?(?:\s*Successfully processed ranks: ([\d,\s]+))?"
)
_MB_PROCESSED = re.compile(r"^\s*(?:Successfully processed ranks: ([\d,\s]+)|No ranks successfully processed in monitoredBarrier)")
_MB_REACHED = re.compile(r"Rank (\d+) successfully reached monitoredBarrier, but received errors while waiting for send/recv from rank (\d+)")
_STORE_BARRIER = re.compile(
    r"Timed out initializing process group in store based barrier on rank:? (\d+), for key: (\S+) "
    r"\(world_size=(\d+), (?:worker_count|num_workers_joined)=(\d+), timeout=([\d:.]+)\)"
)
_NCCL_ERROR_IN = re.compile(r"NCCL error in: ([^,]+), (.+?)(?:, NCCL version ([\d.]+))?$")
_NCCL_ERROR_NAME = re.compile(r"\b(nccl(?:UnhandledCuda|System|Internal|Remote)Error|ncclInvalid(?:Argument|Usage))\b")
_NCCL_ABORTED = re.compile(r"NCCL communicator was aborted on rank (\d+)")
_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory")
_MEM = r"(?<![\d.])([\d.]++) ?([KMGT]i?B|bytes)"
_OOM_FIELDS: list[tuple[str, re.Pattern[str]]] = [
    ("tried_mb", re.compile(r"Tried to allocate " + _MEM)),
    ("total_mb", re.compile(r"total capacity of " + _MEM)),
    ("total_mb", re.compile(_MEM + r" total capacity")),
    ("free_mb", re.compile(r"of which " + _MEM + r" is free")),
    ("free_mb", re.compile(_MEM + r" free\b")),
    ("allocated_mb", re.compile(_MEM + r" is allocated by PyTorch")),
    ("allocated_mb", re.compile(_MEM + r" already allocated")),
    ("reserved_unallocated_mb", re.compile(_MEM + r" is reserved by PyTorch but unallocated")),
    ("reserved_mb", re.compile(_MEM + r" reserved in total by PyTorch")),
    ("process_mb", re.compile(r"this process has " + _MEM + r" memory in use")),
]
_OOM_OTHERS = re.compile(r"Process (\d+) has " + _MEM + r" memory in use")
_OOM_DEVICE = re.compile(r"\bGPU (\d+)\b")
_CUDA_ERROR = re.compile(r"CUDA error: ([^\n.]+)")
_XID = re.compile(r"NVRM: Xid \(([^)]*)\): (\d+)(?:, (.*))?")
_MEGATRON_ITER = re.compile(r"\biteration\s+(\d+)\s*/\s*(\d+)\s*\|(.*)")
_MEGATRON_VAL = re.compile(r"validation loss at ([^|]*)\|(.*)")
_ITERATION_N = re.compile(r"iteration (\d+)")
_MEGATRON_MEM = re.compile(
    r"\(after (\d+) iterations\) memory \(MB\) \| allocated: ([\d.]+) \| max allocated: ([\d.]+)"
    r"(?: \| reserved: ([\d.]+))?(?: \| max reserved: ([\d.]+))?"
)
_MEGATRON_MEM_ALL = re.compile(
    r"\[Rank (\d+)\] \(after (\d+) iterations\) memory \(MB\) \| allocated: ([\d.]+) \| max allocated: ([\d.]+)"
)
_TIMERS = re.compile(r"time \(ms\) \|(.*)")
_DS_STEP = re.compile(r"\bstep=(\d+), skipped=(\d+), lr=\[([^\]]*)\]")
_DS_THROUGHPUT = re.compile(
    r"epoch=(\d+)/micro_step=(\d+)/global_step=(\d+), RunningAvgSamplesPerSec=([\d.eE+-]+), "
    r"CurrSamplesPerSec=([\d.eE+-]+)(?:, MemAllocated=([\d.]+)GB, MaxMemAllocated=([\d.]+)GB)?"
)
_HF_DICT = re.compile(r"\{('[\w/.\-]+': [^{}]*)\}\s*$")
# A training script's own progress line: "step 88 | loss 2.301 | 512.3 ms/step", "Step 88/1000, loss:
# 2.3, lr: 1e-4". Both a step number and a loss are required (a line naming only a step is too
# common to mean progress).
_FREE_STEP = re.compile(r"\b[Ss]tep[:\s]\s*(\d+)(?:\s*/\s*\d+)?\b")
_FREE_LOSS = re.compile(r"\b[Ll]oss\s*[:=]?\s*(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|nan|inf)\b")
_FREE_LR = re.compile(r"\b(?:lr|learning[_ ]rate)\s*[:=]?\s*(\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\b")
_FREE_MS = re.compile(r"(?<!\d)(\d++(?:\.\d++)?)\s*+ms\s*+/\s*+(?:step|it(?:er)?)\b")
_HF_PAIR = re.compile(r"'([\w/.\-]+)': ('(?:[^'\\]|\\.)*'|[^,}]+)")
_SIGNAL_RECEIVED = re.compile(r"Signal (\d+) \((SIG\w+)\) received by PID (\d+)")
_KILLING = re.compile(r"Killing subprocess (\d+)")
_KERNEL_OOM = re.compile(r"(?:Out of memory|Memory cgroup out of memory): Killed process (\d+) \(([^)]*)\)|oom-kill:|oom_reaper")
_BASH_KILLED = re.compile(r"\b(\d+) Killed\b")
_RECEIVED_SIG = re.compile(r"received (SIG[A-Z]+)")
_SRUN = re.compile(r"srun: error: ([\w.\-]+): tasks? ([\d\-,]+): (Killed|Terminated|Out Of Memory|Exited with exit code (\d+))")
_SLURM_OOM = re.compile(r"Detected (\d+) oom[-_]kill events?(?:\(s\))?(?: in (?:StepId=)?(\S+?))?[.\s]")
_SLURM_NODE_FAIL = re.compile(r"srun: error: Node failure on (\S+)")
_DS_EXIT = re.compile(r"exits with return code = (-?\d+)")
_LOCAL_RANK_ARG = re.compile(r"--local[_-]rank[= ]'?(\d+)")
_ELASTIC_FAILED = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: (\d+)\)")
_CANCELLED = re.compile(r"\*\*\* (JOB|STEP) (\S+) (?:ON (\S+) )?CANCELLED AT (\S+)(?: DUE TO ([^*]+?))? \*\*\*")
_SIGKILL = re.compile(r"SIGKILL|Signal 9\b|signal 9\b")
_CLOSING = re.compile(r"Sending process (\d+) closing signal (SIG\w+)")

# Topology printed by launchers
_RDZV_FIELD = re.compile(
    r"^\s+(restart_count|master_addr|master_port|group_rank|group_world_size|local_ranks|role_ranks|global_ranks"
    r"|role_world_sizes|global_world_sizes)=(.*?)\s*$"
)
_LAUNCH_FIELD = re.compile(r"^\s+(\w+)\s*:\s*(.*?)\s*$")
_DS_MAPPING = re.compile(r"'([^']+)': \[([\d,\s]*)\]")
_DS_NODES = re.compile(r"nnodes=(\d+), num_local_procs=(\d+), node_rank=(\d+)")
_DS_WORLD = re.compile(r"dist_world_size=(\d+)")

# torch elastic ChildFailedError table
_CF_SECTION = re.compile(r"^\s*(Failures:|Root Cause \(first observed failure\):)\s*$")
_CF_RECORD = re.compile(r"^\[(\d+)\]:\s*$")
_CF_FIELD = re.compile(r"^\s+(time|host|rank|exitcode|error_file|traceback)\s*:\s*(.*?)\s*$")
_CF_RANK = re.compile(r"(-?\d+)(?: \(local_rank: (\d+)\))?")
_CF_EXIT = re.compile(r"(-?\d+)(?: \(pid: (\d+)\))?")
_CF_RULE = re.compile(r"^={20,}\s*$")

# Python tracebacks
_TB_HEAD = "Traceback (most recent call last):"
_FRAME = re.compile(r'^\s+File "([^"]+)", line (\d+)(?:, in (.+))?')
_EXC_LINE = re.compile(r"^((?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*))(?::(?:\s(.*))?)?$")
_EXC_SUFFIXES = ("Error", "Exception", "Exit", "Interrupt", "Warning", "Failure", "Timeout", "Fault", "Iteration", "Abort")

_LEVEL_ORDER = {"DEBUG": 0, "INFO": 1, "WARN": 2, "ERROR": 3}

# Canonical metric columns this reader may fill, with their dtypes (from schema).
_METRIC_COLS: dict[str, pl.DataType] = {
    "step": pl.Int64(), "loss": pl.Float64(), "lr": pl.Float64(), "step_time_ms": pl.Float64(),
    "samples_per_s": pl.Float64(), "tokens_per_s": pl.Float64(), "grad_norm": pl.Float64(),
    "mem_alloc_mb": pl.Float64(), "seq": pl.Int64(), "timeout_s": pl.Float64(),
    "duration_s": pl.Float64(), "exit_code": pl.Int64(), "peer_rank": pl.Int32(),
    "epoch": pl.Float64(), "collective": pl.String(), "process_group": pl.String(),
}


# The block state (see _Parser._switch) of workers' own lines on a console that names no node.
_WORKER = ("worker", None)


class _Row:
    __slots__ = ("line", "event", "level", "message", "rank", "rank_source", "host", "local_rank", "ts", "extra", "m", "reason", "raw")

    def __init__(self, line: int) -> None:
        self.line = line
        self.event: str | None = None
        self.level = "INFO"
        self.message: str | None = None
        self.rank: int | None = None
        self.rank_source = "none"
        self.host: str | None = None
        self.local_rank: int | None = None
        self.ts: str | None = None
        self.extra: dict[str, Any] | None = None
        self.m: dict[str, Any] | None = None
        self.reason: str | None = None    # set for rejects
        self.raw: bytes | None = None

    def put(self, **kv: Any) -> None:
        if self.m is None:
            self.m = {}
        for k, v in kv.items():
            if v is not None:
                self.m[k] = v

    def x(self, **kv: Any) -> None:
        if self.extra is None:
            self.extra = {}
        for k, v in kv.items():
            if v is not None:
                self.extra[k] = v

    def raise_level(self, level: str) -> None:
        if _LEVEL_ORDER[level] > _LEVEL_ORDER[self.level]:
            self.level = level


class _Traceback:
    __slots__ = ("head", "frames", "count", "last_line")

    def __init__(self, head: _Row) -> None:
        self.head = head
        self.frames: list[str] = []
        self.count = 1
        self.last_line = head.line


def _mb(value: str, unit: str) -> float | None:
    try:
        v = float(value)
    except ValueError:
        return None
    u = unit.upper()
    if u == "BYTES":
        return v / (1024 * 1024)
    scale = {"K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0 * 1024}.get(u[:1])
    return v * scale if scale is not None else None


def _num(s: str) -> float | None:
    s = s.strip().rstrip("%").strip()
    try:
        return float(s)
    except ValueError:
        return None


def _int(s: str | None) -> int | None:
    if s is None:
        return None
    try:
        return int(s)
    except ValueError:
        return None


def _ranks(s: str) -> list[int]:
    return [int(t) for t in re.findall(r"\d+", s)]


def _small_int(t: str) -> bool:
    """ASCII digits int() reads ('²' is a digit to str.isdigit; 5,000 digits are past int's limit)."""
    return t.isascii() and t.isdigit() and len(t) <= 12


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


def _is_host(name: str) -> bool:
    """A pdsh `name: ` prefix names a host only if it looks like one (a bare word is more often
    a program talking: `wandb: `, `srun: `, `ninja: `)."""
    if name == "localhost":
        return True
    if name in _NOT_HOSTS or name.startswith("python") or name.endswith(_HOST_SUFFIX_WORDS) or name.isdigit():
        return False
    return any(c.isdigit() for c in name)


class _Parser:
    """Line-by-line state machine over one console file (state survives block boundaries)."""

    def __init__(self, ctx: ReaderContext) -> None:
        self.ctx = ctx
        self.pending: list[_Row] = []           # rows not yet emitted, in line order
        self.open_tb: dict[tuple, _Traceback] = {}
        self.year: int | None = None
        self.month: int | None = None
        self.cf_section: str | None = None      # inside a ChildFailedError table
        self.cf: dict[str, Any] = {}
        self.hints: _Hints | None = None
        self.docker: bool | None = None         # Docker json-file log: one {"log": ...} per line
        self.meta: dict[int, tuple[Any, Any, bool, str]] = {}  # block index -> docker time, stream, partial, raw
        self.srun: bool | None = None           # lines carry srun --label task ids
        self.srun_nodes = False                 # ... and each task is a launcher (torchrun) of a node
        # Topology the log printed: node key (host, srun task, or None) -> {local rank: global rank}
        self.topo: dict[Any, dict[int, int]] = {}
        self.topo_restart: dict[Any, int] = {}
        self.topo_why: dict[Any, str] = {}      # node key -> what the log printed that maps it (extra.mapped_by)
        self.unmapped: list[tuple[_Row, Any]] = []  # this block's rows known only by local rank, with their node
        self.multi_node = False                 # a launcher said there is more than one node
        self.world: int | None = None
        self.nodes_seen: set[Any] = set()
        self.rdzv: dict[str, Any] | None = None  # torchrun "Rendezvous complete" block being read
        self.launch: dict[str, Any] | None = None  # torchrun "launch configs" block being read
        # The blocks above (cf_section/cf, rdzv, launch) belong to one writer: the launcher of one
        # node. Lines of other nodes and workers' own lines may be interleaved between a block's
        # lines; each node's open blocks are parked here while another node's (or a worker's)
        # line is read (see _switch).
        self.block_key: Any = None
        self.parked: dict[Any, tuple[Any, ...]] = {}
        self.ds_node_rank: int | None = None
        self.last_barrier: dict[Any, _Row] = {}
        self.node_key: Any = None               # node of the line being read
        self.raw_lines: list[bytes] | None = None
        self._rest = ""
        self.pid_rank: dict[tuple[Any, int], int] = {}  # (host, pid) -> global rank (NCCL init of a full-world comm)
        self.partial_head: dict[str, tuple[Any, ...]] = {}  # stream -> identity of a line cut by the collector
        self.last_binary: bool | None = None    # the previous block ended in binary garbage (None: no block yet)

    # -- block driver ---------------------------------------------------------------------------
    def feed(self, buf: bytes, first_line: int, final: bool) -> list[_Row]:
        """Parse the lines of `buf` (numbered from first_line); return the rows ready to emit."""
        text = buf.decode("utf-8", errors="replace")
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        self._unwrap_docker(lines)
        if self.srun is None:
            self._detect_srun(lines)
        hints = _Hints(lines, self.last_binary)
        self.last_binary = bool(hints.binary) and hints.binary[-1]
        self.raw_lines = buf.split(b"\n") if any(hints.binary) else None
        if self.year is None:
            # glog lines before the first full timestamp borrow the year of the block's first one
            first = next((i for i, y in enumerate(hints.year) if y is not None), None)
            if first is not None:
                self.year, self.month = hints.year[first], hints.month[first]
        self.hints = hints
        # One small object per line and no reference cycles: the cyclic collector would rescan
        # the growing row list over and over (measured: 3x the cost of the parse itself).
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            no = first_line
            for i, ln in enumerate(lines):
                try:
                    self._line(ln, no, i)
                except (ValueError, OverflowError) as e:   # a number past int()'s 4,300 digits, ...: this line only
                    r = self.pending[-1] if self.pending and self.pending[-1].line == no else None
                    if r is None:
                        r = _Row(no)
                        self.pending.append(r)
                    r.reason, r.raw = f"not read: {str(e)[:80]}", (ln + "\n").encode("utf-8", errors="replace")
                no += 1
        finally:
            if gc_was_enabled:
                gc.enable()
        return self._ready(final)

    def _unwrap_docker(self, lines: list[str]) -> None:
        """Docker's json-file driver writes `{"log": "<line>\\n", "stream": .., "time": ..}` per
        line: the log text is read as console text, its time and stream kept."""
        self.meta = {}
        if self.docker is None:
            self.docker = bool(lines) and lines[0].startswith('{"log":')
        if not self.docker:
            return
        for i, ln in enumerate(lines):
            if not ln.startswith('{"log":'):
                continue
            try:
                o = orjson.loads(ln)
            except orjson.JSONDecodeError:
                continue
            if isinstance(o, dict) and isinstance(o.get("log"), str):
                log = o["log"]
                self.meta[i] = (o.get("time"), o.get("stream"), not log.endswith("\n"), ln)
                lines[i] = log[:-1] if log.endswith("\n") else log

    def _detect_srun(self, lines: list[str]) -> None:
        """srun --label prefixes every line; a file where most of the first lines start with
        `N: ` is such a file. If those lines carry torchrun's per-worker prefixes, each srun task
        is a launcher (one per node), not a rank."""
        sample = [ln for ln in lines[:400] if ln.strip()]
        if not sample:
            return
        rests, widths, ids = [], set(), []
        for ln in sample:
            c = _CRI.match(ln)
            m = _SRUN_LABEL.match(ln, c.end() if c else 0)
            if m:
                rests.append(ln[m.end():])
                widths.add(m.end() - m.start())
                ids.append(int(m.group(1)))
        # srun pads every label to one width, and each task writes many lines; a program that
        # numbers its own lines (`9: ..`, `10: ..`) does neither
        self.srun = (len(sample) >= 2 and len(rests) * 2 > len(sample) and len(widths) == 1
                     and len(set(ids)) < len(ids))
        if self.srun:
            self.srun_nodes = any(_TEE_LOCAL.match(t) or "torch.distributed.elastic" in t or "torchrun" in t
                                  for t in rests)

    def _ready(self, final: bool) -> list[_Row]:
        if self.unmapped:
            self._map_unmapped()
        if final or not self.open_tb:
            for tb in self.open_tb.values():
                self._close_tb(tb, None)
            self.open_tb.clear()
            out, self.pending = self.pending, []
            return out
        cut = min(tb.head.line for tb in self.open_tb.values())
        if self.pending and self.pending[-1].line - cut >= _MAX_PENDING:
            # A traceback this long is not a traceback we can finish: emit what we know.
            for tb in self.open_tb.values():
                tb.head.x(incomplete=True)
            self.open_tb.clear()
            out, self.pending = self.pending, []
            return out
        k = 0
        while k < len(self.pending) and self.pending[k].line < cut:
            k += 1
        out, self.pending = self.pending[:k], self.pending[k:]
        return out

    # -- one line -------------------------------------------------------------------------------
    def _line(self, raw: str, no: int, i: int) -> None:
        line = raw[:-1] if raw.endswith("\r") else raw
        meta = self.meta.get(i) if self.meta else None
        binary = self.hints.binary[i]
        if binary or not line.strip():
            r = _Row(no)
            r.reason = BINARY if binary else "blank line"
            if binary and self.raw_lines is not None and i < len(self.raw_lines):
                r.raw = self.raw_lines[i] + b"\n"   # the bytes as written, not their decoding
            else:
                r.raw = (meta[3] if meta else raw + "\n").encode("utf-8", errors="replace")
            self.pending.append(r)
            return
        r = _Row(no)
        self.pending.append(r)
        if meta is not None:
            ts, stream, partial, _ = meta
            if isinstance(ts, str):
                r.ts = ts
            r.x(stream=stream if isinstance(stream, str) else None, partial=partial or None)
        body = self._prefixes(line, r)
        if r.extra is not None and "stream" in r.extra and (self.partial_head or r.extra.get("partial")):
            self._partial(r)
        if self.rdzv is not None or self.launch is not None or self.hints.topo[i]:
            self._topology(body, r)
        self._time_level(body, r, i)
        key = (r.rank, r.local_rank, r.host, r.extra.get("pid") if r.extra else None)

        # Traceback continuation for this stream?
        tb = self.open_tb.get(key)
        if tb is not None:
            if body[:1] in (" ", "\t") and body.strip():
                fm = _FRAME.match(body)
                if fm and len(tb.frames) < _MAX_FRAMES:
                    tb.frames.append(f"{fm.group(1)}:{fm.group(2)}" + (f" in {fm.group(3)}" if fm.group(3) else ""))
                tb.count += 1
                tb.last_line = no
                self._cont(r, body, tb, i)
                return
            em = _EXC_LINE.match(body.rstrip())
            if em and (em.group(2).endswith(_EXC_SUFFIXES) or em.group(2) in ("KeyboardInterrupt", "SystemExit")):
                tb.count += 1
                tb.last_line = no
                self._cont(r, body, tb, i)
                self._close_tb(tb, body.rstrip())
                del self.open_tb[key]
                if "ChildFailedError" in body:  # torchrun's own traceback ends where its table starts
                    self.cf_section, self.cf = "table", {}
                return
            self._close_tb(tb, None)
            del self.open_tb[key]

        # tqdm redraws with '\r' and no newline, so a traceback may start at the end of a line.
        if body.startswith(_TB_HEAD) or body.rstrip().endswith(_TB_HEAD):
            r.event = "TRACEBACK"
            r.level = "ERROR"
            r.message = body
            self.open_tb[key] = _Traceback(r)
            return

        r.message = body if len(body) <= _MAX_MESSAGE else body[:_MAX_MESSAGE]
        if len(body) > _MAX_MESSAGE:
            r.x(message_len=len(body))
        if not self._child_failed(body, r) and self.hints.trig[i]:
            self._typed(body, r)
        if r.event is None:
            r.event = "LOG"

    def _cont(self, r: _Row, body: str, tb: _Traceback, i: int) -> None:
        r.message = body if len(body) <= _MAX_MESSAGE else body[:_MAX_MESSAGE]
        # An indented line of a traceback is a frame or the source it quotes
        # (`raise torch.OutOfMemoryError(`): code, not an event that happened.
        if self.hints.trig[i] and body[:1] not in (" ", "\t"):
            self._typed(body, r)
        if r.event is None:
            r.event = "TRACEBACK_CONT"
            r.x(head=tb.head.line)
        else:
            r.x(traceback=tb.head.line)
        r.raise_level("ERROR")

    def _close_tb(self, tb: _Traceback, exc_line: str | None) -> None:
        h = tb.head
        h.x(frames=tb.frames, line_count=tb.count)
        if exc_line is not None:
            h.message = exc_line[:_MAX_MESSAGE]
            em = _EXC_LINE.match(exc_line)
            if em:
                h.x(exception=em.group(1))
        else:
            h.x(incomplete=True)

    # -- prefixes -------------------------------------------------------------------------------
    def _prefixes(self, line: str, r: _Row) -> str:
        """Consume routing prefixes (collector, srun/mpirun labels, host, Ray, torchrun, NCCL,
        glog); fill r; return the rest."""
        rest = line
        ctx = self.ctx
        prefix_rank: int | None = None
        local_from_tee: int | None = None
        task: int | None = None
        for k in range(10):
            c = rest[:1]
            if c == "[":
                m = _TORCHRUN.match(rest)
                if m and (rest[m.end():].strip() or not self._cf_open()):
                    role, n = m.group(1), int(m.group(2))
                    if role == "rank" or role == "":
                        prefix_rank = n
                    else:
                        local_from_tee = n
                        r.local_rank = n
                    rest = rest[m.end():]
                    if role == "rank" and rest.startswith(" "):
                        rest = rest[1:]
                    continue
                m = _MPI_TAG.match(rest)
                if m:
                    prefix_rank = int(m.group(2))
                    r.x(stream=m.group(3))
                    rest = rest[m.end():]
                    continue
                m = _GLOG.match(rest)
                if m:
                    self._glog(m, r)
                    rest = rest[m.end():]
                    continue
                if rest[1:3] in ("19", "20") and self._lead_ts(rest, r):
                    rest = self._rest
                    continue
                break
            if c == "(":
                m = _RAY.match(rest)
                if m:
                    r.x(actor=m.group(1), pid=int(m.group(2)))
                    if m.group(3):
                        r.host = m.group(3)
                    rest = rest[m.end():]
                    continue
                break
            if c.isdigit():
                m = _CRI.match(rest)
                if m:
                    r.ts = m.group(1)
                    r.x(stream=m.group(2), partial=True if m.group(3) == "P" else None)
                    rest = rest[m.end():]
                    continue
                if k == 0 and rest[10:11] == "T" and rest[:2] in ("19", "20"):
                    m = _JOURNAL_ISO.match(rest)
                    if m and (m.group(4) or m.group(3) == "kernel"):
                        r.ts = m.group(1)
                        r.host = m.group(2)
                        r.x(program=m.group(3), pid=_int(m.group(4)))
                        rest = rest[m.end():]
                        continue
                if rest[:2] in ("19", "20") and self._lead_ts(rest, r):
                    rest = self._rest
                    continue
            if self.srun and task is None and prefix_rank is None and (c.isdigit() or c == " "):
                m = _SRUN_LABEL.match(rest)
                if m:
                    task = int(m.group(1))
                    rest = rest[m.end():]
                    continue
            if c in "JFMASOND" and k == 0 or (c in "JFMASOND" and r.host is None and task is not None):
                m = _SYSLOG_HDR.match(rest)
                if m:
                    if self.year is not None:
                        r.ts = (f"{self.year:04d}-{_MONTHS[m.group(1)]:02d}-{int(m.group(2)):02d}"
                                f"T{m.group(3)}:{m.group(4)}:{m.group(5)}{m.group(6) or ''}")
                    r.host = m.group(7)
                    r.x(program=m.group(8), pid=_int(m.group(9)))
                    rest = rest[m.end():]
                    continue
            if c in "IWEF":
                m = _GLOG.match(rest)
                if m and m.group(2):
                    self._glog(m, r)
                    rest = rest[m.end():]
                    continue
            if c.isalnum():
                m = _NCCL.match(rest)
                if m:
                    r.host = m.group(1)
                    r.x(pid=int(m.group(2)), tid=int(m.group(3)))
                    r.local_rank = int(m.group(4))
                    rest = rest[m.end() - 1:].lstrip()
                    continue
                if r.host is None and prefix_rank is None:
                    m = _PDSH.match(rest)
                    if m and _is_host(m.group(1)):
                        r.host = m.group(1)
                        rest = rest[m.end():]
                        continue
            break

        pg_rank: int | None = None
        if "Rank " in rest:
            m = _RANK_INLINE.search(rest)
            if m:
                pg_id, guid, desc, n = m.group(1), m.group(2), m.group(3), int(m.group(4))
                default_pg = pg_id is None or pg_id == "0" or desc == "default_pg"
                if prefix_rank is not None:
                    pass                 # the line's own prefix already named the global rank
                elif default_pg:
                    prefix_rank = n
                else:
                    pg_rank = n
                if pg_id is not None:
                    r.put(process_group=desc or guid or pg_id)
                    r.x(pg=desc or guid or pg_id, pg_id=pg_id)
        if pg_rank is not None:
            r.x(pg_rank=pg_rank)

        if task is not None:
            if self.srun_nodes:
                r.x(srun_task=task)      # a launcher per node: the task is the node, not a rank
            else:
                r.x(srun_task=task)
                if prefix_rank is None and local_from_tee is None:
                    prefix_rank = task   # srun started the ranks itself: task id = SLURM_PROCID
        # the node this line comes from, for the topology the launcher printed
        key = r.host or ctx.host_hint or (("task", task) if task is not None and self.srun_nodes else None)
        self.node_key = key
        if key is not None:
            self.nodes_seen.add(key)
        # a worker's own line (it names its rank or local rank) is never part of its launcher's
        # block: it neither continues nor ends it
        if prefix_rank is not None or local_from_tee is not None or r.local_rank is not None:
            bkey = _WORKER if key is None else ("worker", key)
        else:
            bkey = key
        if bkey != self.block_key:
            self._switch(bkey)
        # a launcher's block ends at the first line of its node that is not one of its fields
        if self.launch is not None and not _LAUNCH_FIELD.match(rest):
            self.launch = None
        if self.rdzv is not None and not _RDZV_FIELD.match(rest):
            self._install_rdzv(r)

        if prefix_rank is not None:
            r.rank, r.rank_source = prefix_rank, "prefix"
        elif r.local_rank is not None and ctx.gpu_map:
            mapped = ctx.gpu_map.get((r.host or ctx.host_hint, r.local_rank))
            if mapped is None:
                mapped = ctx.gpu_map.get((None, r.local_rank))
            if mapped is not None:
                r.rank, r.rank_source = mapped, "gpu_map"
        if r.rank is None and self.pid_rank and r.extra and "pid" in r.extra:
            g = self.pid_rank.get((r.host, r.extra["pid"]))
            if g is not None:
                r.rank, r.rank_source = g, "mapped"
        if prefix_rank is not None and local_from_tee is not None:
            # `[default1]:[rank1]:`: torchrun's local-rank tee prefix and PyTorch's global-rank
            # prefix on one line of one process: that local rank of this node is that rank
            self._learn(key, local_from_tee, prefix_rank, "its own lines carry both [defaultN]: and [rankM]:")
        if r.rank is None and r.local_rank is not None and self.topo:
            self._map_local(r)
        if r.rank is None and r.local_rank is not None and ctx.rank_hint is None and len(self.unmapped) < _MAX_PENDING:
            self.unmapped.append((r, key))      # a mapping printed later in this block still applies
        if r.rank is None and ctx.rank_hint is not None:
            r.rank, r.rank_source = ctx.rank_hint, "path"
        if r.host is None:
            r.host = ctx.host_hint
        return rest

    def _partial(self, r: _Row) -> None:
        """Kubelet (`P`) and Docker (no trailing newline) cut long lines: the rest of a cut line
        carries no prefix of its own, it belongs to the rank of the line it continues."""
        stream = r.extra["stream"] if r.extra else None
        head = self.partial_head.pop(stream, None)
        if head is not None:
            rank, source, local, host, line = head
            if r.rank is None or r.rank_source == "path":
                r.rank, r.rank_source = rank, source
            if r.local_rank is None:
                r.local_rank = local
            r.host = r.host or host
            r.x(continues=line)
        if r.extra and r.extra.get("partial"):
            self.partial_head[stream] = head if head is not None else (r.rank, r.rank_source, r.local_rank, r.host, r.line)

    def _lead_ts(self, rest: str, r: _Row) -> bool:
        """A collector's timestamp (and Python logging's level) in front of a routing prefix:
        consume it (sets self._rest). Without a routing prefix behind it the line is left whole."""
        m = _LEAD_TS.match(rest)
        if not m or not _ROUTING.match(rest, m.end()):
            m = _LEAD_TS_BLOCK.match(rest)
            if not m or not _BLOCK_BODY.match(rest, m.end()):
                return False
        r.ts = m.group(1).replace(",", ".")
        word = m.group(2) or (m.group(3) if m.re is _LEAD_TS else None)
        if word:
            r.level = _LEVEL_MAP[word]
            r.x(collector_level=word)
        self._rest = rest[m.end():]
        return True

    def _learn(self, key: Any, local: int, rank: int, why: str) -> None:
        """A (node, local rank) -> rank pair the log states outside a launcher's topology block
        (a line with both prefixes, a ChildFailedError record). Two different ranks for one local
        rank of one node (consoles of several nodes merged without host names) map nobody."""
        if key in self.topo_restart:
            return                      # the rendezvous result of this node already says it all
        m = self.topo.setdefault(key, {})
        if self.topo_why.get(key) == "conflict":
            return
        if m.get(local, rank) != rank:
            self.topo[key] = {}
            self.topo_why[key] = "conflict"
            return
        m[local] = rank
        self.topo_why.setdefault(key, why)

    def _map_unmapped(self) -> None:
        """Rows of this block that named only a local rank, mapped by what the block printed after
        them (a ChildFailedError table, a line with both prefixes). Rows of earlier blocks are
        already written: they keep their local rank only."""
        if self.topo:
            for r, key in self.unmapped:
                if r.rank is None:
                    self._map_local(r, key)
        self.unmapped = []

    def _map_local(self, r: _Row, key: Any = ...) -> None:
        """Local rank -> global rank through the topology the launcher printed for this node.
        A mapping learned without a node name serves lines of other names only while the file
        shows a single node."""
        if key is ...:
            key = self.node_key
        m = self.topo.get(key)
        if m is None and key is not None and len(self.nodes_seen) <= 1:
            key = None
            m = self.topo.get(None)
        if m and r.local_rank in m:
            r.rank, r.rank_source = m[r.local_rank], "mapped"
            r.x(mapped_by=self.topo_why.get(key))

    def _glog(self, m: re.Match[str], r: _Row) -> None:
        r.level = _GLOG_LEVEL[m.group(1)]
        r.x(src=m.group(8))
        if m.group(2) and self.year is not None:
            mon, day = int(m.group(2)), int(m.group(3))
            year = self.year
            # The reference timestamp may sit on the other side of a new year.
            if self.month is not None and mon - self.month > 6:
                year -= 1
            elif self.month is not None and self.month - mon > 6:
                year += 1
            frac = f".{m.group(7)}" if m.group(7) else ""
            r.ts = f"{year:04d}-{mon:02d}-{day:02d}T{m.group(4)}:{m.group(5)}:{m.group(6)}{frac}"

    def _time_level(self, body: str, r: _Row, i: int) -> None:
        h = self.hints
        if r.ts is None:
            if h.ts[i] is not None:
                r.ts = h.ts[i]
                self.year, self.month = h.year[i], h.month[i]
            elif body[2:3] == "/" and body[5:6] == "/":
                m = _US_DATE.match(body)
                if m:
                    r.ts = f"{m.group(3)}-{m.group(1)}-{m.group(2)}T{m.group(4)}:{m.group(5)}:{m.group(6)}"
                    self.year, self.month = int(m.group(3)), int(m.group(1))
            elif self.year is not None and body[:3] in _MONTHS:
                m = _SYSLOG.match(body)
                if m:
                    r.ts = f"{self.year:04d}-{_MONTHS[m.group(1)]:02d}-{int(m.group(2)):02d}T{m.group(3)}:{m.group(4)}:{m.group(5)}"
        if r.extra is None or "src" not in r.extra:  # glog already set the level
            word = h.lvl[i]
            if word is None:
                m = _LEVEL_START.match(body)
                word = m.group(1) if m else None
            if word is not None:
                r.level = _LEVEL_MAP[word]
            elif h.err[i]:
                r.level = "ERROR"
            elif h.warn[i]:
                r.level = "WARN"

    # -- topology the launchers print -----------------------------------------------------------
    def _topology(self, body: str, r: _Row) -> None:
        """torchrun's rendezvous result and launch configs, DeepSpeed's rank mapping: what turns
        a local rank into a global one (see _map_local). State survives block boundaries."""
        if self.rdzv is not None:
            m = _RDZV_FIELD.match(body)
            if m:
                self.rdzv[m.group(1)] = m.group(2)
                if m.group(1) == "global_world_sizes":
                    self._install_rdzv(r)
                elif m.group(1) == "global_ranks":
                    self._apply_rdzv(self.rdzv)   # a worker's line may come before the block ends
                return
            self._install_rdzv(r)
        if self.launch is not None:
            m = _LAUNCH_FIELD.match(body)
            if m:
                self.launch[m.group(1)] = m.group(2)
                self._apply_launch(self.launch)
                return
            self.launch = None
        if "Rendezvous complete for workers" in body:
            self.rdzv = {"key": self.node_key}
        elif "launch configs:" in body and "elastic_operator" in body:
            self.launch = {"key": self.node_key}
        elif "global_rank_mapping=" in body:
            hosts = {h: [int(t) for t in re.findall(r"\d+", ranks)] for h, ranks in _DS_MAPPING.findall(body)}
            if not hosts:
                return
            for h, ranks in hosts.items():
                self.topo[h] = dict(enumerate(ranks))
                self.topo_why[h] = "DeepSpeed global_rank_mapping"
            names = list(hosts)
            if len(names) == 1:
                self.topo[None] = self.topo[names[0]]          # one node: local = its ranks
                self.topo_why[None] = "DeepSpeed global_rank_mapping (one node)"
            elif self.ds_node_rank is not None and self.ds_node_rank < len(names):
                if self.node_key not in self.topo:
                    self.topo[self.node_key] = self.topo[names[self.ds_node_rank]]
                    self.topo_why[self.node_key] = f"DeepSpeed global_rank_mapping (node_rank={self.ds_node_rank})"
            self.multi_node = self.multi_node or len(names) > 1
            self.world = sum(len(v) for v in hosts.values())
            r.x(global_rank_mapping=hosts)
        elif "num_local_procs=" in body:
            m = _DS_NODES.search(body)
            if m:
                self.ds_node_rank = int(m.group(3))
                self.multi_node = self.multi_node or int(m.group(1)) > 1
        elif "dist_world_size=" in body:
            m = _DS_WORLD.search(body)
            if m:
                self.world = int(m.group(1))

    def _install_rdzv(self, r: _Row) -> None:
        d, self.rdzv = self.rdzv, None
        assert d is not None
        local, glob, gws = self._apply_rdzv(d)
        r.x(topology={"group_rank": _int(d.get("group_rank")), "group_world_size": gws,
                      "local_ranks": local, "global_ranks": glob})

    def _apply_rdzv(self, d: dict[str, Any]) -> tuple[list[int], list[int], int | None]:
        """What a rendezvous result says so far: world size, more than one node, and this node's
        local -> global map (applied once per block)."""
        local = [int(t) for t in re.findall(r"-?\d+", d.get("local_ranks", ""))]
        glob = [int(t) for t in re.findall(r"-?\d+", d.get("global_ranks", ""))]
        gws = _int(d.get("group_world_size"))
        sizes = [int(t) for t in re.findall(r"\d+", d.get("global_world_sizes", ""))]
        if sizes:
            self.world = sizes[0]
        if gws is not None and gws > 1:
            self.multi_node = True
        if not local or len(local) != len(glob) or d.get("applied"):
            return local, glob, gws
        d["applied"] = True
        key, restart = d["key"], _int(d.get("restart_count")) or 0
        new = dict(zip(local, glob))
        old = self.topo.get(key)
        if old is not None and old != new and restart <= self.topo_restart.get(key, -1):
            # two agents' results under one name (consoles of several nodes merged without host
            # prefixes): neither can be told from the other, so neither maps
            self.topo[key] = {}
        else:
            self.topo[key] = new
            self.topo_restart[key] = restart
            self.topo_why[key] = f"torchrun rendezvous result (group_rank={d.get('group_rank', '?')})"
        return local, glob, gws

    def _apply_launch(self, d: dict[str, Any]) -> None:
        """What the launch configs say so far (applied field by field: a worker's line may come
        before the block ends)."""
        nmax, nproc = _int(d.get("max_nodes")), _int(d.get("nproc_per_node"))
        if nmax is not None and nmax > 1:
            self.multi_node = True
        elif nmax == 1 and nproc is not None:
            # a single-node launch: local rank = global rank for its workers
            if d["key"] not in self.topo:
                self.topo[d["key"]] = {i: i for i in range(nproc)}
                self.topo_why[d["key"]] = f"single-node launch (max_nodes=1, nproc_per_node={nproc}): local rank = rank"
            self.world = self.world or nproc

    def _switch(self, key: Any) -> None:
        """Make `key`'s open blocks (ChildFailedError table, rendezvous result, launch configs)
        the current ones, parking those of the node read before."""
        cur = (self.cf_section, self.cf, self.rdzv, self.launch)
        if cur[0] is not None or cur[2] is not None or cur[3] is not None:
            self.parked[self.block_key] = cur
        self.cf_section, self.cf, self.rdzv, self.launch = self.parked.pop(key, (None, {}, None, None))
        self.block_key = key

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

    # -- typed events ---------------------------------------------------------------------------
    def _typed(self, body: str, r: _Row) -> None:
        if ("monitoredBarrier" in body or "store based barrier" in body or "processed ranks" in body) and self._barrier(body, r):
            return
        # NCCL / c10d
        m = _WORK.search(body) if "WorkNCCL" in body else None
        if m and ("timeout" in body or "timing out" in body or "timed out" in body):
            r.event, r.level = "NCCL_TIMEOUT", "ERROR"
            timeout_ms = _int(m.group(5))
            ran_ms = _int(m.group(6))
            r.put(seq=int(m.group(1)), collective=m.group(2),
                  timeout_s=timeout_ms / 1000 if timeout_ms is not None else None,
                  duration_s=ran_ms / 1000 if ran_ms is not None else None)
            r.x(numel_in=_int(m.group(3)), numel_out=_int(m.group(4)), ran_for_ms=ran_ms)
            return
        a = _ASYNC_EXC.search(body) if m and "async exception" in body else None
        if m and a:
            r.event, r.level = "NCCL_ERROR", "ERROR"
            r.put(seq=int(m.group(1)), collective=m.group(2))
            r.x(nccl_error=a.group(1).strip()[:500], numel_in=_int(m.group(3)))
            return
        m = _WATCHDOG_AT.search(body) if "detected by watchdog at work" in body else None
        if m:
            error = m.group(1).startswith("NCCL error")
            r.event, r.level = ("NCCL_ERROR" if error else "NCCL_WATCHDOG"), "ERROR"
            r.put(seq=int(m.group(2)))
            r.x(last_enqueued=_int(m.group(3)), last_completed=_int(m.group(4)),
                cause="error" if error else ("timeout" if m.group(1).startswith("Work timeout") else None))
            return
        m = (_WATCHDOG_FAIL.search(body) if "work sequence id" in body else None) or (_TIMEOUT_AT.search(body) if "Timeout at NCCL work" in body else None)
        if m:
            r.event, r.level = "NCCL_WATCHDOG", "ERROR"
            r.put(seq=int(m.group(1)))
            r.x(last_enqueued=_int(m.group(2)), last_completed=_int(m.group(3)))
            return
        m = _DUMP_SIGNAL.search(body) if "dump signal" in body else None
        if m:
            r.event = "NCCL_DUMP_SIGNAL"
            own = m.group(1) == "this local rank"
            r.x(signal_from="self" if own else _int(m.group(2)),
                last_enqueued=_int(m.group(3)), last_completed=_int(m.group(4)))
            return
        culprits = (desync_ranks(body) if "lagging" in body or "] joined" in body or "] finished" in body
                    or "didn't join" in body else None)
        if culprits:
            r.event, r.level = "NCCL_DESYNC", "ERROR"
            sm = DESYNC_SEQ.search(body)
            r.put(seq=int(sm.group(1)) if sm else None)
            # TraceUtils' report names these as the lagging / dead / mismatched ranks
            r.x(culprit_ranks=culprits, missing_ranks=culprits)
            if len(culprits) == 1:
                r.put(peer_rank=culprits[0])
            return
        m = DESYNC_TIMEOUT_AT.search(body) if "Timeout at collective" in body else None
        if m:
            r.event, r.level = "NCCL_DESYNC", "ERROR"
            r.put(seq=int(m.group(3)), collective=m.group(2).strip())
            r.x(report="timeout_at", reporting_rank=int(m.group(1)))
            return
        if "CollectiveFingerPrint" in body or "mismatch between collectives" in body:
            self._fingerprint(body, r)
            return
        # memory
        if ("memory" in body or "Memory" in body) and _OOM.search(body):
            r.event, r.level = "CUDA_OOM", "ERROR"
            nums: dict[str, Any] = {}
            for name, pat in _OOM_FIELDS:
                if name not in nums:
                    om = pat.search(body)
                    if om:
                        nums[name] = _mb(om.group(1), om.group(2))
            others = [{"pid": int(p), "mb": _mb(v, u)} for p, v, u in _OOM_OTHERS.findall(body)]
            dm = _OOM_DEVICE.search(body)
            r.put(mem_alloc_mb=nums.get("allocated_mb"))
            r.x(**nums, other_processes=others or None, device=int(dm.group(1)) if dm else None)
            return
        m = _XID.search(body) if "Xid" in body else None
        if m:
            r.event, r.level = "GPU_XID", "ERROR"
            r.x(pci=m.group(1), xid=int(m.group(2)), detail=m.group(3))
            return
        if self._nccl_notice(body, r):
            return
        if "NCCL" in body or "nccl" in body:
            m = _NCCL_ERROR_IN.search(body) if "NCCL error in" in body else None
            n = _NCCL_ERROR_NAME.search(body) if "Error" in body or "Invalid" in body else None
            a = _NCCL_ABORTED.search(body) if "was aborted" in body else None
            if m or n or a:
                r.event, r.level = "NCCL_ERROR", "ERROR"
                r.x(nccl_error=n.group(1) if n else (m.group(2) if m else None),
                    where=m.group(1) if m else None, nccl_version=m.group(3) if m else None,
                    aborted_rank=int(a.group(1)) if a else None)
                return
        m = _CUDA_ERROR.search(body) if "CUDA error" in body else None
        if m:
            r.event, r.level = "CUDA_ERROR", "ERROR"
            r.x(cuda_error=m.group(1).strip())
            return
        # processes
        if self._killed(body, r):
            return
        # training progress
        if "iteration" in body:
            m = _MEGATRON_ITER.search(body)
            if m:
                r.event = "TRAIN_STEP"
                r.put(step=int(m.group(1)))
                r.x(train_iters=int(m.group(2)))
                _megatron_fields(m.group(3), r)
                return
            m = _MEGATRON_VAL.search(body)
            if m:
                r.event = "EVAL"
                im = _ITERATION_N.search(m.group(1))
                r.put(step=int(im.group(1)) if im else None)
                _megatron_fields(m.group(2), r)
                return
            m = _MEGATRON_MEM.search(body)
            if m:
                r.event = "GPU_MEMORY"
                r.put(step=int(m.group(1)), mem_alloc_mb=float(m.group(2)))
                r.x(max_allocated_mb=float(m.group(3)),
                    reserved_mb=float(m.group(4)) if m.group(4) else None,
                    max_reserved_mb=float(m.group(5)) if m.group(5) else None)
                # Ranks print concurrently: a second report can land on the same physical line.
                more = [
                    {"rank": int(mm.group(1)), "step": int(mm.group(2)), "allocated_mb": float(mm.group(3)),
                     "max_allocated_mb": float(mm.group(4))}
                    for mm in _MEGATRON_MEM_ALL.finditer(body, m.end())
                ]
                if more:
                    r.x(interleaved=more)
                return
        m = _TIMERS.search(body) if "time (ms)" in body else None
        if m:
            timers = {}
            for part in m.group(1).split("|"):
                k, _, v = part.partition(":")
                val = _num(v)
                if k.strip() and val is not None:
                    timers[k.strip()] = val
            if timers:
                r.event = "STEP_TIMERS"
                r.x(timers_ms=timers)
                return
        m = _DS_THROUGHPUT.search(body) if "global_step=" in body else None
        if m:
            r.event = "TRAIN_STEP"
            r.put(step=int(m.group(3)), samples_per_s=float(m.group(5)), epoch=float(m.group(1)),
                  mem_alloc_mb=float(m.group(6)) * 1024 if m.group(6) else None)
            r.x(micro_step=int(m.group(2)), running_avg_samples_per_s=float(m.group(4)),
                max_mem_allocated_mb=float(m.group(7)) * 1024 if m.group(7) else None)
            return
        m = _DS_STEP.search(body) if "step=" in body else None
        if m:
            r.event = "TRAIN_STEP"
            lrs = [v for v in (_num(t) for t in m.group(3).split(",")) if v is not None]
            r.put(step=int(m.group(1)), lr=lrs[0] if lrs else None)
            r.x(skipped=int(m.group(2)), lrs=lrs if len(lrs) > 1 else None)
            return
        m = _HF_DICT.search(body) if body.rstrip().endswith("}") else None
        if m:
            _hf_dict(m.group(1), r)
            return
        m = _FREE_STEP.search(body) if "tep" in body else None
        lm = _FREE_LOSS.search(body, m.end()) if m else None
        if m and lm:
            r.event = "TRAIN_STEP"
            lr, ms = _FREE_LR.search(body, m.end()), _FREE_MS.search(body, m.end())
            r.put(step=int(m.group(1)), loss=_num(lm.group(1)), lr=_num(lr.group(1)) if lr else None,
                  step_time_ms=_num(ms.group(1)) if ms else None)
            return

    def _fingerprint(self, body: str, r: _Row) -> None:
        """TORCH_DISTRIBUTED_DEBUG=DETAIL (ProcessGroupWrapper.cpp): a rank's own fingerprint
        ("Running collective: ..", INFO), the mismatch error naming this rank's and a peer's
        fingerprints (COLLECTIVE_MISMATCH: seq, op, shape, dtypes of each, and what differs), and
        a monitored barrier that failed before the check (BARRIER_TIMEOUT: the collective is kept,
        the missing ranks come on the next line)."""
        pairs = mismatch_pairs(body) if "is running collective" in body else []
        if pairs:
            own, fp, peer, pfp = pairs[0]
            r.event, r.level = "COLLECTIVE_MISMATCH", "ERROR"
            if r.rank is None or r.rank_source == "path":
                r.rank, r.rank_source = own, "record"
            r.put(seq=fp.get("seq"), collective=fp.get("op"), peer_rank=peer)
            seqs = {str(own): fp.get("seq"), str(peer): pfp.get("seq")}
            r.x(peer_seq=pfp.get("seq"), peer_collective=pfp.get("op"), named_ranks=[own, peer],
                seq_by_rank={k: v for k, v in seqs.items() if v is not None} or None,
                fingerprint=fp or None, peer_fingerprint=pfp or None, differ=fingerprint_diff(fp, pfp) or None)
            return
        m = RUNNING_COLLECTIVE.search(body)
        fm = m or FINGERPRINT.search(body)
        fp = fingerprint(fm.group(0)) if fm else {}
        r.put(seq=fp.get("seq"), collective=fp.get("op"))
        r.x(fingerprint=fp or None)
        if m:
            r.event = "LOG"             # every rank logs its own fingerprint before each collective
        elif "Monitored Barrier encountered error" in body:
            r.event, r.level = "BARRIER_TIMEOUT", "ERROR"
            r.x(barrier="monitored_barrier")
        else:
            r.event, r.level = "COLLECTIVE_MISMATCH", "ERROR"

    def _barrier(self, body: str, r: _Row) -> bool:
        """monitoredBarrier and store-based barrier timeouts: BARRIER_TIMEOUT, naming the ranks
        that did not arrive when the text names them (extra.missing_ranks)."""
        m = _MB_FAILED.search(body)
        if m:
            r.event, r.level = "BARRIER_TIMEOUT", "ERROR"
            r.put(timeout_s=int(m.group(2)) / 1000)
            r.x(barrier="monitored_barrier", missing_ranks=_ranks(m.group(1)))
            return True
        m = _MB_TIMED_OUT.search(body)
        if m:
            # rank 0 ran out of time before it reached the next rank: the ranks after the
            # processed ones were never checked, so none of them is named
            r.event, r.level = "BARRIER_TIMEOUT", "ERROR"
            r.put(timeout_s=int(m.group(2)) / 1000)
            r.x(barrier="monitored_barrier", passed_ranks=_ranks(m.group(3)) if m.group(3) else None)
            self.last_barrier[self.node_key] = r
            return True
        m = _MB_PROCESSED.search(body)
        if m:
            head = self.last_barrier.pop(self.node_key, None)
            if head is not None and head in self.pending[-3:]:
                head.x(passed_ranks=_ranks(m.group(1)) if m.group(1) else [])
                r.x(head=head.line)
            return False
        m = _MB_REACHED.search(body)
        if m:
            r.event, r.level = "BARRIER_TIMEOUT", "ERROR"
            if r.rank is None or r.rank_source == "path":
                r.rank, r.rank_source = int(m.group(1)), "record"
            r.put(peer_rank=int(m.group(2)))
            r.x(barrier="monitored_barrier", reached=True)
            return True
        m = _STORE_BARRIER.search(body)
        if m:
            r.event, r.level = "BARRIER_TIMEOUT", "ERROR"
            if r.rank is None or r.rank_source == "path":
                r.rank, r.rank_source = int(m.group(1)), "record"
            h, _, rest = m.group(5).partition(":")
            mi, _, sec = rest.partition(":")
            try:
                r.put(timeout_s=int(h) * 3600 + int(mi) * 60 + float(sec))
            except ValueError:
                pass
            world, arrived = int(m.group(3)), int(m.group(4))
            # the store counts arrivals, it does not say who: how many are missing, not which
            r.x(barrier="store_based_barrier", store_key=m.group(2), world_size=world, arrived=arrived,
                missing_count=max(world - arrived, 0))
            return True
        return False

    def _nccl_notice(self, body: str, r: _Row) -> bool:
        """Informational ProcessGroupNCCL / NCCL lines whose numbers matter later: the periodic
        work status, Flight Recorder dump notices, a stuck watchdog, NCCL's communicator init."""
        m = _WORK_STATUS.search(body) if "Work update periodically" in body else None
        if m:
            r.x(last_enqueued=int(m.group(1)), last_completed=int(m.group(2)))
            return True
        m = _FR_DUMP.search(body) if "NCCL" in body else None
        if m:
            r.x(fr_dump=m.group(1).rstrip("."))
            return True
        if "flight recorder dump signal" in body or "flight-recorder dump signal" in body:
            r.x(fr_signal="broadcast" if "Broadcasting" in body else "observed")
            return True
        m = _WATCHDOG_STUCK.search(body) if "got stuck" in body else None
        if m:
            r.x(watchdog_stuck_s=int(m.group(1)))
            return False
        m = _NCCL_COMM.search(body) if "comm 0x" in body else None
        if m:
            rank, nranks = int(m.group(2)), int(m.group(3))
            r.x(nccl_comm=m.group(1), nccl_rank=rank, nccl_nranks=nranks,
                nccl_nnodes=_int(m.group(4)), nccl_local_ranks=_int(m.group(5)))
            pid = r.extra.get("pid") if r.extra else None
            if self.world is not None and nranks == self.world and pid is not None:
                # a communicator over the whole world (the default PG's, or a group of all ranks,
                # whose ranks c10d sorts): its NCCL rank is the global rank of this process
                self.pid_rank[(r.host, pid)] = rank
                if r.rank is None:
                    r.rank, r.rank_source = rank, "mapped"
            return True
        return False

    def _killed(self, body: str, r: _Row) -> bool:
        m = _CANCELLED.search(body) if "CANCELLED" in body else None
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
            if m.group(4) is not None:
                r.event, r.level = "CHILD_FAILED", "ERROR"
                r.put(exit_code=int(m.group(4)))
                r.x(by="slurm")
            elif m.group(3) == "Out Of Memory":
                # slurmstepd saw the cgroup's OOM killer end these tasks: host memory
                r.event, r.level = "PROCESS_KILLED", "ERROR"
                r.x(signal="SIGKILL", by="oom_killer", reported_by="slurm")
            else:
                r.event, r.level = "PROCESS_KILLED", "ERROR"
                r.x(signal="SIGKILL" if m.group(3) == "Killed" else "SIGTERM", by="slurm")
            r.x(tasks=tasks, task_list=_task_list(tasks))
            return True
        m = _SLURM_OOM.search(body) if "oom" in body else None
        if m:
            r.event, r.level = "PROCESS_KILLED", "ERROR"
            r.x(signal="SIGKILL", by="oom_killer", reported_by="slurm", oom_kill_events=int(m.group(1)),
                slurm_step=m.group(2))
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


def _megatron_fields(text: str, r: _Row) -> None:
    """`key: value | key: value` pairs of a Megatron log line onto columns / extra."""
    other: dict[str, Any] = {}
    for part in text.split("|"):
        k, sep, v = part.partition(":")
        k = k.strip().lower()
        if not sep or not k:
            continue
        val = _num(v)
        if k == "elapsed time per iteration (ms)":
            r.put(step_time_ms=val)
        elif k == "learning rate":
            r.put(lr=val)
        elif k in ("lm loss", "lm loss value"):
            r.put(loss=val)
        elif k == "grad norm":
            r.put(grad_norm=val)
        elif k == "samples per second":
            r.put(samples_per_s=val)
        elif k in ("tokens per second", "tokens/sec"):
            r.put(tokens_per_s=val)
        elif k.endswith(" loss") and (r.m is None or "loss" not in r.m):
            r.put(loss=val)
            other[k.replace(" ", "_")] = val
        else:
            other[k.replace(" ", "_")] = val if val is not None else v.strip()
    if other:
        r.x(**other)


_HF_COLUMNS = {
    "loss": "loss", "learning_rate": "lr", "grad_norm": "grad_norm", "epoch": "epoch",
    "step": "step", "train_samples_per_second": "samples_per_s", "train_loss": "loss",
    "eval_loss": "loss", "eval_samples_per_second": "samples_per_s",
}


def _hf_dict(text: str, r: _Row) -> None:
    """HF Trainer's printed `{'loss': 1.76, 'learning_rate': 0.001, 'epoch': 0.05}`."""
    vals: dict[str, Any] = {}
    for k, v in _HF_PAIR.findall(text):
        v = v.strip()
        num = _num(v)
        vals[k] = num if num is not None else v.strip("'")
    if not vals:
        return
    if any(k.startswith("eval_") for k in vals):
        r.event = "EVAL"
    elif "train_runtime" in vals:
        r.event = "TRAIN_SUMMARY"
    elif "loss" in vals or "learning_rate" in vals:
        r.event = "TRAIN_STEP"
    else:
        return
    other: dict[str, Any] = {}
    for k, v in vals.items():
        col = _HF_COLUMNS.get(k)
        if col is not None and isinstance(v, float):
            if col == "step":
                r.put(step=int(v))
            elif r.m is None or col not in r.m:
                r.put(**{col: v})
        else:
            other[k] = v
    if other:
        r.x(**other)


# ---------------------------------------------------------------------------------------------
# Frames
# ---------------------------------------------------------------------------------------------


_I32 = range(-2**31, 2**31)


def _in_int32(r: _Row) -> None:
    """A rank or GPU index a store cannot hold (Int32) is left out and kept as text in extra."""
    for name in ("rank", "local_rank"):
        v = getattr(r, name)
        if v is not None and v not in _I32:
            setattr(r, name, None)
            r.x(**{f"{name}_out_of_range": str(v)[:40]})
            if name == "rank":
                r.rank_source = "none"


def _extra_json(extra: dict[str, Any]) -> str:
    d = {k: v for k, v in extra.items() if v is not None}
    try:
        return orjson.dumps(d).decode()
    except orjson.JSONEncodeError:   # an int beyond 64 bits (a pid of 30 digits): as text
        from .bounds import json_safe

        return orjson.dumps(json_safe(d), default=str).decode()


def _to_block(rows: list[_Row]) -> Block:
    ev = [r for r in rows if r.reason is None]
    rj = [r for r in rows if r.reason is not None]
    for r in ev:
        if r.rank is not None and r.rank not in _I32 or r.local_rank is not None and r.local_rank not in _I32:
            _in_int32(r)
    used: set[str] = set()
    for r in ev:
        if r.m:
            used.update(r.m)
    cols: dict[str, pl.Series] = {
        "line": pl.Series("line", [r.line for r in ev], dtype=pl.Int64),
        "rank": pl.Series("rank", [r.rank for r in ev], dtype=pl.Int32),
        "rank_source": pl.Series("rank_source", [r.rank_source for r in ev], dtype=pl.String).cast(RankSource),
        "host": pl.Series("host", [r.host for r in ev], dtype=pl.String),
        "local_rank": pl.Series("local_rank", [r.local_rank for r in ev], dtype=pl.Int32),
        "level": pl.Series("level", [r.level for r in ev], dtype=pl.String).cast(Level),
        "event": pl.Series("event", [r.event for r in ev], dtype=pl.String),
        "message": pl.Series("message", [r.message for r in ev], dtype=pl.String),
        "extra": pl.Series(
            "extra",
            [_extra_json(r.extra) if r.extra else None for r in ev],
            dtype=pl.String,
        ),
    }
    for name in sorted(used):
        cols[name] = pl.Series(name, [r.m.get(name) if r.m else None for r in ev], dtype=_METRIC_COLS[name], strict=False)
    ts = pl.DataFrame({"ts": [r.ts for r in ev]}, schema={"ts": pl.String})
    cols["timestamp"] = ts.select(parse_timestamp(pl.col("ts")).alias("timestamp")).to_series()
    events = pl.DataFrame(cols)
    rejects = rejects_frame([(r.line, r.reason, r.raw or b"", len(r.raw or b"")) for r in rj])
    return Block(events, rejects, len(rows), ranks=_ranks_named(ev))


def _ranks_named(ev: list[_Row]) -> tuple[int, ...]:
    """Ranks the log shows besides the events' own: a second Megatron memory report glued onto
    another's line (`_MEGATRON_MEM_ALL`, kept in extra), and the ranks a launcher says it
    started -- DeepSpeed's `global_rank_mapping={'localhost': [0, 1]}` (launcher/launch.py),
    torchrun's rendezvous result `global_ranks=[4, 5, 6, 7]` (elastic agent)."""
    out: set[int] = set()
    for r in ev:
        x = r.extra
        if not x:
            continue
        out.update(int(g["rank"]) for g in x.get("interleaved", ()))
        for ranks in (x.get("global_rank_mapping") or {}).values():
            out.update(int(k) for k in ranks)
        out.update(int(k) for k in ((x.get("topology") or {}).get("global_ranks") or ()))
    return tuple(sorted(out))


def read_console(path: str, stream: BinaryIO, ctx: ReaderContext) -> Iterator[Block]:
    """Console text of one file (or byte range) -> Blocks of events, in line order."""
    parser = _Parser(ctx)
    line = ctx.first_line
    for chunk in iter_chunks(stream, ctx.block_bytes):
        rows = parser.feed(chunk, line, final=False)
        line += chunk.count(b"\n") + (0 if chunk.endswith(b"\n") else 1)
        if rows:
            yield _to_block(rows)
    rows = parser._ready(final=True)
    if rows:
        yield _to_block(rows)


read = read_console
