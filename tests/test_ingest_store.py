"""Ingest into a store: inputs of every shape, accounting, re-ingest, append, duplicates, atomicity."""
from __future__ import annotations

import gzip
import importlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
import zstandard

import forensics
from forensics.errors import ForensicsError
from forensics.store import open_store


def seed_line(rank: int | None, step: int, t: float, event: str = "TRAIN_STEP", **extra: object) -> bytes:
    rec: dict[str, object] = {
        "timestamp": f"2025-06-12T14:{int(t) // 60:02d}:{t % 60:06.3f}Z",
        "level": "INFO",
        "event": event,
        "message": f"step={step} loss={3.0 - step * 0.01:.4f} lr=1e-4",
        "extra": {"step_time_ms": 300.0, **extra},
    }
    if rank is not None:
        rec["rank"] = rank
    return json.dumps(rec).encode() + b"\n"


def write_run(d: Path, ranks: int = 4, steps: int = 20) -> None:
    d.mkdir(parents=True, exist_ok=True)
    for r in range(ranks):
        with open(d / f"rank_{r}.jsonl", "wb") as f:
            for s in range(steps):
                f.write(seed_line(r, s, s * 0.3 + r * 0.001))


def events(store: Path) -> pl.DataFrame:
    return open_store(store).events().collect()


def check_accounting(store: Path) -> None:
    run = open_store(store)
    ev = run.events().group_by("source_file").len("events").collect()
    rj = run.rejects().group_by("source_file").len("rejected").collect()
    per = {s["path"]: s for s in run.sources}
    for src, n in ev.iter_rows():
        assert per[src]["events"] == n
    for src, n in rj.iter_rows():
        assert per[src]["rejected"] == n
    for s in run.sources:
        assert s["lines_read"] == s["events"] + s["rejected"], s["path"]


def test_directory_of_rank_files(tmp_path: Path) -> None:
    write_run(tmp_path / "logs")
    s = forensics.ingest([str(tmp_path / "logs")], tmp_path / "st")
    assert s.files == 4 and s.events == 80 and s.rejected == 0 and s.lines_read == 80
    assert s.ranks == [0, 1, 2, 3]
    df = events(tmp_path / "st")
    assert df.height == 80 and df["timestamp"].dtype == pl.Datetime("us", "UTC")
    check_accounting(tmp_path / "st")


def test_gzip_zstd_and_glob(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    d.mkdir()
    raw = b"".join(seed_line(0, s, s) for s in range(10))
    (d / "rank_0.jsonl.gz").write_bytes(gzip.compress(raw))
    (d / "rank_1.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(raw.replace(b'"rank": 0', b'"rank": 1')))
    (d / "rank_2.log").write_bytes(raw.replace(b'"rank": 0', b'"rank": 2'))
    s = forensics.ingest([str(d / "*.jsonl.*"), str(d / "rank_2.log")], tmp_path / "st")
    assert s.files == 3 and s.events == 30 and s.ranks == [0, 1, 2]


def test_rank_from_path_when_records_have_none(tmp_path: Path) -> None:
    d = tmp_path / "logs" / "node3"
    d.mkdir(parents=True)
    (d / "rank_00012.jsonl").write_bytes(b"".join(seed_line(None, s, s) for s in range(5)))
    (tmp_path / "logs" / "launcher.jsonl").write_bytes(b"".join(seed_line(None, s, s) for s in range(2)))
    s = forensics.ingest([str(tmp_path / "logs")], tmp_path / "st")
    df = events(tmp_path / "st")
    r12 = df.filter(pl.col("source_file").str.ends_with("rank_00012.jsonl"))
    assert set(r12["rank"].to_list()) == {12} and set(r12["rank_source"].to_list()) == {"path"}
    assert set(r12["host"].to_list()) == {"node3"}
    lau = df.filter(pl.col("source_file").str.ends_with("launcher.jsonl"))
    assert lau["rank"].null_count() == 2 and set(lau["rank_source"].to_list()) == {"none"}
    by = {f["path"].rsplit("/", 1)[-1]: f["rank_from"] for f in s.per_file}
    assert by == {"rank_00012.jsonl": "path", "launcher.jsonl": "none"}


def test_empty_and_garbage_files_do_not_stop_ingest(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    write_run(d, ranks=2, steps=5)
    (d / "empty.jsonl").write_bytes(b"")
    (d / "rank_5.jsonl").write_bytes(b"\x00\x01\x02binary\xff\n" + seed_line(5, 1, 1) + b'{"timestamp": "2025')
    (d / "rank_6.jsonl.gz").write_bytes(b"not gzip at all")  # a lie in the name: sniffed by content
    s = forensics.ingest([str(d)], tmp_path / "st")
    assert s.lines_read == s.events + s.rejected
    per = {f["path"].rsplit("/", 1)[-1]: f for f in s.per_file}
    assert per["rank_6.jsonl.gz"]["lines_read"] == 1  # not gzip: sniffed by content, read as text
    assert per["rank_5.jsonl"]["events"] == 1 and per["rank_5.jsonl"]["rejected"] == 2
    assert per["empty.jsonl"]["lines_read"] == 0 and per["empty.jsonl"]["format"] == "empty"
    assert per["rank_0.jsonl"]["events"] == per["rank_1.jsonl"]["events"] == 5
    check_accounting(tmp_path / "st")
    rj = open_store(tmp_path / "st").rejects().collect()
    assert "truncated line (no newline at end of file)" in rj["reason"].to_list()


def test_corrupt_gzip_is_reported_not_fatal(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    write_run(d, ranks=1, steps=3)
    good = gzip.compress(b"".join(seed_line(1, s, s) for s in range(200)))
    (d / "rank_1.jsonl.gz").write_bytes(good[: len(good) // 2])  # cut mid-stream
    s = forensics.ingest([str(d)], tmp_path / "st")
    assert s.lines_read == s.events + s.rejected
    assert s.events >= 3
    check_accounting(tmp_path / "st")


def test_reingest_is_a_noop_and_append_adds_only_new(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    write_run(d, ranks=2, steps=10)
    st = tmp_path / "st"
    s1 = forensics.ingest([str(d)], st)
    parts1 = sorted(p.name for p in (st / "events").iterdir())
    s2 = forensics.ingest([str(d)], st)
    assert s2.unchanged_files == 2 and s2.new_files == 0 and s2.bytes_read == 0
    assert sorted(p.name for p in (st / "events").iterdir()) == parts1
    assert s2.events == s1.events
    # a new file with --append
    (d / "rank_2.jsonl").write_bytes(b"".join(seed_line(2, s, s) for s in range(10)))
    s3 = forensics.ingest([str(d / "rank_2.jsonl")], st, append=True)
    assert s3.new_files == 1 and s3.files == 3 and s3.events == 30
    # without --append the store holds exactly the inputs
    s4 = forensics.ingest([str(d / "rank_0.jsonl")], st)
    assert s4.files == 1 and s4.events == 10
    check_accounting(st)


def test_append_reads_only_the_new_tail_of_a_grown_file(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    d.mkdir()
    f = d / "rank_0.jsonl"
    f.write_bytes(b"".join(seed_line(0, s, s) for s in range(10)) + b'{"timestamp": "2025-06')  # cut mid-line
    st = tmp_path / "st"
    s1 = forensics.ingest([str(d)], st)
    assert s1.events == 10 and s1.rejected == 1
    # the writer finishes the line and writes more
    with open(f, "r+b") as fh:
        fh.seek(0, os.SEEK_END)
        fh.seek(fh.tell() - len(b'{"timestamp": "2025-06'))
        fh.truncate()
        fh.write(b"".join(seed_line(0, s, s) for s in range(10, 15)))
    s2 = forensics.ingest([str(d)], st, append=True)
    assert s2.appended_files == 1
    assert s2.bytes_read < f.stat().st_size  # only the tail was read
    assert s2.events == 15 and s2.rejected == 0 and s2.lines_read == 15
    df = events(st).sort("line")
    assert df["line"].to_list() == list(range(1, 16))
    assert df["step"].to_list() == list(range(15))
    check_accounting(st)


def test_duplicate_files_are_ingested_once(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    write_run(d, ranks=2, steps=5)
    (d / "copy").mkdir()
    (d / "copy" / "rank_0.jsonl").write_bytes((d / "rank_0.jsonl").read_bytes())
    s = forensics.ingest([str(d)], tmp_path / "st")
    assert s.events == 10 and len(s.duplicate_files) == 1
    assert s.duplicate_files[0]["path"].endswith("copy/rank_0.jsonl")


def test_missing_path_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ForensicsError) as e:
        forensics.ingest([str(tmp_path / "nope")], tmp_path / "st")
    assert e.value.code == "F100" and "nope" in e.value.render()


def test_refuses_to_write_into_a_foreign_directory(tmp_path: Path) -> None:
    write_run(tmp_path / "logs", ranks=1, steps=1)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("precious")
    with pytest.raises(ForensicsError):
        forensics.ingest([str(tmp_path / "logs")], tmp_path / "mine")
    assert (tmp_path / "mine" / "thesis.tex").read_text() == "precious"


def test_store_is_readable_without_forensics(tmp_path: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    write_run(tmp_path / "logs", ranks=3, steps=4)
    forensics.ingest([str(tmp_path / "logs")], tmp_path / "st")
    n = duckdb.sql(f"select count(*), count(distinct rank) from read_parquet('{tmp_path}/st/events/*.parquet')").fetchall()[0]
    assert n == (12, 3)
    pn = pl.scan_parquet(f"{tmp_path}/st/events/*.parquet").filter(pl.col("rank") == 1).select(pl.len()).collect().item()
    assert pn == 4


def test_parts_of_an_older_codec_are_read_and_kept_beside_new_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store written with zstd parts (the codec before LZ4): read, appended to (its parts kept as
    they are, not merged), and the new parts written with the current codec read with them."""
    import pyarrow.parquet as pq

    from forensics import store, summaries

    monkeypatch.setattr(store, "COMPACT_ROWS", 1)   # small parts are kept as written, not merged
    with monkeypatch.context() as m:
        m.setattr(store, "COMPRESSION", "zstd")
        m.setattr(store, "COMPRESSION_LEVEL", 1)
        write_run(tmp_path / "logs", ranks=2, steps=10)
        forensics.ingest([str(tmp_path / "logs")], tmp_path / "st")
    (tmp_path / "logs" / "rank_2.jsonl").write_bytes(b"".join(seed_line(2, s, s) for s in range(7)))
    s = forensics.ingest([str(tmp_path / "logs" / "rank_2.jsonl")], tmp_path / "st", append=True)
    assert s.files == 3 and s.new_files == 1
    run = open_store(tmp_path / "st")
    codecs = {pq.ParquetFile(p).metadata.row_group(0).column(0).compression for p in run.event_parts()}
    assert codecs == {"ZSTD", store.COMPRESSION.upper()}
    df = run.events().group_by("rank").len().sort("rank").collect()
    assert df.rows() == [(0, 10), (1, 10), (2, 7)]
    assert summaries.rank_table(run).equals(summaries.compute_rank_table(run))
    check_accounting(tmp_path / "st")


def test_big_file_is_cut_into_ranges_with_correct_line_numbers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ing = importlib.import_module("forensics.ingest")

    monkeypatch.setattr(ing, "RANGE_BYTES", 4096)
    d = tmp_path / "logs"
    d.mkdir()
    lines = [seed_line(0, s, s * 0.01) for s in range(300)]
    lines[150] = b"\x00\x01\x02\x03 garbage line\n"   # (a text line would be console text: an event)
    (d / "rank_0.jsonl").write_bytes(b"".join(lines))
    seen: dict[str, dict] = {}
    s = forensics.ingest([str(d)], tmp_path / "st", workers=1, progress=lambda k, info: seen.setdefault(k, info))
    assert s.lines_read == 300 and s.events == 299 and s.rejected == 1
    assert seen["start"]["units"] > 10      # read in ranges ...
    assert len(open_store(tmp_path / "st").event_parts()) == 1   # ... whose small parts are merged at commit
    rj = open_store(tmp_path / "st").rejects().collect()
    assert rj["line"].to_list() == [151]
    ev = events(tmp_path / "st").sort("line")
    assert ev["line"].to_list() == [i for i in range(1, 301) if i != 151]
    assert ev["step"].to_list() == [i for i in range(300) if i != 150]


KILLER = r"""
import sys, forensics
if __name__ == "__main__":
    forensics.ingest([sys.argv[1]], sys.argv[2], workers=int(sys.argv[3]))
"""


@pytest.mark.parametrize("delay", [0.05, 0.3, 0.8, 1.5])
def test_kill_9_during_ingest_leaves_previous_store_intact(tmp_path: Path, delay: float) -> None:
    small = tmp_path / "small"
    write_run(small, ranks=2, steps=5)
    st = tmp_path / "st"
    forensics.ingest([str(small)], st)
    before = json.loads((st / "manifest.json").read_text())
    big = tmp_path / "big"
    big.mkdir()
    for r in range(4):
        (big / f"rank_{r}.jsonl").write_bytes(seed_line(r, 1, 1.0) * 60_000)
    script = tmp_path / "k.py"
    script.write_text(KILLER)
    p = subprocess.Popen([sys.executable, str(script), str(big), str(st), "2"])
    time.sleep(delay)
    p.send_signal(signal.SIGKILL)
    p.wait()
    # whatever moment it died: the store is either the old one or the complete new one
    run = open_store(st)
    m = json.loads((st / "manifest.json").read_text())
    if m["written"] == before["written"] and m["totals"] == before["totals"]:
        assert run.events().select(pl.len()).collect().item() == before["totals"]["events"]
    else:
        assert m["totals"]["events"] == 240_000
    for src in m["sources"]:
        for rel in src["event_parts"]:
            assert (st / rel).is_file()
    # the next ingest cleans up after the dead one and works
    s = forensics.ingest([str(small)], st)
    assert s.events == 10
    assert not list(tmp_path.glob(".st.tmp-*"))


@pytest.mark.parametrize("point", ["before-manifest", "before-swap", "after-swap"])
def test_crash_at_each_commit_step(tmp_path: Path, point: str) -> None:
    old_logs, new_logs = tmp_path / "old", tmp_path / "new"
    write_run(old_logs, ranks=2, steps=5)
    write_run(new_logs, ranks=3, steps=7)
    st = tmp_path / "st"
    forensics.ingest([str(old_logs)], st)
    script = tmp_path / "k.py"
    script.write_text(KILLER)
    env = {**os.environ, "FORENSICS_FAILPOINT": point}
    rc = subprocess.run([sys.executable, str(script), str(new_logs), str(st), "1"], env=env).returncode
    assert rc == 137
    run = open_store(st)
    n = run.events().select(pl.len()).collect().item()
    assert n == (21 if point == "after-swap" else 10)
    assert n == run.totals["events"]
    assert forensics.ingest([str(new_logs)], st).events == 21
    assert not list(tmp_path.glob(".st.tmp-*"))


NO_EXCHANGE = r"""
import sys, forensics, forensics.store
if __name__ == "__main__":
    forensics.store._exchange = lambda a, b: False   # a filesystem without renameat2
    forensics.ingest([sys.argv[1]], sys.argv[2], workers=1)
"""


def test_crash_between_fallback_renames_is_recovered(tmp_path: Path) -> None:
    old_logs, new_logs = tmp_path / "old", tmp_path / "new"
    write_run(old_logs, ranks=2, steps=5)
    write_run(new_logs, ranks=3, steps=7)
    st = tmp_path / "st"
    forensics.ingest([str(old_logs)], st)
    script = tmp_path / "k.py"
    script.write_text(NO_EXCHANGE)
    env = {**os.environ, "FORENSICS_FAILPOINT": "between-renames"}
    assert subprocess.run([sys.executable, str(script), str(new_logs), str(st), "1"], env=env).returncode == 137
    assert not st.exists()  # died with the old store moved aside ...
    assert open_store(st).totals["events"] == 10  # ... and opening it puts it back


def test_key_first_seen_in_a_late_block_of_a_later_file_survives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DuckDB and polars infer a schema from the first lines and drop keys first seen later."""
    from forensics.ingest import jsonl_reader

    real = jsonl_reader.read

    def small_blocks(path, stream, ctx):  # type: ignore[no-untyped-def]
        import dataclasses

        return real(path, stream, dataclasses.replace(ctx, block_bytes=64 << 10))

    monkeypatch.setattr(jsonl_reader, "read", small_blocks)
    import forensics.ingest.formats as formats

    monkeypatch.setattr(formats, "_READERS", {})
    monkeypatch.setattr(jsonl_reader, "read", small_blocks)
    d = tmp_path / "logs"
    d.mkdir()
    for r in range(2):
        body = b"".join(seed_line(r, s, s * 0.01) for s in range(3000))
        if r == 1:
            body += json.dumps({"timestamp": "2025-06-12T15:00:00Z", "rank": 1, "level": "ERROR", "event": "NCCL_TIMEOUT",
                                "message": "watchdog", "extra": {"seq_num": 77, "only_here": {"a": [1, 2]}},
                                "pg_desc": "tp"}).encode() + b"\n"
        (d / f"rank_{r}.jsonl").write_bytes(body)
    forensics.ingest([str(d)], tmp_path / "st", workers=1)
    row = events(tmp_path / "st").filter(pl.col("event") == "NCCL_TIMEOUT").row(0, named=True)
    assert row["line"] == 3001 and row["seq"] == 77
    assert json.loads(row["extra"])["only_here"] == {"a": [1, 2]}
    assert json.loads(row["fields"]) == {"pg_desc": "tp"}
    assert len(open_store(tmp_path / "st").sources[1]["event_parts"]) == 1


@pytest.mark.parametrize("carry", [True, False])
def test_small_plain_file_is_opened_once_or_twice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, carry: bool) -> None:
    """Planning reads a small file once (fingerprint, format, rank key and complete end from
    the same bytes); a file up to CARRY_BYTES goes to its unit with those bytes (one open), a
    bigger one is read once more by its unit (two opens, not five). The tail without a newline
    still gives the right complete end (re-ingest after it grows reads the tail again)."""
    import builtins
    import io

    import forensics.ingest as ingest_pkg

    if not carry:
        monkeypatch.setattr(ingest_pkg, "CARRY_BYTES", 0)

    d = tmp_path / "logs"
    write_run(d, ranks=3, steps=30)
    with open(d / "rank_2.jsonl", "ab") as f:
        f.write(b'{"timestamp": "2025-06-12T14:59:00Z", "rank": 2, "ev')   # truncated last line
    opens: dict[str, int] = {}
    real_open, real_io_open, real_os_open = builtins.open, io.open, os.open

    def counting(real):
        def op(file, *a, **k):
            if isinstance(file, (str, os.PathLike)) and str(file).startswith(str(d)):
                opens[str(file)] = opens.get(str(file), 0) + 1
            return real(file, *a, **k)
        return op

    monkeypatch.setattr(builtins, "open", counting(real_open))
    monkeypatch.setattr(io, "open", counting(real_io_open))
    monkeypatch.setattr(os, "open", counting(real_os_open))   # planning and the many-files path read so
    s = forensics.ingest([str(d)], tmp_path / "store", workers=1)
    monkeypatch.undo()
    assert sorted(opens.values()) == ([1, 1, 1] if carry else [2, 2, 2]), opens
    assert s.rejected == 1 and s.events == 90
    src = {Path(r["path"]).name: r for r in open_store(tmp_path / "store").sources}
    assert src["rank_2.jsonl"]["complete_end"] == (d / "rank_1.jsonl").stat().st_size
    assert src["rank_0.jsonl"]["complete_end"] == (d / "rank_0.jsonl").stat().st_size
