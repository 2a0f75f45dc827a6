"""Scale with ranks (issue 11): one table per run size, forensics and DuckDB side by side.

    python bench/scale.py                          # 64 and 1,024 ranks, 3 repetitions
    python bench/scale.py --ranks 4096,10240 --reps 3
    python bench/scale.py --ranks 64 --cluster     # also ingest on a LocalCluster (2 worker processes)

Sizes (ranks x steps per rank, 8 ranks per host): 64 x 28,750 (1.69 GB, 7.7 M events: about the
issue's 64-rank run), 1,024 x 240, 4,096 x 120 and 10,240 x 100 (the issue's targets); --steps overrides. The
logs come from bench/_gen.py's `generate` (seeded: the same bytes every time) and are kept under
--data for later runs.

Every figure (wall and CPU seconds: the steadier one on a shared machine) is measured in a fresh
process, the median of --reps runs, the tools interleaved so that machine noise hits them alike:
  ingest      MB/s and peak RSS (summed over the process tree, sampled every 20 ms, as
              bench/ingest.py does): `forensics.ingest` vs DuckDB read_json -> Parquet (zstd);
              with --cluster also forensics on a LocalCluster (processes; its workers' memory
              counted; the seconds to start the cluster shown apart)
  diagnose    `forensics diagnose STORE --format json`: seconds and peak RSS
  ranks       `forensics ranks STORE --format json` vs DuckDB computing the same per-rank answer
              over the store's Parquet parts (bench/queries.py's "ranks (same answer)" query, run
              by a process that imports only duckdb). The answers are checked equal with
              bench/queries.py's same_answer: forensics' rank table (what `ranks` prints) and
              DuckDB's agree on every shared column after DuckDB's figures are rounded as
              forensics rounds them
  last-10s    `forensics last-10s STORE --format json`: seconds and peak RSS
The machine may be shared: say so with any figure quoted. Needs: pip install -e '.[bench,dask]'.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _gen  # noqa: E402
import _measure as M  # noqa: E402
import ingest as I  # noqa: E402  (bench/ingest.py: the DuckDB script and the process-tree measure)
import queries as Q  # noqa: E402

STEPS = {64: 28_750, 1024: 240, 4096: 120, 10240: 100}
RANKS_PER_HOST = 8

# bench/ingest.py's DuckDB ingest, reading the per-host folders _gen.py writes
DUCKDB = I.with_glob(I.DUCKDB, "**/*.jsonl")
assert DUCKDB != I.DUCKDB

# forensics on a LocalCluster of this machine; the cluster's start and the ingest timed apart
DASK = r"""
import json, os, sys, time
os.environ["DASK_LOGGING__DISTRIBUTED"] = "error"   # quiet workers: stderr is a pipe read at the end
if __name__ == "__main__":
    from dask.distributed import Client, LocalCluster
    import forensics
    t0 = time.perf_counter()
    with LocalCluster(processes=True, n_workers=WORKERS, threads_per_worker=1, dashboard_address=":0") as c, Client(c) as cl:
        t1 = time.perf_counter()
        s = forensics.ingest([sys.argv[1]], sys.argv[2] + "/store", dask=cl)
        t2 = time.perf_counter()
    open(sys.argv[2] + "/seconds.json", "w").write(json.dumps({"start": t1 - t0, "ingest": t2 - t1}))
"""
DASK_CHECK = I.FORENSICS_CHECK + r"""
print(open(sys.argv[2] + "/seconds.json").read())
"""

# DuckDB's per-rank answer in a process of its own: argv = the view, the query, a file for the rows
DUCK_RANKS = r"""
import sys, duckdb
con = duckdb.connect()
con.execute("SET enable_progress_bar = false")   # it would print to stdout
con.execute(open(sys.argv[1]).read())
n = con.sql(open(sys.argv[2]).read()).to_arrow_table().num_rows
print(n)
"""


def duck_sql(store: Path, name: str) -> list[str]:
    """Every statement bench/queries.py runs for its DuckDB query `name`, the view first
    (captured, so a benchmark times exactly that query, not a copy of it)."""
    said: list[str] = []

    class Con:
        def execute(self, q: str) -> None:
            said.append(q)

        def sql(self, q: str) -> Any:
            said.append(q)
            return types.SimpleNamespace(to_arrow_table=lambda: None)

    real = Q.duckdb
    Q.duckdb = types.SimpleNamespace(connect=Con)  # type: ignore[assignment]
    try:
        Q.duck_queries(store, 0)[name]()
    finally:
        Q.duckdb = real
    return said


def duck_ranks_sql(store: Path) -> tuple[str, str]:
    """The view and the query bench/queries.py runs for "ranks (same answer)"."""
    said = duck_sql(store, "ranks (same answer)")
    return said[0], said[-1]


def logs_for(data: Path, ranks: int, steps: int) -> Path:
    logs = data / f"r{ranks}x{steps}" / "logs"
    truth = logs.with_name(logs.name + ".truth.json")
    if not truth.exists():  # written last by generate: its presence means the logs are whole
        shutil.rmtree(logs, ignore_errors=True)
        print(f"generating {ranks} ranks x {steps} steps in {logs} ...", file=sys.stderr, flush=True)
        _gen.generate(logs, ranks=ranks, hosts=max(1, ranks // RANKS_PER_HOST), steps=steps)
    return logs


def tree_measure(code: str, check: str, src: Path, scratch: Path) -> dict[str, Any]:
    out = Path(tempfile.mkdtemp(prefix="m-", dir=scratch))
    try:
        return I.measure(code, src, out, check)
    finally:
        shutil.rmtree(out, ignore_errors=True)
        Path(f"{out}.py").unlink(missing_ok=True)


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def run_size(ranks: int, steps: int, a: argparse.Namespace) -> dict[str, Any]:
    data = Path(a.data)
    logs = logs_for(data, ranks, steps)
    size = sum(p.stat().st_size for p in logs.rglob("*.jsonl"))
    scratch = data / "scratch"
    scratch.mkdir(exist_ok=True)
    tools = {"forensics": (I.FORENSICS, I.FORENSICS_CHECK), "duckdb": (DUCKDB, I.DUCKDB_CHECK)}
    if a.cluster:
        tools["dask"] = (DASK.replace("WORKERS", str(a.workers)), DASK_CHECK)
    ing: dict[str, list[dict[str, Any]]] = {t: [] for t in tools}
    for rep in range(a.reps):
        for t, (code, check) in tools.items():
            r = tree_measure(code, check, logs, scratch)
            ing[t].append(r)
            print(f"  {ranks} ranks rep {rep + 1} ingest {t:9s} {r['wall']:7.2f} s  cpu {r['cpu']:7.1f} s  "
                  f"peak {r['rss_mib']:6.0f} MiB",
                  file=sys.stderr, flush=True)
    rows = {t: int(ing[t][0]["out"].split()[0]) for t in tools}
    # the store the post-mortem commands read (built once, untimed)
    store = data / f"r{ranks}x{steps}" / "store"
    if not (store / "manifest.json").exists():
        M.cli(["ingest", str(logs), "-o", str(store)])
    view, query = duck_ranks_sql(store)
    (scratch / "view.sql").write_text(view)
    (scratch / "ranks.sql").write_text(query)
    post: dict[str, list[M.Run]] = {k: [] for k in ("diagnose", "ranks", "duck ranks", "last-10s")}
    for rep in range(a.reps):
        post["diagnose"].append(M.cli(["diagnose", str(store), "--format", "json"])[0])
        post["ranks"].append(M.cli(["ranks", str(store), "--format", "json"])[0])
        run, out = M.command([sys.executable, "-c", DUCK_RANKS, str(scratch / "view.sql"), str(scratch / "ranks.sql")])
        post["duck ranks"].append(run)
        post["last-10s"].append(M.cli(["last-10s", str(store), "--format", "json"])[0])
        print(f"  {ranks} ranks rep {rep + 1} diagnose {post['diagnose'][-1].wall:.2f} s, ranks "
              f"{post['ranks'][-1].wall:.2f} s (duckdb {run.wall:.2f} s, {int(out.split()[0])} rows), last-10s "
              f"{post['last-10s'][-1].wall:.2f} s", file=sys.stderr, flush=True)
    same = Q.same_answer(store)
    fig = {t: {"mb_per_s": size / 1e6 / med([r["wall"] for r in ing[t]]), "wall": med([r["wall"] for r in ing[t]]),
               "cpu": med([r["cpu"] for r in ing[t]]), "rss_mib": med([r["rss_mib"] for r in ing[t]]),
               "rows": rows[t]} for t in tools}
    if a.cluster:
        secs = [json.loads(r["out"].splitlines()[-1]) for r in ing["dask"]]
        fig["dask"]["start_s"] = med([s["start"] for s in secs])
        fig["dask"]["ingest_s"] = med([s["ingest"] for s in secs])
    for k, runs in post.items():
        f = M.Figures(runs)
        fig[k] = {"wall": f.wall, "cpu": f.cpu, "rss_mb": statistics.median(r.rss_mb for r in runs if r.rss_mb is not None)}
    fig["ranks_same_answer"] = same
    return {"ranks": ranks, "steps": steps, "bytes": size, "events": rows["forensics"], "figures": fig}


def table(r: dict[str, Any], reps: int) -> str:
    f = r["figures"]
    fo, du = f["forensics"], f["duckdb"]
    lines = [f"{r['ranks']:,} ranks x {r['steps']:,} steps: {r['bytes'] / 1e6:,.0f} MB of logs, {r['events']:,} events "
             f"(DuckDB rows {du['rows']:,}); medians of {reps}; {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}",
             f"{'':28s} {'forensics':>12s} {'DuckDB':>12s} {'ratio':>7s}"]

    def row(name: str, a: float, b: float | None, fmt: str, better: str = "") -> None:
        rb = f"{b:{fmt}}" if b is not None else "-"
        ratio = f"{a / b:.2f}x" if b else ""
        lines.append(f"{name:28s} {a:>12{fmt}} {rb:>12s} {ratio:>7s}{better}")

    row("ingest MB/s", fo["mb_per_s"], du["mb_per_s"], ",.1f", "  (goal >= 1.2x)")
    row("ingest CPU s", fo["cpu"], du["cpu"], ",.1f")
    row("ingest peak RSS MiB", fo["rss_mib"], du["rss_mib"], ",.0f", "  (goal <= 0.5x)")
    row("diagnose s", f["diagnose"]["wall"], None, ",.2f")
    row("diagnose CPU s", f["diagnose"]["cpu"], None, ",.2f")
    row("diagnose peak RSS MB", f["diagnose"]["rss_mb"], None, ",.0f")
    row("ranks s", f["ranks"]["wall"], f["duck ranks"]["wall"], ",.2f", "  (goal <= 1.2x)")
    row("ranks CPU s", f["ranks"]["cpu"], f["duck ranks"]["cpu"], ",.2f")
    row("ranks peak RSS MB", f["ranks"]["rss_mb"], f["duck ranks"]["rss_mb"], ",.0f")
    lines.append(f"{'ranks: same answer':28s} {'yes' if f['ranks_same_answer'] else 'NO':>12s}")
    row("last-10s s", f["last-10s"]["wall"], None, ",.2f")
    row("last-10s CPU s", f["last-10s"]["cpu"], None, ",.2f")
    row("last-10s peak RSS MB", f["last-10s"]["rss_mb"], None, ",.0f")
    if "dask" in f:
        d = f["dask"]
        lines.append(f"{'':28s} {'local':>12s} {'LocalCluster':>12s}")
        lines.append(f"{'ingest s (process)':28s} {fo['wall']:>12.2f} {d['wall']:>12.2f}")
        lines.append(f"{'ingest CPU s (all processes)':28s} {fo['cpu']:>12.1f} {d['cpu']:>12.1f}")
        lines.append(f"{'  of it: cluster start s':28s} {'':>12s} {d['start_s']:>12.2f}")
        lines.append(f"{'  of it: ingest call s':28s} {'':>12s} {d['ingest_s']:>12.2f}")
        lines.append(f"{'MB/s (cluster: ingest call)':28s} {fo['mb_per_s']:>12.1f} {r['bytes'] / 1e6 / d['ingest_s']:>12.1f}")
        lines.append(f"{'peak RSS MiB (all processes)':28s} {fo['rss_mib']:>12.0f} {d['rss_mib']:>12.0f}")
        lines.append(f"{'events':28s} {fo['rows']:>12,} {d['rows']:>12,}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", default="64,1024", help="comma-separated sizes among " + ",".join(map(str, STEPS)))
    ap.add_argument("--steps", type=int, help="steps per rank for every size (default: per size, above)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cluster", action="store_true", help="also ingest on a LocalCluster of worker processes")
    ap.add_argument("--workers", type=int, default=2, help="with --cluster: worker processes (1 thread each)")
    ap.add_argument("--data", default=str(Path(tempfile.gettempdir()) / "forensics-scale"),
                    help="where the generated logs and stores are kept")
    a = ap.parse_args()
    sizes = [int(x) for x in a.ranks.split(",")]
    for n in sizes:
        if n not in STEPS and a.steps is None:
            ap.error(f"--ranks {n}: not one of {', '.join(map(str, STEPS))} (or give --steps)")
    Path(a.data).mkdir(parents=True, exist_ok=True)
    results = []
    for n in sizes:
        r = run_size(n, a.steps or STEPS[n], a)
        results.append(r)
        print(table(r, a.reps) + "\n", flush=True)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
