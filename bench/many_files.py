"""Many tiny files: forensics ingest vs DuckDB read_json -> Parquet, side by side, same run.

    python bench/many_files.py                      # 100,000 one-line files, 3 runs each
    python bench/many_files.py --n 20000 --reps 1   # a quick check
    python bench/many_files.py --baseline OLD_TREE  # also an older checkout's ingest (a row of its own)

The files are bench/_data.one_line_files (one TRAIN_STEP line each, ~130 bytes, 1,000 to a
folder; written once under --data), plus --bad files of which every line is rejected (so the
per-source accounting of rejects is part of what is measured). Each tool runs in its own process:
forensics `ingest(SRC, STORE)` (summaries included) and DuckDB `COPY (SELECT * FROM
read_json('SRC/**/*.jsonl')) TO events.parquet`. Printed per run and as medians over --reps:
wall seconds, CPU seconds (user + sys of the process and its children, from wait4) and peak RSS
(the process's maximum resident set size, as `/usr/bin/time -v` reports it), and the ratios
to DuckDB. After the timed runs an untimed process checks the store: events and rejects
counted against the files written. The target (issue 29): 100,000 one-line files in
<= 30 CPU s and <= 500 MB.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _data  # noqa: E402
import _measure  # noqa: E402

FORENSICS = r"""
import sys, json, forensics
if __name__ == "__main__":
    s = forensics.ingest([sys.argv[1]], sys.argv[2] + "/store")
    print(json.dumps({"files": s.files, "events": s.events, "rejected": s.rejected}))
"""
DUCKDB = r"""
import sys, duckdb
src, out = sys.argv[1], sys.argv[2]
con = duckdb.connect()
con.execute(f"COPY (SELECT * FROM read_json('{src}/**/*.jsonl', format='newline_delimited', ignore_errors=true)) "
            f"TO '{out}/events.parquet' (FORMAT parquet, COMPRESSION zstd)")
print(con.execute(f"SELECT count(*) FROM read_parquet('{out}/events.parquet')").fetchall()[0][0])
"""
CHECK = r"""
import sys, json, forensics, polars as pl
run = forensics.open_run(sys.argv[1])
files = len(run.sources)
print(json.dumps({"files": files, "events": run.events().select(pl.len()).collect().item(),
                  "rejects": run.rejects().select(pl.len()).collect().item(),
                  "rejected_in_sources": sum(s["rejected"] for s in run.sources),
                  "lines_in_sources": sum(s["lines_read"] for s in run.sources)}))
"""


def bad_files(root: Path, n: int) -> list[Path]:
    """n files of one line each that is not JSON (each one reject), in a folder of their own."""
    d = root / "zz_bad"
    d.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        p = d / f"rank_{i:05d}_bad.jsonl"
        p.write_bytes(b'{"timestamp": "2025-06-12T14:00:00.000Z", "rank": 1, "event": \n')
        out.append(p)
    return out


def run_tool(code: str, src: Path, out: Path, env: dict[str, str] | None = None) -> tuple[_measure.Run, str]:
    script = out / "tool.py"
    script.write_text(code)
    r, stdout = _measure.command([sys.executable, str(script), str(src), str(out)], env={**os.environ, **(env or {})},
                                 cwd=str(Path(__file__).resolve().parent.parent), ok=(0,))
    return r, stdout.decode().strip().splitlines()[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000, help="one-line files (default 100,000)")
    ap.add_argument("--bad", type=int, default=100, help="files more, each a rejected line (default 100)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--data", default=str(Path(__file__).resolve().parent / "out"))
    ap.add_argument("--tools", default="forensics,duckdb")
    ap.add_argument("--baseline", metavar="DIR", help="a directory holding an older forensics/ package: a row of its own")
    args = ap.parse_args()

    src = _data.one_line_files(Path(args.data), args.n)
    for old in (src / "zz_bad").glob("*.jsonl") if (src / "zz_bad").is_dir() else ():
        old.unlink()
    bad_files(src, args.bad)
    files = list(src.rglob("*.jsonl"))
    size = sum(f.stat().st_size for f in files)
    print(f"data: {src}  {len(files):,} files ({args.n:,} one-line, {args.bad:,} rejected), {size / 1e6:.1f} MB, "
          f"cores: {os.cpu_count()}, load {os.getloadavg()[0]:.1f}")
    tools = args.tools.split(",")
    codes = {"forensics": FORENSICS, "duckdb": DUCKDB}
    # the tool scripts run from a scratch folder: the forensics package is this tree's (not whatever
    # an editable install points at), or the baseline's
    envs: dict[str, dict[str, str]] = {"forensics": {"PYTHONPATH": str(Path(__file__).resolve().parent.parent)}}
    if args.baseline:
        tools.insert(tools.index("forensics") + 1 if "forensics" in tools else 0, "baseline")
        codes["baseline"] = FORENSICS
        envs["baseline"] = {"PYTHONPATH": str(Path(args.baseline).resolve())}
    runs: dict[str, list[_measure.Run]] = {t: [] for t in tools}
    Path(args.data).mkdir(parents=True, exist_ok=True)
    for rep in range(args.reps):
        for tool in tools:   # interleaved: machine noise hits every tool alike
            tmp = Path(tempfile.mkdtemp(prefix=f"many-{tool}-", dir=args.data))
            try:
                env = envs.get(tool, {})
                r, said = run_tool(codes[tool], src, tmp, env)
                if tool != "duckdb" and rep == 0:   # the store holds what was written (untimed)
                    check = tmp / "check.py"
                    check.write_text(CHECK)
                    _, got = _measure.command([sys.executable, str(check), str(tmp / "store")],
                                              env={**os.environ, **env}, ok=(0,))
                    c = json.loads(got.decode().strip().splitlines()[-1])
                    ok = (c["files"] == len(files) and c["events"] == args.n and c["rejects"] == args.bad
                          and c["rejected_in_sources"] == args.bad and c["lines_in_sources"] == len(files))
                    said += f"  check: {c} {'ok' if ok else 'MISMATCH'}"
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            runs[tool].append(r)
            print(f"  rep {rep + 1} {tool:9s} wall {r.wall:6.2f} s  cpu {r.cpu:6.1f} s  peak {r.rss_mb:6.0f} MiB  -> {said}",
                  flush=True)
    med = {t: {"wall": statistics.median(r.wall for r in rs), "cpu": statistics.median(r.cpu for r in rs),
               "rss_mib": statistics.median(r.rss_mb for r in rs)} for t, rs in runs.items()}
    print(f"\nmedians over {args.reps} run(s), {len(files):,} files:")
    print(f"{'tool':10s} {'wall s':>8s} {'cpu s':>8s} {'peak MiB':>9s} {'cpu vs duckdb':>14s} {'RSS vs duckdb':>14s}")
    for t in tools:
        m = med[t]
        rel = rel_rss = ""
        if "duckdb" in med and t != "duckdb":
            rel = f"{m['cpu'] / med['duckdb']['cpu']:.2f}x"
            rel_rss = f"{m['rss_mib'] / med['duckdb']['rss_mib']:.2f}x"
        print(f"{t:10s} {m['wall']:8.2f} {m['cpu']:8.1f} {m['rss_mib']:9.0f} {rel:>14s} {rel_rss:>14s}")
    print(json.dumps({"files": len(files), "bytes": size, "medians": med}))


if __name__ == "__main__":
    main()
