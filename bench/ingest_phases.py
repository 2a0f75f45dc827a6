"""Where an ingest's wall time can go (issue 29, item 2): the process CPU spent in each phase of
one `forensics.ingest` (imports, per-file planning, the per-file decisions on the main thread,
the units, the commit), and which phases run on one thread. From these, the least wall time the
phases allow on --cores cores (a serial phase's CPU, plus a parallel phase's CPU / cores): what
overlapping phases could win at most, measured under any load (CPU seconds, not wall).

    python bench/ingest_phases.py LOGS [LOGS...] --reps 3      # e.g. /tmp/fr-bench/r4096x120/logs

Each repetition is a fresh process (imports included) ingesting into a fresh store; medians of
--reps. Wall time is printed too, with the load: on a shared machine only CPU is comparable.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# One ingest in this process, its phases marked by wrapping the ingest package's own functions
# (process CPU, all threads, at each mark). Printed as JSON.
CHILD = r"""
import json, sys, time, threading
c_start = time.process_time()
w_start = time.perf_counter()
import forensics.ingest as fi
marks = {"imports": (time.perf_counter() - w_start, time.process_time())}
threads = {}

def wrap(name):
    f = getattr(fi, name)
    def w(*a, **k):
        marks.setdefault(name + " start", (time.perf_counter() - w_start, time.process_time()))
        c = time.thread_time()
        try:
            return f(*a, **k)
        finally:
            marks[name + " end"] = (time.perf_counter() - w_start, time.process_time())
            t = threading.current_thread().name
            threads[t] = threads.get(t, 0.0) + time.thread_time() - c
    setattr(fi, name, w)

for n in ("_infos", "_dispatch", "run_unit", "_assemble_summaries"):
    wrap(n)
fi.ingest(sys.argv[1:-1], sys.argv[-1])
marks["end"] = (time.perf_counter() - w_start, time.process_time())
print(json.dumps({"marks": marks, "threads": threads}))
"""


def one(logs: list[str], store: Path) -> dict:
    shutil.rmtree(store, ignore_errors=True)
    r = subprocess.run([sys.executable, "-c", CHILD, *logs, str(store)], cwd=ROOT, capture_output=True, text=True,
                       check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    d = json.loads(r.stdout.strip().splitlines()[-1])
    m = d["marks"]
    cpu = {k: v[1] for k, v in m.items()}
    phases = {
        "imports (1 thread)": cpu["imports"],
        "planning per file (pool)": cpu["_infos end"] - cpu["_infos start"],
        "per-file decisions, batching (1 thread)": cpu["_dispatch start"] - cpu["_infos end"],
        "units (pool)": cpu["_dispatch end"] - cpu["_dispatch start"],
        "commit, summaries, manifest (1 thread)": cpu["end"] - cpu["_dispatch end"],
    }
    before = cpu["_infos start"] - cpu["imports"]   # lock, listing (1 thread)
    phases["listing, lock (1 thread)"] = before
    return {"phases": phases, "cpu": cpu["end"], "wall": m["end"][0], "threads": d["threads"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="phases-") as d:
        runs = [one(a.logs, Path(d) / "store") for _ in range(a.reps)]
    names = list(runs[0]["phases"])
    med = {n: statistics.median(r["phases"][n] for r in runs) for n in names}
    print(f"{' '.join(a.logs)}: medians of {a.reps}, CPU s (all threads); load {os.getloadavg()[0]:.1f}, "
          f"{os.cpu_count()} cores")
    for n in names:
        print(f"  {n:42s} {med[n]:6.2f}")
    total = statistics.median(r["cpu"] for r in runs)
    serial = sum(v for n, v in med.items() if "1 thread" in n)
    parallel = sum(v for n, v in med.items() if "pool" in n)
    print(f"  {'whole process':42s} {total:6.2f}   (wall {statistics.median(r['wall'] for r in runs):.2f} s at this load)")
    print(f"  least wall on {a.cores} cores: serial {serial:.2f} + parallel {parallel:.2f} / {a.cores} = "
          f"{serial + parallel / a.cores:.2f} s")
    print("  (planning runs on the pool already: handing its batches to the units as it goes can win at most the "
          "serial decisions, and whatever the pool leaves idle)")


if __name__ == "__main__":
    main()
