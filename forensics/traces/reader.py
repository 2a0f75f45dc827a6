"""Stream one Kineto (PyTorch profiler) Chrome trace into Arrow: GPU activities, launches, steps.

Owns: parsing a trace file incrementally (plain, gzip or zstd, recognised by its bytes), the
classification of a GPU activity (compute / communication / memcpy / memset / other, HTA's
rules by name), joining each activity to the CPU runtime call that launched it (`correlation`)
and to the ProfilerStep that call ran in, and the trace's `distributedInfo`. Must not compute
breakdowns (stats.py) nor write stores (ingest/kineto.py).

Memory: the JSON text is never held; about 1 MiB of the event list at a time is decoded (msgspec,
typed: only the fields used become objects; ijson where a piece does not parse, see
_iter_events) and only GPU activities, launches and steps are kept, as integer columns (array,
8 bytes a value: no Python object per kernel) plus a table of distinct names (kernel names are
long, distinct ones few). Peak memory grows with the number of GPU activities, not with the
trace size (CPU ops are most of a trace); the Arrow table is built once at the end, when a
kernel's launch and step (which may be written after it) are known.

Facts taken from the sources (Kineto libkineto/src/output_json.cpp; HTA hta/common/trace.py,
hta/utils/utils.py):
- A GPU activity is an "X" event whose args carry an integer `stream` (HTA: stream != -1);
  categories `kernel`, `gpu_memcpy`, `gpu_memset`, and device-side syncs. GPU annotations
  (`gpu_user_annotation`) are spans over kernels, not work, and are not activities here.
- Its launch is the `cuda_runtime`/`cuda_driver` event with the same `args.correlation`. All
  kernels of a CUDA graph share the correlation of their `cudaGraphLaunch`: each is kept.
- Its step is the ProfilerStep#N span (CPU side) that contains its launch's start (HTA
  add_iteration); a kernel whose launch is not in the trace has no step.
- `ts`/`dur` are microseconds (fractions = nanoseconds). Newer Kineto writes `ts` relative to
  `baseTimeNanoseconds` (written after `traceEvents`), older ones epoch microseconds.
"""
from __future__ import annotations

import re
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Iterator

import ijson
import msgspec
import orjson
import polars as pl
import pyarrow as pa

from ..errors import UNREADABLE, ForensicsError
from ..schema import KERNEL_SCHEMA as _KERNEL_COLUMNS

# HTA hta/utils/utils.py: the classification by name, in this order.
_COMM = re.compile(r"^nccl.*Kernel")
_MEMORY = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
_STEP = re.compile(r"ProfilerStep\s*#\s*(\d+)")
_COLLECTIVE = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)", re.I)
_WORKER = re.compile(r"(?i)(?:worker|rank)[_\-]?(\d+)")
_EPOCH_US = 1e15            # epoch microseconds after 2001-09-09: smaller is a relative clock
_RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "runtime", "hip_runtime"}
_GPU_CATS = {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset", "cuda_sync", "mtia_ccp_events"}
# HTA get_idle_time_breakdown: syncs are excluded from the per-stream gaps
IDLE_CATS = ("kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset", "mtia_ccp_events")
CATEGORIES = ("compute", "communication", "memcpy", "memset", "other")
BATCH_ROWS = 1 << 16

KERNEL_SCHEMA = pl.DataFrame(schema=_KERNEL_COLUMNS).to_arrow().schema
STRING_COLUMNS = ("category", "cat", "name", "collective", "launch")
# KERNEL_SCHEMA with its string columns as dictionaries (iter_kernel_batches(dictionary=True))
DICT_SCHEMA = pa.schema([pa.field(f.name, pa.dictionary(pa.int32(), f.type)) if f.name in STRING_COLUMNS else f
                         for f in KERNEL_SCHEMA])
STEP_SCHEMA = pa.schema([
    ("rank", pa.int32()), ("step", pa.int32()), ("start_ns", pa.int64()), ("dur_ns", pa.int64()),
    ("line", pa.int64()),
])


def category(name: str, cat: str | None = None) -> str:
    """compute / communication / memcpy / memset / other, by HTA's rules on the name."""
    if _COMM.match(name):
        return "communication"
    if _MEMORY.match(name) or cat in ("gpu_memcpy", "gpu_memset"):
        return "memset" if name.startswith("Memset") or cat == "gpu_memset" else "memcpy"
    if not _NOT_COMPUTE.match(name):
        return "compute"
    return "other"


@dataclass
class TraceInfo:
    path: str
    rank: int | None = None
    rank_source: str = "none"          # record | path | none
    world_size: int | None = None
    backend: str | None = None
    base_ns: int | None = None         # baseTimeNanoseconds
    absolute: bool = False             # start_ns are epoch ns
    offset_ns: int = 0                 # added to the trace's ts to make start_ns (the base, or 0)
    trace_name: str | None = None
    device_name: str | None = None
    events: int = 0                    # trace events read
    gpu_activities: int = 0
    problems: list[str] = field(default_factory=list)   # damaged stream, bad JSON: what was read is kept
    last_bytes: bytes = b""            # the last bytes read, when the trace is cut or damaged
    span_ns: tuple[int, int] | None = None   # first start, last end of any "X" event (trace clock)
    # collectives that run on the CPU (gloo): (line, name, ts_ns, dur_ns or None), trace clock
    cpu_collectives: list[tuple[int, str, int, int | None]] = field(default_factory=list)


@dataclass
class KinetoTrace:
    info: TraceInfo
    kernels: pa.Table                  # KERNEL_SCHEMA
    steps: pa.Table                    # STEP_SCHEMA


class _Tail:
    """A stream wrapper keeping the last bytes read and the bytes before "traceEvents" (the
    top-level keys written around the event list: distributedInfo before, baseTimeNanoseconds
    after)."""

    KEEP = 1 << 16

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw
        self.head = bytearray()
        self.head_done = False
        self.tail = b""
        self.nbytes = 0

    def read(self, n: int = -1) -> bytes:
        b = self.raw.read(n)
        self.nbytes += len(b)
        if not self.head_done:
            self.head += b
            if b'"traceEvents"' in self.head or len(self.head) > (8 << 20):
                self.head_done = True
        self.tail = (self.tail + b)[-self.KEEP:]
        return b


CHUNK = 1 << 20           # bytes of events decoded per call: ~2,500 events alive at a time
# bytes per read, as ijson reads: a damaged compressed stream loses what one read had decompressed
READ = 1 << 16
_WS = b" \t\r\n"
_LIST_START = re.compile(rb'"traceEvents"\s*:\s*\[')


class _Args(msgspec.Struct, gc=False):
    """The args of a trace event this reader looks at; the decoder skips every other key (most
    of a trace's bytes: shapes, pads, counters) without making objects for them."""
    stream: Any = None
    device: Any = None
    correlation: Any = None


class _Event(msgspec.Struct, gc=False):
    ph: Any = None
    cat: Any = None
    name: Any = None
    ts: Any = None
    dur: Any = None
    args: _Args | None = None   # None too when an event parsed another way has args that are not an object


_DECODE = msgspec.json.Decoder(list[_Event]).decode


def _event(e: Any) -> _Event | None:
    """A trace event parsed some other way (a dict) as the fast path gives it; None: not an object."""
    if not isinstance(e, dict):
        return None
    a = e.get("args")
    args = _Args(a.get("stream"), a.get("device"), a.get("correlation")) if isinstance(a, dict) else None
    return _Event(e.get("ph"), e.get("cat"), e.get("name"), e.get("ts"), e.get("dur"), args)


def _decode(piece: bytes) -> list[Any]:
    """One piece of the event list (text of a JSON list) -> its events. msgspec decodes the
    fields above only; a piece it cannot type (an event that is not an object, args that are
    not one) is parsed by orjson and converted. Invalid JSON raises orjson.JSONDecodeError."""
    try:
        return _DECODE(piece)
    except msgspec.ValidationError:
        pass
    except msgspec.DecodeError as ex:      # not JSON (or an integer beyond 64 bits): say so as orjson would
        raise orjson.JSONDecodeError(str(ex), "", 0) from None
    except RecursionError:                 # nested past the decoder's limit: ijson, bounded, takes it
        raise orjson.JSONDecodeError("nested too deep", "", 0) from None
    return [_event(e) for e in orjson.loads(piece)]


MAX_DEPTH = 64   # nesting kept inside one trace event (Kineto's args: 2-3 levels); deeper is dropped
TOO_DEEP = "<nested deeper than 64 levels: not read>"


def _ijson_events(stream: Any) -> Iterator[_Event | None]:
    """The items of the top-level `traceEvents` list, built from ijson's prefix-free events with
    their nesting bounded while streaming: a value deeper than MAX_DEPTH inside an event is
    replaced by TOO_DEEP and its parts are never built. (ijson.items keeps a prefix string per
    level: args nested 100,000 deep in a 200 KB trace took 24 GB.)"""
    depth = 0                        # containers open in the whole document
    in_list = False                  # inside the top-level traceEvents list (depth 2)
    key1: Any = None                 # the last top-level key
    stack: list[list[Any]] = []      # [container, pending key] of the event being built
    skip = 0                         # containers open below the depth limit
    for ev, val in ijson.basic_parse(stream, use_float=True):
        if ev == "start_map" or ev == "start_array":
            depth += 1
            if skip or (in_list and len(stack) >= MAX_DEPTH):
                skip += 1
            elif in_list:
                stack.append([{} if ev == "start_map" else [], None])
            elif depth == 2 and ev == "start_array" and key1 == "traceEvents":
                in_list = True
            continue
        if ev == "end_map" or ev == "end_array":
            depth -= 1
            if skip:
                skip -= 1
                if skip:
                    continue
                val, done = TOO_DEEP, None
            elif in_list and stack:
                done = stack.pop()[0]
                val = done
            else:
                if in_list and depth == 1:
                    in_list = False
                continue
            if not stack:
                yield _event(val)
                continue
            ev = "value"
        elif skip:
            continue
        if ev == "map_key":
            if stack:
                stack[-1][1] = val
            elif depth == 1:
                key1 = val
            continue
        if stack:                    # a value (scalar, or a container just closed) into its parent
            top = stack[-1]
            if isinstance(top[0], dict):
                top[0][top[1]] = val
            else:
                top[0].append(val)
        elif in_list:
            yield _event(val)        # a scalar item: not an event


class _Chain:
    """Bytes already read, then the rest of a stream (what ijson reads after a fallback)."""

    def __init__(self, first: bytes, rest: Any) -> None:
        self.first, self.rest = first, rest

    def read(self, n: int = -1) -> bytes:
        if self.first:
            out = self.first if n < 0 else self.first[:n]
            self.first = self.first[len(out):]
            return out
        return self.rest.read(n)


def _boundaries(buf: bytes, tries: int = 4) -> Iterator[int]:
    """Offsets of the last few `}` + `,` + `{` separators in buf (whitespace allowed between):
    each may end one trace event and start the next. One inside a string or a nested list of
    objects is not a boundary: the parse of the text before it fails and the next one is tried."""
    q = len(buf)
    found = 0
    for _ in range(10_000):
        q = buf.rfind(b"{", 0, q)
        if q <= 0:
            return
        j = q - 1
        while j >= 0 and buf[j] in _WS:
            j -= 1
        if j > 0 and buf[j] == 0x2C:           # ,
            j -= 1
            while j >= 0 and buf[j] in _WS:
                j -= 1
            if j >= 0 and buf[j] == 0x7D:      # }
                yield j + 1
                found += 1
                if found == tries:
                    return


def _object_rest(rest: bytes) -> bool:
    """Whether `rest` (what follows the event list) closes the top-level object as JSON."""
    rest = rest.strip()
    if rest == b"}":
        return True
    if not rest.startswith(b","):
        return False
    try:
        return isinstance(orjson.loads(b"{" + rest[1:]), dict)
    except orjson.JSONDecodeError:
        return False


def _fill(src: Any, buf: bytes, want: int) -> tuple[bytes, bool]:
    """buf and what follows it in src, up to `want` bytes; True when src has ended."""
    parts, n = [buf], len(buf)
    while n < want:
        b = src.read(READ)
        if not b:
            return b"".join(parts), True
        parts.append(b)
        n += len(b)
    return b"".join(parts), False


def _iter_events(src: Any) -> Iterator[Any]:
    """The items of the top-level `traceEvents` list, in order, one at a time (_Event-like:
    ph, cat, name, ts, dur, args.stream/device/correlation; None for an item that is not an
    object).

    Fast path: the list's text is cut at separators between events, about CHUNK bytes at a time,
    and each piece is decoded whole in C (msgspec, typed: only the fields above become objects).
    A cut is only accepted when the text before it parses as a list: text cut inside a string or
    a nested object never does, so every piece starts at a true event boundary. Whatever the fast
    path cannot place (no top-level `traceEvents` list in the first 8 MiB, damaged or cut text)
    goes on through ijson from where the fast path stopped, so an error is reported after the
    same event as a plain ijson reading would."""
    buf = b""
    m = None
    while True:
        b = src.read(READ)
        buf += b
        m = _LIST_START.search(buf)
        if m or not b or len(buf) > (8 << 20):
            break
    if m is not None:
        try:
            head = orjson.loads(buf[:m.start()] + b'"traceEvents": []}')
        except orjson.JSONDecodeError:
            head = None
        if not isinstance(head, dict):   # not the top-level key (or no JSON object around it)
            m = None
    if m is None:
        yield from _ijson_events(_Chain(buf, src))
        return
    buf = buf[m.end():]
    eof = False
    while True:
        if not eof and len(buf) < CHUNK:
            buf, eof = _fill(src, buf, CHUNK)
        if eof:
            # the end of the list, then the keys after it: cut at the list's closing bracket
            events = None
            end = buf.rfind(b"]")
            for _ in range(64):
                if end < 0:
                    break
                try:
                    events = _decode(b"[" + buf[:end + 1])
                    break
                except orjson.JSONDecodeError:
                    end = buf.rfind(b"]", 0, end)
            if events is not None and not _object_rest(buf[end + 1:]):
                events = None     # the keys after the list are cut or damaged: ijson says where
            if events is None:
                yield from _ijson_events(_Chain(b'{"traceEvents": [' + buf, src))
            else:
                yield from events
            return
        events = None
        tried = False
        for cut in _boundaries(buf):
            tried = True
            try:
                events = _decode(b"[" + buf[:cut] + b"]")
            except orjson.JSONDecodeError:
                continue
            buf = buf[buf.index(b"{", cut):]
            break
        if events is None:
            # no separator yet (one event longer than a piece): read on; separators that all fail
            # (damaged text): ijson from here, to say where
            if not tried and len(buf) < (64 << 20):
                buf, eof = _fill(src, buf, len(buf) + CHUNK)
                continue
            yield from _ijson_events(_Chain(b'{"traceEvents": [' + buf, src))
            return
        yield from events


def _top_level(tail: _Tail) -> dict[str, Any]:
    """The small top-level keys (distributedInfo, deviceProperties, baseTimeNanoseconds, ...).

    The head is parsed as JSON closed right after its `"traceEvents":` key, the tail as the
    object that follows the event list (keys of either that are not there are just missing)."""
    out: dict[str, Any] = {}
    head = bytes(tail.head)
    m = re.search(rb'"traceEvents"\s*:', head)
    if m:
        try:
            obj = orjson.loads(head[:m.start()] + b'"traceEvents": []}')
            if isinstance(obj, dict):
                out.update(obj)
        except orjson.JSONDecodeError:
            pass
    # after the list: Kineto's finalizeTrace writes traceName, displayTimeUnit and
    # baseTimeNanoseconds; another writer may put any key there. The list ends at one of the last
    # ']' bytes; the first from the end after which `{` + the rest parses is it.
    t = tail.tail
    pos = len(t)
    for _ in range(64):
        pos = t.rfind(b"]", 0, pos)
        if pos < 0:
            break
        rest = t[pos + 1:].lstrip()
        if not rest.startswith(b","):
            if rest.rstrip() == b"}":   # the list is the last key
                break
            continue
        try:
            obj = orjson.loads(b"{" + rest[1:])
        except orjson.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            for key, v in obj.items():
                out.setdefault(key, v)
        break
    return out


def _open(path: str) -> BinaryIO:
    from ..ingest.sources import GuardedStream, compression_of, open_binary

    try:
        with open(path, "rb") as f:
            comp = compression_of(f.read(4))
        return GuardedStream(open_binary(path, comp), comp) if comp != "none" else open_binary(path, comp)
    except OSError as e:
        raise ForensicsError(f"cannot read {path}", where=path, reason=e.strerror, code=UNREADABLE) from None


NS_MAX = 4 * 10**18   # |ts|, |dur| in ns kept: epoch ns to the 2090s, plus a base, still fit in int64


def _ns(v: Any) -> int | None:
    """Microseconds (int or float) -> ns; None for anything else, or a float beyond NS_MAX (inf,
    nan, 1e308)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    if isinstance(v, float) and not -NS_MAX <= v * 1000 <= NS_MAX:
        return None if v != v else (NS_MAX + 1 if v > 0 else -NS_MAX - 1)
    return int(round(v * 1000))


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        try:
            return int(v)
        except ValueError:
            return None
    return None


def read_trace(path: str | Path, stream: BinaryIO | None = None, rank_hint: int | None = None) -> KinetoTrace:
    """One trace file -> its GPU activities (joined to launches and steps), steps and info."""
    batches = list(iter_kernel_batches(path, stream, rank_hint, _info_out := []))
    info: TraceInfo = _info_out[0]
    kernels = pa.Table.from_batches(batches, schema=KERNEL_SCHEMA)
    return KinetoTrace(info, kernels, _info_out[1])


def iter_kernel_batches(path: str | Path, stream: BinaryIO | None = None, rank_hint: int | None = None,
                        out: list[Any] | None = None, batch_rows: int = BATCH_ROWS,
                        columns: list[str] | None = None, dictionary: bool = False) -> Iterator[pa.RecordBatch]:
    """Parse one trace incrementally; yield its GPU activities as Arrow batches (KERNEL_SCHEMA).

    The batches come after the whole file is read: a kernel's launch and step may be written
    after it. `out`, when given, receives [TraceInfo, steps table]. `columns`: only these
    columns of KERNEL_SCHEMA, in this order (default: all). `dictionary`: the string columns
    as dictionary arrays (codes into the trace's distinct names; DICT_SCHEMA's types): a few
    bytes a row instead of the name's, for a caller that keeps the whole table."""
    path = str(path)
    info = TraceInfo(path=path)
    names: dict[str, int] = {}
    cats: dict[str, int] = {}
    # GPU activities, as parallel integer columns (-1 = null for device/stream)
    k_name, k_cat, k_dev, k_stream = array("q"), array("q"), array("q"), array("q")
    k_ts, k_dur, k_corr, k_line = array("q"), array("q"), array("q"), array("q")
    # launches (runtime calls with a correlation id): 24 bytes each, joined to kernels at the end
    l_corr, l_ts, l_name = array("q"), array("q"), array("q")
    steps: list[tuple[int, int, int, int]] = []   # (step, ts_ns, dur_ns, line)

    raw = stream if stream is not None else _open(path)
    tail = _Tail(raw)
    i = 0
    t_lo: int | None = None
    t_hi: int | None = None
    # the loop runs once per trace event (millions): names bound locally, the branch that most
    # events take (CPU ops) decided with the fewest lookups
    gpu_cats, runtime_cats = _GPU_CATS, _RUNTIME_CATS
    name_id, cat_id = names.setdefault, cats.setdefault
    cpu_collectives = info.cpu_collectives
    odd_times = 0
    try:
        for e in _iter_events(tail):
            i += 1
            if e is None or e.ph != "X":
                continue
            ts = e.ts
            if type(ts) is int:
                ts *= 1000
            else:
                ts = _ns(ts)
                if ts is None:
                    continue
            dur = e.dur
            if type(dur) is int:
                dur *= 1000
            elif dur is not None:
                dur = _ns(dur)
            if not -NS_MAX <= ts <= NS_MAX or dur is not None and not -NS_MAX <= dur <= NS_MAX:
                odd_times += 1    # "ts": 1e308, 1e30, ...: no time a clock reads (was an OverflowError)
                continue
            if t_lo is None or ts < t_lo:
                t_lo = ts
            end = ts + dur if dur else ts
            if t_hi is None or end > t_hi:
                t_hi = end
            cat = e.cat
            name = e.name
            if type(name) is not str:
                name = str(name)
            if cat in gpu_cats:
                args = e.args
                st = None if args is None else args.stream
                if type(st) is not int:
                    st = _int(st)
                if st is not None and st != -1:
                    if dur is None:
                        continue
                    k_name.append(name_id(name, len(names)))
                    k_cat.append(cat_id(str(cat), len(cats)))
                    dev = args.device
                    if type(dev) is not int:
                        dev = _int(dev)
                    k_dev.append(-1 if dev is None else dev)
                    k_stream.append(st)
                    k_ts.append(ts)
                    k_dur.append(dur)
                    corr = args.correlation
                    if type(corr) is not int:
                        corr = _int(corr)
                    k_corr.append(-1 if corr is None else corr)
                    k_line.append(i)
                    continue
            elif cat in runtime_cats:
                corr = None if e.args is None else e.args.correlation
                if type(corr) is not int:
                    corr = _int(corr)
                if corr is not None and corr > 0:
                    l_corr.append(corr)
                    l_ts.append(ts)
                    l_name.append(name_id(name, len(names)))
                continue
            if name[:12] == "ProfilerStep":
                m = _STEP.match(name)
                if m and dur is not None:
                    steps.append((int(m.group(1)), ts, dur, i))
            elif (cat == "cpu_op" or cat == "user_annotation") and name[:5].lower() == "gloo:":
                cpu_collectives.append((i, name, ts, dur))
    except (ijson.JSONError, ijson.IncompleteJSONError) as ex:
        detail = " ".join(str(ex).split("\n")[0].split())[:200]   # yajl adds a caret drawing
        info.problems.append(f"invalid JSON after trace event {i}: {detail}")
    except (OSError, EOFError) as ex:
        info.problems.append(f"stream ends early after trace event {i}: {ex}")
    finally:
        if stream is None:
            raw.close()
    problem = getattr(raw, "problem", None)
    if problem:
        info.problems.append(problem)
    if odd_times:
        info.problems.append(f"{odd_times:,} trace event(s) with a time beyond ±{NS_MAX:.0e} ns (or not a number) skipped")
    if info.problems:
        info.last_bytes = tail.tail[-4096:]
    info.events = i
    info.gpu_activities = len(k_ts)
    if t_lo is not None and t_hi is not None:
        info.span_ns = (t_lo, t_hi)

    top = _top_level(tail)
    dist = top.get("distributedInfo") if isinstance(top.get("distributedInfo"), dict) else {}
    if isinstance(dist.get("rank"), int) and not isinstance(dist.get("rank"), bool):
        info.rank, info.rank_source = dist["rank"], "record"
    elif rank_hint is not None:
        info.rank, info.rank_source = rank_hint, "path"
    else:
        m = _WORKER.search(Path(path).name)
        if m:
            info.rank, info.rank_source = int(m.group(1)), "path"
    info.world_size = dist.get("world_size") if isinstance(dist.get("world_size"), int) else None
    info.backend = dist.get("backend") if isinstance(dist.get("backend"), str) else None
    info.trace_name = top.get("traceName") if isinstance(top.get("traceName"), str) else None
    devs = top.get("deviceProperties")
    if isinstance(devs, list) and devs and isinstance(devs[0], dict):
        info.device_name = devs[0].get("name")
    base = top.get("baseTimeNanoseconds")
    first = t_lo
    offset = 0
    if isinstance(base, int) and not isinstance(base, bool) and base > 0:
        info.base_ns = base
        # Kineto writes ts relative to the base; an epoch-looking ts already is absolute
        if first is not None and first < _EPOCH_US * 1000:
            offset = base
        info.absolute = True
    elif first is not None and first >= _EPOCH_US * 1000:
        info.absolute = True
    info.offset_ns = offset

    step_tab = pa.table({
        "rank": pa.array([info.rank] * len(steps), pa.int32()),
        "step": pa.array([s[0] for s in steps], pa.int32()),
        "start_ns": pa.array([s[1] + offset for s in steps], pa.int64()),
        "dur_ns": pa.array([s[2] for s in steps], pa.int64()),
        "line": pa.array([s[3] for s in steps], pa.int64()),
    }, schema=STEP_SCHEMA)
    if out is not None:
        out[:] = [info, step_tab]
    yield from _kernel_batches(info, offset, names, cats, (l_corr, l_ts, l_name), steps,
                               (k_name, k_cat, k_dev, k_stream, k_ts, k_dur, k_corr, k_line), batch_rows,
                               columns, dictionary)


def _kernel_batches(info: TraceInfo, offset: int, names: dict[str, int], cats: dict[str, int],
                    launches: tuple[array, array, array], steps: list[tuple[int, int, int, int]],
                    cols: tuple[array, ...], batch_rows: int,
                    columns: list[str] | None = None, dictionary: bool = False) -> Iterator[pa.RecordBatch]:
    import numpy as np

    k_name, k_cat, k_dev, k_stream, k_ts, k_dur, k_corr, k_line = (np.frombuffer(c, dtype=np.int64) if len(c) else np.zeros(0, np.int64) for c in cols)
    name_list = list(names)
    cat_list = list(cats)
    name_cat = np.array([category(n) for n in name_list] or [""], dtype=object)
    # a memcpy/memset activity is one by its trace category even when its name says little
    cat_kind = {c: ("memcpy" if c in ("gpu_memcpy", "Memcpy") else "memset" if c in ("gpu_memset", "Memset") else None)
                for c in cat_list}
    coll_list = np.array([(m.group(1) if (m := _COLLECTIVE.search(n)) else None) for n in name_list] or [None], dtype=object)
    n = len(k_ts)
    # launches of each activity, by correlation
    lc, lt, ln = (np.frombuffer(c, dtype=np.int64) if len(c) else np.zeros(0, np.int64) for c in launches)
    order = np.argsort(lc, kind="stable")        # of equal ids the last written wins (a dict would)
    lc, lt, ln = lc[order], lt[order], ln[order]
    at = np.searchsorted(lc, k_corr, side="right") - 1
    launched = (at >= 0) & (k_corr >= 0)
    launched[launched] = lc[at[launched]] == k_corr[launched]
    l_ts = np.where(launched, lt[np.clip(at, 0, None)] if len(lt) else 0, 0)
    l_name = np.where(launched, ln[np.clip(at, 0, None)] if len(ln) else -1, -1)
    # the step whose span holds the launch (HTA add_iteration)
    step_no = np.full(n, -1, np.int64)
    has_step = np.zeros(n, bool)
    for s, ts, dur, _ in sorted(steps, key=lambda s: s[1]):
        inside = (l_ts >= ts) & (l_ts < ts + dur) & launched
        step_no[inside] = s
        has_step |= inside
    # the columns straight in Arrow, each made once, in its final type (strings gathered by id
    # from the distinct names: one Python string per distinct name, not per row; no frame in
    # another library then a cast, each a copy of the table)
    def strings(values: list[Any]) -> pa.Array:
        return pa.array(values, pa.large_string())

    def take(values: pa.Array, idx: np.ndarray, null: np.ndarray | None = None) -> pa.Array:
        if dictionary:   # a null value is a null code (is_valid must say so)
            vnull = np.asarray(values.is_null().to_numpy(zero_copy_only=False), bool)
            if vnull.any():
                null = vnull[idx] if null is None else (null | vnull[idx])
            return pa.DictionaryArray.from_arrays(pa.array(idx.astype(np.int32), pa.int32(), mask=null), values)
        return values.take(pa.array(idx, pa.int64(), mask=null))

    name_arr = strings(name_list or [""])
    kind_idx = np.array([CATEGORIES.index(cat_kind[c]) if cat_kind.get(c) else -1 for c in cat_list] or [-1], np.int64)
    categ_idx = np.array([CATEGORIES.index(c) if c in CATEGORIES else 0 for c in name_cat], np.int64)
    by_kind = kind_idx[k_cat] if n else np.zeros(0, np.int64)
    categ = np.where(by_kind >= 0, by_kind, categ_idx[k_name] if n else by_kind)
    # built one batch at a time: only one batch's strings exist at once (the integer columns
    # above are ~100 bytes per activity; its strings several times that)
    builders = {
        "rank": lambda sl: (pa.nulls(sl.stop - sl.start, pa.int32()) if info.rank is None
                            else pa.array(np.full(sl.stop - sl.start, info.rank, np.int32))),
        "step": lambda sl: pa.array(step_no[sl].astype(np.int32), mask=~has_step[sl]),
        "device": lambda sl: pa.array(k_dev[sl].astype(np.int32), mask=k_dev[sl] < 0),
        "stream": lambda sl: pa.array(k_stream[sl].astype(np.int32)),
        "category": lambda sl: take(categ_arr, categ[sl]),
        "cat": lambda sl: take(cat_arr, k_cat[sl]),
        "name": lambda sl: take(name_arr, k_name[sl]),
        "collective": lambda sl: take(coll_arr, k_name[sl]),
        "start_ns": lambda sl: pa.array(k_ts[sl] + offset),
        "dur_ns": lambda sl: pa.array(k_dur[sl]),
        "correlation": lambda sl: pa.array(k_corr[sl], mask=k_corr[sl] < 0),
        "launch_ns": lambda sl: pa.array(l_ts[sl] + offset, mask=~launched[sl]),
        "launch": lambda sl: take(name_arr, l_name[sl], ~launched[sl]),
        "line": lambda sl: pa.array(k_line[sl]),
    }
    categ_arr, cat_arr, coll_arr = strings(list(CATEGORIES)), strings(cat_list or [""]), strings(list(coll_list))
    full = DICT_SCHEMA if dictionary else KERNEL_SCHEMA
    schema = full if columns is None else pa.schema([full.field(c) for c in columns])
    for lo in range(0, n, max(1, batch_rows)):
        sl = slice(lo, min(n, lo + batch_rows))
        yield pa.RecordBatch.from_arrays([builders[f.name](sl) for f in schema], schema=schema)
