"""The console reader: torchrun / DeepSpeed / Megatron / NCCL / HF console text -> events.

Owns: rank attribution from console prefixes, timestamps written in the line (ISO, DeepSpeed,
HF, glog, torch elastic, syslog), levels, and the typed events that post-mortems hinge on:
NCCL_TIMEOUT, NCCL_WATCHDOG, NCCL_DUMP_SIGNAL, NCCL_DESYNC, COLLECTIVE_MISMATCH, NCCL_ERROR, CUDA_OOM,
CUDA_ERROR, GPU_XID, TRACEBACK (+ TRACEBACK_CONT), CHILD_FAILED, PROCESS_KILLED,
JOB_CANCELLED, TRAIN_STEP, EVAL, TRAIN_SUMMARY, GPU_MEMORY, STEP_TIMERS. Every other non-blank
line is kept as event LOG. Must not write files, guess a rank, or drop a line: every physical
line is exactly one event or one reject (only blank lines are rejected).

Rank attribution, first match wins (rank_source in parentheses):
- `[rank3]:` (PyTorch >= 2.3 prefixes every line of a failing rank with its GLOBAL rank) and
  `[3]:` (torchrun with log_line_prefix_template "[${rank}]:")               -> rank 3 (prefix)
- `[default3]:` / `[trainer3]:` torchrun --tee: the number is the LOCAL rank. It becomes the
  rank (prefix) unless the line also carries a host (pdsh prefix), because on a multi-node
  console local rank 3 exists once per node; ctx.gpu_map[(host, 3)] wins when given (gpu_map).
  local_rank is always set.
- `host:pid:tid [3] NCCL INFO`: the number is NCCL's cudaDev, a device index, not a rank:
  local_rank 3 and host; rank only through ctx.gpu_map.
- `[Rank 3]` / `[PG ID 0 PG GUID 0(default_pg) Rank 3]` inside the text (c10d, DeepSpeed
  log_dist, Megatron memory report)                                         -> rank 3 (prefix);
  for a PG other than the default one that number is the rank inside the group: it goes to
  extra.pg_rank, not to rank.
- `hostname: ` (pdsh, DeepSpeed multi-node) and Ray's `(RayTrainWorker pid=.., ip=..)` give host
  (and extra.pid); they never give a rank.
- nothing: rank = ctx.rank_hint (path) for a per-rank file, else null with rank_source "none"
  (the launcher, or a worker nobody named). Never rank 0 by default.

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
from .formats import ReaderContext
from .jsonl import Block, rejects_frame
from .normalize import parse_timestamp
from .sources import iter_chunks

# A traceback longer than this (or left open this many lines) is emitted as it stands.
_MAX_PENDING = 20_000
_MAX_MESSAGE = 65_536
_MAX_FRAMES = 200

# ---------------------------------------------------------------------------------------------
# Prefixes
# ---------------------------------------------------------------------------------------------
_TORCHRUN = re.compile(r"\[(rank|[A-Za-z_][A-Za-z_\-]*?|)(\d+)\]:")
_RAY = re.compile(r"\(([\w.\-]+) pid=(\d+)(?:, ip=([\d.a-fA-F:]+))?\)\s?")
_NCCL = re.compile(r"([\w.\-]+):(\d+):(\d+) \[(\d+)\] ")
_PDSH = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.\-]{0,62}): ")
_GLOG = re.compile(
    r"\[?([IWEF])(?:(\d\d)(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d+))?)?(?:\s+\d+)?\s+([\w.\-/]+:\d+)\]\s?"
)
_RANK_INLINE = re.compile(
    r"\[(?:PG (?:ID )?(\S+?)(?: PG GUID (\S+?))?(?:\s*\(([^)]*)\))? )?Rank (\d+)\]"
)
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
    "WorkNCCL", "watchdog", "Watchdog", "lagging", "desync", "dump signal", "CollectiveFingerPrint", "NCCL", "nccl",
    "out of memory", "OutOfMemory", "CUDA error", "Xid", "exitcode", "exit code", "return code", "SIG",
    "Signal ", "Killed", "Killing", "killed", "CANCELLED", "iteration", "(MB)", "time (ms)", "step=", "{'",
]
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

    __slots__ = ("trig", "err", "warn", "lvl", "ts", "year", "month")

    def __init__(self, lines: list[str]) -> None:
        line = pl.col("l")
        head = line.str.slice(0, 600)
        out = pl.DataFrame({"l": lines}, schema={"l": pl.String}).select(
            line.str.contains_any(_TRIGGER_WORDS).alias("trig"),
            head.str.contains_any(_ERROR_WORDS).alias("err"),
            head.str.contains_any(_WARN_WORDS).alias("warn"),
            line.str.slice(0, 200).str.extract(_LEVEL_VEC, 1).alias("lvl"),
            head.str.extract(_ISO_VEC, 1).str.replace(r"^(.{10})[ _]", "${1}T")
            .str.replace(",", ".", literal=True).alias("ts"),
        )
        ts = out["ts"]
        self.trig: list[bool] = out["trig"].to_list()
        self.err: list[bool] = out["err"].to_list()
        self.warn: list[bool] = out["warn"].to_list()
        self.lvl: list[str | None] = out["lvl"].to_list()
        self.ts: list[str | None] = ts.to_list()
        self.year: list[int | None] = ts.str.slice(0, 4).cast(pl.Int32).to_list()
        self.month: list[int | None] = ts.str.slice(5, 2).cast(pl.Int32).to_list()


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
_DUMP_SIGNAL = re.compile(
    r"Received a (?:global )?dump signal (?:due to a collective timeout )?from\s+(this local rank|rank\s*(\d+))"
    r"(?:.*?Last enqueued (?:\w+ )?work: (-?\d+), last completed (?:\w+ )?work: (-?\d+))?"
)
_DESYNC = re.compile(
    r"ranks \[([\d,\s]+)\] are the lagging ranks"
    r"|lagging/dead/mismatched ranks[^\[]*\[([\d,\s]+)\]"
    r"|^\s*-\s*\[([\d,\s]+)\] (?:joined but didn't finish|finished collective|didn't join)"
)
_FINGERPRINT_PAIR = re.compile(
    r"Rank (\d+) is running collective: CollectiveFingerPrint\(SequenceNumber=(\d+),\s*OpType=(\w+)"
    r".*?but Rank (\d+) is running collective: CollectiveFingerPrint\(SequenceNumber=(\d+),\s*OpType=(\w+)"
)
_FINGERPRINT = re.compile(r"CollectiveFingerPrint\((?:[^)]*?)SequenceNumber=(\d+)(?:,\s*OpType=(\w+))?")
_NCCL_ERROR_IN = re.compile(r"NCCL error in: ([^,]+), (.+?)(?:, NCCL version ([\d.]+))?$")
_NCCL_ERROR_NAME = re.compile(r"\b(nccl(?:UnhandledCuda|System|Internal|Remote)Error|ncclInvalid(?:Argument|Usage))\b")
_NCCL_ABORTED = re.compile(r"NCCL communicator was aborted on rank (\d+)")
_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory")
_MEM = r"([\d.]+) ?([KMGT]i?B|bytes)"
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
_HF_PAIR = re.compile(r"'([\w/.\-]+)': ('(?:[^'\\]|\\.)*'|[^,}]+)")
_SIGNAL_RECEIVED = re.compile(r"Signal (\d+) \((SIG\w+)\) received by PID (\d+)")
_KILLING = re.compile(r"Killing subprocess (\d+)")
_KERNEL_OOM = re.compile(r"(?:Out of memory|Memory cgroup out of memory): Killed process (\d+) \(([^)]*)\)|oom-kill:|oom_reaper")
_BASH_KILLED = re.compile(r"\b(\d+) Killed\b")
_RECEIVED_SIG = re.compile(r"received (SIG[A-Z]+)")
_SRUN = re.compile(r"srun: error: ([\w.\-]+): tasks? ([\d\-,]+): (Killed|Terminated|Exited with exit code (\d+))")
_DS_EXIT = re.compile(r"exits with return code = (-?\d+)")
_LOCAL_RANK_ARG = re.compile(r"--local[_-]rank[= ]'?(\d+)")
_ELASTIC_FAILED = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: (\d+)\)")
_CANCELLED = re.compile(r"\*\*\* (JOB|STEP) (\S+) ON (\S+) CANCELLED AT (\S+)(?: DUE TO ([^*]+?))? \*\*\*")
_SIGKILL = re.compile(r"SIGKILL|Signal 9\b|signal 9\b")
_CLOSING = re.compile(r"Sending process (\d+) closing signal (SIG\w+)")

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

    # -- block driver ---------------------------------------------------------------------------
    def feed(self, buf: bytes, first_line: int, final: bool) -> list[_Row]:
        """Parse the lines of `buf` (numbered from first_line); return the rows ready to emit."""
        text = buf.decode("utf-8", errors="replace")
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        hints = _Hints(lines)
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
                self._line(ln, no, i)
                no += 1
        finally:
            if gc_was_enabled:
                gc.enable()
        return self._ready(final)

    def _ready(self, final: bool) -> list[_Row]:
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
        if not line.strip():
            r = _Row(no)
            r.reason = "blank line"
            r.raw = (raw + "\n").encode("utf-8", errors="replace")
            self.pending.append(r)
            return
        r = _Row(no)
        self.pending.append(r)
        body = self._prefixes(line, r)
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
        """Consume routing prefixes (host, Ray, torchrun, NCCL, glog); fill r; return the rest."""
        rest = line
        ctx = self.ctx
        prefix_rank: int | None = None
        local_from_tee: int | None = None
        for _ in range(6):
            c = rest[:1]
            if c == "[":
                m = _TORCHRUN.match(rest)
                if m and (self.cf_section is None or rest[m.end():].strip()):
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
                m = _GLOG.match(rest)
                if m:
                    self._glog(m, r)
                    rest = rest[m.end():]
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
        if prefix_rank is None and "Rank " in rest:
            m = _RANK_INLINE.search(rest)
            if m:
                pg_id, guid, desc, n = m.group(1), m.group(2), m.group(3), int(m.group(4))
                default_pg = pg_id is None or pg_id == "0" or desc == "default_pg"
                if default_pg:
                    prefix_rank = n
                else:
                    pg_rank = n
                if pg_id is not None:
                    r.put(process_group=desc or guid or pg_id)
        if pg_rank is not None:
            r.x(pg_rank=pg_rank)

        if prefix_rank is not None:
            r.rank, r.rank_source = prefix_rank, "prefix"
        elif r.local_rank is not None and ctx.gpu_map:
            mapped = ctx.gpu_map.get((r.host or ctx.host_hint, r.local_rank))
            if mapped is None:
                mapped = ctx.gpu_map.get((None, r.local_rank))
            if mapped is not None:
                r.rank, r.rank_source = mapped, "gpu_map"
        if r.rank is None and local_from_tee is not None and r.host is None:
            r.rank, r.rank_source = local_from_tee, "prefix"
        if r.rank is None and ctx.rank_hint is not None:
            r.rank, r.rank_source = ctx.rank_hint, "path"
        if r.host is None:
            r.host = ctx.host_hint
        return rest

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
        m = _DESYNC.search(body) if "lagging" in body or "] joined" in body or "] finished" in body or "didn't join" in body else None
        if m:
            culprits = _ranks(next(g for g in m.groups() if g))
            r.event, r.level = "NCCL_DESYNC", "ERROR"
            r.x(culprit_ranks=culprits)
            if len(culprits) == 1:
                r.put(peer_rank=culprits[0])
            return
        if "CollectiveFingerPrint" in body:
            m = _FINGERPRINT_PAIR.search(body)
            r.event, r.level = "COLLECTIVE_MISMATCH", "ERROR"
            if m:
                if r.rank is None or r.rank_source == "path":
                    r.rank, r.rank_source = int(m.group(1)), "record"
                r.put(seq=int(m.group(2)), collective=m.group(3), peer_rank=int(m.group(4)))
                r.x(peer_seq=int(m.group(5)), peer_collective=m.group(6))
            else:
                fm = _FINGERPRINT.search(body)
                if fm:
                    r.put(seq=int(fm.group(1)), collective=fm.group(2))
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

    def _killed(self, body: str, r: _Row) -> bool:
        m = _CANCELLED.search(body) if "CANCELLED" in body else None
        if m:
            r.event, r.level = "JOB_CANCELLED", "ERROR"
            r.host = m.group(3)
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
            else:
                r.event, r.level = "PROCESS_KILLED", "ERROR"
                r.x(signal="SIGKILL" if m.group(3) == "Killed" else "SIGTERM")
            r.x(tasks=tasks, by="slurm")
            return True
        m = _ELASTIC_FAILED.search(body) if "exitcode" in body else None
        if m:
            code = int(m.group(1))
            r.event, r.level = "CHILD_FAILED", "ERROR"
            r.local_rank = int(m.group(2))
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


def _to_block(rows: list[_Row]) -> Block:
    ev = [r for r in rows if r.reason is None]
    rj = [r for r in rows if r.reason is not None]
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
            [orjson.dumps({k: v for k, v in r.extra.items() if v is not None}).decode() if r.extra else None for r in ev],
            dtype=pl.String,
        ),
    }
    for name in sorted(used):
        cols[name] = pl.Series(name, [r.m.get(name) if r.m else None for r in ev], dtype=_METRIC_COLS[name], strict=False)
    ts = pl.DataFrame({"ts": [r.ts for r in ev]}, schema={"ts": pl.String})
    cols["timestamp"] = ts.select(parse_timestamp(pl.col("ts")).alias("timestamp")).to_series()
    events = pl.DataFrame(cols)
    rejects = rejects_frame([(r.line, r.reason, r.raw or b"", len(r.raw or b"")) for r in rj])
    return Block(events, rejects, len(rows))


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
