"""Flight Recorder dumps as one table: per process group and collective number, what each rank did.

Question: across a set of Flight Recorder dumps (one per rank), which collective did each rank
record in each process group, which member ranks never reached it, and where do the ranks first
disagree (op, sizes, dtypes, state, or ranks at different collective numbers)?

Owns: reading a set of dump files (each one on its own: a missing, empty or corrupt dump is listed,
never fatal), lining their entries up by (process group, collective_seq_id), and judging each line
the way PyTorch's analyser (torch/distributed/flight_recorder, `torchfrtrace`) does: the same op
type; the same input sizes (except all_to_all and scatter, whose inputs differ per rank by design)
and output sizes (except all_to_all and gather); the same dtypes; the same state; every member
present. Every cell cites its file and entry (1-based index in the dump's `entries`).
Must not: decide the root cause (passes do), print (renderers do), call pickle.load (the reader's
SafeUnpickler is used), or stop on one bad dump.

Domain facts relied on:
- collective_seq_id counts the collectives a rank enqueued in one process group, so members that
  reached the same point agree on it. A rank's last enqueued number in a group is the highest it
  recorded there, or its `pg_status` last_enqueued_collective (pg_status is keyed by the rank's
  local pg_id, mapped to the group through the rank's own entries).
- A group with a collective in flight is stuck in its FIRST pending collective, and who never
  issued that one is behind: the rule of flight_recorder.stuck_at, which the pass stuck_collective
  applies too (one rule, so `fr-table` and `diagnose` name the same ranks).
- A member whose last enqueued number is below a line's number never issued that collective:
  missing — unless the line comes after the group's stuck collective and the member issued that
  one: it waits in it like the others (NCCL enqueues asynchronously, so they went on to enqueue
  later ones), and is listed as waiting, not missing. A member that went past it but no longer holds it has overwritten it (the ring buffer
  keeps the last TORCH_NCCL_TRACE_BUFFER_SIZE entries): unrecorded, not missing. A member whose
  dump holds no entry of the group at all is missing unless its buffer starts after the line was
  created (then unrecorded); a dump with no entries at all says nothing of any group, and is
  counted missing, as the analyser does.
- Point-to-point entries (is_p2p) are listed under their p2p_seq_id but not judged: each rank
  numbers its own sends and receives, so numbers do not line up across ranks.
- Entries sharing one collective_seq_id on a rank are one coalesced collective: they form one cell.
"""
from __future__ import annotations

import gc
import os
import re
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

from .errors import ForensicsError
from .majority import minority

# Dump file names the recorder writes: TORCH_NCCL_DEBUG_INFO_TEMP_FILE / TORCH_FR_DUMP_TEMP_FILE
# (default /tmp/nccl_trace_rank_) + rank, and the `_dump_<rank>` names of resiliency tooling.
DUMP_NAME = re.compile(r"(?i)(?:^|[_\-.])(?:dump|trace|fr)[_\-]?(?:rank)?[_\-]?0*(\d+)(?:\.(?:pkl|pickle|json))?$")
_PICKLE = re.compile(rb"^\x80[\x02-\x05]")
# Ops whose inputs (outputs) legitimately differ per rank (the analyser's Op.match exemptions).
IN_VARIES = {"all_to_all", "all_to_all_single", "all_to_all_v_single", "alltoall", "alltoall_base", "scatter"}
OUT_VARIES = {"all_to_all", "all_to_all_single", "all_to_all_v_single", "alltoall", "alltoall_base", "gather"}
DTYPE_IN_FREE = {"scatter", "broadcast", "_broadcast_oop"}   # only the source's input counts
DTYPE_OUT_FREE = {"gather"}
# Which mismatch a line shows first, most telling first (the analyser checks in this order).
KINDS = ("op", "size", "dtype", "missing", "ahead", "state")


@dataclass
class Dump:
    """One file given as a dump: what it is and whether it could be used."""

    path: str
    rank: int | None
    host: str | None
    status: str                  # ok | no_entries | empty | corrupt | no_rank | duplicate
    reason: str | None = None
    entries: int = 0
    version: str | None = None
    rank_source: str | None = None   # record (the dump's own field) | path


@dataclass(slots=True)
class Cell:
    """What one rank recorded for one line: one entry, or the entries of a coalesced collective."""

    rank: int
    op: str
    input_sizes: list[Any]
    output_sizes: list[Any]
    input_dtypes: list[str]
    output_dtypes: list[str]
    state: str | None
    file: str
    entry: int                   # 1-based index in the dump's entries
    record_id: int | None = None
    time_ns: int | None = None
    frame: str | None = None     # the innermost Python frame, "name at file:line"


@dataclass
class Line:
    """One (process group, collective number) across ranks."""

    pg: str
    desc: str | None
    seq: int
    p2p: bool
    cells: list[Cell]
    members: list[int]
    missing: list[int] = field(default_factory=list)       # never issued it
    no_dump: list[int] = field(default_factory=list)       # no usable dump to tell
    unrecorded: list[int] = field(default_factory=list)    # went past it; ring buffer overwrote it
    waiting: list[int] = field(default_factory=list)       # never issued it, but issued the group's stuck one
    problem: str | None = None                             # one of KINDS
    odd: list[int] = field(default_factory=list)           # the ranks that disagree with the rest
    detail: str | None = None

    @property
    def time_ns(self) -> int | None:
        ts = [c.time_ns for c in self.cells if c.time_ns is not None]
        return min(ts) if ts else None

    def lead(self) -> Cell | None:
        """The cell the line is described by: the lowest rank not odd (else the lowest rank)."""
        keep = [c for c in self.cells if c.rank not in self.odd] or self.cells
        return keep[0] if keep else None


@dataclass
class Group:
    name: str
    desc: str | None
    ranks: list[int]


@dataclass
class FrTable:
    dumps: list[Dump]
    groups: dict[str, Group]
    lines: list[Line]
    first: dict[str, Line]       # per group, its first line with a problem
    expected: list[int]          # every rank some group names (or that dumped)

    @property
    def no_dump(self) -> list[int]:
        """Expected ranks without a usable dump (none, empty, corrupt)."""
        have = {d.rank for d in self.dumps if d.status in ("ok", "no_entries")}
        return [r for r in self.expected if r not in have]

    @property
    def bad_dumps(self) -> list[Dump]:
        return [d for d in self.dumps if d.status not in ("ok",)]

    def first_stalled(self) -> Line | None:
        """Of the groups' first problems, the one created earliest: where the job stopped first
        (later stalls in other groups pile up behind it, NCCL enqueueing asynchronously)."""
        firsts = sorted(self.first.values(), key=lambda ln: (ln.time_ns is None, ln.time_ns or 0, _pg_key(ln.pg), ln.seq))
        return firsts[0] if firsts else None

    def to_json(self, lines: Iterable[Line] | None = None) -> dict[str, Any]:
        head = self.first_stalled()
        return {
            "dumps": [asdict(d) for d in self.dumps],
            "no_dump": self.no_dump,
            "groups": {k: asdict(g) for k, g in self.groups.items()},
            "first_mismatch": {k: _line_json(v) for k, v in self.first.items()},
            "first_stalled": None if head is None else {"pg": head.pg, "seq": head.seq},
            "lines": [_line_json(ln) for ln in (self.lines if lines is None else lines)],
        }


def _line_json(ln: Line) -> dict[str, Any]:
    d = asdict(ln)
    d["time_ns"] = ln.time_ns
    return d


def _pg_key(name: str) -> tuple[int, str]:
    return (int(name), "") if name.isdigit() else (1 << 62, name)


def op_type(profiling_name: str) -> str:
    """'nccl:all_reduce' -> 'all_reduce'; 'nccl:send 0->3' -> 'send' (the analyser's Op type)."""
    return profiling_name.split(":", 1)[-1].split(" ", 1)[0]


def fmt_sizes(sizes: Any) -> str:
    """[[4027, 5120]] -> '4027x5120' (several tensors joined by ', '; a scalar is '[]')."""
    if not isinstance(sizes, list):
        return "" if sizes is None else str(sizes)
    return ", ".join("x".join(str(d) for d in s) if isinstance(s, list) and s else "[]" if isinstance(s, list) else str(s)
                     for s in sizes)


def ranks_text(ranks: Iterable[int]) -> str:
    """[0, 1, 2, 3, 7] -> '0-3,7'."""
    rs = sorted(set(ranks))
    out: list[str] = []
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        out.append(str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}" if j > i + 1 else f"{rs[i]},{rs[j]}")
        i = j + 1
    return ",".join(out)


# --- reading -------------------------------------------------------------------------------------

def is_dump_name(path: str) -> bool:
    return DUMP_NAME.search(Path(path).name) is not None


def dump_sources(sources: Iterable[dict[str, Any]]) -> list[str]:
    """The dump files among a store's sources (its manifest): those read as Flight Recorder dumps,
    and those named like a dump that were empty or unrecognised (an empty or corrupt dump), when
    they are still on disk."""
    out = []
    for s in sources:
        p, fmt = str(s.get("path")), s.get("format")
        if (fmt == "flight_recorder" or (fmt in ("empty", "console") and is_dump_name(p))) and os.path.isfile(p):
            out.append(p)
    return out


def dump_files(paths: Iterable[str]) -> list[str]:
    """The files among `paths` (files, directories, globs) that are dumps: named like one (so an
    empty or corrupt dump is still listed) or starting like a pickle."""
    from .ingest.sources import expand

    out = []
    for p in expand(list(paths)):
        s = str(p)
        if is_dump_name(s):
            out.append(s)
            continue
        try:
            with open(p, "rb") as f:
                head = f.read(8)
        except OSError:
            continue
        if _PICKLE.match(head):
            out.append(s)
    return out


def _host(path: str, dump: dict[str, Any] | None) -> str | None:
    from .ingest.sources import host_from_path

    for k in ("hostname", "host"):
        v = (dump or {}).get(k)
        if isinstance(v, str) and v:
            return v
    return host_from_path(path)


def _path_rank(path: str) -> int | None:
    m = DUMP_NAME.search(Path(path).name)
    if m:
        return int(m.group(1))
    from .ingest.sources import rank_from_path

    return rank_from_path(path)


def read_dump(path: str) -> tuple[Dump, dict[str, Any] | None]:
    """One file -> its Dump row and, when usable, the loaded dump. Never raises for bad content."""
    from .ingest.flight_recorder import MAX_DUMP_BYTES, loads_any_dump

    prank = _path_rank(path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_DUMP_BYTES + 1)
    except OSError as e:
        return Dump(path, prank, _host(path, None), "corrupt", f"cannot read: {e.strerror}", rank_source="path"), None
    if not data.strip():
        return Dump(path, prank, _host(path, None), "empty", "0 bytes" if not data else "only whitespace",
                    rank_source="path"), None
    if len(data) > MAX_DUMP_BYTES:
        return Dump(path, prank, _host(path, None), "corrupt", f"larger than {MAX_DUMP_BYTES >> 20} MiB",
                    rank_source="path"), None
    try:
        dump = loads_any_dump(data, where=path)
    except ForensicsError as e:
        return Dump(path, prank, _host(path, None), "corrupt", e.reason or e.what, rank_source="path"), None
    if not {"entries", "pg_config", "pg_status"} & set(map(str, dump)):
        return Dump(path, prank, _host(path, None), "corrupt", "not a Flight Recorder dump (no entries, pg_config or "
                    "pg_status)", rank_source="path"), None
    r = dump.get("rank")
    rank, source = (r, "record") if isinstance(r, int) and not isinstance(r, bool) and r >= 0 else (prank, "path")
    entries = dump.get("entries")
    v = dump.get("version")
    d = Dump(path, rank, _host(path, dump), "ok", None, len(entries) if isinstance(entries, list) else 0,
             str(v) if v is not None else None, source)
    if entries is not None and not isinstance(entries, list):
        d.status, d.reason = "corrupt", "entries is not a list"
        return d, None
    if rank is None:
        d.status, d.reason = "no_rank", "neither the dump nor its file name gives a rank"
        return d, None
    if not entries:
        d.status, d.reason = "no_entries", "the dump holds no collective (pg_status only)"
    return d, dump


# --- building ------------------------------------------------------------------------------------

def _frame(e: dict[str, Any]) -> str | None:
    fr = e.get("frames")
    if isinstance(fr, list) and fr and isinstance(fr[0], dict):
        f = fr[0]
        return f"{f.get('name')} at {f.get('filename')}:{f.get('line')}"
    return None


def _cell(rank: int, path: str, idx: int, es: list[dict[str, Any]]) -> Cell:
    """One cell of a rank's entries sharing a number (several: a coalesced collective)."""
    e0 = es[0]
    t = e0.get("time_created_ns")
    rid = e0.get("record_id")
    if len(es) == 1:   # the common case: no concatenation
        return Cell(rank, str(e0.get("profiling_name")), _list(e0.get("input_sizes")), _list(e0.get("output_sizes")),
                    [str(x) for x in _list(e0.get("input_dtypes"))], [str(x) for x in _list(e0.get("output_dtypes"))],
                    e0.get("state"), path, idx, rid if isinstance(rid, int) else None,
                    t if isinstance(t, int) else None, _frame(e0))
    names = [str(e.get("profiling_name")) for e in es]
    op = names[0] if len(names) == 1 else " + ".join(names)

    def cat(k: str) -> list[Any]:
        out: list[Any] = []
        for e in es:
            v = e.get(k)
            out.extend(v if isinstance(v, list) else [] if v is None else [v])
        return out

    return Cell(rank, op, cat("input_sizes"), cat("output_sizes"), [str(x) for x in cat("input_dtypes")],
                [str(x) for x in cat("output_dtypes")], es[-1].get("state"), path, idx,
                rid if isinstance(rid, int) else None, t if isinstance(t, int) else None, _frame(e0))


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else [] if v is None else [v]


def _numel(sizes: list[Any]) -> int:
    from .ingest.flight_recorder import numel

    return sum(n for n in map(numel, sizes) if n is not None)   # a shape of ints only: [["abc"]], [[inf]] count 0


def _judge(ln: Line, size: int, order: dict[str, int]) -> None:
    """Set ln.problem / odd / detail: the first way the present ranks disagree (majority rules: the
    signature most ranks share is the reference; on a tie, the lowest rank's; of states, the least
    advanced in `order` is odd)."""
    cells = ln.cells
    if ln.p2p:
        return
    kind_ops = {op_type(c.op) for c in cells}
    checks: list[tuple[str, Any]] = [
        ("op", lambda c: c.op),
        ("size", lambda c: (None if kind_ops & IN_VARIES else _shape(c.input_sizes),
                            None if kind_ops & OUT_VARIES else _shape(c.output_sizes))),
        ("dtype", lambda c: (None if kind_ops & DTYPE_IN_FREE or not c.input_sizes else frozenset(c.input_dtypes),
                             None if kind_ops & DTYPE_OUT_FREE or not c.output_sizes else frozenset(c.output_dtypes))),
    ]
    for kind, key in checks:
        odd, detail = _minority(cells, key, kind)
        if odd:
            ln.problem, ln.odd, ln.detail = kind, odd, detail
            return
    # all_to_all: inputs differ per rank, but what all ranks send must be what all ranks receive
    if kind_ops & {"all_to_all", "all_to_all_single", "all_to_all_v_single", "alltoall", "alltoall_base"} \
            and not ln.missing and not ln.no_dump and not ln.unrecorded and len(cells) == size:
        i, o = sum(_numel(c.input_sizes) for c in cells), sum(_numel(c.output_sizes) for c in cells)
        if i != o:
            ln.problem, ln.odd = "size", []
            ln.detail = f"all ranks send {i:,} elements in total but receive {o:,}: cannot tell which rank"
            return
    if ln.missing:
        present = [c.rank for c in cells]
        if len(present) < len(ln.missing) and present:
            ln.problem, ln.odd = "ahead", present
            ln.detail = (f"rank{'s' if len(present) > 1 else ''} {ranks_text(present)} issued #{ln.seq}; "
                         f"{ranks_text(ln.missing)} never did")
        else:
            ln.problem, ln.odd = "missing", list(ln.missing)
            ln.detail = f"rank{'s' if len(ln.missing) > 1 else ''} {ranks_text(ln.missing)} never issued #{ln.seq}"
        return
    # states: the least advanced is the odd one (scheduled < started < completed), whatever the
    # majority — ranks whose GPU has not reached a collective the others started hold them up
    # (flight_recorder.stuck_at; the analyser's COLLECTIVE_STATE_MISMATCH)
    got = {c.rank: order[c.state] for c in cells if c.state in order}
    if len(set(got.values())) > 1:
        low = min(got.values())
        odd = sorted(r for r, v in got.items() if v == low)
        ahead = next(c for c in cells if c.rank in got and got[c.rank] != low)
        mine = next(c for c in cells if c.rank == odd[0])
        ln.problem, ln.odd = "state", odd
        ln.detail = (f"rank{'s' if len(odd) > 1 else ''} {ranks_text(odd)} {mine.state} while rank {ahead.rank} "
                     f"{ahead.state}" + (" and others" if len(got) - len(odd) > 1 else ""))


def _shape(sizes: list[Any]) -> tuple[Any, ...]:
    return tuple(tuple(s) if isinstance(s, list) else s for s in sizes)


def _show(kind: str, c: Cell) -> str:
    if kind == "op":
        return c.op
    if kind == "size":
        return f"in {fmt_sizes(c.input_sizes)} out {fmt_sizes(c.output_sizes)}"
    if kind == "dtype":
        i, o = "/".join(sorted(set(c.input_dtypes))), "/".join(sorted(set(c.output_dtypes)))
        return i if i == o or not o else f"{i} -> {o}"
    return str(c.state)


def _minority(cells: list[Cell], key: Any, kind: str) -> tuple[list[int], str | None]:
    # the reference: the most common signature; on a tie, the lowest rank's (majority.minority)
    idx, ref, top = minority([key(c) for c in cells])
    if not idx:
        return [], None
    odd = [cells[i] for i in idx]
    base = cells[ref]
    shown = "; ".join(f"rank {c.rank}: {_show(kind, c)}" for c in odd[:3]) + (f"; {len(odd) - 3} more" if len(odd) > 3 else "")
    tie = " (a tie: judged against the lowest rank)" if top * 2 <= len(cells) else ""
    return [c.rank for c in odd], f"{kind} differs: {shown}, others {_show(kind, base)}{tie}"


def build(paths: Iterable[str]) -> FrTable:
    """The table for the dump files among `paths` (files, directories, globs). A path that names
    nothing is a ForensicsError (NO_INPUT); a file that is not a usable dump is listed."""
    paths = list(paths)
    files = dump_files(paths)
    if not files:
        from .errors import NO_INPUT

        raise ForensicsError(f"no Flight Recorder dumps among {', '.join(paths)}", where=paths[0] if paths else None,
                             reason="no file is named like a dump (nccl_trace_rank_N, _dump_N) or starts like a pickle",
                             help="give the folder TORCH_NCCL_DEBUG_INFO_TEMP_FILE (or TORCH_FR_DUMP_TEMP_FILE) pointed at",
                             code=NO_INPUT)
    return build_from(read_dump(f) for f in files)     # one dump in memory at a time


def build_from(loaded: Iterable[tuple[Dump, dict[str, Any] | None]]) -> FrTable:
    """The table for dumps as read_dump returns them (an iterable: each dump is reduced to its
    cells and dropped before the next is read, so memory follows the table, not the dumps).
    A rank dumped twice keeps its first dump; the other is listed as a duplicate."""
    # Hundreds of thousands of small objects stay alive until the end and none of them forms a
    # cycle: the cyclic collector would walk them all again and again (measured: most of the
    # time on 1,024 dumps), so it is paused while the table is built.
    was = gc.isenabled()
    gc.disable()
    try:
        return _build(loaded)
    finally:
        if was:
            gc.enable()


def _build(loaded: Iterable[tuple[Dump, dict[str, Any] | None]]) -> FrTable:
    from .ingest.flight_recorder import STATE_ORDER, _pg_ranks, stuck_at

    dumps: list[Dump] = []
    usable: set[int] = set()
    first_path: dict[int, str] = {}
    # a group is (name, ranks as the dump's own pg_config says): split_group can give one name
    # two rank sets; such a name is shown as "name@first-rank"
    # Rank sets are numbered once (rset_id): a tuple's hash is not cached, and hashing a
    # 1,024-rank tuple for every entry made the build quadratic in the world size.
    rset_id: dict[tuple[int, ...], int] = {(): 0}
    rsets: list[tuple[int, ...]] = [()]
    sets: dict[str, set[int]] = defaultdict(set)
    descs: dict[str, str | None] = {}
    table: dict[tuple[str, int, bool, int], dict[int, Cell]] = defaultdict(dict)
    last: dict[int, dict[tuple[str, int], int]] = defaultdict(dict)
    oldest: dict[int, int] = {}
    seen_members: dict[tuple[str, int], set[int]] = defaultdict(set)
    # per group, what stuck_at reads: numbers some entry shows completed / not, pg_status last completed
    completed: dict[tuple[str, int], set[int]] = defaultdict(set)
    unfinished: dict[tuple[str, int], set[int | None]] = defaultdict(set)
    done_upto: dict[tuple[str, int], int] = {}
    # per group and member: the states of its entries not completed
    states: dict[tuple[str, int], dict[int, dict[int, str]]] = defaultdict(lambda: defaultdict(dict))
    for d, dump in loaded:
        dumps.append(d)
        if dump is None or d.rank is None:
            continue
        rank = d.rank
        if rank in usable:
            d.status, d.reason = "duplicate", f"rank {rank} also dumped to {first_path[rank]}"
            continue
        usable.add(rank)
        first_path[rank] = d.path
        own: dict[str, int] = {}
        cfg = dump.get("pg_config")
        if isinstance(cfg, dict):
            for name, spec in cfg.items():
                if isinstance(spec, dict):
                    rs = tuple(sorted(_pg_ranks(spec.get("ranks"))))
                    if rs not in rset_id:
                        rset_id[rs] = len(rsets)
                        rsets.append(rs)
                    own[str(name)] = rset_id[rs]
                    sets[str(name)].add(rset_id[rs])
                    desc = spec.get("desc")
                    descs.setdefault(str(name), desc if isinstance(desc, str) else None)
        pg_of_id: dict[str, tuple[str, int]] = {}
        pending: dict[tuple[str, int, bool, int], list[tuple[int, dict[str, Any]]]] = defaultdict(list)
        mine = last[rank]
        for i, e in enumerate(dump.get("entries") or [], start=1):
            if not isinstance(e, dict):
                continue
            pg = e.get("process_group")
            name = str(pg[0]) if isinstance(pg, (list, tuple)) and pg else pg if isinstance(pg, str) else None
            if name is None:
                continue
            g = (name, own.get(name, 0))
            if name not in descs and isinstance(pg, (list, tuple)) and len(pg) > 1:
                descs[name] = str(pg[1])
            seen_members[g].add(rank)
            if "pg_id" in e:
                pg_of_id[str(e["pg_id"])] = g
            p2p = bool(e.get("is_p2p"))
            seq = e.get("p2p_seq_id" if p2p else "collective_seq_id")
            if not p2p:
                num = seq if isinstance(seq, int) else None
                if e.get("state") == "completed":
                    if num is not None:
                        completed[g].add(num)
                else:
                    unfinished[g].add(num)
                    if num is not None and isinstance(e.get("state"), str):
                        states[g][rank][num] = e["state"]
            if not isinstance(seq, int):
                continue
            pending[(*g, p2p, seq)].append((i, e))
            if not p2p and seq > mine.get(g, -1):
                mine[g] = seq
            t = e.get("time_created_ns")
            if isinstance(t, int) and (rank not in oldest or t < oldest[rank]):
                oldest[rank] = t
        for k, es in pending.items():
            table[k][rank] = _cell(rank, d.path, es[0][0], [e for _, e in es])
        status = dump.get("pg_status")
        if isinstance(status, dict):
            for pg_id, st in status.items():
                g = pg_of_id.get(str(pg_id))
                v = st.get("last_enqueued_collective") if isinstance(st, dict) else None
                if g is not None and isinstance(v, int) and v > mine.get(g, -1):
                    mine[g] = v
                done = st.get("last_completed_collective") if isinstance(st, dict) else None
                if g is not None and isinstance(done, int) and not isinstance(done, bool):
                    done_upto[g] = max(done_upto.get(g, done), done)
        del dump, pending

    def key_of(name: str, rid: int) -> str:
        rs = rsets[rid]
        return name if len(sets.get(name, ())) <= 1 else f"{name}@{rs[0] if rs else '?'}"

    groups: dict[str, Group] = {}
    for name, opts in sets.items():
        for rid in opts:
            groups[key_of(name, rid)] = Group(key_of(name, rid), descs.get(name), list(rsets[rid]))
    for name, rid in seen_members:
        groups.setdefault(key_of(name, rid), Group(key_of(name, rid), descs.get(name), []))
    dumps.sort(key=lambda x: (x.rank is None, x.rank or 0, x.path))

    expected = sorted({r for g in groups.values() for r in g.ranks} | usable)
    # where each group is stuck (flight_recorder.stuck_at): members with a usable dump are judged
    stuck: dict[tuple[str, int], int] = {}
    for (name, rid), open_ in unfinished.items():
        members = groups[key_of(name, rid)].ranks or sorted(seen_members[(name, rid)])
        got = stuck_at({m: last[m].get((name, rid), -1) for m in members if m in usable}, completed[(name, rid)],
                       open_, done_upto.get((name, rid)), states.get((name, rid)))
        if got is not None:
            stuck[(name, rid)] = got[0]
    lines: list[Line] = []
    for (name, rid, p2p, seq), cells in table.items():
        key = key_of(name, rid)
        g = groups[key]
        members = g.ranks or sorted(seen_members[(name, rid)])
        ln = Line(key, g.desc, seq, p2p, [cells[r] for r in sorted(cells)], members)
        if not p2p:
            t0 = ln.time_ns
            for m in members:
                if m in cells:
                    continue
                if m not in usable:
                    ln.no_dump.append(m)
                    continue
                top = last[m].get((name, rid))
                if top is None:
                    # nothing of this group in m's buffer: if the buffer starts after the line was
                    # created, it would not hold it anyway (clocks of different hosts may differ)
                    if t0 is not None and m in oldest and oldest[m] > t0:
                        ln.unrecorded.append(m)
                    else:
                        ln.missing.append(m)
                elif top < seq:
                    # past the group's stuck collective, a member that issued that one waits in it
                    (ln.waiting if top >= stuck.get((name, rid), seq) else ln.missing).append(m)
                else:
                    ln.unrecorded.append(m)
        _judge(ln, len(members), STATE_ORDER)
        lines.append(ln)
    lines.sort(key=lambda ln: (_pg_key(ln.pg), ln.p2p, ln.seq))
    first: dict[str, Line] = {}
    for ln in lines:
        if ln.problem and ln.pg not in first:
            first[ln.pg] = ln
    return FrTable(dumps, dict(sorted(groups.items(), key=lambda kv: _pg_key(kv[0]))), lines, first, expected)


def select(table: FrTable, pg: str | None = None, all_lines: bool = False) -> list[Line]:
    """The lines a reader wants: by default those with a problem (each group from its first one
    on); all of them with `all_lines`; only group `pg` (its name or its desc) when given."""
    out = []
    for ln in table.lines:
        if pg is not None and ln.pg != pg and (ln.desc or "") != pg and ln.pg.split("@")[0] != pg:
            continue
        if all_lines or ln.problem:
            out.append(ln)
    return out


def dumps_summary(table: FrTable) -> list[str]:
    """One sentence per kind of dump problem (for renderers): ranks with no dump, empty, corrupt."""
    out = []
    nd = [r for r in table.no_dump if not any(d.rank == r for d in table.dumps)]
    if nd:
        out.append(f"no dump from rank{'s' if len(nd) > 1 else ''} {ranks_text(nd)}")
    for status, what in (("empty", "empty"), ("corrupt", "corrupt"), ("no_entries", "no entries"),
                         ("no_rank", "no rank"), ("duplicate", "duplicate")):
        ds = [d for d in table.dumps if d.status == status]
        if ds:
            named = ", ".join(f"{'rank ' + str(d.rank) if d.rank is not None else '?'} ({os.path.basename(d.path)}"
                              + (f": {d.reason}" if d.reason and status == "corrupt" else "") + ")" for d in ds[:4])
            out.append(f"{what}: {named}" + (f" and {len(ds) - 4} more" if len(ds) > 4 else ""))
    return out


__all__ = ["FrTable", "Line", "Cell", "Dump", "Group", "build", "build_from", "read_dump", "dump_files", "dump_sources", "select",
           "fmt_sizes", "ranks_text", "op_type", "dumps_summary"]
