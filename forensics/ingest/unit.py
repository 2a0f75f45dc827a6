"""The unit of ingest work: a batch of small files (or one byte range of a big plain file) ->
one events part and one rejects part, plus counts per file.

A pure function of its arguments and the bytes it reads: it writes only the two part files it is
told to write (and, when asked, the events part's partial summaries beside it:
`forensics.summaries.Partial`, from the rows it holds anyway) and returns counts (picklable).
The same function can run inline, in a thread or process pool, or on a cluster worker. Must not touch the manifest or decide what to ingest; how a
part is sorted and cut into row groups is the store's (`store.PartWriter`).
"""
from __future__ import annotations

import io
import os
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..schema import REJECT_SCHEMA, arrow_schema, conform
from ..store import _EPOCH, COMPRESSION, ROW_GROUP, PartWriter, arrow_array, min_max
from ..summaries import Partial
from . import native
from .bounds import TS_REASON, lines_at, split_out_of_range
from .formats import BLOCK_BYTES, BOM, ReaderContext, reader_for
from .jsonl import scan_files
from .sources import GuardedStream, RangeReader, max_line_bytes, open_binary, zstd_damage


@dataclass(frozen=True, slots=True)
class Piece:
    """One file, or a byte range [start, end) of a plain file, to read."""
    path: str                 # absolute path of the source file
    fmt: str                  # reader name (formats.sniff)
    compression: str          # none | gzip | zstd
    start: int = 0            # byte range [start, end) of a plain file; end -1 = to EOF
    end: int = -1
    first_line: int = 1
    rank_hint: int | None = None
    host_hint: str | None = None
    size: int = -1            # the file's size when it was listed (-1: unknown): a shrink check
    kernels_part: str = ""    # profiler traces: where their GPU activities go (STORE/kernels)
    # a small whole file's bytes, read by planning (its fingerprint covers them): not read again
    data: bytes | None = field(default=None, repr=False, compare=False)
    schema_map: Any = None    # roles.SchemaMap: a JSON-lines file in another schema (None: the seed's)


@dataclass(frozen=True, slots=True)
class Unit:
    """Pieces read in order into one events part and one rejects part (absolute paths)."""
    pieces: tuple[Piece, ...]
    events_part: str = ""
    rejects_part: str = ""
    gpu_map: tuple[tuple[str | None, int, int], ...] = ()
    block_bytes: int = BLOCK_BYTES
    weight: int = 0           # input bytes planned (progress)
    summaries: bool = False   # also write the events part's partial summaries (forensics.summaries)


@dataclass(slots=True)
class PieceResult:
    path: str
    start: int
    end: int                  # bytes consumed (end of the last complete line for plain files)
    lines: int = 0
    events: int = 0
    rejected: int = 0
    rejected_by_reason: dict[str, int] = field(default_factory=dict)
    ranks: list[int] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    rank_sources: dict[str, int] = field(default_factory=dict)
    start_ts: str | None = None
    end_ts: str | None = None
    wrote_events: bool = False
    wrote_rejects: bool = False
    kernel_rows: int = 0      # GPU activities written to the piece's kernels part (profiler traces)
    unterminated_tail: bool = False
    problem: str | None = None  # the file could not be read to its end: truncated, shrank, vanished
    # False: the read stopped for a reason outside the file's bytes (it vanished, could not be
    # opened, shrank, an I/O error): the same bytes may read whole next time, so the source is
    # never taken as "unchanged" (a damaged gzip stays damaged: that read is complete)
    complete: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class UnitResult:
    pieces: list[PieceResult]
    events_part: dict[str, Any] | None = None    # part-table entry (no path) or None: not written
    rejects_part: dict[str, Any] | None = None
    bytes: int = 0                               # input bytes this unit stood for (progress)

    @property
    def path(self) -> str:
        return self.pieces[0].path if self.pieces else ""

    @property
    def lines(self) -> int:
        return sum(p.lines for p in self.pieces)

    @property
    def events(self) -> int:
        return sum(p.events for p in self.pieces)

    @property
    def rejected(self) -> int:
        return sum(p.rejected for p in self.pieces)


_ORDER = [("rank", "ascending"), ("timestamp", "ascending"), ("line", "ascending")]


def _in_order(t: pa.Table) -> bool:
    """Already sorted by (rank, timestamp, line)? One rank's file usually is: skip the sort."""
    r, ts = t["rank"], t["timestamp"]
    if r.null_count or ts.null_count:
        return False
    mm = pc.min_max(r)
    if mm["min"] != mm["max"]:
        return False
    if t.num_rows < 2:
        return True
    v = ts.combine_chunks().cast(pa.int64())
    return bool(pc.all(pc.greater_equal(v.slice(1), v.slice(0, len(v) - 1))).as_py())


def _constant(value: str, n: int) -> pa.Array:
    """n copies of one string (source_file, format) without n Python objects."""
    b = value.encode()
    offsets = np.arange(0, (n + 1) * len(b), len(b), dtype=np.int64) if b else np.zeros(n + 1, dtype=np.int64)
    return pa.Array.from_buffers(pa.large_string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(b * n)])


def _events_table(block_events: pl.DataFrame | pa.Table, fmt: str) -> pa.Table:
    """A reader's events as the Arrow table of the whole event schema."""
    if isinstance(block_events, pa.Table):
        return block_events
    ev = conform(block_events)
    if fmt != "jsonl":  # other readers name events from text and structure
        ev = ev.with_columns(pl.col("event_source").fill_null("inferred"))
    return ev.to_arrow().cast(arrow_schema())


def _write_kernels(u: Piece, kernels: pa.Table) -> None:
    """A profiler trace's GPU activities as one part of the store's kernels table (one part per
    trace file: the reader hands them over once, after the whole trace is read)."""
    # in start order, one row group at a time: a sorted copy of the whole table (every
    # activity's strings) would double a large trace's memory
    schema = arrow_schema("kernels")
    order = pc.sort_indices(kernels["start_ns"])
    os.makedirs(os.path.dirname(u.kernels_part), exist_ok=True)
    with pq.ParquetWriter(u.kernels_part, schema, compression=COMPRESSION) as w:
        for lo in range(0, max(1, kernels.num_rows), ROW_GROUP):
            part = kernels.take(order[lo:lo + ROW_GROUP])
            w.write_table(part.append_column("source_file", _constant(u.path, part.num_rows)).cast(schema),
                          row_group_size=ROW_GROUP)


JOIN_MAX = 1 << 20   # whole plain JSON-lines files up to this size are read many to a scanner call


def _joinable(p: Piece, cap: int) -> bool:
    """A whole small plain JSON-lines file, for the many-files path (_read_files). `cap`: the
    largest such file (0 without the compiled scanner)."""
    return (p.fmt == "jsonl" and p.compression == "none" and p.start == 0 and p.end < 0 and 0 < p.size <= cap
            and p.schema_map is None)


def run_unit(u: Unit) -> UnitResult:
    """Read the unit's pieces in order, write its events and rejects parts, return the counts.

    Runs of small JSON-lines files are read together, up to block_bytes per scanner call
    (_read_files); any other piece, and a small file that is not as listed (changed size, no
    final newline, gone), is read alone by its reader (_read_piece)."""
    # beside the part, in the store's staging folder (two levels up: STAGING/events/part)
    partial = Partial(os.path.dirname(os.path.dirname(u.events_part)), u.events_part) if u.summaries else None
    ew = PartWriter(u.events_part, "events", on_write=partial.add if partial is not None else None)
    rw = PartWriter(u.rejects_part, "rejects")
    out = UnitResult(pieces=[], bytes=u.weight)
    results: list[PieceResult | None] = [None] * len(u.pieces)
    # the cap once per unit, not per file (it reads the environment)
    cap = min(JOIN_MAX, max_line_bytes()) if native.available() else 0
    joinable = [_joinable(p, cap) for p in u.pieces]
    try:
        i = 0
        while i < len(u.pieces):
            if not joinable[i]:
                results[i] = _read_piece(u.pieces[i], u, ew, rw)
                i += 1
                continue
            j, size = i, 0
            while j < len(u.pieces) and joinable[j] and (j == i or size + u.pieces[j].size <= u.block_bytes):
                size += u.pieces[j].size
                j += 1
            done, held = _read_files(u.pieces[i:j], ew, rw)
            for k, r in done.items():
                results[i + k] = r
            for k in range(i, j):   # the files not read as listed: alone, by the reader
                if results[k] is None:
                    results[k] = _read_piece(u.pieces[k], u, ew, rw, held.get(k - i))
            i = j
        out.pieces = results  # type: ignore[assignment]
    except BaseException:
        ew.abort()
        rw.abort()
        if partial is not None:
            partial.abort()
        raise
    out.events_part = ew.close()
    out.rejects_part = rw.close()
    if partial is not None and out.events_part is not None:
        partial.write()
    return out


def _read_files(pieces: tuple[Piece, ...], ew: PartWriter,
                rw: PartWriter) -> tuple[dict[int, PieceResult], dict[int, bytes]]:
    """Read whole small JSON-lines files in one scanner call (jsonl.scan_files) into the part
    writers; their counts by index in `pieces`. A file whose bytes are not as listed (another
    size, unreadable) or without a final newline (its last line is the reader's to judge) is
    left out, for _read_piece to read and report; the second dict holds the bytes already read
    of those of the listed size (read once, not twice)."""
    # The files are read straight into one buffer, each where the last kept one ends (no bytes
    # object per file, no join). A file is asked for one byte more than listed: one that grew
    # is seen, its bytes overwritten by the next file (the buffer has that one byte to spare).
    buf = bytearray(sum(p.size for p in pieces) + 1)
    mv = memoryview(buf)
    ends: list[int] = []
    idx: list[int] = []
    held: dict[int, bytes] = {}
    pos = 0
    for k, p in enumerate(pieces):
        if p.data is not None:   # the whole file, read by planning
            n = len(p.data)
            if n <= p.size:
                mv[pos:pos + n] = p.data
        else:
            try:
                n = _read_into(p.path, mv[pos:pos + p.size + 1])
            except OSError:
                continue
        if n == p.size and buf[pos + n - 1] == 10 and buf[pos:pos + 3] != BOM:   # ends with a newline
            # (a file that starts with a byte order mark goes to its reader, which skips it)
            idx.append(k)
            pos += n
            ends.append(pos)
        elif n == p.size:
            held[k] = bytes(mv[pos:pos + n])
    if not idx:
        return {}, held
    chosen = [pieces[k] for k in idx]
    fb = scan_files(mv[:pos], ends, [(p.rank_hint, p.host_hint) for p in chosen])
    ev, file_of = fb.events, fb.file_of
    ev, _, bad = split_out_of_range(ev)
    late = _out_of_range_rejects(mv[:pos], ends, fb.events, fb.file_of, bad) if bad is not None else None
    if bad is not None:
        file_of = file_of[~bad]
    del mv, buf
    out = {k: PieceResult(p.path, 0, p.size, lines=int(n)) for k, p, n in zip(idx, chosen, fb.lines)}
    schema = arrow_schema()
    if ev.num_rows:
        paths = arrow_array([p.path for p in chosen], pa.large_string())
        ev = ev.set_column(schema.get_field_index("source_file"), schema.field("source_file"), paths.take(native.int_array(file_of)))
        ev = ev.set_column(schema.get_field_index("format"), schema.field("format"), _constant("jsonl", ev.num_rows))
        if not (fb.in_order or _in_order(ev)):
            ev = ev.sort_by(_ORDER)   # stable: a rank's files stay in their order
        ew.add(ev, in_order=True)
        _count_per_file(ev, file_of, [out[k] for k in idx])
    rj = fb.rejects if late is None else pl.concat([fb.rejects, late.select(fb.rejects.columns)], how="vertical_relaxed")
    if rj.height:
        files = rj["file"].to_numpy()
        rw.add(rj.with_columns(pl.Series("source_file", [chosen[f].path for f in files], dtype=pl.String))
               .select(list(REJECT_SCHEMA)).to_arrow().cast(arrow_schema("rejects")))
        for f, reason, n in rj.group_by("file", "reason").len().iter_rows():
            r = out[idx[f]]
            r.rejected += n
            r.wrote_rejects = True
            r.rejected_by_reason[reason] = r.rejected_by_reason.get(reason, 0) + n
    return out, held


def _out_of_range_rejects(buf: memoryview, ends: list[int], ev: pa.Table, file_of: np.ndarray,
                          bad: np.ndarray) -> pl.DataFrame:
    """The rejects (with "file": the file's index) of scan_files' events whose time a store cannot
    hold, their bytes from the buffer of the files (file i ends at ends[i])."""
    rows: list[dict[str, Any]] = []
    lines = ev["line"].to_numpy(zero_copy_only=False)[bad]
    for f, line in zip(file_of[bad].tolist(), lines.tolist()):
        start = ends[f - 1] if f else 0
        got = lines_at(io.BytesIO(bytes(buf[start:ends[f]])), 1, [int(line)]).get(int(line), (b"", 0))
        rows.append({"line": int(line), "reason": TS_REASON, "raw": got[0], "raw_len": got[1], "file": int(f)})
    return pl.DataFrame(rows, schema={**dict(REJECT_SCHEMA), "file": pl.Int64}).drop("source_file")


def _numbers(a: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """An integer (or timestamp) column's values as int64 (0 where null) and where they are
    valid, read from its buffers (Array.to_numpy imports pandas)."""
    arr = a.combine_chunks()
    n, off, dt = len(arr), arr.offset, np.dtype(f"int{arr.type.bit_width}")
    values = np.frombuffer(arr.buffers()[1], dtype=dt, count=n, offset=off * dt.itemsize).astype(np.int64)
    if not arr.null_count:
        return values, np.ones(n, dtype=bool)
    bits = np.frombuffer(arr.buffers()[0], dtype=np.uint8)
    valid = np.unpackbits(bits, count=off + n, bitorder="little")[off:].astype(bool)
    return np.where(valid, values, 0), valid


def _count_per_file(ev: pa.Table, file_of: np.ndarray, results: list[PieceResult]) -> None:
    """Per file of scan_files' events (rows in file order, `file_of` their file's index in
    `results`): its rows, ranks, hosts, first and last time and where its ranks came from, into
    its result. numpy over the block's rows, then a little Python per file (a polars group_by
    per block cost ~3 ms: a tenth of the per-file path's CPU on 4,096 files)."""
    counts = np.bincount(file_of, minlength=len(results))
    files = np.flatnonzero(counts)
    starts = (np.cumsum(counts) - counts)[files]
    big = np.iinfo(np.int64)

    def span(values: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per file with rows: the least and greatest valid value, and how many are valid."""
        return (np.minimum.reduceat(np.where(valid, values, big.max), starts),
                np.maximum.reduceat(np.where(valid, values, big.min), starts),
                np.add.reduceat(valid.astype(np.int64), starts))

    def pairs(values: np.ndarray, valid: np.ndarray) -> list[tuple[int, int, int]]:
        """(file, value, rows) of each valid value a file holds (a file's values in order). A
        file of one value (most: one rank, one host) is told by its span; the others by np.unique."""
        lo, hi, n = span(values, valid)
        one = (lo == hi) & (n > 0)
        out = list(zip(files[one].tolist(), lo[one].tolist(), n[one].tolist()))
        mixed = files[(lo != hi) & (n > 0)]
        if len(mixed):
            rows = valid & np.isin(file_of, mixed)
            u, k = np.unique(np.stack([file_of[rows], values[rows]], axis=1), axis=0, return_counts=True)
            out += zip(u[:, 0].tolist(), u[:, 1].tolist(), k.tolist())
        return out

    def strings(name: str) -> list[tuple[int, str, int]]:
        """pairs() of a string column (or of an enum's: a dictionary column)."""
        col = ev[name]
        d = (col.unify_dictionaries() if pa.types.is_dictionary(col.type) else pc.dictionary_encode(col)).combine_chunks()
        names = d.dictionary.to_pylist()
        return [(f, names[code], n) for f, code, n in pairs(*_numbers(pa.chunked_array([d.indices])))]

    ranks: list[list[int]] = [[] for _ in results]
    for f, rank, _ in pairs(*_numbers(ev["rank"])):
        ranks[f].append(rank)
    hosts: list[list[str]] = [[] for _ in results]
    for f, host, _ in strings("host"):
        hosts[f].append(host)
    for f, kind, n in strings("rank_source"):
        results[f].rank_sources[kind] = n
    # first and last time of each file: over the times it has (None: none)
    lo, hi, timed = span(*_numbers(ev["timestamp"]))
    for f, n, t, a, b in zip(files.tolist(), counts[files].tolist(), timed.tolist(), lo.tolist(), hi.tolist()):
        r = results[f]
        r.events, r.wrote_events, r.ranks, r.hosts = n, True, ranks[f], sorted(hosts[f])
        if t:
            r.start_ts = (_EPOCH + timedelta(microseconds=a)).isoformat()
            r.end_ts = (_EPOCH + timedelta(microseconds=b)).isoformat()


def _reject_lines(u: Piece, data: bytes | None, lines: list[int], reason: str, rw: PartWriter, res: PieceResult) -> None:
    """Rejects (with `reason`) for lines of the piece its reader turned into events that cannot be
    kept: their bytes read again (rare: only the lines named)."""
    try:
        if data is not None:
            raw: Any = io.BytesIO(data)
        elif u.compression == "none":
            raw = RangeReader(u.path, u.start, u.end if u.end >= 0 else os.path.getsize(u.path))
        else:
            raw = open_binary(u.path, u.compression)
        with raw:
            got = lines_at(io.BufferedReader(raw) if isinstance(raw, io.RawIOBase) else raw, u.first_line, lines)
    except (OSError, EOFError, ValueError):
        got = {}
    rows = [{"source_file": u.path, "line": n, "reason": reason, "raw": got.get(n, (b"", 0))[0],
             "raw_len": got.get(n, (b"", 0))[1]} for n in lines]
    rw.add(pl.DataFrame(rows, schema=REJECT_SCHEMA).to_arrow().cast(arrow_schema("rejects")))
    res.rejected += len(rows)
    res.rejected_by_reason[reason] = res.rejected_by_reason.get(reason, 0) + len(rows)


def _read_into(path: str, into: memoryview) -> int:
    """Read the file's first len(into) bytes into `into` in one read call (no file object; a
    short read of a file not at its end, rare, leaves it short: it is then read by its reader);
    how many there were."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.readv(fd, [into])
    finally:
        os.close(fd)


def _read_piece(u: Piece, unit: Unit, ew: PartWriter, rw: PartWriter, data: bytes | None = None) -> PieceResult:
    """Read one piece with its reader into the unit's part writers (`data`: the whole file's
    bytes, already read)."""
    schema = arrow_schema()
    res = PieceResult(u.path, u.start, u.end)
    reader = reader_for(u.fmt)
    ctx = ReaderContext(
        path=u.path,
        rank_hint=u.rank_hint,
        host_hint=u.host_hint,
        first_line=u.first_line,
        at_eof=u.end < 0,
        gpu_map={(h, g): r for h, g, r in unit.gpu_map},
        block_bytes=unit.block_bytes,
        schema_map=u.schema_map,
    )
    try:
        if data is not None:
            raw: Any = io.BytesIO(data)
        elif u.compression == "none":
            # never past the size listed (and fingerprinted): a file that grows while it is read
            # has its new lines read by the next ingest --append, from where this one stopped
            # (read to the end, they were read twice: once here, once as the grown tail)
            end = u.end if u.end >= 0 else (u.size if u.size >= 0 else os.path.getsize(u.path))
            raw = RangeReader(u.path, u.start, end)
        else:
            raw = open_binary(u.path, u.compression)
    except FileNotFoundError:
        res.problem = ("file vanished between listing and reading: not read" if not (u.start or u.end >= 0) else
                       f"file vanished while read: bytes {u.start:,}..{u.end if u.end >= 0 else u.size:,} not read")
        res.complete = False
        return res
    except OSError as e:
        res.problem = f"file could not be opened: {e.strerror or e}"
        res.complete = False
        return res
    stream = GuardedStream(raw, u.compression, skip_bom=u.start == 0)
    ranks: set[int] = set()
    hosts: set[str] = set()
    srcs: dict[str, int] = {}
    tmin = tmax = None
    consumed = 0
    out_of_range: list[int] = []   # lines whose time a store cannot hold: rejects, their bytes read again below
    try:
        assert reader is not None, f"no reader for {u.fmt}"
        for block in reader(u.path, stream, ctx):
            res.lines += block.lines
            ev, late, _ = split_out_of_range(_events_table(block.events, u.fmt))
            out_of_range.extend(late)
            if ev.num_rows:
                n = ev.num_rows
                ev = ev.set_column(schema.get_field_index("source_file"), schema.field("source_file"), _constant(u.path, n))
                ev = ev.set_column(schema.get_field_index("format"), schema.field("format"), _constant(u.fmt, n))
                if not (_in_order(ev) if block.in_order is None else block.in_order):
                    ev = ev.sort_by(_ORDER)  # nulls last (the default); the part writer merges blocks
                ew.add(ev, in_order=True)
                res.events += n
                ranks.update(x for x in pc.unique(ev["rank"]).to_pylist() if x is not None)
                hosts.update(x for x in pc.unique(ev["host"]).to_pylist() if x is not None)
                lo, hi = min_max(ev["timestamp"])
                if lo is not None:
                    tmin = lo if tmin is None else min(tmin, lo)
                    tmax = hi if tmax is None else max(tmax, hi)
                for item in pc.value_counts(ev["rank_source"]).to_pylist():  # dictionary values: no cast
                    srcs[item["values"]] = srcs.get(item["values"], 0) + item["counts"]
            ranks.update(getattr(block, "ranks", ()))
            if block.kernels is not None and block.kernels.num_rows and u.kernels_part:
                _write_kernels(u, block.kernels)
                res.kernel_rows = block.kernels.num_rows   # one part, written once per trace
            rj = block.rejects
            if rj.height:
                rj = rj.with_columns(pl.lit(u.path).alias("source_file")).select(list(REJECT_SCHEMA))
                rw.add(rj.to_arrow().cast(arrow_schema("rejects")))
                res.rejected += rj.height
                for k, v in rj["reason"].value_counts().iter_rows():
                    res.rejected_by_reason[k] = res.rejected_by_reason.get(k, 0) + v
                if block.rejects["reason"].str.starts_with("truncated line").any():
                    res.unterminated_tail = True
    finally:
        stream.close()
    if out_of_range:
        _reject_lines(u, data, out_of_range, TS_REASON, rw, res)
    res.wrote_events = res.events > 0
    res.wrote_rejects = res.rejected > 0
    res.ranks = sorted(ranks)
    res.hosts = sorted(hosts)
    res.rank_sources = srcs
    res.start_ts = tmin.isoformat() if tmin is not None else None
    res.end_ts = tmax.isoformat() if tmax is not None else None
    res.problem = stream.problem
    res.complete = not stream.transient
    if res.problem is None and u.compression == "zstd":
        res.problem = zstd_damage(u.path)
    if res.problem is not None:   # where: the lines before the damage are all read
        res.problem += (f"; {res.lines:,} line(s) read before it (lines {u.first_line:,}..{u.first_line + res.lines - 1:,})"
                        if res.lines else "; no line read before it")
    if u.compression == "none":
        listed_end = u.end if u.end >= 0 else u.size
        if res.problem is None and listed_end >= 0 and u.start + stream.bytes < listed_end:
            res.problem = (f"file shrank while read: {u.start + stream.bytes:,} bytes read, "
                           f"{listed_end:,} listed")
            res.complete = False
        consumed = u.start + stream.bytes
    else:
        consumed = stream.bytes   # a compressed file: the bytes its stream gave
    res.end = consumed
    return res
