"""The store's core promise under bad luck: no line read twice, none lost for good, nothing
thrown away that could be read (issue 30: files that grow or vanish while read, parts that
change on disk, damaged gzip/zstd streams, files misread by a key in their head, identical
files of different ranks, unreadable folders)."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import polars as pl
import pytest
import zstandard

import forensics
import forensics.ingest as ing
import forensics.ingest.unit as unit
from forensics.errors import ForensicsError
from forensics.store import open_store
from test_ingest_store import check_accounting, seed_line


def lines(n: int, rank: int = 0, first: int = 0, pad: int = 0) -> bytes:
    return b"".join(seed_line(rank, s, s * 0.01, pad="x" * pad) for s in range(first, first + n))


# --- a file that grows while it is read -------------------------------------------------------

@pytest.mark.parametrize("pad", [0, 40_000])   # a small file (read with others), a big one (alone)
def test_file_growing_during_ingest_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pad: int) -> None:
    d = tmp_path / "logs"
    d.mkdir()
    f = d / "rank_0.jsonl"
    f.write_bytes(lines(300, pad=pad))
    orig = ing._file_info_or_gone

    def listed_then_grows(path: str, *args):
        out = orig(path, *args)
        with open(path, "ab") as fh:   # the writer appends after the listing, before the read
            fh.write(lines(50, first=300, pad=pad))
        return out

    monkeypatch.setattr(ing, "_file_info_or_gone", listed_then_grows)
    s1 = forensics.ingest([str(d)], tmp_path / "st")
    monkeypatch.setattr(ing, "_file_info_or_gone", orig)
    assert s1.events == 300 and s1.lines_read == 300   # what was listed, no more
    src = open_store(tmp_path / "st").sources[0]
    assert src["bytes_read"] == src["size"] == len(lines(300, pad=pad)) and src["read_complete"]
    s2 = forensics.ingest([str(d)], tmp_path / "st", append=True)
    assert s2.appended_files == 1 and s2.events == 350
    ev = open_store(tmp_path / "st").events().collect()
    # every line once: no line number past the file's end, none twice (was: 400 events, 50 phantoms)
    assert ev.height == 350 and ev["line"].n_unique() == 350 and ev["line"].max() == 350
    check_accounting(tmp_path / "st")


# --- a file that vanishes while it is read ------------------------------------------------------

def test_file_moved_away_mid_read_is_read_again_not_unchanged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "logs"
    d.mkdir()
    f = d / "rank_0.jsonl"
    f.write_bytes(lines(6000))
    monkeypatch.setattr(ing, "RANGE_BYTES", 128 << 10)   # cut in ranges (the real cut is 64 MiB)
    monkeypatch.setattr(ing, "BATCH_BYTES", 128 << 10)
    orig = unit.RangeReader
    opened: list[int] = []

    class MovedAway(orig):   # type: ignore[misc, valid-type]
        def __init__(self, path: str, start: int, end: int) -> None:
            opened.append(start)
            if len(opened) != 2:
                super().__init__(path, start, end)
                return
            os.rename(path, path + ".away")   # moved away as its second range is opened ...
            try:
                super().__init__(path, start, end)
            finally:
                os.rename(path + ".away", path)   # ... and back, unchanged

    monkeypatch.setattr(unit, "RangeReader", MovedAway)
    s1 = forensics.ingest([str(d)], tmp_path / "st", workers=1)
    monkeypatch.setattr(unit, "RangeReader", orig)
    assert 0 < s1.events < 6000 and "vanished" in s1.problems[0]["problem"]
    assert open_store(tmp_path / "st").sources[0]["read_complete"] is False
    s2 = forensics.ingest([str(d)], tmp_path / "st", workers=1)
    assert s2.unchanged_files == 0 and s2.events == 6000 and not s2.problems   # was: "unchanged", half lost
    s3 = forensics.ingest([str(d)], tmp_path / "st", workers=1)
    assert s3.unchanged_files == 1 and s3.events == 6000


# --- a part whose bytes changed on disk ---------------------------------------------------------

def _overwrite_part(store: Path) -> Path:
    part = next((store / "events").glob("*.parquet"))
    part.write_bytes(os.urandom(part.stat().st_size))   # same size: a size check sees nothing
    return part


def test_part_overwritten_same_size_is_read_again(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    d.mkdir()
    for r in range(2):
        (d / f"rank_{r}.jsonl").write_bytes(lines(40, rank=r))
    forensics.ingest([str(d)], tmp_path / "st")
    assert all(len(p["crc32"]) == 8 for p in open_store(tmp_path / "st").parts)
    _overwrite_part(tmp_path / "st")
    s = forensics.ingest([str(d)], tmp_path / "st")
    assert s.repaired_files == 2 and s.unchanged_files == 0 and s.events == 80
    assert open_store(tmp_path / "st").events().collect().height == 80


@pytest.mark.parametrize("cmd", [["events", "--limit", "3"], ["sql", "SELECT count(*) FROM events"], ["diagnose"]])
def test_queries_on_a_changed_part_are_a_clear_error(tmp_path: Path, cmd: list[str]) -> None:
    d = tmp_path / "logs"
    d.mkdir()
    (d / "rank_0.jsonl").write_bytes(lines(40))
    forensics.ingest([str(d)], tmp_path / "st")
    part = _overwrite_part(tmp_path / "st")
    store = str(tmp_path / "st")
    argv = [cmd[0], store, *cmd[1:]]
    p = subprocess.run([sys.executable, "-m", "forensics", *argv], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert "is damaged" in p.stderr and part.name in p.stderr and "CRC-32" in p.stderr


# --- damaged compressed streams: keep every line decoded before the damage -----------------------

def _complete_lines(data: bytes) -> int:
    return data.count(b"\n")


def test_damaged_gzip_keeps_the_lines_before_the_damage(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    d.mkdir()
    raw = lines(2000)
    z = gzip.compress(raw)
    (d / "half.jsonl.gz").write_bytes(z[: len(z) // 2])
    readable = _complete_lines(zlib.decompressobj(31).decompress(z[: len(z) // 2]))
    (d / "garbage.jsonl.gz").write_bytes(gzip.compress(lines(2)) + b"garbage!")
    crc = bytearray(gzip.compress(lines(50)))
    crc[-8] ^= 0xFF   # the CRC-32 in the trailer
    (d / "crc.jsonl.gz").write_bytes(bytes(crc))
    s = forensics.ingest([str(d)], tmp_path / "st")
    per = {f["path"].rsplit("/", 1)[-1]: f for f in s.per_file}
    # was: 0 of them all
    assert per["half.jsonl.gz"]["events"] == readable > 900
    assert per["garbage.jsonl.gz"]["events"] == 2
    assert per["crc.jsonl.gz"]["events"] == 50
    problems = {p["path"].rsplit("/", 1)[-1]: p["problem"] for p in s.problems}
    assert problems["half.jsonl.gz"].startswith("gzip stream truncated: ") and "decompressed bytes)" in problems["half.jsonl.gz"] and f"lines 1..{readable + 1:,}" in problems["half.jsonl.gz"]
    assert "Not a gzipped file" in problems["garbage.jsonl.gz"] and "lines 1..2)" in problems["garbage.jsonl.gz"]
    assert "CRC check failed" in problems["crc.jsonl.gz"]
    # the cut line is where the stream really ends, not at a block boundary
    rj = open_store(tmp_path / "st").rejects().filter(pl.col("source_file").str.ends_with("half.jsonl.gz")).collect()
    assert rj["line"].to_list() == [readable + 1]
    check_accounting(tmp_path / "st")


def test_big_truncated_gzip_loses_no_block(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    d.mkdir()
    z = gzip.compress(lines(40000, pad=40), compresslevel=1)
    cut = z[: int(len(z) * 0.9)]
    (d / "big.jsonl.gz").write_bytes(cut)
    readable = _complete_lines(zlib.decompressobj(31).decompress(cut))
    s = forensics.ingest([str(d)], tmp_path / "st")
    assert s.events == readable   # was: the last 2 MiB block's lines lost
    assert open_store(tmp_path / "st").rejects().collect()["line"].to_list() == [readable + 1]


def test_damaged_zstd_keeps_the_frames_before_the_damage(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    d.mkdir()
    c = zstandard.ZstdCompressor()
    good = b"".join(c.compress(lines(500, first=k * 500)) for k in range(3))
    (d / "rank_0.jsonl.zst").write_bytes(good + b"\x28\xb5\x2f\xfd" + os.urandom(3000))   # a damaged 4th frame
    (d / "rank_1.jsonl.zst").write_bytes(good[: len(good) * 5 // 6])                          # cut short
    s = forensics.ingest([str(d)], tmp_path / "st")
    per = {f["path"].rsplit("/", 1)[-1]: f for f in s.per_file}
    problems = {p["path"].rsplit("/", 1)[-1]: p["problem"] for p in s.problems}
    assert per["rank_0.jsonl.zst"]["events"] == 1500 and "zstd stream" in problems["rank_0.jsonl.zst"]
    assert "lines 1..1,500)" in problems["rank_0.jsonl.zst"]
    n = per["rank_1.jsonl.zst"]["lines_read"]
    assert n >= 1000 and problems["rank_1.jsonl.zst"].startswith("zstd stream truncated")
    assert problems["rank_1.jsonl.zst"].endswith(f"lines 1..{n:,})")


# --- the format of a file is decided by its lines -------------------------------------------------

@pytest.mark.parametrize("key", ["log_history", "traceEvents", "schemaVersion"])
def test_json_lines_with_a_document_key_stay_json_lines(tmp_path: Path, key: str) -> None:
    d = tmp_path / "logs"
    d.mkdir()
    recs = [seed_line(3, s, s) for s in range(5)]
    recs[0] = seed_line(3, 0, 0, **{key: [1]})     # a record that happens to hold the key
    (d / "rank_3.jsonl").write_bytes(b"".join(recs))
    s = forensics.ingest([str(d)], tmp_path / "st")
    # was: read as a trainer state / profiler trace, 5 lines -> 1 line read, 1 reject
    assert s.formats == {"jsonl": 1} and s.lines_read == 5 and s.events == 5 and s.rejected == 0


def test_a_byte_order_mark_is_skipped(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    d.mkdir()
    rec = json.dumps({"timestamp": "2025-06-12T14:00:00Z", "level": "ERROR", "event": "NCCL_TIMEOUT", "rank": 5,
                      "message": "Watchdog caught collective operation timeout"}).encode() + b"\n"
    (d / "small.jsonl").write_bytes(b"\xef\xbb\xbf" + rec)                                   # read with others
    (d / "big.jsonl").write_bytes(b"\xef\xbb\xbf" + rec.replace(b'"rank": 5', b'"rank": 6') * 40_000)  # alone
    (d / "x.jsonl.gz").write_bytes(gzip.compress(b"\xef\xbb\xbf" + rec.replace(b'"rank": 5', b'"rank": 7')))
    s = forensics.ingest([str(d)], tmp_path / "st")
    assert s.formats == {"jsonl": 3} and s.rejected == 0   # was: console text, rank null, event LOG
    ev = open_store(tmp_path / "st").events().collect()
    assert set(ev["event"]) == {"NCCL_TIMEOUT"} and sorted(set(ev["rank"])) == [5, 6, 7]
    assert ev.filter(pl.col("rank") == 5)["line"].to_list() == [1]


def test_blank_lines_are_rejects_in_a_file_of_blank_lines_too(tmp_path: Path) -> None:
    """One rule (README, Ingest): every line read is an event or a reject; a blank line is a
    reject "blank line", also in a file that holds nothing else (was: 0 lines read there)."""
    d = tmp_path / "logs"
    d.mkdir()
    (d / "blank.log").write_bytes(b"\n\n\n")
    (d / "rank_0.jsonl").write_bytes(seed_line(0, 1, 1) + b"\n" + seed_line(0, 2, 2))
    (d / "empty.log").write_bytes(b"")
    s = forensics.ingest([str(d)], tmp_path / "st")
    per = {f["path"].rsplit("/", 1)[-1]: f for f in s.per_file}
    assert per["blank.log"]["lines_read"] == per["blank.log"]["rejected"] == 3
    assert per["rank_0.jsonl"]["lines_read"] == 3 and per["rank_0.jsonl"]["rejected"] == 1
    assert per["empty.log"]["lines_read"] == 0 and per["empty.log"]["format"] == "empty"
    assert s.rejected_by_reason == {"blank line": 4}
    check_accounting(tmp_path / "st")


# --- identical bytes, different ranks -------------------------------------------------------------

OOM = (b"2025-06-12 14:00:01,000 - ERROR - torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
       b"2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 512.00 MiB is free.\n")


def test_identical_files_of_different_ranks_are_both_kept(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    (d / "node1").mkdir(parents=True)
    (d / "node2").mkdir(parents=True)
    for r in range(2):
        (d / f"rank_{r}.log").write_bytes(OOM)            # the rank only in the path
    (d / "node1" / "worker.log").write_bytes(OOM + b"x\n")   # the host only in the path
    (d / "node2" / "worker.log").write_bytes(OOM + b"x\n")
    (d / "copy").mkdir()
    (d / "copy" / "rank_1.log").write_bytes(OOM)          # a copy of rank 1's file: one file twice
    s = forensics.ingest([str(d)], tmp_path / "st")
    assert [Path(x["path"]).relative_to(d).as_posix() for x in s.duplicate_files] == ["copy/rank_1.log"]
    assert s.files == 4 and s.ranks == [0, 1] and s.hosts == ["node1", "node2"]   # was: rank 0 only
    p = subprocess.run([sys.executable, "-m", "forensics", "diagnose", str(tmp_path / "st"), "--format", "json"],
                       capture_output=True, text=True, timeout=120)
    assert json.loads(p.stdout)["root_cause"]["ranks"] == [0, 1], p.stderr


# --- unreadable folders and files: one behaviour, and a choice to skip ------------------------------

@pytest.fixture()
def unreadable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Path]:
    """logs/ with a readable rank file, a folder that cannot be listed and a file that cannot be
    opened. Permissions are simulated (the tests may run as root, who reads everything): the
    folder's listing and the file's open raise PermissionError as they would."""
    d = tmp_path / "logs"
    (d / "locked").mkdir(parents=True)
    (d / "locked" / "rank_9.jsonl").write_bytes(lines(3, rank=9))
    (d / "rank_0.jsonl").write_bytes(lines(3))
    (d / "rank_1.jsonl").write_bytes(lines(3, rank=1))
    bad_dir, bad_file = str(d / "locked"), str(d / "rank_1.jsonl")
    real_scandir, real_open = os.scandir, os.open

    def scandir(path=".", *a):
        if str(path) == bad_dir:
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path, *a)

    def os_open(path, flags, *a, **k):
        if str(path) == bad_file:
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *a, **k)

    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.setattr(os, "open", os_open)
    return d, Path(bad_dir), Path(bad_file)


def test_an_unreadable_folder_or_file_stops_the_ingest_the_same_way(tmp_path: Path, unreadable) -> None:
    d, bad_dir, bad_file = unreadable
    with pytest.raises(ForensicsError) as folder:
        forensics.ingest([str(d)], tmp_path / "st")       # was: the folder skipped with no word
    assert folder.value.code == "F101" and folder.value.what == f"cannot read {bad_dir}"
    assert "--skip-unreadable" in (folder.value.help or "")
    with pytest.raises(ForensicsError) as file:
        forensics.ingest([str(d / "rank_0.jsonl"), str(bad_file)], tmp_path / "st")
    assert file.value.code == "F101" and file.value.what == f"cannot read {bad_file}"
    assert file.value.help == folder.value.help
    assert not (tmp_path / "st").exists()


def test_skip_unreadable_lists_what_it_skipped(tmp_path: Path, unreadable) -> None:
    d, bad_dir, bad_file = unreadable
    s = forensics.ingest([str(d)], tmp_path / "st", skip_unreadable=True)
    assert s.files == 1 and s.events == 3
    assert [(x["path"], "Permission denied" in x["reason"]) for x in s.skipped] == [(str(bad_dir), True), (str(bad_file), True)]
    manifest = json.loads((tmp_path / "st" / "manifest.json").read_text())
    assert manifest["skipped"] == s.skipped


def test_skip_unreadable_on_the_command_line(tmp_path: Path) -> None:
    """The CLI flag reaches the library, and the summary names the skipped path (an unreadable
    path simulated in the child process: a folder whose listing fails)."""
    d = tmp_path / "logs"
    (d / "locked").mkdir(parents=True)
    (d / "rank_0.jsonl").write_bytes(lines(3))
    code = ("import os, sys\nreal = os.scandir\n"
            f"def scandir(p='.', *a):\n    if str(p) == {str(d / 'locked')!r}: raise PermissionError(13, 'Permission denied', str(p))\n"
            "    return real(p, *a)\nos.scandir = scandir\nfrom forensics.cli import main\nsys.argv = ['forensics', *sys.argv[1:]]\nmain()\n")
    args = [sys.executable, "-c", code, "ingest", str(d), "-o", str(tmp_path / "st")]
    r = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and f"cannot read {d / 'locked'}" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([*args, "--skip-unreadable"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"skipped {d / 'locked'} (--skip-unreadable): folder cannot be listed: Permission denied" in r.stdout


def test_a_byte_order_mark_does_not_hide_another_schema(tmp_path: Path) -> None:
    """The roles of a JSON-lines file in another schema are inferred from its head without the
    BOM (with it, a one-line file's only line did not parse: read as the seed schema, rank null)."""
    d = tmp_path / "logs"
    d.mkdir()
    rec = json.dumps({"@timestamp": "2025-06-12T14:00:00Z", "log": {"level": "error"}, "labels": {"rank": 2},
                      "message": "Watchdog caught collective operation timeout"}).encode() + b"\n"
    (d / "plain.jsonl").write_bytes(rec)
    (d / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + rec)
    forensics.ingest([str(d)], tmp_path / "st")
    ev = open_store(tmp_path / "st").events().collect().sort("source_file")
    assert ev.select("rank", "level").rows() == [(2, "ERROR"), (2, "ERROR")]
