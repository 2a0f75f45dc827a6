"""Time to the first report (issue 29): from logs on disk to a root-cause report, against DuckDB's
bare read_json -> Parquet of the same logs, same run, medians of --reps.

    python bench/first_report.py                         # the three shapes, 3 repetitions
    python bench/first_report.py --shapes r32 --reps 5   # one shape
    python bench/first_report.py --shapes r4096,r64 --data /tmp/fr-bench
    python bench/first_report.py --store STORE          # only the questions on an existing store

Shapes (logs generated once, seeded, kept under --data):
  r32    32 ranks, one file per rank, seed schema, ~225 MB (bench/_data.py: 5,500 steps a rank)
  r4096  4,096 one-rank files in per-host folders, ~454 MB (bench/_gen.py, 120 steps a rank)
  r64    64 ranks x 28,750 steps, 1.69 GB (bench/_gen.py, bench/scale.py's largest per-rank run)

Every figure is a whole process, as a user runs it (imports and start-up included), the tools
interleaved within each repetition so machine noise hits them alike:
  duckdb      `read_json(...) -> COPY TO parquet (zstd)`: the bare conversion, no analysis
  ingest      `forensics ingest LOGS -o STORE` (summaries included)
  diagnose    `forensics diagnose STORE --format json` on that store
  first       ingest + diagnose: what a user waits for before the first report
  one-shot    `forensics diagnose LOGS --format json` (ingest into the cache and diagnose, one process)
and on the store, each against a process that imports only duckdb and runs the same question:
  ranks       `forensics ranks STORE --format json` vs bench/queries.py's "ranks (same answer)"
  last-10s    `forensics last-10s STORE --format json` vs its "last-10s" queries
  diagnose    vs a per-(rank, step) aggregation of every event (bench/queries.py's step table)
Printed: median wall s, CPU s (user + sys of the process and its children: the steadier figure
on a shared machine) and peak RSS, with ratios to DuckDB's. The machine is shared and has 2
cores: quote medians and ratios, with the load printed beside them. The forensics package is
byte-compiled first: with PYTHONDONTWRITEBYTECODE set, each forensics process would compile its
modules from source, which DuckDB's installed package never pays. Needs: pip install -e '.[bench]'.
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _data  # noqa: E402
import _measure as M  # noqa: E402
import ingest as I  # noqa: E402
import queries as Q  # noqa: E402
import scale as S  # noqa: E402

# the bare conversion: every *.jsonl under the folder (flat or per host), one Parquet file
DUCKDB = I.with_glob(I.DUCKDB, "**/*.jsonl")

# a process that imports only duckdb and runs the given SQL files over the store's parts
DUCK_SQL = r"""
import sys, duckdb
con = duckdb.connect()
con.execute("SET enable_progress_bar = false")
con.execute(open(sys.argv[1]).read())
print(sum(con.sql(open(q).read()).to_arrow_table().num_rows for q in sys.argv[2:]))
"""


def logs_for(shape: str, data: Path) -> Path:
    if shape == "r32":
        return _data.dataset(data, ranks=32, steps=5500)
    if shape == "r4096":
        return S.logs_for(data, 4096, S.STEPS[4096])
    if shape == "r64":
        return S.logs_for(data, 64, S.STEPS[64])
    raise SystemExit(f"unknown shape {shape!r}: r32, r4096 or r64")


def duck_sql(store: Path, name: str) -> list[str]:
    """The view and the queries bench/queries.py runs for `name` (bench/scale.py captures them)."""
    said = S.duck_sql(store, name)
    return said[:1] + said[-2:] if name == "last-10s" else said[:1] + said[-1:]


STEP_AGG = """
SELECT rank, step, count(*) AS events, min(timestamp) AS t0, max(timestamp) AS t1,
       max(step_time_ms) AS step_ms, sum(data_load_ms) AS data_ms, sum(comm_ms) AS comm_ms,
       sum(wait_ms) AS wait_ms, max(temp_c) AS temp_max, count(*) FILTER (WHERE level = 'ERROR') AS errors
FROM ev GROUP BY rank, step
"""


def cli(args: list[str], cache: Path | None = None) -> M.Run:
    env = dict(os.environ)
    if cache is not None:
        env["FORENSICS_CACHE"] = str(cache)
    return M.command([sys.executable, "-m", "forensics", *args], env=env)[0]


def run_shape(shape: str, a: argparse.Namespace) -> dict[str, Any]:
    data = Path(a.data)
    logs = logs_for(shape, data)
    size = sum(p.stat().st_size for p in logs.rglob("*.jsonl"))
    scratch = Path(tempfile.mkdtemp(prefix="fr-", dir=data))
    runs: dict[str, list[M.Run]] = {k: [] for k in ("duckdb", "ingest", "diagnose", "first", "one-shot")}
    store = scratch / "store"
    try:
        (scratch / "duck.py").write_text(DUCKDB)
        for rep in range(a.reps):
            out = scratch / "duck"
            out.mkdir()
            runs["duckdb"].append(M.command([sys.executable, str(scratch / "duck.py"), str(logs), str(out)])[0])
            shutil.rmtree(out)
            shutil.rmtree(store, ignore_errors=True)
            ing = cli(["ingest", str(logs), "-o", str(store)])
            dia = cli(["diagnose", str(store), "--format", "json"])
            runs["ingest"].append(ing)
            runs["diagnose"].append(dia)
            runs["first"].append(M.Run(ing.wall + dia.wall, ing.cpu + dia.cpu, max(ing.rss_mb or 0, dia.rss_mb or 0)))
            cache = scratch / f"cache{rep}"
            runs["one-shot"].append(cli(["diagnose", str(logs), "--format", "json"], cache=cache))
            shutil.rmtree(cache, ignore_errors=True)
            print(f"  {shape} rep {rep + 1}: duckdb {runs['duckdb'][-1].wall:.2f} s, ingest {ing.wall:.2f} s + diagnose "
                  f"{dia.wall:.2f} s, one-shot {runs['one-shot'][-1].wall:.2f} s", file=sys.stderr, flush=True)
        post = post_mortem(store, scratch, a.reps)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    fig = {k: fig_of(v) for k, v in {**runs, **post}.items()}
    return {"shape": shape, "bytes": size, "files": sum(1 for _ in logs.rglob("*.jsonl")), "figures": fig}


def post_mortem(store: Path, scratch: Path, reps: int) -> dict[str, list[M.Run]]:
    """`ranks`, `last-10s` and `diagnose` on the store as processes, each against a process
    running DuckDB's same question (interleaved, `reps` times)."""
    sqls = {"ranks": duck_sql(store, "ranks (same answer)"), "last-10s": duck_sql(store, "last-10s"),
            "diagnose": duck_sql(store, "ranks")[:1] + [STEP_AGG]}
    files: dict[str, list[str]] = {}
    for k, qs in sqls.items():
        files[k] = []
        for i, q in enumerate(qs):
            f = scratch / f"{k}-{i}.sql"
            f.write_text(q)
            files[k].append(str(f))
    post: dict[str, list[M.Run]] = {}
    for _ in range(reps):
        for k, argv in (("ranks", ["ranks", str(store), "--format", "json"]),
                        ("last-10s", ["last-10s", str(store), "--format", "json"]),
                        ("diagnose", ["diagnose", str(store), "--format", "json"])):
            post.setdefault(k, []).append(cli(argv))
            post.setdefault("duck " + k, []).append(M.command([sys.executable, "-c", DUCK_SQL, *files[k]])[0])
    return post


def fig_of(runs: list[M.Run]) -> dict[str, float]:
    f = M.Figures(runs)
    return {"wall": f.wall, "cpu": f.cpu, "rss_mb": statistics.median(r.rss_mb or 0 for r in runs)}


def table(r: dict[str, Any], reps: int) -> str:
    f = r["figures"]
    du = f["duckdb"]
    lines = [f"{r['shape']}: {r['files']:,} files, {r['bytes'] / 1e6:,.0f} MB; medians of {reps}; "
             f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}",
             f"{'':34s} {'wall s':>8s} {'CPU s':>8s} {'peak MB':>8s} {'wall/DuckDB':>12s} {'MB/DuckDB':>10s}"]
    for k, label in (("duckdb", "DuckDB read_json -> Parquet"), ("ingest", "forensics ingest"),
                     ("diagnose", "forensics diagnose STORE"), ("first", "= first report (ingest + diagnose)"),
                     ("one-shot", "forensics diagnose LOGS (one shot)")):
        x = f[k]
        lines.append(f"{label:34s} {x['wall']:>8.2f} {x['cpu']:>8.2f} {x['rss_mb']:>8.0f} "
                     f"{x['wall'] / du['wall']:>11.2f}x {x['rss_mb'] / du['rss_mb']:>9.2f}x")
    lines.append(f"{'ingest MB/s vs DuckDB':34s} {r['bytes'] / 1e6 / f['ingest']['wall']:>8.1f} "
                 f"{r['bytes'] / 1e6 / du['wall']:>8.1f} {'':>8s} {du['wall'] / f['ingest']['wall']:>11.2f}x")
    return "\n".join(lines + post_table(f))


def post_table(f: dict[str, dict[str, float]]) -> list[str]:
    lines = [f"{'on the store, as processes':34s} {'ours s':>8s} {'DuckDB s':>8s} {'ratio':>8s} "
             f"{'ours CPU':>9s} {'Duck CPU':>9s} {'ratio':>8s} {'ours MB':>8s} {'Duck MB':>8s}"]
    for k in ("ranks", "last-10s", "diagnose"):
        a, b = f[k], f["duck " + k]
        lines.append(f"{k:34s} {a['wall']:>8.2f} {b['wall']:>8.2f} {a['wall'] / b['wall']:>7.2f}x "
                     f"{a['cpu']:>9.2f} {b['cpu']:>9.2f} {a['cpu'] / b['cpu']:>7.2f}x "
                     f"{a['rss_mb']:>8.0f} {b['rss_mb']:>8.0f}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="r32,r4096,r64", help="comma-separated: r32, r4096, r64")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--data", default=str(Path(tempfile.gettempdir()) / "forensics-first-report"),
                    help="where the generated logs are kept")
    ap.add_argument("--store", help="only the questions on the store, on this existing store (no ingest)")
    a = ap.parse_args()
    M.compile_tree()    # as M.cli does: the tree the commands import, byte-compiled first
    if a.store:
        scratch = Path(tempfile.mkdtemp(prefix="fr-"))
        try:
            post = post_mortem(Path(a.store), scratch, a.reps)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        fig = {k: fig_of(v) for k, v in post.items()}
        print("\n".join([f"{a.store}: medians of {a.reps}; {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}",
                         *post_table(fig)]), flush=True)
        print(json.dumps(fig))
        return
    Path(a.data).mkdir(parents=True, exist_ok=True)
    results = []
    for shape in a.shapes.split(","):
        r = run_shape(shape.strip(), a)
        results.append(r)
        print(table(r, a.reps) + "\n", flush=True)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
