"""The JSONL block parser: every line becomes an event or a reject, and typed values are right."""
from __future__ import annotations

import json

import orjson
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from forensics.ingest.jsonl import parse_block

SEED = (
    b'{"timestamp": "2025-06-12T14:03:21.123Z", "rank": 0, "level": "INFO", "event": "TRAIN_STEP", '
    b'"message": "step=1500 loss=2.345 lr=1.2e-4", "extra": {"gpu_util": 98.2, "mem_alloc": 40500}}\n'
    b'{"timestamp": "2025-06-12T14:03:21.456Z", "rank": 3, "level": "WARN", "event": "GRAD_NORM", '
    b'"message": "grad_norm=45.6 exceeds threshold=10.0", "extra": {"param_group": "embedding"}}\n'
    b'{"timestamp": "2025-06-12T14:03:22.001Z", "rank": 1, "level": "ERROR", "event": "NCCL_TIMEOUT", '
    b'"message": "rank=1 waiting on rank=2 for 1800s", "extra": {"collective": "allreduce", "tensor_size_mb": 512}}\n'
)


def test_seed_lines_become_typed_events() -> None:
    b = parse_block(SEED, 1, True, None, None)
    assert b.lines == 3 and b.events.height == 3 and b.rejects.height == 0
    ev = b.events.sort("line")
    r0 = ev.row(0, named=True)
    assert r0["rank"] == 0 and r0["rank_source"] == "record"
    assert r0["step"] == 1500 and r0["loss"] == 2.345 and abs(r0["lr"] - 1.2e-4) < 1e-12
    assert r0["gpu_util"] == 98.2 and r0["mem_alloc_mb"] == 40500.0  # alias mem_alloc
    assert r0["timestamp"].isoformat() == "2025-06-12T14:03:21.123000+00:00"
    r1 = ev.row(1, named=True)
    assert r1["level"] == "WARN" and r1["grad_norm"] == 45.6 and r1["threshold"] == 10.0
    assert r1["param_group"] == "embedding"
    r2 = ev.row(2, named=True)
    assert r2["level"] == "ERROR" and r2["collective"] == "allreduce" and r2["tensor_size_mb"] == 512.0
    assert json.loads(r2["extra"]) == {"collective": "allreduce", "tensor_size_mb": 512}


def test_crash_debris_is_rejected_with_reasons_and_nothing_good_is_lost() -> None:
    buf = (
        SEED[: SEED.index(b"\n") + 1]
        + b"Traceback (most recent call last):\n"
        + b'  File "train.py", line 10, in <module>\n'
        + b"\n"
        + b"\x00\x01\x02\xff\xfe garbage\n"
        + b'{"a": 1,, }\n'
        + b"[1, 2]\n"
        + SEED[SEED.index(b"\n") + 1 :]
        + b'{"timestamp": "2025-06-12T14:03:2'
    )
    b = parse_block(buf, 1, True, None, None)
    assert b.lines == 10
    assert b.events.height == 5
    assert b.events.height + b.rejects.height == b.lines
    reasons = dict(zip(b.rejects["line"].to_list(), b.rejects["reason"].to_list()))
    assert reasons[4] == "blank line"
    assert reasons[5] == "binary data"
    assert reasons[6].startswith("invalid JSON")
    assert reasons[7] == "JSON value is not an object"
    assert reasons[10] == "truncated line (no newline at end of file)"
    # the traceback is the file's console text (spec/log-formats.md §3): events, not rejects
    assert sorted(b.events["line"].to_list()) == [1, 2, 3, 8, 9]
    assert b.events.filter(pl.col("line") == 2)["event"].to_list() == ["TRACEBACK"]


def test_a_prefixed_traceback_inside_json_lines_is_that_ranks_console_text() -> None:
    # torch prefixes a worker's stderr with `[rankN]:`; redirected into the JSON-lines file, a
    # line starting with `[` is not a JSON array: it is text, and the traceback is the rank's
    buf = (
        SEED[: SEED.index(b"\n") + 1]
        + b"[rank3]: Traceback (most recent call last):\n"
        + b'[rank3]:   File "/opt/train.py", line 97, in <module>\n'
        + b'[rank3]:     raise ValueError("corrupt sample in shard 17")\n'
        + b"[rank3]: ValueError: corrupt sample in shard 17\n"
        + b"[1, 2]\n"
    )
    b = parse_block(buf, 1, True, None, None)
    assert b.events.height + b.rejects.height == b.lines == 6
    assert b.rejects["line"].to_list() == [6] and b.rejects["reason"].to_list() == ["JSON value is not an object"]
    tb = b.events.filter(pl.col("line") == 2)
    assert tb["event"].to_list() == ["TRACEBACK"] and tb["rank"].to_list() == [3]
    assert "ValueError" in (tb["message"][0] or "") + (tb["exc_type"][0] or "" if "exc_type" in tb.columns else "")


def test_wrong_types_are_coerced_not_fatal() -> None:
    buf = (
        b'{"timestamp": 1749737001.5, "rank": "3", "level": "warning", "event": "TRAIN_STEP", "message": "", '
        b'"extra": {"loss": "nan", "step": "12"}}\n'
        b'{"timestamp": 1749737001500, "rank": 3.0, "level": "Err", "event": "X", "message": "m"}\n'
        b'{"timestamp": "2025-06-12 14:03:21", "rank": "three", "event": "Y"}\n'
    )
    b = parse_block(buf, 1, True, 9, None)
    ev = b.events.sort("line")
    assert ev["rank"].to_list() == [3, 3, 9]
    assert ev["rank_source"].to_list() == ["record", "record", "path"]
    assert ev["level"].cast(pl.String).to_list() == ["WARN", "ERROR", "INFO"]
    assert ev["step"][0] == 12 and ev["loss"][0] != ev["loss"][0]  # NaN kept as NaN
    ts = [t.isoformat() for t in ev["timestamp"]]
    assert ts[0] == ts[1] == "2025-06-12T14:03:21.500000+00:00"
    assert ts[2] == "2025-06-12T14:03:21+00:00"


def test_flat_metric_lines_and_unknown_keys_survive() -> None:
    buf = (
        b'{"step": 120, "loss": 2.458, "learning_rate": 3.2e-5, "gpu_memory_mb": 18765, '
        b'"timestamp": "2025-04-05T10:23:12Z", "model_name": "llama3-lora-finetune"}\n'
        b'{"step": 50, "loss": 4.12, "lr": 1.0e-5, "stage": "warmup"}\n'
    )
    b = parse_block(buf, 1, True, None, None)
    ev = b.events.sort("line")
    assert ev["event"].to_list() == ["TRAIN_STEP", "TRAIN_STEP"]
    assert ev["step"].to_list() == [120, 50]
    assert ev["lr"].to_list() == [3.2e-5, 1.0e-5]
    assert ev["mem_alloc_mb"][0] == 18765.0
    assert ev["stage"][1] == "warmup"
    assert ev["rank"].to_list() == [None, None] and ev["rank_source"].to_list() == ["none", "none"]
    assert json.loads(ev["fields"][0])["model_name"] == "llama3-lora-finetune"
    assert ev["timestamp"][1] is None  # no timestamp: order is line order


def test_rare_key_deep_in_the_block_is_kept() -> None:
    common = b'{"timestamp": "2025-06-12T14:03:21Z", "rank": 1, "level": "INFO", "event": "TRAIN_STEP", "message": "step=1"}\n'
    rare = b'{"timestamp": "2025-06-12T14:03:22Z", "rank": 1, "level": "ERROR", "event": "NCCL_TIMEOUT", "message": "x", "extra": {"seq_num": 4242, "timeout_ms": 1800000, "culprit": [7]}, "pg_desc": "default_pg"}\n'
    buf = common * 50_000 + rare + common * 10
    b = parse_block(buf, 1, True, None, None)
    row = b.events.filter(pl.col("event") == "NCCL_TIMEOUT").row(0, named=True)
    assert row["line"] == 50_001
    assert row["seq"] == 4242 and row["timeout_s"] == 1800.0
    assert json.loads(row["extra"])["culprit"] == [7]
    assert json.loads(row["fields"]) == {"pg_desc": "default_pg"}


def test_line_numbers_continue_from_first_line() -> None:
    b = parse_block(SEED, 101, True, None, None)
    assert sorted(b.events["line"].to_list()) == [101, 102, 103]


def test_invalid_utf8_inside_a_good_line_keeps_the_line() -> None:
    buf = b'{"timestamp": "2025-06-12T14:03:21Z", "rank": 2, "event": "LOG", "message": "caf\xe9"}\n'
    b = parse_block(buf, 1, True, None, None)
    assert b.events.height == 1 and b.events["message"][0] == "caf\ufffd"


def test_ten_megabyte_line() -> None:
    big = b'{"timestamp": "2025-06-12T14:03:21Z", "rank": 2, "event": "DUMP", "message": "' + b"x" * (10 << 20) + b'"}\n'
    b = parse_block(big + SEED, 1, True, None, None)
    assert b.events.height == 4 and len(b.events.sort("line")["message"][0]) == 10 << 20


_value = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**53), 2**53), st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20), st.lists(st.integers(-(2**63), 2**63 - 1), max_size=3),
)
_record = st.fixed_dictionaries(
    {},
    optional={
        "timestamp": st.one_of(st.just("2025-06-12T14:03:21.5Z"), st.floats(1e9, 2e9), st.text(max_size=5)),
        "rank": st.one_of(st.integers(0, 10_000), st.text(max_size=3), st.none()),
        "level": st.sampled_from(["INFO", "warn", "ERROR", "x", ""]),
        "event": st.text(max_size=10),
        "message": st.text(max_size=40),
        "extra": st.dictionaries(st.text(min_size=1, max_size=8), _value, max_size=4),
        "loss": _value,
        "step": _value,
    },
).flatmap(lambda d: st.dictionaries(st.text(min_size=1, max_size=6), _value, max_size=2).map(lambda x: {**x, **d}))
_line = st.one_of(
    _record.map(lambda d: orjson.dumps(d)),
    st.binary(max_size=60).filter(lambda b: b"\n" not in b),
    st.text(max_size=60).map(lambda s: s.replace("\n", " ").encode()),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_line, max_size=40), st.booleans())
def test_accounting_identity_holds_for_any_input(lines: list[bytes], trailing_newline: bool) -> None:
    buf = b"\n".join(lines) + (b"\n" if trailing_newline and lines else b"")
    b = parse_block(buf, 1, True, None, None)
    expected_lines = buf.count(b"\n") + (0 if buf.endswith(b"\n") or not buf else 1)
    assert b.lines == expected_lines
    assert b.events.height + b.rejects.height == b.lines
    seen = sorted(b.events["line"].to_list() + b.rejects["line"].to_list())
    assert seen == list(range(1, b.lines + 1))
    # every line that is a JSON object is an event
    for i, raw in enumerate(buf.split(b"\n")[: b.lines], start=1):
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            assert i in b.events["line"].to_list(), raw


def test_event_source_says_who_named_the_event() -> None:
    buf = SEED[: SEED.index(b"\n") + 1] + b'{"step": 1, "loss": 2.0}\n{"rank": 1, "message": "hello"}\n'
    ev = parse_block(buf, 1, True, None, None).events.sort("line")
    assert ev["event"].to_list() == ["TRAIN_STEP", "TRAIN_STEP", "METRICS"]
    assert ev["event_source"].cast(pl.String).to_list() == ["record", "inferred", "inferred"]


def test_python_path_types_every_value_when_threads_parse_at_once():
    """Blocks whose `extra` keys change from block to block, parsed on four threads at once: every
    value is typed. (The key cache was shared between threads: one thread's new keys made another
    skip its re-parse, and 0.2-0.5% of typed values went missing on a 2-thread ingest.)"""
    from concurrent.futures import ThreadPoolExecutor

    import orjson

    from forensics.ingest.jsonl import parse_block_py

    from forensics.schema import ALIASES, FIELDS

    numeric = [a for a, (canon, _) in ALIASES.items() if FIELDS[canon].dtype == pl.Float64 and a == canon]
    blocks = []
    for b in range(120):  # two neighbouring blocks bring the same keys, new to the cache
        ks = [numeric[(b // 2 + j) % len(numeric)] for j in range(3)]
        rows = [orjson.dumps({"timestamp": "2025-06-12T02:00:00Z", "rank": 0, "event": "E",
                              "extra": {k: float(i) for k in ks}}) for i in range(2000)]
        blocks.append((ks, b"\n".join(rows) + b"\n"))
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda kb: parse_block_py(kb[1], 1, True, None, None), blocks))
    for (ks, _), res in zip(blocks, results):
        for k in ks:
            assert res.events[k].null_count() == 0, k
