"""The bridge to the compiled JSON-lines scanner (_scan.c): schema tables in, Arrow columns out.

Owns: loading the extension, handing it the schema's names (metrics, aliases and unit factors,
envelope keys, level spellings) and turning its buffers into an Arrow table of the event schema
without copying the values. Must not parse anything itself: what the scanner declines goes back
to jsonl.py by line index.

`FORENSICS_NATIVE=0` turns the scanner off (the pure-Python path; same results, slower) -- the
tests run both and compare them line by line.
"""
from __future__ import annotations

import os

import numpy as np
import pyarrow as pa

from ..schema import ALIASES, ENVELOPE, ENVELOPE_ALIASES, EVENT_SOURCES, FIELDS, LEVELS, RANK_SOURCES, arrow_schema
from ..store import arrow_array
from .normalize import _LEVELS, MESSAGE_KEYS

def _load_scan():
    """The compiled scanner: the one `pip install` built (setup.py), or -- for the sanitizer run
    (bench/sanitize.py) -- the build FORENSICS_SCAN_LIB names; None when there is none."""
    lib = os.environ.get("FORENSICS_SCAN_LIB")
    if lib:
        import importlib.util

        spec = importlib.util.spec_from_file_location(f"{__package__}._scan", lib)
        assert spec is not None and spec.loader is not None, lib
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    try:
        from . import _scan as mod
    except ImportError:  # pragma: no cover - depends on the install
        return None
    return mod


_scan = _load_scan()

_KIND = {"Float64": 0, "Int64": 1, "Int32": 2, "String": 3}
_E_ALIAS = 100


def available() -> bool:
    """Whether ingest uses the compiled scanner in this process."""
    return _scan is not None and os.environ.get("FORENSICS_NATIVE", "1") != "0"


def _configure() -> None:
    names = list(FIELDS)
    kinds = [_KIND[type(FIELDS[n].dtype).__name__] for n in names]
    index = {n: i for i, n in enumerate(names)}
    if len(ALIASES) >= 256:  # the scanner keeps one bit per alias for duplicate keys
        raise RuntimeError("too many metric aliases for the native scanner")
    aliases = [(a, index[canon], float(f), pos, int(a in MESSAGE_KEYS)) for pos, (a, (canon, f)) in enumerate(ALIASES.items())]
    envelope = [(k, ENVELOPE.index(k)) for k in ENVELOPE]
    envelope += [(k, _E_ALIAS) for k, canon in ENVELOPE_ALIASES.items() if k != canon]
    levels = [(k, LEVELS.index(v)) for k, v in _LEVELS.items()]
    _scan.configure(kinds, aliases, envelope, levels, index["step"], index["loss"])


if _scan is not None:
    _configure()

_METRIC_POS = {name: i for i, name in enumerate(FIELDS)}  # the scanner's metric order
_ENUMS = {"rank_source": RANK_SOURCES, "level": LEVELS, "event_source": EVENT_SOURCES}
_DICTIONARIES: dict[str, pa.Array] = {}


def int_array(values: np.ndarray) -> pa.Array:
    """An int64 array of a numpy array, without pa.array() (which imports pandas: store.arrow_array)."""
    v = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(v), [None, pa.py_buffer(v)])


def index_view(a: pa.Array) -> np.ndarray:
    """A numpy view of pyarrow's sort indices (uint64, no nulls): Array.to_numpy imports pandas."""
    return np.frombuffer(a.buffers()[1], dtype=np.uint64, count=len(a), offset=a.offset * 8)


def _buf(b: bytes | None) -> pa.Buffer | None:
    return None if b is None else pa.py_buffer(b)


def _enum(n: int, codes, field: pa.Field) -> pa.Array:
    """uint8 codes into the enum's values -> the dictionary column polars writes for an Enum."""
    values = _DICTIONARIES.get(field.name)
    if values is None:
        values = _DICTIONARIES[field.name] = arrow_array(_ENUMS[field.name], pa.large_string())
    idx = pa.Array.from_buffers(pa.uint8(), n, [None, pa.py_buffer(codes)])
    return pa.DictionaryArray.from_arrays(idx, values).cast(field.type)


_ZEROS: list[pa.Buffer] = [pa.py_buffer(b"")]   # shared by the threads: replaced, never changed
_ZEROS_MAX = 1 << 20


def _nulls(n: int, type_: pa.DataType) -> pa.Array:
    """n nulls of a fixed-width or large_string type. pa.nulls allocates a zeroed buffer per
    column: ~20 columns of a block, 150 bytes a row (a third of its table), held until the rows
    are written. These share one zeroed buffer (validity, values and offsets alike: Arrow
    buffers are never written to) -- up to _ZEROS_MAX bytes, kept for the process."""
    size = (n + 1) * 8
    if size > _ZEROS_MAX:
        return pa.nulls(n, type_)
    z = _ZEROS[0]
    if z.size < size:
        z = _ZEROS[0] = pa.py_buffer(bytes(min(2 * size, _ZEROS_MAX)))
    if type_ == pa.large_string():
        return pa.Array.from_buffers(type_, n, [z, z, z], null_count=n)
    return pa.Array.from_buffers(type_, n, [z, z], null_count=n)


def _strings(n: int, t: tuple) -> pa.Array:
    valid, offsets, data, nulls = t
    if offsets is None:
        return _nulls(n, pa.large_string())
    return pa.Array.from_buffers(pa.large_string(), n, [_buf(valid), pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls)


# None without the scanner, or with one built before it had find (`pip install -e .` rebuilds it)
_find = getattr(_scan, "find", None)


def find(buf: bytes, needle: bytes, end: int) -> int:
    """buf.find(needle, 0, end) for end >= 0: by the scanner (memmem, without the GIL) when it is
    built, whatever FORENSICS_NATIVE says (the same answer; reading the setting cost as much as
    the search of a small file's head)."""
    return _find(buf, needle, end) if _find is not None else buf.find(needle, 0, end)


def scan(buf: bytes, first_line: int, rank_hint: int | None, host_hint: str | None):
    """Scan a newline-aligned block. Returns (lines, table of the accepted lines in the event
    schema with `source_file`/`format` null, in line order; indices of declined lines; whether
    the table is already ordered by (rank, timestamp))."""
    n_lines, rows, fallback, in_order, cols = _scan.scan(buf, first_line, rank_hint, host_hint)
    return n_lines, _table(rows, cols), np.frombuffer(fallback, dtype=np.int64), bool(in_order)


def scan_files(buf: bytes, segments: list[tuple[int, int | None, str | None]]):
    """Scan many small files joined into one buffer in one call (the per-call costs -- building
    ~40 Arrow columns, releasing the GIL -- paid once, not per file). `segments`: per file
    (byte offset of its end in buf, rank hint, host hint); every file ends with a newline and its
    lines are numbered from 1 with its own hints. Returns (table as scan's, in file order;
    indices in buf of the declined lines; rows per file; lines per file; ordered by (rank,
    timestamp)?)."""
    n_lines, rows, fallback, in_order, cols = _scan.scan(buf, 1, None, None, segments)
    ends = np.frombuffer(cols["seg_rows"], dtype=np.int64)
    per_file = np.diff(ends, prepend=0)
    return (_table(rows, cols), np.frombuffer(fallback, dtype=np.int64), per_file,
            np.frombuffer(cols["seg_lines"], dtype=np.int64), bool(in_order))


def _table(rows: int, cols: dict) -> pa.Table:
    """The scanner's buffers as a table of the event schema (no copy of the values)."""
    schema = arrow_schema()
    arrays: list[pa.Array] = []
    metrics = cols["metrics"]
    for f in schema:
        name = f.name
        if name in ("timestamp", "rank"):
            valid, values, nulls = cols[name]
            arrays.append(pa.Array.from_buffers(f.type, rows, [_buf(valid), pa.py_buffer(values)], null_count=nulls))
        elif name in _ENUMS:
            arrays.append(_enum(rows, cols[name], f))
        elif name == "line":
            arrays.append(pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(cols["line"])]))
        elif name in ("host", "event", "message", "extra", "fields"):
            arrays.append(_strings(rows, cols[name]))
        elif name in _METRIC_POS:
            t = metrics[_METRIC_POS[name]]
            if len(t) == 4:
                arrays.append(_strings(rows, t))
            elif t[1] is None:
                arrays.append(_nulls(rows, f.type))
            else:
                arrays.append(pa.Array.from_buffers(f.type, rows, [_buf(t[0]), pa.py_buffer(t[1])], null_count=t[2]))
        else:  # local_rank, source_file, format: not known from a JSON line alone
            arrays.append(_nulls(rows, f.type))
    return pa.Table.from_arrays(arrays, schema=schema)
