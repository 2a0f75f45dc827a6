"""Hostile inputs against ingest: does it hold, how long does it take, how much memory?

    python bench/reliability.py                 # every case
    python bench/reliability.py --only pickle   # cases whose name contains the text

Each case runs in its own process (its peak RSS is its own, from wait4) on inputs built in a
temp dir, and says held or broke by checking what the README promises for it: over-long lines
are one reject each and forge nothing, bombs end in linear time and bounded memory, a bad
Flight Recorder dump is a reject of its file, a full disk is an error block with the old store
intact, kill -9 leaves the old store intact, damaged streams and stores are said and repaired,
another run is refused on --append. Prints one row per case: input, held/broke, seconds, peak
RSS. The disk-full case needs root (it mounts an 8 MiB tmpfs); elsewhere it is "skipped".
Times are wall times on whatever else the machine is doing.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def rec(rank: int, step: int, level: str = "INFO", event: str = "TRAIN_STEP") -> bytes:
    return json.dumps({"timestamp": f"2025-06-12T14:{step // 60:02d}:{step % 60:02d}.000Z", "rank": rank,
                       "level": level, "event": event, "message": f"step={step}",
                       "extra": {"step": step, "step_time_ms": 1000.0}}).encode()


def run_dir(d: Path, ranks: int = 2, steps: int = 20) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    for r in range(ranks):
        (d / f"rank_{r}.jsonl").write_bytes(b"\n".join(rec(r, s) for s in range(steps)) + b"\n")
    return d


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "forensics", *args], capture_output=True, text=True)


# --- cases: each builds its input in `tmp`, runs forensics in this process, returns (held, note)

def case_forged_64mib_line(tmp: Path) -> tuple[bool, str]:
    import polars as pl

    import forensics
    f = tmp / "rank_0.jsonl"
    with open(f, "wb") as fh:
        fh.write(b"\n".join([rec(0, 1), rec(0, 2), rec(0, 3)]) + b"\n")
        fh.write(b"A" * (64 << 20) + rec(3, 9, "ERROR", "NCCL_TIMEOUT") + b"\n" + rec(0, 4) + b"\n")
    s = forensics.ingest([str(f)], tmp / "st")
    forged = forensics.open_run(str(tmp / "st")).events().filter(pl.col("level") == "ERROR").collect().height
    return (s.lines_read, s.events, s.rejected, forged) == (5, 4, 1, 0), f"lines {s.lines_read}, events {s.events}, rejects {s.rejected}, forged {forged}"


def case_plain_256mib_line(tmp: Path) -> tuple[bool, str]:
    import forensics
    f = tmp / "rank_0.jsonl"
    with open(f, "wb") as fh:
        for _ in range(256):
            fh.write(b"B" * (1 << 20))
        fh.write(b"\n" + rec(0, 1) + b"\n")
    s = forensics.ingest([str(f)], tmp / "st")
    # the file sniffs as console text (its head is all 'B'): the console reader sees the line as
    # its first 4 KiB -- one line either way
    return s.lines_read == 2 and s.events + s.rejected == 2, f"lines {s.lines_read}, events {s.events}, rejects {s.rejected}"


def _gz_long_line(tmp: Path, mib: int) -> tuple[bool, str]:
    import forensics
    f = tmp / "rank_0.jsonl.gz"
    with gzip.open(f, "wb", compresslevel=1) as g:
        g.write(rec(0, 1) + b"\n")
        block = b"Q" * (1 << 20)
        for _ in range(mib):
            g.write(block)
        g.write(b"\n" + rec(0, 2) + b"\n")
    t = time.perf_counter()
    s = forensics.ingest([str(f)], tmp / "st")
    return ((s.lines_read, s.events, s.rejected) == (3, 2, 1),
            f".gz {f.stat().st_size / 1e6:.1f} MB; ingest {time.perf_counter() - t:.1f} s; lines {s.lines_read}, rejects {s.rejected}")


def case_gzip_512mib_line(tmp: Path) -> tuple[bool, str]:
    return _gz_long_line(tmp, 512)


def case_gzip_2gib_line(tmp: Path) -> tuple[bool, str]:
    return _gz_long_line(tmp, 2048)


def case_zstd_bomb_1gib_no_newline(tmp: Path) -> tuple[bool, str]:
    import zstandard

    import forensics
    f = tmp / "rank_0.jsonl.zst"
    cctx = zstandard.ZstdCompressor(level=3)
    with open(f, "wb") as fh, cctx.stream_writer(fh) as w:
        w.write(rec(0, 1) + b"\n")
        z = bytes(1 << 20)
        for _ in range(1024):
            w.write(z)
    s = forensics.ingest([str(f)], tmp / "st")
    return (s.lines_read, s.events, s.rejected) == (2, 1, 1), f".zst {f.stat().st_size / 1e3:.0f} KB; lines {s.lines_read}, rejects {s.rejected}"


def case_pickle_memo_bomb(tmp: Path) -> tuple[bool, str]:
    import forensics
    t: object = ("x",)
    for _ in range(60):
        t = (t, t)
    good = {"entries": [{"collective_seq_id": 1, "profiling_name": "nccl:all_reduce", "process_group": ("0", "default_pg"),
                         "state": "completed", "time_created_ns": 1_700_000_000_000_000_000}], "version": "2.9"}
    (tmp / "_dump_0").write_bytes(pickle.dumps(good))
    (tmp / "_dump_1").write_bytes(pickle.dumps({"entries": t, "version": "2.9"}, protocol=4))
    size = (tmp / "_dump_1").stat().st_size
    s = forensics.ingest([str(tmp)], tmp.parent / "st")
    return (s.events, s.rejected) == (1, 1), f"{size} B pickle; events {s.events}, rejects {s.rejected}: {list(s.rejected_by_reason)[0][:60]}"


def case_pickle_deep_and_global(tmp: Path) -> tuple[bool, str]:
    import forensics
    n = 100_000  # a list nested 100,000 deep, written as opcodes (pickle.dumps would recurse)
    (tmp / "_dump_0").write_bytes(b"\x80\x04" + b"]" * n + b"a" * (n - 1) + b".")
    (tmp / "_dump_1").write_bytes(b"\x80\x04cos\nsystem\n(S'touch /tmp/pwned-by-dump'\ntR.")
    s = forensics.ingest([str(tmp)], tmp.parent / "st")
    return s.rejected == 2 and not os.path.exists("/tmp/pwned-by-dump"), f"rejects {s.rejected}: {', '.join(k[31:70] for k in s.rejected_by_reason)}"


def case_disk_full_append(tmp: Path) -> tuple[bool, str] | None:
    small = tmp / "small"
    small.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(small)],
                                           capture_output=True).returncode:
        return None
    try:
        st = small / "st"
        cli("ingest", str(run_dir(tmp / "a")), "-o", str(st))
        before = (st / "manifest.json").read_text()
        big = tmp / "b"
        big.mkdir()
        rnd = os.urandom(12 << 20).hex()
        with open(big / "rank_5.jsonl", "w") as f:
            for i in range(0, len(rnd), 2000):
                f.write(json.dumps({"timestamp": "2025-06-12T14:00:01Z", "rank": 5, "event": "NOTE", "message": rnd[i:i + 2000]}) + "\n")
        r = cli("ingest", str(big), "-o", str(st), "--append")
        intact = (st / "manifest.json").read_text() == before and cli("ranks", str(st)).returncode == 0
        ok = r.returncode == 1 and "error[F211]" in r.stderr and "Traceback" not in r.stderr and intact
        return ok, f"exit {r.returncode}, {r.stderr.splitlines()[0] if r.stderr else ''}; old store intact: {intact}"
    finally:
        subprocess.run(["umount", str(small)], capture_output=True)


def case_kill_9_during_ingest(tmp: Path) -> tuple[bool, str]:
    import forensics
    st = tmp / "st"
    forensics.ingest([str(run_dir(tmp / "small"))], st)
    before = (st / "manifest.json").read_text()
    big = run_dir(tmp / "big", ranks=16, steps=40_000)
    held = True
    for delay in (0.3, 1.0, 2.0):
        p = subprocess.Popen([sys.executable, "-c", "import sys, forensics; forensics.ingest([sys.argv[1]], sys.argv[2])",
                              str(big), str(st)])
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        p.wait()
        now = (st / "manifest.json").read_text()
        ok = now == before or json.loads(now)["totals"]["files"] == 16  # finished before the kill
        held = held and ok and forensics.open_run(str(st)).events().collect().height > 0
        if now != before:
            before = now
    r = forensics.ingest([str(big)], st)
    return held and r.files == 16, "killed at 0.3/1/2 s: old (or complete new) store each time; a re-ingest completes"


def case_truncated_streams(tmp: Path) -> tuple[bool, str]:
    import zstandard

    import forensics
    d = tmp / "logs"
    d.mkdir()
    data = b"\n".join(rec(0, s) for s in range(20_000)) + b"\n"
    gz, zs = gzip.compress(data), zstandard.ZstdCompressor().compress(data)
    (d / "rank_0.jsonl.gz").write_bytes(gz[: len(gz) // 2])
    (d / "rank_1.jsonl.zst").write_bytes(zs[: len(zs) // 2])
    s = forensics.ingest([str(d)], tmp / "st")
    names = sorted(p["problem"].split(":")[0] for p in s.problems)
    return names == ["gzip stream truncated", "zstd stream truncated"], "; ".join(names)


def case_damaged_store(tmp: Path) -> tuple[bool, str]:
    import forensics
    d = run_dir(tmp / "logs", ranks=3)
    st = tmp / "st"
    whole = forensics.ingest([str(d)], st).events
    part = next((st / "events").glob("*.parquet"))
    os.truncate(part, part.stat().st_size // 2)
    r = cli("events", str(st))
    s = forensics.ingest([str(d)], st)
    # every file with lines in the damaged part is read again (a part may hold several small files)
    ok = (r.returncode == 1 and "error[F210]" in r.stderr and "Traceback" not in r.stderr and s.repaired_files >= 1
          and s.events == whole)
    return ok, (f"query: {r.stderr.splitlines()[0] if r.stderr else r.returncode}; re-ingest repaired "
                f"{s.repaired_files} file(s), {s.events:,} of {whole:,} events")


def case_append_other_run(tmp: Path) -> tuple[bool, str]:
    st = tmp / "st"
    cli("ingest", str(ROOT / "sample_logs/hang"), "-o", str(st))
    r = cli("ingest", str(ROOT / "sample_logs/healthy"), "-o", str(st), "--append")
    return r.returncode == 1 and "error[F212]" in r.stderr, r.stderr.splitlines()[0] if r.stderr else f"exit {r.returncode}"


CASES = {k[5:]: v for k, v in globals().items() if k.startswith("case_")}


def child(name: str, tmp: str) -> None:
    import resource

    out = CASES[name](Path(tmp))
    # peak RSS of this process and of the biggest process it waited for (CLI runs), in MiB
    rss = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
    print(json.dumps(None if out is None else {"held": out[0], "note": out[1], "rss": rss}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="")
    ap.add_argument("--case", help=argparse.SUPPRESS)
    ap.add_argument("--tmp", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.case:
        child(args.case, args.tmp)
        return 0
    rows, broke = [], 0
    for name in CASES:
        if args.only not in name:
            continue
        tmp = Path(tempfile.mkdtemp(prefix=f"rel-{name}-"))
        t0 = time.perf_counter()
        p = subprocess.Popen([sys.executable, __file__, "--case", name, "--tmp", str(tmp)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env={**os.environ, "FORENSICS_CACHE": str(tmp / "cache")})
        try:
            stdout, stderr = p.communicate(timeout=900)
        except subprocess.TimeoutExpired:
            p.kill()
            stdout, stderr = p.communicate()
        wall = time.perf_counter() - t0
        try:
            res = json.loads(stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            res = {"held": False, "note": (stderr.strip().splitlines() or ["no output"])[-1][:100], "rss": float("nan")}
        rss = res["rss"] if res else float("nan")
        state = "skipped" if res is None else ("held" if res["held"] else "BROKE")
        broke += state == "BROKE"
        rows.append((name, state, wall, rss, "" if res is None else res["note"]))
        print(f"{name:28} {state:7} {wall:7.1f} s {rss:8.0f} MiB  {rows[-1][4]}", flush=True)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n{len(rows)} case(s), {broke} broke")
    return 1 if broke else 0


if __name__ == "__main__":
    raise SystemExit(main())
