"""`forensics compare` of two ~1 GB runs, beside a plain DuckDB and a plain polars query that
compute the run-level deltas on the same stores.

    python bench/compare.py                       # 64 ranks, ~1 GB per run, 3 repetitions
    python bench/compare.py --gb 0.25 --reps 1

Two runs of the same job are generated with bench/_gen.py (seeds 0 and 1; the baseline's
data-starved rank is 12, the candidate's 20) and ingested once each into a store. Ingest is NOT
timed here (bench/ingest.py measures it): every figure below starts from the two stores.

Timed, each in its own process (bench/_measure.py: wall, CPU seconds, peak RSS of the process):
- `forensics compare A B --format json --no-findings`: the run-level and per-rank deltas after
  warmup, loss at matched steps (what the plain queries compute, and more);
- `forensics compare A B --format json`: the same plus both diagnoses (new/resolved findings);
- DuckDB and polars: one query per store for the run-level figures after warmup (median and p95
  of the per-step median step time, throughput, median data load / compute / wait, comm share,
  GPU util / temperature / SM clock), then their deltas. Not the per-rank table, not the loss at
  matched steps, not the findings. The median step time of each is checked equal to forensics'.
The machine is shared (2 cores): read the medians and ratios, not single runs.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _measure  # noqa: E402

DUCKDB = r"""
import sys, json, duckdb
def figures(store):
    ev = f"read_parquet('{store}/events/*.parquet')"
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")   # it draws on stdout, where the answer goes
    first = con.execute(f"SELECT coalesce(min(step) FILTER (WHERE stage <> 'warmup'), min(step)) FROM {ev} "
                        "WHERE event = 'TRAIN_STEP'").fetchone()[0]   # a run all in warmup: all of it
    q = f'''
    WITH ev AS (SELECT * FROM {ev} WHERE step >= {first}),
    st AS (SELECT rank, step,
                  max(step_time_ms) FILTER (WHERE event = 'TRAIN_STEP') AS step_ms,
                  sum(data_load_ms) FILTER (WHERE event <> 'TRAIN_STEP') AS data_ms,
                  sum(comm_ms) FILTER (WHERE event <> 'TRAIN_STEP') AS comm_ms,
                  sum(wait_ms) FILTER (WHERE event <> 'TRAIN_STEP') AS wait_ms,
                  max(samples_per_s) FILTER (WHERE event = 'TRAIN_STEP') AS sps
           FROM ev WHERE rank IS NOT NULL GROUP BY rank, step),
    per_step AS (SELECT step, median(step_ms) AS step_ms, avg(sps) * count(sps) AS thr FROM st GROUP BY step)
    SELECT (SELECT median(step_ms) FROM per_step), (SELECT quantile_cont(step_ms, 0.95) FROM per_step),
           (SELECT median(thr) FROM per_step), (SELECT median(data_ms) FROM st),
           (SELECT median(greatest(step_ms - coalesce(data_ms, 0) - coalesce(comm_ms, 0), 0)) FROM st),
           (SELECT sum(comm_ms) FILTER (WHERE step_ms IS NOT NULL) / sum(step_ms) FILTER (WHERE comm_ms IS NOT NULL) FROM st),
           (SELECT median(wait_ms) FROM st)'''
    a = con.execute(q).fetchone()
    t0 = con.execute(f"SELECT min(timestamp) FROM {ev} WHERE step = {first}").fetchone()[0]
    g = con.execute(f"SELECT median(gpu_util), median(temp_c), max(temp_c), median(sm_clock_mhz) FROM {ev} "
                    f"WHERE timestamp >= ? AND (gpu_util IS NOT NULL OR temp_c IS NOT NULL)", [t0]).fetchone()
    return dict(zip(["step_time_median_ms", "step_time_p95_ms", "throughput", "data_load_median_ms", "compute_median_ms",
                     "comm_share", "wait_median_ms", "gpu_util_median", "temp_c_median", "temp_c_max", "sm_clock_mhz_median"],
                    [*a, *g]))
b, c = figures(sys.argv[1]), figures(sys.argv[2])
print(json.dumps({k: {"baseline": b[k], "candidate": c[k], "delta": None if b[k] is None or c[k] is None else c[k] - b[k]}
                  for k in b}, default=str))
"""

POLARS = r"""
import sys, json, polars as pl
def figures(store):
    ev = pl.scan_parquet(f"{store}/events/*.parquet")
    ts = ev.filter(pl.col("event") == "TRAIN_STEP")
    first = ts.select(pl.coalesce(pl.col("step").filter(pl.col("stage") != "warmup").min(), pl.col("step").min())).collect().item()
    is_sum = pl.col("event") == "TRAIN_STEP"
    st = (ev.filter((pl.col("step") >= first) & pl.col("rank").is_not_null())
          .group_by("rank", "step")
          .agg(pl.col("step_time_ms").filter(is_sum).max().alias("step_ms"),
               pl.col("data_load_ms").filter(~is_sum).sum().alias("data_ms"),
               pl.col("comm_ms").filter(~is_sum).sum().alias("comm_ms"),
               pl.col("wait_ms").filter(~is_sum).sum().alias("wait_ms"),
               pl.col("samples_per_s").filter(is_sum).max().alias("sps"))
          .collect())
    per_step = st.group_by("step").agg(pl.col("step_ms").median(), (pl.col("sps").mean() * pl.col("sps").count()).alias("thr"))
    t0 = ev.filter(pl.col("step") == first).select(pl.col("timestamp").min()).collect().item()
    g = (ev.filter((pl.col("timestamp") >= t0) & (pl.col("gpu_util").is_not_null() | pl.col("temp_c").is_not_null()))
         .select(pl.col("gpu_util").median(), pl.col("temp_c").median().alias("t"), pl.col("temp_c").max().alias("tmax"),
                 pl.col("sm_clock_mhz").median()).collect().row(0))
    both = st.filter(pl.col("step_ms").is_not_null() & pl.col("comm_ms").is_not_null())
    vals = [per_step["step_ms"].median(), per_step["step_ms"].quantile(0.95, "linear"), per_step["thr"].median(),
            st["data_ms"].median(),
            (st["step_ms"] - st["data_ms"].fill_null(0) - st["comm_ms"].fill_null(0)).clip(lower_bound=0).median(),
            both["comm_ms"].sum() / both["step_ms"].sum(), st["wait_ms"].median(), *g]
    return dict(zip(["step_time_median_ms", "step_time_p95_ms", "throughput", "data_load_median_ms", "compute_median_ms",
                     "comm_share", "wait_median_ms", "gpu_util_median", "temp_c_median", "temp_c_max", "sm_clock_mhz_median"], vals))
b, c = figures(sys.argv[1]), figures(sys.argv[2])
print(json.dumps({k: {"baseline": b[k], "candidate": c[k], "delta": None if b[k] is None or c[k] is None else c[k] - b[k]}
                  for k in b}, default=str))
"""


def _store(data: Path, name: str, seed: int, straggler: int, ranks: int, gb: float) -> tuple[Path, int]:
    import _gen  # noqa: PLC0415

    logs, store = data / f"cmp-{name}-{ranks}r-{gb}gb", data / f"cmp-{name}-{ranks}r-{gb}gb.forensics"
    if not logs.is_dir():
        part = logs.with_name(logs.name + ".part")   # a killed generation is never taken for a run
        shutil.rmtree(part, ignore_errors=True)
        _gen.generate(part, ranks=ranks, hosts=max(1, ranks // 8), gb=gb, seed=seed, straggler=straggler)
        part.rename(logs)
    size = sum(f.stat().st_size for f in logs.rglob("*.jsonl"))
    if not (store / "manifest.json").is_file():
        t = time.perf_counter()
        import forensics  # noqa: PLC0415

        forensics.ingest([str(logs)], store)
        print(f"  ingested {name}: {size / 1e9:.2f} GB in {time.perf_counter() - t:.1f} s (not part of the figures)", flush=True)
    return store, size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--gb", type=float, default=1.0, help="per run")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--data", default=str(HERE / "out"))
    args = ap.parse_args()
    data = Path(args.data)
    data.mkdir(parents=True, exist_ok=True)
    a, sa = _store(data, "base", 0, 12, args.ranks, args.gb)
    b, sb = _store(data, "cand", 1, 20, args.ranks, args.gb)
    print(f"stores: {a} ({sa / 1e9:.2f} GB of logs), {b} ({sb / 1e9:.2f} GB); cores: {os.cpu_count()}, "
          f"load average {os.getloadavg()[0]:.1f}")
    env_py = sys.executable
    tools = {
        "forensics compare --no-findings": [env_py, "-m", "forensics", "compare", str(a), str(b), "--format", "json", "--no-findings"],
        "forensics compare (with both diagnoses)": [env_py, "-m", "forensics", "compare", str(a), str(b), "--format", "json"],
        "DuckDB query": [env_py, "-c", DUCKDB, str(a), str(b)],
        "polars query": [env_py, "-c", POLARS, str(a), str(b)],
    }
    runs: dict[str, list[dict]] = {t: [] for t in tools}
    for rep in range(args.reps):
        for name, cmd in tools.items():   # interleaved: machine noise hits every tool alike
            m, out = _measure.command(cmd)
            r = {"wall": m.wall, "cpu": m.cpu, "rss_mib": m.rss_mb, "out": out.decode()}
            runs[name].append(r)
            print(f"  rep {rep + 1} {name:40s} {r['wall']:7.2f} s  cpu {r['cpu']:7.1f} s  peak {r['rss_mib']:6.0f} MiB", flush=True)
    ours = json.loads(runs["forensics compare --no-findings"][-1]["out"])
    med_ours = {m["name"]: m for m in ours["metrics"]}
    for name in ("DuckDB query", "polars query"):
        theirs = json.loads(runs[name][-1]["out"])
        for k in ("step_time_median_ms", "data_load_median_ms"):
            x, y = med_ours[k]["candidate"], theirs[k]["candidate"]
            same = x is not None and y is not None and abs(float(x) - float(y)) <= 1e-3 * max(1.0, abs(float(y)))
            print(f"  check {name}: {k} candidate {y} vs forensics {x}: {'equal' if same else 'DIFFERENT'}")
    print(f"\nmedians of {args.reps} runs (two stores of {sa / 1e9:.2f} + {sb / 1e9:.2f} GB of logs; ingest excluded):")
    print(f"{'':42s} {'wall s':>8s} {'cpu s':>8s} {'peak MiB':>9s}")
    med = {}
    for name in tools:
        m = {k: statistics.median(x[k] for x in runs[name]) for k in ("wall", "cpu", "rss_mib")}
        med[name] = m
        print(f"{name:42s} {m['wall']:8.2f} {m['cpu']:8.1f} {m['rss_mib']:9.0f}")
    print(f"verdict: {ours['verdict']}")
    print(json.dumps({"bytes": [sa, sb], "medians": med}))


if __name__ == "__main__":
    main()
