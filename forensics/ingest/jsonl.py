"""The JSON-lines reader: one block of bytes -> canonical events + rejected lines.

Owns the fast path (polars' NDJSON parser over the whole block, every value read as a string so
that `"rank": "3"` or `"loss": "nan"` never poisons a column) and the slow path that finds the
bad lines of a block one by one. Must not write files or decide where a rank comes from beyond
the hint it is given.

Why not let polars/DuckDB read the file: both infer a schema from the first lines (and drop
keys first seen later), and both lose the whole file on one malformed line. Here a block that
fails is split into its good and bad lines; every bad line is returned with its reason.
"""
from __future__ import annotations

import io
import json
import math
import re
from dataclasses import dataclass

import numpy as np
import orjson
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from ..schema import RAW_LIMIT, REJECT_SCHEMA, arrow_schema, conform
from . import native, text_lines
from .binary import BINARY, binary_runs, is_binary_text
from .normalize import KEY_COLON, KNOWN_TOP, canonical, stringify

RAW_SCHEMA = {k: pl.String for k in KNOWN_TOP}
_KNOWN = set(KNOWN_TOP)


@dataclass
class Block:
    # canonical columns + line (no source_file/format yet); the JSON-lines reader hands over an
    # Arrow table of the whole event schema instead (source_file/format null), see scan_block
    events: pl.DataFrame | pa.Table
    rejects: pl.DataFrame      # REJECT_SCHEMA minus source_file
    lines: int                 # lines read in this block
    in_order: bool | None = None  # events ordered by (rank, timestamp)? None: not known
    kernels: pa.Table | None = None  # profiler traces: GPU activities (schema.KERNEL_SCHEMA) for STORE/kernels
    # ranks a line names besides its own event's (two ranks' reports printed onto one physical
    # line: one event, the second report in its extra): ranks found, for the run's rank list
    ranks: tuple[int, ...] = ()


def line_offsets(buf: bytes) -> np.ndarray:
    """Start offsets of every line, plus len(buf) at the end."""
    arr = np.frombuffer(buf, dtype=np.uint8)
    nl = np.flatnonzero(arr == 10)
    offs = np.empty(len(nl) + 2, dtype=np.int64)
    offs[0] = 0
    offs[1 : len(nl) + 1] = nl + 1
    offs[-1] = len(buf)
    if offs[-2] == len(buf):  # buffer ends with a newline: no empty trailing line
        offs = offs[:-1]
    return offs


def _lines_series(buf: bytes, offs: np.ndarray) -> pl.Series:
    arr = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), len(offs) - 1, [None, pa.py_buffer(offs), pa.py_buffer(buf)]
    )
    return pl.Series("l", arr)


def _reason(raw: bytes, is_last_unterminated: bool) -> str | None:
    """Why a line that failed the cheap shape check is not an event (None: it may still be one)."""
    s = raw.strip()
    if not s:
        return "blank line"
    if s.startswith(b"{") and s.endswith(b"}"):
        return None
    if s.startswith(b"{") and is_last_unterminated:
        return "truncated line (no newline at end of file)"
    if is_binary_text(s.decode("utf-8", errors="replace")):
        return BINARY  # the rule every line reader shares (forensics/ingest/binary.py)
    if s.startswith(b"{"):
        return "truncated JSON object"
    if (s.startswith(b"[") or s.startswith(b'"')) and _is_json(s):
        return "JSON value is not an object"
    if b"\x00" in s or sum(c < 9 or 13 < c < 32 for c in s[:256]) > 2:
        return "binary data"
    # a launcher's or the process's own prefix before the text (`[rank3]: Traceback ...`, what
    # torch's worker stderr carries) is the console reader's to read: still text
    body = _PREFIX.sub(b"", s, count=1)
    if body.startswith(b"Traceback") or body.startswith(b"File ") or body.startswith(b'  File "'):
        return "not JSON: Python traceback"
    return "not JSON: text line"


# `[rank3]:`, `[default0]:`, `[1,3]<stderr>:` -- a bracketed tag and a colon before a line
_PREFIX = re.compile(rb"^\[[^\]\s]{1,40}\](?:<std(?:out|err)>)?:\s?")


def _is_json(s: bytes) -> bool:
    """Whether a line that starts like a JSON array or string is one ("[rank3]: Traceback" is not)."""
    try:
        orjson.loads(s)
    except orjson.JSONDecodeError:
        return False
    return True


def _non_finite_object(raw: bytes) -> dict | None:
    """A line Python's json.dumps wrote with its default allow_nan=True: `{"loss": NaN}`,
    `Infinity`, `-Infinity` are not JSON, but they are a value the run logged (a NaN loss is a
    fact, passes/non_finite.py). The object with those values as the strings "NaN", "Infinity",
    "-Infinity" (which the typed columns read as floats), or None."""
    if b"NaN" not in raw and b"Infinity" not in raw:
        return None
    try:
        o = json.loads(raw)
    except ValueError:
        return None
    return _finite_strings(o) if isinstance(o, dict) else None


def _finite_strings(v: object) -> object:
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if v != v else ("Infinity" if v > 0 else "-Infinity")
    if isinstance(v, dict):
        return {k: _finite_strings(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_finite_strings(x) for x in v]
    return v


def _rows_from_objects(objs: list[dict]) -> pl.DataFrame:
    cols: dict[str, list[str | None]] = {k: [] for k in KNOWN_TOP}
    for o in objs:
        for k in KNOWN_TOP:
            cols[k].append(stringify(o.get(k)))
    return pl.DataFrame(cols, schema=RAW_SCHEMA)


_WS = re.compile(r"[ \t\n\r]*")
_SCAN = json.JSONDecoder(strict=False).scan_once  # the C scanner: parses one value at an index, returns its end


def raw_object_text(line: str, key: str = "extra") -> str | None:
    """The text of top-level `key`'s value as written in a JSON-object line, if it is an object
    (the compiled scanner keeps `extra` this way; the Python path must store the same text).
    Values are skipped by the C scanner of the json module; the last occurrence wins, as in
    orjson. None when the line is not one JSON object or the value is not an object."""
    try:
        i = _WS.match(line, 0).end()
        if line[i] != "{":
            return None
        i = _WS.match(line, i + 1).end()
        found = None
        if line[i] == "}":
            return None
        while True:
            k, i = _SCAN(line, i)
            i = _WS.match(line, i).end()
            if line[i] != ":":
                return None
            i = _WS.match(line, i + 1).end()
            _, j = _SCAN(line, i)
            if k == key:
                found = line[i:j] if line[i] == "{" else None
            i = _WS.match(line, j).end()
            if line[i] == ",":
                i = _WS.match(line, i + 1).end()
                continue
            return found if line[i] == "}" else None
    except (StopIteration, ValueError, IndexError):
        return None


_LAST_EXTRA = r'"extra"\s*:\s*(\{.*\})\s*\}\s*$'


def _extra_as_written(df: pl.DataFrame, lines: pl.Series, idx: np.ndarray) -> pl.DataFrame:
    """Replace polars' re-serialisation of object `extra` values by their text as written.

    Fast case, vectorised: `extra` is the line's last key (the seed schema writes it last), so
    its text runs from the first `"extra": {` to the `}` before the line's closing brace. That
    capture is exactly the value when it holds as many keys (`"` then `:`) as polars' parse of
    the value: a key after extra, an "extra" nested in an earlier value or a second "extra" all
    add at least one key to the capture. Other lines take raw_object_text."""
    if "extra" not in df.columns:
        return df
    rows = np.flatnonzero(df["extra"].str.starts_with("{").fill_null(False).to_numpy())
    if not len(rows):
        return df
    sub = lines.gather(idx[rows])
    caps = sub.cast(pl.String, strict=False).str.extract(_LAST_EXTRA, 1)
    parsed = df["extra"].gather(rows)
    ok = (caps.str.count_matches(KEY_COLON) == parsed.str.count_matches(KEY_COLON)).fill_null(False).to_numpy()
    extra = df["extra"].clone()
    if ok.any():
        extra = extra.scatter(rows[ok], caps.filter(pl.Series(ok)))
    if not ok.all():
        vals = [raw_object_text(sub[int(k)].decode("utf-8", errors="replace")) for k in np.flatnonzero(~ok)]
        keep = [v is not None for v in vals]
        if any(keep):
            extra = extra.scatter(rows[~ok][keep], pl.Series([v for v in vals if v is not None], dtype=pl.String))
    return df.with_columns(extra.alias("extra"))


def _unknown_fields(obj: dict) -> str | None:
    rest = {k: v for k, v in obj.items() if k not in _KNOWN}
    return orjson.dumps(rest).decode() if rest else None


def parse_block(buf: bytes, first_line: int, at_eof: bool, rank_hint: int | None, host_hint: str | None) -> Block:
    """scan_block with the events as a polars DataFrame (every column of the event schema)."""
    b = scan_block(buf, first_line, at_eof, rank_hint, host_hint)
    return Block(pl.from_arrow(b.events), b.rejects, b.lines, b.in_order)


def scan_block(buf: bytes | memoryview, first_line: int, at_eof: bool, rank_hint: int | None, host_hint: str | None) -> Block:
    """Parse one newline-aligned block into an Arrow table of the event schema, in line order.

    The compiled scanner takes the lines it is sure of; the lines it declines (bad JSON, rare
    shapes) are parsed here by the Python path, which rejects with reasons. Line numbers are
    1-based; `first_line` is the number of the block's first line.
    Accounting: lines == events rows + rejects rows."""
    if not native.available():
        b = parse_block_py(bytes(buf), first_line, at_eof, rank_hint, host_hint)
        return Block(_to_table(b.events), b.rejects, b.lines)
    n, table, declined, in_order = native.scan(buf, first_line, rank_hint, host_hint)
    if not len(declined):
        return Block(table, rejects_frame([]), n, in_order)
    offs = line_offsets(buf)
    sub = b"".join([buf[offs[i] : offs[i + 1]] for i in declined])
    slow = parse_block_py(sub, 0, at_eof, rank_hint, host_hint, whole=False)
    to_line = declined + first_line  # sub-block line i is block line declined[i]
    rej = slow.rejects.with_columns(pl.Series("line", to_line[slow.rejects["line"].to_numpy()], dtype=pl.Int64))
    rej = binary_neighbours(rej, first_line, n)
    parts = [table]
    if slow.events.height:
        ev = slow.events.with_columns(pl.Series("line", to_line[slow.events["line"].to_numpy()], dtype=pl.Int64))
        parts.append(_to_table(ev))
    tev, rej = _text_table([pl.from_arrow(t["rank"]) for t in parts], rej, rank_hint, host_hint)
    if tev is not None:
        parts.append(tev)
    if len(parts) > 1:
        both = pa.concat_tables(parts)
        table = both.take(pc.sort_indices(both["line"]))
    assert table.num_rows + rej.height == n, (table.num_rows, rej.height, n)
    return Block(table, rej, n)


@dataclass
class FilesBlock:
    """scan_files' result: many small files' events in one table, and which file each row is of."""
    events: pa.Table           # the event schema (source_file/format null), in file then line order
    file_of: np.ndarray        # int64 per events row: its file's index in the call's list
    lines: np.ndarray          # int64 per file: lines read
    rejects: pl.DataFrame      # BLOCK_REJECT_SCHEMA plus "file" (the file's index), in file then line order
    in_order: bool             # events ordered by (rank, timestamp)


def scan_files(buf: bytes | memoryview, ends: list[int],
               hints: list[tuple[int | None, str | None]]) -> FilesBlock:
    """Parse many whole small files (each non-empty, ending with a newline, with its rank and host
    hints), one after the other in `buf` (file i ends at ends[i]), in one scanner call: what
    scan_block does per file, without its per-call costs (a one-line file cost ~4 ms through
    scan_block, ~40x its parse). Line numbers start at 1 in each file. Needs the compiled scanner
    (native.available()).
    Accounting: per file, lines == its events rows + its rejects rows."""
    segs = [(e, r, h) for e, (r, h) in zip(ends, hints)]
    table, declined, rows, lines, in_order = native.scan_files(buf, segs)
    file_of = np.repeat(np.arange(len(ends), dtype=np.int64), rows)
    rejects = [pl.DataFrame(schema={**BLOCK_REJECT_SCHEMA, "file": pl.Int64})]
    if len(declined):
        # the declined lines, file by file, through the Python path (rejects with reasons)
        first = np.cumsum(lines) - lines                  # index in buf of each file's first line
        which = np.searchsorted(first, declined, side="right") - 1
        offs = line_offsets(buf)
        events = [table]
        files = [file_of]
        for k in np.unique(which):
            idx = declined[which == k]
            sub = b"".join([buf[offs[i] : offs[i + 1]] for i in idx])
            slow = parse_block_py(sub, 0, True, *hints[k], whole=False)
            to_line = idx - first[k] + 1                  # sub-block line i is file line to_line[i]
            rej_k = slow.rejects.with_columns(pl.Series("line", to_line[slow.rejects["line"].to_numpy()], dtype=pl.Int64))
            rej_k = binary_neighbours(rej_k, 1, int(lines[k]))
            ranks = [pl.from_arrow(table["rank"]).filter(pl.Series(file_of == k))]
            if slow.events.height:
                ev = slow.events.with_columns(pl.Series("line", to_line[slow.events["line"].to_numpy()], dtype=pl.Int64))
                events.append(_to_table(ev))
                files.append(np.full(ev.height, k, dtype=np.int64))
                ranks.append(ev["rank"])
            tev, rej_k = _text_table(ranks, rej_k, *hints[k])
            if tev is not None:
                events.append(tev)
                files.append(np.full(tev.num_rows, k, dtype=np.int64))
            rejects.append(rej_k.with_columns(pl.lit(int(k), pl.Int64).alias("file")))
        if len(events) > 1:
            both = pa.concat_tables(events)
            file_of = np.concatenate(files)
            order = pc.sort_indices(pa.table({"f": native.int_array(file_of), "l": both["line"]}), [("f", "ascending"), ("l", "ascending")])
            table, file_of, in_order = both.take(order), file_of[native.index_view(order)], False
    rej = pl.concat(rejects)
    assert table.num_rows + rej.height == int(lines.sum()), (table.num_rows, rej.height, int(lines.sum()))
    return FilesBlock(table, file_of, lines, rej, in_order)


def _text_table(ranks: list[pl.Series], rej: pl.DataFrame, rank_hint: int | None,
                host_hint: str | None) -> tuple[pa.Table | None, pl.DataFrame]:
    """The scanner's side of text_lines.read_text: the Arrow table of the events read from the
    text rejects of one file's block `rej` (numbered as in the file; None: none), and the rejects
    left. `ranks`: the rank columns of the block's JSON events."""
    tev, rej = text_lines.read_text(rej, rank_hint, host_hint, text_lines.file_rank(pl.concat([r.cast(pl.Int64) for r in ranks]) if ranks else None))
    return (_to_table(tev) if tev is not None and tev.height else None), rej


def _to_table(ev: pl.DataFrame) -> pa.Table:
    """Canonical polars events -> the Arrow table of the whole event schema."""
    return conform(ev).to_arrow().cast(arrow_schema())


def parse_block_py(buf: bytes, first_line: int, at_eof: bool, rank_hint: int | None, host_hint: str | None,
                   whole: bool = True) -> Block:
    """The pure-Python parse of one newline-aligned block (the reference the scanner must match).
    Line numbers are 1-based; `first_line` is the number of the block's first line. `whole`:
    the lines are consecutive (False for the scanner's declined lines, whose caller judges short
    lines between binary ones once it knows their real numbers: binary_neighbours).
    Accounting: lines == events.height + rejects.height."""
    if not buf:
        return Block(empty_events(), rejects_frame([]), 0)
    offs = line_offsets(buf)
    n = len(offs) - 1
    lines = _lines_series(buf, offs)
    lens = np.diff(offs)
    good_shape = (
        lines.bin.starts_with(b"{")
        & (lines.bin.ends_with(b"}\n") | lines.bin.ends_with(b"}\r\n") | lines.bin.ends_with(b"}"))
    ).to_numpy()
    unterminated_last = not buf.endswith(b"\n")
    rejects: list[tuple[int, str, bytes, int]] = []
    cand = np.ones(n, dtype=bool)
    fixed: dict[int, bytes] = {}   # line index -> repaired bytes parsed on the slow path
    for i in np.flatnonzero(~good_shape):
        raw = buf[offs[i] : offs[i + 1]]
        why = _reason(raw, bool(unterminated_last and at_eof and i == n - 1))
        if why is not None:
            rejects.append((int(i), why, raw, len(raw)))
            cand[i] = False
    # UTF-8: validate the block at C speed; only a damaged block is examined line by line.
    try:
        buf.decode("utf-8")
    except UnicodeDecodeError:
        for i in np.flatnonzero(cand):
            raw = buf[offs[i] : offs[i + 1]]
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                fixed[int(i)] = raw.decode("utf-8", errors="replace").encode("utf-8")
                cand[i] = False
    objs_slow: dict[int, dict] = {}
    for i, b in fixed.items():
        try:
            o = orjson.loads(b)
        except orjson.JSONDecodeError as e:
            raw = buf[offs[i] : offs[i + 1]]
            why = BINARY if is_binary_text(b.decode()) else f"invalid JSON: {e}"
            rejects.append((i, why, raw, int(lens[i])))
            continue
        if isinstance(o, dict):
            objs_slow[i] = o
        else:
            rejects.append((i, "JSON value is not an object", buf[offs[i] : offs[i + 1]], int(lens[i])))

    fast_idx = np.flatnonzero(cand)
    raw_df: pl.DataFrame | None = None
    if len(fast_idx):
        raw_df, bad = _parse_fast(buf, offs, fast_idx, n)
        if bad:
            keep = np.ones(len(fast_idx), dtype=bool)
            for pos, why in bad:
                i = int(fast_idx[pos])
                keep[pos] = False
                o = _non_finite_object(buf[offs[i] : offs[i + 1]]) if why.startswith("invalid JSON") else None
                if o is not None:
                    objs_slow[i], fixed[i] = o, orjson.dumps(o)
                    continue
                rejects.append((i, why, buf[offs[i] : offs[i + 1]], int(lens[i])))
            fast_idx = fast_idx[keep]

    frames = []
    if raw_df is not None and raw_df.height:
        raw_df = raw_df.with_columns(pl.Series("line", fast_idx + first_line, dtype=pl.Int64))
        raw_df = _with_unknown_fields(raw_df, lines, fast_idx)
        raw_df = _repair_nested(raw_df, lines, fast_idx)
        raw_df = _extra_as_written(raw_df, lines, fast_idx)
        frames.append(raw_df)
    if objs_slow:
        idx = np.array(sorted(objs_slow), dtype=np.int64)
        sdf = _rows_from_objects([objs_slow[i] for i in idx]).with_columns(
            pl.Series("line", idx + first_line, dtype=pl.Int64),
            pl.Series("fields", [_unknown_fields(objs_slow[i]) for i in idx], dtype=pl.String),
        )
        # repaired (non-UTF-8) lines: extra as written in the repaired text
        sdf = sdf.with_columns(pl.Series("extra", [
            raw_object_text(fixed[int(i)].decode()) if isinstance(objs_slow[int(i)].get("extra"), dict) else e
            for i, e in zip(idx, sdf["extra"].to_list())], dtype=pl.String))
        frames.append(sdf)
    if frames:
        raw_all = pl.concat(frames, how="diagonal_relaxed").sort("line") if len(frames) > 1 else frames[0]
        events = canonical(raw_all, rank_hint, host_hint)
    else:
        events = empty_events()
    rej = rejects_frame([(i + first_line, why, raw, ln) for i, why, raw, ln in rejects])
    if whole:
        rej = binary_neighbours(rej, first_line, n)
        # the text between JSON lines is the file's console text (text_lines.py)
        tev, rej = text_lines.read_text(rej, rank_hint, host_hint,
                                        text_lines.file_rank(events["rank"] if "rank" in events.columns else None))
        if tev is not None and tev.height:
            events = text_lines.merged(events, tev)
    assert events.height + rej.height == n, (events.height, rej.height, n)
    return Block(events, rej, n)


def binary_neighbours(rej: pl.DataFrame, first_line: int, n: int) -> pl.DataFrame:
    """Rejects (of a block of `n` lines from `first_line`) with the short lines that sit between
    binary lines marked binary too (binary.binary_runs: a 2-byte fragment of random data is not
    text). A line that is not a reject is an event: text, so it ends a run of garbage."""
    if rej.height < 2 or not (rej["reason"] == BINARY).any():
        return rej
    lines = rej["line"].to_list()
    reasons = rej["reason"].to_list()
    text = [r.decode("utf-8", errors="replace").rstrip("\r\n") for r in rej["raw"].to_list()]
    out = list(reasons)
    start = 0
    while start < len(lines):
        end = start + 1
        while end < len(lines) and lines[end] == lines[end - 1] + 1:
            end += 1
        run = text[start:end]
        flags = [r == BINARY for r in reasons[start:end]]
        if lines[end - 1] < first_line + n - 1:      # an event follows the run in this block
            run, flags = run + ["event"], flags + [False]
        before = None if lines[start] == first_line else False
        for k, b in enumerate(binary_runs(run, flags, before)[: end - start]):
            # an unterminated last line keeps its reason: the append logic reads it again
            if b and not flags[k] and not reasons[start + k].startswith("truncated line"):
                out[start + k] = BINARY
        start = end
    if out == reasons:
        return rej
    return rej.with_columns(pl.Series("reason", out, dtype=pl.String))


def _parse_fast(buf: bytes, offs: np.ndarray, idx: np.ndarray, n: int) -> tuple[pl.DataFrame, list[tuple[int, str]]]:
    """Parse the candidate lines `idx` with polars in one go; on failure find the culprits.

    Returns the parsed rows (one per surviving candidate, in order) and the positions (into idx)
    of candidates that turned out not to be JSON objects, with reasons.
    """
    if len(idx) == n:
        data = buf
    else:
        # Blank out non-candidate lines in place: polars skips whitespace-only lines, so rows
        # keep the order of the candidates and no offsets move.
        ba = bytearray(buf)
        mask = np.ones(n, dtype=bool)
        mask[idx] = False
        for i in np.flatnonzero(mask):
            a, b = int(offs[i]), int(offs[i + 1])
            ba[a:b] = b" " * (b - a - 1) + (b"\n" if ba[b - 1 : b] == b"\n" else b" ")
        data = bytes(ba)
    try:
        df = pl.read_ndjson(io.BytesIO(data), schema=RAW_SCHEMA)
        if df.height == len(idx):
            return df, []
    except Exception:  # noqa: BLE001 - polars raises ComputeError/others; we re-check each line
        pass
    # Slow path: judge each candidate with orjson, then parse the survivors again.
    bad: list[tuple[int, str]] = []
    ok_pos: list[int] = []
    for pos, i in enumerate(idx):
        raw = buf[offs[i] : offs[i + 1]]
        try:
            o = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            bad.append((pos, f"invalid JSON: {e}"))
            continue
        if not isinstance(o, dict):
            bad.append((pos, "JSON value is not an object"))
        else:
            ok_pos.append(pos)
    if not ok_pos:
        return pl.DataFrame(schema=RAW_SCHEMA), bad
    sub = b"".join(buf[offs[idx[p]] : offs[idx[p] + 1]].rstrip(b"\r\n") + b"\n" for p in ok_pos)
    try:
        df = pl.read_ndjson(io.BytesIO(sub), schema=RAW_SCHEMA)
        if df.height == len(ok_pos):
            return df, bad
    except Exception:  # noqa: BLE001
        pass
    # polars is stricter than orjson on something here: build rows from orjson objects.
    objs = [orjson.loads(buf[offs[idx[p]] : offs[idx[p] + 1]]) for p in ok_pos]
    return _rows_from_objects(objs), bad


def _with_unknown_fields(df: pl.DataFrame, lines: pl.Series, idx: np.ndarray) -> pl.DataFrame:
    """Add `fields`: top-level keys outside the known set, as a JSON object.

    Cheap check first: a line's count of '":' (one per key, spaces allowed before the colon, plus any inside values) must equal
    the count over the known values we parsed plus the number of known keys present. Lines that
    disagree (unknown keys, null values, odd spacing) are re-read with orjson to be sure.
    """
    text = lines.gather(idx).cast(pl.String, strict=False)
    line_count = text.str.count_matches(KEY_COLON).fill_null(0)
    # Envelope values other than message/extra never contain '":' in practice; if one does, the
    # line is only re-checked with orjson (slower, still exact).
    known_count = df.select(
        pl.sum_horizontal(
            [pl.col(c).str.count_matches(KEY_COLON).fill_null(0) for c in ("message", "extra")]
            + [pl.col(c).is_not_null().cast(pl.UInt32) for c in KNOWN_TOP]
        )
    ).to_series()
    suspect = np.flatnonzero((line_count.cast(pl.Int64) != known_count.cast(pl.Int64)).to_numpy())
    if not len(suspect):
        return df.with_columns(pl.lit(None, dtype=pl.String).alias("fields"))
    fields: list[str | None] = [None] * df.height
    raw_lines = lines.gather(idx[suspect]).to_list()
    for pos, raw in zip(suspect, raw_lines):
        try:
            fields[int(pos)] = _unknown_fields(orjson.loads(raw))
        except orjson.JSONDecodeError:
            pass
    return df.with_columns(pl.Series("fields", fields, dtype=pl.String))


def _repair_nested(df: pl.DataFrame, lines: pl.Series, idx: np.ndarray) -> pl.DataFrame:
    """Objects and arrays read as String (`extra` above all) come back from polars re-serialised
    without escaping: a backslash, quote or control character inside a string value makes
    broken JSON (measured: {"file": "\\\\"} -> {"file": "\\"}), and the typed metrics of that
    object were lost. Only a line with a backslash can hold such a value: those are re-read with
    orjson and their nested values written again."""
    rows = np.flatnonzero(lines.gather(idx).bin.contains(b"\\").to_numpy())
    if not len(rows):
        return df
    cols: dict[str, list[str | None]] = {}
    for pos, raw in zip(rows, lines.gather(idx[rows]).to_list()):
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        for k in KNOWN_TOP:
            v = obj.get(k) if isinstance(obj, dict) else None
            if isinstance(v, (dict, list)):
                col = cols.setdefault(k, df[k].to_list())
                col[int(pos)] = stringify(v)
    return df.with_columns([pl.Series(k, v, dtype=pl.String) for k, v in cols.items()]) if cols else df


def empty_events() -> pl.DataFrame:
    return canonical(pl.DataFrame({"line": []}, schema={"line": pl.Int64}), None, None)


BLOCK_REJECT_SCHEMA = {k: v for k, v in REJECT_SCHEMA.items() if k != "source_file"}


def rejects_frame(rows: list[tuple[int, str, bytes, int]]) -> pl.DataFrame:
    """A Block's rejects from (line, reason, raw bytes, raw length) rows; raw is cut to RAW_LIMIT.
    Every reader builds its rejects here, so they all look alike."""
    if not rows:
        return pl.DataFrame(schema=BLOCK_REJECT_SCHEMA)
    return pl.DataFrame(
        {
            "line": [r[0] for r in rows],
            "reason": [r[1] for r in rows],
            "raw": [r[2][:RAW_LIMIT] for r in rows],
            "raw_len": [r[3] for r in rows],
        },
        schema=BLOCK_REJECT_SCHEMA,
    ).sort("line")

