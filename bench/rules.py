"""What the rules phase of a diagnosis costs on a store: loading the rule files, then evaluating them.

    python bench/rules.py STORE [STORE...] [--reps 3] [--baseline OLD_TREE]

Each run is a new process (this tree's `forensics`, or with --baseline a directory holding an
older `forensics/` package, e.g. `git archive OLD | tar -x -C /tmp/old`; runs interleaved so
that both see the same load). Per store and tree: median wall and CPU seconds of
`forensics.rules.evaluate(run.events(), load_rules())` and its peak RSS (the high-water mark is
reset just before it, so imports and the store's opening do not count), the time to load the
rule files, how many queries were collected and how many scans of the store they ran (a plan's
scan shared by several collected-together queries counts once), and whether both trees found
the same (as JSON). Prints figures only; asserts nothing. The machine may be shared: read CPU
seconds and medians.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Runs in the child: a first evaluation counts collects (every LazyFrame.collect / pl.collect_all
# call) and the Parquet scans in their plans; a second, uninstrumented, is timed.
_CHILD = r"""
import dataclasses, json, sys, time
tree, store = sys.argv[1], sys.argv[2]
sys.path.insert(0, tree)
sys.path.insert(0, sys.argv[3])
import polars as pl
import _measure as M
from forensics.store import open_store
from forensics.rules import evaluate, load_rules

counts = {"collects": 0, "scans": 0}
_collect, _collect_all = pl.LazyFrame.collect, pl.collect_all

def _scans(text):
    return text.count("Parquet SCAN")

def collect(self, *a, **k):
    counts["collects"] += 1
    counts["scans"] += _scans(self.explain())
    return _collect(self, *a, **k)

def collect_all(lfs, *a, **k):
    lfs = list(lfs)
    counts["collects"] += 1
    counts["scans"] += _scans(pl.explain_all(lfs)) if lfs else 0
    return _collect_all(lfs, *a, **k)

t = time.perf_counter()
rules = load_rules(None)
load_s = time.perf_counter() - t
events = open_store(store).events()
pl.LazyFrame.collect, pl.collect_all = collect, collect_all      # a first run counts (explain() costs)
evaluate(events, rules)
pl.LazyFrame.collect, pl.collect_all = _collect, _collect_all    # the second is timed
pk = M.PhasePeak()
pk.reset()
t, c = time.perf_counter(), time.process_time()
found = evaluate(events, rules)
wall, cpu = time.perf_counter() - t, time.process_time() - c
print(json.dumps({"load_s": load_s, "wall": wall, "cpu": cpu, "peak_mb": pk.peak(), **counts,
                  "findings": json.dumps([dataclasses.asdict(f) for f in found], default=str, sort_keys=True)}))
"""


def run(tree: Path, store: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", _CHILD, str(tree), str(store), str(REPO / "bench")],
                         check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("stores", nargs="+")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--baseline", help="a directory holding an older forensics/ package")
    a = ap.parse_args()
    trees = [("this tree", REPO)] + ([("baseline", Path(a.baseline).resolve())] if a.baseline else [])
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; medians of {a.reps} runs, each a new process")
    print(f"  {'store':<28} {'tree':<10} {'wall s':>7} {'CPU s':>7} {'peak MB':>8} {'load ms':>8} {'collects':>9} {'scans':>6}")
    for store in map(Path, a.stores):
        got: dict[str, list[dict]] = {name: [] for name, _ in trees}
        for _ in range(a.reps):
            for name, tree in trees:          # interleaved: both trees see the same load
                got[name].append(run(tree, store))
        for name, _ in trees:
            rs = got[name]

            def med(k: str) -> float:
                return statistics.median(r[k] for r in rs)

            peak = max((r["peak_mb"] or 0) for r in rs)
            print(f"  {store.name:<28} {name:<10} {med('wall'):7.2f} {med('cpu'):7.2f} {peak:8.0f} "
                  f"{1000 * med('load_s'):8.1f} {rs[0]['collects']:>9} {rs[0]['scans']:>6}")
        if a.baseline:
            same = got["this tree"][0]["findings"] == got["baseline"][0]["findings"]
            print(f"  {'':<28} same findings: {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
