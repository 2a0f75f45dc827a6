"""The compiled scanner (forensics/ingest/_scan.c) against the pure-Python path, line for line.

The scanner may decline any line (the Python path then parses it); whatever it accepts must come
out exactly as the Python path makes it. `extra` is compared as text (both paths store an
object's text as written; before, the Python path re-serialised it and one store mixed both);
`fields` is compared as JSON values (both rebuild that object from its members).
"""
from __future__ import annotations

import json
import math
import os

import orjson
import polars as pl
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics.ingest import native
from forensics.ingest.jsonl import _to_table, parse_block_py, scan_block
from forensics.ingest.normalize import MESSAGE_KEYS
from forensics.schema import ALIASES, ENVELOPE_ALIASES, FIELDS, LEVEL_ALIASES

needs_scanner = pytest.mark.skipif(native._scan is None, reason="compiled scanner not built")


def test_scanner_is_built():
    """`pip install -e .` compiles the scanner (setup.py). If it could not, ingest still works on
    the pure-Python path, 3x slower -- and this test says so instead of letting every
    comparison below skip quietly. FORENSICS_NATIVE=0 is the deliberate way to run without it."""
    if os.environ.get("FORENSICS_NATIVE") == "0":
        pytest.skip("FORENSICS_NATIVE=0")
    assert native._scan is not None, "forensics/ingest/_scan.c was not compiled: is a C compiler installed?"


def _floats(x):
    """Numbers as floats: on the Python path polars re-serialises `extra` and may write a float
    as an integer (5.9e16 -> 59295163605238430, 0.0 -> 0); the scanner keeps the text as written."""
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return x
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, list):
        return [_floats(v) for v in x]
    return {k: _floats(v) for k, v in x.items()}


def _json_or_none(v):
    """A JSON text as its value (so that spacing and escapes do not count); other text as itself."""
    if v is None:
        return None
    try:
        # strict=False: polars writes control characters raw when it re-serialises `extra` on
        # the Python path; the scanner keeps the line's escapes
        return ("json", _floats(json.loads(v, strict=False)))
    except ValueError:
        return ("text", v)


def _same(a: pa.Table, b: pa.Table, buf: bytes) -> None:
    assert a.schema == b.schema
    assert a.num_rows == b.num_rows, (a.num_rows, b.num_rows)
    for name in a.column_names:
        if name == "timestamp":  # as integers (exact; a far-future epoch is beyond Python's datetime)
            x, y = a[name].cast(pa.int64()).to_pylist(), b[name].cast(pa.int64()).to_pylist()
        else:
            x, y = a[name].to_pylist(), b[name].to_pylist()
        if name == "fields":  # `extra` is compared as text: both paths store it as written
            x, y = [_json_or_none(v) for v in x], [_json_or_none(v) for v in y]
        for i, (p, q) in enumerate(zip(x, y)):
            same = p == q or (isinstance(p, float) and isinstance(q, float) and math.isnan(p) and math.isnan(q))
            if not same:
                line = a["line"][i].as_py()
                raw = buf.split(b"\n")[line - 1]
                raise AssertionError(f"column {name}, line {line}: native {p!r} != python {q!r}\n{raw!r}")


def _compare(buf: bytes, rank_hint=None, host_hint=None) -> tuple[int, int]:
    """Both paths on one block; returns (lines, lines the scanner declined)."""
    got = scan_block(buf, 1, True, rank_hint, host_hint)
    ref = parse_block_py(buf, 1, True, rank_hint, host_hint)
    _same(got.events, _to_table(ref.events), buf)
    assert got.rejects.sort("line").equals(ref.rejects.sort("line"))
    assert got.lines == ref.lines
    _, _, declined, _ = native.scan(buf, 1, rank_hint, host_hint)
    return got.lines, len(declined)


# ---------------------------------------------------------------- value strategies

ISO = st.builds(
    lambda y, mo, d, h, mi, s, frac, sep, zone: f"{y:04d}-{mo:02d}-{d:02d}{sep}{h:02d}:{mi:02d}:{s:02d}{frac}{zone}",
    st.integers(1970, 2100), st.integers(1, 12), st.integers(1, 31), st.integers(0, 23), st.integers(0, 59),
    st.integers(0, 60), st.sampled_from(["", ".1", ".014", ".123456", ".1234567", ".123456789", ".1234567891"]),
    st.sampled_from(["T", " "]), st.sampled_from(["", "Z", "+00:00", "+02:00", "-05:30", "+0200", "+02", "z", " Z"]),
)
NUMBER_TEXT = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.integers(-10**20, 10**20).map(str),
    st.sampled_from(["nan", "NaN", "inf", "-inf", "1e-4", "1E+05", ".5", "5.", "+3", "0x10", "1_000", "12/100",
                     "3%", "2.5s", "", "-0", "007", "1e400", "abc", "1.0.0", "١٢"]),
)
SCALAR = st.one_of(
    st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=False, allow_infinity=False),
    NUMBER_TEXT, st.text(max_size=12),
)
VALUE = st.recursive(SCALAR, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=6)
ALIAS_NAMES = sorted(ALIASES)
MSG_NAMES = sorted(MESSAGE_KEYS)
LEVEL_NAMES = sorted(LEVEL_ALIASES) + ["info", "Warning", "warn ", "trace", "verbose", ""]


@st.composite
def messages(draw):
    parts = []
    for _ in range(draw(st.integers(0, 5))):
        kind = draw(st.integers(0, 4))
        if kind == 0:
            parts.append(draw(st.text(max_size=10)))
        else:
            key = draw(st.sampled_from(MSG_NAMES + ["xloss", "9step", "lossy"]))
            val = draw(NUMBER_TEXT | st.sampled_from(["allreduce", "warmup", "a\u00a0b"]))
            pre = draw(st.sampled_from(["", " ", ",", ";", "(", "[", "{", "|", ".", "-", "\t", "\u00a0", "x"]))
            post = draw(st.sampled_from(["", " ", ",", ")", "]", "}", "|", ":", "\u2003"]))
            parts.append(f"{pre}{key}={val}{post}")
    return draw(st.sampled_from([" ", "", ", "])).join(parts)


@st.composite
def records(draw):
    rec: dict = {}
    if draw(st.booleans()):
        rec["timestamp"] = draw(st.one_of(ISO, ISO, ISO, st.none(), st.integers(0, 2 * 10**12), st.floats(1e9, 2e9), st.text(max_size=8)))
    if draw(st.booleans()):
        rec["rank"] = draw(st.one_of(st.integers(-3, 70), st.integers(2**31 - 2, 2**31 + 2), st.sampled_from(["3", "03", "-1", "x", "", "3.0", " 3"]),
                                     st.floats(0, 10), st.none()))
    if draw(st.booleans()):
        rec["host"] = draw(st.one_of(st.text(max_size=8), st.integers(0, 9), st.none()))
    if draw(st.booleans()):
        rec["level"] = draw(st.one_of(st.sampled_from(LEVEL_NAMES), st.none(), st.integers(0, 3)))
    if draw(st.booleans()):
        rec["event"] = draw(st.one_of(st.sampled_from(["TRAIN_STEP", "ALLREDUCE", "NCCL_TIMEOUT", "é\"\\"]), st.none(), st.integers(0, 3)))
    if draw(st.booleans()):
        rec["message"] = draw(st.one_of(messages(), messages(), st.none(), st.integers(0, 3), st.lists(st.integers(), max_size=2)))
    if draw(st.booleans()):
        extra = {}
        for _ in range(draw(st.integers(0, 6))):
            k = draw(st.sampled_from(ALIAS_NAMES + ["custom", "nested", "time", "msg"]))
            extra[k] = draw(VALUE)
        rec["extra"] = draw(st.one_of(st.just(extra), st.just(extra), st.none(), st.text(max_size=5), st.lists(st.integers(), max_size=2)))
    for _ in range(draw(st.integers(0, 3))):
        k = draw(st.sampled_from(ALIAS_NAMES + ["custom", "local_rank"] + sorted(ENVELOPE_ALIASES)))
        if k not in rec:
            rec[k] = draw(VALUE)
    keys = list(rec)
    order = draw(st.permutations(keys))
    return {k: rec[k] for k in order}


DECIMAL = st.one_of(
    st.floats(-1e12, 1e12, allow_nan=False, allow_infinity=False),
    st.integers(-10**12, 10**12),
    st.decimals(-10**6, 10**6, places=4, allow_nan=False, allow_infinity=False).map(float),
)


@st.composite
def clean_records(draw):
    """Lines the scanner should take: the seed schema and flat metric lines with ordinary values,
    so that most of what is compared is what the scanner produced (records() is adversarial and
    most of its lines fall back)."""
    rec: dict = {}
    if draw(st.booleans()):
        rec["timestamp"] = draw(ISO.filter(lambda t: not t.endswith(("z", " Z")) and ":60" not in t) | st.floats(1e9, 2e9) | st.integers(10**12, 2 * 10**12))
    if draw(st.integers(0, 3)):
        rec["rank"] = draw(st.integers(0, 4096))
    if draw(st.booleans()):
        rec["host"] = draw(st.sampled_from(["node0", "gpu-a100-17", "h\u00f6st", ""]))
    if draw(st.booleans()):
        rec["level"] = draw(st.sampled_from(LEVEL_NAMES))
    if draw(st.integers(0, 3)):
        rec["event"] = draw(st.sampled_from(["TRAIN_STEP", "ALLREDUCE", "GPU_STATS", "NCCL_TIMEOUT", "DATA_LOAD_TIME"]))
    if draw(st.integers(0, 3)):
        parts = []
        for _ in range(draw(st.integers(0, 4))):
            key = draw(st.sampled_from(MSG_NAMES))
            val = draw(DECIMAL.map(repr) | st.sampled_from(["12/100", "allreduce", "3%", "warmup"]))
            parts.append(f"{key}={val}")
        parts.append(draw(st.text(alphabet="abc xyz,;:()[]{}|\n\t\"\\", max_size=12)))
        rec["message"] = " ".join(parts)
    if draw(st.integers(0, 3)):
        extra = {}
        for _ in range(draw(st.integers(0, 6))):
            k = draw(st.sampled_from(ALIAS_NAMES + ["custom", "nested"]))
            if k in ALIASES and FIELDS[ALIASES[k][0]].dtype == pl.String():
                extra[k] = draw(st.text(max_size=8) | st.integers(0, 99))
            elif k in ALIASES and FIELDS[ALIASES[k][0]].dtype.is_integer():
                extra[k] = draw(st.integers(0, 2**31 - 1))
            elif k in ALIASES:
                extra[k] = draw(DECIMAL)
            else:
                extra[k] = draw(VALUE)
        rec["extra"] = extra
    if draw(st.integers(0, 4)) == 0:
        for _ in range(draw(st.integers(1, 4))):
            k = draw(st.sampled_from(["loss", "learning_rate", "epoch", "grad_norm", "train_runtime", "custom_key"]))
            rec[k] = draw(DECIMAL)
    return rec


def _dump(rec: dict, style: int) -> bytes:
    if style == 0:
        try:
            return orjson.dumps(rec)
        except TypeError:  # an integer beyond 64 bits: json writes it
            return json.dumps(rec, separators=(",", ":")).encode()
    if style == 1:
        return json.dumps(rec).encode()  # ", " and ": " separators
    return json.dumps(rec, ensure_ascii=False, indent=None, separators=(" ,", " : ")).encode()


@needs_scanner
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(st.tuples(records(), st.integers(0, 2)), min_size=1, max_size=25),
       st.sampled_from([None, 5]), st.sampled_from([None, "nodeX"]), st.booleans())
def test_scanner_matches_python_path(recs, rank_hint, host_hint, junk):
    lines = [_dump(r, s) for r, s in recs]
    if junk:
        lines[len(lines) // 2 : len(lines) // 2] = [b"Traceback (most recent call last):", b"", b'{"rank": 1, "trunc', b"\xff\xfe{}"]
    _compare(b"\n".join(lines) + b"\n", rank_hint, host_hint)


@needs_scanner
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(st.tuples(clean_records(), st.integers(0, 2)), min_size=1, max_size=40), st.sampled_from([None, 7]))
def test_scanner_matches_python_path_on_ordinary_lines(recs, rank_hint):
    # (How many lines the scanner takes is held by test_seed_lines_are_taken_by_the_scanner: a
    # random example may be all declines -- 1.5 for an integer metric, a surrogate-pair escape.)
    _compare(b"\n".join(_dump(r, s) for r, s in recs) + b"\n", rank_hint, None)


@needs_scanner
def test_seed_lines_are_taken_by_the_scanner():
    """The shapes of the seed schema and of flat metric lines must not fall back (speed)."""
    buf = b"\n".join([
        b'{"timestamp": "2025-06-12T02:00:00.014Z", "rank": 4, "host": "node0", "level": "INFO", "event": "GPU_STATS", "message": "gpu stats", "extra": {"gpu_util": 93.9, "mem_alloc": 40500, "temp_c": 65.7}}',
        b'{"timestamp": "2025-06-12T02:00:00.896Z", "rank": 4, "level": "INFO", "event": "TRAIN_STEP", "message": "step=0 loss=2.8887 lr=1e-6", "extra": {"step_time_ms": 896.6, "stage": "warmup"}}',
        b'{"timestamp":"2025-06-12T02:00:01","rank":"12","level":"warning","event":"NCCL_TIMEOUT","message":"Watchdog caught collective operation timeout: WorkNCCL(SeqNum=42, OpType=ALLREDUCE) ran for 600000 milliseconds","extra":{"timeout_ms":600000,"op":"allreduce","custom":{"a":[1,2]}}}',
        b'{"loss": 2.31, "learning_rate": 1e-4, "epoch": 0.5, "step": 10, "grad_norm": 1.25}',
        b'{"timestamp": "2025-06-12T02:00:02+08:00", "rank": 0, "event": "X", "message": "caf\\u00e9 \\"quoted\\" \\n line", "extra": null}',
    ]) + b"\n"
    lines, declined = _compare(buf)
    assert (lines, declined) == (5, 0)


@needs_scanner
def test_unusual_lines_fall_back_and_are_still_right():
    buf = b"\n".join([
        b'{"ts": "2025-06-12T02:00:00Z", "msg": "envelope aliases", "rank": 1}',
        b'{"timestamp": 1749693600.5, "rank": 1, "loss": "nan"}',
        b'{"timestamp": "2025-06-12T02:00:00Z", "rank": 1, "message": "loss=nan step=3"}',
        b'{"timestamp": "2025-06-12T02:00:00Z", "rank": 1, "extra": {"step": 2.5}}',
        b'{"timestamp": "2025-06-12T02:00:00Z", "rank": 1, "extra": {"loss": 1, "loss": 2}}',
        b'{"timestamp": "2025-06-12T02:00:00Z", "rank": 1, "extra": "not an object"}',
        b'{"timestamp": "2025-06-12T02:00:00Z", "rank": 1, "message": "\\ud83d\\ude00 surrogate pair"}',
        b"not json at all",
        b'{"timestamp": "2025-06-12T02:00:00Z", "rank": 1, "loss": 1.5, "trunc',
    ])
    lines, declined = _compare(buf)
    assert lines == 9 and declined == 9


@needs_scanner
def test_the_bench_generator_agrees(tmp_path):
    """A realistic run (the bench's generator: every event type, the rare NCCL line)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    try:
        from _data import write_rank  # type: ignore
    finally:
        sys.path.pop(0)
    f = tmp_path / "rank_63.jsonl"
    write_rank(f, 63, steps=600, ranks=64)
    lines, declined = _compare(f.read_bytes())
    assert declined == 0 and lines > 3000


def _jsonl_files():
    from pathlib import Path

    from forensics.ingest.formats import sniff

    root = Path(__file__).resolve().parents[1]
    for base in (root / "sample_logs", root / "tests" / "fixtures"):
        for f in sorted(base.rglob("*")):
            if f.is_file() and f.stat().st_size < (8 << 20):
                head = f.read_bytes()[:65536]
                if sniff(head, str(f)) == "jsonl":
                    yield f


@needs_scanner
@pytest.mark.parametrize("path", list(_jsonl_files()), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_shipped_logs_agree(path):
    """Every JSON-lines file we ship (sample scenarios, real gloo runs): same table both ways."""
    from forensics.ingest.sources import rank_from_path

    lines, declined = _compare(path.read_bytes(), rank_from_path(str(path)), None)
    assert lines > 0


@needs_scanner
def test_extra_text_is_stored_as_written_on_both_paths():
    """Spacing, number spelling and key order of `extra` survive on both paths, byte for byte."""
    buf = (b'{"timestamp": "2025-06-12T02:00:00Z", "rank": 1, "event": "A", "extra": { "step_time_ms" : 1.50e2, "b": [1, 2.0] }}\n'
           b'{"timestamp": "2025-06-12T02:00:00Z", "rank": 1, "event": "B", "extra": {"z": 1, "a": {"q": "\\u00e9\\n"}}}\n'
           b'{"timestamp": "2025-06-12T02:00:00Z", "rank": 1, "event": "C", "extra": {"loss": 1, "loss": 2}}\n'
           # extra not the last key; an "extra" nested in an earlier value; a key named x"extra
           b'{"extra": {"a" : 1}, "timestamp": "2025-06-12T02:00:00Z", "rank": 1, "event": "D", "k": {"extra": {}}}\n'
           b'{"k": {"extra": {"b": 2}}, "timestamp": "2025-06-12T02:00:00Z", "rank": 1, "event": "E", "extra": {"c":3}}\n'
           b'{"x\\"extra": {"d": 4}, "timestamp": "2025-06-12T02:00:00Z", "rank": 1, "event": "F", "extra": {"e" :5}}\n')
    want = ['{ "step_time_ms" : 1.50e2, "b": [1, 2.0] }', '{"z": 1, "a": {"q": "\\u00e9\\n"}}', '{"loss": 1, "loss": 2}',
            '{"a" : 1}', '{"c":3}', '{"e" :5}']
    assert scan_block(buf, 1, True, None, None).events["extra"].to_pylist() == want
    assert _to_table(parse_block_py(buf, 1, True, None, None).events)["extra"].to_pylist() == want


def test_null_columns_on_the_shared_buffer_are_pa_nulls():
    """native._nulls (a block's all-null columns on one shared zeroed buffer) makes what pa.nulls
    makes, for every type of the event schema the scanner's table has; arrays made before the
    shared buffer grew stay whole, and past its cap each column gets its own."""
    from forensics.schema import arrow_schema

    types = {f.type for f in arrow_schema() if not pa.types.is_dictionary(f.type)}
    made = [(n, t, native._nulls(n, t)) for n in (0, 1, 7, 8, 9, 1000, 50_000, native._ZEROS_MAX) for t in types]
    for n, t, a in made:
        a.validate(full=True)
        assert a.type == t and a.null_count == n and a.equals(pa.nulls(n, t)), (n, t)


@needs_scanner
@settings(max_examples=400, deadline=None)
@given(
    parts=st.lists(st.sampled_from([b'"traceEvents"', b'"log_history"', b'"trace', b'Events"', b'"', b"{", b"\n",
                                    b"x", b"\x00", b'"log_hi', b'story"']), max_size=40),
    needle=st.sampled_from([b'"traceEvents"', b'"log_history"', b"", b'"', b"\x00x"]),
    end=st.integers(min_value=0, max_value=400),
)
def test_find_is_bytes_find(parts, needle, end):
    """native.find (memmem, formats.sniff's searches) says what bytes.find(needle, 0, end) says:
    needles whole, cut, repeated, across `end`, at its edges, beyond the haystack."""
    hay = b"".join(parts)
    for e in (end, len(hay), max(0, len(hay) - 1), len(hay) + 5):
        assert native._scan.find(hay, needle, e) == hay.find(needle, 0, e), (hay, needle, e)


@needs_scanner
@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(st.sampled_from([b'{"rank": 0, "event": "TRAIN_STEP"}', b'{"traceEvents": []}', b'{"log_history": []}',
                                    b'{"schemaVersion": 1}', b"{", b'"global_step": 3', b"plain console text",
                                    b'{"log": "x", "stream": "stdout"}', b"  ", b""]), max_size=12),
    pad=st.integers(min_value=0, max_value=70_000),
)
def test_sniff_is_the_same_with_and_without_the_scanner(lines, pad):
    """formats.sniff's answer does not depend on the scanner (its key searches use native.find),
    also for a key just inside or past the 64 KiB the kineto search looks at."""
    from forensics.ingest.formats import sniff

    head = b"\n".join(lines[:1] + [b" " * pad] + lines[1:])
    got = []
    for scanner in (native._find, None):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(native, "_find", scanner)
            got.append(sniff(head, "x.log"))
    assert got[0] == got[1], head[:200]


@pytest.mark.parametrize("scanner", [True, False])
def test_sniff_key_searches_keep_their_bounds(scanner, monkeypatch):
    """"traceEvents" makes a JSON head kineto only within its first 64 KiB (ending at byte
    65,536 at most); "log_history" makes it hf_state anywhere in the head it is given."""
    from forensics.ingest.formats import sniff

    if not scanner:
        monkeypatch.setattr(native, "_find", None)
    line = b'{"rank": 0, "event": "TRAIN_STEP"}\n'
    key = b'"traceEvents"'
    for at, fmt in ((65536 - len(key), "kineto"), (65536 - len(key) + 1, "jsonl")):
        head = line + b"x" * (at - len(line)) + key + b"\n"
        assert head.find(key) == at and sniff(head, "x.log") == fmt, at
    assert sniff(line + b"x" * 70_000 + b'"log_history"', "x.log") == "hf_state"
    assert sniff(line + b"x" * 70_000 + b'"log_histor', "x.log") == "jsonl"
