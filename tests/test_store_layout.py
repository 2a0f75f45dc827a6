"""The store's layout for many ranks: parts cut by rank range (small files batched into one part),
row groups of whole ranks, small parts merged on --append, a small manifest with a part table and
the per-source table as Parquet past SOURCES_INLINE sources, rank slices from the part table, and
the schema-version message."""
from __future__ import annotations

import importlib
import json
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

import forensics
from forensics.errors import ForensicsError
from forensics.store import open_store

ing = importlib.import_module("forensics.ingest")
store_mod = importlib.import_module("forensics.store")


def line(rank: int | None, step: int, t: float, event: str = "TRAIN_STEP") -> bytes:
    rec: dict[str, object] = {"timestamp": f"2025-06-12T14:{int(t) // 60:02d}:{t % 60:06.3f}Z", "level": "INFO",
                              "event": event, "message": f"step={step}", "extra": {"step_time_ms": 300.0}}
    if rank is not None:
        rec["rank"] = rank
    return json.dumps(rec).encode() + b"\n"


def rank_files(d: Path, ranks: range, steps: int = 30, t0: float = 0.0) -> Path:
    """One file per rank, named by a node-local index (as torchrun writes them): the path does
    not name the global rank, the records do."""
    for r in ranks:
        f = d / f"node{r // 8}" / f"rank_{r % 8}.jsonl"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"".join(line(r, s, t0 + s * 0.5 + r * 0.001) for s in range(steps)))
    return d


def check_accounting(st: Path) -> None:
    run = open_store(st)
    ev = dict(run.events().group_by("source_file").len().collect().iter_rows())
    rj = dict(run.rejects().group_by("source_file").len().collect().iter_rows())
    for s in run.sources:
        assert s["lines_read"] == s["events"] + s["rejected"], s["path"]
        assert ev.get(s["path"], 0) == s["events"] and rj.get(s["path"], 0) == s["rejected"], s["path"]
    assert sum(s["events"] for s in run.sources) == run.totals["events"] == sum(ev.values())


def row_groups_with(path: str, rank: int) -> int:
    md = pq.ParquetFile(path).metadata
    col = md.schema.to_arrow_schema().get_field_index("rank")
    n = 0
    for i in range(md.num_row_groups):
        st = md.row_group(i).column(col).statistics
        if st is not None and st.min <= rank <= st.max:
            n += 1
    return n


def test_many_small_rank_files_share_one_part_sorted_by_rank(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(store_mod, "ROW_GROUP", 100)      # a row group per ~3 ranks of 30 rows
    d = rank_files(tmp_path / "logs", range(40))
    s = forensics.ingest([str(d)], tmp_path / "st")
    assert s.files == 40 and s.events == 1200
    run = open_store(tmp_path / "st")
    (part,) = run.event_parts()                            # was one part per file: 40
    df = pl.read_parquet(part)
    assert df.select("rank", "timestamp", "line").equals(df.select("rank", "timestamp", "line").sort("rank", "timestamp", "line"))
    # row groups hold whole ranks: one rank's filter reads one row group of the part
    assert pq.ParquetFile(part).metadata.num_row_groups >= 12
    assert all(row_groups_with(part, r) == 1 for r in (0, 12, 39))
    assert pl.scan_parquet(run.event_parts()).filter(pl.col("rank") == 12).select(pl.len()).collect().item() == 30
    (entry,) = [p for p in run.parts if p["kind"] == "events"]
    assert (entry["rank_min"], entry["rank_max"], entry["rows"]) == (0, 39, 1200)
    assert entry["bytes"] == Path(part).stat().st_size and entry["ts_min"] < entry["ts_max"]
    check_accounting(tmp_path / "st")


def test_batches_are_consecutive_rank_ranges(tmp_path: Path, monkeypatch) -> None:
    """Files are ordered by the rank their first line names (not their path: node10 sorts
    before node2, and rank_3 is a local rank), so each part holds a range of ranks."""
    d = rank_files(tmp_path / "logs", range(96))
    size = sum(f.stat().st_size + ing.FILE_WEIGHT for f in d.rglob("*.jsonl"))   # a batch weighs bytes and files
    monkeypatch.setattr(ing, "BATCH_BYTES", size // 4 + 1)
    monkeypatch.setattr(ing, "BATCH_MIN", 1)
    monkeypatch.setattr(store_mod, "COMPACT_ROWS", 1)      # tiny parts here: keep them
    forensics.ingest([str(d)], tmp_path / "st", workers=1)
    parts = sorted((p["rank_min"], p["rank_max"]) for p in open_store(tmp_path / "st").parts if p["kind"] == "events")
    assert 4 <= len(parts) <= 5                             # ~a quarter of the input each
    assert parts[0][0] == 0 and parts[-1][1] == 95
    assert all(a[1] < b[0] for a, b in zip(parts, parts[1:]))      # disjoint, in rank order


def test_a_file_holding_many_ranks_is_one_part_sorted_by_rank(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(store_mod, "ROW_GROUP", 64)
    d = tmp_path / "logs"
    d.mkdir()
    # all ranks in one file, interleaved by time (a concatenated or collector log)
    (d / "all.jsonl").write_bytes(b"".join(line(r, s, s * 0.5 + r * 0.001) for s in range(20) for r in range(32)))
    forensics.ingest([str(d)], tmp_path / "st")
    (part,) = open_store(tmp_path / "st").event_parts()
    df = pl.read_parquet(part)
    assert df["rank"].to_list() == sorted(df["rank"].to_list())
    assert all(row_groups_with(part, r) == 1 for r in (0, 17, 31))


def test_row_groups_hold_whole_ranks_and_split_a_big_one() -> None:
    import pyarrow as pa

    ranks = pa.array([0] * 5 + [1] * 250 + [2] * 3 + [None] * 4, pa.int32())
    groups = store_mod.rank_groups(ranks, max_rows=100)
    assert groups == [(0, 5), (5, 105), (105, 205), (205, 255), (255, 262)]
    # small ranks share a group until it is half full; a rank that would overflow it starts the next
    assert store_mod.rank_groups(pa.array([0] * 20 + [1] * 20 + [2] * 20 + [3] * 20, pa.int32()), max_rows=100) == [(0, 60), (60, 80)]
    assert store_mod.rank_groups(pa.array([0] * 40 + [1] * 70 + [2] * 30, pa.int32()), max_rows=100) == [(0, 40), (40, 110), (110, 140)]


@pytest.mark.parametrize("seed", range(12))
def test_a_part_streamed_in_rank_order_has_the_groups_of_the_whole_table(tmp_path: Path, monkeypatch, seed: int) -> None:
    """Fed in rank order in chunks of any size, the part writer writes the row groups of the whole
    table (rank_groups) and holds, besides the rank still coming in, less than half a group."""
    import random

    import pyarrow as pa

    from forensics.schema import arrow_schema

    monkeypatch.setattr(store_mod, "ROW_GROUP", 100)
    rng = random.Random(seed)
    ranks = [r for r in range(rng.randint(1, 20)) for _ in range(rng.choice([1, 3, 20, 49, 50, 51, 99, 100, 101, 250]))]
    ranks += [None] * rng.choice([0, 0, 7])
    n = len(ranks)
    schema = arrow_schema()
    cols = {"rank": pa.array(ranks, pa.int32()), "timestamp": pa.array(range(n), pa.int64()).cast(schema.field("timestamp").type),
            "line": pa.array(range(n), pa.int64())}
    table = pa.Table.from_arrays([cols.get(f.name, pa.nulls(n, f.type)) for f in schema], schema=schema)
    w = store_mod.PartWriter(tmp_path / "part.parquet", "events")
    at = 0
    while at < n:
        k = min(n - at, rng.choice([1, 2, 17, 40, 120]))
        w.add(table.slice(at, k), in_order=True)
        at += k
        held = pa.concat_tables(w._buf)["rank"].to_pylist() if w._buf else []
        assert sum(1 for r in held if r != ranks[at - 1]) < 50      # was up to a whole group
    w.close()
    md = pq.ParquetFile(tmp_path / "part.parquet").metadata
    sizes = [md.row_group(i).num_rows for i in range(md.num_row_groups)]
    assert sizes == [b - a for a, b in store_mod.rank_groups(table["rank"])]
    assert pq.read_table(tmp_path / "part.parquet")["rank"].to_pylist() == ranks


def test_appends_of_small_files_are_compacted(tmp_path: Path) -> None:
    st = tmp_path / "st"
    d = tmp_path / "logs"
    for i in range(30):
        f = d / f"batch{i}" / f"rank_{i}.jsonl"
        f.parent.mkdir(parents=True)
        f.write_bytes(b"".join(line(i, s, s * 0.5) for s in range(10)) + (b"\x00\x01\x02\x03 not json\n" if i % 7 == 0 else b""))
        forensics.ingest([str(f)], st, append=True)
    run = open_store(st)
    assert len(run.event_parts()) == 1 and len(run.reject_parts()) == 1   # was 30 and 5
    assert run.totals["events"] == 300 and run.totals["rejected"] == 5 and run.totals["files"] == 30
    assert len(list((st / "events").iterdir())) == 1
    check_accounting(st)


def test_sources_past_the_inline_limit_go_to_parquet(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(store_mod, "SOURCES_INLINE", 10)
    d = rank_files(tmp_path / "logs", range(24), steps=3)
    (d / "node0" / "rank_0.jsonl").write_bytes((d / "node0" / "rank_0.jsonl").read_bytes() + b"\x00\x01\x02\x03 garbage\n")
    st = tmp_path / "st"
    s1 = forensics.ingest([str(d)], st)
    m = json.loads((st / "manifest.json").read_text())
    assert "sources" not in m and m["sources_table"]["rows"] == 24 and (st / "sources.parquet").is_file()
    run = open_store(st)
    src = {Path(x["path"]).parent.name + "/" + Path(x["path"]).name: x for x in run.sources}
    r0 = src["node0/rank_0.jsonl"]
    assert (r0["lines_read"], r0["events"], r0["rejected"]) == (4, 3, 1)
    assert r0["rejected_by_reason"] and r0["ranks"] == [0] and r0["hosts"] == ["node0"] and r0["start"] < r0["end"]
    assert r0["rank_sources"] == {"record": 3} and r0["fingerprint"] and r0["event_parts"]
    assert [f["rank_from"] for f in s1.per_file].count("record") == 24
    check_accounting(st)
    # fingerprints read back from the table: nothing is read again
    s2 = forensics.ingest([str(d)], st)
    assert s2.unchanged_files == 24 and s2.bytes_read == 0 and s2.events == s1.events
    # the table is checked like a part
    (st / "sources.parquet").write_bytes(b"PAR1")
    with pytest.raises(ForensicsError) as e:
        open_store(st)
    assert e.value.code == "F210"
    assert forensics.ingest([str(d)], st).events == s1.events


def test_changed_or_dropped_file_in_a_shared_part(tmp_path: Path) -> None:
    d = rank_files(tmp_path / "logs", range(3), steps=10)
    st = tmp_path / "st"
    forensics.ingest([str(d)], st)
    assert len(open_store(st).event_parts()) == 1
    f1 = d / "node0" / "rank_1.jsonl"
    f1.write_bytes(b"".join(line(1, s, s * 0.5) for s in range(4)))        # rewritten: 4 lines
    s = forensics.ingest([str(d)], st)
    assert s.unchanged_files == 2 and s.new_files == 1 and s.events == 24
    assert open_store(st).events().filter(pl.col("rank") == 1).collect().height == 4
    check_accounting(st)
    s = forensics.ingest([str(d / "node0" / "rank_0.jsonl"), str(f1)], st)   # rank 2 is no input now
    assert s.files == 2 and s.unchanged_files == 2 and s.bytes_read == 0
    assert sorted(open_store(st).events().select("rank").unique().collect()["rank"].to_list()) == [0, 1]
    check_accounting(st)


def test_grown_file_in_a_shared_part_drops_its_stale_tail_reject(tmp_path: Path) -> None:
    d = rank_files(tmp_path / "logs", range(2), steps=5)
    f = d / "node0" / "rank_0.jsonl"
    f.write_bytes(f.read_bytes() + b'{"timestamp": "2025-06')      # cut mid-line
    st = tmp_path / "st"
    assert forensics.ingest([str(d)], st).rejected == 1
    with open(f, "r+b") as fh:
        fh.truncate(f.stat().st_size - len(b'{"timestamp": "2025-06'))
        fh.seek(0, 2)
        fh.write(b"".join(line(0, s, s * 0.5) for s in range(5, 8)))
    s = forensics.ingest([str(d)], st, append=True)
    assert s.appended_files == 1 and s.events == 13 and s.rejected == 0
    assert open_store(st).rejects().collect().height == 0
    check_accounting(st)


def test_rank_slices_read_only_the_parts_of_their_ranks(tmp_path: Path, monkeypatch) -> None:
    d = rank_files(tmp_path / "logs", range(64), steps=20)
    size = sum(f.stat().st_size + ing.FILE_WEIGHT for f in d.rglob("*.jsonl"))   # a batch weighs bytes and files
    monkeypatch.setattr(ing, "BATCH_BYTES", size // 4 + 1)
    monkeypatch.setattr(ing, "BATCH_MIN", 1)
    monkeypatch.setattr(store_mod, "COMPACT_ROWS", 1)
    forensics.ingest([str(d)], tmp_path / "st", workers=1)
    run = open_store(tmp_path / "st")
    assert 4 <= len(run.event_parts()) <= 5
    slices = run.rank_slices(max_events=300)              # ~15 ranks a slice
    assert 3 <= len(slices) <= 6
    got = pl.concat([x.collect() for x in slices])
    allr = run.events().filter(pl.col("rank").is_not_null()).collect()
    assert got.height == allr.height and got.sort("rank", "line").equals(allr.sort("rank", "line"))
    for x in slices:                                       # each slice's ranks in as few parts as hold them
        ranks = x.select(pl.col("rank").min().alias("a"), pl.col("rank").max().alias("b")).collect().row(0)
        want = [p["path"] for p in run.parts if p["kind"] == "events" and p["rank_min"] <= ranks[1] and p["rank_max"] >= ranks[0]]
        plan = x.explain()
        assert sum(Path(p).name in plan for p in run.event_parts()) <= len(want) + 1
    assert run.rank_slices(max_events=10**9) == []
    from forensics import timeline
    assert len(timeline.rank_slices(run, max_events=300)) == len(slices)


def test_old_schema_store_says_how_to_reingest_and_ingest_rebuilds_it(tmp_path: Path) -> None:
    d = rank_files(tmp_path / "logs", range(2), steps=3)
    st = tmp_path / "st"
    forensics.ingest([str(d)], st)
    mf = st / "manifest.json"
    m = json.loads(mf.read_text())
    m["schema_version"] = 3
    m["sources"] = [{"path": str(d / "node0" / "rank_0.jsonl")}, {"path": str(d / "node0" / "rank_1.jsonl")}]
    mf.write_text(json.dumps(m))
    with pytest.raises(ForensicsError) as e:
        open_store(st)
    assert e.value.code == "F201"
    assert f"forensics ingest {d / 'node0'} -o {st}" in (e.value.help or "")
    assert forensics.ingest([str(d)], st).events == 6
    assert open_store(st).manifest["schema_version"] == store_mod.SCHEMA_VERSION


def test_cache_of_an_older_schema_is_rebuilt_silently(tmp_path: Path, monkeypatch) -> None:
    from forensics.run import open_run

    monkeypatch.setenv("FORENSICS_CACHE", str(tmp_path / "cache"))
    d = rank_files(tmp_path / "logs", range(2), steps=3)
    run = open_run([str(d)])
    mf = run.path / "manifest.json"
    m = json.loads(mf.read_text())
    m["schema_version"] = store_mod.SCHEMA_VERSION - 1
    mf.write_text(json.dumps(m))
    again = open_run([str(d)])
    assert again.path == run.path and again.totals["events"] == 6
    assert open_store(again.path).manifest["schema_version"] == store_mod.SCHEMA_VERSION


def test_every_enum_column_is_dictionary_encoded(tmp_path: Path) -> None:
    """A column of a few fixed values (an Enum) written PLAIN is decoded string by string on every
    filter (hygiene's event_source filter read 10x slower than rank_source's): each one must be in
    the writer's dictionary list, and the written part must say so."""
    from forensics.schema import EVENT_SCHEMA
    from forensics.store import DICTIONARY

    enums = [c for c, t in EVENT_SCHEMA.items() if isinstance(t, pl.Enum)]
    assert enums and not set(enums) - set(DICTIONARY)
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "rank_0.jsonl").write_text(
        '{"timestamp": "2026-01-01T00:00:00Z", "rank": 0, "event": "TRAIN_STEP", "step": 1, "loss": 1.0}\n'
        '{"timestamp": "2026-01-01T00:00:01Z", "rank": 0, "gpu_util": 90}\n')
    ing.ingest([logs], tmp_path / "store")
    part = next((tmp_path / "store" / "events").rglob("*.parquet"))
    meta = pq.ParquetFile(part).metadata.row_group(0)
    names = [meta.column(i).path_in_schema for i in range(meta.num_columns)]
    for c in enums:
        encodings = meta.column(names.index(c)).encodings
        assert any("DICT" in e for e in encodings), (c, encodings)
