"""PyTorch Flight Recorder (NCCL trace) dumps -> COLLECTIVE and PG_STATUS events; missing ranks.

Owns: loading a dump safely, turning its entries into events, `stuck_at`, the one rule naming the
ranks that never issued the collective a process group is stuck in (the pass stuck_collective and
`fr-table` call it), and `missing_ranks`, that rule applied to a set of loaded dumps.
Must not call pickle.load (a dump is untrusted input: unpickling can run code), read more than
MAX_DUMP_BYTES, or decide which missing rank is the root cause (a pass does that).

A dump is one pickle per rank (`_dump_<rank>`, written by TORCH_NCCL_DUMP_ON_TIMEOUT): a dict
with `entries` (ring buffer of collectives: collective_seq_id, profiling_name, process_group
(name, desc), state scheduled/started/completed, sizes, dtypes, time_created_ns ...),
`pg_config` (pg name -> desc, ranks), `pg_status` (local pg_id -> last enqueued / started /
completed collective), `version`. It is read with `SafeUnpickler`: no global is ever resolved,
and the result may only contain dict/list/tuple/str/bytes/int/float/bool/None.

Events: one COLLECTIVE per entry (line = entry index, 1-based) and one PG_STATUS per
`pg_status` record (line = len(entries) + its index), so `lines == events + rejects` counts
records. rank: the dump's own `rank` field (record) when present, else the path (`_dump_3`).
"""
from __future__ import annotations

import io
import math
import pickle
import re
from collections import defaultdict
from typing import Any, BinaryIO, Iterable, Iterator

import orjson
import polars as pl

from ..errors import UNREADABLE, ForensicsError
from ..schema import Level, RankSource
from .bounds import json_safe
from .formats import ReaderContext
from .jsonl import Block, rejects_frame

MAX_DUMP_BYTES = 64 << 20     # real dumps are a few MiB (a 2,000-entry ring buffer with stacks)
MAX_VALUES = 2_000_000        # values in the dump counted as a tree (a shared value once per use)
MAX_DEPTH = 100               # nesting (real dumps: < 10; orjson stops at 255)
# text in the dump counted as a tree (a shared string once per use): every walk after the load
# (the event builder's JSON, repr) writes each use. 20 entries sharing one 40 MB string took a
# 2.7 GB peak, 400 a MemoryError; a real dump's text is a few MiB (stack frames).
MAX_TREE_BYTES = 2 * MAX_DUMP_BYTES

# Element sizes of the dtype names the recorder writes (c10 ScalarType names).
DTYPE_BYTES: dict[str, int] = {
    "Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Short": 2, "Char": 1,
    "Byte": 1, "Bool": 1, "ComplexFloat": 8, "ComplexDouble": 16, "ComplexHalf": 4,
    "Float8_e4m3fn": 1, "Float8_e5m2": 1, "Float8_e4m3fnuz": 1, "Float8_e5m2fnuz": 1, "UInt16": 2,
    "UInt32": 4, "UInt64": 8,
}


class SafeUnpickler(pickle.Unpickler):
    """An unpickler that resolves no global: classes, functions and reducers are all refused."""

    def find_class(self, module: str, name: str) -> Any:  # noqa: D102 - see class docstring
        raise pickle.UnpicklingError(f"refused global {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:  # noqa: D102
        raise pickle.UnpicklingError("refused persistent id")


_SCALARS = frozenset({str, bytes, int, float, bool, type(None)})
_CONTAINERS = (dict, list, tuple)


def _check_types(obj: Any) -> None:
    """Walk the loaded value and refuse any other type, and any value that is too big or too deep
    *as a tree*.

    Without find_class a pickle can still build sets, frozensets and bytearrays from opcodes;
    none of them belongs in a dump. The pickle memo lets a 500-byte file share one tuple 60
    levels deep: loaded it is small, but every later walk (repr, JSON, the event builder) sees
    2**60 values. So each container's tree size and depth are computed once (memoised by
    identity, post-order) and the load is refused past MAX_VALUES or MAX_DEPTH: what is
    accepted is bounded for every walk after this one. The recursion is bounded by MAX_DEPTH
    (refused on the way down); a container of scalars only (most of a dump) is checked with one
    set of its element types rather than element by element.
    """
    if type(obj) in _SCALARS:
        return
    if type(obj) not in _CONTAINERS:
        raise pickle.UnpicklingError(f"refused value of type {type(obj).__name__}")
    memo: dict[int, tuple[int, int, int]] = {}
    keep: list[Any] = []  # holds the walked containers so ids stay unique during the walk
    _walk(obj, 1, memo, keep)


def _too_big(n: int, b: int) -> None:
    if n > MAX_VALUES:
        raise pickle.UnpicklingError(f"expands to more than {MAX_VALUES:,} values (shared through the pickle memo)")
    if b > MAX_TREE_BYTES:
        raise pickle.UnpicklingError(f"expands to more than {MAX_TREE_BYTES >> 20} MiB of text "
                                     "(a string shared through the pickle memo, counted at each use)")


def _walk(o: Any, level: int, memo: dict[int, tuple[int, int, int]], keep: list[Any]) -> tuple[int, int, int]:
    """(tree size, depth, bytes of its strings) of container `o`, a shared value counted at each
    use; raises UnpicklingError as _check_types says."""
    i = id(o)
    got = memo.get(i)
    if got is not None:
        if got[0] < 0:
            raise pickle.UnpicklingError("a value that contains itself")
        return got
    if level > MAX_DEPTH:
        raise pickle.UnpicklingError(f"nested deeper than {MAX_DEPTH} levels")
    memo[i] = (-1, 0, 0)  # in progress (a cycle through the memo is refused above)
    keep.append(o)
    parts = (o.keys(), o.values()) if type(o) is dict else (o,)
    n, d, b = 1, 0, 0
    for kids in parts:
        types = set(map(type, kids))
        n += len(kids)
        if str in types or bytes in types:
            b += sum(len(k) for k in kids if type(k) is str or type(k) is bytes)
        if types <= _SCALARS:
            continue
        for t in types:
            if t not in _SCALARS and t not in _CONTAINERS:
                raise pickle.UnpicklingError(f"refused value of type {t.__name__}")
        for k in kids:
            if type(k) in _CONTAINERS:
                ks, kd, kb = _walk(k, level + 1, memo, keep)
                n += ks - 1
                b += kb
                if kd > d:
                    d = kd
                _too_big(n, b)
    _too_big(n, b)
    if d + 1 > MAX_DEPTH:   # a shared (memoised) deep value reached from a shallow place
        raise pickle.UnpicklingError(f"nested deeper than {MAX_DEPTH} levels")
    memo[i] = (n, d + 1, b)
    return n, d + 1, b


def load_dump(stream: BinaryIO, where: str = "<stream>") -> dict[str, Any]:
    """Read and safely unpickle one Flight Recorder dump; ForensicsError if it is not one."""
    data = stream.read(MAX_DUMP_BYTES + 1)
    if len(data) > MAX_DUMP_BYTES:
        raise ForensicsError(
            f"flight recorder dump larger than {MAX_DUMP_BYTES >> 20} MiB",
            where=where,
            reason="dumps are a few MiB at most; this file is something else or corrupt",
            help="check the file, or leave it out of the ingest",
            code=UNREADABLE,
        )
    return loads_dump(data, where)


def loads_dump(data: bytes, where: str = "<bytes>") -> dict[str, Any]:
    try:
        obj = SafeUnpickler(io.BytesIO(data)).load()
        _check_types(obj)
    except Exception as e:  # noqa: BLE001 - untrusted bytes: any failure of the opcodes is "not a dump"
        raise ForensicsError(
            "cannot read flight recorder dump",
            where=where,
            reason=f"not a plain-data pickle: {e}",
            help="dumps hold only dicts, lists, strings and numbers; anything else is refused so "
                 "that reading a dump can never run code",
            code=UNREADABLE,
        ) from None
    if not isinstance(obj, dict):
        raise ForensicsError("cannot read flight recorder dump", where=where,
                             reason=f"top level is {type(obj).__name__}, not a dict", code=UNREADABLE)
    return obj


def loads_any_dump(data: bytes, where: str = "<bytes>") -> dict[str, Any]:
    """A dump in either form the recorder writes: the pickle (`_dump_nccl_trace`, the default on
    timeout) or the JSON (`_dump_nccl_trace_json`: the same keys). ForensicsError if neither."""
    if data.lstrip()[:1] == b"{":
        try:
            obj = orjson.loads(data)
            _check_types(obj)
        except Exception as e:  # noqa: BLE001 - untrusted bytes: any failure is "not a dump"
            raise ForensicsError("cannot read flight recorder dump", where=where,
                                 reason=f"not a JSON dump: {e}", code=UNREADABLE) from None
        if not isinstance(obj, dict):
            raise ForensicsError("cannot read flight recorder dump", where=where,
                                 reason=f"top level is {type(obj).__name__}, not an object", code=UNREADABLE)
        return obj
    return loads_dump(data, where)


# Bounds of the numbers a dump's fields hold (a dump is plain data, but any data: `rank: 2**64`,
# `timeout_ms: 10**400`, `input_sizes: [["abc"]]` or `[[inf]]` each aborted the whole ingest).
MAX_RANK = 2**31 - 1          # a store's rank column is Int32
MAX_INT = 2**63 - 1           # seq, ids, times: Int64 columns
MAX_ELEMENTS = 2**62          # a tensor's elements (a shape's product), far beyond any GPU's memory


def int_in(v: Any, lo: int = 0, hi: int = MAX_INT) -> int | None:
    """`v` when it is an int (not a bool) in [lo, hi], else None."""
    return v if type(v) is int and lo <= v <= hi else None


def _rank_text(t: str) -> int | None:
    """A rank written as ASCII digits ('²' is a digit to str.isdigit, not to int), in range."""
    return int(t) if t.isascii() and t.isdigit() and len(t) <= 10 and int(t) <= MAX_RANK else None


def _pg_ranks(value: Any) -> list[int]:
    """pg_config ranks: a list, or the string "[0, 1, 2]" the recorder writes; what is not a rank
    number a store can hold is left out."""
    if isinstance(value, (list, tuple)):
        got = [int_in(v, 0, MAX_RANK) if type(v) is int else _rank_text(v) if isinstance(v, str) else None for v in value]
    elif isinstance(value, str):
        got = [_rank_text(t) for t in re.findall(r"[0-9]+", value)]
    else:
        got = []
    return [r for r in got if r is not None]


def numel(shape: Any) -> int | None:
    """Elements of a tensor shape (a list of ints); None when it is not one or is out of bounds."""
    if not isinstance(shape, list):
        return None
    n = 1
    for d in shape:
        d = int_in(d, 0, MAX_ELEMENTS)
        if d is None:
            return None
        n *= d
        if n > MAX_ELEMENTS:
            return None
    return n




def _pg_name(entry: dict[str, Any]) -> str | None:
    pg = entry.get("process_group")
    if isinstance(pg, (list, tuple)) and pg:
        return str(pg[0])
    if isinstance(pg, str):
        return pg
    return None


def _pg_desc(entry: dict[str, Any]) -> str | None:
    pg = entry.get("process_group")
    if isinstance(pg, (list, tuple)) and len(pg) > 1:
        return str(pg[1])
    return None


def _size_mb(sizes: Any, dtypes: Any) -> float | None:
    if not isinstance(sizes, list) or not isinstance(dtypes, list) or len(sizes) != len(dtypes):
        return None
    total = 0
    for shape, dt in zip(sizes, dtypes):
        b = DTYPE_BYTES.get(str(dt))
        n = numel(shape)
        if b is None or n is None:
            return None
        total += n * b
    return total / (1024 * 1024)


def dump_rank(dump: dict[str, Any], path_rank: int | None) -> tuple[int | None, str]:
    r = int_in(dump.get("rank"), 0, MAX_RANK)
    if r is not None:
        return r, "record"
    if path_rank is not None:
        return path_rank, "path"
    return None, "none"


# How far an entry got (FlightRecorder::Entry state): enqueued by the CPU, started on the GPU
# (recorded only when start events exist: TORCH_NCCL_ENABLE_TIMING or desync debug), completed.
STATE_ORDER = {"scheduled": 0, "started": 1, "completed": 2}


def stuck_at(last: dict[int, int], completed: Iterable[int], unfinished: Iterable[int | None],
             done_upto: int | None = None,
             states: dict[int, dict[int, str]] | None = None) -> tuple[int, list[int]] | None:
    """The one rule naming who stalled a process group (the pass stuck_collective, `fr-table` and
    `missing_ranks` all call it): (the collective number the group is stuck at, the members behind
    it), or None when nothing of the group is in flight.

    last: each judged member's last enqueued collective number in the group (-1: none in its dump);
    completed / unfinished: the numbers some member's entry shows completed / not completed (point-
    to-point entries left out; None: an unfinished entry without a number); done_upto: the highest pg_status last_completed_collective of any
    member (its ring buffer may no longer hold the entry, so states of one collective differ
    between dumps); states: per member, the state of each of its entries not completed (number ->
    scheduled / started).

    Domain facts: collective_seq_id counts the collectives a rank enqueued in the group, and a
    collective some member completed was joined by all. The group is stuck in its FIRST pending
    collective: the lowest number some member enqueued that no member completed (above done_upto).
    A member whose last number is below it never issued it: behind, at fault. A member that issued
    it but not the later ones the others went on to enqueue (NCCL enqueues asynchronously) waits in
    it like them: a victim. When every member issued it, the entries' states tell who never took
    part on its GPU: a member whose entry is still `scheduled` while another's `started` (its stream
    never reached the kernel: it is busy with earlier work) is behind, as the analyser's
    COLLECTIVE_STATE_MISMATCH names it. When the states agree (all `scheduled`: without start
    events, the default, an entry goes from scheduled to completed), the dumps do not say who held
    the group up: nobody is named. (A member's own pg_status last_completed_collective below the
    others' is not used: on the real gpu_error_1st dumps it names rank 14 in two groups that stalled
    after the one rank 12 held up, where the analyser names rank 12 alone.) When every
    unfinished number is one some member completed (stale states), the group's highest number
    stands in for it."""
    unfinished = set(unfinished)
    if not unfinished or not last:
        return None
    done, floor = set(completed), -1 if done_upto is None else done_upto
    open_ = [s for s in unfinished if s is not None and s not in done and s > floor]
    top = min(open_) if open_ else max(last.values())
    behind = sorted(r for r, s in last.items() if s < top)
    if behind or not open_:
        return top, behind
    at = {r: STATE_ORDER[st] for r in last if (st := (states or {}).get(r, {}).get(top)) in STATE_ORDER}
    if len(set(at.values())) > 1:
        low = min(at.values())
        return top, sorted(r for r, v in at.items() if v == low)
    return top, []


def missing_ranks(dumps: dict[int, dict[str, Any]]) -> dict[str, list[int]]:
    """Per process group (its name, e.g. "74"), the ranks that never issued the collective the
    group is stuck in, or never took part in it on their GPU (`stuck_at`). Groups where nobody is
    behind are left out.

    A rank's last enqueued number comes from its entries, or from its pg_status mapped through its
    own entries' pg_id; a member of the group (pg_config) with no entry in it counts as -1. Ranks
    without a dump are not judged (the caller knows whether the dump set is complete).
    """
    members: dict[str, list[int]] = {}
    completed: dict[str, set[int]] = defaultdict(set)
    unfinished: dict[str, set[int]] = defaultdict(set)
    done_upto: dict[str, int] = {}
    enqueued: dict[str, dict[int, int]] = defaultdict(dict)
    states: dict[str, dict[int, dict[int, str]]] = defaultdict(lambda: defaultdict(dict))
    for rank, dump in dumps.items():
        cfg = dump.get("pg_config")
        if isinstance(cfg, dict):
            for name, spec in cfg.items():
                if isinstance(spec, dict) and str(name) not in members:
                    members[str(name)] = _pg_ranks(spec.get("ranks"))
        id_to_name: dict[str, str] = {}
        for e in dump.get("entries") or []:
            if not isinstance(e, dict):
                continue
            name = _pg_name(e)
            if name is None:
                continue
            if "pg_id" in e:
                id_to_name[str(e["pg_id"])] = name
            if e.get("is_p2p"):
                continue
            seq = e.get("collective_seq_id")
            if isinstance(seq, int):
                enqueued[name][rank] = max(enqueued[name].get(rank, -1), seq)
                (completed if e.get("state") == "completed" else unfinished)[name].add(seq)
                if e.get("state") != "completed" and isinstance(e.get("state"), str):
                    states[name][rank][seq] = e["state"]
            elif e.get("state") != "completed":
                unfinished[name].add(None)
        status = dump.get("pg_status")
        if isinstance(status, dict):
            for pg_id, st in status.items():
                name = id_to_name.get(str(pg_id))
                if name is None or not isinstance(st, dict):
                    continue
                last, done = st.get("last_enqueued_collective"), st.get("last_completed_collective")
                if isinstance(last, int):
                    enqueued[name][rank] = max(enqueued[name].get(rank, -1), last)
                if isinstance(done, int):
                    done_upto[name] = max(done_upto.get(name, done), done)
    out: dict[str, list[int]] = {}
    for name in sorted(unfinished, key=lambda n: (len(n), n)):
        seen = enqueued.get(name, {})
        if not seen:
            continue
        group = members.get(name) or sorted(seen)
        stuck = stuck_at({r: seen.get(r, -1) for r in group if r in dumps}, completed[name], unfinished[name],
                         done_upto.get(name), states.get(name))
        if stuck and stuck[1]:
            out[name] = stuck[1]
    return out


def _events(dump: dict[str, Any], rank: int | None, rank_source: str, host: str | None) -> tuple[list[dict[str, Any]], list[tuple[int, str, bytes]]]:
    rows: list[dict[str, Any]] = []
    rejects: list[tuple[int, str, bytes]] = []
    entries = dump.get("entries")
    if entries is None:
        entries = []
    base = 0
    if not isinstance(entries, list):
        rejects.append((1, "entries is not a list", repr(entries)[:4096].encode()))
        entries, base = [], 1
    cfg = dump.get("pg_config") if isinstance(dump.get("pg_config"), dict) else {}
    id_to_name: dict[str, str] = {}
    for i, e in enumerate(entries, start=1):
        if not isinstance(e, dict):
            rejects.append((i, "entry is not a dict", repr(e)[:4096].encode()))
            continue
        name = _pg_name(e)
        if "pg_id" in e and name is not None:
            id_to_name[str(e["pg_id"])] = name
        state = e.get("state")
        known = {"collective_seq_id", "profiling_name", "process_group", "state", "time_created_ns", "timeout_ms"}
        extra = {k: v for k, v in e.items() if k not in known}
        extra["pg_desc"] = _pg_desc(e)
        extra["state"] = state
        t_ns = int_in(e.get("time_created_ns"), -MAX_INT)
        timeout = e.get("timeout_ms")
        timeout = float(timeout) if type(timeout) is float and math.isfinite(timeout) and timeout >= 0 \
            else int_in(timeout, 0, 2**53)
        seq = int_in(e.get("collective_seq_id"))
        # a value out of type or bounds is left out of its column, and said (its start) in extra
        odd = {k: repr(e[k])[:64] for k, v in (("time_created_ns", t_ns), ("timeout_ms", timeout), ("collective_seq_id", seq))
               if v is None and e.get(k) is not None}
        odd.update({k: repr(e[k])[:64] for k in ("input_sizes", "output_sizes")
                    if isinstance(e.get(k), list) and any(numel(x) is None for x in e[k])})
        if odd:
            extra["odd_fields"] = odd
        rows.append({
            "line": i,
            "event": "COLLECTIVE",
            # scheduled/started/completed are a ring buffer's normal states: a collective still
            # in flight when the dump was written is the evidence the stuck_collective pass
            # weighs (with its peers), not a warning by itself
            "level": "INFO",
            "message": f"{e.get('profiling_name')} #{seq} {state} on pg {name}",
            "seq": seq,
            "collective": e.get("profiling_name") if isinstance(e.get("profiling_name"), str) else None,
            "process_group": name,
            "timeout_s": timeout / 1000 if timeout is not None else None,
            "tensor_size_mb": _size_mb(e.get("input_sizes"), e.get("input_dtypes")),
            "ts_ns": t_ns,
            "extra": extra,
        })
    status = dump.get("pg_status") if isinstance(dump.get("pg_status"), dict) else {}
    base += len(entries)
    for j, (pg_id, st) in enumerate(status.items(), start=1):
        if not isinstance(st, dict):
            rejects.append((base + j, "pg_status record is not a dict", repr(st)[:4096].encode()))
            continue
        name = id_to_name.get(str(pg_id))
        spec = cfg.get(name) if name is not None else None
        extra = {
            "pg_id": pg_id,
            "last_enqueued": st.get("last_enqueued_collective"),
            "last_started": st.get("last_started_collective"),
            "last_completed": st.get("last_completed_collective"),
        }
        if isinstance(spec, dict):
            extra["pg_desc"] = spec.get("desc")
            extra["pg_ranks"] = _pg_ranks(spec.get("ranks"))
        last = int_in(st.get("last_enqueued_collective"), -MAX_INT)
        done = int_in(st.get("last_completed_collective"), -MAX_INT)
        behind = last is not None and done is not None and last > done
        rows.append({
            "line": base + j,
            "event": "PG_STATUS",
            "level": "WARN" if behind else "INFO",
            "message": f"pg {name or '?'} (id {pg_id}): enqueued {last}, completed {done}",
            "seq": last,
            "process_group": name,
            "extra": extra,
        })
    # Dump-level facts (version, nccl_version, ...) ride on the PG_STATUS rows, or on the last row.
    top = {k: v for k, v in dump.items() if k not in ("entries", "pg_status", "pg_config")}
    if rows and top:
        carriers = [r for r in rows if r["event"] == "PG_STATUS"] or rows[-1:]
        for r in carriers:
            r["extra"]["dump"] = top
    for row in rows:
        row["rank"], row["rank_source"], row["host"] = rank, rank_source, host
    return rows, rejects


def _frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    def col(name: str) -> list[Any]:
        return [r.get(name) for r in rows]

    ts = pl.Series("ts_ns", col("ts_ns"), dtype=pl.Int64)
    return pl.DataFrame({
        "line": pl.Series(col("line"), dtype=pl.Int64),
        "timestamp": (ts // 1000).cast(pl.Datetime("us")).dt.replace_time_zone("UTC"),
        "rank": pl.Series(col("rank"), dtype=pl.Int32),
        "rank_source": pl.Series(col("rank_source"), dtype=pl.String).cast(RankSource),
        "host": pl.Series(col("host"), dtype=pl.String),
        "level": pl.Series(col("level"), dtype=pl.String).cast(Level),
        "event": pl.Series(col("event"), dtype=pl.String),
        "message": pl.Series(col("message"), dtype=pl.String),
        "seq": pl.Series(col("seq"), dtype=pl.Int64),
        "collective": pl.Series(col("collective"), dtype=pl.String),
        "process_group": pl.Series(col("process_group"), dtype=pl.String),
        "timeout_s": pl.Series(col("timeout_s"), dtype=pl.Float64),
        "tensor_size_mb": pl.Series(col("tensor_size_mb"), dtype=pl.Float64),
        "extra": pl.Series([_json(r["extra"]) for r in rows], dtype=pl.String),
    })


def _json(extra: dict[str, Any]) -> str:
    try:
        return orjson.dumps(extra, option=orjson.OPT_NON_STR_KEYS, default=_jsonable).decode()
    except orjson.JSONEncodeError:   # an int beyond 64 bits somewhere in it: as text (rare: walked only then)
        return orjson.dumps(json_safe(extra), option=orjson.OPT_NON_STR_KEYS, default=_jsonable).decode()


def _jsonable(o: Any) -> Any:
    if isinstance(o, bytes):
        return o.decode("utf-8", errors="replace")
    raise TypeError


def read_flight_recorder(path: str, stream: BinaryIO, ctx: ReaderContext) -> Iterator[Block]:
    """One dump file -> one Block (dumps are small: the whole file is read, capped).

    A file that is not a readable dump (refused, malformed, too large, too deep) is one reject
    with its reason and first bytes: the rest of the ingest goes on."""
    data = stream.read(MAX_DUMP_BYTES + 1)
    try:
        if len(data) > MAX_DUMP_BYTES:
            raise ForensicsError("flight recorder dump too large",
                                 reason=f"larger than {MAX_DUMP_BYTES >> 20} MiB (dumps are a few MiB)")
        dump = loads_dump(data, where=path)
    except ForensicsError as e:
        size = len(data) + (_drain(stream) if len(data) > MAX_DUMP_BYTES else 0)
        why = f"flight recorder dump not read: {e.reason or e.what}"
        yield Block(pl.DataFrame({"line": []}, schema={"line": pl.Int64}), rejects_frame([(1, why, data[:4096], size)]), 1)
        return
    rank, source = dump_rank(dump, ctx.rank_hint)
    rows, rejects = _events(dump, rank, source, ctx.host_hint)
    events = _frame(rows)
    rej = rejects_frame([(r[0], r[1], r[2], len(r[2])) for r in rejects])
    yield Block(events, rej, events.height + rej.height)


def _drain(stream: BinaryIO) -> int:
    """Bytes left in the stream (read in blocks, not kept): the reject's raw_len."""
    n = 0
    while True:
        b = stream.read(1 << 20)
        if not b:
            return n
        n += len(b)


read = read_flight_recorder
