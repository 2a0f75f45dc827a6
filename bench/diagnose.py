"""How long a diagnosis takes on a GB-scale store, and how much memory, phase by phase.

    python bench/diagnose.py STORE                       # an existing store
    python bench/diagnose.py --gb 2                      # generate (bench/_gen.py) + ingest into bench/out first
    python bench/diagnose.py STORE --baseline OLD_TREE   # also an older checkout, under the same load

1. The whole `forensics diagnose STORE --format json`, each run a new process (imports
   included): median wall and CPU seconds (user + sys, all threads) over --reps runs, and the
   peak RSS. With --baseline (a directory holding an older `forensics/` package, e.g. made with
   `git worktree add /tmp/old HEAD~3`), the same for that tree, runs interleaved so that both
   see the same load, and whether the two reports are identical.
2. In this process, phase by phase: the step table (shared by most passes), each pass, the rules,
   the costs of the findings (cost.attach_costs: the what-if replays), the per-rank table: wall, CPU, the phase's own peak RSS (high-water mark reset before it on
   Linux) and the RSS it leaves. Plus how many of the store's columns the step table's scan reads
   (projection pushdown, from explain()).

Prints figures only; asserts nothing. The machine may be shared and has few cores: read medians
and CPU seconds. Run it twice and read the second run when the store was just written (the page
cache is warm then, as it is for a user re-running).
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import _measure as M  # noqa: E402

from forensics import timeline  # noqa: E402
from forensics.passes import PASSES, _per_rank, cost, pass_name, rootcause  # noqa: E402
from forensics.passes.context import STEP_COLUMNS, Context, _wait_estimate  # noqa: E402
from forensics.store import open_store  # noqa: E402


def _store_bytes(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*.parquet"))


def ensure_store(gb: float) -> Path:
    logs = REPO / "bench" / "out" / f"gen_{gb:g}gb"
    store = REPO / "bench" / "out" / f"gen_{gb:g}gb.forensics"
    if not (store / "manifest.json").is_file():
        if not logs.is_dir():
            subprocess.run([sys.executable, str(REPO / "bench" / "_gen.py"), str(logs), "--gb", str(gb)], check=True)
        subprocess.run([sys.executable, "-m", "forensics", "ingest", str(logs), "-o", str(store)], check=True)
    return store


def _mb(x: float | None) -> str:
    return f"{x:7.0f}" if x is not None else "      ?"


def end_to_end(store: Path, reps: int, baseline: str | None) -> None:
    trees = [("this tree", None)] + ([("baseline", baseline)] if baseline else [])
    args = ["diagnose", str(store), "--format", "json"]
    runs: dict[str, list[M.Run]] = {name: [] for name, _ in trees}
    outs: dict[str, bytes] = {}
    for _ in range(reps):
        for name, path in trees:   # interleaved: both trees see the same load
            r, out = M.cli(args, path)
            runs[name].append(r)
            outs[name] = out
    print(f"forensics diagnose --format json, {reps} runs each (new process, imports included):")
    print(f"  {'tree':<10} {'wall s':>8} {'CPU s':>8} {'peak RSS MB':>12}")
    for name, _ in trees:
        f = M.Figures(runs[name])
        print(f"  {name:<10} {f.wall:8.2f} {f.cpu:8.2f} {_mb(f.rss_mb):>12}")
    if baseline:
        print(f"  reports identical: {'yes' if outs['this tree'] == outs['baseline'] else 'NO'}")


def phases(store: Path) -> None:
    run = open_store(store)
    ctx = Context.from_run(run)
    pk = M.PhasePeak()
    q = timeline.step_rows(ctx.events, evidence=True).select(STEP_COLUMNS).with_columns(_wait_estimate())
    proj = re.findall(r"PROJECT (\d+/\d+) COLUMNS", q.explain())
    print(f"step table scan reads {', '.join(proj)} columns of the store; "
          f"{len(timeline.rank_slices(run))} rank slices of <= ~{timeline.SLICE_EVENTS:,} events")
    # sys s and page faults: memory first touched (zeroed by the kernel) costs system time
    print(f"  {'phase':<18} {'wall s':>7} {'CPU s':>7} {'sys s':>6} {'faults':>8} {'peak MB':>8} {'after MB':>9}  result")

    peaks: list[float] = []
    spent: dict[str, tuple[float, float]] = {}

    def phase(name: str, fn):  # type: ignore[no-untyped-def]
        pk.reset()
        t, c, ru = time.perf_counter(), time.process_time(), resource.getrusage(resource.RUSAGE_SELF)
        res = fn()
        peaks.append(pk.peak() or 0.0)
        spent[name] = (time.perf_counter() - t, time.process_time() - c)
        end = resource.getrusage(resource.RUSAGE_SELF)
        print(f"  {name:<18} {spent[name][0]:7.2f} {spent[name][1]:7.2f} {end.ru_stime - ru.ru_stime:6.2f} "
              f"{end.ru_minflt - ru.ru_minflt:8,} {_mb(pk.peak()):>8} "
              f"{_mb(pk.now()):>9}  {describe(res)}", flush=True)
        return res

    def describe(res: object) -> str:
        if hasattr(res, "height"):
            return f"{res.height:,} rows"             # type: ignore[attr-defined]
        if isinstance(res, list):
            return f"{len(res)} finding(s)"
        return ""

    phase("step table", lambda: ctx.steps)
    found = []
    for p in PASSES:
        found += phase(pass_name(p), lambda p=p: p(ctx))
    try:
        from forensics.rules import evaluate, load_rules

        rules = load_rules(None)
        found += phase("rules", lambda: evaluate(ctx.events, rules))
    except ImportError:
        pass
    phase("cost.attach_costs", lambda: cost.attach_costs(found, ctx))
    phase("per-rank table", lambda: _per_rank(ctx)[0])
    # the step table, the passes that read it and the costs, without the rules and the passes
    # that read the events' failure records
    own = [v for k, v in spent.items() if k not in ("rules", "failures", "stuck_collective", "trace_straggler")]
    print(f"  {'all phases':<18} {sum(w for w, _ in spent.values()):7.2f} {sum(c for _, c in spent.values()):7.2f}")
    print(f"  {'w/o rules+failures':<18} {sum(w for w, _ in own):7.2f} {sum(c for _, c in own):7.2f}")
    rc, _ = rootcause.assign(found, ctx.ranks)
    # (resetting the high-water mark resets the process' ru_maxrss too: the phases tell the peak)
    print(f"largest phase peak RSS {max(peaks):.0f} MB" if pk.ok and peaks
          else f"process peak RSS {M.process_peak_mb():.0f} MB")
    print("verdict:", rc.summary if rc else "no root cause")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store", nargs="?")
    ap.add_argument("--gb", type=float, default=2.0)
    ap.add_argument("--reps", type=int, default=3, help="end-to-end runs per tree (default 3)")
    ap.add_argument("--baseline", help="a directory holding an older forensics/ package to compare with")
    ap.add_argument("--no-phases", action="store_true", help="only the end-to-end figures")
    a = ap.parse_args()
    store = (Path(a.store) if a.store else ensure_store(a.gb)).resolve()
    t = open_store(store).totals
    print(f"store {store}: {t.get('events', 0):,} events, {len(t.get('ranks') or [])} ranks, "
          f"{_store_bytes(store) / 1e9:.2f} GB Parquet; {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f}")
    end_to_end(store, a.reps, str(Path(a.baseline).resolve()) if a.baseline else None)
    if not a.no_phases:
        phases(store)


if __name__ == "__main__":
    main()
