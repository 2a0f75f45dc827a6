"""Which reader reads a file: content sniffing and the reader registry.

Owns the decision "what is this file" (by its bytes, not its name) and the list of readers.
Must not parse beyond the head of a file.

A reader is a function `read(path, stream, ctx) -> Iterator[Block]`: it gets the decompressed
byte stream of one file (or of a byte range of one plain JSONL file) and yields Blocks whose
`events` use canonical column names (see forensics.schema; `source_file` and `format` are
added by the caller) plus `line` (1-based line number in the file, or record index for binary
formats), and whose `rejects` carry `line`, `reason`, `raw`, `raw_len`. For every block,
`lines == events.height + rejects.height`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import BinaryIO, Callable, Iterator

from . import native
from .jsonl import Block

PICKLE_MAGIC = re.compile(rb"^\x80[\x02-\x05]")


# Input bytes a reader parses at a time (and small files joined per scanner call). A unit holds
# about two blocks' input and the table of one while it reads (-15 MiB peak RSS for 2 MiB instead
# of 4, both 490 MB benches: 64 and 4,096 files; same CPU).
BLOCK_BYTES = 2 << 20


@dataclass(frozen=True)
class ReaderContext:
    path: str                      # absolute path of the source file
    rank_hint: int | None          # rank named by the path, if any
    host_hint: str | None          # host named by the path, if any
    first_line: int = 1            # number of the stream's first line in the file
    at_eof: bool = True            # the stream ends where the file ends
    gpu_map: dict[tuple[str | None, int], int] = field(default_factory=dict)  # (host, gpu) -> rank
    block_bytes: int = BLOCK_BYTES
    schema_map: object = None      # roles.SchemaMap: the file is in another JSON schema (remap.py)


Reader = Callable[[str, BinaryIO, ReaderContext], Iterator[Block]]


def sniff(head: bytes, path: str) -> str:
    """Name of the format of a file from its first (decompressed) bytes.

    jsonl | hf_state | kineto | flight_recorder | nvidia_smi | dcgm | console | empty

    A UTF-8 byte order mark is skipped (the readers skip it too). Only a file of no bytes is
    "empty": one of blank lines is read (console), each blank line a reject, as anywhere else.
    Two or more lines that are each a whole JSON object are JSON lines, whatever keys they hold:
    a record with a "traceEvents" or "log_history" key made a log a profiler trace or a trainer
    state (one document: 5 lines read as 1).
    """
    if head.startswith(BOM):
        head = head[3:]
    if not head:
        return "empty"
    if head.isspace():   # (not head.strip(): that copies a head that ends in a newline)
        return "console"
    if PICKLE_MAGIC.match(head):
        return "flight_recorder"
    s = head.lstrip()
    if not s.startswith(b"{"):  # (counted only here: splitting the head costs per file)
        lines = [ln.strip() for ln in head.split(b"\n")[:200] if ln.strip()]
        json_like = sum(ln.startswith(b"{") for ln in lines)
        if json_like * 2 > len(lines):
            return "jsonl"  # a JSONL file whose first line is crash debris
    if s.startswith(b"{"):
        nl = s.find(b"\n")
        first = (s[:nl] if nl >= 0 else s).strip()   # slicing, not split: that copied the rest of the head
        if first.startswith(b'{"log":') and b'"stream":' in first:
            return "console"  # Docker json-file: console text in a JSON envelope (console/parser.py unwraps it)
        if nl >= 0 and first.endswith(b"}") and _next_line(s, nl).startswith(b"{"):
            return "jsonl"    # whole objects, one per line: records, not one document
        # the two searches of the whole head: native.find (most of sniff's time, per file)
        if native.find(head, b'"traceEvents"', 65536) >= 0 or b'"schemaVersion"' in first:
            return "kineto"
        if native.find(head, b'"log_history"', len(head)) >= 0 or (first == b"{" and b'"global_step"' in head):
            return "hf_state"
        return "jsonl"
    first_line = s.split(b"\n", 1)[0].lower()
    low = head[:4096].lower()
    if (b"dcgm_fi_" in low or first_line.replace(b" ", b"").startswith(b"#entity")
            or re.search(rb"(?m)^dcgm_[a-z_]+[{ ]", low)):  # pre-2.0 exporters: dcgm_gpu_temp{...}
        return "dcgm"
    if b"," in first_line and (b"utilization.gpu" in first_line or b"temperature.gpu" in first_line or
                               b"clocks.sm" in first_line or b"clocks.current.sm" in first_line or
                               (b"index" in first_line and b"timestamp" in first_line)):
        return "nvidia_smi"
    if _telemetry_header(first_line):
        return "nvidia_smi"   # a job's own GPU/host telemetry CSV: read as samples, not console text
    return "console"


# A CSV header of a job's own telemetry: a time column and >= 2 GPU metric columns, any naming
# (`timestamp,rank,host,gpu_temp_c,gpu_util_pct,sm_clock_mhz,power_w`); the reader maps the columns.
_TIME_COL = re.compile(rb"(?i)^\s*(?:timestamp|time|ts|date|datetime|time_stamp)\s*$")
_GPU_COL = re.compile(rb"(?i)^\s*(?:gpu[_.]?)?(?:temp|temperature|util|utilization|clocks?[_.]|sm_clock|power|mem(?:ory)?[_.]used)")


def _telemetry_header(first_line: bytes) -> bool:
    fields = first_line.split(b",")
    if len(fields) < 3 or any(f.strip()[:1].isdigit() for f in fields):
        return False
    return any(_TIME_COL.match(f) for f in fields) and sum(bool(_GPU_COL.match(f)) for f in fields) >= 2


BOM = b"\xef\xbb\xbf"


def _next_line(s: bytes, nl: int) -> bytes:
    """The first non-blank line after offset `nl` (a newline) of `s`, stripped (b"": none)."""
    while nl >= 0:
        end = s.find(b"\n", nl + 1)
        line = (s[nl + 1:end] if end >= 0 else s[nl + 1:]).strip()
        if line:
            return line
        nl = end
    return b""


# Each format's reader module. Besides JSON lines, readers for what real runs leave behind
# (console, telemetry, flight recorder, HF state, profiler traces).
_READER_MODULES = {"jsonl": "jsonl_reader", "console": "console", "nvidia_smi": "telemetry", "dcgm": "telemetry",
                   "flight_recorder": "flight_recorder", "hf_state": "hf_state", "kineto": "kineto"}
_READERS: dict[str, Reader | None] = {}


def reader_for(fmt: str) -> Reader | None:
    """The reader of a format (None: there is none), its module imported when first asked for:
    an ingest of JSON lines alone does not import the other readers (~65 ms of CPU)."""
    if fmt not in _READERS:
        _READERS[fmt] = _load_reader(fmt)
    return _READERS[fmt]


def _load_reader(fmt: str) -> Reader | None:
    module = _READER_MODULES.get(fmt)
    if module is None:
        return None
    try:
        mod = __import__(f"forensics.ingest.{module}", fromlist=["read"])
    except ImportError:
        if fmt == "jsonl":
            raise
        return None
    return getattr(mod, f"read_{fmt}", None) or getattr(mod, "read", None)
