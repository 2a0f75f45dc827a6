"""Post-mortem query speed: forensics (library) vs DuckDB on the same Parquet store.

    python bench/queries.py                       # generate ~2 GB of logs (64 ranks), ingest, time
    python bench/queries.py --store PATH          # reuse a store written by `forensics ingest`
    python bench/queries.py --reps 7 --rank 12 --cli
    python bench/queries.py --store PATH --cli --baseline OLD_TREE   # CLI figures before/after

The questions of issue 3, each asked both ways:
  events --rank N   one rank's events in time order, all columns materialized
  last-10s          the stop (first ERROR, else the last event), each rank's events in the 10 s
                    before it, each rank's last event and step (DuckDB: the same SQL question,
                    without forensics' fatal-ERROR logic; forensics' snapshot leaves out the
                    verbatim `extra`/`fields` JSON)
  ranks             per rank: counts, first/last time, medians of step/data/comm/wait over steps,
                    GPU util median, max temperature, WARN/ERROR counts. DuckDB's query is a
                    simpler one: phases summed over every event, step time only where logged.
  ranks (same answer)  DuckDB computing what `forensics ranks` computes: a step's phases from its
                    own events, else from its TRAIN_STEP; step time logged, else derived from
                    the previous step's end; compute = step - data - comm; checked equal.
  timeline          the last 20 steps: per (rank, step) phases and the arrival order
Printed: median wall and CPU seconds (user + sys, all threads of this process) over --reps runs
after one warm-up, and forensics/DuckDB (wall). With --cli, the real command in a new process
(imports included): median wall, CPU and the peak RSS; with --baseline, the same for an older
tree (a directory holding its `forensics/` package), runs interleaved. The machine may be shared
and noisy: read medians, CPU seconds and ratios, not single runs. Needs duckdb.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Callable

import duckdb
import polars as pl

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _measure as M  # noqa: E402

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
    def phase(c: str) -> str:
        # a step's own events (several collectives add up), else the copy on its TRAIN_STEP
        return (f"CASE WHEN count({c}) FILTER (WHERE NOT is_sum) > 0 THEN sum({c}) FILTER (WHERE NOT is_sum) "
                f"ELSE max({c}) FILTER (WHERE is_sum) END AS {c}")

    ranks_same_sql = f"""
        WITH e AS (SELECT rank, step, timestamp AS t, coalesce(event, '') = 'TRAIN_STEP' AS is_sum, step_time_ms,
                          data_load_ms, comm_ms, wait_ms, temp_c, level FROM ev),
        g AS (SELECT rank, step, min(t) AS t_start, max(t) AS t_end, count(*) AS events, max(temp_c) AS temp_max,
                     count(*) FILTER (WHERE level = 'WARN') AS warn, count(*) FILTER (WHERE level = 'ERROR') AS error,
                     coalesce(max(step_time_ms) FILTER (WHERE is_sum), max(step_time_ms)) AS logged,
                     {phase('data_load_ms')}, {phase('comm_ms')}, {phase('wait_ms')}, bool_or(is_sum) AS complete
              FROM e GROUP BY rank, step),
        s AS (SELECT *, complete OR NOT bool_or(complete) OVER () AS whole,
                     CASE WHEN step - lag(step) OVER w = 1
                          THEN (epoch_us(t_end) - epoch_us(lag(t_end) OVER w)) / 1000.0 END AS gap_ms
              FROM g WHERE rank IS NOT NULL AND step IS NOT NULL WINDOW w AS (PARTITION BY rank ORDER BY step)),
        st AS (SELECT rank, data_load_ms, comm_ms, wait_ms, coalesce(logged, CASE WHEN whole THEN gap_ms END) AS step_ms
               FROM s),
        c AS (SELECT *, step_ms - coalesce(data_load_ms, 0) - coalesce(comm_ms, 0) AS rest FROM st),
        per_step AS (SELECT rank, median(step_ms) AS step_ms, median(data_load_ms) AS data_ms,
                            median(CASE WHEN rest < 0 THEN 0 ELSE rest END) AS compute_ms, median(comm_ms) AS comm_ms,
                            median(comm_ms / step_ms) AS comm_share, median(wait_ms) AS wait_ms FROM c GROUP BY rank),
        per_rank AS (SELECT rank, min(t_start) AS first_ts, max(t_end) AS last_ts, max(step) AS last_step,
                            sum(events) AS events, max(temp_max) AS temp_max, sum(warn) AS warn, sum(error) AS error
                     FROM g GROUP BY rank),
        util AS (SELECT rank, median(gpu_util) AS gpu_util FROM ev WHERE gpu_util IS NOT NULL GROUP BY rank),
        host AS (SELECT rank, any_value(host) AS host FROM ev GROUP BY rank)
        SELECT * FROM per_rank LEFT JOIN per_step USING (rank) LEFT JOIN util USING (rank) LEFT JOIN host USING (rank)
        ORDER BY rank
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
        "ranks (same answer)": lambda: con.sql(ranks_same_sql).to_arrow_table(),
        "timeline": lambda: con.sql(timeline_sql).to_arrow_table(),
    }


def forensics_queries(store: Path, rank: int) -> dict[str, Callable[[], object]]:
    run = open_store(store)
    return {
        "events --rank N": lambda: filter_events(run, ranks=[rank]).collect(),
        "last-10s": lambda: tl.last_window(run),
        "last-10s --rank N": lambda: tl.last_window(run, ranks=[rank]),
        "ranks": lambda: tl.rank_summary(run),
        "ranks (same answer)": lambda: tl.rank_summary(run),
        "timeline": lambda: tl.build_timeline(run),
    }


# The columns DuckDB's same-answer query shares with `forensics ranks`, rounded as forensics does.
SAME_COLUMNS = ["rank", "first_ts", "last_ts", "last_step", "events", "step_ms", "data_ms", "compute_ms", "comm_ms",
                "comm_share", "wait_ms", "gpu_util", "temp_max", "warn", "error"]


def same_answer(store: Path) -> bool:
    """Whether DuckDB's `ranks (same answer)` gives forensics' numbers (clock offsets and the
    order of going silent are left out: they are computed from these on 64 rows)."""
    mine = tl.rank_summary(open_store(store)).select(SAME_COLUMNS)
    duck = pl.from_arrow(duck_queries(store, 0)["ranks (same answer)"]()).select(SAME_COLUMNS)
    duck = duck.with_columns(
        pl.col("step_ms", "data_ms", "compute_ms", "comm_ms", "wait_ms", "gpu_util").round(3),
        pl.col("comm_share").round(4),
    ).cast({c: t for c, t in mine.schema.items()})   # type: ignore[arg-type]
    return mine.equals(duck)


def same_snapshot(store: Path, rank: int | None = None) -> bool:
    """Whether DuckDB, given forensics' stop, gives `last-10s`'s per-rank numbers: events in the
    10 s window, time of the last event by the stop, last step by the stop (the stop itself is
    forensics' judgement: the first fatal ERROR)."""
    snap = tl.last_window(open_store(store), ranks=[rank] if rank is not None else None)
    stop = snap.stop.replace(tzinfo=None).isoformat()
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute(f"CREATE VIEW ev AS SELECT * FROM read_parquet('{store}/events/*.parquet')")
    only = f"AND rank = {rank}" if rank is not None else "AND rank IS NOT NULL"
    duck = pl.from_arrow(con.sql(f"""
        SELECT rank, count(*) FILTER (WHERE timestamp >= TIMESTAMPTZ '{stop}+00' - INTERVAL 10 SECOND) AS in_window,
               max(timestamp) AS last_ts, max(step) AS step
        FROM ev WHERE timestamp <= TIMESTAMPTZ '{stop}+00' {only} GROUP BY rank ORDER BY rank""").to_arrow_table())
    mine = snap.ranks.filter(pl.col("rank").is_not_null()).select("rank", "in_window", "last_ts", "step")
    duck = duck.cast({c: t for c, t in mine.schema.items()})  # type: ignore[arg-type]
    return mine.equals(duck)


CLI = {
    "events --rank N": ["events", "{store}", "--rank", "{rank}", "--format", "jsonl"],
    "last-10s": ["last-10s", "{store}", "--format", "json"],
    "last-10s --rank N": ["last-10s", "{store}", "--rank", "{rank}", "--format", "json"],
    "ranks": ["ranks", "{store}", "--format", "json"],
    "ranks (same answer)": ["ranks", "{store}", "--format", "json"],
    "timeline": ["timeline", "{store}", "--format", "json"],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", help="an existing store (default: generate bench/out/queries-*/store)")
    ap.add_argument("--gb", type=float, default=2.0, help="size of the generated logs")
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--rank", type=int, default=12, help="the rank for the per-rank queries")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--cli", action="store_true", help="also time the CLI commands (new process each run)")
    ap.add_argument("--baseline", help="with --cli: also an older tree (a directory holding its forensics/ package)")
    ap.add_argument("--only", nargs="*", help="only these queries (names as printed)")
    a = ap.parse_args()
    store = (Path(a.store) if a.store else bench_store(a.gb, a.ranks)).resolve()
    run = open_store(store)
    parts = sorted((store / "events").glob("*.parquet"))
    size = sum(p.stat().st_size for p in parts)
    n = run.events().select(pl.len()).collect().item()
    print(f"store {store}: {n:,} events, {len(run.manifest['totals'].get('ranks', []))} ranks, "
          f"{len(parts)} parts, {size / 1e6:.0f} MB Parquet "
          f"(from {sum(s['size'] for s in run.sources) / 1e9:.2f} GB of logs); {os.cpu_count()} cores; "
          f"load average {os.getloadavg()[0]:.1f}")
    fq, dq = forensics_queries(store, a.rank), duck_queries(store, a.rank)
    names = [q for q in fq if not a.only or q in a.only]
    if "ranks (same answer)" in names:
        print(f"ranks (same answer): DuckDB's numbers equal forensics': {'yes' if same_answer(store) else 'NO'}")
    if "last-10s" in names or "last-10s --rank N" in names:
        print(f"last-10s: DuckDB's per-rank window counts, last times and steps (given forensics' stop) equal "
              f"forensics': {'yes' if same_snapshot(store) and same_snapshot(store, a.rank) else 'NO'}")
    head = (f"{'query':<20} {'forensics s':>11} {'CPU s':>6} {'duckdb s':>9} {'CPU s':>6} {'ratio':>6}"
            + (f" | {'CLI s':>6} {'CPU s':>6} {'RSS MB':>7}" if a.cli else "")
            + (f" | {'base s':>6} {'CPU s':>6} {'RSS MB':>7}" if a.cli and a.baseline else ""))
    print(head)
    print("-" * len(head))
    for name in names:
        f = M.timed(fq[name], a.reps)
        d = M.timed(dq[name], a.reps)
        line = f"{name:<20} {f.wall:>11.3f} {f.cpu:>6.2f} {d.wall:>9.3f} {d.cpu:>6.2f} {f.wall / d.wall:>6.2f}"
        if a.cli:
            args = [x.format(store=store, rank=a.rank) for x in CLI[name]]
            trees = [None] + ([str(Path(a.baseline).resolve())] if a.baseline else [])
            runs: dict[str | None, list[M.Run]] = {t: [] for t in trees}
            for _ in range(max(1, a.reps // 2 + 1)):
                for t in trees:                  # interleaved: the same load for both
                    runs[t].append(M.cli(args, t)[0])
            for t in trees:
                c = M.Figures(runs[t])
                line += f" | {c.wall:>6.2f} {c.cpu:>6.2f} {c.rss_mb:>7.0f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
