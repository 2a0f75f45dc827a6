"""The console parser: a line-by-line state machine over one file (state survives block
boundaries); the mixins hold its questions (prefixes, times, topology, exits, typed events).
"""
from __future__ import annotations

import gc
from typing import Any

import orjson

from ..binary import BINARY
from ..formats import ReaderContext
from .collectives import _Collectives
from .exits import _Exits
from .hints import _Hints
from .prefixes import _CRI, _Prefixes, _SRUN_LABEL, _TEE_LOCAL
from .marks import lead_rfc3339, local_rank_of_path
from .row import _MAX_FRAMES, _MAX_MESSAGE, _MAX_PENDING, _Row
from .timestamps import _Times
from .topology import _Topology
from .tracebacks import _EXC_LINE, _EXC_SUFFIXES, _FRAME, _TB_HEAD, _Traceback, _Tracebacks
from .typed import _Typed


class _Parser(_Prefixes, _Times, _Topology, _Tracebacks, _Exits, _Typed, _Collectives):
    """Line-by-line state machine over one console file (state survives block boundaries)."""

    def __init__(self, ctx: ReaderContext) -> None:
        self.ctx = ctx
        self.pending: list[_Row] = []           # rows not yet emitted, in line order
        self.open_tb: dict[tuple, _Traceback] = {}
        self.last_err: dict[tuple, int] = {}    # stream -> line of its last error (an exception's head)
        self.cpp_bt: dict[tuple, int] = {}      # stream -> head of the native backtrace being read (-1: none)
        self.cur_key: tuple | None = None
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
        self.hvd_stall: dict[Any, int] = {}     # (rank, host) -> line of Horovod's open "Stalled ranks:" list
        self.node_key: Any = None               # node of the line being read
        self.raw_lines: list[bytes] | None = None
        self._rest = ""
        self.pid_rank: dict[tuple[Any, int], int] = {}  # (host, pid) -> global rank (NCCL init of a full-world comm)
        self.partial_head: dict[str, tuple[Any, ...]] = {}  # stream -> identity of a line cut by the collector
        self.last_binary: bool | None = None    # the previous block ended in binary garbage (None: no block yet)
        self.path_local = local_rank_of_path(ctx.path)  # a torchrun --log-dir worker file: its local rank
        self.lead_ts: bool | None = None        # every line starts with a collector's RFC 3339 time
        self.task_failed: int | None = None     # line of srun's first report of a task's own failure
        self.proc_name: tuple[int, int] | None = None  # mpirun / horovodrun "Process name:" (rank, line) awaiting its exit code
        self.spawn_raised: tuple[int, int] | None = None  # mp.spawn's "-- Process N terminated with the following error:" (N, line)

    # -- block driver ---------------------------------------------------------------------------
    def feed(self, buf: bytes, first_line: int, final: bool) -> list[_Row]:
        """Parse the lines of `buf` (numbered from first_line); return the rows ready to emit."""
        text = buf.decode("utf-8", errors="replace")
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        self._unwrap_docker(lines)
        if self.lead_ts is None:
            self.lead_ts = lead_rfc3339(lines)
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
                    last = self.pending[-1] if self.pending else None
                    if last is not None and last.line == no and last.level == "ERROR" and self.cur_key is not None:
                        self._note_error(last, self.cur_key)
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
        self.cur_key = key

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

        if self._cpp_backtrace(body, r, key):
            return

        # tqdm redraws with '\r' and no newline, so a traceback may start at the end of a line.
        if body.startswith(_TB_HEAD) or body.rstrip().endswith(_TB_HEAD):
            r.event = "TRACEBACK"
            r.level = "ERROR"
            r.message = body
            named = self._spawn_rank(r)
            self.open_tb[key] = _Traceback(r, named)
            return

        r.message = body if len(body) <= _MAX_MESSAGE else body[:_MAX_MESSAGE]
        if len(body) > _MAX_MESSAGE:
            r.x(message_len=len(body))
        if self.hvd_stall and self._horovod_stalled_rank(body, r):
            return
        if not self._child_failed(body, r) and self.hints.trig[i]:
            self._typed(body, r)
        if r.event is None:
            r.event = "LOG"
