"""How long a diagnosis takes on a GB-scale store, pass by pass.

    python bench/diagnose.py STORE                 # an existing store
    python bench/diagnose.py --gb 2                # generate (bench/_gen.py) + ingest into bench/out first

Prints the store's size, then seconds for the step table (shared by most passes), each pass,
the rules, root-cause selection, and the whole `diagnose` in a fresh process state, plus the
peak RSS and the verdict. Prints figures only; asserts nothing. The machine is shared: run it
twice and read the second run (the page cache is warm then, as it is for a user re-running).
"""
from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from forensics.passes import PASSES, diagnose, pass_name, rootcause  # noqa: E402
from forensics.passes.context import Context  # noqa: E402
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store", nargs="?")
    ap.add_argument("--gb", type=float, default=2.0)
    a = ap.parse_args()
    store = Path(a.store) if a.store else ensure_store(a.gb)
    run = open_store(store)
    t = run.totals
    print(f"store {store}: {t.get('events', 0):,} events, {len(t.get('ranks') or [])} ranks, "
          f"{_store_bytes(store) / 1e9:.2f} GB Parquet")

    ctx = Context.from_run(run)
    t0 = time.perf_counter()
    steps = ctx.steps
    print(f"  step table         {time.perf_counter() - t0:7.2f} s  ({steps.height:,} rank-steps)")
    found = []
    for p in PASSES:
        t0 = time.perf_counter()
        fs = p(ctx)
        found += fs
        print(f"  {pass_name(p):<18} {time.perf_counter() - t0:7.2f} s  {len(fs)} finding(s)")
    try:
        from forensics.rules import evaluate, load_rules

        t0 = time.perf_counter()
        rf = evaluate(ctx.events, load_rules(None))
        found += rf
        print(f"  {'rules':<18} {time.perf_counter() - t0:7.2f} s  {len(rf)} finding(s)")
    except ImportError:
        pass
    t0 = time.perf_counter()
    rc, _ = rootcause.assign(found, ctx.ranks)
    print(f"  {'root cause':<18} {time.perf_counter() - t0:7.2f} s")

    t0 = time.perf_counter()
    report = diagnose(open_store(store))
    total = time.perf_counter() - t0
    rc = report.root_cause
    print(f"diagnose (all of it, fresh context): {total:.2f} s; peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    print("verdict:", rc.summary if rc else "no root cause")
    for f in report.findings[:12]:
        print(f"  {f.severity:<5} {f.kind:<18} ranks={f.ranks[:8]}{'…' if len(f.ranks) > 8 else ''} {f.title[:110]}")


if __name__ == "__main__":
    main()
