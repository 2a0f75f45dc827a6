"""Ingest throughput and memory: forensics vs DuckDB vs plain polars on the same files, same run.

    python bench/ingest.py                 # 64 ranks, ~1 GB, 3 repetitions
    python bench/ingest.py --steps 3000 --reps 5 --ranks 64
    python bench/ingest.py --src /work/scale/r4096 --no-summaries     # any folder of *.jsonl (recursive)
    python bench/ingest.py --one-line 100000 --tools forensics,duckdb  # 100,000 one-line files
    python bench/ingest.py --tools forensics,duckdb --baseline OLD_TREE  # also an older checkout
    python bench/ingest.py --row mimalloc:ARROW_DEFAULT_MEMORY_POOL=mimalloc  # forensics again, other env

--src reads an existing folder (e.g. bench/_gen.py's 4,096 per-rank files in per-host folders);
--one-line N writes N one-line files (bench/_data.one_line_files, kept under --data): the costs
that grow with the number of files, not bytes. --no-summaries runs forensics with
FORENSICS_SUMMARIES=0 (the ingest path alone, without the summaries built after it).
--baseline DIR (a directory holding an older `forensics/` package, e.g. `git archive` of a commit
with the built scanner copied in) adds a row "baseline": that tree's ingest, interleaved with the
others, so a change is measured against the old code under the same load. --row NAME:K=V[,K=V]
(repeatable) adds a row NAME: this tree's forensics run with those environment variables (e.g.
pyarrow's allocator, FORENSICS_SUMMARIES=0), interleaved the same way.

Each tool runs in its own process (so its memory is its own), writing Parquet from the same
JSONL files; a separate, untimed process then counts the rows written and checks that a key seen
only on the last line of the last file survived. Printed per tool: median wall seconds, MB/s, CPU seconds (user+sys of the whole
process tree), peak RSS (sum over the process tree, sampled every 20 ms), and ratios against
DuckDB. The machine is shared and noisy: read the medians and ratios, not single runs.
Needs: pip install duckdb psutil.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _data  # noqa: E402

# Each tool: an ingest script (timed) and a check of its output (run afterwards, not timed: it is
# not part of ingesting, and the checks differ in cost -- ours reads the `extra` column back).
DUCKDB = r"""
import sys, duckdb
src, out = sys.argv[1], sys.argv[2]
con = duckdb.connect()
con.execute(f"COPY (SELECT * FROM read_json('{src}/GLOB', format='newline_delimited')) TO '{out}/events.parquet' (FORMAT parquet, COMPRESSION zstd)")
"""
DUCKDB_CHECK = r"""
import os, sys, duckdb
out = sys.argv[2]
con = duckdb.connect()
n = con.execute(f"SELECT count(*) FROM read_parquet('{out}/events.parquet')").fetchall()[0][0]
cols = str(con.execute(f"DESCRIBE SELECT * FROM read_parquet('{out}/events.parquet')").fetchall())
print(n, "rare-key:" + ("kept" if "watchdog_rare_key" in cols else "LOST") if os.environ.get("BENCH_RARE") != "0" else "")
"""

POLARS = r"""
import sys, polars as pl
src, out = sys.argv[1], sys.argv[2]
pl.scan_ndjson(f"{src}/GLOB").sink_parquet(f"{out}/events.parquet", compression="zstd")
"""
POLARS_CHECK = r"""
import os, sys, polars as pl
out = sys.argv[2]
lf = pl.scan_parquet(f"{out}/events.parquet")
print(lf.select(pl.len()).collect().item(), "rare-key:" + ("kept" if "watchdog_rare_key" in str(lf.collect_schema()) else "LOST") if os.environ.get("BENCH_RARE") != "0" else "")
"""

FORENSICS = r"""
import sys, json, forensics
if __name__ == "__main__":
    s = forensics.ingest([sys.argv[1]], sys.argv[2] + "/store")
    print(json.dumps({"events": s.events, "rejected": s.rejected}))
"""
FORENSICS_CHECK = r"""
import os, sys, forensics, polars as pl
from forensics.ingest import native
run = forensics.open_run(sys.argv[2] + "/store")
n = run.events().select(pl.len()).collect().item()
rare = run.events().filter(pl.col("extra").str.contains("watchdog_rare_key")).collect().height
print(n, "rare-key:" + ("kept" if rare == 1 else "LOST") if os.environ.get("BENCH_RARE") != "0" else "", "native:" + ("yes" if native.available() else "no"))
"""
CHECKS = {"forensics": FORENSICS_CHECK, "baseline": FORENSICS_CHECK, "duckdb": DUCKDB_CHECK, "polars": POLARS_CHECK}


def with_glob(code: str, pattern: str = "*.jsonl") -> str:
    """A tool's script reading `pattern` under the source folder."""
    return code.replace("GLOB", pattern)


def measure(code: str, src: Path, out: Path, check: str, env: dict[str, str] | None = None) -> dict[str, float | str]:
    script = out.parent / f"{out.name}.py"
    script.write_text(code)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, str(script), str(src), str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, **(env or {})})
    proc = psutil.Process(p.pid)
    peak = 0
    while p.poll() is None:
        try:
            rss = proc.memory_info().rss + sum(c.memory_info().rss for c in proc.children(recursive=True))
            peak = max(peak, rss)
        except psutil.Error:
            pass
        time.sleep(0.02)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    stdout, stderr = p.communicate()
    if p.returncode:
        raise SystemExit(f"{out.name} failed:\n{stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    check_script = out.parent / f"{out.name}-check.py"
    check_script.write_text(check)
    c = subprocess.run([sys.executable, str(check_script), str(src), str(out)], capture_output=True, text=True)
    check_script.unlink()
    if c.returncode:
        raise SystemExit(f"{out.name} check failed:\n{c.stderr[-2000:]}")
    return {"wall": wall, "cpu": cpu, "rss_mib": peak / 2**20, "out": c.stdout.strip()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--steps", type=int, default=12_300, help="per rank; 64 x 12300 is about 1 GB")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--data", default=str(Path(__file__).resolve().parent / "out"))
    ap.add_argument("--tools", default="forensics,duckdb,polars")
    ap.add_argument("--src", help="an existing folder of *.jsonl files (read recursively) instead of generated data")
    ap.add_argument("--one-line", type=int, metavar="N", help="N one-line files instead (written once under --data)")
    ap.add_argument("--no-summaries", action="store_true", help="forensics with FORENSICS_SUMMARIES=0")
    ap.add_argument("--baseline", metavar="DIR", help="a directory holding an older forensics/ package: a row of its own")
    ap.add_argument("--row", action="append", default=[], metavar="NAME:K=V[,K=V]",
                    help="a row NAME: forensics run with these environment variables (repeatable)")
    args = ap.parse_args()

    if args.src or args.one_line:
        src = Path(args.src) if args.src else _data.one_line_files(Path(args.data), args.one_line)
        files = list(src.rglob("*.jsonl"))
        pattern = "**/*.jsonl"
        os.environ["BENCH_RARE"] = "0"   # the rare key is a line of the generated data set only
    else:
        src = _data.dataset(Path(args.data), args.ranks, args.steps)
        files = list(src.glob("*.jsonl"))
        pattern = "*.jsonl"
    size = sum(f.stat().st_size for f in files)
    print(f"data: {src}  {len(files):,} files, {size / 1e6:.0f} MB, cores: {os.cpu_count()}, load {os.getloadavg()[0]:.1f}")
    codes = {"forensics": FORENSICS, "baseline": FORENSICS, "duckdb": with_glob(DUCKDB, pattern),
             "polars": with_glob(POLARS, pattern)}
    envs = {"forensics": {"FORENSICS_SUMMARIES": "0"} if args.no_summaries else {}}
    tools = args.tools.split(",")
    if args.baseline:   # the older tree first on the path (its store is checked by this one)
        envs["baseline"] = {**envs["forensics"], "PYTHONPATH": str(Path(args.baseline).resolve())}
        tools.insert(tools.index("forensics") + 1 if "forensics" in tools else 0, "baseline")
    for row in args.row:
        name, _, assigns = row.partition(":")
        if not name or name in codes or "=" not in assigns:
            raise SystemExit(f"--row {row!r}: expected NAME:K=V[,K=V] with a new NAME")
        codes[name], CHECKS[name] = FORENSICS, FORENSICS_CHECK
        envs[name] = {**envs["forensics"], **dict(a.split("=", 1) for a in assigns.split(","))}
        tools.append(name)
    runs: dict[str, list[dict]] = {t: [] for t in tools}
    Path(args.data).mkdir(parents=True, exist_ok=True)   # --src leaves it unmade
    for rep in range(args.reps):
        for tool in tools:  # interleaved, so machine noise hits every tool alike
            tmp = Path(tempfile.mkdtemp(prefix=f"bench-{tool}-", dir=args.data))
            try:
                r = measure(codes[tool], src, tmp, CHECKS[tool], envs.get(tool))
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
                for f in Path(args.data).glob(f"{tmp.name}.py"):
                    f.unlink()
            runs[tool].append(r)
            print(f"  rep {rep + 1} {tool:9s} {r['wall']:6.2f} s  {size / 1e6 / r['wall']:6.1f} MB/s  "
                  f"cpu {r['cpu']:6.1f} s  peak {r['rss_mib']:6.0f} MiB  -> {r['out']}", flush=True)
    med = {t: {k: statistics.median(x[k] for x in runs[t]) for k in ("wall", "cpu", "rss_mib")} for t in tools}
    print(f"\nmedians over {args.reps} runs ({size / 1e6:.0f} MB):")
    print(f"{'tool':10s} {'MB/s':>8s} {'wall s':>8s} {'cpu s':>8s} {'peak MiB':>9s} {'MB/s vs duckdb':>15s} {'RSS vs duckdb':>14s}")
    for t in tools:
        m = med[t]
        mbs = size / 1e6 / m["wall"]
        rel = rel_rss = ""
        if "duckdb" in med:
            rel = f"{(size / 1e6 / m['wall']) / (size / 1e6 / med['duckdb']['wall']):.2f}x"
            rel_rss = f"{m['rss_mib'] / med['duckdb']['rss_mib']:.2f}x"
        print(f"{t:10s} {mbs:8.1f} {m['wall']:8.2f} {m['cpu']:8.1f} {m['rss_mib']:9.0f} {rel:>15s} {rel_rss:>14s}")
    print(json.dumps({"bytes": size, "medians": med}))


if __name__ == "__main__":
    main()
