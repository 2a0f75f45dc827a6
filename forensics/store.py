"""The on-disk store: Parquet parts cut by rank range, a part table and per-source accounting,
committed atomically.

Owns the layout (how parts are written, sorted and cut into row groups, when small parts are
merged), the manifest, locking and the atomic swap. It must not parse raw logs (that is
`forensics.ingest`) nor answer questions about a run (that is `timeline` and `passes`).

Layout (readable by DuckDB/Spark/polars without this code):

    STORE/manifest.json          tool/schema version, totals, the part table (path, kind, rows,
                                 bytes, rank_min/max, ts_min/max) and the sources (size, mtime,
                                 fingerprint, counts, parts) -- or, past SOURCES_INLINE sources,
                                 a pointer to:
    STORE/sources.parquet        one row per source file (the same fields as a table)
    STORE/events/*.parquet       EVENT_SCHEMA; each part sorted by (rank, timestamp, line), its
                                 row groups cut at rank boundaries (whole ranks, <= ROW_GROUP rows)
    STORE/rejects/*.parquet      REJECT_SCHEMA; every line that did not become an event

A part holds whole input files of consecutive ranks (many small files share one part) or a byte
range of a big one; a source lists the parts that hold its rows, a part may hold many sources.

A store is only ever published whole: a new version is assembled in a sibling temp directory
(existing parts are hard-linked, not copied), its manifest written last, then swapped into place
with renameat2(RENAME_EXCHANGE). A directory without a manifest is never taken for a store.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import json
import math
import os
import shutil
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

import polars as pl

from . import __version__
from ._lazy import lazy
from .errors import NOT_A_STORE, STORE_BUSY, STORE_DAMAGED, STORE_VERSION, ForensicsError
from .schema import EVENT_SCHEMA, REJECT_SCHEMA, SCHEMA_VERSION, arrow_schema

# Only writing parts needs numpy and pyarrow: opening and reading a store (every post-mortem
# command) does not import them.
np = lazy("numpy")
pa = lazy("pyarrow")
pc = lazy("pyarrow.compute")
pq = lazy("pyarrow.parquet")

MANIFEST = "manifest.json"
EVENTS_DIR = "events"
REJECTS_DIR = "rejects"
SOURCES_TABLE = "sources.parquet"
SOURCES_INLINE = 1000        # more sources than this: their table is Parquet beside the manifest

# --- how parts are written -----------------------------------------------------------------------
ROW_GROUP = 64 * 1024        # rows per row group at most; groups hold whole ranks where they fit
COMPACT_ROWS = 32 * 1024     # a part under this many rows is small: merged with others at commit
MERGE_ROWS = 1 << 20         # rows of one part written by a merge of small parts, at most
SORT_BUFFER = 192 << 20      # Arrow bytes a part writer holds to sort (~2.4x the JSON): past it, a run
# LZ4 (Parquet's LZ4): the codec that gives the first report soonest. Against zstd level 1 (the
# codec before), ingest + diagnose as processes on bench/first_report.py's logs, CPU s, medians
# of 3: 32 ranks 5.18 -> 4.78 (snappy 5.12), 4,096 one-rank files 12.11 -> 11.35 (snappy 11.74);
# parts ~1.7x the size (29 vs 17.5 MB for 224 MB of logs). A part names its codec in its own
# metadata: stores written with zstd are read (and appended to) as before.
COMPRESSION = "lz4"
COMPRESSION_LEVEL: int | None = None
# Dictionary-encode only repeated strings (message/extra are mostly unique: dictionaries cost
# time and size there); keep statistics where queries filter (rank/time pruning).
DICTIONARY = ["rank_source", "event_source", "host", "level", "event", "collective", "stage", "param_group",
              "process_group", "path", "source_file", "format"]
STATISTICS = ["timestamp", "rank", "host", "level", "event", "step", "line", "source_file"]
# Sorted times and line numbers: deltas are small (12% smaller parts, same write time measured).
ENCODING = {"timestamp": "DELTA_BINARY_PACKED", "line": "DELTA_BINARY_PACKED"}
_INT_MAX = (1 << 63) - 1     # np.iinfo(np.int64).max
KERNELS_DIR = "kernels"   # profiler traces: one row per GPU activity (schema.KERNEL_STORE_SCHEMA)


def is_store(path: str | os.PathLike[str]) -> bool:
    return (Path(path) / MANIFEST).is_file()


def _key(a: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """An int64 sort key of a column, nulls last (as pyarrow's sort puts them)."""
    a = a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a
    a = a.cast(pa.int64())
    v = np.frombuffer(a.buffers()[1], dtype=np.int64, count=len(a), offset=a.offset * 8)
    if not a.null_count:
        return v
    # from the buffers: pc.fill_null(a, _INT_MAX) (a scalar of a Python int) and converting an
    # Arrow array with np.asarray both import pandas, ~0.5 s of CPU per ingest
    bits = np.unpackbits(np.frombuffer(a.buffers()[0], dtype=np.uint8), bitorder="little")
    return np.where(bits[a.offset:a.offset + len(a)].astype(bool), v, _INT_MAX)


def _sorted_by(t: pa.Table, keys: list[str]) -> bool:
    """Rows already in lexicographic order of `keys` (int-like, nulls last)?"""
    if t.num_rows < 2:
        return True
    ok = None      # rows i+1 not yet known to be after row i ...
    tie = None     # ... and rows equal on the keys seen so far
    for k in keys:
        v = _key(t[k])
        gt, eq = v[1:] > v[:-1], v[1:] == v[:-1]
        if ok is None:
            ok, tie = gt, eq
        else:
            ok, tie = ok | (tie & gt), tie & eq
    return bool(np.all(ok | tie))


EVENT_ORDER = ["rank", "timestamp", "line"]


def rank_groups(ranks: pa.ChunkedArray | pa.Array, max_rows: int | None = None) -> list[tuple[int, int]]:
    """Row ranges [a, b) of a table sorted by rank: whole ranks per group up to `max_rows` rows,
    a group closed at the first rank that starts once it holds half of that; a rank with more
    rows fills groups of its own. Filters on one rank then read one or two row groups, not every
    group (a group never mixes the tail of one rank run with a big next one). Closing at half
    full lets a part writer fed in rank order write a group once the next rank starts: it held up
    to a whole group more (-77 MiB peak RSS ingesting 4,096 one-rank files)."""
    max_rows = max_rows or ROW_GROUP
    n = len(ranks)
    if n == 0:
        return []
    v = _key(ranks)
    starts = np.flatnonzero(np.concatenate(([True], v[1:] != v[:-1])))
    ends = np.append(starts[1:], n)
    out: list[tuple[int, int]] = []
    a = 0
    for s, e in zip(starts.tolist(), ends.tolist()):
        if s - a >= max_rows // 2:
            out.append((a, s))             # half full: closed before this rank
            a = s
        if e - a <= max_rows:
            continue                       # this rank still fits the open group
        if s > a:
            out.append((a, s))             # close the group before this rank
            a = s
        while e - a > max_rows:            # a rank bigger than a group: groups of its own
            out.append((a, a + max_rows))
            a += max_rows
    out.append((a, n))
    return out


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def min_max(a: pa.ChunkedArray | pa.Array) -> tuple[Any, Any]:
    """(min, max) of an int or timestamp[us] column, as Python values (aware UTC datetimes for
    times); (None, None) when all are null. Not through pyarrow's scalars: converting a timestamp
    scalar imports pandas (~0.5 s of CPU per ingest)."""
    if pa.types.is_timestamp(a.type):
        mm = pc.min_max(a.cast(pa.int64()))
        lo, hi = mm["min"].as_py(), mm["max"].as_py()
        if lo is None:
            return None, None
        return _EPOCH + timedelta(microseconds=lo), _EPOCH + timedelta(microseconds=hi)
    mm = pc.min_max(a)
    return mm["min"].as_py(), mm["max"].as_py()


def _row_key(t: pa.Table, keys: list[str], i: int) -> tuple[int, ...]:
    """The sort key of row i (nulls as the largest value), from scalars: no column is copied."""
    out = []
    for k in keys:
        v = t.column(k)[i]
        out.append(_INT_MAX if not v.is_valid else int(v.value if isinstance(v, pa.TimestampScalar) else v.as_py()))
    return tuple(out)


class PartWriter:
    """Writes one part: events sorted by (rank, timestamp, line) in row groups of whole ranks
    (`rank_groups`); rejects sorted by file and line. `close()` returns the part's entry for the
    part table (None when nothing was written: no file exists).

    Memory: while the tables added arrive in order (one-rank files batched in rank order: the
    common case), a row group is written once the next rank starts (half full) or it is full:
    what is held is the rank coming in and less than half a group of others. Once a table arrives
    out of order (a file holding many ranks), the rest is held and sorted when the part closes,
    one column at a time (peak: what is held plus one column); past SORT_BUFFER bytes held, what
    is held is written as a sorted run (the part is then sorted run by run: only inputs of
    hundreds of MB, e.g. a big compressed file, get there)."""

    def __init__(self, path: str | os.PathLike[str], kind: str = "events", buffer_bytes: int | None = None,
                 on_write: Callable[[pa.Table], None] | None = None) -> None:
        self.path = str(path)
        # called with every table written, in the part's order (the ingest unit's partial summaries)
        self.on_write = on_write
        self.kind = kind
        self.schema = arrow_schema(kind)
        self.order = EVENT_ORDER if kind == "events" else ["source_file", "line"]
        self.buffer_bytes = buffer_bytes or SORT_BUFFER
        self._buf: list[pa.Table] = []
        self._held = 0
        self._rows_held = 0
        self._pending = 0                     # tables added since the buffer was last packed
        self._streaming = kind == "events"    # rejects: few, always held and sorted
        self._last: tuple[int, ...] | None = None
        self._writer: pq.ParquetWriter | None = None
        self.rows = 0
        self._rmin: int | None = None
        self._rmax: int | None = None
        self._tmin: Any = None
        self._tmax: Any = None
        self._unranked = 0                    # rows without a rank / a time: readers that prune
        self._untimed = 0                     # parts by rank range or time must still read them

    def add(self, t: pa.Table, in_order: bool = False) -> None:
        """Add rows; `in_order`: the caller knows `t` is sorted (spares the check)."""
        if not t.num_rows:
            return
        new_rank = False
        if self._streaming:
            first = _row_key(t, self.order, 0)
            if (self._last is not None and first < self._last) or not (in_order or _sorted_by(t, self.order)):
                self._streaming = False
                self._held = sum(b.nbytes for b in self._buf)
            last = _row_key(t, self.order, t.num_rows - 1)
            new_rank = self._last is None or first[0] != self._last[0] or first[0] != last[0]
            self._last = last
        self._buf.append(t)
        if not self._streaming:           # bytes held only matter when held to sort (nbytes is not free)
            self._held += t.nbytes
        self._rows_held += t.num_rows
        self._pending += 1
        if self._pending >= 256:
            # many tiny tables (one-line files) cost far more than their rows: a few KB of
            # buffers each; packed into one table they cost their rows
            self._buf[-self._pending:] = [pa.concat_tables(self._buf[-self._pending:]).combine_chunks()]
            self._pending = 0
        if self._streaming and self._rows_held >= ROW_GROUP // 2 and (new_rank or self._rows_held > ROW_GROUP):
            self._write_ready()
        elif not self._streaming and self._held >= self.buffer_bytes:
            self._flush()

    def _write_ready(self) -> None:
        """Streaming: write every full group of whole ranks, keep the last (its rank may go on)."""
        t = pa.concat_tables(self._buf)
        groups = rank_groups(t["rank"])
        a = groups[-1][0]
        self._write(t.slice(0, a), groups[:-1])
        rest = t.slice(a)
        self._buf, self._rows_held, self._pending = [rest], rest.num_rows, 0

    def _flush(self) -> None:
        if not self._buf:
            return
        bufs, self._buf, self._held, self._rows_held, self._pending = self._buf, [], 0, 0, 0
        if self.kind == "rejects":
            t = pa.concat_tables(bufs).sort_by([(k, "ascending") for k in self.order])
            self._write(t, [(0, t.num_rows)])
        elif self._streaming:
            t = pa.concat_tables(bufs)
            self._write(t, rank_groups(t["rank"]))
        else:
            t = self._sorted(bufs)
            self._write(t, rank_groups(t["rank"]))

    def _sorted(self, bufs: list[pa.Table]) -> pa.Table:
        """The tables in `bufs` (emptied) as one sorted table, moved one column at a time: holding
        the table twice at the peak would cost ~140 MB more per thread for a 56 MB input."""
        t = pa.concat_tables(bufs)
        bufs.clear()
        if _sorted_by(t, self.order):
            return t
        idx = pc.sort_indices(t, sort_keys=[(k, "ascending") for k in self.order])  # nulls last
        schema, cols = t.schema, t.columns
        del t
        out = []
        for i in range(len(cols)):
            out.append(cols[i].take(idx))
            cols[i] = None  # type: ignore[call-overload]  # free this column before the next
        return pa.Table.from_arrays(out, schema=schema)

    def _write(self, t: pa.Table, groups: list[tuple[int, int]]) -> None:
        if not t.num_rows:
            return
        if self._writer is None:
            if self.kind == "events":
                self._writer = pq.ParquetWriter(self.path, self.schema, compression=COMPRESSION,
                                                compression_level=COMPRESSION_LEVEL, use_dictionary=DICTIONARY,
                                                write_statistics=STATISTICS, column_encoding=ENCODING)
            else:
                self._writer = pq.ParquetWriter(self.path, self.schema, compression=COMPRESSION)
        for a, b in groups:
            self._writer.write_table(t.slice(a, b - a), row_group_size=ROW_GROUP)
        if self.on_write is not None:
            self.on_write(t)
        self.rows += t.num_rows
        if self.kind == "events":
            self._unranked += t["rank"].null_count
            self._untimed += t["timestamp"].null_count
            for col, lo, hi in (("rank", "_rmin", "_rmax"), ("timestamp", "_tmin", "_tmax")):
                a, b = min_max(t[col])
                if a is not None:
                    setattr(self, lo, a if getattr(self, lo) is None else min(getattr(self, lo), a))
                    setattr(self, hi, b if getattr(self, hi) is None else max(getattr(self, hi), b))

    def close(self) -> dict[str, Any] | None:
        try:
            self._flush()
        finally:
            if self._writer is not None:
                self._writer.close()
        if self._writer is None:
            return None
        return {"kind": self.kind, "rows": self.rows, "rank_min": self._rmin, "rank_max": self._rmax,
                "ts_min": self._tmin.isoformat() if self._tmin is not None else None,
                "ts_max": self._tmax.isoformat() if self._tmax is not None else None,
                **({"unranked": self._unranked, "untimed": self._untimed} if self.kind == "events" else {})}

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._buf = []


def read_part(path: str | os.PathLike[str], kind: str) -> pa.Table:
    return pq.read_table(str(path), schema=arrow_schema(kind))


# --- the per-source table ------------------------------------------------------------------------

_JSON_FIELDS = ("rejected_by_reason", "rank_sources")        # dicts: kept as JSON text
_LIST_FIELDS = {"ranks": pl.List(pl.Int64), "hosts": pl.List(pl.String), "event_parts": pl.List(pl.String),
                "reject_parts": pl.List(pl.String), "kernel_parts": pl.List(pl.String), "problems": pl.List(pl.String)}
_SCALARS = {"path": pl.String, "size": pl.Int64, "mtime": pl.Float64, "fingerprint": pl.String,
            "head_hash": pl.String, "compression": pl.String, "format": pl.String, "rank_hint": pl.Int64,
            "host_hint": pl.String, "lines_read": pl.Int64, "events": pl.Int64, "rejected": pl.Int64,
            "start": pl.String, "end": pl.String, "complete_end": pl.Int64, "complete_lines": pl.Int64,
            "bytes_read": pl.Int64, "read_complete": pl.Boolean}


def write_sources_table(sources: list[dict[str, Any]], path: Path) -> None:
    """The sources as one Parquet table (typed columns; dict fields as JSON text; any other key
    a reader added in `more`, JSON)."""
    pq.write_table(sources_table(source_columns(sources)), path, compression="zstd")


def source_columns(sources: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Source dicts as the columns `sources_table` takes."""
    known = set(_SCALARS) | set(_LIST_FIELDS) | set(_JSON_FIELDS)
    cols: dict[str, list[Any]] = {k: [s.get(k) for s in sources] for k in (*_SCALARS, *_LIST_FIELDS)}
    import orjson   # ~10x json.dumps: three JSON texts per source, 100,000 sources

    def text(x: Any) -> str:
        return orjson.dumps(x, default=str, option=orjson.OPT_NON_STR_KEYS).decode() if x else "{}"

    for k in _JSON_FIELDS:
        cols[k] = [text(s.get(k)) for s in sources]
    cols["more"] = ["{}" if known.issuperset(s) else text({k: v for k, v in s.items() if k not in known}) for s in sources]
    return cols


def sources_table(cols: dict[str, list[Any]]) -> pa.Table:
    """The table of sources from its columns (lists: a value per source; None for null; the
    dict fields as JSON text, `more` the JSON of any other keys)."""
    cols = {**cols, "mtime": [float(x) if x is not None else None for x in cols["mtime"]]}
    schema = {**_SCALARS, **_LIST_FIELDS, **{k: pl.String for k in _JSON_FIELDS}, "more": pl.String}
    # built from the lists' buffers (polars' constructor took ~5x longer for 100,000 sources, and
    # pa.array imports pandas: ~0.5 s); the types are the ones polars writes, so the table reads
    # back as before
    return pa.table({k: arrow_array(cols[k], pl.Series(k, [], dtype=schema[k]).to_arrow().type) for k in schema})


def concat_columns(parts: list[dict[str, list[Any]]], key: str = "path") -> dict[str, list[Any]]:
    """Columns of several sets of sources as one, its rows in order of `key`."""
    cols = {k: [v for p in parts for v in p[k]] for k in parts[0]} if len(parts) > 1 else parts[0]
    order = sorted(range(len(cols[key])), key=cols[key].__getitem__)
    if order == list(range(len(order))):
        return cols
    return {k: [v[i] for i in order] for k, v in cols.items()}


def _validity(values: list[Any]) -> tuple[Any, int]:
    """The validity bitmap of a list's None entries (None when there are none) and their count."""
    nulls = values.count(None)
    if not nulls:
        return None, 0
    bits = np.packbits(np.fromiter((v is not None for v in values), dtype=bool, count=len(values)), bitorder="little")
    return pa.py_buffer(bits), nulls


def arrow_array(values: list[Any], typ: Any) -> Any:
    """An Arrow array of `typ` (int64, double, large_string, large_list of those) from a list with
    None for null, made from buffers: pa.array() of a list imports pandas (pyarrow checks whether
    the list is a pandas object), ~0.5 s of CPU per ingest."""
    n = len(values)
    valid, nulls = _validity(values)
    if pa.types.is_large_list(typ):
        lens = np.fromiter((0 if v is None else len(v) for v in values), dtype=np.int64, count=n)
        offsets = np.concatenate(([0], np.cumsum(lens))).astype(np.int64)
        child = arrow_array([x for v in values if v is not None for x in v], typ.value_type)
        return pa.Array.from_buffers(typ, n, [valid, pa.py_buffer(offsets)], null_count=nulls, children=[child])
    if pa.types.is_large_string(typ):
        data = [b"" if v is None else v.encode() for v in values]
        offsets = np.concatenate(([0], np.cumsum(np.fromiter(map(len, data), dtype=np.int64, count=n)))).astype(np.int64)
        return pa.Array.from_buffers(typ, n, [valid, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))], null_count=nulls)
    if pa.types.is_boolean(typ):
        bits = np.packbits(np.fromiter((bool(v) for v in values), dtype=bool, count=n), bitorder="little")
        return pa.Array.from_buffers(typ, n, [valid, pa.py_buffer(bits)], null_count=nulls)
    dt = np.float64 if pa.types.is_floating(typ) else np.int64
    arr = np.fromiter((0 if v is None else v for v in values), dtype=dt, count=n)
    return pa.Array.from_buffers(typ, n, [valid, pa.py_buffer(arr)], null_count=nulls)


def read_sources_table(path: Path) -> list[dict[str, Any]]:
    return read_sources_rows(pl.read_parquet(path))


def read_sources_rows(table: pl.DataFrame | pa.Table) -> list[dict[str, Any]]:
    """The source dicts of a table of sources (`sources_table`)."""
    df = table if isinstance(table, pl.DataFrame) else pl.from_arrow(table)
    out = []
    for row in df.iter_rows(named=True):
        more = json.loads(row.pop("more") or "{}")
        for k in _JSON_FIELDS:
            row[k] = json.loads(row[k] or "{}")
        for k in _LIST_FIELDS:
            if row[k] is None:
                row[k] = []
        if not row["problems"]:
            row.pop("problems")
        out.append({**row, **more})
    return out


@dataclass
class Run:
    """An opened store. Queries start from `events()` (a LazyFrame) and read only what they need."""

    path: Path
    manifest: dict[str, Any] = field(repr=False)
    inputs: list[str] | None = None   # the raw log paths, when the store is a cache of them
    _sources: list[dict[str, Any]] | None = field(default=None, repr=False)

    @property
    def label(self) -> str:
        """What a report names: the logs the user pointed at, else the store."""
        return ", ".join(self.inputs) if self.inputs else str(self.path)

    @property
    def parts(self) -> list[dict[str, Any]]:
        """The part table: {path, kind, rows, bytes, rank_min, rank_max, ts_min, ts_max} per part
        (event parts also: unranked, untimed — their rows without a rank / a time)."""
        return self.manifest.get("parts", [])

    def _parts(self, kind: str) -> list[str]:
        return sorted(str(self.path / p["path"]) for p in self.parts if p["kind"] == kind)

    def event_parts(self) -> list[str]:
        """Absolute paths of the event parts, sorted (what `events()` scans)."""
        return self._parts("events")

    def reject_parts(self) -> list[str]:
        """Absolute paths of the reject parts, sorted (what `rejects()` scans)."""
        return self._parts("rejects")

    def kernel_parts(self) -> list[str]:
        """Absolute paths of the kernel parts (profiler traces' GPU activities), sorted."""
        return self._parts("kernels")

    def kernels(self) -> pl.LazyFrame:
        """The GPU activities of the run's profiler traces (empty without traces)."""
        from .schema import KERNEL_STORE_SCHEMA

        parts = self.kernel_parts()
        if not parts:
            return pl.LazyFrame(schema=KERNEL_STORE_SCHEMA)
        return pl.scan_parquet(parts, schema=KERNEL_STORE_SCHEMA)

    def events(self) -> pl.LazyFrame:
        parts = self.event_parts()
        if not parts:
            return pl.LazyFrame(schema=EVENT_SCHEMA)
        return pl.scan_parquet(parts, schema=EVENT_SCHEMA)

    def rejects(self) -> pl.LazyFrame:
        parts = self.reject_parts()
        if not parts:
            return pl.LazyFrame(schema=REJECT_SCHEMA)
        return pl.scan_parquet(parts, schema=REJECT_SCHEMA)

    def rank_slices(self, max_events: int | None = None) -> list[pl.LazyFrame]:
        """The run's ranked events in slices of whole, consecutive ranks of about `max_events`
        (default SLICE_EVENTS) events each; [] when one slice holds them all. The cuts are
        estimated from the part table (a part's rows spread evenly over its rank range), and
        each slice scans only the parts whose rank range meets its ranks, keeping only its
        ranks: together the slices hold every ranked event once, each rank's in the order of
        `events()`. Unranked events are in no slice."""
        max_events = max_events or SLICE_EVENTS
        ranked = [p for p in self.parts if p["kind"] == "events" and p.get("rank_min") is not None]
        cuts = _rank_cuts([(int(p["rank_min"]), int(p["rank_max"]), float(p["rows"])) for p in ranked], max_events)
        if not cuts:
            return []
        slices = []
        # open-ended at both ends: every ranked row falls in a slice
        for lo, hi in zip([None, *cuts], [*cuts, None]):
            keep = pl.col("rank").is_not_null()
            keep = keep if lo is None else keep & (pl.col("rank") > lo)
            keep = keep if hi is None else keep & (pl.col("rank") <= hi)
            parts = sorted(str(self.path / p["path"]) for p in ranked
                           if (lo is None or p["rank_max"] > lo) and (hi is None or p["rank_min"] <= hi))
            if parts:
                slices.append(pl.scan_parquet(parts, schema=EVENT_SCHEMA).filter(keep))
        return slices

    @property
    def sources(self) -> list[dict[str, Any]]:
        """One dict per source file (read from sources.parquet once, when the store has one)."""
        if self._sources is None:
            if "sources" in self.manifest:
                self._sources = self.manifest["sources"]
            else:
                self._sources = read_sources_table(self.path / self.manifest["sources_table"]["path"])
        return self._sources

    def source_columns(self, *cols: str) -> dict[str, list[Any]]:
        """Some fields of every source, as lists (a missing field: None). From a sources table
        these columns alone are read: `sources` decodes every field of every source (JSON text
        included), ~0.25 s on 4,096 sources, for the two or three a caller asks."""
        table = self.manifest.get("sources_table")
        if self._sources is None and "sources" not in self.manifest and table:
            path = self.path / table["path"]
            try:
                df = pl.read_parquet(path, columns=[c for c in cols if c in pl.read_parquet_schema(path)])
            except (OSError, pl.exceptions.PolarsError):
                df = None   # unreadable: `sources` says why
            if df is not None:
                return {c: df[c].to_list() if c in df.columns else [None] * df.height for c in cols}
        return {c: [s.get(c) for s in self.sources] for c in cols}

    @property
    def totals(self) -> dict[str, Any]:
        return self.manifest.get("totals", {})


# Slices of about this many events: a step-table aggregation over every rank at once held
# 2.1 GB RSS (1.0 GB in slices of 1 M events). A group never spans two ranks, so aggregating a
# slice of whole ranks at a time gives the same rows with one slice's state.
SLICE_EVENTS = 1_000_000


def _rank_cuts(parts: list[tuple[int, int, float]], max_events: int) -> list[int]:
    """Ranks r ending a slice (slices are (previous cut, r]) so that each holds about
    `max_events` rows, each part's rows spread evenly over its ranks; the last rank ends no cut."""
    if not parts:
        return []
    delta: dict[int, float] = {}                        # density changes: a sweep, O(P log P)
    for lo, hi, n in parts:
        d = n / (hi - lo + 1)
        delta[lo] = delta.get(lo, 0.0) + d
        delta[hi + 1] = delta.get(hi + 1, 0.0) - d
    points = sorted(delta)
    cuts: list[int] = []
    acc = d = 0.0
    last = max(b for _, b, _ in parts)
    for a, b in zip(points[:-1], points[1:]):          # ranks a .. b-1, one density
        d += delta[a]
        if d <= 1e-12:
            continue
        r = a
        while r < b:
            need = math.ceil((max_events - acc) / d)    # ranks until this slice is full
            if r + need > b:
                acc += d * (b - r)
                break
            r += need
            if r - 1 < last:
                cuts.append(r - 1)
            acc = 0.0
    return cuts


def recover(target: Path) -> None:
    """Undo a publication that died between the two renames of the fallback swap."""
    if target.exists():
        return
    for old in sorted(target.parent.glob(f".{target.name}.tmp-old-*")):
        if (old / MANIFEST).is_file():
            os.rename(old, target)
            return


def part_crc(path: str | os.PathLike[str]) -> str:
    """CRC-32 of a part file's bytes, as 8 hex digits (~0.25 ms per MB: a checksum of damage,
    not of tampering)."""
    import zlib

    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(4 << 20):
            crc = zlib.crc32(chunk, crc)
    return f"{crc:08x}"


def damaged_parts(path: str | os.PathLike[str], manifest: dict[str, Any], deep: bool = False) -> dict[str, str]:
    """Parts the part table lists (and the sources table) that are missing or not the size they
    were written at; `deep`: also those whose bytes no longer match the checksum written with
    them (a part overwritten with bytes of the same size). Returns {part (relative): what is
    wrong}."""
    p = Path(path)
    out: dict[str, str] = {}
    listed = list(manifest.get("parts", []))
    if manifest.get("sources_table"):
        listed.append(manifest["sources_table"])
    for part in listed:
        rel = part["path"]
        try:
            n = os.stat(p / rel).st_size
        except OSError:
            out[rel] = "missing"
            continue
        want = part.get("bytes")
        if want is not None and n != want:
            out[rel] = f"{n:,} bytes, written as {want:,}"
        elif deep and part.get("crc32"):
            try:
                got = part_crc(p / rel)
            except OSError as e:
                out[rel] = f"unreadable: {e.strerror or e}"
                continue
            if got != part["crc32"]:
                out[rel] = f"its bytes changed since written (CRC-32 {got}, written as {part['crc32']})"
    return out


# Stores opened by this process (open_store): when a query fails reading one, `damage_error`
# checks their parts' checksums to tell a damaged store from a bug.
_OPENED: dict[str, dict[str, Any]] = {}


def damage_error(e: BaseException) -> ForensicsError | None:
    """The STORE_DAMAGED error to report instead of `e` (an exception raised while reading a
    store's parts) when a store this process opened has a part whose bytes no longer match its
    checksum; None when none has (then `e` is not explained by damage). Only asked after a
    failure: checksumming every part on every open would cost each query a read of the store."""
    for path, manifest in list(_OPENED.items()):
        try:
            bad = damaged_parts(path, manifest, deep=True)
        except Exception:  # noqa: BLE001 - the check must not hide the original error
            continue
        if bad:
            return _damaged(Path(path), Run(path=Path(path), manifest=manifest), bad)
    return None


def _damaged(p: Path, run: Run, bad: dict[str, str]) -> ForensicsError:
    rel, what = next(iter(bad.items()))
    try:
        src = "rows of " + (", ".join(s["path"] for s in run.sources
                                      if rel in s.get("event_parts", []) + s.get("reject_parts", [])
                                      + s.get("kernel_parts", []))[:300] or "?")
    except Exception:  # the sources table itself is damaged: nothing names the files
        src = "the table of source files"
    return ForensicsError(
        f"store {p} is damaged: {len(bad)} part(s) missing, cut short or changed",
        where=str(p / rel),
        reason=f"{what} ({src})",
        help=f"ingest the logs again into the same store (forensics ingest LOGS -o {p}): the files "
             "whose parts are damaged are read again, the rest is kept",
        code=STORE_DAMAGED,
    )


def damaged_sources(run: Run, bad: dict[str, str] | None = None) -> set[str]:
    """Source files (absolute paths) with rows in a damaged part (`bad`: damaged_parts' answer,
    default its quick one): every one is read again on re-ingest (a part shared by many files is
    rebuilt from all of them)."""
    bad = damaged_parts(run.path, run.manifest) if bad is None else bad
    return {s["path"] for s in run.sources
            if any(rel in bad for rel in s.get("event_parts", []) + s.get("reject_parts", []) + s.get("kernel_parts", []))}


def _reingest_command(p: Path, manifest: dict[str, Any]) -> str:
    """The command that rebuilds the store at p from the logs it was made from."""
    paths = [s["path"] for s in manifest.get("sources", []) if s.get("path")]
    if not paths:
        return f"forensics ingest LOGS -o {p}"
    logs = paths[0] if len(paths) == 1 else os.path.commonpath(paths)
    return f"forensics ingest {logs} -o {p}"


def open_store(path: str | os.PathLike[str], verify: bool = True) -> Run:
    """Open a store. `verify`: every part the manifest lists must be there at its written size,
    else a STORE_DAMAGED error names the first bad part (re-ingest repairs the store)."""
    p = Path(path)
    recover(p)
    mf = p / MANIFEST
    if not mf.is_file():
        raise ForensicsError(
            f"{p} is not a forensics store",
            where=str(p),
            reason="no manifest.json (a store is only complete once its manifest is written)",
            help=f"create one with: forensics ingest LOGS -o {p}",
            code=NOT_A_STORE,
        )
    try:
        manifest = json.loads(mf.read_text())
    except (OSError, ValueError) as e:
        raise ForensicsError(f"cannot read {mf}", where=str(mf), reason=str(e), code=NOT_A_STORE) from None
    if manifest.get("schema_version") != SCHEMA_VERSION:
        raise ForensicsError(
            f"store {p} has schema version {manifest.get('schema_version')}, this forensics reads {SCHEMA_VERSION}",
            where=str(mf),
            reason="the store was written by another version of forensics (its layout or columns differ)",
            help=f"re-ingest the logs into it: {_reingest_command(p, manifest)}  (the store is rebuilt in place)",
            code=STORE_VERSION,
        )
    run = Run(path=p, manifest=manifest)
    _OPENED[str(p)] = manifest
    if verify:
        bad = damaged_parts(p, manifest)
        if bad:
            raise _damaged(p, run, bad)
    return run


# --- atomic publication ---------------------------------------------------------------------

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two directories (Linux renameat2). False where unsupported."""
    libc_name = ctypes.util.find_library("c")
    if not libc_name:
        return False
    libc = ctypes.CDLL(libc_name, use_errno=True)
    fn = getattr(libc, "renameat2", None)
    if fn is None:
        return False
    rc = fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    if ctypes.get_errno() in (errno.ENOSYS, errno.EINVAL, errno.EPERM):
        return False
    raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()), str(a))


def _failpoint(name: str) -> None:
    """Die here, as kill -9 would, when FORENSICS_FAILPOINT names this point (crash tests)."""
    if os.environ.get("FORENSICS_FAILPOINT") == name:
        os._exit(137)


def _fsync_dir(p: Path) -> None:
    try:
        fd = os.open(p, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """One writer per store: a lock file beside it, released when the process dies."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.parent / f".{path.name}.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ForensicsError(
                f"another forensics process is writing {path}",
                where=str(lock),
                help="wait for it to finish, or write to another store with -o",
                code=STORE_BUSY,
            ) from None
        yield
    finally:
        os.close(fd)


class StoreWriter:
    """Assembles the next version of a store in a staging directory, then publishes it.

    Usage: with locked(path): w = StoreWriter(path, previous_run); ...; w.commit(manifest)
    Killed anywhere before commit's swap: the old store is untouched and the staging directory
    (a dot-directory beside the store) is removed by the next writer.
    """

    def __init__(self, target: Path, previous: Run | None) -> None:
        self.target = target
        self.previous = previous
        recover(target)
        for stale in target.parent.glob(f".{target.name}.tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        self.staging = target.parent / f".{target.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        (self.staging / EVENTS_DIR).mkdir(parents=True)
        (self.staging / REJECTS_DIR).mkdir(parents=True)

    def new_part(self, sub: str) -> tuple[Path, str]:
        """A fresh part path in staging, and its name relative to the store."""
        rel = f"{sub}/part-{uuid.uuid4().hex}.parquet"
        return self.staging / rel, rel

    def keep(self, rel: str) -> None:
        """Carry a part of the previous version into the new one (hard link, no copy)."""
        assert self.previous is not None
        src = self.previous.path / rel
        dst = self.staging / rel
        dst.parent.mkdir(exist_ok=True)   # kernels/ exists only in stores with profiler traces
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    def rewrite(self, rel: str, kind: str, keep: Any) -> dict[str, Any] | None:
        """A part of the previous version with only the rows `keep(table)` (a boolean Arrow
        array) selects, written as a new part of this one (None: no row is left)."""
        assert self.previous is not None
        t = read_part(self.previous.path / rel, kind)
        t = t.filter(keep(t))
        if not t.num_rows:
            return None
        path, nrel = self.new_part(EVENTS_DIR if kind == "events" else REJECTS_DIR)
        w = PartWriter(path, kind)
        w.add(t)
        entry = w.close()
        assert entry is not None
        return {"path": nrel, **entry}

    def compact(self, parts: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, str]]:
        """Merge the small parts (under COMPACT_ROWS rows) of the version being written, in rank
        order, into parts of up to MERGE_ROWS rows (and 64 MB on disk), so that appends of small
        files or many small consoles do not leave many tiny parts. `parts`: its part table (paths
        in staging). Returns the new part table and {merged part: the part it went into}."""
        out = [p for p in parts]
        moved: dict[str, str] = {}
        for kind in ("events", "rejects"):
            small = [p for p in out if p["kind"] == kind and p["rows"] < COMPACT_ROWS]
            if len(small) < 2:
                continue
            small.sort(key=lambda p: (p.get("rank_min") is None, p.get("rank_min") or 0, p.get("ts_min") or "", p["path"]))
            groups: list[list[dict[str, Any]]] = [[]]
            rows = size = 0
            for p in small:
                b = os.stat(self.staging / p["path"]).st_size
                if groups[-1] and (rows + p["rows"] > MERGE_ROWS or size + b > 64 << 20):
                    groups.append([])
                    rows = size = 0
                groups[-1].append(p)
                rows += p["rows"]
                size += b
            for g in groups:
                if len(g) < 2:
                    continue
                path, rel = self.new_part(EVENTS_DIR if kind == "events" else REJECTS_DIR)
                w = PartWriter(path, kind)
                for p in g:
                    w.add(read_part(self.staging / p["path"], kind))
                entry = w.close()
                assert entry is not None
                for p in g:
                    os.unlink(self.staging / p["path"])
                    moved[p["path"]] = rel
                out = [p for p in out if p["path"] not in moved] + [{"path": rel, **entry}]
        return out, moved

    def commit(self, manifest: dict[str, Any]) -> None:
        """Publish: `manifest` holds "sources" (list of dicts) and "parts" (the part table); every
        part's size is recorded (damage is found on open), and past SOURCES_INLINE sources the
        sources go to sources.parquet with a pointer in the manifest."""
        manifest = {
            "tool": "forensics",
            "tool_version": __version__,
            "schema_version": SCHEMA_VERSION,
            "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            **manifest,
        }
        # a part carried from the previous version keeps its checksum (checked when that version
        # was read: `damaged_parts(deep=True)`); a new one is checksummed here
        manifest["parts"] = sorted(({**p, "bytes": os.stat(self.staging / p["path"]).st_size,
                                     "crc32": p.get("crc32") or part_crc(self.staging / p["path"])}
                                    for p in manifest.get("parts", [])), key=lambda p: (p["kind"], p["path"]))
        sources = manifest.get("sources", [])
        if isinstance(sources, dict):   # the columns of the sources (`sources_table`), in path order
            rows = len(sources["path"])
            if rows > SOURCES_INLINE:
                pq.write_table(sources_table(sources), self.staging / SOURCES_TABLE, compression="zstd")
            else:
                manifest["sources"] = read_sources_rows(sources_table(sources))
        elif len(sources) > SOURCES_INLINE:
            write_sources_table(sources, self.staging / SOURCES_TABLE)
        rows = len(sources["path"]) if isinstance(sources, dict) else len(sources)
        if rows > SOURCES_INLINE:
            del manifest["sources"]
            manifest["sources_table"] = {"path": SOURCES_TABLE, "rows": rows,
                                         "bytes": os.stat(self.staging / SOURCES_TABLE).st_size,
                                         "crc32": part_crc(self.staging / SOURCES_TABLE)}
        _failpoint("before-manifest")
        tmp = self.staging / (MANIFEST + ".tmp")
        with open(tmp, "w") as f:
            json.dump(manifest, f, indent=None if "sources_table" in manifest else 1, default=str)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.staging / MANIFEST)
        _fsync_dir(self.staging)
        _failpoint("before-swap")
        if self.target.exists():
            if not _exchange(self.staging, self.target):
                # Fallback: two renames; a crash between them leaves the old store at .old
                old = self.target.parent / f".{self.target.name}.tmp-old-{uuid.uuid4().hex[:8]}"
                os.rename(self.target, old)
                _failpoint("between-renames")
                os.rename(self.staging, self.target)
                self.staging = old
            _failpoint("after-swap")
            shutil.rmtree(self.staging, ignore_errors=True)
        else:
            os.rename(self.staging, self.target)
        _fsync_dir(self.target.parent)

    def abort(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)
