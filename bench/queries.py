"""Post-mortem query speed: forensics (library) vs DuckDB on the same Parquet store.

    python bench/queries.py                       # generate ~2 GB of logs (64 ranks), ingest, time
    python bench/queries.py --store PATH          # reuse a store written by `forensics ingest`
    python bench/queries.py --reps 7 --rank 12 --cli

The questions of issue 3, each asked both ways:
  events --rank N   one rank's events in time order, all columns materialized
  last-10s          the stop (first ERROR, else the last event), each rank's events in the 10 s
                    before it, each rank's last event and step (DuckDB: the same SQL question,
                    without forensics' fatal-ERROR logic; forensics' snapshot leaves out the
                    verbatim `extra`/`fields` JSON)
  ranks             per rank: counts, first/last time, medians of step/data/comm/wait over steps,
                    GPU util median, max temperature, WARN/ERROR counts
  timeline          the last 20 steps: per (rank, step) phases and the arrival order
Printed: median wall seconds over --reps runs (after one warm-up), and forensics/DuckDB.
With --cli, also the wall time of the real command (a new Python process, import included).
The machine may be shared and noisy: read medians and ratios, not single runs. Needs duckdb.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import duckdb
import polars as pl

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from forensics import timeline as tl  # noqa: E402
from forensics.query import filter_events  # noqa: E402
from forensics.store import open_store  # noqa: E402


def bench_store(gb: float, ranks: int) -> Path:
    """bench/out/queries-<gb>gb-r<ranks>/store, generated and ingested once."""
    import _gen

    import forensics

    base = HERE / "out" / f"queries-{gb:g}gb-r{ranks}"
    store = base / "store"
    if (store / "manifest.json").is_file():
        return store
    logs = base / "logs"
    if not logs.is_dir():
        t = time.perf_counter()
        truth = _gen.generate(logs, ranks=ranks, gb=gb)
        print(f"generated {truth['bytes'] / 1e9:.2f} GB in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    t = time.perf_counter()
    s = forensics.ingest([str(logs)], store)
    print(f"ingested {s.events:,} events in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    return store


def timed(fn: Callable[[], object], reps: int) -> float:
    fn()  # warm-up: file cache, imports, polars/duckdb thread pools
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def duck_queries(store: Path, rank: int) -> dict[str, Callable[[], object]]:
    con = duckdb.connect()
    con.execute(f"CREATE VIEW ev AS SELECT * FROM read_parquet('{store}/events/*.parquet')")
    last10 = """
        WITH stop AS (SELECT coalesce((SELECT min(timestamp) FROM ev WHERE level = 'ERROR'),
                                      (SELECT max(timestamp) FROM ev)) AS t)
        SELECT * FROM ev, stop WHERE ev.timestamp BETWEEN stop.t - INTERVAL 10 SECOND AND stop.t
        ORDER BY timestamp, rank, line
    """
    last_per_rank = """
        WITH stop AS (SELECT coalesce((SELECT min(timestamp) FROM ev WHERE level = 'ERROR'),
                                      (SELECT max(timestamp) FROM ev)) AS t)
        SELECT rank, max(timestamp) AS last_ts, arg_max(event, timestamp) AS last_event,
               arg_max(message, timestamp) AS last_message, max(step) AS step
        FROM ev, stop WHERE ev.timestamp <= stop.t GROUP BY rank
    """
    steps = """
        SELECT rank, step,
               max(CASE WHEN event = 'TRAIN_STEP' THEN step_time_ms END) AS step_ms,
               sum(CASE WHEN event <> 'TRAIN_STEP' THEN data_load_ms END) AS data_ms,
               sum(CASE WHEN event <> 'TRAIN_STEP' THEN comm_ms END) AS comm_ms,
               sum(CASE WHEN event <> 'TRAIN_STEP' THEN wait_ms END) AS wait_ms,
               min(grad_ready_ts) AS ready, max(timestamp) AS t_end
        FROM ev WHERE step IS NOT NULL AND rank IS NOT NULL {where} GROUP BY rank, step
    """
    ranks_sql = f"""
        WITH s AS ({steps.format(where='')}),
        per_step AS (SELECT rank, median(step_ms) AS step_ms, median(data_ms) AS data_ms, median(comm_ms) AS comm_ms,
                            median(comm_ms / step_ms) AS comm_share, median(wait_ms) AS wait_ms FROM s GROUP BY rank),
        per_event AS (SELECT rank, any_value(host) AS host, min(timestamp) AS first_ts, max(timestamp) AS last_ts,
                             max(step) AS last_step, count(*) AS events, median(gpu_util) AS gpu_util,
                             max(temp_c) AS temp_max, count(*) FILTER (WHERE level = 'WARN') AS warn,
                             count(*) FILTER (WHERE level = 'ERROR') AS error FROM ev GROUP BY rank)
        SELECT * FROM per_event LEFT JOIN per_step USING (rank) ORDER BY rank
    """
    timeline_sql = f"""
        WITH top AS (SELECT max(step) AS m FROM ev),
        s AS ({steps.format(where='AND step > (SELECT m FROM top) - 20')})
        SELECT *, (ready - min(ready) OVER (PARTITION BY step)) * 1000 AS arrival_ms,
               rank() OVER (PARTITION BY step ORDER BY ready) AS "order"
        FROM s ORDER BY step, rank
    """
    return {
        "events --rank N": lambda: con.sql(
            f"SELECT * FROM ev WHERE rank = {rank} ORDER BY timestamp, line").to_arrow_table(),
        "last-10s": lambda: (con.sql(last10).to_arrow_table(), con.sql(last_per_rank).to_arrow_table()),
        "last-10s --rank N": lambda: con.sql(last_per_rank.replace("GROUP BY rank", f"AND rank = {rank} GROUP BY rank")
                                                 ).to_arrow_table(),
        "ranks": lambda: con.sql(ranks_sql).to_arrow_table(),
        "timeline": lambda: con.sql(timeline_sql).to_arrow_table(),
    }


def forensics_queries(store: Path, rank: int) -> dict[str, Callable[[], object]]:
    run = open_store(store)
    return {
        "events --rank N": lambda: filter_events(run, ranks=[rank]).collect(),
        "last-10s": lambda: tl.last_window(run),
        "last-10s --rank N": lambda: tl.last_window(run, ranks=[rank]),
        "ranks": lambda: tl.rank_summary(run),
        "timeline": lambda: tl.build_timeline(run),
    }


CLI = {
    "events --rank N": ["events", "{store}", "--rank", "{rank}", "--format", "jsonl"],
    "last-10s": ["last-10s", "{store}", "--format", "json"],
    "last-10s --rank N": ["last-10s", "{store}", "--rank", "{rank}", "--format", "json"],
    "ranks": ["ranks", "{store}", "--format", "json"],
    "timeline": ["timeline", "{store}", "--format", "json"],
}


def cli_time(args: list[str], reps: int) -> float:
    def go() -> None:
        subprocess.run([sys.executable, "-m", "forensics", *args], check=True, stdout=subprocess.DEVNULL)
    return timed(go, reps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", help="an existing store (default: generate bench/out/queries-*/store)")
    ap.add_argument("--gb", type=float, default=2.0, help="size of the generated logs")
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--rank", type=int, default=12, help="the rank for the per-rank queries")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--cli", action="store_true", help="also time the CLI commands (new process each run)")
    a = ap.parse_args()
    store = Path(a.store) if a.store else bench_store(a.gb, a.ranks)
    run = open_store(store)
    parts = sorted((store / "events").glob("*.parquet"))
    size = sum(p.stat().st_size for p in parts)
    n = run.events().select(pl.len()).collect().item()
    print(f"store {store}: {n:,} events, {len(run.manifest['totals'].get('ranks', []))} ranks, "
          f"{len(parts)} parts, {size / 1e6:.0f} MB Parquet "
          f"(from {sum(s['size'] for s in run.sources) / 1e9:.2f} GB of logs); {os.cpu_count()} cores; "
          f"load average {os.getloadavg()[0]:.1f}")
    fq, dq = forensics_queries(store, a.rank), duck_queries(store, a.rank)
    head = f"{'query':<20} {'forensics s':>12} {'duckdb s':>10} {'ratio':>7}" + (f" {'CLI s':>8}" if a.cli else "")
    print(head)
    print("-" * len(head))
    for name in fq:
        f = timed(fq[name], a.reps)
        d = timed(dq[name], a.reps)
        line = f"{name:<20} {f:>12.3f} {d:>10.3f} {f / d:>7.2f}"
        if a.cli:
            args = [x.format(store=store, rank=a.rank) for x in CLI[name]]
            line += f" {cli_time(args, max(1, a.reps // 2)):>8.2f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
