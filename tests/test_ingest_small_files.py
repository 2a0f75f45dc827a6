"""Many small files: read many to a scanner call, with every line accounted for (issue 11).

The many-files path (unit._read_files -> jsonl.scan_files -> one _scan.scan call with file
segments) must give the store the per-file path gives: the same rows, the same rejects with file,
line and reason, the same per-source counts; and append over many files must add up.
"""
from __future__ import annotations

import gc
import importlib
import json
import os
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import forensics
from forensics.ingest import native, sources as sources_mod, unit as unit_mod
from forensics.ingest.jsonl import scan_files
from forensics.store import open_store

ing = importlib.import_module("forensics.ingest")

pytestmark = pytest.mark.skipif(not native.available(), reason="the many-files path needs the compiled scanner")


def rec(i: int, s: int, **drop: bool) -> dict:
    r = {"timestamp": f"2025-06-12T14:00:{s:02d}.{i % 1000:03d}Z", "rank": i, "host": f"node{i // 8}", "level": "INFO",
         "event": "TRAIN_STEP", "message": f"step={s} loss=2.5", "extra": {"step": s, "loss": 2.5}}
    for k in drop:
        r.pop(k)
    return r


def write_files(d: Path, n: int, first: int = 0) -> dict[str, list[tuple[int, str | None]]]:
    """n small files in per-host folders, some with bad lines; returns per file its lines as
    (line number, reason if it must be rejected else None)."""
    truth: dict[str, list[tuple[int, str | None]]] = {}
    for i in range(first, first + n):
        sub = d / f"node{i // 8}"
        sub.mkdir(parents=True, exist_ok=True)
        lines: list[tuple[bytes, str | None]] = []
        for s in range(i % 4 + 1):
            drop = {k: True for k, m in (("rank", 7), ("host", 11), ("timestamp", 13)) if i % m == 0}
            lines.append((json.dumps(rec(i, s, **drop)).encode(), None))
        if i % 5 == 0:
            lines.insert(1, (b'{"timestamp": "2025-06-12T14:00:00Z", "rank": 1, "ev', "truncated JSON object"))
        if i % 6 == 0:
            lines.append((b"a line of plain text", None))   # the file's console text: an event
        if i % 9 == 0 and i % 10 != 3:   # (a blank last line needs the newline after it)
            lines.append((b"", "blank line"))
        tail = b"" if i % 10 == 3 else b"\n"   # some files end without a newline
        data = b"\n".join(b for b, _ in lines) + tail
        p = sub / f"rank_{i:04d}.jsonl"
        p.write_bytes(data)
        reasons = [why for _, why in lines]   # a complete JSON object without a newline is still an event
        truth[str(p.resolve())] = [(k + 1, why) for k, why in enumerate(reasons)]
    (d / "empty.jsonl").write_bytes(b"")
    return truth


class _CountingScan:
    """The compiled scanner, counting its scan calls."""

    def __init__(self, real) -> None:
        self.real, self.calls = real, 0

    def scan(self, *a):
        self.calls += 1
        return self.real.scan(*a)

    def __getattr__(self, name):
        return getattr(self.real, name)


def store_tables(st: Path) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, dict]]:
    run = open_store(st)
    ev = run.events().collect().sort("source_file", "line")
    rj = run.rejects().collect().sort("source_file", "line")
    keep = ("lines_read", "events", "rejected", "rejected_by_reason", "ranks", "hosts", "rank_sources", "start", "end",
            "complete_end", "complete_lines", "fingerprint", "format")
    return ev, rj, {s["path"]: {k: s.get(k) for k in keep} for s in run.sources}


def test_many_small_files_one_scanner_call_per_block_and_every_line_accounted(tmp_path: Path, monkeypatch) -> None:
    d = tmp_path / "logs"
    truth = write_files(d, 240)
    spy = _CountingScan(native._scan)
    monkeypatch.setattr(native, "_scan", spy)
    s = forensics.ingest([str(d)], tmp_path / "st", workers=1)
    # 240 files of under 1 KB: one scanner call for the lot (plus the few files without a final
    # newline, which the reader reads alone), not one per file
    assert spy.calls <= 1 + sum(1 for p in truth if not Path(p).read_bytes().endswith(b"\n")), spy.calls
    ev, rj, per = store_tables(tmp_path / "st")
    want_lines = sum(len(v) for v in truth.values())
    assert s.lines_read == want_lines and s.events + s.rejected == want_lines
    assert ev.height == s.events and rj.height == s.rejected
    # every reject names its file, line and reason, as written
    want_rejects = sorted((p, n, why) for p, lines in truth.items() for n, why in lines if why)
    assert sorted(rj.select("source_file", "line", "reason").iter_rows()) == want_rejects
    for p, lines in truth.items():
        src = per[p]
        assert src["lines_read"] == len(lines) == src["events"] + src["rejected"], p
        assert ev.filter(pl.col("source_file") == p)["line"].to_list() == [n for n, why in lines if not why], p
    # ranks missing from a line come from the path, hosts from the folder, as the per-file path does
    no_rank = next(p for p in truth if p.endswith("rank_0007.jsonl"))
    assert per[no_rank]["ranks"] == [7] and per[no_rank]["rank_sources"] == {"path": len(truth[no_rank])}
    no_host = next(p for p in truth if p.endswith("rank_0011.jsonl"))
    assert per[no_host]["hosts"] == ["node1"]


def test_many_files_path_gives_the_store_of_the_per_file_path(tmp_path: Path, monkeypatch) -> None:
    d = tmp_path / "logs"
    write_files(d, 160)
    forensics.ingest([str(d)], tmp_path / "joined", workers=1)
    monkeypatch.setattr(unit_mod, "_joinable", lambda p, cap: False)   # every file through its reader, alone
    forensics.ingest([str(d)], tmp_path / "alone", workers=1)
    a, b = store_tables(tmp_path / "joined"), store_tables(tmp_path / "alone")
    assert_frame_equal(a[0], b[0])
    assert_frame_equal(a[1], b[1])
    assert a[2] == b[2]


def test_files_that_grew_after_planning_leave_their_neighbours_intact(tmp_path: Path, monkeypatch) -> None:
    """_read_files reads the files into one buffer, each asked for one byte more than listed: a
    file that grew since planning is left to its reader, and the next file's bytes are its own
    (the grown file's extra byte is overwritten). Same store as the per-file path. The reader
    reads no further than the size listed: the grown lines are the next --append's, read once
    (issue 30: read now, they were read again as the grown tail)."""
    d = tmp_path / "logs"
    monkeypatch.setattr(ing, "CARRY_BYTES", 0)   # read by the unit, not carried from planning
    real = ing._dispatch

    def grow(units, *a, **k):
        for i in (1, 2, 5, 20):
            with open(d / f"node{i // 8}" / f"rank_{i:04d}.jsonl", "ab") as f:
                f.write(b'{"event": "LATE", "rank": 9}\n')
        return real(units, *a, **k)

    monkeypatch.setattr(ing, "_dispatch", grow)
    tables = []
    for name, joinable in (("joined", unit_mod._joinable), ("alone", lambda p, cap: False)):
        write_files(d, 24)   # the same files again (the last ingest grew some)
        monkeypatch.setattr(unit_mod, "_joinable", joinable)
        forensics.ingest([str(d)], tmp_path / name, workers=1)
        tables.append(store_tables(tmp_path / name))
    (ev, rj, srcs), (ev2, rj2, srcs2) = tables
    assert_frame_equal(ev, ev2)
    assert_frame_equal(rj, rj2)
    assert srcs == srcs2
    assert ev.filter(pl.col("event") == "LATE").height == 0
    monkeypatch.setattr(ing, "_dispatch", real)
    s = forensics.ingest([str(d)], tmp_path / "joined", append=True, workers=1)
    assert s.appended_files == 4
    late = store_tables(tmp_path / "joined")[0]
    assert late.filter(pl.col("event") == "LATE").height == 4
    assert late.select("source_file", "line").is_duplicated().sum() == 0


def test_append_over_many_files_adds_up(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    truth = write_files(d, 120)
    st = tmp_path / "st"
    first = forensics.ingest([str(d)], st)
    truth.update(write_files(d, 80, first=120))           # 80 new files ...
    grown = sorted(p for p in truth if Path(p).read_bytes().endswith(b"\n"))[:10]
    for p in grown:                                       # ... and 10 old ones grow by a line
        with open(p, "ab") as f:
            f.write(json.dumps(rec(int(Path(p).stem.split("_")[1]), 59)).encode() + b"\n")
        truth[p] = [*truth[p], (len(truth[p]) + 1, None)]
    s = forensics.ingest([str(d)], st, append=True)
    assert s.new_files == 80 and s.appended_files == 10 and s.unchanged_files == first.files - 10
    assert s.bytes_read < sum(Path(p).stat().st_size for p in truth)   # unchanged files not read again
    ev, rj, per = store_tables(st)
    want = sum(len(v) for v in truth.values())
    assert s.lines_read == want == ev.height + rj.height
    for p, lines in truth.items():
        assert per[p]["lines_read"] == len(lines) == per[p]["events"] + per[p]["rejected"], p
    fresh = forensics.ingest([str(d)], tmp_path / "fresh")
    _, _, per_fresh = store_tables(tmp_path / "fresh")
    assert {p: (v["lines_read"], v["events"], v["rejected"]) for p, v in per.items()} == \
        {p: (v["lines_read"], v["events"], v["rejected"]) for p, v in per_fresh.items()}


def test_scan_files_numbers_lines_per_file_with_each_files_hints() -> None:
    a = b'{"event": "A", "rank": 3}\n{"event": "B"}\n'
    b = b'not json\n{"event": "C", "host": "h9"}\n{"event": "D"}\n'
    fb = scan_files(a + b, [len(a), len(a + b)], [(7, "hostA"), (None, "hostB")])
    assert fb.lines.tolist() == [2, 3] and fb.file_of.tolist() == [0, 0, 1, 1, 1]
    t = fb.events.select(["rank", "host", "event", "line", "rank_source"]).to_pylist()
    assert [(r["rank"], r["host"], r["event"], r["line"], r["rank_source"]) for r in t] == [
        (3, "hostA", "A", 1, "record"), (7, "hostA", "B", 2, "path"),
        (None, "hostB", "LOG", 1, "none"), (None, "h9", "C", 2, "none"), (None, "hostB", "D", 3, "none")]
    assert fb.rejects.height == 0     # the text line is the file's console text (text_lines.py)


def test_walk_lists_what_os_walk_listed(tmp_path: Path) -> None:
    """expand's one-scandir walk: the files, order and skips of the os.walk listing it replaced."""
    d = tmp_path / "logs"
    for rel in ("b/x.jsonl", "a/z.log", "a/y.jsonl", "top.jsonl", ".hidden/h.jsonl", "a/.dot.jsonl",
                "c.forensics/q.jsonl", "__pycache__/p.jsonl", "a/k.parquet", "a/sub/deep.jsonl"):
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text("{}\n")
    os.symlink(d / "a" / "y.jsonl", d / "b" / "link.jsonl")   # a file symlink: listed, resolved (a duplicate)
    os.symlink(d / "a", d / "linkdir")                          # a folder symlink: not descended
    old: dict[str, Path] = {}
    for root, dirs, files in os.walk(d):
        dirs[:] = sorted(x for x in dirs if x not in sources_mod._SKIP_DIRS and not x.endswith(".forensics")
                         and not x.startswith("."))
        for f in sorted(files):
            if f.startswith(".") or f.endswith(sources_mod._SKIP_SUFFIXES):
                continue
            fp = Path(root) / f
            if fp.is_file():
                old.setdefault(str(fp.resolve()), fp.resolve())
    assert sources_mod.expand([str(d)]) == list(old.values())


def test_gc_is_restored_after_ingest(tmp_path: Path, monkeypatch) -> None:
    """Ingest turns the cyclic GC off while it runs (100,000 per-file dicts) and back on after,
    also when it fails."""
    d = tmp_path / "logs"
    write_files(d, 8)
    assert gc.isenabled()
    seen = []
    real = ing._dispatch
    monkeypatch.setattr(ing, "_dispatch", lambda *a, **k: (seen.append(gc.isenabled()), real(*a, **k))[1])
    forensics.ingest([str(d)], tmp_path / "st")
    assert seen == [False] and gc.isenabled()

    def boom(*a, **k):
        raise RuntimeError("a unit failed")

    monkeypatch.setattr(ing, "_dispatch", boom)
    with pytest.raises(RuntimeError):
        forensics.ingest([str(d)], tmp_path / "st2")
    assert gc.isenabled()


def test_append_with_a_step_logged_without_time_is_no_traceback(tmp_path: Path) -> None:
    """--append compares the steps of the store and of the new files by time: a step line
    without a timestamp has no time to differ by (it crashed formatting the refusal)."""
    d = tmp_path / "logs"
    d.mkdir()
    (d / "rank_1.jsonl").write_bytes(json.dumps(rec(1, 3, timestamp=True)).encode() + b"\n")
    st = tmp_path / "st"
    forensics.ingest([str(d)], st)
    (d / "rank_1b.jsonl").write_bytes(json.dumps(rec(1, 3)).encode() + b"\n")
    s = forensics.ingest([str(d)], st, append=True)
    assert s.new_files == 1 and s.lines_read == 2 and s.events == 2


def _count_per_file_by_polars(ev, file_of, n_files: int) -> list[tuple]:
    """The per-file counts as a polars group_by gave them (the code unit._count_per_file replaced)."""
    df = pl.from_arrow(ev.select(["rank", "host", "timestamp", "rank_source"])).with_columns(pl.Series("file", file_of))
    per = df.group_by("file").agg(
        pl.len().alias("n"), pl.col("rank").drop_nulls().unique().sort().alias("ranks"),
        pl.col("host").drop_nulls().unique().sort().alias("hosts"),
        pl.col("timestamp").min().alias("tmin"), pl.col("timestamp").max().alias("tmax"))
    out = [(0, False, [], [], None, None, {}) for _ in range(n_files)]
    for f, n, ranks, hosts, tmin, tmax in per.iter_rows():
        out[f] = (n, True, ranks, hosts, tmin.isoformat() if tmin else None, tmax.isoformat() if tmax else None, {})
    for f, src, n in df.group_by("file", pl.col("rank_source").cast(pl.String)).len().iter_rows():
        out[f][6][src] = n
    return out


@pytest.mark.parametrize("seed", range(6))
def test_count_per_file_matches_a_group_by(seed: int) -> None:
    """unit._count_per_file (numpy) against the polars group_by it replaced, on random rows:
    files without rows (gaps, also at the end), null ranks, hosts and times, a file without any
    time, negative ranks, repeated values."""
    import numpy as np
    import pyarrow as pa

    from forensics.schema import arrow_schema

    rng = np.random.default_rng(seed)
    n_files, n = 30, int(rng.integers(3, 400))
    file_of = np.sort(rng.choice(np.arange(n_files)[rng.random(n_files) < 0.6], n))   # in file order, as scan_files gives them
    null = lambda p: rng.random(n) < p   # noqa: E731
    ranks = rng.integers(-3, 5, n) * int(rng.choice([1, 1 << 20]))
    hosts = np.array(["node1", "node10", "node2", "nodé", "a"])[rng.integers(0, 5, n)]
    us = 1_749_736_800_000_000 + rng.integers(-10**7, 10**7, n) * int(rng.choice([1, 1000, 10**6]))
    t_null = null(0.3) | (file_of == file_of[-1])   # the last file has no time at all
    kinds = ["record", "path", "none"]
    schema = arrow_schema()
    ev = pa.table({
        "rank": pa.array([None if m else int(r) for r, m in zip(ranks, null(0.2))], pa.int32()),
        "host": pa.array([None if m else h for h, m in zip(hosts, null(0.2))], pa.large_string()),
        "timestamp": pa.array([None if m else int(x) for x, m in zip(us, t_null)], pa.timestamp("us", tz="UTC")),
        "rank_source": pa.array([kinds[k] for k in rng.integers(0, 3, n)], pa.large_string()).cast(
            schema.field("rank_source").type),
    })
    cut = seed % 3   # a slice of the rows
    ev, file_of = ev.slice(cut), file_of[cut:]
    results = [unit_mod.PieceResult("f", 0, 0) for _ in range(n_files)]
    unit_mod._count_per_file(ev, file_of, results)
    got = [(r.events, r.wrote_events, r.ranks, r.hosts, r.start_ts, r.end_ts, r.rank_sources) for r in results]
    assert got == _count_per_file_by_polars(ev, file_of, n_files)
