"""Hostile conditions around an ingest: disk full, damaged streams, files that shrink or vanish,
damaged stores and caches, and --append of another run. Each test failed on the code before."""
from __future__ import annotations

import errno
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import zstandard

import forensics
import forensics.ingest as ing
from forensics.errors import ForensicsError
from forensics.store import open_store


def lines(rank: int, steps: int, t0: int = 0, day: int = 12, pad: int = 0) -> bytes:
    out = []
    for s in range(steps):
        t = t0 + s
        out.append(json.dumps({"timestamp": f"2025-06-{day:02d}T14:{t // 60:02d}:{t % 60:02d}.000Z", "rank": rank,
                               "level": "INFO", "event": "TRAIN_STEP", "message": f"step={s} " + "x" * pad,
                               "extra": {"step": s, "step_time_ms": 1000.0}}))
    return ("\n".join(out) + "\n").encode()


def make_run(d: Path, ranks: int = 2, steps: int = 20, **kw) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    for r in range(ranks):
        (d / f"rank_{r}.jsonl").write_bytes(lines(r, steps, **kw))
    return d


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "forensics", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


# --- disk full ---------------------------------------------------------------------------------

def test_disk_full_on_append_is_an_error_block_and_the_old_store_is_intact(tmp_path: Path, monkeypatch) -> None:
    st = tmp_path / "st"
    forensics.ingest([str(make_run(tmp_path / "a"))], st)
    before = (st / "manifest.json").read_text()

    def full(self, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pq.ParquetWriter, "write_table", full)
    with pytest.raises(ForensicsError) as e:
        forensics.ingest([str(make_run(tmp_path / "b", day=12, t0=30))], st, append=True)
    assert e.value.code == "F211" and "disk is full" in e.value.what
    assert (st / "manifest.json").read_text() == before
    assert open_store(st).events().collect().height == 40
    assert not list(tmp_path.glob(".st.tmp-*"))


def _mount_tmpfs(where: Path, size: str) -> bool:
    where.mkdir()
    if os.geteuid() != 0:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True).returncode == 0


def test_disk_full_on_a_real_small_file_system(tmp_path: Path) -> None:
    """The issue's reproduction: an 8 MiB tmpfs, ingest, then --append more than fits."""
    small = tmp_path / "small"
    if not _mount_tmpfs(small, "8m"):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        st = small / "st"
        r = cli("ingest", str(make_run(tmp_path / "a")), "-o", str(st))
        assert r.returncode == 0, r.stderr
        before = (st / "manifest.json").read_text()
        big = tmp_path / "b"
        big.mkdir()
        rnd = os.urandom(12 << 20).hex()  # hex of random bytes: ~12 MiB compressed, more than fits
        with open(big / "rank_5.jsonl", "w") as f:
            for i in range(0, len(rnd), 2000):
                f.write(json.dumps({"timestamp": "2025-06-12T14:00:01Z", "rank": 5, "level": "INFO",
                                    "event": "NOTE", "message": rnd[i:i + 2000]}) + "\n")
        r = cli("ingest", str(big), "-o", str(st), "--append")
        assert r.returncode == 1, r.stdout + r.stderr
        assert "error[F211]" in r.stderr and "Traceback" not in r.stderr
        assert (st / "manifest.json").read_text() == before
        assert cli("ranks", str(st)).returncode == 0
    finally:
        subprocess.run(["umount", str(small)], capture_output=True)


# --- streams that end early --------------------------------------------------------------------

def test_truncated_gzip_and_zstd_are_said_in_summary_and_manifest(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    d.mkdir()
    data = lines(0, 3000, pad=50)
    gz = gzip.compress(data)
    (d / "rank_0.jsonl.gz").write_bytes(gz[: len(gz) // 2])
    zs = zstandard.ZstdCompressor().compress(lines(1, 3000, pad=50))
    (d / "rank_1.jsonl.zst").write_bytes(zs[: len(zs) // 2])
    (d / "rank_2.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(lines(2, 10)))  # whole
    s = forensics.ingest([str(d)], tmp_path / "st")
    probs = {Path(p["path"]).name: p["problem"] for p in s.problems}
    assert probs["rank_0.jsonl.gz"].startswith("gzip stream truncated")
    assert probs["rank_1.jsonl.zst"].startswith("zstd stream truncated")
    assert "rank_2.jsonl.zst" not in probs
    assert 0 < s.events < 6010 and s.lines_read == s.events + s.rejected
    mf = json.loads((tmp_path / "st" / "manifest.json").read_text())
    by = {Path(x["path"]).name: x.get("problems") for x in mf["sources"]}
    assert by["rank_0.jsonl.gz"] and by["rank_1.jsonl.zst"] and not by["rank_2.jsonl.zst"]
    r = cli("ingest", str(d), "-o", str(tmp_path / "st2"))
    assert r.returncode == 0 and "warning:" in r.stdout and "gzip stream truncated" in r.stdout


def test_compressed_file_damaged_before_its_first_line_is_said(tmp_path: Path) -> None:
    """Nothing decompresses: it sniffed as an empty file and was skipped without a word."""
    d = tmp_path / "logs"
    d.mkdir()
    data = b"".join(lines(0, 60) for _ in range(50))
    zs = zstandard.ZstdCompressor().compress(data)
    (d / "rank_0.jsonl.zst").write_bytes(zs[: len(zs) // 2])
    gz = gzip.compress(data)
    (d / "rank_1.jsonl.gz").write_bytes(gz[:20])
    (d / "rank_2.jsonl.gz").write_bytes(gzip.compress(b""))  # really empty: no problem
    s = forensics.ingest([str(d)], tmp_path / "st")
    assert sorted(Path(p["path"]).name for p in s.problems) == ["rank_0.jsonl.zst", "rank_1.jsonl.gz"]


@pytest.mark.parametrize("carry", [False, True])
def test_file_that_shrank_or_vanished_while_read(tmp_path: Path, monkeypatch, carry: bool) -> None:
    """A file read again by its unit that shrank or vanished since planning is reported; a
    file small enough to travel with the bytes planning read (CARRY_BYTES) is read whole as
    listed and fingerprinted: nothing to report, every listed line counted."""
    d = make_run(tmp_path / "logs", ranks=3, steps=50)
    lines = sum(f.read_bytes().count(b"\n") for f in d.glob("rank_*.jsonl"))
    monkeypatch.setattr(ing, "CARRY_BYTES", 1 << 30 if carry else 0)
    real = ing._dispatch

    def meddle(units, *a, **k):
        os.truncate(d / "rank_1.jsonl", 300)
        os.unlink(d / "rank_2.jsonl")
        return real(units, *a, **k)

    monkeypatch.setattr(ing, "_dispatch", meddle)
    s = forensics.ingest([str(d)], tmp_path / "st")
    probs = {Path(p["path"]).name: p["problem"] for p in s.problems}
    if carry:
        assert probs == {} and s.lines_read == lines and s.events + s.rejected == lines
        return
    assert probs["rank_1.jsonl"].startswith("file shrank while read") and "vanished" in probs["rank_2.jsonl"]
    assert "rank_0.jsonl" not in probs


def test_file_vanished_between_listing_and_fingerprint(tmp_path: Path, monkeypatch) -> None:
    d = make_run(tmp_path / "logs", ranks=2)
    real = ing.expand_names

    def listing(inputs):
        files = real(inputs)
        os.unlink(d / "rank_1.jsonl")
        return files

    monkeypatch.setattr(ing, "expand_names", listing)
    s = forensics.ingest([str(d)], tmp_path / "st")
    assert s.files == 1 and [Path(p["path"]).name for p in s.problems] == ["rank_1.jsonl"]


# --- damaged stores and caches -----------------------------------------------------------------

@pytest.mark.parametrize("damage", ["delete", "halve"])
def test_damaged_part_is_named_and_reingest_repairs(tmp_path: Path, damage: str) -> None:
    d = make_run(tmp_path / "logs", ranks=3)
    st = tmp_path / "st"
    forensics.ingest([str(d)], st)
    n = open_store(st).events().collect().height
    src = next(s for s in open_store(st).sources if s["path"].endswith("rank_1.jsonl"))
    part = st / src["event_parts"][0]
    # small files share a part: every file with rows in the damaged part is read again
    sharing = [s["path"] for s in open_store(st).sources if src["event_parts"][0] in s["event_parts"]]
    if damage == "delete":
        part.unlink()
    else:
        os.truncate(part, part.stat().st_size // 2)
    for cmd in (["events", str(st)], ["ranks", str(st)], ["diagnose", str(st)]):
        r = cli(*cmd)
        assert r.returncode == 1 and "error[F210]" in r.stderr and part.name in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
    s = forensics.ingest([str(d)], st)
    assert s.repaired_files == len(sharing) and s.unchanged_files == 3 - len(sharing)
    assert open_store(st).events().collect().height == n


def test_damaged_part_repaired_by_append_too(tmp_path: Path) -> None:
    d = make_run(tmp_path / "logs", ranks=2)
    st = tmp_path / "st"
    forensics.ingest([str(d)], st)
    n = open_store(st).events().collect().height
    rel = open_store(st).sources[0]["event_parts"][0]
    sharing = [s["path"] for s in open_store(st).sources if rel in s["event_parts"]]  # small files share a part
    (st / rel).unlink()
    e = make_run(tmp_path / "more", ranks=3, steps=20)
    (e / "rank_0.jsonl").unlink()
    (e / "rank_1.jsonl").unlink()  # rank 2 only: new rank, same time span
    s = forensics.ingest([str(e)], st, append=True)
    assert s.repaired_files == len(sharing) and open_store(st).events().collect().height == n + 20


def test_cut_manifest_is_an_error_block_and_reingest_rebuilds(tmp_path: Path) -> None:
    d = make_run(tmp_path / "logs")
    st = tmp_path / "st"
    forensics.ingest([str(d)], st)
    mf = st / "manifest.json"
    mf.write_bytes(mf.read_bytes()[:100])
    r = cli("events", str(st))
    assert r.returncode == 1 and "error[F200]" in r.stderr and "Traceback" not in r.stderr
    forensics.ingest([str(d)], st)
    assert open_store(st).events().collect().height == 40


def test_damaged_cache_entry_is_rebuilt(tmp_path: Path) -> None:
    d = make_run(tmp_path / "logs")
    env = {"FORENSICS_CACHE": str(tmp_path / "cache")}
    assert cli("ranks", str(d), env=env).returncode == 0
    (entry,) = (tmp_path / "cache").glob("*.forensics")
    for p in (entry / "events").glob("*.parquet"):
        os.truncate(p, 10)
    r = cli("ranks", str(d), env=env)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    open_store(entry)  # repaired


def test_unwritable_cache_is_a_clear_error(tmp_path: Path) -> None:
    d = make_run(tmp_path / "logs")
    (tmp_path / "afile").write_text("x")
    r = cli("ranks", str(d), env={"FORENSICS_CACHE": str(tmp_path / "afile" / "cache")})
    assert r.returncode == 1 and "error[F211]" in r.stderr and "FORENSICS_CACHE" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


# --- --append of another run -------------------------------------------------------------------

def test_append_of_another_run_is_refused_without_force(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[1] / "sample_logs"
    st = tmp_path / "st"
    forensics.ingest([str(repo / "hang")], st)
    with pytest.raises(ForensicsError) as e:
        forensics.ingest([str(repo / "healthy")], st, append=True)
    assert e.value.code == "F212" and "step" in (e.value.reason or "")
    assert open_store(st).manifest["totals"]["files"] == 4
    r = cli("ingest", str(repo / "healthy"), "-o", str(st), "--append")
    assert r.returncode == 1 and "error[F212]" in r.stderr and "--force" in r.stderr
    s = forensics.ingest([str(repo / "healthy")], st, append=True, force=True)
    assert s.files == 8


def test_append_far_apart_in_time_is_refused(tmp_path: Path) -> None:
    st = tmp_path / "st"
    forensics.ingest([str(make_run(tmp_path / "a", ranks=2, day=12))], st)
    b = make_run(tmp_path / "b", ranks=4, day=15)
    for r in (0, 1):
        (b / f"rank_{r}.jsonl").unlink()  # ranks 2, 3 only: no shared step, 3 days later
    with pytest.raises(ForensicsError, match="another run") as e:
        forensics.ingest([str(b)], st, append=True)
    assert "h apart" in (e.value.reason or "")


def test_append_of_the_same_run_passes_and_duplicates_warn(tmp_path: Path) -> None:
    st = tmp_path / "st"
    a = make_run(tmp_path / "a", ranks=2, steps=20)
    forensics.ingest([str(a)], st)
    # a later batch of the same run: the next steps, other files
    later = tmp_path / "later"
    later.mkdir()
    (later / "rank_0.part2.jsonl").write_bytes(lines(0, 40, t0=0)[len(lines(0, 20)):])
    s = forensics.ingest([str(later)], st, append=True)
    assert not s.warnings
    # the same lines again in another file (not byte-identical: one more line)
    dup = tmp_path / "dup"
    dup.mkdir()
    (dup / "copy_rank_1.jsonl").write_bytes(lines(1, 20) + lines(1, 1, t0=59))
    s = forensics.ingest([str(dup)], st, append=True)
    assert any("same time" in w for w in s.warnings)
